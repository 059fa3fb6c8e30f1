"""Megatron-LM and Megatron-DeepSpeed logs.

Lines read (real examples in fixtures/megatron/):
- `` iteration  2/ 1000 | consumed samples: 2048 | elapsed time per iteration (ms): 129028.8 | ...``
  (old versions lack consumed samples; ``lm loss`` or ``lm-loss``; newer ones add
  ``throughput per GPU (TFLOP/s/GPU)``; BigScience's fork (BLOOM) prints ``elapsed time per iteration
  (s)``, ``samples per second`` and ``TFLOPs``; a timestamp may precede it);
- ``time (ms) | forward-compute: 32054.16 | ...`` (timers of the step logged just before);
- ``[Rank 0] (after 1 iterations) memory (MB) | allocated: ... | max allocated: ...`` and the old
  ``after 1 iterations memory (MB) | ...``;
- the arguments dump between ``---- arguments ----`` and ``---- end of arguments ----``;
- ``using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel
  size: 16`` (old: ``using world size: 64 and model-parallel size: 4``), ``using torch.float16 for
  parameters``, ``padded vocab (size: 50257) with 431 dummy tokens (new size: 50688)``, ``setting number
  of micro-batches to constant 256``, ``Effective Tera Flops per GPU: 41.94 and total parameters 52.005 B``.

Not training steps: ``Evaluating iter N/M`` (evaluation), ``> working on iteration: N`` (zero-shot tasks),
``validation loss at iteration N``, checkpoint lines. Several launches appended to one file (a requeued
job, a resume from a checkpoint): an arguments dump after training steps starts a new launch, whose rows
replace those of the steps an earlier launch logged too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyparsing as pp
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.grammar import LAYOUT_MAX_LENGTH, dotted, literal, pipe_fields, pipe_layout, pipe_number

NAME = "megatron"

# One token, so lines are scanned with its compiled pattern (``iteration_header.re``): several
# ranks' records can be glued in one line, and pyparsing's scan_string is too slow for big logs.
iteration_header = pp.Regex(r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<train_iters>\d+)").set_name(
    "iteration_header"
)
# ``iteration_header`` for the hot path, same matches: a pattern that starts with ``\b`` is tried at
# every position of a line, one that starts with a literal word is searched for the word first (about
# three times faster on iteration lines); the lookbehind is the same word boundary before "iteration".
# tests/parsers/test_hot_path.py checks both patterns find the same headers on the real logs.
_ITERATION_HEADER = re.compile(r"iteration(?<=\biteration)\s+(?P<step>\d+)\s*/\s*(?P<train_iters>\d+)")

# "using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel
# size: 16"; newer versions insert context-parallel and encoder sizes, so the pairs are read one by one.
_WORLD_PAIR = re.compile(
    r"(?<![\w-])(?P<key>world size|data-parallel[- ]size|tensor-model-parallel size|pipeline-model-parallel size)"
    r": (?P<value>\d+)"
)
_WORLD_KEYS = {
    "world size": "gpus",
    "data-parallel-size": "dp",
    "data-parallel size": "dp",
    "tensor-model-parallel size": "tp",
    "pipeline-model-parallel size": "pp",
}
_WORLD_OLD = re.compile(r"using world size: (?P<world>\d+) and model-parallel size: (?P<tp>\d+)")
_DTYPE = re.compile(r"using torch\.(?P<dtype>\w+) for parameters")
_PADDED_VOCAB = re.compile(
    r"padded vocab \(size: (?P<vocab>\d+)\) with \d+ dummy tokens \(new size: (?P<padded>\d+)\)"
)
_MICRO_BATCHES = re.compile(r"setting number of micro-batches to constant (?P<gas>\d+)")
_EFFECTIVE_TFLOPS = re.compile(
    r"Effective Tera Flops per GPU: (?P<tflops>\d+(?:\.\d+)?) and total parameters (?P<params>\d+(?:\.\d+)?) B"
)
_INFINITY, _MINUS_INFINITY = math.inf, -math.inf
# where a record may hold an integer minus zero ("-0", "-00"): a value of digits only is followed by
# whitespace, "|" or the end (this finds more, e.g. "x-0 y", which only costs the slower way)
_INTEGER_MINUS_ZERO = re.compile(r"-0++(?![0-9.eE])")
_MEMORY = re.compile(r"after (?P<step>\d+) iterations\)? memory \(MB\)")
#: memory-line field -> ITERATIONS_SCHEMA column.
_MEMORY_COLUMNS = (("allocated", "mem_allocated_mb"), ("max allocated", "mem_max_allocated_mb"))
_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32"}

#: iteration-line field (lower case) -> ITERATIONS_SCHEMA column.
ITERATION_FIELDS: dict[str, str] = {
    "elapsed time per iteration (ms)": "elapsed_ms",
    # BigScience's Megatron-DeepSpeed (BLOOM's runs) prints seconds: _iterations turns them into ms
    "elapsed time per iteration (s)": "elapsed_s",
    "learning rate": "lr",
    "lm loss": "loss",
    "lm-loss": "loss",
    "loss": "loss",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "number of skipped iterations": "skipped",
    "number of nan iterations": "nan",
    "throughput per gpu (tflop/s/gpu)": "logged_tflops_per_gpu",
    "tflops": "logged_tflops_per_gpu",
    "samples per second": "samples_per_sec",
}
_INT_METRICS = {"skipped", "nan"}

#: arguments-dump name (matched whole) -> RUNS_SCHEMA fact. ``ffn_hidden_size`` is not ``hidden_size``
#: and ``checkpoint_num_layers`` is not ``num_layers``: only exact names map.
ARG_FACTS: dict[str, str] = {
    "world_size": "gpus",
    "tensor_model_parallel_size": "tp",
    "model_parallel_size": "tp",  # old Megatron: model parallelism was tensor parallelism only
    "pipeline_model_parallel_size": "pp",
    "data_parallel_size": "dp",
    "micro_batch_size": "micro_batch_size",
    "batch_size": "micro_batch_size",  # old Megatron's name of the per-GPU batch
    "global_batch_size": "global_batch_size",
    "seq_length": "seq_len",
    "hidden_size": "hidden_size",
    "ffn_hidden_size": "ffn_hidden_size",
    "num_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "padded_vocab_size": "padded_vocab_size",
    "kv_channels": "kv_channels",
    "vocab_size": "vocab_size",
    "zero_stage": "zero_stage",
    "train_iters": "train_iters",
}
#: dump arguments other than ARG_FACTS that ``_precision`` and ``_checkpointing`` read.
PRECISION_ARGS = ("bf16", "fp16")
CHECKPOINTING_ARGS = ("checkpoint_activations", "recompute_granularity")
#: dump arguments ``_gqa_swiglu_moe`` reads: the model-shape facts other than plain integers.
SHAPE_ARGS = ("group_query_attention", "num_query_groups", "swiglu", "num_experts", "moe_router_topk")
# Only these are kept from a dump of hundreds of arguments: the others would be converted and stored
# for nothing (tests/parsers/test_megatron.py checks ``_end_arguments`` reads no other name).
_KEPT_ARGS = (
    frozenset(ARG_FACTS) | frozenset(PRECISION_ARGS) | frozenset(CHECKPOINTING_ARGS) | frozenset(SHAPE_ARGS)
)
#: what Python's ``\s`` and ``str.strip()`` take for whitespace, in polars' (Rust) regex syntax: Rust's
#: ``\s`` (Unicode White_Space) lacks the separators \x1c-\x1f that Python counts as whitespace.
PYTHON_SPACE = r"[\s\x1c-\x1f]"
#: the lines of an open dump that can hold a kept argument (polars searches the raw line for it): a
#: kept name where a record can start (line start, after a CR, a launcher prefix's ':' or ' ', the
#: spaces or tabs ``dotted`` skips) and the start of ``arg_filler`` (dots after any whitespace, two
#: whitespace characters, or a tab, which ``expandtabs`` may widen to two spaces). A name alone
#: (``fp16``) matched six times as many lines: every mention in a log, and longer names that end in a
#: kept one (``encoder_num_layers``, ``checkpoint_num_layers``). tests/parsers/test_capture_patterns.py
#: holds it to ``dotted`` on generated raw lines.
_KEPT_ARG_LINES = (
    r"(?:^|[\t\r :])(?:"
    + "|".join(re.escape(name) for name in sorted(_KEPT_ARGS))
    + rf")(?:{PYTHON_SPACE}*\.\.|{PYTHON_SPACE}{{2}}|\t)"
)


#: lines that only come after the arguments dump: one of them ends a dump that lost its end line.
#: Megatron's timer heading alone, printed when no timer ran (half its timer lines): it has no field.
BARE_TIMERS = "time (ms)"
AFTER_ARGUMENTS = ("elapsed time per iteration", "time (ms)", "memory (MB)", "after training is done")


def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one Megatron line into ``run``; lines it does not know are ignored."""
    state = run.state.get(NAME)
    if state is None:
        state = run.state[NAME] = {}
    if state.get("in_args"):
        if "end of arguments" in text:
            _end_arguments(state, lineno, run)
            return
        record = dotted(text)
        if record is not None:
            if record[0] in _KEPT_ARGS:
                state["args"][record[0]] = (literal(record[1]), lineno)
            return
        if not any(marker in text for marker in AFTER_ARGUMENTS):
            return
        # The dump lost its end line (cut by a relaunch, or glued into another rank's output):
        # it ended before this training line, which is read as usual.
        _end_arguments(state, lineno, run)
    if text == BARE_TIMERS:  # a sixth of Megatron's lines: nothing to read, so no further tests
        return
    if " arguments --" in text and "end of arguments" not in text:
        # A dump after training steps: the job started again, appending to the same log. Only the dump
        # says so: a step lower than the last is no proof (a garbled line, a rank's late print), and
        # merging it first-wins keeps the values already read.
        if state.pop("logged_steps", False):
            run.new_launch()
        state.update(in_args=True, args={})
        # only the dump lines naming a kept argument change anything (and the marked lines end it)
        run.capture(NAME, lines=_KEPT_ARG_LINES)
        run.saw(NAME)
        return
    if "elapsed time per iteration" in text:
        _iterations(text, lineno, run, state)
    elif "time (ms)" in text:
        _timers(text, lineno, run, state)
    elif "memory (MB)" in text:
        _memory(text, lineno, run, state)
    elif "using world size" in text:
        _world(text, lineno, run)
    elif "Effective Tera Flops" in text:
        _effective_tflops(text, lineno, run)
    elif "after training is done" in text or "exiting program at iteration" in text:
        run.complete(text.strip(), lineno)
    else:
        _misc(text, lineno, run)


def _iterations(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    """One or several (glued) iteration records."""
    layouts = _layouts(state, "iteration", _iteration_plan)
    # each header is searched from the end of the one before, as finditer does; nearly every line holds
    # one record, and a header has a "/": a record without one is the last (a find instead of a search)
    header = _ITERATION_HEADER.search(text)
    while header is not None:
        start = header.end()
        following = _ITERATION_HEADER.search(text, start) if text.find("/", start) >= 0 else None
        stop = following.start() if following is not None else len(text)
        # Every field of an iteration record ends with "|": text after the last one is a field cut
        # short (a log read while it is written, or cut by a crash), whose number would be wrong.
        metrics, global_batch = _iteration_record(text[start : text.rfind("|", start, stop) + 1], layouts)
        seconds = metrics.pop("elapsed_s", None)
        if seconds is not None and metrics.get("elapsed_ms") is None:
            metrics["elapsed_ms"] = seconds * 1000.0
        step, train_iters = int(header["step"]), header["train_iters"]
        state["logged_steps"] = True
        run.saw(NAME)
        run.set_fact("train_iters", int(train_iters), NAME, lineno)
        if global_batch is not None:
            run.set_fact("global_batch_size", global_batch, NAME, lineno)
        run.add_iteration(step, NAME, lineno, **metrics)
        header = following


def _iteration_record(record: str, layouts: _Layouts) -> tuple[dict[str, Any], int | None]:
    """The ITERATIONS_SCHEMA columns of an iteration record and its global batch size (None: none)."""
    read = layouts.read(record)
    if read is not None:
        (columns, batch_index), values = read
        try:
            return _iteration_columns(columns, values), (
                None if batch_index is None else _whole(pipe_number(values[batch_index]))
            )
        except ValueError:
            pass  # a value that is no number: pipe_fields reads the record without that field
    fields = pipe_fields(record)
    layouts.learn(record, fields)
    global_batch = fields.get("global batch size")
    return _iteration_metrics(fields), None if global_batch is None else _whole(global_batch)


def _iteration_plan(names: tuple[str, ...]) -> tuple[tuple[tuple[int, str, bool], ...], int | None]:
    """What an iteration layout's fields hold: (index, column, whether a count) of those with a column,
    in their order, and the index of the global batch size (None: not in this layout)."""
    columns = tuple(
        (index, ITERATION_FIELDS[name], ITERATION_FIELDS[name] in _INT_METRICS)
        for index, name in enumerate(names)
        if name in ITERATION_FIELDS
    )
    return columns, names.index("global batch size") if "global batch size" in names else None


def _iteration_columns(columns: tuple[tuple[int, str, bool], ...], values: tuple[str, ...]) -> dict[str, Any]:
    """``_iteration_metrics`` of a layout's value texts: same order, same conversions (pipe_number's,
    then _whole's or _real's, inline), and only the values it reads are converted (ValueError for one
    that is no number)."""
    metrics: dict[str, Any] = {}
    for index, column, count in columns:
        if metrics.get(column) is None:
            text = values[index]
            if count:
                # ASCII digits (the layout's values are ASCII) are pipe_number's int, which _whole keeps
                metrics[column] = int(text) if text.isdigit() else _whole(pipe_number(text))
            elif "." in text:  # not digits only: pipe_number's float, which _real keeps
                metrics[column] = float(text)
            else:
                value = pipe_number(text)
                metrics[column] = value if value.__class__ is float else _real(value)
    return metrics


def _iteration_metrics(fields: dict[str, float]) -> dict[str, Any]:
    """ITERATIONS_SCHEMA columns of an iteration record's fields; of two names of one column (``lm
    loss`` and ``loss``), the first with a usable value wins."""
    metrics: dict[str, Any] = {}
    for name, value in fields.items():
        column = ITERATION_FIELDS.get(name)
        if column is not None and metrics.get(column) is None:
            if column in _INT_METRICS:
                metrics[column] = _whole(value)
            else:  # a float is its own measurement: only an int needs _real's overflow test
                metrics[column] = value if value.__class__ is float else _real(value)
    return metrics


def _whole(value: float) -> int | None:
    """A count field as an integer; None when the line says nan or inf (a garbled line)."""
    if isinstance(value, int):
        return value
    return int(value) if math.isfinite(value) else None


def _real(value: float) -> float | None:
    """A measurement as a float; None for an integer too long for one (a garbled line)."""
    try:
        return float(value)
    except OverflowError:
        return None


def _timers(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    breakdown = text.split("time (ms)", 1)[1]
    if ":" not in breakdown:  # every field has its ":": a bare "time (ms)" heading (half the lines) has none
        return
    layouts = _layouts(state, "timers", _timer_plan)
    timers = _layout_timers(breakdown, layouts)
    if timers is None:
        fields = pipe_fields(breakdown)
        layouts.learn(breakdown, fields)
        try:  # one conversion per field, without a call: only an integer too long for a float raises
            timers = {name: float(value) for name, value in fields.items()}
        except OverflowError:
            timers = {name: ms for name, value in fields.items() if (ms := _real(value)) is not None}
    if timers:
        run.add_timers(timers, NAME, lineno)


def _layout_timers(breakdown: str, layouts: _Layouts) -> dict[str, float] | None:
    """The timers of a breakdown of a known layout, as the general way reads them; None: read it so."""
    read = layouts.read(breakdown)
    if read is None:
        return None
    names, values = read
    try:
        timers = list(map(float, values))  # float of the text: pipe_fields' int of it, then float, unless...
    except ValueError:
        return None  # a value that is no number: pipe_fields reads the breakdown without that field
    if _INFINITY in timers or _MINUS_INFINITY in timers:
        return None  # ... an integer too long for a float, which the general way drops
    if 0.0 in timers and _INTEGER_MINUS_ZERO.search(breakdown):  # ... or "-0": float says -0.0, its int 0.0
        timers = [float(pipe_number(value)) for value in values]
    return dict(zip(names, timers, strict=False))  # one value per name by construction (strict costs)


def _memory(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    """Memory of each rank after step N: the run keeps the largest rank's numbers."""
    layouts = _layouts(state, "memory", _memory_plan)
    # searched from the end of the one before, as finditer does (one record a line, nearly always, and
    # a record without a further "memory (MB)" is the last: a find instead of a search)
    match = _MEMORY.search(text)
    while match is not None:
        following = _MEMORY.search(text, match.end()) if text.find("memory (MB)", match.end()) >= 0 else None
        record = text[match.end() : following.start() if following is not None else len(text)]
        step_number = int(match["step"])
        for column, value in _memory_numbers(record, layouts):
            # a float is its own measurement: only an int needs _real's overflow test
            if value.__class__ is float or (value := _real(value)) is not None:
                run.raise_metric(step_number, column, value, NAME, lineno)
        match = following


def _memory_numbers(record: str, layouts: _Layouts) -> list[tuple[str, int | float]]:
    """(column, number) of the fields of a memory record the run keeps, in _MEMORY_COLUMNS' order."""
    read = layouts.read(record)
    if read is not None:
        plan, values = read
        try:
            # a text with a "." is not digits only: pipe_number's float
            return [
                (column, float(text) if "." in text else pipe_number(text))
                for index, column in plan
                for text in (values[index],)
            ]
        except ValueError:
            pass  # a value that is no number: pipe_fields reads the record without that field
    fields = pipe_fields(record)
    layouts.learn(record, fields)
    return [(column, fields[name]) for name, column in _MEMORY_COLUMNS if name in fields]


def _memory_plan(names: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
    """(index, column) of a memory layout's fields the run keeps, in _MEMORY_COLUMNS' order."""
    return tuple((names.index(name), column) for name, column in _MEMORY_COLUMNS if name in names)


def _timer_plan(names: tuple[str, ...]) -> tuple[str, ...]:
    """A timer layout's names: the family reads every field."""
    return names


# Megatron prints the same fields on every iteration (timer, memory) line of a run: once a few records
# of the same names were read the general way, a layout of those names (grammar.pipe_layout) reads the
# next ones in one match. Compiling one costs about a millisecond, more than a short log's few records,
# and names met once or twice (a setup timer) get none.
_LAYOUT_AFTER = 4  # records of the same names read the general way before their layout is built
_LAYOUT_TRIES = 8  # records of those names tried for it (a layout reads plain numbers only, no nan)
# distinct names counted per kind and run: a log whose names keep changing gets no layouts
_LAYOUT_NAMES = 256


@dataclass
class _Layouts:
    """The layouts of one kind of record met in a run, each with ``plan`` of its names: what the family
    reads of its fields."""

    plan: Callable[[tuple[str, ...]], Any]
    known: list[tuple[Callable[[str], re.Match[str] | None], Any]] = field(
        default_factory=list
    )  # fullmatch, plan
    counts: dict[tuple[str, ...], int] = field(default_factory=dict)  # records read the general way

    def __reduce__(self) -> tuple[Any, ...]:
        # a cache for reading the run: a worker process returns its run without compiled patterns
        return _Layouts, (self.plan,)

    def read(self, record: str) -> tuple[Any, tuple[str, ...]] | None:
        """``(plan, value texts)`` of the first layout that reads ``record``; None: none does. The layout
        that reads it moves first (a run's records of one kind mostly have one layout at a time)."""
        if len(record) > LAYOUT_MAX_LENGTH:
            return None  # as PipeLayout.values, whose match is inlined here (a call less per layout tried)
        known = self.known
        for entry in known:
            match = entry[0](record)
            if match is not None:
                if entry is not known[0]:
                    known.remove(entry)
                    known.insert(0, entry)
                return entry[1], match.groups()
        return None

    def learn(self, record: str, fields: dict[str, Any]) -> None:
        """Count a record read the general way; from the ``_LAYOUT_AFTER``-th of the same names on, one
        whose fields are all plain numbers builds their layout (a few tries: a run printing nan)."""
        names = tuple(fields)
        count = self.counts.get(names, 0) + 1
        if count > 1 or len(self.counts) < _LAYOUT_NAMES:
            self.counts[names] = count
        if _LAYOUT_AFTER <= count < _LAYOUT_AFTER + _LAYOUT_TRIES:
            layout = pipe_layout(record)
            if layout is not None:
                self.known.insert(0, (layout.pattern.fullmatch, self.plan(layout.names)))


def _layouts(state: dict, kind: str, plan: Callable[[tuple[str, ...]], Any]) -> _Layouts:
    layouts = state.get(kind)
    if layouts is None:
        layouts = state[kind] = _Layouts(plan)
    return layouts


def _world(text: str, lineno: int, run: RunBuilder) -> None:
    pairs = {_WORLD_KEYS[m["key"]]: int(m["value"]) for m in _WORLD_PAIR.finditer(text)}
    if len(pairs) > 1:
        run.saw(NAME)
        for fact, value in pairs.items():
            run.set_fact(fact, value, NAME, lineno)
        return
    match = _WORLD_OLD.search(text)
    if match:
        run.saw(NAME)
        world, tp = int(match["world"]), int(match["tp"])
        run.set_fact("gpus", world, NAME, lineno)
        run.set_fact("tp", tp, NAME, lineno)
        # This Megatron has no pipeline parallelism (it says "model-parallel size", not tensor/pipeline):
        # PP is 1 by construction and the rest of the world is data parallel.
        run.set_fact("pp", 1, NAME, lineno)
        if tp and world % tp == 0:
            run.set_fact("dp", world // tp, NAME, lineno)


def _effective_tflops(text: str, lineno: int, run: RunBuilder) -> None:
    match = _EFFECTIVE_TFLOPS.search(text)
    if match is None:
        return
    run.set_fact("logged_model_size", float(match["params"]), NAME, lineno)
    if run.last_iteration is not None:
        run.add_iteration(run.last_iteration, NAME, lineno, logged_tflops_per_gpu=float(match["tflops"]))


def _misc(text: str, lineno: int, run: RunBuilder) -> None:
    match = _DTYPE.search(text)
    if match and match["dtype"] in _DTYPES:
        run.set_fact("precision", _DTYPES[match["dtype"]], NAME, lineno)
        return
    match = _PADDED_VOCAB.search(text)
    if match:
        run.set_fact("vocab_size", int(match["vocab"]), NAME, lineno)
        run.set_fact("padded_vocab_size", int(match["padded"]), NAME, lineno)
        return
    match = _MICRO_BATCHES.search(text)
    if match:
        run.set_fact("gas", int(match["gas"]), NAME, lineno)


def _end_arguments(state: dict, lineno: int, run: RunBuilder) -> None:
    """The dump is complete: turn its arguments into run facts."""
    state["in_args"] = False
    run.capture(NAME, False)
    args: dict[str, tuple[Any, int]] = state.get("args", {})
    for name, fact in ARG_FACTS.items():
        if name in args and isinstance(args[name][0], int) and not isinstance(args[name][0], bool):
            run.set_fact(fact, args[name][0], NAME, args[name][1])
    precision = _precision(args)
    if precision is not None:
        run.set_fact("precision", precision[0], NAME, precision[1])
    checkpointing = _checkpointing(args)
    if checkpointing is not None:
        run.set_fact("activation_checkpointing", checkpointing[0], NAME, checkpointing[1])
    for fact, (value, line) in _gqa_swiglu_moe(args).items():
        run.set_fact(fact, value, NAME, line)


def _precision(args: dict[str, tuple[Any, int]]) -> tuple[str, int] | None:
    for name in PRECISION_ARGS:
        if args.get(name, (None,))[0] is True:
            return name, args[name][1]
    if "fp16" in args and "bf16" in args:
        return "fp32", args["fp16"][1]
    return None


def _gqa_swiglu_moe(args: dict[str, tuple[Any, int]]) -> dict[str, tuple[Any, int]]:
    """The facts of today's Megatron-LM model shapes (the arguments Megatron-LM's
    ``num_floating_point_operations`` reads): ``num_query_groups`` only with ``group_query_attention
    True`` (without it Megatron-LM prints its unused default 1), ``swiglu``, and ``moe_topk`` (from
    ``moe_router_topk``) only when ``num_experts`` is a number (None is a dense model; Megatron-DeepSpeed's
    list ``[1]`` is another option, DeepSpeed-MoE's)."""
    gqa, groups = args.get("group_query_attention"), _positive(args.get("num_query_groups"))
    swiglu = args.get("swiglu")
    experts, topk = _positive(args.get("num_experts")), _positive(args.get("moe_router_topk"))
    facts: dict[str, tuple[Any, int]] = {}
    if gqa is not None and gqa[0] is True and groups is not None:
        facts["num_query_groups"] = groups
    if swiglu is not None and isinstance(swiglu[0], bool):
        facts["swiglu"] = swiglu
    if experts is not None and topk is not None:
        facts["moe_topk"] = topk
    return facts


def _positive(arg: tuple[Any, int] | None) -> tuple[int, int] | None:
    """A dumped argument (value, line) whose value is a positive integer, else None."""
    if arg is None or arg[0].__class__ is not int or arg[0] <= 0:
        return None
    return arg


def _checkpointing(args: dict[str, tuple[Any, int]]) -> tuple[bool, int] | None:
    """Full activation recomputation (the seed formula's factor 4): ``checkpoint_activations`` in
    older Megatron, ``recompute_granularity full`` in newer; selective recomputation is not full."""
    if args.get("checkpoint_activations", (None,))[0] is True:
        return True, args["checkpoint_activations"][1]
    if args.get("recompute_granularity", (None,))[0] == "full":
        return True, args["recompute_granularity"][1]
    for name in CHECKPOINTING_ARGS:
        if name in args:
            return False, args[name][1]
    return None


def evidence(run: RunBuilder) -> int:
    return run.families_seen.get(NAME, 0)


FAMILY = Family(
    name=NAME,
    markers=(
        "elapsed time per iteration",
        "time (ms)",
        "memory (MB)",
        " arguments --",
        "end of arguments",
        "using world size",
        "using torch.",
        "padded vocab",
        "number of micro-batches",
        "Effective Tera Flops",
        "after training is done",
        "exiting program at iteration",
    ),
    parse_line=parse_line,
    evidence=evidence,
    capture_patterns=(_KEPT_ARG_LINES,),
    description="Megatron-LM / Megatron-DeepSpeed: iteration lines, timers, memory, arguments dump",
)

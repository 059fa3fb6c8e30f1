"""Megatron-LM and Megatron-DeepSpeed logs.

Lines read (real examples in fixtures/megatron/):
- `` iteration  2/ 1000 | consumed samples: 2048 | elapsed time per iteration (ms): 129028.8 | ...``
  (old versions lack consumed samples; ``lm loss`` or ``lm-loss``; newer ones add
  ``throughput per GPU (TFLOP/s/GPU)``; BigScience's fork (BLOOM) prints ``elapsed time per iteration
  (s)``, ``samples per second`` and ``TFLOPs``; GPT-NeoX's ``samples/sec: 41.712 | iteration ...`` with
  ``approx flops per GPU: 95.3TFLOPS`` and ``lm_loss``; a timestamp may precede it);
- ``time (ms) | forward-compute: 32054.16 | ...`` (timers of the step logged just before; DeepSpeed's
  engine prints its wall-clock breakdown in this format, every micro-step and step), and today's
  Megatron-LM core's block of them, ``(min, max) time across ranks (ms):`` then ``    forward-backward
  ....: (8900.00, 8920.00)`` a line (``--timing-log-option max``: ``max time across ranks (ms):``,
  ``....: 8920.00``), of which the slowest rank's time is read;
- ``[Rank 0] (after 1 iterations) memory (MB) | allocated: ... | max allocated: ...`` and the old
  ``after 1 iterations memory (MB) | ...``;
- the arguments dump between ``---- arguments ----`` and ``---- end of arguments ----`` (GPT-NeoX's:
  its own names, ``6144.....updated`` values);
- ``using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel
  size: 16`` (old: ``using world size: 64 and model-parallel size: 4``), ``using torch.float16 for
  parameters``, ``padded vocab (size: 50257) with 431 dummy tokens (new size: 50688)``, ``setting number
  of micro-batches to constant 256``, ``Effective Tera Flops per GPU: 41.94 and total parameters 52.005 B``,
  ``Total number of parameters in billions: 8.03``.

Not training steps: ``Evaluating iter N/M`` (evaluation), ``> working on iteration: N`` (zero-shot tasks),
``validation loss at iteration N``, checkpoint lines. Several launches appended to one file (a requeued
job, a resume from a checkpoint): an arguments dump after training steps starts a new launch, whose rows
replace those of the steps an earlier launch logged too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import chain

import polars as pl
from logstat.parsers import deepspeed
from logstat.parsers.base import BUILD_FAILED, EFFECT, Family, RunBuilder
from logstat.parsers.kinds import (
    BODY,
    CLOSER,
    ENDED,
    IN_STEP,
    LAUNCH,
    OPENER,
    PEAK,
    PYTHON_EVENTS,
    PYTHON_SPACE,
    RECORD,
    SEEN,
    SI_PREFIXES,
    STEP_END,
    Block,
    Events,
    RecordKind,
    RecordTest,
    argument_usage,
    as_count,
    as_real,
    code_frames,
    facts_of,
    marks_of,
    named_field,
    pipe_fields,
    too_long,
    too_long_note,
)

NAME = "megatron"

# "using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel
# size: 16"; newer versions insert context-parallel and encoder sizes, so the pairs are read one by one
# (not an encoder's). core_r0.10 on lacks the comma after its hierarchical context-parallel sizes: "...
# sizes: Nonetensor-model-parallel size: 2".
_WORLD_PAIR = re.compile(
    r"(?:(?<![\w-])|(?<=None))(?P<key>world size|data-parallel[- ]size|tensor-model-parallel size"
    r"|pipeline-model-parallel size|context-parallel size|sequence-parallel size): (?P<value>\d+)"
)
_WORLD_KEYS = {
    "world size": "gpus",
    "data-parallel-size": "dp",
    "data-parallel size": "dp",
    "tensor-model-parallel size": "tp",
    "pipeline-model-parallel size": "pp",
    "context-parallel size": "cp",
    # Megatron-DeepSpeed's DeepSpeed-Ulysses: the sequence split over GPUs as context parallelism splits it
    "sequence-parallel size": "cp",
}
_WORLD_OLD = re.compile(r"using world size: (?P<world>\d+) and model-parallel size: (?P<tp>\d+)")
#: GPT-NeoX prints the old line from ``NeoXArgs.configure_distributed_args()``
_NEOX_WORLD = "configure_distributed_args()"
_DTYPE = re.compile(r"using torch\.(?P<dtype>\w+) for parameters")
_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32", "float": "fp32"}
#: lines stating integer facts, each group named after its fact
_FACT_LINES = (
    re.compile(
        r"padded vocab \(size: (?P<vocab_size>\d+)\) with \d+ dummy tokens"
        r" \(new size: (?P<padded_vocab_size>\d+)\)"
    ),
    # Megatron-LM's microbatches.py; megatron.core's num_microbatches_calculator.py (NeMo 2 logs it):
    # "setting number of microbatches to constant 16"
    re.compile(r"setting number of micro-?batches to constant (?P<gas>\d+)"),
    # load_checkpoint: "successfully loaded checkpoint from {dir} [ t 0, p 0 ] at iteration 1000" (older
    # Megatron and Megatron-DeepSpeed print no ranks)
    re.compile(r"successfully loaded checkpoint from .* at iteration (?P<resumed_step>\d+)"),
    # GPT-NeoX's setup_model_and_optimizer after its load_checkpoint
    re.compile(r"Loading checkpoint and starting from iteration (?P<resumed_step>\d+)"),
    # Megatron-LM v1.x (2020) names no iteration: "  successfully loaded {checkpoint_name}", the checkpoint's
    # file under its iteration's directory (get_checkpoint_name: iter_{:07d})
    re.compile(r"successfully loaded \S*/iter_(?P<resumed_step>\d{7})/"),
)
#: checkpointing.py's load_checkpoint when torch.load raised: it prints this, then the exception, then
#: ``sys.exit()`` (status 0: no traceback, no launcher error)
_UNLOADABLE_CHECKPOINT = "could not load the checkpoint"
#: data/dataset_utils.py's compile_helper when ``make`` of its C++ helpers failed, before ``sys.exit(1)``
_HELPERS_BUILD_FAILED = "Making C++ dataset helpers module failed, exiting."
#: training.py's get_model, on each model-parallel rank of data-parallel rank 0 (print, not print_rank_0)
_RANK_PARAMETERS = re.compile(
    r"number of parameters on \(tensor, pipeline\) model parallel rank \((?P<t>\d+), (?P<p>\d+)\): (?P<n>\d+)"
)
#: Megatron-LM core's report_theoretical_memory (theoretical_memory_usage.py), at the first logged step
_TOTAL_PARAMETERS = re.compile(r"Total number of parameters in billions: *(?P<params>\d+(?:\.\d+)?)")
_EFFECTIVE_TFLOPS = re.compile(
    r"Effective Tera Flops per GPU: (?P<tflops>\d+(?:\.\d+)?)"
    r" and total parameters (?P<params>\d+(?:\.\d+)?) B"
)


#: training.py's ``print_datetime`` of a run that ended as planned: its iterations done or its
#: ``--exit-interval`` reached, each after the checkpoint is saved
PLANNED_ENDS = ("after training is done", "exiting program at iteration")
#: its ``--exit-duration-in-mins`` spent (``exiting program after 1190.2 minutes``): the run stopped on its own
#: time budget, its iterations not done (the job's next submission resumes): a timeout, as a scheduler's limit
TIME_BUDGET_END = "exiting program after"
#: ``--exit-signal-handler``'s end, after the checkpoint is saved: a signal from outside (scancel, Slurm's
#: ``--signal`` before a time limit, a preemption) stopped the run before its iterations were done. How the
#: run ended (EFFECT): the sender's own line (``CANCELLED AT ... DUE TO TIME LIMIT``) is the cause
SIGNALLED_END = "exiting program after receiving SIGTERM"
#: tasks/main.py's last line, of an evaluation (zero-shot LAMBADA, WikiText) or a finetuning run that ended
PLANNED_ENDS += ("done :-)",)
#: BigScience's Megatron-DeepSpeed (``--kill-switch-path``): an operator's file told the run to stop, checked
#: before training and after each step (``[Detected kill switch at /path, exiting] datetime: ...``)
KILL_SWITCH = "Detected kill switch at "


def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one of Megatron's rare lines into ``run`` (the per-step records and the arguments dump are
    read column-wise: ``KINDS``, ``ARGUMENTS``); lines it does not know are ignored."""
    if "using world size" in text:
        _world(text, lineno, run)
    elif "Effective Tera Flops" in text:
        if match := _EFFECTIVE_TFLOPS.search(text):
            run.set_fact("logged_model_size", float(match["params"]), NAME, lineno)
            # the step logged last before the line (None: settled column-wise with the steps)
            run.add_iteration(None, NAME, lineno, logged_tflops_per_gpu=float(match["tflops"]))
    elif match := _RANK_PARAMETERS.search(text):
        ranks = run.state.setdefault(NAME, {}).setdefault("rank_parameters", {})
        ranks[int(match["t"]), int(match["p"])] = (int(match["n"]), lineno)
    elif match := _TOTAL_PARAMETERS.search(text):
        run.set_fact("logged_model_size", float(match["params"]), NAME, lineno)
    elif SIGNALLED_END in text:
        run.fail("cancelled", text.strip(), lineno, weight=EFFECT, kind="cancelled")
    elif KILL_SWITCH in text:
        run.fail("cancelled", text.strip(), lineno, kind="kill switch")
    elif text.strip() == _UNLOADABLE_CHECKPOINT:
        run.fail("failed", _UNLOADABLE_CHECKPOINT, lineno, kind="checkpoint")
    elif text.strip() == _HELPERS_BUILD_FAILED:
        run.fail("failed", _HELPERS_BUILD_FAILED, lineno, kind=BUILD_FAILED)
    elif any(end in text for end in PLANNED_ENDS):
        run.complete(text.strip(), lineno)
    elif TIME_BUDGET_END in text:
        run.spent_time_budget(text, lineno)
    elif (match := _DTYPE.search(text)) and match["dtype"] in _DTYPES:
        run.set_fact("precision", _DTYPES[match["dtype"]], NAME, lineno)
    else:
        for pattern in _FACT_LINES:
            if match := pattern.search(text):
                facts = {fact: int(value) for fact, value in match.groupdict().items()}
                if facts.get("resumed_step") == 0:  # a checkpoint of step 0 (--finetune) is no resume
                    del facts["resumed_step"]
                for fact, value in facts.items():
                    run.set_fact(fact, value, NAME, lineno)
                if "resumed_step" in match.groupdict():  # each launch loads its checkpoint before training
                    run.new_launch(NAME)
                return


def _world(text: str, lineno: int, run: RunBuilder) -> None:
    pairs = {_WORLD_KEYS[m["key"]]: int(m["value"]) for m in _WORLD_PAIR.finditer(text)}
    if len(pairs) < 2 and (match := _WORLD_OLD.search(text)):
        world, tp = int(match["world"]), int(match["tp"])
        # This Megatron has no pipeline parallelism (it says "model-parallel size", not tensor/pipeline):
        # PP is 1 by construction and the rest of the world is data parallel.
        pairs = {"gpus": world, "tp": tp, "pp": 1} | ({"dp": world // tp} if tp and world % tp == 0 else {})
        if _NEOX_WORLD in text:  # GPT-NeoX's copy of the line: it has pipelines (pipe_parallel_size)
            pairs = {"gpus": world, "tp": tp}
    if len(pairs) > 1:
        run.saw(NAME)
        for fact, value in pairs.items():
            run.set_fact(fact, value, NAME, lineno)


# --- the per-step records, read column-wise (kinds.RecordKind) ----------------------------------

#: ITERATIONS_SCHEMA column -> the iteration-record fields (lower case) that hold it: the first listed
#: with a value counts (no log prints two of them)
ITERATION_FIELDS: dict[str, tuple[str, ...]] = {
    # BigScience's Megatron-DeepSpeed (BLOOM's runs) prints seconds: _value reads them as ms
    "elapsed_ms": ("elapsed time per iteration (ms)", "elapsed time per iteration (s)"),
    "lr": ("learning rate",),
    "loss": ("lm loss", "lm-loss", "lm_loss", "loss"),
    "loss_scale": ("loss scale",),
    "grad_norm": ("grad norm",),
    "skipped": ("number of skipped iterations",),
    "nan": ("number of nan iterations",),
    "logged_tflops_per_gpu": ("throughput per gpu (tflop/s/gpu)", "tflops"),
    "samples_per_sec": ("samples per second", "samples/sec"),
    "global_batch_size": ("global batch size",),
    # Megatron-DeepSpeed's (BigScience's: curriculum seqlen only) sequence-length curriculum
    "seq_len": ("actual seqlen", "curriculum seqlen"),
}
#: GPT-NeoX's ``approx flops per GPU: 95.3TFLOPS`` (its ``human_readable_flops``: no unit below a thousand)
_NEOX_FLOPS = named_field("approx flops per gpu", unit="([KMGTPEZ]?)(?:FLOPS)?")
#: iteration-record fields only Megatron-DeepSpeed's ``training_log`` prints (BigScience's and Microsoft's:
#: its token count, curriculum and tokens per GPU): a record of a run on DeepSpeed, though the rank that
#: printed it printed nothing of DeepSpeed's (the last pipeline stage's pod, file or node)
DEEPSPEED_FIELDS = [
    "consumed tokens:",
    "curriculum seqlen:",
    "actual seqlen:",
    "tokens per gpu per second (tgs):",
]
#: iteration-record fields that are counts (the rest are measurements)
COUNT_FIELDS = ("number of skipped iterations", "number of nan iterations", "global batch size")
COUNT_FIELDS += ("actual seqlen", "curriculum seqlen")
#: an iteration record's header; a line may hold several records (ranks glued without a tag)
ITERATION_HEADER = r"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)"
#: a memory record's header (``[Rank 0] (after 1 iterations) memory (MB)``, old: ``after 1 iterations
#: memory (MB)``) and the fields read from it
MEMORY_HEADER = r"after (?P<step>\d+) iterations\)? memory \(MB\)"
_MEMORY_FIELDS = {"allocated": "mem_allocated_mb", "max allocated": "mem_max_allocated_mb"}
#: the event index of the first memory record glued to a line of iteration records (after theirs)
_GLUED_EVENTS = 64
#: what opens an arguments dump: a line holding it is never a per-step record
_DUMP_OPENER = " arguments --"
#: Megatron-LM 2019-2020's dump, ``print_args``: a line ``arguments:`` alone, then the same ``  name ....
#: value`` lines and no end line
_OLD_DUMP_OPENER = "arguments:"


def _records(lines: pl.LazyFrame, header: str) -> pl.LazyFrame:
    """Each header's record: ``order`` (its line's, plus its index in the line), the header's groups and
    ``body``, its text up to the next header, a ``|`` for the header. A line of glued ranks is split at a separator no
    record holds; no group spans the body (a capture over a long span costs ten times a match)."""
    text = pl.col("text")
    glued = text.str.count_matches(header) > 1
    split = (
        lines.filter(glued)
        .select("order", text=text.str.replace_all(header, "\x00${0}").str.split("\x00").list.slice(1))
        .with_columns(item=pl.int_ranges(text.list.len()))
        .explode("text", "item")
        .select(pl.col("order") + pl.col("item"), "text")
    )
    return (
        pl.concat([lines.filter(~glued).select("order", "text"), split])
        .select(
            "order",
            text.str.extract_groups(header).alias("header"),
            # the header's place is a field separator: a field may come before it
            body=text.str.replace(header, "|"),
        )
        .unnest("header")
        .drop_nulls("step")
    )


def _too_long(frame: pl.DataFrame, name: str | pl.Expr, text: pl.Expr) -> pl.DataFrame:
    """A note per integer of ``text`` beyond int64, as ``RunBuilder.fits`` notes one."""
    return frame.filter(too_long(text)).select(
        "order", family=pl.lit(NAME), message=too_long_note(name, text)
    )


def _step_events(records: pl.DataFrame, mode: int, metrics: Iterable[str]) -> pl.DataFrame:
    """A step event per record whose step fits int64 (``_too_long`` notes the others)."""
    return records.filter(~too_long(pl.col("step"))).select(
        "order",
        *metrics,
        step=pl.col("step").cast(pl.Int64),
        mode=pl.lit(mode, dtype=pl.Int8),
        family=pl.lit(NAME),
    )


def _value(name: str) -> pl.Expr:
    """An iteration-record field's value, from its text (``raw <name>``): a count's integer, else a float
    (seconds in ms)."""
    text = pl.col(f"raw {name}")
    if name in COUNT_FIELDS:
        return as_count(text)
    return as_real(text) * 1000.0 if name.endswith("(s)") else as_real(text)


def read_iterations(records: pl.LazyFrame) -> Events:
    """``iteration N/M | name: value | ...`` records: a step event each (its ITERATION_FIELDS columns),
    and the facts ``train_iters`` and ``global_batch_size``. A field is read between two ``|`` (before the
    header too: GPT-NeoX prints ``samples/sec`` first): text after the last one is a field cut short (a
    log read while written, or cut by a crash)."""
    names = dict.fromkeys(chain(*ITERATION_FIELDS.values(), COUNT_FIELDS))
    # each field's text is extracted once into a column: an expression used twice would run twice
    neox_flops = pl.col("body").str.extract_groups(_NEOX_FLOPS)
    prefix = neox_flops.struct[1].replace_strict(SI_PREFIXES, default=None, return_dtype=pl.Float64)
    flops = as_real(neox_flops.struct[0]) * prefix / 1e12
    steps = (
        _records(records, ITERATION_HEADER)
        .with_columns(body="|" + pl.col("body"))
        .with_columns(pl.col("body").str.extract(named_field(name), 1).alias(f"raw {name}") for name in names)
        .with_columns(
            **{
                column: pl.coalesce([_value(name) for name in names])
                for column, names in ITERATION_FIELDS.items()
            },
            counted=pl.concat_list(f"raw {name}" for name in COUNT_FIELDS),
        )
        .with_columns(logged_tflops_per_gpu=pl.coalesce("logged_tflops_per_gpu", flops))
        .collect()
    )
    step_events = _step_events(steps, RECORD, ITERATION_FIELDS)
    facts = facts_of(
        steps.lazy(),
        NAME,
        train_iters=pl.col("total").cast(pl.Int64, strict=False),
        global_batch_size=_value("global batch size"),
    )
    notes = [
        _too_long(steps, "train_iters", pl.col("total")),
        _too_long(steps, "iteration", pl.col("step")),
        _too_long(steps.select("order", "counted").explode("counted"), "count", pl.col("counted")),
    ]
    # each record counts as the family's (family detection; DeepSpeed's facts ask whether Megatron ran it)
    seen = marks_of(records, NAME, SEEN)
    under_deepspeed = records.filter(pl.col("text").str.contains_any(DEEPSPEED_FIELDS))
    marks = [seen, marks_of(under_deepspeed, deepspeed.NAME, SEEN)]
    events = Events(steps=[step_events], facts=[facts.collect()], notes=notes, marks=marks)
    # a rank's memory record glued to the line (a line is one kind's record: this kind's), its events after
    # the line's iteration records'
    glued = records.filter(pl.col("text").str.contains("memory (MB)", literal=True))
    events.extend(read_memory(glued.with_columns(pl.col("order") + _GLUED_EVENTS)))
    return events


def read_timers(records: pl.LazyFrame) -> Events:
    """``time (ms) | name: ms | ...``: a timer event per field (of the step logged before it; DeepSpeed's
    engine timers of the step they count, ``per_step``). The bare heading, printed when no timer ran
    (half of Megatron's timer lines), has none."""
    breakdowns = records.select("order", body=pl.col("text").str.replace(r"^.*?time \(ms\)", ""))
    timers = pipe_fields(breakdowns, pl.col("body")).select(
        "order", "position", timer="name", ms=as_real(pl.col("value"))
    )
    # DeepSpeed prints a line of the step timers, or of those of its micro-step or optimizer step, not both
    per_step = pl.when(pl.col("timer").is_in(deepspeed.ENGINE_STEP_TIMERS)).then(STEP_END)
    per_step = per_step.when(pl.col("timer").is_in(deepspeed.ENGINE_IN_STEP_TIMERS)).then(IN_STEP)
    timers = timers.with_columns(per_step=per_step.cast(pl.Int8))
    engine = pl.when(pl.col("per_step").is_not_null()).then(pl.lit(deepspeed.NAME))
    timers = timers.with_columns(family=engine.otherwise(pl.lit(NAME)))
    return Events(timers=[timers.drop_nulls("ms").collect()])


def read_memory(records: pl.LazyFrame) -> Events:
    """``(after N iterations) memory (MB) | allocated: ... | max allocated: ...`` of each rank: a peak
    event per record (the run keeps the largest rank's numbers)."""
    headers = _records(records, MEMORY_HEADER).collect()
    values = (
        pipe_fields(headers.lazy(), pl.col("body"))
        .filter(pl.col("name").is_in(list(_MEMORY_FIELDS)))
        .group_by("order")
        .agg(
            as_real(pl.col("value").filter(pl.col("name") == name).first()).alias(column)
            for name, column in _MEMORY_FIELDS.items()
        )
        .collect()
    )
    steps = _step_events(headers.join(values, on="order"), PEAK, _MEMORY_FIELDS.values())
    return Events(steps=[steps], notes=[_too_long(headers, "iteration", pl.col("step"))])


#: a timer of Megatron-LM core's block (``Timers.log``): its name, left-justified with dots, then ``(min,
#: max)`` or one time in ms (a name of 48 characters or more has no dots: not read); the max is kept
_RANK_TIMER = (
    rf"^{PYTHON_SPACE}*(?P<name>\S+) \.+: (?:\([\d.]+, (?P<max>[\d.]+)\)|(?P<value>[\d.]+)){PYTHON_SPACE}*$"
)


def read_rank_timers(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The timers of Megatron-LM core's blocks, a timer event each (of the step logged before it): the
    slowest rank's time."""
    lines = blocks.filter(pl.col("role") == BODY).select(
        "order", timer=pl.col("text").str.extract_groups(_RANK_TIMER)
    )
    timers = lines.select(
        "order",
        position=pl.lit(0, pl.Int64),  # a timer a line
        timer=pl.col("timer").struct.field("name"),
        ms=as_real(pl.coalesce(pl.col("timer").struct.field("max"), pl.col("timer").struct.field("value"))),
        family=pl.lit(NAME),
    )
    return Events(timers=[timers.drop_nulls("ms").collect()])


#: a line of Megatron-LM core's ``--timing-log-option all`` block: a timer's name alone (``  forward-backward:``),
#: then a line per rank (``     rank  0: 460.00``)
_ALL_RANKS_LINE = (
    rf"^{PYTHON_SPACE}*(?:rank{PYTHON_SPACE}+\d+: (?P<value>[\d.]+)|(?P<name>[^\s:]+):){PYTHON_SPACE}*$"
)


def read_all_ranks_timers(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The timers of ``times across ranks (ms):`` blocks, a timer event each (of the step logged before it,
    at its name's line): the slowest rank's time, as the other options' blocks give it."""
    lines = (
        blocks.filter(pl.col("role") == BODY)
        .select("block", "order", line=pl.col("text").str.extract_groups(_ALL_RANKS_LINE))
        .unnest("line")
        .sort("block", "order")
    )
    named = pl.when(pl.col("name").is_not_null())
    timers = (
        lines.with_columns(
            timer=pl.col("name").forward_fill().over("block"),
            at=named.then(pl.col("order")).forward_fill().over("block"),
        )
        .filter(pl.col("timer").is_not_null())
        .group_by("at", "timer")
        .agg(ms=as_real(pl.col("value")).max())
        .select(order="at", position=pl.lit(0, pl.Int64), timer="timer", ms="ms", family=pl.lit(NAME))
    )
    return Events(timers=[timers.drop_nulls("ms").collect()])


def _outside_dumps(marker: str) -> RecordTest:
    """A per-step record: one holding ``marker`` but not an arguments dump's opener."""
    return RecordTest(markers=(marker,), unless=(_DUMP_OPENER,))


#: Megatron's own code in a traceback's frames: its training loop and model (megatron/training/, 2024 on;
#: megatron/training.py, model/, initialize.py, arguments.py before, and Megatron-DeepSpeed's), its entry
#: scripts (not megatron/core/, which NeMo runs on)
CODE = ("/megatron/training", "/megatron/model/", "/megatron/initialize.py", "/megatron/arguments.py")
CODE += ("/megatron/legacy/", "/pretrain_gpt", "/pretrain_bert", "/pretrain_t5", "/pretrain_mamba")
#: the head of the usage Megatron's parser prints (arguments.py: the network size's arguments come first)
USAGE = ("[-h] [--num-layers NUM_LAYERS]",)

KINDS = (
    RecordKind(
        family=NAME,
        name="iteration",
        test=_outside_dumps("elapsed time per iteration"),
        read=read_iterations,
        facts=("train_iters", "global_batch_size"),
    ),
    RecordKind(family=NAME, name="timers", test=_outside_dumps("time (ms)"), read=read_timers),
    RecordKind(family=NAME, name="memory", test=_outside_dumps("memory (MB)"), read=read_memory),
    code_frames(NAME, CODE),
    argument_usage(NAME, USAGE),
)


# --- the arguments dump, read column-wise (kinds.Block) ------------------------------------------

#: arguments-dump name (matched whole) -> RUNS_SCHEMA fact. ``ffn_hidden_size`` is not ``hidden_size``
#: and ``checkpoint_num_layers`` is not ``num_layers``: only exact names map.
ARG_FACTS: dict[str, str] = {
    "world_size": "gpus",
    "tensor_model_parallel_size": "tp",
    "model_parallel_size": "tp",  # old Megatron: model parallelism was tensor parallelism only
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
    "ds_sequence_parallel_size": "cp",
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
    # GPT-NeoX's names (its dump also names DeepSpeed's config keys)
    "global_num_gpus": "gpus",
    "pipe_parallel_size": "pp",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "train_batch_size": "global_batch_size",
    "gradient_accumulation_steps": "gas",
}
#: the other arguments read: precision, activation checkpointing, and the model shape's GQA, SwiGLU and
#: MoE (the arguments Megatron-LM's ``num_floating_point_operations`` reads), and whether the output layer
#: is untied from the embedding (the parameter count's)
_FLAG_ARGS = ("bf16", "fp16", "checkpoint_activations", "recompute_granularity", "group_query_attention")
_FLAG_ARGS += ("precision",)  # GPT-NeoX's: fp16, bfloat16 or fp32 (its fp16 and bf16 are DeepSpeed's dicts)
_PRECISIONS = {"fp16": "fp16", "bfloat16": "bf16", "bf16": "bf16", "fp32": "fp32"}
_SHARED = "moe_shared_expert_intermediate_size"
_SHAPE_ARGS = ("num_query_groups", "num_key_value_heads", "swiglu", "num_experts", "moe_router_topk")
_SHAPE_ARGS += ("moe_ffn_hidden_size", _SHARED, "moe_layer_freq", "untie_embeddings_and_output_weights")
_SHAPE_ARGS += ("no_weight_tying",)  # GPT-NeoX's untied output layer
#: Megatron-DeepSpeed's MoE (its arguments.py): ``--num-experts`` a list (``[64]``: one count for every
#: MoE layer; ``[1]``, its default, is a dense model), ``--topk``, and ``--expert-interval``: every k-th
#: layer is an MoE one (``get_num_experts_per_layer``: layer numbers divisible by k, ``num_layers // k``)
_SHAPE_ARGS += ("topk", "expert_interval")
#: which layers recompute their forward: Megatron-LM's names, and its 2021-2022 ``activations_checkpoint_*``
_RECOMPUTE_ARGS = (
    *("recompute_method", "recompute_num_layers", "num_layers_per_virtual_pipeline_stage"),
    "virtual_pipeline_model_parallel_size",
)
_RECOMPUTE_ARGS += ("activations_checkpoint_method", "activations_checkpoint_num_layers")
#: Megatron-DeepSpeed's --deepspeed: the run is DeepSpeed's too, though a rank's file may hold no engine line
_UNDER_DEEPSPEED = "deepspeed"
# only these are kept from a dump of hundreds of arguments: the others would be converted for nothing
_KEPT_ARGS = tuple(sorted({*ARG_FACTS, *_FLAG_ARGS, *_SHAPE_ARGS, *_RECOMPUTE_ARGS, _UNDER_DEEPSPEED}))
#: ``  name ........ value``: the name as a word, then the filler (dots after any whitespace, or two
#: whitespace characters: old Megatron pads long names with spaces only; a tab, which Python's
#: ``expandtabs`` would widen), the value to the end of the record
DOTTED_RECORD = (
    rf"^[ \t\r\n]*(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    rf"(?:{PYTHON_SPACE}*\.{{2,}}{PYTHON_SPACE}*|{PYTHON_SPACE}{{2,}}|\t)(?P<raw>.*)$"
)
#: GPT-NeoX pads a value with dots and says whether it is its default (``6144..........updated``)
_NEOX_INFO = r"\.{2,}(?:updated|default)$"
#: what Python's ``str.strip()`` removes from ASCII text (the dump's values are stripped so)
PYTHON_WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"


def block_recomputed_layers(
    *,
    per_chunk: pl.Expr,
    layers: pl.Expr,
    stages: pl.Expr,
    virtual_stages: pl.Expr,
    virtual_stage_layers: pl.Expr,
) -> pl.Expr:
    """The layers full recomputation's block method recomputes, null when all of them: the first
    ``per_chunk`` of each model chunk, a pipeline stage's or a virtual stage's (Megatron-LM's
    TransformerBlock._checkpointed_forward; the uniform method recomputes all). A virtual stage's layers
    are given, or only how many virtual stages a pipeline rank has (newer Megatron-LM's
    --num-virtual-stages-per-pipeline-rank leaves num_layers_per_virtual_pipeline_stage None); no stages
    given is one."""
    stages, virtual_stages = stages.fill_null(1), virtual_stages.fill_null(1)
    chunk = pl.coalesce(virtual_stage_layers, layers / (stages * virtual_stages))
    recomputed = (pl.min_horizontal(per_chunk, chunk) * layers / chunk).round().cast(pl.Int64)
    return pl.when(recomputed < layers).then(recomputed)


def _dump_facts() -> dict[str, tuple[pl.Expr, pl.Expr]]:
    """Each fact of an arguments dump: its value (null: not stated) and the order of the argument it comes
    from, over a row per dump with a column per kept argument (its text) and ``@name`` (its order)."""
    at = lambda name: pl.col(f"@{name}")  # noqa: E731
    true = lambda name: pl.col(name).str.to_lowercase() == "true"  # noqa: E731
    number = lambda name: pl.col(name).cast(pl.Int64, strict=False)  # noqa: E731 - exactly [-+]?[0-9]+
    positive = lambda name: pl.when(number(name) > 0).then(number(name))  # noqa: E731
    facts = {}
    for fact in dict.fromkeys(ARG_FACTS.values()):
        # of several names of one fact (old and new Megatron's), the last listed with an integer
        names = [name for name, its in reversed(ARG_FACTS.items()) if its == fact]
        stated = [pl.when(number(name).is_not_null()).then(at(name)) for name in names]
        facts[fact] = (pl.coalesce([number(name) for name in names]), pl.coalesce(stated))
    # GPT-NeoX's pipe_parallel_size 0 is no pipeline: one stage
    facts["pp"] = (pl.when(facts["pp"][0] == 0).then(1).otherwise(facts["pp"][0]), facts["pp"][1])
    # a precision named (GPT-NeoX); else bf16 or fp16 when one is True, fp32 when the dump names both
    named = pl.col("precision").replace_strict(_PRECISIONS, default=None)
    half = pl.when(named.is_not_null()).then(named)
    half = half.when(true("bf16")).then(pl.lit("bf16")).when(true("fp16")).then(pl.lit("fp16"))
    both = at("bf16").is_not_null() & at("fp16").is_not_null()
    facts["precision"] = (
        half.when(both).then(pl.lit("fp32")),
        pl.when(named.is_not_null())
        .then(at("precision"))
        .when(true("bf16"))
        .then(at("bf16"))
        .otherwise(at("fp16")),
    )
    # Full activation recomputation (the seed formula's factor 4): ``checkpoint_activations`` in older
    # Megatron, ``recompute_granularity full`` in newer; selective recomputation is not full.
    old, new = "checkpoint_activations", "recompute_granularity"
    on, full, named = true(old), pl.col(new) == "full", pl.coalesce(at(old), at(new))
    facts["activation_checkpointing"] = (
        pl.when(on | full).then(True).when(named.is_not_null()).then(False),
        pl.when(on).then(at(old)).when(full).then(at(new)).otherwise(named),
    )
    method = pl.coalesce(pl.col("recompute_method"), pl.col("activations_checkpoint_method"))
    recomputed = block_recomputed_layers(
        per_chunk=pl.coalesce(
            positive("recompute_num_layers"), positive("activations_checkpoint_num_layers")
        ),
        layers=positive("num_layers"),
        stages=positive("pipeline_model_parallel_size"),
        virtual_stages=positive("virtual_pipeline_model_parallel_size"),
        virtual_stage_layers=positive("num_layers_per_virtual_pipeline_stage"),
    )
    method_at = pl.coalesce(at("recompute_method"), at("activations_checkpoint_method"))
    facts["recomputed_layers"] = (pl.when((on | full) & (method == "block")).then(recomputed), method_at)
    # ``num_query_groups`` only with ``group_query_attention True`` (without it Megatron-LM prints its
    # unused default 1), or Megatron-DeepSpeed's ``num_key_value_heads`` below the heads (its validate_args
    # sets it to the heads without GQA); ``moe_topk`` and the experts' widths only when ``num_experts`` is a
    # number (None is a dense model; Megatron-DeepSpeed's list ``[1]`` is another option, DeepSpeed-MoE's)
    shared = positive("num_key_value_heads") < number("num_attention_heads")
    groups = pl.when(true("group_query_attention")).then(positive("num_query_groups"))
    groups = groups.when(shared).then(positive("num_key_value_heads"))
    groups_at = pl.when(shared).then(at("num_key_value_heads")).otherwise(at("num_query_groups"))
    facts["num_query_groups"] = (groups, groups_at)
    swiglu = pl.col("swiglu").str.to_lowercase()
    facts["swiglu"] = (pl.when(swiglu.is_in(["true", "false"])).then(swiglu == "true"), at("swiglu"))
    # the model's parameter count: one V x h matrix or two
    untie = pl.coalesce("untie_embeddings_and_output_weights", "no_weight_tying")
    untied = untie.str.to_lowercase()
    untie_at = pl.coalesce(at("untie_embeddings_and_output_weights"), at("no_weight_tying"))
    facts["untied_embeddings"] = (pl.when(untied.is_in(["true", "false"])).then(untied == "true"), untie_at)
    listed = (
        pl.col("num_experts").str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64)).list.unique()
    )
    experts = pl.coalesce(positive("num_experts"), pl.when(listed.list.len() == 1).then(listed.list.first()))
    moe = experts > 1
    topk = pl.coalesce(positive("moe_router_topk"), positive("topk"))
    facts["moe_topk"] = (pl.when(moe).then(topk), pl.coalesce(at("moe_router_topk"), at("topk")))
    facts["moe_experts"] = (pl.when(moe).then(experts), at("num_experts"))
    for name, fact in (
        ("moe_ffn_hidden_size", "moe_ffn_hidden_size"),
        (_SHARED, "moe_shared_ffn_hidden_size"),
    ):
        facts[fact] = (pl.when(moe).then(positive(name)), at(name))
    interval = positive("expert_interval")
    every_kth = pl.when(interval > 1).then(positive("num_layers") // interval)
    facts["moe_layers"] = (
        pl.when(moe).then(
            pl.coalesce(_moe_layers(pl.col("moe_layer_freq"), positive("num_layers")), every_kth)
        ),
        pl.coalesce(at("moe_layer_freq"), at("expert_interval")),
    )
    return facts


def _moe_layers(frequency: pl.Expr, layers: pl.Expr) -> pl.Expr:
    """The MoE layers of ``--moe-layer-freq``, null when all are: an integer k makes every k-th layer one
    from the first (``i % k == 0``), a list (``[0, 0, 1, 1]``, from ``"([0]*2+[1]*2)"``) marks each layer
    (Megatron-LM's ``num_floating_point_operations`` and ``get_transformer_layer_spec`` count them so)."""
    every = frequency.cast(pl.Int64, strict=False)
    marked = frequency.str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64)).list.sum()
    count = pl.when(every > 0).then((layers + every - 1) // every)
    count = count.when(frequency.str.starts_with("[")).then(marked)
    return pl.when(count < layers).then(count)


_DUMP_FACTS = _dump_facts()


def read_arguments(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The arguments dumps: each opener is a record of the family and may start a new launch (a dump after
    training steps: a requeued job appending to its log); a dump that ended (its end line, or a line that
    only comes after a dump) states its kept arguments as facts as it ends, each from its own line (the
    last of a name in the dump). A dump cut off by the end of its file states nothing."""
    frame = blocks.collect()
    openers = frame.lazy().filter(pl.col("role") == OPENER)
    # stated after the kinds' events of the record that ended it (an iteration line stating train_iters
    # too), as the Python code stated them: at the same order, polars' unstable sort picked either
    ends = (
        frame.filter(pl.col("role").is_in([CLOSER, ENDED]))
        .group_by("block")
        .agg(end=pl.col("order").min() + (PYTHON_EVENTS - 1))
    )
    args = (
        frame.filter(pl.col("role") == BODY)
        .select("block", "order", arg=pl.col("text").str.extract_groups(DOTTED_RECORD))
        .unnest("arg")
        .filter(pl.col("name").is_in(_KEPT_ARGS))
        .with_columns(value=pl.col("raw").str.strip_chars(PYTHON_WHITESPACE).str.replace(_NEOX_INFO, ""))
        .sort("block", "order")
        .unique(["block", "name"], keep="last", maintain_order=True)
        .join(ends, on="block")
    )
    dumps = args.group_by("block").agg(
        pl.col("end").first().alias("order"),
        *[pl.col("value").filter(pl.col("name") == name).first().alias(name) for name in _KEPT_ARGS],
        *[pl.col("order").filter(pl.col("name") == name).first().alias(f"@{name}") for name in _KEPT_ARGS],
    )
    facts = [
        dumps.select("order", fact=pl.lit(fact), value=value, family=pl.lit(NAME), at=at).drop_nulls("value")
        for fact, (value, at) in _DUMP_FACTS.items()
    ]
    # an integer argument beyond int64 is noted, not recorded
    fact_args = args.filter(pl.col("name").is_in(list(ARG_FACTS))).with_columns(order="end")
    notes = _too_long(fact_args, pl.col("name").replace_strict(ARG_FACTS), pl.col("value"))
    marks = [marks_of(openers, NAME, SEEN), marks_of(openers, NAME, LAUNCH)]
    under_deepspeed = dumps.filter(pl.col(_UNDER_DEEPSPEED).str.to_lowercase() == "true")
    marks.append(marks_of(under_deepspeed.lazy().select(order=f"@{_UNDER_DEEPSPEED}"), deepspeed.NAME, SEEN))
    return Events(facts=facts, notes=[notes], marks=marks)


ARGUMENTS = Block(
    family=NAME,
    name="arguments",
    opens=RecordTest(
        markers=(_DUMP_OPENER, _OLD_DUMP_OPENER),
        pattern=rf"{_DUMP_OPENER}|^{_OLD_DUMP_OPENER}\s*$",
        unless=("end of arguments",),
    ),
    closes=RecordTest(markers=("end of arguments",)),
    # lines that only come after the arguments dump: one of them ends a dump that lost its end line
    ends=RecordTest(
        markers=(
            "elapsed time per iteration",
            "time (ms)",
            "memory (MB)",
            "after training is done",
            "padded vocab",
        )
    ),
    body=RecordTest(pattern=DOTTED_RECORD),
    markers=tuple(f"{name} ." for name in _KEPT_ARGS),
    # Megatron-LM's dump has ~500 arguments; one that lost its end line and was never followed by a
    # training line states nothing
    max_lines=2000,
    swallows=True,
    read=read_arguments,
    facts=tuple(_DUMP_FACTS),
)


RANK_TIMERS = Block(
    family=NAME,
    name="rank timers",
    opens=RecordTest(markers=("time across ranks (ms):",)),
    body=RecordTest(pattern=_RANK_TIMER),
    markers=(".: ",),
    # the next step's line ends it (its timers follow it); a block lists a few dozen timers at most
    ends=RecordTest(markers=("elapsed time per iteration",)),
    max_lines=100,
    read=read_rank_timers,
)

ALL_RANKS_TIMERS = Block(
    family=NAME,
    name="all ranks' timers",
    opens=RecordTest(markers=("times across ranks (ms):",)),
    body=RecordTest(pattern=_ALL_RANKS_LINE),
    # a line a rank a timer: bounded like a block of a few dozen timers of a few thousand ranks
    ends=RecordTest(markers=("elapsed time per iteration",)),
    max_lines=200_000,
    read=read_all_ranks_timers,
)


def finish(run: RunBuilder) -> None:
    """The logged size from the model-parallel ranks' parameter counts where the log states no total: where
    every one of TP x PP printed and their sum is the model's (no copy of the embedding on the last
    pipeline stage: PP 1 or an untied output layer; no experts sharded over data-parallel ranks that print
    nothing: no MoE). Without pipelines, every tensor-parallel rank holds as many (the vocabulary is padded
    to a multiple of TP, each matrix split evenly, the norms whole on each): one rank's count TP times is
    that sum, where only some printed (NeMo logs rank 0's)."""
    ranks = run.state.get(NAME, {}).get("rank_parameters", {})
    tp, pp, facts = run.facts.get("tp"), run.facts.get("pp"), run.facts
    if "logged_model_size" in facts:  # the log's own total (Effective Tera Flops, theoretical memory) wins
        return
    if not ranks or not isinstance(tp, int) or not isinstance(pp, int) or facts.get("moe_experts"):
        return
    line = max(ranks.values())[1]
    if len(ranks) == tp * pp and (pp == 1 or facts.get("untied_embeddings") is True):
        run.set_fact("logged_model_size", sum(n for n, _ in ranks.values()) / 1e9, NAME, line)
    elif pp == 1 and len({n for n, _ in ranks.values()}) == 1:
        run.set_fact("logged_model_size", next(iter(ranks.values()))[0] * tp / 1e9, NAME, line)


FAMILY = Family(
    name=NAME,
    markers=(
        *ARGUMENTS.ends.markers,
        _DUMP_OPENER,
        _OLD_DUMP_OPENER,
        "end of arguments",
        "using world size",
        "using torch.",
        "padded vocab",
        "number of micro-batches",
        "number of microbatches",
        "successfully loaded ",
        "starting from iteration ",
        _UNLOADABLE_CHECKPOINT,
        _HELPERS_BUILD_FAILED,
        "Effective Tera Flops",
        "Total number of parameters in billions",
        "number of parameters on (tensor, pipeline)",
        *RANK_TIMERS.opens.markers,
        *ALL_RANKS_TIMERS.opens.markers,
        *PLANNED_ENDS,
        TIME_BUDGET_END,
        KILL_SWITCH,
        *CODE,
        *USAGE,
    ),
    parse_line=parse_line,
    finish=finish,
    kinds=KINDS,
    blocks=(ARGUMENTS, RANK_TIMERS, ALL_RANKS_TIMERS),
    description="Megatron-LM / Megatron-DeepSpeed: iteration lines, timers, memory, arguments dump",
)

"""DeepSpeed log family: the engine's config dump, ``step=`` lines, throughput and flops-profiler lines.

Formats read from DeepSpeed's own source (0.3.x of the 2021 logs and today's 0.19):

- ``runtime/config.py`` ``print``: ``[config.py:NNN:print]   name ..... value``, one line per
  attribute (no dots when the name is 29 characters or longer), ``zero_config`` a multi-line JSON
  object (2021) or one line of ``key=value`` pairs (pydantic, today), then ``json = {`` the user
  config as multi-line JSON (``print_user_config`` today).
- ``runtime/engine.py`` ``_report_progress``: ``[Rank 0] step=N, skipped=N, lr=[...], mom=[...]``.
- ``utils/timer.py`` ``ThroughputTimer``: ``epoch=E/micro_step=M/global_step=G, RunningAvgSamplesPerSec=X,
  CurrSamplesPerSec=Y, MemAllocated=aGB, MaxMemAllocated=bGB``.
- ``runtime/pipe/engine.py``: ``steps: N loss: X iter time (s): T samples/sec: S``.
- ``profiling/flops_profiler/profiler.py``: the ``DeepSpeed Flops Profiler`` summary block. Its
  ``iter latency`` is the fwd+bwd+step time of the one micro-batch it profiled, and its
  ``samples/second`` that micro-batch (micro batch x world size) over it: with gradient accumulation
  neither is the step's, so neither is recorded as the step's time or samples/s (the step's are the
  ThroughputTimer's ``CurrSamplesPerSec``, train_batch_size / step time). Its ``FLOPS per GPU``, a rate
  over the same latency, is the step's ``logged_tflops_per_gpu``.

DeepSpeed's ``world_size`` in its config dump is the *data-parallel* size (Megatron-DeepSpeed passes
its mpu), so it is recorded as ``dp``; it is the GPU count only when no model parallelism is in play.
Several engines in one file (a job that restarted) each print a dump: the last dump wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyparsing as pp
from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises
from pyparsing import pyparsing_common as ppc

NAME = "deepspeed"

# --- grammar -------------------------------------------------------------------------------------

number = pp.Regex(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)", re.I).set_name(
    "number"
)
number.set_parse_action(lambda t: float(t[0]))
integer = ppc.integer.copy().set_name("integer")

# DeepSpeed's progress record (engine.py ``_report_progress``): ``step=N, skipped=M, lr=[...]``, glued
# to other text or not (the character before "step=" is no word character or "/"). Whitespace between
# the parts is skipped, ``nan``/``inf`` may be in any case. The pattern opens on its literal, with the
# lookbehind after it, so re jumps to each "step=" (1.7 -> 0.4 us on a 117-character line).
_WS = r"[ \t\r\n]*"
_NUMBER = r"(?>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|(?i:nan|inf)))"
_STEP_LINE = re.compile(
    rf"step=(?<![\w/]step=){_WS}(?P<step>(?>[0-9]+)){_WS}, skipped={_WS}(?P<skipped>(?>[0-9]+)){_WS}, lr={_WS}\["
    rf"(?:{_WS}(?P<lr>{_NUMBER})(?:{_WS},{_WS}{_NUMBER})*)?{_WS}\]"
)
# ThroughputTimer's record (utils/timer.py): ``epoch=E/micro_step=M/global_step=G,
# RunningAvgSamplesPerSec=X, CurrSamplesPerSec=Y[, MemAllocated=aGB, MaxMemAllocated=bGB]``.
_THROUGHPUT_LINE = re.compile(
    rf"epoch={_WS}(?>[0-9]+){_WS}/micro_step={_WS}(?>[0-9]+){_WS}/global_step={_WS}(?P<global_step>(?>[0-9]+))"
    rf"{_WS},{_WS}RunningAvgSamplesPerSec={_WS}{_NUMBER}{_WS},{_WS}CurrSamplesPerSec={_WS}(?P<curr>{_NUMBER})"
    rf"(?:{_WS},{_WS}MemAllocated={_WS}(?P<mem>{_NUMBER}){_WS}GB,{_WS}MaxMemAllocated={_WS}(?P<max_mem>{_NUMBER}){_WS}GB)?"
)
_PIPE_ANCHOR = re.compile(re.escape("steps:"))

pipe_record = (
    pp.Suppress("steps:")
    + integer("step")
    + pp.Suppress("loss:")
    + number("loss")
    + pp.SkipTo("iter time (s):").suppress()
    + pp.Suppress("iter time (s):")
    + number("iter_time_s")
    + pp.Suppress("samples/sec:")
    + number("samples_per_sec")
).set_name("pipe_record")

_PRINT_TAG = re.compile(r"\[config\.py:\d+:print(?:_user_config)?\]")
_GLUED_TIMESTAMP = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d")
_PREFIX_SCALE = {"T": 1e12, "G": 1e9, "B": 1e9, "M": 1e6, "K": 1e3, "": 1.0, "m": 1e-3, "u": 1e-6}
# ``"key": value,`` with the value's trailing spaces in the value (the reader strips it): a lazy value
# tried the end pattern after each of its characters (~450 ns a line -> ~250 ns); test_deepspeed_hot_path
# holds it to the lazy pattern ``"(\w+)"\s*:\s*([^,\s][^,]*?)?\s*,?\s*$``.
_JSON_KEY = re.compile(r'"(\w+)"\s*:\s*([^,\s][^,]*)?,?\s*$')
# "  json = {" (print_user_config): one space around "=", not the dotted filler
_USER_CONFIG = re.compile(r"^\s*json = (.*)$")
_OFFLOAD_DEVICE = re.compile(r"device='?(\w+)'?")

#: a dump's multi-line JSON value (zero_config of 2021, json = {...}) is read at most this many lines.
JSON_MAX_LINES = 300
_JSON_FACTS = {
    "train_batch_size": "global_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
}

#: print-line names whose value is a run fact, with the converter.
_DUMP_FACTS: dict[str, tuple[str, type]] = {
    "train_batch_size": ("global_batch_size", int),
    "train_micro_batch_size_per_gpu": ("micro_batch_size", int),
    "gradient_accumulation_steps": ("gas", int),
    "zero_optimization_stage": ("zero_stage", int),
}

#: flops profiler summary labels (the text before the value) -> key in the profile record.
_PROFILE_LABELS: dict[str, str] = {
    "world size:": "world_size",
    "data parallel size:": "dp",
    "model parallel size:": "mp",
    "batch size per GPU:": "micro_batch_size",
    "params of model = params per GPU * mp_size:": "params_of_model",
    "params of model:": "params_of_model",
}
# The first label a line starts with, in the table's order (an alternation tries its branches in order at
# the start, as a loop of startswith tests did, in one call instead of eight for most of a window's lines).
_PROFILE_LABEL = re.compile("|".join(re.escape(label) for label in _PROFILE_LABELS))
_PROFILE_FACTS = {"world_size": "gpus", "dp": "dp", "micro_batch_size": "micro_batch_size"}
#: the profiler's summary block is read this many lines after its header.
PROFILE_WINDOW_LINES = 60
_PROFILE_FLOPS_LABEL = re.compile(r"^FLOPS per GPU = [\d.]+ \* fwd flops per GPU / iter latency:")
_PROFILE_HEADER = "DeepSpeed Flops Profiler"
_DUMP_HEADER = "DeepSpeedEngine configuration"
_PROFILE_STEP = re.compile(r"Profile Summary at step (\d+)")


# --- records -> builder ----------------------------------------------------------------------------


def _state(run: RunBuilder) -> dict[str, Any]:
    state = run.state.get(NAME)  # not setdefault: building the default on every line cost ~3% of a parse
    if state is None:
        state = run.state[NAME] = {"dumps": 0, "dump_facts": set(), "skipped_total": 0}
    return state


def _set(run: RunBuilder, name: str, value: Any, lineno: int) -> None:
    """Set a fact from a config dump: within one dump the first value wins (the attribute lines come
    before the user's JSON); a later dump (a relaunched engine) replaces an earlier one."""
    state = run.state[NAME]  # made by parse_line before any reader runs
    if name in state["dump_facts"]:
        return
    run.set_fact(name, value, NAME, lineno)
    if run.facts.get(name) == value:
        state["dump_facts"].add(name)


_BOOL_WORDS = {"true": True, "false": False}


def _bool(text: str) -> bool | None:
    words = text.split()  # split() drops the whitespace strip() would
    return _BOOL_WORDS.get(words[0].rstrip(",").lower()) if words else None


def _strip_glued(value: str) -> str:
    """Cut a value where another rank's record was glued onto the line."""
    glued = _GLUED_TIMESTAMP.search(value)
    return (value[: glued.start()] if glued else value).strip()


def _word_key(key: str) -> str:
    """``\bkey=`` as a pattern that opens on its literal: the lookbehind after it makes the same test
    (no word character before the key), and re jumps to each ``key=`` instead of trying ``\b`` at every
    position (5.1 -> 0.3 us on today's 1,600-character zero_config line)."""
    return rf"{key}=(?<!\w{key}=)"


#: ``key=word`` of today's one-line pydantic configs, compiled once per key (re's cache is shared with
#: every other pattern of the process, and an f-string pattern is looked up in it on every call).
_PYDANTIC_FLAGS = {key: re.compile(_word_key(key) + r"(\w+)") for key in ("enabled",)}


def _pydantic_flag(value: str, key: str) -> bool | None:
    match = _PYDANTIC_FLAGS[key].search(value)
    return _bool(match.group(1)) if match else None


def _offload_from_repr(value: str) -> bool | None:
    """``None`` / ``DeepSpeedZeroOffload...Config(device='cpu', ...)`` (today's one-line zero_config)."""
    if value.startswith("None"):
        return False
    device = _OFFLOAD_DEVICE.search(value)
    return device is not None and device.group(1) != "none"


_ZERO_CONFIG_OFFLOADS = {
    key: re.compile(_word_key(key) + r"(None|\w+\([^)]*\))") for key in ("offload_param", "offload_optimizer")
}


def _read_zero_config_line(run: RunBuilder, value: str, lineno: int) -> None:
    for key, pattern in _ZERO_CONFIG_OFFLOADS.items():
        match = pattern.search(value)
        if match:
            _set(run, key, _offload_from_repr(match.group(1)), lineno)


def _read_precision(run: RunBuilder, state: dict[str, Any], name: str, value: str, lineno: int) -> None:
    flags = state.setdefault("precision_flags", {})
    if name in ("fp16_enabled", "bfloat16_enabled", "bf16_enabled", "amp_enabled"):
        flags[name.split("_")[0]] = _bool(value)
    elif name in ("float16_config", "bfloat16_config"):
        flags["fp16" if name == "float16_config" else "bfloat16"] = _pydantic_flag(value, "enabled")
    if flags.get("fp16") or flags.get("amp"):
        _set(run, "precision", "fp16", lineno)
    elif flags.get("bfloat16") or flags.get("bf16"):
        _set(run, "precision", "bf16", lineno)


def _finish_precision(run: RunBuilder, state: dict[str, Any], lineno: int) -> None:
    """At the end of the dump's attribute list: neither fp16 nor bf16 enabled means fp32."""
    flags = state.get("precision_flags", {})
    seen_fp16 = flags.get("fp16") is not None
    seen_bf16 = flags.get("bfloat16") is not None or flags.get("bf16") is not None
    if seen_fp16 and seen_bf16 and not any(flags.values()):
        _set(run, "precision", "fp32", lineno)


def _read_world_size(run: RunBuilder, value: str, lineno: int) -> None:
    try:
        world = int(value.split()[0])
    except (ValueError, IndexError, OverflowError):
        return
    _set(run, "dp", world, lineno)
    facts = run.facts  # the tests spelled out: a generator for two names cost more than the tests
    model_parallel = (
        (facts.get("tp") or 1) > 1 or (facts.get("pp") or 1) > 1 or "megatron" in run.families_seen
    )
    if not model_parallel:
        _set(run, "gpus", world, lineno)


def _start_dump(state: dict[str, Any]) -> None:
    """A new dump: its values replace the earlier dump's (``dumps`` counts them; 0 until the first)."""
    state["dumps"] += 1
    state["dump_facts"] = set()
    state["precision_flags"] = {}
    state["json_path"] = []


#: the print names ``_read_precision`` reads; on other names its flags, and so its outcome, are unchanged.
_PRECISION_NAMES = frozenset(
    ("fp16_enabled", "bfloat16_enabled", "bf16_enabled", "amp_enabled", "float16_config", "bfloat16_config")
)


#: the print names ``_read_named_value`` reads: on any other name it does nothing.
_NAMES_READ = (
    frozenset(_DUMP_FACTS) | {"world_size", "zero_config", "zero_enabled", "json"} | _PRECISION_NAMES
)


def _read_print_record(run: RunBuilder, state: dict[str, Any], record: str, lineno: int) -> None:
    if _DUMP_HEADER in record and record.strip().startswith(_DUMP_HEADER):  # the C substring test first
        _start_dump(state)
        return
    user_config = _USER_CONFIG.match(record) if "json = " in record else None  # the pattern's literal first
    parsed = ("json", user_config.group(1)) if user_config else grammar.dotted(record.strip())
    if parsed is not None:
        _read_print_value(run, state, parsed[0], _strip_glued(parsed[1]), lineno)


#: the facts the keys of a JSON value can set, each through ``_set``: ``_read_json_value`` reads the
#: offload, precision and stage keys at any depth, the batch keys only at the top of ``json``.
_NESTED_JSON_FACTS = frozenset(("offload_param", "offload_optimizer", "precision", "zero_stage"))
_USER_CONFIG_FACTS = _NESTED_JSON_FACTS | frozenset(_JSON_FACTS.values())


def _json_value_facts(name: str) -> frozenset[str]:
    """The facts the JSON value of attribute ``name`` can set."""
    return _USER_CONFIG_FACTS if name == "json" else _NESTED_JSON_FACTS


def _read_print_value(run: RunBuilder, state: dict[str, Any], name: str, value: str, lineno: int) -> None:
    """One ``name ..... value`` attribute of a dump (``value`` stripped, glued records cut off)."""
    if not state["dumps"]:
        _start_dump(state)  # a dump whose header line was lost in the interleaving
    if state["json_path"] or NAME in run.capturing:
        _close_json(run, state)
    if name in _NAMES_READ:  # most of a dump's attributes are not: for them the bookkeeping is all
        _read_named_value(run, state, name, value, lineno)  # (it reads no JSON state: first, see below)
    # the value continues on the following lines, which carry no marker: ask for those that can matter.
    # Only for an attribute the family reads: the others' lines do not reach it (FAMILY's markers), and
    # the multi-line values DeepSpeed prints for them (activation_checkpointing_config,
    # flops_profiler_config, autotuning_config) hold no key _read_json_value reads. None can matter when
    # every fact its keys could set is settled in this dump already (_set leaves those alone), as for
    # most user configs (json = {...}, restating the attributes above it, a third of a dump's lines): the
    # value is then not read at all (the value is stripped)
    if value.endswith("{") and name in _NAMES_READ and not _json_value_facts(name) <= state["dump_facts"]:
        state["json_path"], state["json_line"] = [name], lineno
        run.capture(NAME, lines=_JSON_LINES)


def _read_named_value(run: RunBuilder, state: dict[str, Any], name: str, value: str, lineno: int) -> None:
    if name in _DUMP_FACTS:
        fact, convert = _DUMP_FACTS[name]
        try:
            _set(run, fact, convert(float(value.split()[0])), lineno)
        except (ValueError, IndexError, OverflowError):
            return
    elif name == "world_size":
        _read_world_size(run, value, lineno)
    elif name == "zero_config":
        _read_zero_config_line(run, value, lineno)
    elif name == "zero_enabled" and _bool(value) is False:
        _set(run, "zero_stage", 0, lineno)
    elif name == "json":
        _finish_precision(run, state, lineno)
    if name in _PRECISION_NAMES:
        # the flags change only here, and a precision set from them is settled at once (set, or refused
        # for good because another family stated it): re-checking them on every other line changes nothing
        _read_precision(run, state, name, value, lineno)


def _close_json(run: RunBuilder, state: dict[str, Any]) -> None:
    state["json_path"] = []
    run.capture(NAME, on=False)


#: JSON keys ``_read_json_value`` reads; lines with other keys (most of a dump) only open or close objects.
_JSON_VALUE_KEYS = frozenset(
    ("offload_param", "offload_optimizer", "device", "enabled", "stage", "cpu_offload", "cpu_offload_params")
) | frozenset(_JSON_FACTS)
_QUOTED_JSON_VALUE_KEY = re.compile("|".join(f'"{key}"' for key in sorted(_JSON_VALUE_KEYS)))
#: what Python's ``\s`` and ``str.strip()`` take for whitespace, in polars' (Rust) regex syntax: Rust's
#: ``\s`` (Unicode White_Space) lacks the separators \x1c-\x1f that Python counts as whitespace.
_PYTHON_SPACE = r"[\s\x1c-\x1f]"
#: the raw lines (polars searches them before launcher prefixes are cut and glued ranks split) that can
#: change what an open JSON value records: a key the reader reads; a key whose value opens an object
#: (``"fp16": {``: ``_JSON_KEY``'s value starts right after the colon and its spaces); a record that
#: starts with ``}`` after whitespace (where a record can start: the line's start, a CR, the ':' ending
#: a launcher prefix or a rank's tag), which closes one; and a print record, which ends the value
#: (``_read_print_value``; its own markers route only the attributes the family reads). A bare "{" or
#: "}" matched every line of a one-line dict and every brace of the other attributes' values.
_JSON_LINES = "|".join(
    [
        rf'"{_PYTHON_SPACE}*:{_PYTHON_SPACE}*\{{',
        rf"(?:^|[\r:]){_PYTHON_SPACE}*\}}",
        re.escape(":print"),
        *(re.escape(f'"{key}"') for key in sorted(_JSON_VALUE_KEYS)),
    ]
)


def _read_json_line(run: RunBuilder, state: dict[str, Any], path: list[str], text: str, lineno: int) -> None:
    """A line of a dump's multi-line JSON value: the offload settings (2021 ``zero_config``), and the
    batch/precision/stage values again (``json = {...}``) for dumps whose attribute lines were lost in
    the interleaving. ``path`` (the state's ``json_path``, not empty) is the chain of objects the line
    is in, e.g. ``[json, fp16]``."""
    if lineno - state["json_line"] > JSON_MAX_LINES:
        _close_json(run, state)
        return
    stripped = text.strip()
    if stripped.startswith("}"):
        path.pop()
        if not path:
            _close_json(run, state)
        return
    # the line changes something only if it opens an object or names a key _read_json_value reads, and
    # both show as a substring: the key pattern (~2 us a line) runs on a third of a dump's JSON lines
    if "{" not in stripped and _QUOTED_JSON_VALUE_KEY.search(stripped) is None:
        return
    match = _JSON_KEY.search(stripped)
    if not match:
        return
    key, value = match.group(1, 2)
    value = (value or "").strip()
    if value.startswith("{"):
        path.append(key)
        return
    if key in _JSON_VALUE_KEYS:
        _read_json_value(run, path, key, value, lineno)


def _read_json_value(run: RunBuilder, path: list[str], key: str, value: str, lineno: int) -> None:
    parent = path[-1]
    if key in ("offload_param", "offload_optimizer") and value == "null":
        _set(run, key, False, lineno)
    elif key == "device" and parent in ("offload_param", "offload_optimizer"):
        _set(run, parent, value.strip('"') not in ("none", "null"), lineno)
    elif key == "enabled" and parent in ("fp16", "bf16", "bfloat16") and _bool(value):
        _set(run, "precision", "fp16" if parent == "fp16" else "bf16", lineno)
    elif key == "stage" and parent in ("zero_optimization", "zero_config"):
        _set_number(run, "zero_stage", value, lineno)
    elif key in _JSON_FACTS and path == ["json"]:
        _set_number(run, _JSON_FACTS[key], value, lineno)
    elif key in ("cpu_offload", "cpu_offload_params"):  # DeepSpeed 0.3.x ZeRO-Offload switches
        _set(run, "offload_optimizer" if key == "cpu_offload" else "offload_param", _bool(value), lineno)


def _set_number(run: RunBuilder, name: str, text: str, lineno: int) -> None:
    """An integer fact printed as ``8``, ``8.0`` or ``8.000000e+00`` (DeepSpeed's JSON encoder); "auto" is skipped."""
    try:
        _set(run, name, int(float(text.strip().rstrip(","))), lineno)
    except (ValueError, OverflowError):
        return


_PIPE_MICRO_BATCHES = re.compile(r"CONFIG: micro_batches=(\d+) micro_batch_size=(\d+)")
_UNIQUE_PARAMS = re.compile(r"UNIQUE_PARAMS=(\d+)")  # every rank's engine prints it: compiled once


def _read_pipe_config(run: RunBuilder, text: str, lineno: int) -> None:
    """Pipeline engine: ``CONFIG: micro_batches=256 micro_batch_size=4`` and its ``UNIQUE_PARAMS=`` count."""
    # every rank prints a UNIQUE_PARAMS= line, one rank the CONFIG line: its literal is looked for first
    micro_batches = _PIPE_MICRO_BATCHES.search(text) if "CONFIG: micro_batches=" in text else None
    if micro_batches:
        run.set_fact("gas", int(micro_batches.group(1)), NAME, lineno)
        run.set_fact("micro_batch_size", int(micro_batches.group(2)), NAME, lineno)
        run.saw(NAME)
    unique = _UNIQUE_PARAMS.search(text)
    if unique:
        run.set_fact("logged_model_size", int(unique.group(1)) / 1e9, NAME, lineno)
        run.saw(NAME)


def scan(record: pp.ParserElement, anchor: re.Pattern[str], text: str) -> Iterator[pp.ParseResults]:
    """What ``record.scan_string(text)`` yields, tried only where ``anchor`` (the record's leading
    literal) matches: scan_string tries every character, ~5 us each, ~2 ms for one DeepSpeed line.
    Tabs are expanded first, as scan_string does, so offsets agree."""
    text = text.expandtabs() if "\t" in text else text
    pos = 0
    while (found := anchor.search(text, pos)) is not None:
        for tokens, _, end in record.scan_string(text[found.start() :], max_matches=1):
            yield tokens
            pos = found.start() + end
            break
        else:
            return


def step_records(text: str) -> Iterator[tuple[int, int, float | None]]:
    """``(step, skipped, first lr or None)`` of each ``step_record`` in ``text``, as ``scan`` finds them."""
    text = text.expandtabs() if "\t" in text else text
    for match in _STEP_LINE.finditer(text):
        lr = match["lr"]
        yield int(match["step"]), int(match["skipped"]), None if lr is None else float(lr)


def _read_step(run: RunBuilder, state: dict[str, Any], text: str, lineno: int) -> None:
    for step, skipped_total, lr in step_records(text):
        if step == 0:
            state["skipped_total"] = skipped_total  # printed at engine start, before any training step
            continue
        # skipped= is cumulative since the start; the iterations frame counts skips per logged step.
        skipped = max(skipped_total - state["skipped_total"], 0)
        state["skipped_total"] = skipped_total
        run.add_iteration(step, NAME, lineno, lr=lr, skipped=skipped)
        run.saw(NAME)


def throughput_records(text: str) -> Iterator[tuple[int, float, float | None, float | None]]:
    """``(global_step, curr_samples_per_sec, mem_allocated_gb, max_mem_allocated_gb)`` of each
    ``throughput_record`` in ``text``, as ``scan`` finds them (no memory part: None, None)."""
    text = text.expandtabs() if "\t" in text else text
    for match in _THROUGHPUT_LINE.finditer(text):
        mem, max_mem = match.group("mem", "max_mem")
        yield (
            int(match["global_step"]),
            float(match["curr"]),
            None if mem is None else float(mem),
            None if max_mem is None else float(max_mem),
        )


def _read_throughput(run: RunBuilder, text: str, lineno: int) -> None:
    for step, samples_per_sec, mem, max_mem in throughput_records(text):
        run.add_iteration(
            step,
            NAME,
            lineno,
            samples_per_sec=samples_per_sec,
            # DeepSpeed divides by 1024**3 and rounds to 0.01 "GB": back to MiB like Megatron's memory (MB).
            mem_allocated_mb=None if mem is None else mem * 1024,
            mem_max_allocated_mb=None if max_mem is None else max_mem * 1024,
        )
        run.saw(NAME)


def _read_pipe(run: RunBuilder, text: str, lineno: int) -> None:
    for tokens in scan(pipe_record, _PIPE_ANCHOR, text):
        run.add_iteration(
            tokens["step"],
            NAME,
            lineno,
            loss=tokens["loss"],
            elapsed_ms=tokens["iter_time_s"] * 1000,
            samples_per_sec=tokens["samples_per_sec"],
        )
        run.saw(NAME)


# A profiler value, number_to_string() with a unit prefix: "1.2 B", "2.63 K", "20.74 K ", "143.52 M" of
# "143.52 MFLOPS", "377.89 u" of "377.89 us". One compiled pattern, not a grammar: pyparsing cost ~50 us
# a call, and the profiler block is read on every rank's copy.
_SCALED_VALUE = re.compile(rf"{_WS}(?P<value>{_NUMBER}){_WS}(?P<prefix>[TGBMKmu])?{_WS}\Z")


def _scaled(text: str, unit: str = "") -> float | None:
    """``2.63 K`` -> 2630.0; ``377.89 us`` (unit ``s``) -> 0.00037789."""
    body = text.strip()
    if unit and body.endswith(unit):
        body = body[: -len(unit)].strip()
    parsed = _SCALED_VALUE.match(body)
    if parsed is None:
        return None
    return float(parsed["value"]) * _PREFIX_SCALE[parsed["prefix"] or ""]


def _read_profile_line(run: RunBuilder, state: dict[str, Any], text: str, lineno: int) -> None:
    if _PROFILE_HEADER in text:
        state["profile"] = {"line": lineno}
        state["profile_end"] = lineno + PROFILE_WINDOW_LINES  # for parse_line's check before calling
        return
    profile = state.get("profile")
    if profile is None or lineno - profile["line"] > PROFILE_WINDOW_LINES:
        return
    # the window's other lines (most of it) are tested with the C substring and prefix tests first
    step = _PROFILE_STEP.search(text) if "Profile Summary at step " in text else None
    if step:
        profile["step"], profile["step_line"] = int(step.group(1)), lineno
        return
    stripped = text.strip()
    if stripped.startswith("FLOPS per GPU = ") and _PROFILE_FLOPS_LABEL.match(stripped):
        flops = _scaled(stripped.split(":", 1)[1], "FLOPS")
        _record_profile_metrics(
            run, profile, lineno, logged_tflops_per_gpu=None if flops is None else flops / 1e12
        )
        return
    label = _PROFILE_LABEL.match(stripped)
    if label is not None:
        _read_profile_value(run, _PROFILE_LABELS[label.group()], stripped[label.end() :], lineno)


def _read_profile_value(run: RunBuilder, key: str, text: str, lineno: int) -> None:
    """The profiler's own numbers: its world size is the whole job (it prints dp and mp separately)."""
    value = _scaled(text)
    if value is None:
        return
    if key in _PROFILE_FACTS:
        run.set_fact(_PROFILE_FACTS[key], int(value), NAME, lineno)
    elif key == "params_of_model":
        run.set_fact("logged_model_size", value / 1e9, NAME, lineno)


def _record_profile_metrics(
    run: RunBuilder, profile: dict[str, Any], lineno: int, **metrics: float | None
) -> None:
    """Metrics of the profiled step (``Profile Summary at step N`` uses the engine's global step count)."""
    step = profile.get("step")
    if step is None or all(value is None for value in metrics.values()):
        return
    # the row points at "Profile Summary at step N", the line that says which step these are
    run.add_step_metrics(step, NAME, profile["step_line"], **metrics)
    run.saw(NAME)


def _read_print_tags(run: RunBuilder, state: dict[str, Any], text: str, lineno: int) -> int:
    """The config printer's records of a line (one, or several ranks' glued together); how many."""
    tags = list(_PRINT_TAG.finditer(text))
    for index, tag in enumerate(tags):
        end = tags[index + 1].start() if index + 1 < len(tags) else len(text)
        _read_print_record(run, state, text[tag.end() : end], lineno)
        run.saw(NAME)
    return len(tags)


#: how the filler after an attribute's name can start (``grammar.dotted``: dots, or two spaces, tabs
#: expanded): DeepSpeed's printer writes a space and the dots, or two spaces for a name of 29 characters
#: or more. Other whitespace right after a name (a form feed, a non-ASCII space) is no printer's.
_FILLER_STARTS = ("  ", " .", " \t", "..", "\t")
#: the config printer's lines that can change what the family records: the dump's header (a later dump
#: replaces an earlier one), and the attributes it reads, ``json = `` among them. Any other attribute
#: changes nothing once a dump started; until then, the first attribute read starts it, with the same
#: result. While a JSON value is open its capture (``_JSON_LINES``) takes every print line, which ends it.
_PRINT_MARKERS = (
    _DUMP_HEADER,
    "json = ",
    *(name + start for name in sorted(_NAMES_READ) for start in _FILLER_STARTS),
)


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one line of DeepSpeed output into ``run``; never raises."""
    # one state lookup per line (inline: the state is never empty once made), passed down; the tag's
    # literal is looked for before the pattern
    state = run.state.get(NAME) or _state(run)
    if ":print" in text and _read_print_tags(run, state, text, lineno):
        # a line of the dump is no JSON value or profiler line, but a step record may be glued onto it
        if "=" in text or "iter time (s):" in text:
            _read_records(run, state, text, lineno)
        return
    # a JSON value is read only while its capture is on: the reader ends every capture with its file, so
    # a value left open at the end of a job's .out does not swallow lines of its .err (whose line
    # numbers start again, so JSON_MAX_LINES could not end it there)
    json_path = state.get("json_path") if NAME in run.capturing else None
    if json_path:
        _read_json_line(run, state, json_path, text, lineno)
    if "=" in text or "iter time (s):" in text:
        _read_records(run, state, text, lineno)
    # most lines neither start a profiler block nor fall in an open one's window: no call for them
    if _PROFILE_HEADER in text or lineno <= state.get("profile_end", 0):
        _read_profile_line(run, state, text, lineno)


def _read_records(run: RunBuilder, state: dict[str, Any], text: str, lineno: int) -> None:
    """The step, throughput and pipeline records of a line (each holds a "=" but the pipeline's steps,
    which parse_line tests before the call: most dump and JSON lines hold neither)."""
    if "step=" in text and "skipped=" in text:
        _read_step(run, state, text, lineno)
    if "SamplesPerSec=" in text:
        _read_throughput(run, text, lineno)
    if "iter time (s):" in text:
        _read_pipe(run, text, lineno)
    if "CONFIG: micro_batches=" in text or "UNIQUE_PARAMS=" in text:
        _read_pipe_config(run, text, lineno)


def evidence(run: RunBuilder) -> int:
    """Records of DeepSpeed's own lines; a config dump alone is enough to call a run DeepSpeed."""
    return run.families_seen.get(NAME, 0)


FAMILY = Family(
    name=NAME,
    markers=(
        *_PRINT_MARKERS,
        "step=",
        "SamplesPerSec=",
        "iter time (s):",
        "CONFIG: micro_batches=",
        "UNIQUE_PARAMS=",
        _PROFILE_HEADER,
        "Profile Summary at step",
        "world size:",
        "data parallel size:",
        "model parallel size:",
        "batch size per GPU:",
        "params of model",
        "FLOPS per GPU =",
    ),
    parse_line=parse_line,
    evidence=evidence,
    description="DeepSpeed engine: config dump, step=/throughput lines, pipeline steps, flops profiler",
)

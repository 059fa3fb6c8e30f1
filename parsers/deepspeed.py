"""DeepSpeed log family: the engine's config dump, ``step=`` lines, throughput and flops-profiler lines.

Formats read from DeepSpeed's own source (0.3.x of the 2021 logs and today's 0.19):

- ``runtime/config.py`` ``print``: ``[config.py:NNN:print]   name ..... value``, one line per
  attribute (no dots when the name is 29 characters or longer), ``zero_config`` a multi-line JSON
  object (2021) or one line of ``key=value`` pairs (pydantic, today), then ``json = {`` the user
  config as multi-line JSON (``print_user_config`` today).
- ``runtime/engine.py`` ``_report_progress``: ``[Rank 0] step=N, skipped=N, lr=[...], mom=[...]``.
- ``utils/timer.py`` ``ThroughputTimer``: ``epoch=E/micro_step=M/global_step=G, RunningAvgSamplesPerSec=X,
  CurrSamplesPerSec=Y, MemAllocated=aGB, MaxMemAllocated=bGB``.
- ``runtime/pipe/engine.py``: ``steps: N loss: X iter time (s): T samples/sec: S``, and at start
  ``CONFIG: micro_batches=N micro_batch_size=M`` and every rank's ``UNIQUE_PARAMS=N``.
- ``profiling/flops_profiler/profiler.py``: the ``DeepSpeed Flops Profiler`` summary block. Its
  ``iter latency`` is the fwd+bwd+step time of the one micro-batch it profiled, and its
  ``samples/second`` that micro-batch (micro batch x world size) over it: with gradient accumulation
  neither is the step's, so neither is recorded as the step's time or samples/s (the step's are the
  ThroughputTimer's ``CurrSamplesPerSec``, train_batch_size / step time). Its ``FLOPS per GPU``, a rate
  over the same latency, is the step's ``logged_tflops_per_gpu``.

DeepSpeed's ``world_size`` in its config dump is the *data-parallel* size (Megatron-DeepSpeed passes
its mpu), so it is recorded as ``dp``; it is the GPU count only when no model parallelism is in play.
Several engines in one file (a job that restarted) each print a dump: the last dump wins.

Everything is read column-wise (no record is left to Python), in two record kinds:

- ``SEQUENCE``, the records whose meaning depends on the run's records before them, read in order, in
  segments, each after the carry of the one before: the config printer's (which dump, what it said
  before), the step records (``skipped=`` counts since the start) and the profiler's summary lines (60
  lines after its header); and the lines of the dumps' multi-line JSON values (which value, which
  object), which carry no marker: the block ``JSON_VALUES`` finds them after the printer's records that
  may open one and hands them to SEQUENCE. No segment ends inside a JSON value or a profiler summary
  (``PROFILE``, a block for that alone);
- ``RECORDS``, the throughput, pipeline step and pipeline config records, each read alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import (
    PYTHON_EVENTS,
    PYTHON_SPACE,
    RECORD,
    SEEN,
    STEP_METRICS,
    STEP_METRICS_SCHEMA,
    Block,
    Events,
    RecordKind,
    RecordTest,
)

NAME = "deepspeed"

# --- what every reader uses --------------------------------------------------------------------------

#: whitespace the grammars skipped between tokens
_WS = r"[ \t\r\n]*"
#: a number as DeepSpeed's records were read (Python's ``float()`` read each match; polars reads the ASCII
#: ones: a number in other digits is none)
NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|(?i:nan|inf))"
#: the first index of DeepSpeed's events in a record: a record glued from a Megatron rank's iteration line
#: and DeepSpeed's step line holds both families' events, Megatron's at the first indexes (all below
#: ``PYTHON_EVENTS``)
_EVENT_BASE = 64
#: a character put before each piece of a record split apart (``_pieces``)
_CUT = "\x00"
#: the step events of a record are numbered in this order: step records, throughput, pipeline steps, and
#: the profiler's (at its ``Profile Summary`` record)
_STEP, _THROUGHPUT, _PIPE, _PROFILE = range(4)


#: the characters Python's ``str.strip()`` removes (``str.isspace``; Rust's whitespace lacks \x1c-\x1f)
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _strip(text: pl.Expr) -> pl.Expr:
    """``str.strip()``."""
    return text.str.strip_chars(WHITESPACE)


def _first_word(text: pl.Expr) -> pl.Expr:
    """``text.split()[0]`` (null for blank text)."""
    return text.str.extract(rf"^{PYTHON_SPACE}*([^\s\x1c-\x1f]+)", 1)


def _as_bool(text: pl.Expr) -> pl.Expr:
    """True or False for a first word ``true`` / ``false`` (any case, a trailing comma), else null."""
    word = _first_word(text).str.strip_chars_end(",").str.to_lowercase()
    return pl.when(word == "true").then(True).when(word == "false").then(False)


def _as_int(number: pl.Expr) -> pl.Expr:
    """A finite float truncated as ``int()`` does, as int64 (null beyond it)."""
    return pl.when(number.is_finite()).then(number.cast(pl.Int64, strict=False))


def _divided(number: pl.Expr, divisor: float) -> pl.Expr:
    """``number / divisor`` as Python divides: polars turns a division by a literal into a product with its
    reciprocal, one rounding more (2630 / 1e9 is 2.63e-06, 2630 * 1e-9 is 2.6300000000000002e-06)."""
    return number / pl.int_range(pl.len()).cast(pl.Float64).clip(divisor, divisor)


def _too_long(name: str | pl.Expr, value: pl.Expr) -> pl.Expr:
    """The note ``RunBuilder.fits`` writes for an integer beyond int64 (``value``: a wider number)."""
    return pl.format(
        "{}={} does not fit a 64-bit integer; not recorded",
        pl.lit(name) if isinstance(name, str) else name,
        value.cast(pl.String),
    )


def _wide(text: pl.Expr) -> pl.Expr:
    """An integer's digits as a number wider than int64 (for its note)."""
    return text.cast(pl.Decimal(38, 0), strict=False)


def _pieces(records: pl.DataFrame, starts: str, *, literal: bool) -> pl.LazyFrame:
    """Each record of ``records`` cut before every match of ``starts``: a row per piece that starts with
    one (``piece``), with the record's columns, the piece's ``item`` (1 for the first) and the text
    ``before`` it (the previous piece)."""
    cut = pl.col("text").str.replace_all(starts, _CUT + (starts if literal else "$0"), literal=literal)
    return (
        records.lazy()
        .with_columns(piece=cut.str.split(_CUT))
        .with_columns(item=pl.int_ranges(pl.col("piece").list.len()))
        .explode("piece", "item")
        # a record's pieces are rows in a row, its first one (item 0) before the others
        .with_columns(before=pl.col("piece").shift(1))
        .filter(pl.col("item") > 0)
    )


@dataclass
class _Parts:
    """Events a reader found, their step events not numbered yet: each carries the order of the record
    it belongs to, a ``band`` (who made it) and a ``seq`` (its place among the band's), which
    ``_events`` turns into the event's index in the record."""

    steps: list[pl.DataFrame] = field(default_factory=list)
    facts: list[pl.DataFrame] = field(default_factory=list)
    notes: list[pl.DataFrame] = field(default_factory=list)
    marks: list[pl.DataFrame] = field(default_factory=list)

    def add(self, other: _Parts) -> _Parts:
        for name in ("steps", "facts", "notes", "marks"):
            getattr(self, name).extend(getattr(other, name))
        return self


def _step_frame(frame: pl.DataFrame, band: int, mode: int = RECORD, **metrics: pl.Expr) -> pl.DataFrame:
    """Step events (``order``, ``seq``, ``step`` of ``frame``) with ``metrics``, every other metric null."""
    return frame.select(
        "order",
        "seq",
        "step",
        band=pl.lit(band, dtype=pl.Int8),
        mode=pl.lit(mode, dtype=pl.Int8),
        family=pl.lit(NAME),
        **{
            column: metrics[column].cast(dtype) if column in metrics else pl.lit(None, dtype=dtype)
            for column, dtype in STEP_METRICS_SCHEMA.items()
        },
    )


def _seen(frame: pl.DataFrame) -> pl.DataFrame:
    """A mark per row of ``frame``: a record of the family, as ``RunBuilder.saw`` counted one."""
    return frame.select("order", mark=pl.lit(SEEN), family=pl.lit(NAME), text=pl.lit(None, dtype=pl.String))


def _notes(frame: pl.DataFrame, message: pl.Expr) -> pl.DataFrame:
    return frame.select("order", family=pl.lit(NAME), message=message).drop_nulls("message")


def _events(parts: _Parts) -> Events:
    """``parts`` as the engine takes them: the step events of a record numbered from ``_EVENT_BASE``."""
    events = Events(facts=parts.facts, notes=parts.notes, marks=parts.marks)
    if parts.steps:
        steps = pl.concat(parts.steps).sort("order", "band", "seq")
        index = pl.int_range(pl.len()).over("order").clip(upper_bound=PYTHON_EVENTS - 1 - _EVENT_BASE)
        events.steps.append(
            steps.with_columns(order=pl.col("order") + _EVENT_BASE + index).drop("band", "seq")
        )
    return events


# --- the records read alone: throughput, pipeline steps, pipeline config (kind RECORDS) ---------------

#: ThroughputTimer's record; its memory part is all or nothing
THROUGHPUT = (
    rf"epoch={_WS}[0-9]+{_WS}/micro_step={_WS}[0-9]+{_WS}/global_step={_WS}([0-9]+)"
    rf"{_WS},{_WS}RunningAvgSamplesPerSec={_WS}{NUMBER}{_WS},{_WS}CurrSamplesPerSec={_WS}({NUMBER})"
    rf"(?:{_WS},{_WS}MemAllocated={_WS}({NUMBER}){_WS}GB,{_WS}MaxMemAllocated={_WS}({NUMBER}){_WS}GB)?"
)
#: the pipeline engine's step record. Its ``iter time (s):`` is the first one after the loss (the old
#: grammar skipped to it); a record whose first one is not followed by a number and ``samples/sec:`` but
#: a later one is, is read at the later one (the grammar read none).
PIPE_STEPS = (
    rf"steps:{_WS}([0-9]+){_WS}loss:{_WS}({NUMBER}).*?iter time \(s\):{_WS}({NUMBER}){_WS}"
    rf"samples/sec:{_WS}({NUMBER})"
)
PIPE_CONFIG = r"CONFIG: micro_batches=(\d+) micro_batch_size=(\d+)"
UNIQUE_PARAMS = r"UNIQUE_PARAMS=(\d+)"
_RECORD_MARKERS = ("SamplesPerSec=", "iter time (s):", "CONFIG: micro_batches=", "UNIQUE_PARAMS=")
_RECORDS_TEST = RecordTest(
    markers=_RECORD_MARKERS,
    pattern="|".join(f"(?:{pattern})" for pattern in (THROUGHPUT, PIPE_STEPS, PIPE_CONFIG, UNIQUE_PARAMS)),
)


def _matches(records: pl.DataFrame, pattern: str, names: list[str]) -> pl.DataFrame:
    """Every match of ``pattern`` in each record, left to right: ``order`` (the record's), ``seq`` (the
    match's index), the groups as ``names``, ``step`` (of the first group)."""
    return (
        records.select("order", match=pl.col("text").str.extract_all(pattern))
        .explode("match")
        .drop_nulls("match")
        .with_columns(seq=pl.int_range(pl.len()).over("order"))
        .with_columns(pl.col("match").str.extract_groups(pattern).struct.rename_fields(names).alias("groups"))
        .unnest("groups")
        .with_columns(step=pl.col(names[0]).cast(pl.Int64, strict=False))
    )


def _steps_too_long(found: pl.DataFrame, text: str) -> pl.DataFrame:
    """Notes for the steps beyond int64 (``RunBuilder.fits``: such a step records nothing)."""
    return _notes(found.filter(pl.col("step").is_null()), _too_long("iteration", _wide(pl.col(text))))


def _real(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Float64, strict=False)


def _throughput(records: pl.DataFrame) -> _Parts:
    """A step event per throughput record: ``CurrSamplesPerSec`` and the memory, GB (DeepSpeed divides by
    1024**3 and rounds to 0.01 "GB") back to MiB like Megatron's memory (MB)."""
    found = _matches(records, THROUGHPUT, ["global_step", "curr", "mem", "max_mem"])
    steps = _step_frame(
        found.drop_nulls("step"),
        _THROUGHPUT,
        samples_per_sec=_real("curr"),
        mem_allocated_mb=_real("mem") * 1024,
        mem_max_allocated_mb=_real("max_mem") * 1024,
    )
    return _Parts(steps=[steps], notes=[_steps_too_long(found, "global_step")], marks=[_seen(found)])


def _pipe_steps(records: pl.DataFrame) -> _Parts:
    """A step event per pipeline step record: its loss, time (s, as ms) and samples/s."""
    found = _matches(records, PIPE_STEPS, ["steps", "loss", "seconds", "rate"])
    steps = _step_frame(
        found.drop_nulls("step"),
        _PIPE,
        loss=_real("loss"),
        elapsed_ms=_real("seconds") * 1000,
        samples_per_sec=_real("rate"),
    )
    return _Parts(steps=[steps], notes=[_steps_too_long(found, "steps")], marks=[_seen(found)])


def _count_fact(frame: pl.DataFrame, fact: str, text: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The fact ``fact`` of the integer ``text`` of each row, and notes for those beyond int64."""
    valued = frame.with_columns(value=pl.col(text).cast(pl.Int64, strict=False))
    facts = valued.drop_nulls("value").select("order", fact=pl.lit(fact), value="value", family=pl.lit(NAME))
    long = valued.filter(pl.col("value").is_null(), pl.col(text).str.contains(r"^[0-9]+$"))
    return facts, _notes(long, _too_long(fact, _wide(pl.col(text))))


def _pipe_config(records: pl.DataFrame) -> _Parts:
    """``CONFIG: micro_batches=256 micro_batch_size=4`` (gradient accumulation steps and micro batch) and
    ``UNIQUE_PARAMS=`` (the model size, in billions), the first of each in a record."""
    config = (
        records.select(
            "order",
            pl.col("text").str.extract_groups(PIPE_CONFIG).struct.rename_fields(["gas", "micro"]).alias("g"),
        )
        .unnest("g")
        .drop_nulls("gas")
    )
    unique = records.select("order", params=pl.col("text").str.extract(UNIQUE_PARAMS, 1)).drop_nulls("params")
    gas, gas_notes = _count_fact(config, "gas", "gas")
    micro, micro_notes = _count_fact(config, "micro_batch_size", "micro")
    size = unique.select(
        "order", fact=pl.lit("logged_model_size"), value=_divided(_real("params"), 1e9), family=pl.lit(NAME)
    ).drop_nulls("value")
    return _Parts(
        facts=[pl.concat([gas, micro]), size],
        notes=[gas_notes, micro_notes],
        marks=[_seen(config), _seen(unique)],
    )


def _record_parts(records: pl.DataFrame) -> _Parts:
    """The throughput, pipeline step and pipeline config records in ``records`` (``order``, ``text``)."""
    return _throughput(records).add(_pipe_steps(records)).add(_pipe_config(records))


def read_records(records: pl.LazyFrame) -> Events:
    """The kind RECORDS."""
    return _events(_record_parts(records.collect()))


RECORDS = RecordKind(
    family=NAME,
    name="records",
    test=_RECORDS_TEST,
    read=read_records,
    facts=("gas", "micro_batch_size", "logged_model_size"),
)


# --- the steps: ``step=N, skipped=M, lr=[...]`` ----------------------------------------------------------

#: a step record from its ``step=`` on (the character before ``step=`` is no word character nor ``/``)
STEP_RECORD = (
    rf"^step={_WS}([0-9]+){_WS}, skipped={_WS}([0-9]+){_WS}, lr={_WS}\["
    rf"(?:{_WS}({NUMBER})(?:{_WS},{_WS}{NUMBER})*)?{_WS}\]"
)
_HOLDS_STEP_RECORD = r"(?:^|[^\w/])" + STEP_RECORD.removeprefix("^")


def _progress(frame: pl.DataFrame, carry: pl.DataFrame) -> tuple[_Parts, pl.DataFrame]:
    """A step event per step record of the run (its first ``lr``), but step 0, printed at the engine's
    start before any training step. ``skipped=`` counts the skipped steps since the start: each step's
    row gets those since the step record before (step 0's included, the carried ``total`` of the
    segment before), none if fewer; and each run's last total."""
    records = (
        _pieces(frame.filter(pl.col("text").str.contains(_HOLDS_STEP_RECORD)), "step=", literal=True)
        .filter(~pl.col("before").str.contains(r"[\w/]$"))
        .with_columns(
            pl.col("piece")
            .str.extract_groups(STEP_RECORD)
            .struct.rename_fields(["step_text", "total", "lr"])
            .alias("groups")
        )
        .unnest("groups")
        .drop_nulls("step_text")
        .with_columns(
            step=pl.col("step_text").cast(pl.Int64, strict=False),
            total=pl.col("total").cast(pl.Int64, strict=False),
            seq=pl.col("item"),
        )
    )
    records = (
        pl.concat([carry.lazy().select("run", "total", order=pl.lit(-1, pl.Int64)), records], how="diagonal")
        .sort("run", "order", "item")
        .with_columns(before=pl.col("total").shift(1).over("run").fill_null(0))
        .collect()
    )
    found = records.filter(pl.col("step_text").str.contains("[1-9]"))
    steps = _step_frame(
        found.drop_nulls("step"),
        _STEP,
        lr=_real("lr"),
        skipped=pl.max_horizontal(pl.col("total") - pl.col("before"), 0),
    )
    parts = _Parts(steps=[steps], notes=[_steps_too_long(found, "step_text")], marks=[_seen(found)])
    return parts, records.group_by("run").agg(pl.col("total").last())


# --- the flops profiler's summary ----------------------------------------------------------------------

PROFILE_HEADER = "DeepSpeed Flops Profiler"
#: the profiler's summary is read this many lines after its header (line numbers of whichever file: a
#: header near the end of a job's .out opens the first lines of its .err too)
PROFILE_WINDOW_LINES = 60
PROFILE_STEP = r"Profile Summary at step (\d+)"
PROFILE_FLOPS = r"^FLOPS per GPU = [\d.]+ \* fwd flops per GPU / iter latency:"
#: summary labels (the text before the value) -> what they state; the first a record starts with
PROFILE_LABELS: dict[str, str] = {
    "world size:": "gpus",
    "data parallel size:": "dp",
    "batch size per GPU:": "micro_batch_size",
    "params of model = params per GPU * mp_size:": "logged_model_size",
    "params of model:": "logged_model_size",
}
_PREFIX_SCALE = {"T": 1e12, "G": 1e9, "B": 1e9, "M": 1e6, "K": 1e3, "m": 1e-3, "u": 1e-6}
#: a profiler value, number_to_string() with a unit prefix: "1.2 B", "2.63 K", "143.52 M" of "143.52 MFLOPS"
_SCALED = rf"^{_WS}({NUMBER}){_WS}([TGBMKmu])?{_WS}$"
_PROFILE_LABEL = "|".join(re.escape(label) for label in PROFILE_LABELS)
_PROFILE_LINE = rf"Profile Summary at step \d|^{PYTHON_SPACE}*(?:FLOPS per GPU = |{_PROFILE_LABEL})"


def _scaled(text: pl.Expr, unit: str = "") -> pl.Expr:
    """``2.63 K`` -> 2630.0; with ``unit`` (``FLOPS``) after the prefix taken off first."""
    body = _strip(text)
    if unit:
        body = _strip(body.str.replace(re.escape(unit) + "$", ""))
    parts = body.str.extract_groups(_SCALED)
    scale = parts.struct[1].replace_strict(_PREFIX_SCALE, default=1.0, return_dtype=pl.Float64)
    return parts.struct[0].cast(pl.Float64, strict=False) * scale


def _profile(lines: pl.DataFrame, carry: pl.DataFrame) -> tuple[_Parts, pl.DataFrame]:
    """Each summary (its header and the 60 lines after it; a new header starts a new one), of the records
    that are not the printer's: ``Profile Summary at step N`` says which step the lines after it
    describe, ``FLOPS per GPU`` is that step's ``logged_tflops_per_gpu`` (its row points at the summary's
    step line), the world size, data-parallel size and batch per GPU are facts, and the model's
    parameters its size. And each run's last header's line (``profiled``: a summary of a file's last lines
    reads the next file's first ones)."""
    header = pl.col("text").str.contains(PROFILE_HEADER, literal=True)
    headers = pl.concat(
        [
            carry.select("run", summary=pl.lit(-1, pl.Int64), opened="profiled").drop_nulls("opened"),
            lines.filter(header).select("run", summary="order", opened="line"),
        ]
    )
    said = (
        lines.filter(~header)
        .join_asof(headers, left_on="order", right_on="summary", by="run", check_sortedness=False)
        .filter(pl.col("line") - pl.col("opened") <= PROFILE_WINDOW_LINES)
        .with_columns(stripped=_strip(pl.col("text")))
        .with_columns(
            step_text=pl.when(pl.col("text").str.contains("Profile Summary at step ", literal=True)).then(
                pl.col("text").str.extract(PROFILE_STEP, 1)
            )
        )
        .with_columns(
            flops_line=pl.col("step_text").is_null() & pl.col("stripped").str.contains(PROFILE_FLOPS)
        )
    )
    summaries = said.drop_nulls("step_text").select(
        "summary", at="order", step=pl.col("step_text").cast(pl.Int64, strict=False)
    )
    flops = (
        said.filter(pl.col("flops_line"))
        .with_columns(flops=_scaled(pl.col("stripped").str.splitn(":", 2).struct[1], "FLOPS"))
        .drop_nulls("flops")
        .join_asof(summaries, left_on="order", right_on="at", by="summary", check_sortedness=False)
        .drop_nulls("step")
    )
    steps = _step_frame(
        flops.select(order="at", seq="order", step="step", flops="flops"),
        _PROFILE,
        STEP_METRICS,
        logged_tflops_per_gpu=_divided(pl.col("flops"), 1e12),
    )
    labelled = (
        said.filter(pl.col("step_text").is_null(), ~pl.col("flops_line"))
        .with_columns(label=pl.col("stripped").str.extract(f"^(?:{_PROFILE_LABEL})", 0))
        .drop_nulls("label")
        .with_columns(
            fact=pl.col("label").replace_strict(PROFILE_LABELS, return_dtype=pl.String),
            value=_scaled(pl.col("stripped").str.slice(pl.col("label").str.len_chars())),
        )
        .drop_nulls("value")
    )
    parts = _Parts(steps=[steps], marks=[_seen(flops)]).add(_profile_facts(labelled))
    return parts, headers.group_by("run").agg(profiled=pl.col("opened").last())


def _profile_facts(labelled: pl.DataFrame) -> _Parts:
    """The summary's counts (``int()`` of the value: NaN or infinity is an error the line notes) and the
    model size."""
    counts = labelled.filter(pl.col("fact") != "logged_model_size")
    whole = _as_int(pl.col("value"))
    errors = counts.select(
        "order",
        family=pl.lit(NAME),
        message=pl.when(pl.col("value").is_nan())
        .then(pl.lit("ValueError: cannot convert float NaN to integer"))
        .when(pl.col("value").is_infinite())
        .then(pl.lit("OverflowError: cannot convert float infinity to integer"))
        .when(whole.is_null())
        .then(_too_long(pl.col("fact"), pl.col("value").cast(pl.Int128, strict=False))),
    ).drop_nulls("message")
    size = labelled.filter(pl.col("fact") == "logged_model_size")
    return _Parts(
        facts=[
            counts.select("order", "fact", value=whole, family=pl.lit(NAME)).drop_nulls("value"),
            size.select("order", "fact", value=_divided(pl.col("value"), 1e9), family=pl.lit(NAME)),
        ],
        notes=[errors],
    )


# --- the config printer: the dumps ---------------------------------------------------------------------

PRINT_TAG = r"\[config\.py:\d+:print(?:_user_config)?\]"
_DUMP_HEADER = "DeepSpeedEngine configuration"
#: ``  json = {...}`` (``print_user_config``): one space around "=", not the dotted filler
_USER_CONFIG = rf"^{PYTHON_SPACE}*json = (.*)$"
#: the name of a ``name ..... value`` record body (stripped)
_NAME = r"^[A-Za-z_][A-Za-z0-9_]*"
#: another rank's record glued onto a value: the value ends before it
_GLUED_TIMESTAMP = r"\[\d{4}-\d\d-\d\d \d\d:\d\d.*$"
#: a JSON value is read at most this many lines after the attribute that opens it, in the same file
JSON_MAX_LINES = 300

#: dump attributes that are a run fact, an integer (``int(float(...))`` of its first word)
DUMP_FACTS: dict[str, str] = {
    "train_batch_size": "global_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
    "zero_optimization_stage": "zero_stage",
}
#: precision attributes -> the flag they set (``*_config``: today's ``enabled=...`` pydantic repr)
PRECISION_FLAGS: dict[str, str] = {
    "fp16_enabled": "fp16",
    "float16_config": "fp16",
    "bfloat16_enabled": "bfloat16",
    "bfloat16_config": "bfloat16",
    "bf16_enabled": "bf16",
    "amp_enabled": "amp",
}
_FLAGS = ("fp16", "bfloat16", "bf16", "amp")
#: the attributes a dump is read for: no other states anything or opens a JSON value that is read
NAMES_READ = (
    frozenset(DUMP_FACTS) | {"world_size", "zero_config", "zero_enabled", "json"} | frozenset(PRECISION_FLAGS)
)
#: user config keys read at the top of ``json = {...}``
JSON_FACTS = {
    "train_batch_size": "global_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
}
_OFFLOADS = ("offload_param", "offload_optimizer")
#: the JSON keys read (at any depth, but JSON_FACTS); lines with other keys only open or close objects
JSON_VALUE_KEYS = frozenset(
    (*_OFFLOADS, "device", "enabled", "stage", "cpu_offload", "cpu_offload_params")
) | frozenset(JSON_FACTS)
_QUOTED_KEYS = tuple(f'"{key}"' for key in sorted(JSON_VALUE_KEYS))
#: ``"key": value,`` of a JSON line (searched, not anchored)
_JSON_KEY = rf'"(\w+)"{PYTHON_SPACE}*:{PYTHON_SPACE}*([^,\s\x1c-\x1f][^,]*)?,?{PYTHON_SPACE}*$'
#: the records of a JSON value that can change what it records: one that closes an object (starts with
#: ``}``), a key whose value opens one (``"fp16": {``), a key the values are read for
JSON_LINE = rf'^{PYTHON_SPACE}*\}}|"{PYTHON_SPACE}*:{PYTHON_SPACE}*\{{|' + "|".join(
    map(re.escape, _QUOTED_KEYS)
)


def _items(printed: pl.DataFrame, carry: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The printer's records in ``printed`` (several ranks' glued without a tag: one per tag), sorted, each
    with ``order`` (the record's, plus its index), ``kind`` (``header``, ``value`` or null: a body that
    names nothing), ``name`` and ``dump``: how many dump headers of its run came before it (it included,
    the carried segments' too), the dump it belongs to. And those of the attributes the dump is read for, with their ``value``
    (stripped, a glued record cut off) and whether it ``opens`` a JSON value (it ends with ``{``)."""
    # ``name ..... value``: after the name a filler, dots after any whitespace, or whitespace (two
    # characters, or a tab, which Python's expandtabs widened to two spaces or more unless the name's
    # length is 7 modulo 8); the value after it (the body is stripped: whitespace is followed by more)
    name, rest, after = pl.col("name"), pl.col("rest"), pl.col("after")
    spaces = rest.str.len_chars() - after.str.len_chars()
    dots = after.str.starts_with("..")
    dotted = (
        dots | (spaces > 1) | ((spaces == 1) & rest.str.starts_with("\t") & (name.str.len_chars() % 8 != 7))
    )
    items = (
        _pieces(printed, PRINT_TAG, literal=False)
        .with_columns(
            body=pl.col("piece").str.splitn("]", 2).struct[1], order=pl.col("order") + pl.col("item") - 1
        )
        .with_columns(stripped=_strip(pl.col("body")), json=pl.col("body").str.extract(_USER_CONFIG, 1))
        .with_columns(name=pl.col("stripped").str.extract(_NAME, 0))
        .with_columns(rest=pl.col("stripped").str.slice(name.str.len_chars()))
        .with_columns(after=rest.str.strip_chars_start(WHITESPACE))
        .with_columns(dotted=dotted.fill_null(False))
        .select(
            "run",
            "order",
            "line",
            "file",
            kind=pl.when(pl.col("stripped").str.starts_with(_DUMP_HEADER))
            .then(pl.lit("header"))
            .when(pl.col("json").is_not_null() | pl.col("dotted"))
            .then(pl.lit("value")),
            name=pl.when(pl.col("json").is_not_null())
            .then(pl.lit("json"))
            .when(pl.col("dotted"))
            .then("name"),
            raw=pl.coalesce("json", pl.when(dots).then(after.str.strip_chars_start(".")).otherwise(after)),
        )
        .sort("run", "order")
        .join(carry.lazy().select("run", carried="dump"), on="run", how="left", maintain_order="left")
        .with_columns(
            dump=(pl.col("kind") == "header").fill_null(False).cum_sum().over("run")
            + pl.col("carried").fill_null(0)
        )
        .drop("carried")
        .collect()
    )
    values = (
        items.filter(pl.col("name").is_in(list(NAMES_READ)))
        .with_columns(value=_strip(pl.col("raw").str.replace(_GLUED_TIMESTAMP, "")))
        .with_columns(opens=pl.col("value").str.ends_with("{"))
    )
    return items.drop("raw"), values.drop("raw")


#: a statement of a fact in a dump: ``value`` its text (null: an integer beyond int64, which ``note``
#: says); ``unless_seen`` the family whose record before it cancels it
_STATEMENT_SCHEMA = {
    "run": pl.Int64,
    "dump": pl.Int64,
    "order": pl.Int64,
    "fact": pl.String,
    "value": pl.String,
    "note": pl.String,
    "unless_seen": pl.String,
}


def _statements(
    frame: pl.DataFrame,
    fact: str | pl.Expr,
    value: pl.Expr,
    note: pl.Expr | None = None,
    unless_seen: str | None = None,
) -> pl.DataFrame:
    return (
        frame.select(
            "run",
            "dump",
            "order",
            fact=pl.lit(fact) if isinstance(fact, str) else fact,
            value=value.cast(pl.String),
            note=pl.lit(None, dtype=pl.String) if note is None else note,
            unless_seen=pl.lit(unless_seen, dtype=pl.String),
        )
        .filter(pl.col("value").is_not_null() | pl.col("note").is_not_null())
        .cast(_STATEMENT_SCHEMA)
    )


def _count(text: pl.Expr, fact: str | pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """A count as ``int(float(text))`` (nothing for a word, NaN or infinity), and the note of one
    beyond int64."""
    number = text.cast(pl.Float64, strict=False)
    count = _as_int(number)
    return count, pl.when(count.is_null() & number.is_finite()).then(
        _too_long(fact, number.cast(pl.Int128, strict=False))
    )


def _attribute_statements(values: pl.DataFrame) -> list[pl.DataFrame]:
    """The batch, stage and world-size attributes, zero_config's offloads (today's one-line repr) and
    ``zero_enabled False`` (stage 0)."""
    word = _first_word(pl.col("value"))
    counts = values.filter(pl.col("name").is_in(list(DUMP_FACTS)))
    fact = pl.col("name").replace_strict(DUMP_FACTS, default=None, return_dtype=pl.String)
    world = values.filter(pl.col("name") == "world_size")
    size = word.cast(pl.Int64, strict=False)
    too_long = pl.when(size.is_null() & word.str.contains(r"^[-+]?[0-9]+$"))
    frames = [
        _statements(counts, fact, *_count(word, fact)),
        _statements(world, "dp", size, too_long.then(_too_long("dp", _wide(word)))),
        # the data-parallel size is the GPU count unless Megatron (model parallelism) came before it
        _statements(
            world, "gpus", size, too_long.then(_too_long("gpus", _wide(word))), unless_seen="megatron"
        ),
    ]
    zero = values.filter(pl.col("name") == "zero_config")
    for key in _OFFLOADS:
        offload = pl.col("value").str.extract(rf"(?:^|\W){key}=(None|\w+\([^)]*\))", 1)
        device = offload.str.extract(r"device='?(\w+)'?", 1).fill_null("none")
        on = (
            pl.when(offload.str.starts_with("None"))
            .then(False)
            .when(offload.is_not_null())
            .then(device != "none")
        )
        frames.append(_statements(zero, key, on))
    enabled = values.filter(pl.col("name") == "zero_enabled")
    frames.append(_statements(enabled, "zero_stage", pl.when(~_as_bool(pl.col("value"))).then(0)))
    return frames


def _precision_statements(values: pl.DataFrame, carry: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Precision from the dump's flags: fp16 once fp16 or amp is on, else bf16 once bfloat16 or bf16 is
    (each flag as the dump's last line of it so far set it: on, off or unreadable); fp32 at ``json`` when
    the dump stated fp16 and a bf16 flag and none is on. And the state of each run's flags, per dump."""
    config = pl.col("value").str.extract(r"(?:^|\W)enabled=(\w+)", 1)
    flags = values.filter(pl.col("name").is_in([*PRECISION_FLAGS, "json"])).with_columns(
        flag=pl.col("name").replace_strict(PRECISION_FLAGS, default=None, return_dtype=pl.String),
        on=pl.when(pl.col("name").str.ends_with("_config"))
        .then(_as_bool(config))
        .otherwise(_as_bool(pl.col("value"))),
    )
    # each flag's state so far in the dump: 1 on, 0 off, -1 unreadable, null never stated (the carried
    # state first)
    carried = carry.select("run", "dump", *_FLAGS, order=pl.lit(-1, pl.Int64))
    state = pl.concat([carried, flags], how="diagonal").with_columns(
        pl.when(pl.col("flag") == flag)
        .then(pl.col("on").cast(pl.Int8).fill_null(-1))
        .otherwise(pl.col(flag))
        .forward_fill()
        .over("run", "dump")
        .alias(flag)
        for flag in _FLAGS
    )
    on = {flag: (pl.col(flag) == 1).fill_null(False) for flag in _FLAGS}
    stated = {flag: pl.col(flag).is_in([0, 1]).fill_null(False) for flag in _FLAGS}
    value = (
        pl.when(pl.col("flag").is_not_null() & (on["fp16"] | on["amp"]))
        .then(pl.lit("fp16"))
        .when(pl.col("flag").is_not_null() & (on["bfloat16"] | on["bf16"]))
        .then(pl.lit("bf16"))
        .when(
            (pl.col("name") == "json")
            & stated["fp16"]
            & (stated["bfloat16"] | stated["bf16"])
            & ~pl.any_horizontal(*on.values())
        )
        .then(pl.lit("fp32"))
    )
    return _statements(state, "precision", value), state.select("run", "dump", *_FLAGS)


def _json_statements(lines: pl.DataFrame, items: pl.DataFrame, values: pl.DataFrame) -> pl.DataFrame:
    """The statements of the dumps' multi-line JSON values: 2021's ``zero_config`` (the offload settings,
    the stage) and ``json = {...}`` (the batch sizes at its top, the precision). A value is opened by an
    attribute the dump is read for whose value ends with ``{``; it is read up to the printer's next record
    (one that names nothing does not end it), the ``}`` that closes it, JSON_MAX_LINES lines or the end
    of its file. Each line is one of: ``}`` (closes an object), ``"key": {`` (opens one), ``"key": value``
    (read if the key is, by its parent object)."""
    parsed = (
        items.drop_nulls("kind")
        .join(values.select("order", "opens"), on="order", how="left")
        .select(
            "run",
            "dump",
            "name",
            owner="order",
            opened_at="line",
            opened_in="file",
            opens=pl.col("opens").fill_null(False),
        )
    )
    stripped, opens, closes = pl.col("stripped"), pl.col("opens"), pl.col("closes")
    lines = (
        lines.select("run", "order", "line", "file", stripped=_strip(pl.col("text")))
        .join_asof(parsed, left_on="order", right_on="owner", by="run", check_sortedness=False)
        .filter(
            pl.col("opens"),
            pl.col("file") == pl.col("opened_in"),
            pl.col("line") - pl.col("opened_at") <= JSON_MAX_LINES,
        )
        .drop("opens")
        .with_columns(stripped.str.extract_groups(_JSON_KEY).struct.rename_fields(["key", "raw"]).alias("kv"))
        .unnest("kv")
        .with_columns(closes=stripped.str.starts_with("}"), value=_strip(pl.col("raw").fill_null("")))
        .with_columns(opens=~closes & pl.col("key").is_not_null() & pl.col("value").str.starts_with("{"))
        .with_columns(reads=~closes & ~opens & pl.col("key").is_in(list(JSON_VALUE_KEYS)))
        .filter(closes | opens | pl.col("reads"))
        .with_columns(depth=1 + (opens.cast(pl.Int64) - closes.cast(pl.Int64)).cum_sum().over("owner"))
        # a value is closed once its depth fell to 0: the lines after that are not its own
        .filter(pl.col("depth").shift(1).fill_null(1).cum_min().over("owner") > 0)
    )
    objects = pl.concat(
        [
            parsed.filter(opens).select("owner", at="owner", depth=pl.lit(1, pl.Int64), parent="name"),
            lines.filter(opens).select("owner", at="order", depth="depth", parent="key"),
        ]
    ).sort("at")
    reads = lines.filter(pl.col("reads")).join_asof(
        objects, left_on="order", right_on="at", by=["owner", "depth"], check_sortedness=False
    )
    key, value, parent = pl.col("key"), pl.col("value"), pl.col("parent")
    top_fact = key.replace_strict(JSON_FACTS, default=None, return_dtype=pl.String)
    stage = reads.filter(key == "stage", parent.is_in(["zero_optimization", "zero_config"]))
    top = reads.filter(key.is_in(list(JSON_FACTS)), pl.col("depth") == 1, pl.col("name") == "json")
    return pl.concat(
        [
            _statements(reads.filter(key.is_in(_OFFLOADS)), key, pl.when(value == "null").then(False)),
            _statements(
                reads.filter(key == "device", parent.is_in(_OFFLOADS)),
                parent,
                ~value.str.strip_chars('"').is_in(["none", "null"]),
            ),
            _statements(
                reads.filter(key == "enabled", parent.is_in(["fp16", "bf16", "bfloat16"])),
                "precision",
                pl.when(_as_bool(value)).then(
                    pl.when(parent == "fp16").then(pl.lit("fp16")).otherwise(pl.lit("bf16"))
                ),
            ),
            _statements(stage, "zero_stage", *_count(value, "zero_stage")),
            _statements(top, top_fact, *_count(value, top_fact)),
            # DeepSpeed 0.3.x's ZeRO-Offload switches (a value neither true nor false states nothing)
            _statements(
                reads.filter(key.is_in(["cpu_offload", "cpu_offload_params"])),
                pl.when(key == "cpu_offload")
                .then(pl.lit("offload_optimizer"))
                .otherwise(pl.lit("offload_param")),
                _as_bool(value),
            ),
        ]
    )


#: the facts the dumps state, by type
_INT_FACTS = ("global_batch_size", "micro_batch_size", "gas", "zero_stage", "dp", "gpus")


def _dump_facts(statements: pl.DataFrame, carry: pl.DataFrame) -> tuple[_Parts, pl.DataFrame]:
    """Within a dump the first statement of a fact wins (the attribute lines come before the user's JSON):
    it is the dump's; a later dump (a relaunched engine) states the fact again. A statement of an integer
    beyond int64 is noted, when the dump had not stated the fact yet. The facts a carried dump ``stated``
    already are stated before the segment; each dump's stated facts are returned."""
    group = ["run", "dump", "fact"]
    carried = carry.select(
        "run",
        "dump",
        order=pl.lit(-1, pl.Int64),
        fact="stated",
        value=pl.lit(""),
        note=None,
        unless_seen=None,
    )
    statements = pl.concat([carried.explode("fact").drop_nulls("fact").cast(_STATEMENT_SCHEMA), statements])
    stated = (
        statements.drop_nulls("value")
        .sort("order")
        .unique(group, keep="first", maintain_order=True)
        .with_columns(family=pl.lit(NAME))
    )
    unstated = statements.filter(pl.col("value").is_null())
    if unstated.height:  # the notes before the dump's statement of the fact
        unstated = unstated.join(stated.select(*group, first="order"), on=group, how="left").filter(
            pl.col("first").is_null() | (pl.col("order") < pl.col("first"))
        )
    facts = stated.filter(pl.col("order") >= 0)
    parts = _Parts(
        facts=[
            facts.filter(pl.col("fact").is_in(_INT_FACTS)).select(
                "order", "fact", pl.col("value").cast(pl.Int64), "family", "unless_seen"
            ),
            facts.filter(pl.col("fact").is_in(_OFFLOADS)).select(
                "order", "fact", pl.col("value") == "true", "family"
            ),
            facts.filter(pl.col("fact") == "precision").select("order", "fact", "value", "family"),
        ],
        notes=[unstated.select("order", family=pl.lit(NAME), message="note")],
    )
    return parts, stated.group_by("run", "dump").agg(stated="fact")


def _dumps(printed: pl.DataFrame, others: pl.DataFrame, carry: pl.DataFrame) -> tuple[_Parts, pl.DataFrame]:
    """The dumps' facts (a dump starts at its header; records before any header are a dump whose header
    was lost, or the carried one) from the printer's records and the others (the JSON values' lines among
    them), and a mark per printer record; and each run's last dump, what it stated and its flags."""
    items, values = _items(printed, carry)
    precision, flags = _precision_statements(values, carry)
    statements = pl.concat(
        [*_attribute_statements(values), precision, _json_statements(others, items, values)]
    )
    parts, stated = _dump_facts(statements, carry)
    parts.marks.append(_seen(printed))
    last = (
        pl.concat([carry.select("run", "dump"), items.select("run", "dump")])
        .group_by("run")
        .agg(pl.col("dump").max())
    )
    flags = (
        flags.join(last, on=["run", "dump"], maintain_order="left")
        .group_by("run", "dump")
        .agg(pl.col(_FLAGS).last())
    )
    return parts, last.join(stated, on=["run", "dump"], how="left").join(
        flags, on=["run", "dump"], how="left"
    )


# --- the records read in order (kind SEQUENCE) -----------------------------------------------------------


#: what a run's SEQUENCE records leave to the next segment's: its last dump (how many headers so far), the
#: facts the dump stated and the state of its precision flags, the last step record's ``skipped=`` total
#: and the line of the last profiler header
_CARRY_SCHEMA = {
    "run": pl.Int64,
    "dump": pl.Int64,
    "stated": pl.List(pl.String),
    **dict.fromkeys(_FLAGS, pl.Int8),
    "total": pl.Int64,
    "profiled": pl.Int64,
}


def read_sequence(records: pl.LazyFrame, carry: pl.DataFrame | None) -> Events:
    """A segment of every run's SEQUENCE records, in order: its dumps, steps and profiler summaries, and
    the RECORDS records glued to them (a record is one kind's), read after the ``carry`` of the segment
    before."""
    frame = records.collect()
    carry = pl.DataFrame(schema=_CARRY_SCHEMA) if carry is None else carry
    printer = pl.col("text").str.contains(PRINT_TAG)
    printed, others = frame.filter(printer), frame.filter(~printer)
    dumps, dumped = _dumps(printed, others, carry)
    progress, totals = _progress(frame, carry)
    profile, profiled = _profile(others, carry)
    parts = dumps.add(progress).add(profile)
    glued = frame.filter(_RECORDS_TEST.expr(pl.col("text")))
    if glued.height:
        parts.add(_record_parts(glued.select("order", "text")))
    events = _events(parts)
    events.carry = (
        dumped.join(totals, on="run", how="full", coalesce=True)
        .join(profiled, on="run", how="full", coalesce=True)
        .select(list(_CARRY_SCHEMA))
        .cast(_CARRY_SCHEMA)
    )
    return events


SEQUENCE = RecordKind(
    family=NAME,
    name="sequence",
    test=RecordTest(
        pattern="|".join([PRINT_TAG, _HOLDS_STEP_RECORD, re.escape(PROFILE_HEADER), _PROFILE_LINE])
    ),
    read=read_sequence,
    facts=(*_INT_FACTS, *_OFFLOADS, "precision", "logged_model_size"),
)

#: a printer's record that names something (a header, ``json = ``, ``name .. value``): it ends a JSON value
_NAMING = (
    rf"{PRINT_TAG}{PYTHON_SPACE}*(?:{_DUMP_HEADER}|json = |[A-Za-z_][A-Za-z0-9_]*"
    rf"(?:{PYTHON_SPACE}*\.\.|{PYTHON_SPACE}{{2,}}[^\s\x1c-\x1f]|\t))"
)
#: the raw lines that can hold a record of a JSON value that matters (``JSON_LINE``: a record starts at
#: the line's start, a CR, or after the ':' or ' ' ending a launcher prefix or a rank's tag), and the
#: printer's records (one that names something ends the value). A bare "{" or "}" matched every line of a
#: one-line dict and every brace of the other attributes' values.
JSON_LINES = "|".join(
    [
        rf'"{PYTHON_SPACE}*:{PYTHON_SPACE}*\{{',
        rf"(?:^|[\r:]){PYTHON_SPACE}*\}}",
        re.escape(":print"),
        *map(re.escape, _QUOTED_KEYS),
    ]
)
#: the lines of the dumps' multi-line JSON values, which carry no marker: from a printer's record that may
#: open one (a value ending with ``{``) up to the next one that names something, JSON_MAX_LINES lines or
#: the end of the file, the records that can matter, read with SEQUENCE's
JSON_VALUES = Block(
    family=NAME,
    name="json values",
    opens=RecordTest(pattern=rf"{PRINT_TAG}.*\{{{PYTHON_SPACE}*(?:$|\[)"),
    ends=RecordTest(pattern=_NAMING),
    body=RecordTest(pattern=f"{PRINT_TAG}|{JSON_LINE}"),
    hint=JSON_LINES,
    max_lines=JSON_MAX_LINES,
    into=SEQUENCE.name,
)

#: the profiler's summaries (a header up to the next one or its 60 lines), a block only so that a segment
#: of SEQUENCE's records never ends inside one: a summary's FLOPS line is its step line's step event
PROFILE = Block(
    family=NAME,
    name="profile",
    opens=RecordTest(markers=(PROFILE_HEADER,)),
    ends=RecordTest(markers=(PROFILE_HEADER,)),
    markers=("Profile Summary at step", "FLOPS per GPU = ", *PROFILE_LABELS),
    body=RecordTest(pattern=_PROFILE_LINE),
    max_lines=PROFILE_WINDOW_LINES,
    into=SEQUENCE.name,
)


def evidence(run: RunBuilder) -> int:
    """Records of DeepSpeed's own lines; a config dump alone is enough to call a run DeepSpeed."""
    return run.families_seen.get(NAME, 0)


#: the printer's records that a dump is read for hold one of these (its header, a name it reads); the
#: others matter only inside a JSON value, where JSON_VALUES finds them
_PRINT_MARKERS = (_DUMP_HEADER, *sorted(NAMES_READ))

FAMILY = Family(
    name=NAME,
    markers=(
        *_PRINT_MARKERS,
        "step=",
        PROFILE_HEADER,
        "Profile Summary at step",
        "FLOPS per GPU = ",
        *PROFILE_LABELS,
        *_RECORD_MARKERS,
    ),
    evidence=evidence,
    kinds=(SEQUENCE, RECORDS),
    blocks=(JSON_VALUES, PROFILE),
    description="DeepSpeed engine: config dump, step=/throughput lines, pipeline steps, flops profiler",
)

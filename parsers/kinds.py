"""Record kinds and blocks: what a family reads column-wise, declared once, and the events it makes.

A log's bulk is a few kinds of records repeated every step or rank (Megatron's iteration lines,
DeepSpeed's config printer, the ranks' tracebacks): handed to Python each costs microseconds, read as
columns well under one. A family declares each kind once (``RecordKind``) and each multi-line block once
(``Block``); the reader tags a batch's records in polars and hands the family's Python code only the
rest. Every event carries an ``order``, its place in the run's reading order packed into one integer
(``order_key``) so that polars can sort and ``join_asof`` on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl
from logstat.parsers.schema import ITERATIONS_SCHEMA

#: bits of ``order_key``: file index (16), line (31), record within the line (8), event within the record (8)
LINE_SHIFT, RECORD_SHIFT = 16, 8
FILE_SHIFT = 31 + LINE_SHIFT
MAX_RECORD = (1 << 8) - 1
#: the first event index of a Python family's events in a record: below it, a kind's (one record may be both)
PYTHON_EVENTS = 128
#: what Python's ``\s`` and ``str.strip()`` take for whitespace, in polars' (Rust) regex syntax: Rust's
#: ``\s`` (Unicode White_Space) lacks the separators \x1c-\x1f that Python counts as whitespace.
PYTHON_SPACE = r"[\s\x1c-\x1f]"


def order_key(file_index: int, line: int, record: int = 0) -> int:
    """The order of record ``record`` of line ``line`` (1-based) of the run's ``file_index``-th file; an
    event of the record adds its index within the record (< 256)."""
    return (file_index << FILE_SHIFT) + (line << LINE_SHIFT) + (min(record, MAX_RECORD) << RECORD_SHIFT)


def file_of(order: pl.Expr) -> pl.Expr:
    """The file index of an ``order_key``."""
    return order // (1 << FILE_SHIFT)


def line_of(order: pl.Expr) -> pl.Expr:
    """The line number of an ``order_key``."""
    return (order % (1 << FILE_SHIFT)) // (1 << LINE_SHIFT)


def line_of_order(order: int) -> int:
    """``line_of`` for one number."""
    return (order % (1 << FILE_SHIFT)) >> LINE_SHIFT


# --- events ----------------------------------------------------------------------------------------

#: step events: how an event's metrics join the step's row (RunBuilder.add_iteration and friends);
#: COUNTED: a record numbered by an engine's own counter from its launch (DeepSpeed's ThroughputTimer), the
#: step of its family's record before it in the launch where that is higher (``settle``: after a resume)
RECORD, STEP_METRICS, PEAK, COUNTED = 0, 1, 2, 3
#: step metrics a kind or a family may record, with their types (ITERATIONS_SCHEMA's metric columns)
STEP_METRICS_SCHEMA: dict[str, pl.DataType] = {
    name: dtype
    for name, dtype in ITERATIONS_SCHEMA.items()
    if name not in ("path", "iteration", "launch", "family", "line", "source_path")
}
#: a step event; ``step`` null: the last step logged before it (a line about "this" step)
STEP_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "order": pl.Int64,
    "step": pl.Int64,
    "mode": pl.Int8,
    "family": pl.String,
    **STEP_METRICS_SCHEMA,
}
#: a timer of the last step logged before it
TIMER_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "order": pl.Int64,
    "timer": pl.String,
    "ms": pl.Float64,
    "family": pl.String,
}
#: a timer line's optional ``per_step``: printed at the end of every step, or during every step (at each
#: micro-step, in the optimizer step)
STEP_END, IN_STEP = 2, 1
#: a failure event, as ``RunBuilder.fail`` takes one
FAILURE_EVENT_SCHEMA: dict[str, pl.DataType] = {
    "order": pl.Int64,
    "status": pl.String,
    "reason": pl.String,
    "weight": pl.Int64,
    "kind": pl.String,
    "exception": pl.Boolean,
    "chained": pl.Boolean,
}
#: what a mark (``order``, ``mark``, ``family`` who made it, ``text``: its evidence) says: a record of its
#: family (``RunBuilder.saw``), the run's end (``complete``), a clean exit of the launcher's workers
#: (``exited_cleanly``), a new launch of the training (``new_launch``)
SEEN, COMPLETE, CLEAN_EXIT, LAUNCH = "seen", "complete", "clean exit", "launch"
#: the family of a launch candidate that any family's steps decide (``RunBuilder.requeued``)
REQUEUED = ""
#: the family of a launch candidate after a failure: a launch if the steps after it started over
#: (``settle._started_over``)
RESTARTED = "restarted"


@dataclass
class Events:
    """Typed events read from records, frames per sort: steps, timers (with their ``position`` in the
    record) and failures in their ``*_EVENT_SCHEMA``; marks (``marks_of``); notes (``order``, ``family``,
    ``message``); facts (``order``, ``fact``, ``value``, ``family``, one value type per frame; optional
    ``at``: the order whose line the provenance names, as for a block's fact stated at its end; optional
    ``unless_seen``: a family whose record at or before the event cancels it)."""

    steps: list[pl.DataFrame] = field(default_factory=list)
    timers: list[pl.DataFrame] = field(default_factory=list)
    facts: list[pl.DataFrame] = field(default_factory=list)
    notes: list[pl.DataFrame] = field(default_factory=list)
    failures: list[pl.DataFrame] = field(default_factory=list)
    marks: list[pl.DataFrame] = field(default_factory=list)

    carry: pl.DataFrame | None = None
    """What a read group's read hands its next (``Block.read``): per ``run``, what its records left open,
    in values, lines and files (orders are keys of one read only)."""

    SORTS = ("steps", "timers", "facts", "notes", "failures", "marks")

    def extend(self, other: Events) -> None:
        for name in self.SORTS:
            getattr(self, name).extend(frame for frame in getattr(other, name) if frame.height)


def last_per_run(records: pl.LazyFrame, where: pl.Expr) -> pl.LazyFrame:
    """Each run's last record, in line order, of those ``where`` holds: what every record restates (a bar's
    total, a plan's) is stated once, by the last (a later read's restates it)."""
    return records.filter(where).sort("order").group_by("run").agg(pl.all().last())


def facts_of(frame: pl.LazyFrame, family: str, **values: pl.Expr) -> pl.LazyFrame:
    """Long fact events (``order``, ``fact``, ``value``, ``family``) of ``frame``'s records, one per
    ``fact=value`` expression that is not null there (each expression of one type)."""
    return pl.concat(
        frame.select("order", fact=pl.lit(name), value=value, family=pl.lit(family)).drop_nulls("value")
        for name, value in values.items()
    )


def stated_counts(records: pl.LazyFrame, family: str, pattern: str, facts: dict[str, str]) -> pl.LazyFrame:
    """Long fact events of every count the records state: each match of ``pattern`` (its groups ``key`` and
    ``count``), the fact ``facts`` names for its key (stripped of quotes, colons, equals signs, dashes and
    spaces around it); a count of 0 states none."""
    matches = records.select("order", match=pl.col("text").str.extract_all(pattern)).explode("match")
    fields = pl.col("match").str.extract_groups(pattern)
    key = fields.struct["key"].str.strip_chars("'\": =-")
    stated = matches.select(
        "order",
        fact=key.replace_strict(facts, default=None),
        value=as_count(fields.struct["count"]),
        family=pl.lit(family),
    )
    return stated.filter(pl.col("fact").is_not_null(), pl.col("value") > 0)


def run_ends(records: pl.LazyFrame, family: str, end: str = COMPLETE, *, seen: bool = True) -> Events:
    """A kind whose line is the run's end (a framework's last word after training): each record a mark that
    the run completed (``end``: or exited cleanly, which a failure outweighs), its text the evidence, and
    that ``family`` was seen (unless the words are not the family's alone)."""
    ended = [marks_of(records, family, end, pl.col("text").str.strip_chars())]
    return Events(marks=[marks_of(records, family, SEEN), *ended] if seen else ended)


def marks_of(frame: pl.LazyFrame, family: str, mark: str, text: pl.Expr | None = None) -> pl.DataFrame:
    """A mark event per record of ``frame``."""
    return frame.select(
        "order",
        mark=pl.lit(mark),
        family=pl.lit(family),
        text=pl.lit(None, dtype=pl.String) if text is None else text,
    ).collect()


def step_lines(records: pl.LazyFrame, family: str, **metrics: pl.Expr) -> Events:
    """A step event per record of a kind whose line is one step (``metrics``: ``step`` and the step's
    metrics, read off the record; one without a step is none), each a mark that ``family`` was seen."""
    steps = records.select("order", **metrics, mode=pl.lit(RECORD, pl.Int8), family=pl.lit(family))
    return Events(steps=[steps.drop_nulls("step").collect()], marks=[marks_of(records, family, SEEN)])


def metric_lines(
    records: pl.LazyFrame, family: str, name: pl.Expr, value: pl.Expr, metrics: dict[str, str]
) -> pl.DataFrame:
    """Metrics of the step before them, one event per record of a kind whose line is one metric (``name``
    and ``value`` read off the record; ``metrics``: the regex of the names filling each step column;
    ``batches_per_sec`` is the step's time). A line naming none of them is no event."""
    columns = {
        column: pl.when(name.str.contains(f"^(?:{names})$")).then(value) for column, names in metrics.items()
    }
    if "batches_per_sec" in columns:
        per_second = columns.pop("batches_per_sec")
        columns["elapsed_ms"] = pl.when(per_second > 0).then(1000 / per_second)
    steps = records.select(
        "order",
        step=pl.lit(None, pl.Int64),
        mode=pl.lit(STEP_METRICS, pl.Int8),
        family=pl.lit(family),
        **columns,
    )
    return steps.filter(pl.any_horizontal(pl.col(list(columns)).is_not_null())).collect()


# --- what records are --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RecordTest:
    """Whether a record is of some sort: it holds one of ``markers`` (literals), matches ``pattern`` (a
    regex, Rust's syntax) if given, and holds none of ``unless``."""

    markers: tuple[str, ...] = ()
    pattern: str | None = None
    unless: tuple[str, ...] = ()

    def expr(self, record: pl.Expr) -> pl.Expr:
        test = pl.lit(True)
        if self.markers:
            test = record.str.contains(literals(self.markers))
        if self.pattern is not None:
            test &= record.str.contains(self.pattern)
        if self.unless:  # one search for them all: a search per word costs a pass over the records each
            test &= ~record.str.contains(literals(self.unless))
        return test


def literals(markers: tuple[str, ...]) -> str:
    """One regex alternation of literal ``markers``."""
    return "|".join(re.escape(marker) for marker in markers)


@dataclass(frozen=True, kw_only=True)
class RecordKind:
    """A kind of record read column-wise: every record of its family that passes ``test``."""

    family: str
    name: str
    test: RecordTest
    read: Callable[[pl.LazyFrame], Events]
    """Typed events of a frame of its records: ``order`` (a key of this reading, never a line), ``text``
    (launcher prefixes stripped), ``run`` (for rules per run: "the first one counts"), ``line``, ``file``;
    an event's order adds its index in the record. A kind sharing its ``read`` with its family's blocks
    is read with them (``Block.read``; its rows' ``source`` is its name)."""
    facts: tuple[str, ...] = ()
    """The run facts its events state (``RunBuilder`` weighs them against the Python families')."""


#: the ``role`` of a block's records: the record that opened it, one it reads, its own record that closed
#: it, and a record of its family that ended it (not its own: read as usual, too)
OPENER, BODY, CLOSER, ENDED = 0, 1, 2, 3


@dataclass(frozen=True, kw_only=True)
class Block:
    """A multi-line block of a family: a record that ``opens`` it, the records it reads, up to the first
    record that ``closes`` it (its own), one of the family's that ``ends`` it (read as usual),
    ``max_lines`` after the opener, or the file's end. An opener inside it is one of its records.
    ``swallows``: the family's other records inside it are not read otherwise.

    With ``markers`` (literals its body or closing lines hold, searched for with the family's), its
    records are the marked ones inside it passing ``body`` or ``closes`` (outside a block, a record with
    only these markers is nobody's). Without, every line inside it is a candidate (``hint``, a regex on
    the raw line, picks those worth splitting into records): such a block should be rare and short."""

    family: str
    name: str
    opens: RecordTest
    read: Callable[[pl.LazyFrame, pl.DataFrame | None], Events] | None = None
    """Events of a frame of blocks' records, sorted by run and order: ``run``, ``source`` (the block's
    ``name``), ``block`` (the opener's order), ``order``, ``text``, ``role`` (OPENER, BODY, CLOSER, ENDED),
    ``line`` and ``file`` (how many lines apart two records are, which orders do not tell). Blocks and
    kinds sharing a ``read`` are read in one frame (a record in several has one ``order``; a ``block`` is
    one only with its ``source``), in segments ending before a block still open: the second argument is
    the previous segment's ``Events.carry`` (None first). A read that returned a carry is called once more
    with no records, for what waited for the run's end: frames with ``run``, ``line``, ``file`` instead
    of ``order``. None: ``into`` reads them."""
    into: str | None = None
    """The family's kind that reads the block's records (not its opener) with its own: the block only finds
    their lines (DeepSpeed's multi-line JSON values, with no marker, for its config printer's records)."""
    body: RecordTest = RecordTest()
    closes: RecordTest | None = None
    ends: RecordTest | None = None
    max_lines: int | None = None
    markers: tuple[str, ...] = ()
    renews: RecordTest | None = None
    """Records (found as its body's, not necessarily its own) after which the block ends ``max_lines``
    later, not ``max_lines`` after its opener: a traceback stays open while frames come."""
    heralds: RecordTest | None = None
    """With ``renews``: openers that herald the block of the next opener within ``herald_lines`` lines,
    no herald between (it holds from that opener on), else are a block alone: Python's line before a
    traceback it printed and ignored, or that it chains to the one before."""
    herald_lines: int = 0
    hint: str | None = None
    swallows: bool = False
    facts: tuple[str, ...] = ()
    """The run facts its events state."""


def seen_once(records: pl.LazyFrame, family: str) -> Events:
    """A mark that ``family`` was seen at each run's first of ``records`` (evidence repeated on thousands of
    lines says no more than once)."""
    return Events(marks=[marks_of(records.group_by("run").agg(pl.col("order").min()), family, SEEN)])


def code_frames(family: str, paths: tuple[str, ...]) -> RecordKind:
    """Evidence of ``family``: a traceback's frame in its code (``File "/workspace/Megatron-LM/megatron/
    training/global_vars.py", line 9``, ``paths`` holding the part that names it): the run's program was
    the family's, though it failed before it printed anything of its own (an import, a config's check)."""
    test = RecordTest(markers=paths, pattern=rf'^{PYTHON_SPACE}*File "[^"]*(?:{literals(paths)})')
    return _evidence(family, "code frame", test)


def argument_usage(family: str, options: tuple[str, ...]) -> RecordKind:
    """Evidence of ``family``: argparse's usage, printed when its parser refused the command line, listing
    one of ``options`` as the family's parser lists it (``[-h] [--num-layers NUM_LAYERS]``, argparse's
    metavar the option's name in capitals; a wrapped usage keeps an option whole on one line): the run's
    program parsed the family's arguments and stopped before it printed anything of its own."""
    return _evidence(family, "argument usage", RecordTest(markers=options))


def _evidence(family: str, name: str, test: RecordTest) -> RecordKind:
    """A kind whose records say only that ``family``'s program ran: once a run (``seen_once``)."""
    return RecordKind(family=family, name=name, test=test, read=lambda records: seen_once(records, family))


def read_records(kinds: tuple[RecordKind, ...], records: pl.DataFrame) -> Events:
    """The events of ``records`` (``order``, ``text``, ``run``, ``line``, ``file``, ``kind``: an index)."""
    events = Events()
    for index in sorted(records.get_column("kind").unique().to_list()):
        of_kind = records.lazy().filter(pl.col("kind") == index)
        events.extend(kinds[index].read(of_kind.select("order", "text", "run", "line", "file")))
    return events


# --- reading `name: value |` records column-wise ---------------------------------------------------

#: a number as Megatron prints one (and Python's int() / float() read): digits, a fraction, an exponent,
#: or nan / inf / infinity in any case
NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?))"
#: a ``name: value`` field of a ``|``-separated record: a name from a letter, without ``:=|``, and a number
#: up to the next ``|`` or the record's end (``learning rate: N/A`` is no field)
FIELD = rf"[A-Za-z][^:|=]*:\s*{NUMBER}\s*(?:\||$)"
_INTEGER = r"^[-+]*\d+$"


def pipe_fields(records: pl.LazyFrame, body: pl.Expr) -> pl.LazyFrame:
    """The numeric fields of ``body`` (``key: value | key: value``), long: ``order``, ``position`` in the
    record, ``name`` (stripped, lower case), ``value`` (text); each matched whole, split at its first ":"."""
    return (
        records.select("order", field=body.str.extract_all(FIELD))
        .with_columns(position=pl.int_ranges(pl.col("field").list.len()))
        .explode("field", "position")
        .drop_nulls("field")
        .select(
            "order",
            "position",
            parts=pl.col("field").str.split_exact(":", 1).struct.rename_fields(["name", "value"]),
        )
        .unnest("parts")
        .with_columns(
            pl.col("name").str.strip_chars().str.to_lowercase(),
            pl.col("value").str.strip_chars().str.strip_chars_end("|").str.strip_chars(),
        )
    )


#: the scale of a number's SI prefix as logs print them (``2.63 K``, ``95.3TFLOPS``; ``B`` for billions)
SI_PREFIXES = {"": 1.0, "u": 1e-6, "m": 1e-3, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}
SI_PREFIXES |= {"P": 1e15, "E": 1e18, "Z": 1e21}


def named_field(name: str, unit: str = "") -> str:
    """The ``FIELD`` called ``name`` (in any case, after any non-letters), its number the group (then
    ``unit``, a pattern, its own groups after it): for reading a few known fields of a record without
    splitting it."""
    return rf"\|[^A-Za-z|]*(?i:{re.escape(name)})\s*:\s*({NUMBER})\s*{unit}\s*\|"


def as_real(value: pl.Expr) -> pl.Expr:
    """A field as Python's ``float(text)``: an integer too long for a float is none, and ``-0`` is an
    integer (0.0, not -0.0)."""
    number = value.cast(pl.Float64, strict=False)
    integer = value.str.contains(_INTEGER)
    return (
        pl.when(integer & number.is_infinite()).then(None).when(integer).then(number + 0.0).otherwise(number)
    )


def as_count(value: pl.Expr) -> pl.Expr:
    """A count field as an integer: an integer's text, or a finite number's whole part; nan and inf
    (a garbled line) and integers beyond int64 are none (``too_long`` notes those)."""
    number = value.cast(pl.Float64, strict=False)
    return (
        pl.when(value.str.contains(_INTEGER))
        .then(value.cast(pl.Int64, strict=False))
        .when(number.is_finite())
        .then(number.cast(pl.Int64, strict=False))
    )


def too_long(value: pl.Expr) -> pl.Expr:
    """Whether an integer's text does not fit int64 (the frames' integers): such a value is noted."""
    return value.str.contains(_INTEGER) & value.cast(pl.Int64, strict=False).is_null()


#: what is noted after ``name=value`` of an integer beyond int64 (polars refuses a frame holding one)
TOO_LONG = "does not fit a 64-bit integer; not recorded"


def too_long_note(name: str | pl.Expr, value: pl.Expr) -> pl.Expr:
    """The note ``name=value TOO_LONG`` of each row, concatenated: polars 2.1 panics ``pl.format``ting a
    filtered frame of several chunks."""
    name = pl.lit(name) if isinstance(name, str) else name
    return name + "=" + value.cast(pl.String) + f" {TOO_LONG}"

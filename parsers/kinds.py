"""Record kinds: the per-step records a family declares once and polars reads column-wise.

A log's bulk is a few kinds of records repeated every step (Megatron's iteration, timer and memory
lines: ~800k per GiB). Handing each to Python costs ~10 us; read as columns it costs well under 1 us.
A family declares each such kind once (``RecordKind``: the marker that tags a record, and the polars
query that turns a frame of records into typed events); the reader tags every record of a chunk with
its kind in polars and hands the family's Python code only the rest. The events of a run (steps,
timers, facts) are merged column-wise in ``RunBuilder.settle`` with the events the Python families
recorded, in line order.

Every event carries an ``order``: its place in the run's reading order, packed into one integer
(``order_key``) so that polars can sort and ``join_asof`` on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl
from logstat.parsers.schema import ITERATIONS_SCHEMA

#: bits of ``order_key``: file index (16), line (31), record within the line (8), event within the record (8)
LINE_SHIFT, _RECORD_SHIFT = 16, 8
FILE_SHIFT = 31 + LINE_SHIFT
MAX_RECORD = (1 << 8) - 1


#: the first event index of a Python family's events in a record: below it, a kind's (one record may be both)
PYTHON_EVENTS = 128


def order_key(file_index: int, line: int, record: int = 0) -> int:
    """The reading order of record ``record`` of line ``line`` (1-based) of the run's ``file_index``-th file;
    an event of the record adds its index within the record (< 256)."""
    return (file_index << FILE_SHIFT) + (line << LINE_SHIFT) + (min(record, MAX_RECORD) << _RECORD_SHIFT)


def file_of(order: pl.Expr) -> pl.Expr:
    """The file index of an ``order_key``."""
    return order // (1 << FILE_SHIFT)


def line_of(order: pl.Expr) -> pl.Expr:
    """The line number of an ``order_key``."""
    return (order % (1 << FILE_SHIFT)) // (1 << LINE_SHIFT)


#: step events: how an event's metrics join the step's row (RunBuilder.add_iteration and friends)
RECORD, STEP_METRICS, PEAK = 0, 1, 2
#: step metrics a kind or a family may record, with their types (ITERATIONS_SCHEMA's metric columns)
STEP_METRICS_SCHEMA: dict[str, pl.DataType] = {
    name: dtype
    for name, dtype in ITERATIONS_SCHEMA.items()
    if name not in ("path", "iteration", "family", "line", "source_path")
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


@dataclass
class Events:
    """Typed events read from records, frames per sort: steps and timers in their ``*_EVENT_SCHEMA``,
    facts (``order``, ``fact``, ``value``, ``family``) and notes (``order``, ``family``, ``message``)."""

    steps: list[pl.DataFrame] = field(default_factory=list)
    timers: list[pl.DataFrame] = field(default_factory=list)
    facts: list[pl.DataFrame] = field(default_factory=list)
    notes: list[pl.DataFrame] = field(default_factory=list)

    def extend(self, other: Events) -> None:
        """Add ``other``'s events (of another kind's records)."""
        for name in ("steps", "timers", "facts", "notes"):
            getattr(self, name).extend(frame for frame in getattr(other, name) if frame.height)


@dataclass(frozen=True, kw_only=True)
class RecordKind:
    """A kind of record read column-wise: a record holding ``marker`` and none of ``unless`` is one."""

    family: str
    name: str
    marker: str
    unless: tuple[str, ...] = ()
    read: Callable[[pl.LazyFrame], Events]
    """Typed events of a frame of records of this kind (columns ``order``: the record's ``order_key``,
    ``text``: the record, launcher prefixes stripped); an event's order adds its index in the record."""
    facts: tuple[str, ...] = ()
    """The run facts its events state (``RunBuilder`` weighs them against the Python families')."""
    evidence: bool = False
    """Whether a record counts as one of its family's records as it is read (``RunBuilder.saw``: other
    families ask whether one was seen, DeepSpeed whether Megatron runs it)."""

    def holds(self, record: str) -> bool:
        """Whether ``record`` is of this kind (the Python test of what ``tagged`` tests in polars)."""
        return self.marker in record and not any(word in record for word in self.unless)

    def tagged(self, record: pl.Expr) -> pl.Expr:
        """Whether each record of ``record`` is of this kind."""
        test = record.str.contains(self.marker, literal=True)
        for word in self.unless:
            test &= ~record.str.contains(word, literal=True)
        return test


def read_records(kinds: tuple[RecordKind, ...], records: pl.DataFrame) -> Events:
    """The events of ``records`` (``order``, ``text``, ``kind``: an index into ``kinds``)."""
    events = Events()
    for index, kind in enumerate(kinds):
        of_kind = records.lazy().filter(pl.col("kind") == index).select("order", "text")
        events.extend(kind.read(of_kind))
    return events


def kind_index(kinds: tuple[RecordKind, ...], record: pl.Expr) -> pl.Expr:
    """Per record, the index of the first of ``kinds`` it is of, else -1."""
    tagged = pl.lit(-1, dtype=pl.Int32)
    for index in reversed(range(len(kinds))):
        tagged = pl.when(kinds[index].tagged(record)).then(pl.lit(index, dtype=pl.Int32)).otherwise(tagged)
    return tagged


# --- reading `name: value |` records column-wise ---------------------------------------------------

#: a number as Megatron prints one (and Python's int() / float() read): digits, a fraction, an exponent,
#: or nan / inf / infinity in any case
NUMBER = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:nan|inf(?:inity)?))"
#: one ``name: value`` field between two ``|``: the name starts at a letter and holds no ``:``, ``=`` or
#: ``|``; a field whose value is no number (``learning rate: N/A``) is none
PIPE_FIELD = rf"([A-Za-z][^:|=\n]*)\s*:\s*({NUMBER})\s*$"
_INTEGER = r"^[-+]*\d+$"


def pipe_fields(records: pl.LazyFrame, body: pl.Expr) -> pl.LazyFrame:
    """The numeric fields of ``body`` (each record's ``key: value | key: value`` text), long: ``order``,
    ``position`` (of the field in its record), ``name`` (stripped, lower case), ``value`` (the text).
    A name repeated in a record keeps its first position and its last value, as a dict keyed by name."""
    return (
        records.select("order", piece=body.str.split("|"))
        # each piece's place in its record, exploded with it (a window over the records costs more)
        .with_columns(position=pl.int_ranges(pl.col("piece").list.len()))
        .explode("piece", "position")
        .select(
            "order",
            "position",
            pl.col("piece")
            .str.extract_groups(PIPE_FIELD)
            .struct.rename_fields(["name", "value"])
            .alias("field"),
        )
        .unnest("field")
        .drop_nulls("value")
        .with_columns(pl.col("name").str.strip_chars().str.to_lowercase())
        .group_by("order", "name")
        .agg(pl.col("position").min(), pl.col("value").last())
    )


def as_real(value: pl.Expr) -> pl.Expr:
    """A field as Python's ``float(pipe_number(text))``: an integer too long for a float is none, and
    ``-0`` is an integer (0.0, not -0.0)."""
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

"""The runs' files -> their builders and events, batch by batch.

Each batch of lines (``source``) is split into tagged records in polars (``records.Plan``), in a
read-ahead thread while the batch before is read here. Here, per batch: the families' blocks are found
(``blocks``), the records of the record kinds and blocks are kept for reading column-wise, and the rest
(the rare records: failures, banners, command lines) go to their families' ``parse_line`` in line order.
The kept records are read into events in a few polars queries for many batches at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl
from logstat.parsers import source
from logstat.parsers.base import Family, LineReader, RunBuilder, is_guarded, never_raises
from logstat.parsers.blocks import OpenBlock, find_spans, inside
from logstat.parsers.kinds import (
    BODY,
    ENDED,
    FILE_SHIFT,
    LINE_SHIFT,
    OPENER,
    Events,
    file_of,
    line_of,
    read_records,
)
from logstat.parsers.records import Plan

#: kind records kept before they are read into events
FLUSH_RECORDS = 400_000
_KIND_RECORD_SCHEMA = {"run": pl.Int64, "order": pl.Int64, "text": pl.String, "kind": pl.Int32}
#: a record's events: its order plus an index below this (``kinds.order_key``)
_EVENTS_PER_RECORD = 256


@dataclass
class Prepared:
    """A batch as the read-ahead thread hands it over: its lines and their tagged records."""

    batch: source.Batch
    records: pl.DataFrame


@dataclass
class Reading:
    """What reading a group of runs keeps between batches: the records of the kinds read on their own,
    and per read group (``records.ReadGroup``) its blocks' and kinds' records, until they are read."""

    plan: Plan
    runs: list[RunBuilder]
    files: list[Sequence[Path]]
    readers: list[LineReader | None]
    kind_records: list[pl.DataFrame] = field(default_factory=list)
    group_records: list[list[pl.DataFrame]] = field(default_factory=list)
    carries: list[pl.DataFrame | None] = field(default_factory=list)
    kept: int = 0
    open_blocks: list[dict[int, OpenBlock]] = field(default_factory=list)
    events: Events = field(default_factory=Events)

    def __post_init__(self) -> None:
        self.group_records = [[] for _ in self.plan.groups]
        self.carries = [None for _ in self.plan.groups]
        self.open_blocks = [{} for _ in self.plan.blocks]


def read(runs: list[RunBuilder], files: list[Sequence[Path]], plan: Plan, reports: list[list]) -> Events:
    """Read every file of ``runs`` (``files``, in order; a ``SourceReport`` per file into ``reports``):
    the Python families' records into the builders, the rest into the events returned."""
    reading = Reading(
        plan=plan, runs=runs, files=files, readers=[_safe_reader(family) for family in plan.families]
    )
    for batch in _prepared(source.batches(files, reports), plan):
        _read_batch(reading, batch)
        if reading.kept >= FLUSH_RECORDS:
            _flush(reading)
    _flush(reading, last=True)
    return reading.events


def _prepared(batches: Iterator[source.Batch], plan: Plan) -> Iterator[Prepared]:
    """Each batch framed and split into tagged records, the next one in a thread while this is read."""
    pool = _read_ahead_pool()

    def prepare_next() -> Prepared | None:
        return _prepare(next(batches, None), plan)

    pending = pool.submit(prepare_next)
    while (batch := pending.result()) is not None:
        pending = pool.submit(prepare_next)
        yield batch
        del batch


@cache
def _read_ahead_pool() -> ThreadPoolExecutor:
    """One reading thread for the process (a thread per file costs more than a small file's parse)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="logstat-read-ahead")


def _prepare(batch: source.Batch | None, plan: Plan) -> Prepared | None:
    return None if batch is None else Prepared(batch, plan.records(batch))


def _read_batch(reading: Reading, batch: Prepared) -> None:
    _register_files(reading, batch.batch.files)
    records = batch.records
    for number, block in enumerate(reading.plan.blocks):
        family = f"f{reading.plan.number(block.family)}"
        carried = dict(reading.open_blocks[number])
        spans = find_spans(number, block, family, batch.batch, records, carried, batch.batch.continues)
        if spans is None:
            continue
        reading.open_blocks[number] = spans.still_open
        taken = spans.taken
        if block.into is None:
            _keep(
                reading,
                reading.plan.group_of_block[number],
                spans.records.with_columns(source=pl.lit(block.name)),
            )
        else:  # the lines go to a whole-run kind; its opener is one of the kind's records already
            lines = spans.records.filter(pl.col("role") != ENDED, pl.col("role") != OPENER)
            _keep(reading, reading.plan.group_of_block[number], lines.with_columns(source=pl.lit(block.into)))
            openers = spans.records.filter(pl.col("role") == OPENER).select("run", "order")
            taken = taken.join(openers, on=["run", "order"], how="anti")
        if block.swallows:  # and the family's other records inside
            taken = pl.concat([taken, inside(records.filter(pl.col(family).is_not_null()), spans.spans)])
        records = _without(records, family, taken.unique())
    _keep_kinds(reading, records)
    _read_python(reading, records)


def _register_files(reading: Reading, files: list[tuple[int, int]]) -> None:
    """Each file a batch starts is the next of its run's files."""
    for run, file in files:
        builder = reading.runs[run]
        if file == len(builder.files):
            builder.files.append(str(reading.files[run][file]))


def _without(records: pl.DataFrame, family: str, taken: pl.DataFrame) -> pl.DataFrame:
    """``records`` with those of ``taken`` no longer the family's."""
    taken = taken.with_columns(taken=pl.lit(True))
    return (
        records.join(taken, on=["run", "order"], how="left")
        .with_columns(pl.when(pl.col("taken")).then(None).otherwise(pl.col(family)).alias(family))
        .drop("taken")
    )


def _keep_kinds(reading: Reading, records: pl.DataFrame) -> None:
    """The batch's records of the record kinds, kept to be read with others (a kind of a read group with
    its group's records)."""
    columns = [f"f{number}" for number in range(len(reading.plan.families))]
    kinds = pl.concat(
        [
            records.filter(pl.col(column) >= 0).select("run", "order", "text", kind=pl.col(column))
            for column in columns
        ]
    )
    if kinds.is_empty():
        return
    grouped = reading.plan.group_of_kind
    if grouped:
        in_group = pl.col("kind").is_in(list(grouped))
        for index in kinds.filter(in_group).get_column("kind").unique().to_list():
            rows = kinds.filter(pl.col("kind") == index).select(
                "run", block="order", order="order", text="text", role=pl.lit(BODY, dtype=pl.Int8)
            )
            _keep(reading, grouped[index], rows.with_columns(source=pl.lit(reading.plan.kinds[index].name)))
        kinds = kinds.filter(~in_group)
    reading.kind_records.append(kinds.cast(_KIND_RECORD_SCHEMA))
    reading.kept += kinds.height


def _keep(reading: Reading, group: int, records: pl.DataFrame) -> None:
    """Keep a group's records (``run``, ``block``, ``order``, ``text``, ``role``, ``source``)."""
    if records.height:
        reading.group_records[group].append(
            records.select(list(_GROUP_RECORD_SCHEMA)).cast(_GROUP_RECORD_SCHEMA)
        )
        reading.kept += records.height


_GROUP_RECORD_SCHEMA = {
    "run": pl.Int64,
    "block": pl.Int64,
    "order": pl.Int64,
    "text": pl.String,
    "role": pl.Int8,
    "source": pl.String,
}


def _read_python(reading: Reading, records: pl.DataFrame) -> None:
    """The records no kind or block took, to their families' ``parse_line``, in line order."""
    plan = reading.plan
    columns = [f"f{number}" for number in range(len(plan.families))]
    # a family without parse_line has no residue: its other records are dropped here, not looped over
    read = [number for number, reader in enumerate(reading.readers) if reader is not None]
    mask = pl.sum_horizontal(
        [(pl.col(f"f{number}") == -1).fill_null(False).cast(pl.Int64) * (1 << number) for number in read]
        or [pl.lit(0, dtype=pl.Int64)]
    )
    evidence = plan.evidence_kinds
    seen = (
        records.filter(pl.any_horizontal([pl.col(column).is_in(evidence) for column in columns]))
        .group_by("run", *columns)
        .agg(first=pl.col("order").min(), count=pl.len())
        if evidence
        else None
    )
    unseen = _unseen(plan, seen)
    python = (
        records.select("run", "order", "text", mask=mask).filter(pl.col("mask") != 0).sort("run", "order")
    )
    readers = reading.readers
    current = (-1, -1)
    builder = reading.runs[0]
    for run, order, text, bits in python.iter_rows():
        builder = reading.runs[run]
        file = order >> FILE_SHIFT
        if (run, file) != current:
            current = (run, file)
            builder.current_file = builder.files[file]
        builder.position, builder.event_index = order, 0
        if unseen:
            _see(builder, run, unseen)
        line = (order % (1 << FILE_SHIFT)) >> LINE_SHIFT
        for number, parse in enumerate(readers):
            if bits >> number & 1 and parse is not None:
                parse(text, line, builder)
    for (run, first, family), count in unseen.items():
        reading.runs[run].saw(family, count, at=first)


def _unseen(plan: Plan, seen: pl.DataFrame | None) -> dict[tuple[int, int, str], int]:
    """Per run, the families' evidence among the batch's kind records: ``(run, first order, family)`` ->
    count, in order."""
    if seen is None or seen.is_empty():
        return {}
    counts: dict[tuple[int, int, str], int] = {}
    for row in seen.iter_rows(named=True):
        for number, family in enumerate(plan.families):
            kind = row[f"f{number}"]
            if kind is not None and kind in plan.evidence_kinds:
                key = (row["run"], row["first"], family.name)
                counts[key] = counts.get(key, 0) + row["count"]
    return dict(sorted(counts.items(), key=lambda item: (item[0][0], item[0][1])))


def _see(builder: RunBuilder, run: int, unseen: dict[tuple[int, int, str], int]) -> None:
    """Count the kinds' evidence of ``run`` whose first record comes before the record being read."""
    for key in [key for key in unseen if key[0] == run and key[1] < builder.position]:
        builder.saw(key[2], unseen.pop(key), at=key[1])


def _flush(reading: Reading, *, last: bool = False) -> None:
    """Read what is kept into events: the kinds read on their own, and each read group's records up to
    (not including) the first block of the group still open in each run (all at the ``last``; a
    ``whole_run`` group only then)."""
    _flush_kinds(reading)
    for number, group in enumerate(reading.plan.groups):
        frames = reading.group_records[number]
        if not frames or (group.whole_run and not last):
            continue
        records = pl.concat(frames)
        cut = None if last else _open_from(reading, group.blocks)
        if cut is not None:
            cut = _before_blocks(records, cut)
            held = (
                records.join(cut, on="run", how="left").select(pl.col("order") >= pl.col("cut")).to_series()
            )
            held = held.fill_null(False)
            records, rest = records.filter(~held), records.filter(held)
            reading.group_records[number] = [rest] if rest.height else []
        else:
            reading.group_records[number] = []
        if records.height:
            _read_group(reading, number, records)
    reading.kept = sum(
        frame.height
        for group, frames in zip(reading.plan.groups, reading.group_records, strict=True)
        if not group.whole_run
        for frame in frames
    )


def _open_from(reading: Reading, blocks: list[int]) -> pl.DataFrame | None:
    """Per run (``run``, ``cut``), the opener of the first of ``blocks`` still open: its records and the
    later ones wait for the block to end."""
    cuts: dict[int, int] = {}
    for number in blocks:
        for run, state in reading.open_blocks[number].items():
            cuts[run] = min(cuts.get(run, state.opener), state.opener)
    if not cuts:
        return None
    return pl.DataFrame(
        {"run": list(cuts), "cut": list(cuts.values())}, schema={"run": pl.Int64, "cut": pl.Int64}
    )


def _before_blocks(records: pl.DataFrame, cut: pl.DataFrame) -> pl.DataFrame:
    """``cut`` moved back to the opener of each block that would straddle it: a group's blocks may overlap,
    and one that ended can have records past the opener of another still open."""
    while True:
        across = (
            records.join(cut, on="run")
            .filter(pl.col("order") >= pl.col("cut"), pl.col("block") < pl.col("cut"))
            .group_by("run")
            .agg(opener=pl.col("block").min())
        )
        if across.is_empty():
            return cut
        cut = cut.join(across, on="run", how="left").select("run", cut=pl.min_horizontal("cut", "opener"))


def _flush_kinds(reading: Reading) -> None:
    """Read the kept records of the kinds read on their own into events."""
    if not reading.kind_records:
        return
    records = pl.concat(reading.kind_records)
    reading.kind_records = []
    keyed = records.with_row_index("row").with_columns(key=pl.col("row").cast(pl.Int64) * _EVENTS_PER_RECORD)
    events = read_records(
        reading.plan.kinds,
        keyed.select(
            order="key",
            text="text",
            kind="kind",
            run="run",
            line=line_of(pl.col("order")),
            file=file_of(pl.col("order")),
        ),
    )
    reading.events.extend(_located(events, keyed.select(pl.col("row").cast(pl.Int64), "run", base="order")))


def _read_group(reading: Reading, number: int, records: pl.DataFrame) -> None:
    """One read of a group's records: blocks' and kinds' records in line order (``source``: the name of the
    block or kind a row is from), where a record has one key whichever blocks it is in."""
    records = records.sort("run", "order", "block", "source")
    first = (pl.col("run") != pl.col("run").shift()) | (pl.col("order") != pl.col("order").shift())
    keyed = records.with_columns(row=first.fill_null(True).cum_sum().cast(pl.Int64) - 1).with_columns(
        key=pl.col("row") * _EVENTS_PER_RECORD
    )
    base = keyed.select("row", "run", base="order").unique("row", keep="first", maintain_order=True)
    block_keys = base.select("run", block="base", block_key=pl.col("row") * _EVENTS_PER_RECORD)
    keyed = keyed.join(block_keys, on=["run", "block"], how="left")
    frame = keyed.select(
        "run",
        "source",
        block=pl.col("block_key").fill_null(pl.col("key")),
        order="key",
        text="text",
        role="role",
        line=line_of(pl.col("order")),
        file=file_of(pl.col("order")),
    ).lazy()
    events = reading.plan.groups[number].read(frame, reading.carries[number])
    reading.carries[number] = events.carry
    reading.events.extend(_located(events, base))


def _located(events: Events, base: pl.DataFrame) -> Events:
    """``events`` whose orders (and ``at``: a fact's provenance record) are ``row * _EVENTS_PER_RECORD +
    item``, with each row's ``run`` and real order (``base``) put back."""
    located = Events()
    for name in Events.SORTS:
        for frame in getattr(events, name):
            if not frame.height:
                continue
            frame = _relocated(frame, "order", base, with_run=True)
            if "at" in frame.columns:
                frame = _relocated(frame, "at", base, with_run=False)
            getattr(located, name).append(frame)
    return located


def _relocated(frame: pl.DataFrame, column: str, base: pl.DataFrame, *, with_run: bool) -> pl.DataFrame:
    """``frame`` with its keyed ``column`` made a real order (and the row's ``run`` added)."""
    keys = base if with_run else base.drop("run")
    return (
        frame.with_columns(row=pl.col(column) // _EVENTS_PER_RECORD, item=pl.col(column) % _EVENTS_PER_RECORD)
        .join(keys, on="row", how="left")
        .with_columns((pl.col("base") + pl.col("item")).alias(column))
        .drop("row", "item", "base")
    )


def _safe_reader(family: Family) -> LineReader | None:
    """``family.parse_line`` guarded once: a family must never raise; if one does anyway, the line is
    noted in ``parse_errors``, not fatal. A reader the family already guarded is used as is."""
    parse = family.parse_line
    if parse is None:
        return None
    return parse if is_guarded(parse) else never_raises(family.name)(parse)

"""The runs' files -> their builders and events, batch by batch.

Worker threads split each batch of lines (``source``) into tagged records (``records.Plan``) ahead of the
one read here. Here, per batch: the families' blocks are found (``blocks``), the records of the kinds and
blocks are kept, to be read column-wise in a few polars queries for many batches at once, and the rest
(failures, banners, command lines) go to their families' ``parse_line`` in line order.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import polars as pl
from logstat.parsers import source
from logstat.parsers.base import Family, LineReader, RunBuilder, is_guarded, never_raises
from logstat.parsers.blocks import RECORD_SCHEMA, OpenBlock, Spans, find_spans, inside
from logstat.parsers.kinds import (
    BODY,
    ENDED,
    FILE_SHIFT,
    LINE_SHIFT,
    OPENER,
    Events,
    file_of,
    line_of,
    line_of_order,
    read_records,
)
from logstat.parsers.records import Plan
from logstat.parsers.settle import fact_ends, seen_folded

#: kind records kept before they are read into events: a read's memory grows with its records (at its peak
#: ~1 KB a record of a read group: the sort and join here, the family's read), so a flush of 100k keeps a
#: 1 GiB log of HF Trainer records under 500 MB (400k: 720 MB), for a few reads more of a few ms each
FLUSH_RECORDS = 100_000
#: batches prepared ahead of the one being read
AHEAD = 1
#: the threads of each pool: batches are prepared one per core, blocks found one per family at most, and
#: kept records read by one thread, so that the reads of a group follow each other (each hands its carry on)
_THREADS = {"prepare": max(2, os.cpu_count() or 1), "spans": 8, "read": 1}
_GROUP_RECORD_SCHEMA = {**RECORD_SCHEMA, "source": pl.String}
#: a record's events: its order plus an index below this (``kinds.order_key``)
_EVENTS_PER_RECORD = 256


@dataclass
class Reading:
    """What reading a group of runs keeps between batches: the records of the kinds read on their own,
    and per read group (``records.ReadGroup``) its blocks' and kinds' records, until they are read."""

    plan: Plan
    runs: list[RunBuilder]
    files: list[Sequence[Path]]
    readers: list[LineReader | None] = field(init=False)
    kind_records: list[pl.DataFrame] = field(default_factory=list)
    group_records: list[list[pl.DataFrame]] = field(init=False)
    carries: list[pl.DataFrame | None] = field(init=False)
    kept: int = 0
    open_blocks: list[dict[int, OpenBlock]] = field(init=False)
    events: Events = field(default_factory=Events)
    reads: list[Future[None]] = field(default_factory=list)
    """The reads of kept records handed to the reading thread, in order."""

    def __post_init__(self) -> None:
        self.readers = [_safe_reader(family) for family in self.plan.families]
        self.group_records = [[] for _ in self.plan.groups]
        self.carries = [None for _ in self.plan.groups]
        self.open_blocks = [{} for _ in self.plan.blocks]


def read(runs: list[RunBuilder], files: list[Sequence[Path]], plan: Plan, reports: list[list]) -> Events:
    """Read every file of ``runs`` (``files``, in order; a ``SourceReport`` per file into ``reports``):
    the Python families' records into the builders, the rest into the events returned."""
    reading = Reading(plan, runs, files)
    for batch, records in _prepared(source.batches(files, reports), plan):
        _read_batch(reading, batch, records)
        if reading.kept >= FLUSH_RECORDS:
            _flush(reading)
    _flush(reading, last=True)
    for reads in reading.reads:
        reads.result()
    return reading.events


def _prepared(batches: Iterator[list], plan: Plan) -> Iterator[tuple[source.Batch, pl.DataFrame]]:
    """Each batch framed and split into tagged records by worker threads (polars works outside the
    GIL), ``AHEAD`` batches ahead of the one read here, in order."""
    pending: deque[Future[tuple[source.Batch, pl.DataFrame]]] = deque()
    for items in batches:
        pending.append(_pool("prepare").submit(_prepare, items, plan))
        del items  # the raw bytes go once framed, not after the batch that is read meanwhile
        if len(pending) > AHEAD:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _prepare(items: list, plan: Plan) -> tuple[source.Batch, pl.DataFrame]:
    batch = source.frame_batch(items)
    return batch, plan.records(batch)


@cache
def _pool(name: str) -> ThreadPoolExecutor:
    """The process's thread pool ``name`` (starting threads per file costs more than a small file's parse).
    Like polars' own pool it does not survive a fork: logstat's workers are spawned."""
    return ThreadPoolExecutor(max_workers=_THREADS[name], thread_name_prefix=f"logstat-{name}")


def _read_batch(reading: Reading, batch: source.Batch, records: pl.DataFrame) -> None:
    for run, file in batch.files:  # each file a batch starts is the next of its run's files
        builder = reading.runs[run]
        if file == len(builder.files):
            builder.files.append(source.path_text(reading.files[run][file]))
    plan = reading.plan
    # the families' blocks are found at once: a family's blocks take only its own records
    found = [
        _pool("spans").submit(_family_spans, plan, numbers, batch, records, reading.open_blocks)
        for numbers in plan.blocks_by_family.values()
    ]
    for (name, numbers), spans in zip(plan.blocks_by_family.items(), found, strict=True):
        taken = []
        for number, block_spans in zip(numbers, spans.result(), strict=True):
            if block_spans is not None:
                reading.open_blocks[number] = block_spans.still_open
                _keep_spans(reading, number, block_spans)
                taken.append(block_spans.taken)
        if taken:
            records = _without(records, f"f{plan.number(name)}", pl.concat(taken).unique())
    _keep_kinds(reading, records)
    _read_python(reading, records)


def _family_spans(
    plan: Plan, numbers: list[int], batch: source.Batch, records: pl.DataFrame, open_blocks: list[dict]
) -> list[Spans | None]:
    """The spans of a family's blocks in a batch, in order: the records a block takes are no longer the
    family's for the blocks after it (and ``Spans.taken`` holds those it swallows)."""
    found: list[Spans | None] = []
    for number in numbers:
        block = plan.blocks[number]
        family = f"f{plan.number(block.family)}"
        spans = find_spans(number, block, family, batch, records, dict(open_blocks[number]))
        found.append(spans)
        if spans is None:
            continue
        taken = spans.taken
        if block.into is not None:  # its opener is one of the kind's records: the kind reads it
            openers = spans.records.filter(pl.col("role") == OPENER).select("run", "order")
            taken = taken.join(openers, on=["run", "order"], how="anti")
        if block.swallows:  # and the family's other records inside
            taken = pl.concat([taken, inside(records.filter(pl.col(family).is_not_null()), spans.spans)])
        spans.taken = taken.unique()
        records = _without(records, family, spans.taken)
    return found


def _keep_spans(reading: Reading, number: int, spans: Spans) -> None:
    """Keep the records of block ``number``'s spans in its read group."""
    block = reading.plan.blocks[number]
    records = spans.records.with_columns(source=pl.lit(block.name if block.into is None else block.into))
    if block.into is not None:  # the lines go to a kind; its opener is one of the kind's records already
        records = records.filter(pl.col("role") != ENDED, pl.col("role") != OPENER)
    _keep(reading, reading.plan.group_of_block[number], records)


def _without(records: pl.DataFrame, family: str, taken: pl.DataFrame) -> pl.DataFrame:
    """``records`` with those of ``taken`` no longer the family's."""
    untagged = pl.when(pl.col("taken")).then(None).otherwise(pl.col(family)).alias(family)
    taken = taken.with_columns(taken=pl.lit(True))
    return records.join(taken, on=["run", "order"], how="left").with_columns(untagged).drop("taken")


def _keep_kinds(reading: Reading, records: pl.DataFrame) -> None:
    """The batch's records of the record kinds, kept to be read with others (a kind of a read group with
    its group's records)."""
    kinds = pl.concat(
        records.filter(pl.col(f"f{number}") >= 0).select("run", "order", "text", kind=pl.col(f"f{number}"))
        for number in range(len(reading.plan.families))
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
    reading.kind_records.append(kinds)
    reading.kept += kinds.height


def _keep(reading: Reading, group: int, records: pl.DataFrame) -> None:
    """Keep a group's records (``run``, ``block``, ``order``, ``text``, ``role``, ``source``)."""
    if records.height:
        reading.group_records[group].append(records.select(list(_GROUP_RECORD_SCHEMA)))
        reading.kept += records.height


def _read_python(reading: Reading, records: pl.DataFrame) -> None:
    """The records no kind or block took, to their families' ``parse_line``, in line order."""
    # a family without parse_line has no residue: its other records are dropped here, not looped over
    read = [number for number, reader in enumerate(reading.readers) if reader is not None]
    mask = pl.sum_horizontal(
        [(pl.col(f"f{number}") == -1).fill_null(False).cast(pl.Int64) * (1 << number) for number in read]
        or [pl.lit(0, dtype=pl.Int64)]
    )
    python = (
        records.select("run", "order", "text", mask=mask).filter(pl.col("mask") != 0).sort("run", "order")
    )
    current = (-1, -1)
    for run, order, text, bits in python.iter_rows():
        builder = reading.runs[run]
        file = order >> FILE_SHIFT
        if (run, file) != current:
            current = (run, file)
            builder.current_file = builder.files[file]
        builder.position, builder.event_index = order, 0
        line = line_of_order(order)
        for number in read:
            if bits >> number & 1:
                reading.readers[number](text, line, builder)


def _flush(reading: Reading, *, last: bool = False) -> None:
    """Hand what is kept to the reading thread: the kinds read on their own, and each read group's records
    up to the first block of the group still open in each run (all at the ``last``, and then a group whose
    read returned a carry once more, without records)."""
    for pending in reading.reads:  # the flush before's: kept records must not pile up behind a slow read
        pending.result()
    reading.reads = []
    if reading.kind_records:
        records = pl.concat(reading.kind_records).sort("run", "order")  # keyed in line order
        reading.kind_records = []
        reading.reads.append(_pool("read").submit(_read_kinds, reading, records))
    for number, frames in enumerate(reading.group_records):
        if not frames:
            continue
        records, held = _held_back(reading, number, pl.concat(frames), last)
        reading.group_records[number] = [held] if held.height else []
        if records.height:
            reading.reads.append(_pool("read").submit(_read_group, reading, number, records))
    if last:  # after the reads before it, in the reading thread: the carries are theirs
        reading.reads.append(_pool("read").submit(_read_carries, reading))
    reading.kept = sum(frame.height for frames in reading.group_records for frame in frames)


def _held_back(
    reading: Reading, number: int, records: pl.DataFrame, last: bool
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Group ``number``'s ``records`` split into those read now and those that wait for a block to end:
    per run, from the opener of its first block still open (none at the ``last``), moved back to the
    opener of each block that would straddle it (a group's blocks may overlap: one that ended can have
    records past the opener of another still open)."""
    cuts: dict[int, int] = {}
    for block in reading.plan.groups[number].blocks:
        for run, state in reading.open_blocks[block].items():
            cuts[run] = min(cuts.get(run, state.opener), state.opener)
    if last or not cuts:
        return records, records.clear()
    cut = pl.DataFrame(
        {"run": list(cuts), "cut": list(cuts.values())}, schema={"run": pl.Int64, "cut": pl.Int64}
    )
    while True:
        across = (
            records.join(cut, on="run")
            .filter(pl.col("order") >= pl.col("cut"), pl.col("block") < pl.col("cut"))
            .group_by("run")
            .agg(opener=pl.col("block").min())
        )
        if across.is_empty():
            break
        cut = cut.join(across, on="run", how="left").select("run", cut=pl.min_horizontal("cut", "opener"))
    held = records.join(cut, on="run", how="left").select(pl.col("order") >= pl.col("cut")).to_series()
    held = held.fill_null(False)
    return records.filter(~held), records.filter(held)


def _read_carries(reading: Reading) -> None:
    """The end: a read that returned a carry states, from no records, what waited for it."""
    for number, carry in enumerate(list(reading.carries)):
        if carry is not None:
            _read_group(reading, number, pl.DataFrame(schema=_GROUP_RECORD_SCHEMA))


def _read_kinds(reading: Reading, records: pl.DataFrame) -> None:
    """One read of the kinds' kept records (in the reading thread)."""
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
    item``, with each row's ``run`` and real order (``base``) put back; a frame without ``order`` (its
    ``run``, ``line`` and ``file`` from a carry) at its line."""
    located = Events()
    for name in Events.SORTS:
        for frame in getattr(events, name):
            if not frame.height:
                continue
            if "order" not in frame.columns:  # stated from a carry: at a line an earlier read saw
                order = pl.col("file") * (1 << FILE_SHIFT) + pl.col("line") * (1 << LINE_SHIFT)
                getattr(located, name).append(frame.with_columns(order=order).drop("line", "file"))
                continue
            frame = _relocated(frame, "order", base)
            if "at" in frame.columns:
                frame = _relocated(frame, "at", base.drop("run"))
            if name == "marks":
                frame = seen_folded(frame)
            elif name == "facts":
                frame = fact_ends(frame)
            getattr(located, name).append(frame)
    return located


def _relocated(frame: pl.DataFrame, column: str, base: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its keyed ``column`` made a real order (and ``base``'s other columns added): row
    ``r`` of ``base`` is the record keyed ``r``, so its values are gathered, not joined."""
    key = frame.get_column(column)
    located = base.select(pl.all().gather(key // _EVENTS_PER_RECORD))
    order = (located.get_column("base") + key % _EVENTS_PER_RECORD).alias(column)
    return frame.with_columns(order, *located.drop("row", "base"))


def _safe_reader(family: Family) -> LineReader | None:
    """``family.parse_line`` guarded once (unless it is already): a family that raises anyway has the line
    noted in ``parse_errors``, which is not fatal."""
    parse = family.parse_line
    if parse is None:
        return None
    return parse if is_guarded(parse) else never_raises(family.name)(parse)

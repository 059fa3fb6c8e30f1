"""Where the families' multi-line blocks are, batch by batch, and which records are theirs.

A block (``kinds.Block``) opens at a record of its family; its lines need no marker, as they are looked
for only inside blocks (``hint`` on the raw lines, then the record tests). An opener inside an open block
is one of its records; a block open at a batch's end goes on in the next (``OpenBlock``) unless its file
ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
from logstat.parsers.kinds import BODY, CLOSER, ENDED, FILE_SHIFT, LINE_SHIFT, OPENER, Block, order_key
from logstat.parsers.records import passes, split_records
from logstat.parsers.source import Batch

#: an order past every record of a batch
_NEVER = (1 << 62) - 1
#: the order past the last line of a record's file
_FILE_END = (pl.col("order") // (1 << FILE_SHIFT) + 1) * (1 << FILE_SHIFT)


@dataclass
class OpenBlock:
    """A block left open at the end of a batch, in its run's last file."""

    opener: int
    """The opener's order: the block's id among its records."""
    deadline: int
    """The first order that is no longer the block's (``max_lines`` after its opener, or never)."""
    held: bool = True
    """Whether it holds (reads and swallows) records: a herald's block once its opener came."""


@dataclass
class Spans:
    """A batch's blocks of one kind: their records (``run``, ``block``, ``order``, ``text``, ``role``) and
    the spans (``run``, ``start``, ``end``: orders, the end not the block's own) they cover."""

    records: pl.DataFrame
    spans: pl.DataFrame
    taken: pl.DataFrame
    """``run``, ``order`` of the family's records the blocks take: their own, and openers inside them."""
    still_open: dict[int, OpenBlock] = field(default_factory=dict)


_SPAN_SCHEMA = {"run": pl.Int64, "start": pl.Int64, "end": pl.Int64}
_KEPT_SCHEMA = dict.fromkeys(("run", "start", "block", "end", "holds"), pl.Int64) | {"by_end": pl.Boolean}
RECORD_SCHEMA = {"run": pl.Int64, "block": pl.Int64, "order": pl.Int64, "text": pl.String, "role": pl.Int8}


def find_spans(
    number: int, block: Block, family: str, batch: Batch, records: pl.DataFrame, carried: dict[int, OpenBlock]
) -> Spans | None:
    """The spans of block ``number`` in a batch (``records``: its tagged records; ``family``: the tag
    column of the block's family), resolving the block left open by the batch before (``carried``, by
    run: in the file the batch goes on with)."""
    openers = records.filter(pl.col(f"o{number}")).select("run", "row", "order", herald=passes(block.heralds))
    if openers.is_empty() and not carried:
        return None
    starts = _starts(openers, carried, batch, block)
    if starts.is_empty():
        empty = pl.DataFrame(schema=RECORD_SCHEMA)
        return Spans(empty, pl.DataFrame(schema=_SPAN_SCHEMA), empty.select("run", "order"))
    for tag, name in (("e", "ended"), ("c", "marked_closer")):
        found = _first_after(starts, records.filter(pl.col(f"{tag}{number}")), name)
        starts = starts.join(found, on=["run", "order"], how="left")
    if block.markers:  # its lines are marked: its candidates are among the batch's records
        candidates = _tested(block, records.lazy().filter(pl.col(family).is_not_null())).collect()
    else:
        candidates = _window_candidates(starts, block, batch)
    if block.renews is not None:
        starts = _renewed(starts, candidates, block)
    else:
        starts = starts.with_columns(holds=pl.col("order"))
    closed = _first_after(starts, candidates.filter(pl.col("closes")), "closed", at="holds")
    kept, still_open = _resolve(starts.join(closed, on=["run", "order"], how="left"), batch)
    opened = _bound_records(kept.select("run", "block", order="block"), records, OPENER)
    ended = _bound_records(kept.filter(pl.col("by_end")).select("run", "block", order="end"), records, ENDED)
    block_records = pl.concat([opened, _records(kept, candidates), ended])
    spans = kept.select("run", start=pl.coalesce("holds", "end"), end="end").cast(_SPAN_SCHEMA)
    own = block_records.filter(pl.col("role") != ENDED).select("run", "order")
    return Spans(
        records=block_records,
        spans=spans,
        taken=pl.concat([own, inside(openers.select("run", "order"), spans)]).unique(),
        still_open=still_open,
    )


def inside(records: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """The ``run``, ``order`` of ``records`` inside ``spans`` (after a span's start, before its end)."""
    located = records.sort("run", "order").join_asof(
        spans.sort("run", "start"), left_on="order", right_on="start", by="run", check_sortedness=False
    )
    return located.filter(pl.col("order") > pl.col("start"), pl.col("order") < pl.col("end")).select(
        "run", "order"
    )


def _starts(openers: pl.DataFrame, carried: dict[int, OpenBlock], batch: Batch, block: Block) -> pl.DataFrame:
    """``run``, ``row``, ``order`` (where the block's records begin), ``block`` (its id: the opener's
    order), ``deadline`` (the first order past its lines), ``last_row`` (the last row of its file in the
    batch), sorted; the openers and the carried blocks (from the batch's first row)."""
    reach = (block.max_lines + 1) * (1 << LINE_SHIFT) if block.max_lines is not None else None
    deadline = _FILE_END if reach is None else pl.min_horizontal(pl.col("order") + reach, _FILE_END)
    frames = [openers.select("run", "row", "order", block="order", deadline=deadline, held=~pl.col("herald"))]
    if carried and batch.pieces.height:
        first = batch.pieces.row(0, named=True)
        state = carried.get(first["run"])
        if state is not None:
            line_order = order_key(state.opener >> FILE_SHIFT, first["first_line"] + 1)
            row = (first["run"], 0, line_order - 1, state.opener, state.deadline, state.held)
            columns = ["run", "row", "order", "block", "deadline", "held"]
            frames.append(pl.DataFrame([row], schema=columns, orient="row"))
    starts = pl.concat(frames, how="vertical_relaxed").sort("run", "order")
    return starts.join_asof(
        _file_rows(batch), left_on="row", right_on="first_row", check_sortedness=False
    ).drop("first_row")


def _file_rows(batch: Batch) -> pl.DataFrame:
    """Per run of pieces of one file in the batch: its ``first_row`` and ``last_row``."""
    total = batch.lines.height
    pieces = batch.pieces.with_columns(next_row=pl.col("row").shift(-1, fill_value=total))
    return (
        pieces.group_by("run", "file", maintain_order=True)
        .agg(first_row=pl.col("row").first(), last_row=pl.col("next_row").last() - 1)
        .select("first_row", "last_row")
        .sort("first_row")
    )


def _first_after(starts: pl.DataFrame, events: pl.DataFrame, name: str, at: str = "order") -> pl.DataFrame:
    """Per start, the order (``name``) and row (``<name>_row``) of the first of ``events`` in its run after
    its order (or its column ``at``: none where that is null)."""
    return (
        starts.select("run", "order", at=pl.col(at))
        .drop_nulls("at")
        .sort("run", "at")
        .join_asof(
            events.sort("run", "order").select(
                "run", pl.col("order").alias(name), pl.col("row").alias(f"{name}_row")
            ),
            left_on="at",
            right_on=name,
            by="run",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .select("run", "order", name, f"{name}_row")
    )


def _window_candidates(starts: pl.DataFrame, block: Block, batch: Batch) -> pl.DataFrame:
    """The candidates among the lines from each start on (``_windows``); a window of a block that
    ``renews`` is widened while renewing records come within ``max_lines`` of its end."""
    segments = _windows(starts, block)
    found = []
    while segments:
        lines = pl.concat([batch.lines.slice(first, last - first + 1) for first, last, _ in segments]).lazy()
        if block.hint is not None:  # collected: split_records reads the lines twice, a plan searches twice
            lines = lines.filter(pl.col("text").str.contains(block.hint)).collect().lazy()
        found.append(_tested(block, split_records(batch.located(lines), batch.separator)).collect())
        segments = _widened(segments, found[-1], block) if block.renews is not None else []
    if len(found) == 1:
        return found[0]
    # a window widened may reach into the next one: its rows are read twice
    return pl.concat(found).unique(["run", "order"], keep="first").sort("run", "order")


def _windows(starts: pl.DataFrame, block: Block) -> list[tuple[int, int, int]]:
    """The rows (``first``, ``last``, and the ``bound`` no widening passes) from each start on, up to the
    record that ends it, ``max_lines`` after it or the end of its file in the batch; overlapping windows
    are read once."""
    reach = max(block.max_lines, block.herald_lines) if block.max_lines is not None else 1 << 40
    bounds = starts.select(
        first=pl.col("row"),
        bound=pl.min_horizontal(
            pl.col("ended_row").fill_null(1 << 40), pl.col("marked_closer_row").fill_null(1 << 40), "last_row"
        ),
    ).select("first", pl.min_horizontal(pl.col("first") + reach, "bound").alias("last"), "bound")
    windows: list[list[int]] = []
    for first, last, bound in bounds.sort("first").iter_rows():
        if windows and first <= windows[-1][1] + 1:
            windows[-1][1:] = max(windows[-1][1], last), max(windows[-1][2], bound)
        else:
            windows.append([first, last, bound])
    return [(first, last, bound) for first, last, bound in windows]


def _widened(
    segments: list[tuple[int, int, int]], candidates: pl.DataFrame, block: Block
) -> list[tuple[int, int, int]]:
    """The rows past each segment just read that a block renewed in it may still reach: up to
    ``max_lines`` after its last renewing record (a chain of renewals cannot pass that unless one more
    comes before it), within the segment's bound."""
    renewing = candidates.filter(pl.col("renews")).get_column("row").sort()
    if renewing.is_empty():
        return []
    lasts = pl.Series([last for _, last, _ in segments], dtype=renewing.dtype)
    before = renewing.search_sorted(lasts, side="right").to_list()
    widened = []
    for (first, last, bound), index in zip(segments, before, strict=True):
        renewal = renewing[index - 1] if index else None
        if renewal is not None and renewal >= first and last < bound and renewal + block.max_lines > last:
            widened.append((last + 1, min(renewal + block.max_lines, bound), bound))
    return widened


def _tested(block: Block, records: pl.LazyFrame) -> pl.LazyFrame:
    """Those of ``records`` that are the block's (``body``), close it (``closes``) or renew it
    (``renews``), in line order (the split records are not)."""
    return (
        records.select("run", "row", "order", "text")
        .with_columns(body=passes(block.body), closes=passes(block.closes), renews=passes(block.renews))
        .filter(pl.col("body") | pl.col("closes") | pl.col("renews"))
        .sort("run", "order")
    )


def _renewed(starts: pl.DataFrame, candidates: pl.DataFrame, block: Block) -> pl.DataFrame:
    """``starts`` with the ``deadline`` of a block that ``renews``: ``max_lines`` lines past its opener or,
    if a renewing record follows within them, past the last of the renewing records that follow each
    other within ``max_lines`` lines (a carried block goes on from its deadline so far); and ``holds``:
    the order from which it swallows. A herald's block is the block of the opener that follows it within
    ``herald_lines`` lines (no other herald between them), held from that opener on; without one it holds
    nothing."""
    if block.max_lines is None:
        raise ValueError(f"block {block.name}: renews needs max_lines")

    def past(lines: int) -> pl.Expr:
        return pl.min_horizontal(
            (pl.col("order") // (1 << LINE_SHIFT) + lines + 1) * (1 << LINE_SHIFT), _FILE_END
        )

    opener = pl.col("block") == pl.col("order")
    # one query: a batch's few polars queries cost more than their rows
    first = (
        starts.lazy()
        .select(
            "run",
            "order",
            "held",
            deadline=pl.when(opener & pl.col("held"))
            .then(past(block.max_lines))
            .when(opener)
            .then(past(block.herald_lines))
            .otherwise("deadline"),
        )
        .sort("run", "order")
    )
    # the candidates come sorted, each record once
    renewing = (
        candidates.lazy().filter(pl.col("renews")).select("run", "order", deadline=past(block.max_lines))
    )
    # a renewing record whose next one comes too late (or none in the batch) ends the chain it is in
    last = renewing.filter(
        (pl.col("run").shift(-1) != pl.col("run")).fill_null(True)
        | (pl.col("order").shift(-1) >= pl.col("deadline"))
    ).select("run", renewal="order", chained="deadline")
    held = (
        first.filter("held")
        .join_asof(
            renewing.select("run", "order", renewal="order"),
            on="order",
            by="run",
            strategy="forward",
            check_sortedness=False,
        )
        .with_columns(pl.col("renewal").fill_null(_NEVER))
        .sort("run", "renewal", "order")
        .join_asof(last, on="renewal", by="run", strategy="forward", check_sortedness=False)
        .select(
            "run",
            "order",
            renewed=pl.when(pl.col("renewal") < pl.col("deadline")).then("chained").otherwise("deadline"),
            holds="order",
        )
    )
    # a herald heralds the opener after it in time, unless another herald comes between them
    heralds = first.with_columns(
        last_herald=(pl.col("run").shift(-1) == pl.col("run")).fill_null(False) & pl.col("held").shift(-1)
    ).filter(~pl.col("held"))
    heralding = (pl.col("opener") < pl.col("deadline")) & pl.col("last_herald")
    heralded = heralds.join_asof(
        held.select("run", "order", opener="order", opened="renewed"),
        on="order",
        by="run",
        strategy="forward",
        check_sortedness=False,
    ).select(
        "run",
        "order",
        renewed=pl.when(heralding).then("opened").otherwise("deadline"),
        holds=pl.when(heralding).then("opener"),
    )
    return (
        starts.lazy()
        .drop("deadline", "held")
        .join(pl.concat([held, heralded]), on=["run", "order"], how="left", maintain_order="left")
        .rename({"renewed": "deadline"})
        .collect()
    )


def _resolve(starts: pl.DataFrame, batch: Batch) -> tuple[pl.DataFrame, dict[int, OpenBlock]]:
    """The blocks that open (an opener inside an open block is none), each with its ``end``: the order of
    the first record past it (its closer's order + 1, a record that ends it, its deadline); and the one
    still open when the batch ends (its file goes on in the next batch)."""
    candidates = starts.with_columns(
        end=pl.min_horizontal(
            pl.col("ended").fill_null(_NEVER), (pl.col("closed") + 1).fill_null(_NEVER), "deadline"
        )
    ).sort("run", "order")
    last_row = batch.lines.height - 1
    kept, still_open = [], {}
    current_run, open_until = None, -1
    rows = candidates.select(
        "run", "order", "block", "deadline", "end", "ended", "closed", "last_row", "holds"
    ).iter_rows()
    for run, order, block, deadline, end, ended, closed, file_last_row, holds in rows:
        if run != current_run:
            current_run, open_until = run, -1
        if order < open_until:
            continue  # an opener inside the open block is one of its records
        goes_on = (
            run == batch.continues
            and file_last_row == last_row
            and ended is None
            and closed is None
            and end == deadline
        )
        if holds is None and not goes_on:
            end = order + 1  # a herald that no opener followed: a block of its own record
        kept.append((run, order, block, end, holds, ended is not None and ended == end))
        open_until = end
        if goes_on:
            still_open[run] = OpenBlock(opener=block, deadline=deadline, held=holds is not None)
    return pl.DataFrame(kept, schema=_KEPT_SCHEMA, orient="row"), still_open


def _records(kept: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """The records of each kept block: its opener's, and its candidates inside it (the closer last)."""
    return (
        candidates.filter(pl.col("body") | pl.col("closes"))
        .sort("run", "order")
        .join_asof(
            kept.select("run", "block", "end", "holds", at="start"),
            left_on="order",
            right_on="at",
            by="run",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(
            pl.col("order") < pl.col("end"),
            pl.col("order") > pl.col("at"),
            pl.col("order") >= pl.col("holds"),
        )
        .select(
            "run",
            "block",
            "order",
            "text",
            role=pl.when(pl.col("closes") & (pl.col("order") + 1 == pl.col("end")))
            .then(pl.lit(CLOSER, dtype=pl.Int8))
            .otherwise(pl.lit(BODY, dtype=pl.Int8)),
        )
    )


def _bound_records(bounds: pl.DataFrame, records: pl.DataFrame, role: int) -> pl.DataFrame:
    """The records at ``bounds`` (``run``, ``block``, ``order``) with ``role``: those that opened the kept
    blocks (``OPENER``: a carried block's was in an earlier batch) or the family's that ended them
    (``ENDED``: not theirs, read as usual too)."""
    return records.join(bounds, on=["run", "order"]).select(
        "run", "block", "order", "text", role=pl.lit(role, dtype=pl.Int8)
    )

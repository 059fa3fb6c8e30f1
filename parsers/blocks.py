"""Where the families' multi-line blocks are, batch by batch, and which records are theirs.

A block (``kinds.Block``) opens at a record of its family and runs over the following lines. Those lines
need no marker: they are looked for only inside blocks (the block's ``hint`` on the raw lines first, then
its record tests on the few lines that pass it). Spans are found per batch in line order: an opener
inside an open block is one of its records, not a new block, and a block still open at the end of a
batch goes on in the next one (``OpenBlock``), unless its file ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
from logstat.parsers.kinds import BODY, CLOSER, ENDED, FILE_SHIFT, LINE_SHIFT, OPENER, Block
from logstat.parsers.records import split_records

#: an order past every record of a batch
_NEVER = (1 << 62) - 1


@dataclass
class OpenBlock:
    """A block left open at the end of a batch, in its run's last file."""

    opener: int
    """The opener's order: the block's id among its records."""
    deadline: int
    """The first order that is no longer the block's (``max_lines`` after its opener, or never)."""


@dataclass
class Spans:
    """A batch's blocks of one kind: their records (``run``, ``block``, ``order``, ``text``, ``role``) and
    the spans (``run``, ``start``, ``end``: orders, the end not the block's own) they cover."""

    records: pl.DataFrame
    spans: pl.DataFrame
    still_open: dict[int, OpenBlock] = field(default_factory=dict)


_SPAN_SCHEMA = {"run": pl.Int64, "start": pl.Int64, "end": pl.Int64}
RECORD_SCHEMA = {"run": pl.Int64, "block": pl.Int64, "order": pl.Int64, "text": pl.String, "role": pl.Int8}


def find_spans(
    number: int,
    block: Block,
    lines: pl.DataFrame,
    records: pl.DataFrame,
    carried: dict[int, OpenBlock],
    continues: int | None,
    separator: str,
) -> Spans | None:
    """The spans of block ``number`` in a batch: ``lines`` (``run``, ``order``, ``text``),
    ``records`` (its tagged records), ``carried`` (by run: the block left open by the batch before, in
    the file the batch goes on with), ``continues`` (the run whose last file goes on in the next batch)."""
    openers = records.filter(pl.col(f"o{number}")).select("run", "order")
    if openers.is_empty() and not carried:
        return None
    starts = _starts(openers, carried, lines, block)
    ends = records.filter(pl.col(f"e{number}")).select("run", "order")
    window = _window(starts, ends, lines)
    candidates = _candidates(block, window, separator)
    closers = candidates.filter(pl.col("closes")).select("run", "order")
    kept, still_open = _resolve(starts, ends, closers, lines, continues)
    block_records = pl.concat(
        [_opener_records(kept, records), _records(kept, candidates), _ended_records(kept, records)]
    )
    return Spans(
        records=block_records,
        spans=kept.select("run", "start", "end").cast(_SPAN_SCHEMA),
        still_open=still_open,
    )


def _starts(
    openers: pl.DataFrame, carried: dict[int, OpenBlock], lines: pl.DataFrame, block: Block
) -> pl.DataFrame:
    """``run``, ``order`` (where the block's records begin), ``block`` (its id: the opener's order),
    ``deadline`` (the first order past its lines), sorted; the openers and the carried blocks."""
    reach = (block.max_lines + 1) << LINE_SHIFT if block.max_lines is not None else None
    file_end = (pl.col("order") // (1 << FILE_SHIFT) + 1) * (1 << FILE_SHIFT)
    deadline = file_end if reach is None else pl.min_horizontal(pl.col("order") + reach, file_end)
    frames = [openers.select("run", "order", block="order", deadline=deadline)]
    if carried:
        first = lines.group_by("run").agg(pl.col("order").min())
        known = dict(zip(first["run"], first["order"], strict=True))
        frames.append(
            pl.DataFrame(
                [
                    (run, known[run] - 1, state.opener, state.deadline)
                    for run, state in carried.items()
                    if run in known
                ],
                schema={"run": pl.Int64, "order": pl.Int64, "block": pl.Int64, "deadline": pl.Int64},
                orient="row",
            )
        )
    return pl.concat(frames, how="vertical_relaxed").sort("run", "order")


def _window(starts: pl.DataFrame, ends: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """The lines after some opener, before its deadline and the first record of the family that ends it."""
    reach = (
        starts.join_asof(
            ends.rename({"order": "end"}).with_columns(at=pl.col("end")),
            left_on="order",
            right_on="at",
            by="run",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .select("run", "order", reach=pl.min_horizontal(pl.col("end").fill_null(_NEVER), "deadline"))
        # nested openers: a row is in a window if any opener before it still reaches it
        .with_columns(pl.col("reach").cum_max().over("run"))
    )
    # a line's order has no record index: the opener's line is its own window's first
    line_reach = reach.with_columns(pl.col("order") // (1 << LINE_SHIFT) * (1 << LINE_SHIFT))
    return (
        lines.join_asof(line_reach, on="order", by="run", strategy="backward", check_sortedness=False)
        .filter(pl.col("order") < pl.col("reach"))
        .select("run", "order", "text")
    )


def _candidates(block: Block, window: pl.DataFrame, separator: str) -> pl.DataFrame:
    """The records of the window's lines that are the block's (``body``) or close it (``closes``)."""
    lines = window.lazy()
    if block.hint is not None:
        lines = lines.filter(pl.col("text").str.contains(block.hint))
    text = pl.col("text")
    closes = block.closes.expr(text) if block.closes is not None else pl.lit(False)
    return (
        split_records(lines, separator)
        .with_columns(body=block.body.expr(text), closes=closes)
        .filter(pl.col("body") | pl.col("closes"))
        .collect()
    )


def _resolve(
    starts: pl.DataFrame,
    ends: pl.DataFrame,
    closers: pl.DataFrame,
    lines: pl.DataFrame,
    continues: int | None,
) -> tuple[pl.DataFrame, dict[int, OpenBlock]]:
    """The blocks that open (an opener inside an open block is none), each with its ``end``: the order of
    the first record past it (its closer's order + 1, a record that ends it, its deadline); and those
    still open when the batch ends (their file goes on in the next batch)."""
    first_after = [
        _first_after(starts, other, name) for other, name in ((ends, "ended"), (closers, "closed"))
    ]
    candidates = (
        starts.join(first_after[0], on=["run", "order"], how="left")
        .join(first_after[1], on=["run", "order"], how="left")
        .with_columns(
            end=pl.min_horizontal(
                pl.col("ended").fill_null(_NEVER), (pl.col("closed") + 1).fill_null(_NEVER), "deadline"
            )
        )
    )
    last_order = lines.filter(pl.col("run") == continues)["order"].max() if continues is not None else None
    kept, still_open = [], {}
    current_run, open_until = None, -1
    rows = candidates.select("run", "order", "block", "deadline", "end", "ended", "closed").iter_rows()
    for run, order, block, deadline, end, ended, closed in rows:
        if run != current_run:
            current_run, open_until = run, -1
        if order < open_until:
            continue  # an opener inside the open block is one of its records
        kept.append((run, order, block, end, ended == end))
        open_until = end
        if run == continues and ended is None and closed is None and deadline > last_order:
            still_open[run] = OpenBlock(opener=block, deadline=deadline)
    frame = pl.DataFrame(
        kept,
        schema={"run": pl.Int64, "start": pl.Int64, "block": pl.Int64, "end": pl.Int64, "by_end": pl.Boolean},
        orient="row",
    )
    return frame, still_open


def _first_after(starts: pl.DataFrame, events: pl.DataFrame, name: str) -> pl.DataFrame:
    """Per start, the order of the first of ``events`` after it in its run (column ``name``)."""
    return (
        starts.select("run", "order")
        .sort("run", "order")
        .join_asof(
            events.sort("run", "order").with_columns(pl.col("order").alias(name)),
            on="order",
            by="run",
            strategy="forward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .select("run", "order", name)
    )


def _records(kept: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """The records of each kept block: its opener's, and its candidates inside it (the closer last)."""
    inside = (
        candidates.sort("run", "order")
        .join_asof(
            kept.select("run", "block", "end", at="start"),
            left_on="order",
            right_on="at",
            by="run",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("order") < pl.col("end"), pl.col("order") > pl.col("at"))
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
    return inside.cast(RECORD_SCHEMA)


def _opener_records(kept: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """The records that opened the kept blocks (a carried block's opener was in an earlier batch)."""
    return (
        records.join(kept.select("run", order="block"), on=["run", "order"])
        .select("run", block="order", order="order", text="text", role=pl.lit(OPENER, dtype=pl.Int8))
        .cast(RECORD_SCHEMA)
    )


def _ended_records(kept: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """The records of the family that ended kept blocks (not theirs: read as usual too)."""
    return (
        records.join(kept.filter(pl.col("by_end")).select("run", "block", order="end"), on=["run", "order"])
        .select("run", "block", "order", "text", role=pl.lit(ENDED, dtype=pl.Int8))
        .cast(RECORD_SCHEMA)
    )

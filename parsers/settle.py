"""Runs' step, timer and fact events merged column-wise into their rows, once their files were read.

The record kinds' records of every run read together are turned into events in one polars query per
kind (a query has a fixed cost of milliseconds, which a thousand small files would pay a thousand
times), and all runs' events are merged at once, keyed by run. The rules are those a run's lines
imply when read in order (``kinds.order_key``):

- a step's row merges every event of the step in its last launch (ranks print a step many times; a
  relaunch that logs a step again replaces the earlier launch's row): per column, the first value;
  a peak metric (memory of the largest rank) the largest;
- the row points at the step's first record; a row a metric line opened (memory, the profiler) points
  at the step's own record when one comes later;
- an event without a step (a timer breakdown, Megatron's effective TFLOPs) belongs to the last step
  logged before it (``join_asof``), and a timer of a step a later launch logged again is dropped;
- a fact goes to the first family that states it, with that family's last statement.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING, Any

import polars as pl
from logstat.parsers.kinds import (
    FILE_SHIFT,
    PEAK,
    STEP_EVENT_SCHEMA,
    STEP_METRICS_SCHEMA,
    TIMER_EVENT_SCHEMA,
    RecordKind,
    file_of,
    line_of,
    read_records,
)

if TYPE_CHECKING:
    from logstat.parsers.base import RunBuilder

ITERATION_COLUMNS = ("iteration", *STEP_METRICS_SCHEMA, "family", "line", "source_path")
TIMER_COLUMNS = ("iteration", "timer", "ms", "family", "line", "source_path")
#: records a run holds before they are read (a long log is read in batches of about this many)
BATCH_RECORDS = 250_000
_RECORD_SCHEMA = {"order": pl.Int64, "text": pl.String, "kind": pl.Int32}
_EVENTS_PER_RECORD = 256  # a record's events: its order plus an index below this (kinds.order_key)


def read_kind_records(kinds: tuple[RecordKind, ...], records: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """The events of ``records`` (``run``, ``order``, ``text``, ``kind``) of many runs at once, per sort
    (``steps``, ``timers``, ``facts``, ``notes``), each with its ``run`` and reading ``order``."""
    keyed = records.with_row_index("row").with_columns(key=pl.col("row").cast(pl.Int64) * _EVENTS_PER_RECORD)
    events = read_records(kinds, keyed.select(order="key", text="text", kind="kind"))
    base = keyed.select(pl.col("row").cast(pl.Int64), "run", base="order")
    located = {}
    for name in ("steps", "timers", "facts", "notes"):
        frames = getattr(events, name)
        if not frames:
            continue
        located[name] = (
            pl.concat(frames, how="diagonal_relaxed")
            .with_columns(
                row=pl.col("order") // _EVENTS_PER_RECORD, item=pl.col("order") % _EVENTS_PER_RECORD
            )
            .join(base, on="row")
            .with_columns(order=pl.col("base") + pl.col("item"))
            .drop("row", "item", "base")
        )
    if "facts" in located:
        located["facts"] = _first_and_last(located["facts"])
    if "timers" in located:
        # a long log holds millions of timers until they are settled: names as categories, small positions
        located["timers"] = located["timers"].with_columns(
            pl.col("timer").cast(pl.Categorical), pl.col("position").cast(pl.Int32)
        )
    return located


def _first_and_last(facts: pl.DataFrame) -> pl.DataFrame:
    """Of each run's statements of a fact by a family, the first and the last: all ``_settle_facts``
    weighs (every iteration record states the planned steps: a long log's millions of statements)."""
    ordered = facts.sort("run", "order")
    keys = ["run", "fact", "family"]
    return pl.concat([ordered.unique(keys, keep="first"), ordered.unique(keys, keep="last")]).unique(
        [*keys, "order"]
    )


def flush(run: RunBuilder, index: int, kinds: tuple[RecordKind, ...]) -> None:
    """Read a run's pending kind records into events (a long log, before it holds too many)."""
    records = _pending(run, index)
    if records is not None:
        for name, frame in read_kind_records(kinds, records).items():
            run.kind_events.setdefault(name, []).append(frame)


def _pending(run: RunBuilder, index: int) -> pl.DataFrame | None:
    frames = list(run.kind_records)
    if run.deferred:
        frames.append(pl.DataFrame(run.deferred, schema=_RECORD_SCHEMA, orient="row"))
    run.kind_records.clear()
    run.deferred.clear()
    if not frames:
        return None
    return pl.concat(frames, how="vertical_relaxed").with_columns(run=pl.lit(index, dtype=pl.Int64))


def settle_runs(runs: list[RunBuilder], kinds: tuple[RecordKind, ...]) -> None:
    """Fill each run's ``iteration_frame``, ``timer_frame``, ``last_iteration``, the kinds' facts,
    record counts and notes, from every run's events at once."""
    pending = [frame for index, run in enumerate(runs) if (frame := _pending(run, index)) is not None]
    events: dict[str, list[pl.DataFrame]] = {}
    if pending:
        for name, frame in read_kind_records(kinds, pl.concat(pending)).items():
            events.setdefault(name, []).append(frame)
    for index, run in enumerate(runs):
        for name, frames in run.kind_events.items():
            events.setdefault(name, []).extend(
                frame.with_columns(run=pl.lit(index, dtype=pl.Int64)) for frame in frames
            )
        run.kind_events = {}
    files = pl.DataFrame(
        [(index, number, path) for index, run in enumerate(runs) for number, path in enumerate(run.files)],
        schema={"run": pl.Int64, "file": pl.Int64, "source_path": pl.String},
        orient="row",
    )
    steps = _step_events(runs, events.get("steps", []))
    records = steps.filter(pl.col("mode") != PEAK, pl.col("step").is_not_null()).select(
        "run", "order", last_step="step"
    )
    starts = _launch_starts(runs, steps)
    steps = (
        steps.join_asof(records, on="order", by="run", strategy="backward", check_sortedness=False)
        .with_columns(step=pl.coalesce("step", "last_step"))
        .drop("last_step")
        .drop_nulls("step")
        .pipe(_with_launch, starts)
    )
    final_launch = steps.group_by("run", "step").agg(final=pl.col("launch").max())
    rows = _rows(
        steps.join(final_launch, on=["run", "step"]).filter(pl.col("launch") == pl.col("final")), files
    )
    timers = _timers(events.get("timers", []), records, starts, final_launch, files)
    last = steps.filter(pl.col("mode") != PEAK).group_by("run").agg(pl.col("step").last())
    by_run_rows = rows.partition_by("run", as_dict=True, include_key=False)
    by_run_timers = timers.partition_by("run", as_dict=True, include_key=False)
    last_steps = dict(last.iter_rows())
    for index, run in enumerate(runs):
        run.iteration_frame = by_run_rows.get((index,))
        run.timer_frame = by_run_timers.get((index,))
        run.last_iteration = last_steps.get(index)
    _settle_facts(runs, events.get("facts", []))
    for frame in events.get("notes", []):
        for index, family, line, message in frame.select(
            "run", "family", line_of(pl.col("order")), "message"
        ).iter_rows():
            runs[index].note(family, line, message)


def _step_events(runs: list[RunBuilder], kind_steps: list[pl.DataFrame]) -> pl.DataFrame:
    """Every step event of ``runs`` (the Python families' and the kinds'), with its ``line`` and ``file``,
    sorted by run and order."""
    columns: dict[str, list[Any]] = {name: [] for name in ("run", *STEP_EVENT_SCHEMA, "line", "file")}
    for index, run in enumerate(runs):
        for order, step, mode, family, line, file, metrics in run.step_events:
            for name, value in (
                ("run", index),
                ("order", order),
                ("step", step),
                ("mode", mode),
                ("family", family),
            ):
                columns[name].append(value)
            for name in STEP_METRICS_SCHEMA:
                columns[name].append(metrics.get(name))
            columns["line"].append(line)
            columns["file"].append(file)
        run.step_events = []
    schema = {"run": pl.Int64, **STEP_EVENT_SCHEMA, "line": pl.Int64, "file": pl.Int64}
    python = pl.DataFrame(columns, schema=schema, strict=False)
    located = [
        frame.with_columns(line=line_of(pl.col("order")), file=file_of(pl.col("order")))
        for frame in kind_steps
    ]
    return pl.concat([python, *located], how="diagonal_relaxed").sort("run", "order", maintain_order=True)


def _launch_starts(runs: list[RunBuilder], steps: pl.DataFrame) -> pl.DataFrame:
    """``(run, order, launch)`` where a launch starts: each ``new_launch`` call after which its family had
    logged a step record (not a metric alone, nor a line about the last step) since its previous call."""
    starts: list[tuple[int, int, int]] = []
    for index, run in enumerate(runs):
        if not run.launch_candidates:
            continue
        mine = steps.filter(pl.col("run") == index, pl.col("mode") != PEAK, pl.col("step").is_not_null())
        by_family = {family: frame["order"].to_list() for (family,), frame in mine.group_by("family")}
        previous: dict[str, int] = {}
        launches = 0
        for order, family in run.launch_candidates:
            orders = by_family.get(family, [])
            if bisect_left(orders, order) > bisect_right(orders, previous.get(family, -1)):
                launches += 1
                starts.append((index, order, launches))
            previous[family] = order
    return pl.DataFrame(starts, schema={"run": pl.Int64, "order": pl.Int64, "launch": pl.Int64}, orient="row")


def _with_launch(events: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    """Each event's ``launch``: how many launches of its run started before it (0: the first)."""
    if starts.is_empty():
        return events.with_columns(launch=pl.lit(0, dtype=pl.Int64))
    return events.join_asof(
        starts, on="order", by="run", strategy="backward", check_sortedness=False
    ).with_columns(pl.col("launch").fill_null(0))


def _rows(steps: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """One row per run and step, of the step's final launch's events."""
    index = pl.int_range(pl.len())
    first_record = pl.col("order").filter((index > 0) & (pl.col("mode") != PEAK)).first()
    values = [
        pl.max_horizontal(
            pl.col(name).drop_nulls().first(), pl.col(name).filter(pl.col("mode") == PEAK).max()
        ).alias(name)
        for name in STEP_METRICS_SCHEMA
    ]
    # a row opened by a metric line points at the step's own record (the first later one), if any
    pointer = (
        pl.when(pl.col("mode").first() == 0)
        .then(pl.col("order").first())
        .otherwise(pl.coalesce(first_record, pl.col("order").first()))
    )
    rows = steps.group_by("run", "step").agg(*values, pointer=pointer)
    provenance = steps.select("run", "order", "family", "line", "file")
    return (
        rows.join(provenance, left_on=["run", "pointer"], right_on=["run", "order"])
        .join(files, on=["run", "file"], how="left")
        .rename({"step": "iteration"})
        .sort("run", "iteration")
        .select("run", *ITERATION_COLUMNS)
    )


def _timers(
    timers: list[pl.DataFrame],
    records: pl.DataFrame,
    starts: pl.DataFrame,
    final_launch: pl.DataFrame,
    files: pl.DataFrame,
) -> pl.DataFrame:
    """The timer rows, each of the last step its run logged before it; those of a step a later launch
    logged again are dropped."""
    if timers:
        frame = pl.concat(timers, how="diagonal_relaxed")
    else:
        frame = pl.DataFrame(schema={"run": pl.Int64, **TIMER_EVENT_SCHEMA, "position": pl.Int64})
    return (
        frame.sort("run", "order", "position")
        .join_asof(records, on="order", by="run", strategy="backward", check_sortedness=False)
        .pipe(_with_launch, starts)
        .with_columns(line=line_of(pl.col("order")), file=file_of(pl.col("order")))
        .join(
            final_launch,
            left_on=["run", "last_step"],
            right_on=["run", "step"],
            how="left",
            maintain_order="left",
        )
        .filter(pl.col("final").fill_null(0) <= pl.col("launch"))
        .join(files, on=["run", "file"], how="left", maintain_order="left")
        .rename({"last_step": "iteration"})
        .select("run", *TIMER_COLUMNS)
    )


def _settle_facts(runs: list[RunBuilder], facts: list[pl.DataFrame]) -> None:
    """The kinds' facts weighed against the Python families' statements of the same facts: the first
    family to state a fact owns it, and its last statement is the value (``RunBuilder.set_fact``)."""
    if not facts:
        return
    summary = (
        pl.concat(facts, how="diagonal_relaxed")
        .sort("run", "order")
        .group_by("run", "fact", "family")
        .agg(first=pl.col("order").first(), last=pl.col("order").last(), value=pl.col("value").last())
    )
    # (order, family, value or None: a first statement whose value a later one replaces, line)
    stated: dict[tuple[int, str], list[tuple[int, str, Any, int]]] = {}
    for index, name, family, first, last, value in summary.iter_rows():
        stated.setdefault((index, name), []).extend(
            [(first, family, None, 0), (last, family, value, line_of_order(last))]
        )
    for (index, name), statements in stated.items():
        run = runs[index]
        if run.provenance.get(name, "").startswith("manifest"):
            continue
        statements = sorted(
            statements + run.fact_statements.get(name, []), key=lambda statement: statement[0]
        )
        owner = statements[0][1]
        order, _, value, line = [s for s in statements if s[1] == owner and s[2] is not None][-1]
        run.facts[name] = value
        run.provenance[name] = f"{owner}:{line}"
        if (order >> FILE_SHIFT) < len(run.files):
            run.state.setdefault("fact_files", {})[name] = run.files[order >> FILE_SHIFT]


def line_of_order(order: int) -> int:
    """The line number of an ``order_key`` (``kinds.line_of`` for one number)."""
    return (order % (1 << FILE_SHIFT)) >> 16


def declared_facts(kinds: tuple[RecordKind, ...]) -> dict[str, list]:
    """The facts the ``kinds`` state, each with an empty list of the Python families' statements."""
    return {fact: [] for kind in kinds for fact in kind.facts}

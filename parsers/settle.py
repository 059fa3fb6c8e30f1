"""Runs' step, timer and fact events merged column-wise into their rows, once their files were read.

All runs read together are merged at once, keyed by run (a polars query costs milliseconds, which a
thousand small files would pay a thousand times), by the rules a run's lines imply in order:

- a step's row merges its events of the step's last launch (ranks print a step many times; a relaunch
  logging it again replaces the earlier row): per column the first value, a peak metric the largest;
- the row points at the step's first record, or at its own record coming later if a metric line
  (memory, the profiler) opened it;
- an event without a step (a timer breakdown, Megatron's effective TFLOPs) belongs to the last step
  logged before it (``join_asof``), and a timer of a step a later launch logged again is dropped;
- a timer line printed at every step (``per_step``: DeepSpeed's wall-clock breakdown, whose ``step=``
  is printed only every ``steps_per_print``) belongs to the step counted in step ends from the step
  record before it in its launch, or else back from the one after it (``_counted_steps``);
- a fact goes to the first family that states it, with that family's last statement.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import cache
from typing import TYPE_CHECKING, Any

import polars as pl
from logstat.parsers import registry
from logstat.parsers.base import CAUSE
from logstat.parsers.kinds import (
    CLEAN_EXIT,
    COMPLETE,
    COUNTED,
    FILE_SHIFT,
    LAUNCH,
    LINE_SHIFT,
    PEAK,
    RECORD,
    RECORD_SHIFT,
    REQUEUED,
    RESTARTED,
    SEEN,
    STEP_END,
    STEP_EVENT_SCHEMA,
    STEP_METRICS_SCHEMA,
    TIMER_EVENT_SCHEMA,
    Events,
    file_of,
    line_of,
    line_of_order,
)

if TYPE_CHECKING:
    from logstat.parsers.base import RunBuilder

ITERATION_COLUMNS = ("iteration", "launch", *STEP_METRICS_SCHEMA, "family", "line", "source_path")
TIMER_COLUMNS = ("iteration", "timer", "ms", "family", "line", "source_path")


def settle_runs(runs: list[RunBuilder], events: Events) -> None:
    """Fill each run's ``iteration_frame``, ``timer_frame``, ``last_iteration``, facts, failure,
    completion and record counts from the Python families' calls and ``events`` (with ``run`` columns)."""
    _settle_marks(runs, events.marks)
    files = pl.DataFrame(
        [(index, number, path) for index, run in enumerate(runs) for number, path in enumerate(run.files)],
        schema={"run": pl.Int64, "file": pl.Int64, "source_path": pl.String},
        orient="row",
    )
    steps = _step_events(runs, events.steps)
    _fresh_start_candidates(runs, steps)
    _restart_candidates(runs, events.failures)
    starts = _launch_starts(runs, steps)
    steps = _counted_in_launch(steps, starts)
    anchors = steps.filter(pl.col("mode") != PEAK, pl.col("step").is_not_null())
    records = anchors.select("run", "order", last_step="step")
    anchors = anchors.filter(pl.col("mode") == RECORD).select("run", "order", "step", "family")
    anchors = anchors.pipe(_with_launch, starts)
    steps = (
        steps.join_asof(records, on="order", by="run", strategy="backward", check_sortedness=False)
        .with_columns(step=pl.coalesce("step", "last_step"))
        .drop("last_step")
        .drop_nulls("step")
        .pipe(_with_launch, starts)
    )
    since = _last_fresh_starts(steps)
    steps, anchors = _from_launch(steps, since), _from_launch(anchors, since)
    final_launch = steps.group_by("run", "step").agg(final=pl.col("launch").max())
    rows = _rows(steps, final_launch, files)
    timers = _timers(events.timers, records, anchors, starts, final_launch, files, since)
    last = steps.filter(pl.col("mode") != PEAK).group_by("run").agg(pl.col("step").last())
    by_run_rows = rows.partition_by("run", as_dict=True, include_key=False)
    by_run_timers = timers.partition_by("run", as_dict=True, include_key=False)
    last_steps = dict(last.iter_rows())
    for index, run in enumerate(runs):
        run.iteration_frame = by_run_rows.get((index,))
        run.timer_frame = by_run_timers.get((index,))
        run.last_iteration = last_steps.get(index)
    _settle_facts(runs, events.facts)
    _settle_failures(runs, events.failures, starts)
    for frame in events.notes:
        for index, family, line, message in frame.select(
            "run", "family", line_of(pl.col("order")), "message"
        ).iter_rows():
            runs[index].note(family, line, message)


def _settle_marks(runs: list[RunBuilder], marks: list[pl.DataFrame]) -> None:
    """The record kinds' marks: records of a family, the run's end (the last), a clean exit (the first),
    new launches (before the steps are settled: a launch decides which rows are the final ones)."""
    if not marks:
        return
    frame = pl.concat(marks).sort("run", "order", maintain_order=True)
    seen = (
        frame.filter(pl.col("mark") == SEEN)
        .group_by("run", "family")
        .agg(pl.col("count").sum(), pl.col("order").min())
    )
    for index, family, count, first in seen.iter_rows():
        runs[index].saw(family, count, at=first)
    for mark, keep, attribute in ((COMPLETE, "last", "completion"), (CLEAN_EXIT, "first", "clean_exit")):
        chosen = frame.filter(pl.col("mark") == mark).unique("run", keep=keep, maintain_order=True)
        for index, order, text in chosen.select("run", "order", "text").iter_rows():
            run = runs[index]
            known = getattr(run, attribute)
            if known is None or (known[3] <= order if mark == COMPLETE else known[3] >= order):
                located = (text.strip()[:300], line_of_order(order), run.files[order >> FILE_SHIFT], order)
                setattr(run, attribute, located)
    launches = frame.filter(pl.col("mark") == LAUNCH).select("run", "order", "family")
    for index, order, family in launches.iter_rows():
        runs[index].launch_candidates.append((order, family))
    for run in runs:
        run.launch_candidates.sort()


def seen_folded(marks: pl.DataFrame) -> pl.DataFrame:
    """One read's marks (with ``run``) with a ``count``: its SEEN marks folded into one per run and family,
    at the first (``_settle_marks`` asks how many and where the first is: a mark per record of a 1 GiB log
    is ~100 MB)."""
    seen = pl.col("mark") == SEEN
    columns = [*marks.columns, "count"]
    folded = (
        marks.filter(seen).group_by("run", "family").agg(pl.all().sort_by("order").first(), count=pl.len())
    )
    return pl.concat(
        [marks.filter(~seen).with_columns(count=pl.lit(1, pl.UInt32)).select(columns), folded.select(columns)]
    )


def _settle_failures(runs: list[RunBuilder], failures: list[pl.DataFrame], starts: pl.DataFrame) -> None:
    """The record kinds' failure events folded with the Python families', in line order, into each run's
    failure and consequences (``RunBuilder.refold``: the run keeps them all, for the families' ``finish``);
    those before the run's last launch are consequences only (``RunBuilder.launch_start``): a job requeued
    after a preemption, or restarted after a crash, ended as its last launch did."""
    last_start = dict(starts.group_by("run").agg(pl.col("order").max()).iter_rows())
    columns = ("order", "status", "reason", "weight", "kind", "exception", "chained")
    kind_events = pl.concat(failures).partition_by("run", as_dict=True) if failures else {}
    for index, run in enumerate(runs):
        rows = kind_events[(index,)].select(columns).rows() if (index,) in kind_events else []
        run.launch_start = max(run.launch_start, last_start.get(index, -1))
        if not rows and not (run.failure_events and run.launch_start >= 0):
            continue
        run.refold(sorted(run.failure_events + rows, key=lambda event: event[0]))


def _step_events(runs: list[RunBuilder], kind_steps: list[pl.DataFrame]) -> pl.DataFrame:
    """Every step event of ``runs`` (the Python families' and the kinds'), with its ``line`` and ``file``,
    sorted by run and order."""
    schema = {"run": pl.Int64, **STEP_EVENT_SCHEMA, "line": pl.Int64, "file": pl.Int64}
    columns: dict[str, list[Any]] = {name: [] for name in schema}
    for index, run in enumerate(runs):
        for order, step, mode, family, line, file, metrics in run.step_events:
            values = (index, order, step, mode, family, *map(metrics.get, STEP_METRICS_SCHEMA), line, file)
            for column, value in zip(columns.values(), values, strict=True):
                column.append(value)
        run.step_events = []
    python = pl.DataFrame(columns, schema=schema, strict=False)
    located = [
        frame.with_columns(line=line_of(pl.col("order")), file=file_of(pl.col("order")))
        for frame in kind_steps
    ]
    return pl.concat([python, *located], how="diagonal_relaxed").sort("run", "order", maintain_order=True)


def _launch_starts(runs: list[RunBuilder], steps: pl.DataFrame) -> pl.DataFrame:
    """``(run, order, launch)`` where a launch starts: each ``new_launch`` call after which its family had
    logged a step record (not a metric alone, nor a line about the last step) since the last launch start
    (a relaunch Megatron and DeepSpeed both announce, by their dumps, starts one launch)."""
    starts: list[tuple[int, int, int]] = []
    for index, run in enumerate(runs):
        if not run.launch_candidates:
            continue
        mine = steps.filter(pl.col("run") == index, pl.col("mode") != PEAK, pl.col("step").is_not_null())
        by_family = {family: frame["order"].to_list() for (family,), frame in mine.group_by("family")}
        every = mine.filter(pl.col("mode") == RECORD).select("order", "step")
        started, launches = -1, 0
        for order, family in run.launch_candidates:
            if family == REQUEUED:
                relaunched = _went_back(every["order"], every["step"], started, order)
            elif family == RESTARTED:  # a launch from the new training's first step (its crash's tail before)
                first = _started_over(every["order"], every["step"], started, order)
                relaunched, order = first is not None, order if first is None else first
            else:
                orders = by_family.get(family, [])
                relaunched = bisect_left(orders, order) > bisect_right(orders, started)
            if relaunched:
                launches += 1
                starts.append((index, order, launches))
                started = order
    return pl.DataFrame(starts, schema={"run": pl.Int64, "order": pl.Int64, "launch": pl.Int64}, orient="row")


def _fresh_start_candidates(runs: list[RunBuilder], steps: pl.DataFrame) -> None:
    """A launch candidate at each step record where its family's steps start over in a file: no later than
    the family's first step in the run, after a later one on an earlier line of the same file, and the next
    record later than it but short of the highest before (a rank's lagging line is followed by the others'
    later steps; ranks' records glued into one line are one moment's). A job that runs trainings one after
    another (stages, a sweep's members, ``torchrun pretrain.py && torchrun sft.py``) announces none. Each
    rank's own file counts from the start: not a launch."""
    by, step, line = ["run", "family"], pl.col("step"), pl.col("order") // (1 << LINE_SHIFT)
    file = pl.col("order") // (1 << FILE_SHIFT)
    records = steps.filter(pl.col("mode") == RECORD, step.is_not_null()).select(
        "run", "order", "family", "step"
    )
    after = step.shift(-1).over(by)
    again = records.filter(
        step <= step.first().over(by),
        step < step.shift(1).over(by),
        file == file.shift(1).over(by),
        line > line.shift(1).over(by),
        after > step,
        after < step.cum_max().shift(1).over(by),
    )
    for index, order in again.select("run", "order").iter_rows():
        runs[index].launch_candidates.append((order, REQUEUED))


def _restart_candidates(runs: list[RunBuilder], failures: list[pl.DataFrame]) -> None:
    """A launch candidate right after each failure that killed a process (``RESTARTED``): a job script
    that goes on after it (a loop over configurations, a retry) starts the training again in the log."""
    schema = {"run": pl.Int64, "order": pl.Int64, "status": pl.String, "weight": pl.Int64}
    python = [(index, *event[:2], event[3]) for index, run in enumerate(runs) for event in run.failure_events]
    every = [
        pl.DataFrame(python, schema=schema, orient="row"),
        *(frame.select(*schema) for frame in failures),
    ]
    fatal = pl.concat(every).filter(pl.col("status") == "failed", pl.col("weight") >= CAUSE)
    for index, order in fatal.select("run", "order").unique(maintain_order=True).iter_rows():
        runs[index].launch_candidates.append((order + (1 << RECORD_SHIFT), RESTARTED))
    for run in runs:
        run.launch_candidates.sort()


def _started_over(orders: pl.Series, steps: pl.Series, started: int, order: int) -> int | None:
    """The order of the first step record after ``order`` if it is in its file and no later than the run's
    first (a training begun anew; a resume from a checkpoint after a crash is told apart by nothing but a
    rank's lagging lines; each rank's own log counts from the start), with a step record since ``started``
    before it; else None."""
    before = int(orders.search_sorted(order, side="left"))
    since = int(orders.search_sorted(started, side="right"))
    if not since < before < len(orders) or orders[before] >> FILE_SHIFT != order >> FILE_SHIFT:
        return None
    return int(orders[before]) if steps[before] <= steps[0] else None


def _went_back(orders: pl.Series, steps: pl.Series, started: int, order: int) -> bool:
    """Whether the first step record after ``order`` is no later than one since ``started`` before it (both
    of any family): the training started again from a checkpoint (or from scratch)."""
    before = int(orders.search_sorted(order, side="left"))
    since = int(orders.search_sorted(started, side="right"))
    return since < before < len(orders) and steps[before] <= steps[since:before].max()


def _counted_in_launch(steps: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    """``steps`` with each COUNTED event a RECORD one, of the step of its family's record before it in its
    launch where that is higher: DeepSpeed's ThroughputTimer counts the steps since the engine started
    (``global_step=10``), the engine's ``step=1510`` before it in the step those since the training did.
    Only the counted events and their families' records are joined (a 1 GiB log has millions of events)."""
    mode = steps.get_column("mode")
    at = (mode == COUNTED).arg_true()
    if at.is_empty():
        return steps
    located = steps.select("run", "order", "family", "step")
    counted = located[at].pipe(_with_launch, starts)
    families = counted.get_column("family").unique().implode()
    before = (
        located.filter((mode == RECORD) & pl.col("step").is_not_null() & pl.col("family").is_in(families))
        .pipe(_with_launch, starts)
        .rename({"step": "record_step"})
    )
    joined = counted.join_asof(
        before, on="order", by=["run", "launch", "family"], strategy="backward", check_sortedness=False
    )
    later = (pl.col("record_step") > pl.col("step")).fill_null(False)
    step = joined.select(pl.when(later).then("record_step").otherwise("step")).to_series()
    return steps.with_columns(
        steps.get_column("step").scatter(at, step), mode.scatter(at, pl.Series([RECORD], dtype=mode.dtype))
    )


def _last_fresh_starts(steps: pl.DataFrame) -> pl.DataFrame:
    """Per run (``run``, ``since``), its last launch that started from scratch: its first step record no
    later than the first launch's (no checkpoint loaded). Such a launch trains another model, or the same
    one again (two runs' logs joined with ``cat``, a crashed run started over): the steps and timers
    before it are not this training's, though it may stop before them."""
    first = steps.filter(pl.col("mode") == RECORD).group_by("run", "launch").agg(first=pl.col("step").min())
    first_launchs = pl.col("first").filter(pl.col("launch") == 0).first().over("run")
    fresh = first.filter(pl.col("first") <= first_launchs)
    return fresh.group_by("run").agg(since=pl.col("launch").max())


def _from_launch(events: pl.DataFrame, since: pl.DataFrame) -> pl.DataFrame:
    """``events`` (with their ``launch``) of their run's launch ``since`` and after."""
    events = events.join(since, on="run", how="left", maintain_order="left")
    return events.filter(pl.col("launch") >= pl.col("since").fill_null(0)).drop("since")


def _with_launch(events: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    """Each event's ``launch``: how many launches of its run started before it (0: the first)."""
    if starts.is_empty():
        return events.with_columns(launch=pl.lit(0, dtype=pl.Int64))
    return events.join_asof(
        starts, on="order", by="run", strategy="backward", check_sortedness=False
    ).with_columns(pl.col("launch").fill_null(0))


def _rows(steps: pl.DataFrame, final_launch: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """One row per run and step, of the step's final launch's events (``launch``: which)."""
    steps = steps.join(final_launch, on=["run", "step"]).filter(pl.col("launch") == pl.col("final"))
    index, engine = pl.int_range(pl.len()), pl.col("family").is_in(_families_that("engine"))
    first_record = pl.col("order").filter((index > 0) & (pl.col("mode") != PEAK)).first()
    values = [
        pl.max_horizontal(
            pl.coalesce(pl.col(name).filter(~engine).drop_nulls().first(), pl.col(name).drop_nulls().first()),
            pl.col(name).filter(pl.col("mode") == PEAK).max(),
        ).alias(name)
        for name in STEP_METRICS_SCHEMA
    ]
    # a row opened by a metric line points at the step's own record (the first later one), if any; the
    # framework's record, if it logged the step
    pointer = pl.coalesce(
        pl.col("order").filter(~engine & (pl.col("mode") == RECORD)).first(),
        pl.when(pl.col("mode").first() == RECORD)
        .then(pl.col("order").first())
        .otherwise(pl.coalesce(first_record, pl.col("order").first())),
    )
    rows = steps.group_by("run", "step").agg(*values, pointer=pointer, launch=pl.col("final").first())
    # a line of over MAX_RECORD records (a progress bar's updates) gives the last ones one order
    provenance = steps.select("run", "order", "family", "line", "file").unique(["run", "order"], keep="first")
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
    anchors: pl.DataFrame,
    starts: pl.DataFrame,
    final_launch: pl.DataFrame,
    files: pl.DataFrame,
    since: pl.DataFrame,
) -> pl.DataFrame:
    """The timer rows, each of the last step logged before it, but of a step a later launch logged again,
    from the run's last fresh start on."""
    if timers:
        frame = pl.concat(timers, how="diagonal_relaxed")
    else:
        frame = pl.DataFrame(schema={"run": pl.Int64, **TIMER_EVENT_SCHEMA, "position": pl.Int64})
    return (
        frame.sort("run", "order", "position")
        .join_asof(records, on="order", by="run", strategy="backward", check_sortedness=False)
        .pipe(_with_launch, starts)
        .pipe(_from_launch, since)
        .pipe(_counted_steps, anchors)
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


@cache
def _families_that(attribute: str) -> list[str]:
    """The names of the families whose ``Family.<attribute>`` is true (``engine``: an engine under a
    framework; ``steps_before_timers``: a step's record printed before that step's timers; ``fallback``:
    facts that yield)."""
    return [family.name for family in registry.families() if getattr(family, attribute)]


def _counted_steps(timers: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    """The step of each timer line printed at every step (``per_step``: STEP_END at a step's end, else
    IN_STEP during one), counted in step ends from the step record before it in its launch: k ends
    after step N, a line is of step N + k, or N + 1 + k after a record printed once its step's timers
    were (``Family.steps_before_timers`` false). Before its launch's first record, back from that one."""
    if "per_step" not in timers.columns:
        return timers
    lines = (
        timers.filter(pl.col("per_step").is_not_null())
        .unique(["run", "order"], keep="first", maintain_order=True)
        .select("run", "order", "launch", ends=(pl.col("per_step") == STEP_END).cast(pl.Int64))
        .with_columns(ended=pl.col("ends").cum_sum().over("run", "launch"))
    )
    if lines.is_empty():
        return timers
    before = pl.col("family").is_in(_families_that("steps_before_timers")).cast(pl.Int64)
    anchors = anchors.join_asof(
        lines.drop("ends"), on="order", by=["run", "launch"], check_sortedness=False
    ).select("run", "launch", "order", "step", before=before, ended=pl.col("ended").fill_null(0))
    earlier = lines.join_asof(
        anchors, on="order", by=["run", "launch"], strategy="backward", check_sortedness=False, suffix="_at"
    )
    counted = earlier.join_asof(
        anchors, on="order", by=["run", "launch"], strategy="forward", check_sortedness=False, suffix="_next"
    ).select(
        "run",
        "order",
        counted=pl.coalesce(
            pl.col("step") + 1 - pl.col("before") + pl.col("ended") - pl.col("ends") - pl.col("ended_at"),
            pl.col("step_next")
            + 1
            - pl.col("before_next")
            - (pl.col("ended_next") - pl.col("ended") + pl.col("ends")),
        ),
    )
    return (
        timers.join(counted, on=["run", "order"], how="left", maintain_order="left")
        .with_columns(last_step=pl.coalesce("counted", "last_step"))
        .drop("counted")
    )


def _settle_facts(runs: list[RunBuilder], facts: list[pl.DataFrame]) -> None:
    """The kinds' facts weighed against the Python families' statements of the same facts: the first
    family to state a fact owns it (a ``fallback`` family only where no other did), and its last statement
    is the value (``RunBuilder.set_fact``)."""
    by_type: dict[pl.DataType, list[pl.DataFrame]] = {}
    for frame in facts:
        lined = frame.with_columns(line=line_of(pl.col("at" if "at" in frame.columns else "order")))
        by_type.setdefault(frame.schema["value"], []).append(_uncancelled(runs, lined))
    # (order, family, value or None: a first statement whose value a later one replaces, line)
    stated: dict[tuple[int, str], list[tuple[int, str, Any, int]]] = {}
    for frames in by_type.values():
        summary = (
            pl.concat(frames, how="diagonal_relaxed")
            .sort("run", "order", maintain_order=True)  # ties: in reading order
            # two families stating a fact at one order: the first in reading order owns it
            .group_by("run", "fact", "family", maintain_order=True)
            .agg(pl.col("order").first().alias("first"), pl.col("order", "value", "line").last())
        )
        for index, name, family, first, last, value, line in summary.iter_rows():
            stated.setdefault((index, name), []).extend(
                [(first, family, None, 0), (last, family, value, line)]
            )
    for (index, name), statements in stated.items():
        run = runs[index]
        if run.provenance.get(name, "").startswith("manifest"):
            continue
        statements = sorted(
            statements + run.fact_statements.get(name, []), key=lambda statement: statement[0]
        )
        owner = next((s for s in statements if s[1] not in _families_that("fallback")), statements[0])[1]
        order, _, value, line = [s for s in statements if s[1] == owner and s[2] is not None][-1]
        run.facts[name] = value
        run.provenance[name] = f"{owner}:{line}"
        if (order >> FILE_SHIFT) < len(run.files):
            run.state.setdefault("fact_files", {})[name] = run.files[order >> FILE_SHIFT]


def fact_ends(facts: pl.DataFrame) -> pl.DataFrame:
    """One read's fact events (with ``run``) reduced to what ``_settle_facts`` weighs of them: per run, fact
    and family the first and the last statement (in line order, ties in reading order), so that a fact
    restated on every step (Megatron's ``train_iters``) is not kept once per step. A statement a family's
    record may cancel (``unless_seen``) is kept: which are cancelled is known only when settling."""
    if facts.height < 3:
        return facts
    cancellable = "unless_seen" in facts.columns
    statement = pl.struct("run", "fact", "family", *(["unless_seen"] if cancellable else []))
    kept = statement.is_first_distinct() | statement.is_last_distinct()
    if cancellable:
        kept = kept | pl.col("unless_seen").is_not_null()
    return facts.sort("run", "order", maintain_order=True).filter(kept)


def _uncancelled(runs: list[RunBuilder], frame: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s facts but those at or after a record of one of their ``unless_seen`` families (a
    comma-joined list: DeepSpeed's ``world_size`` is the GPU count unless Megatron or a pipeline topology,
    which run it with model parallelism, came first)."""
    if "unless_seen" not in frame.columns:
        return frame
    firsts = [(index, *first) for index, run in enumerate(runs) for first in run.first_seen.items()]
    seen = pl.DataFrame(
        firsts, schema={"run": pl.Int64, "family": pl.String, "seen_at": pl.Int64}, orient="row"
    )
    cancelling = (
        frame.with_row_index("statement")
        .select("statement", "run", "order", family=pl.col("unless_seen").str.split(","))
        .explode("family")
        .join(seen, on=["run", "family"])
        .filter(pl.col("seen_at") <= pl.col("order"))
    )
    return (
        frame.with_row_index("statement")
        .join(cancelling.select("statement"), on="statement", how="anti", maintain_order="left")
        .drop("statement", "unless_seen")
    )


def declared_facts(stating: tuple) -> dict[str, list]:
    """The facts the kinds and blocks ``stating`` state, each with an empty list of Python statements."""
    return {fact: [] for kind in stating for fact in kind.facts}

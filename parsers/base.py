"""What every log family module provides, and the builder the families write into.

A family module (registered in ``parsers/registry.py``) exposes ``FAMILY: Family``: markers, record kinds
and blocks (read column-wise) and ``parse_line`` for its rare other records. A family never raises on a
bad line: it records nothing, or a note, and goes on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from logstat.parsers.kinds import (
    FILE_SHIFT,
    PYTHON_EVENTS,
    RECORD,
    RECORD_SHIFT,
    REQUEUED,
    TOO_LONG,
    Block,
    RecordKind,
    line_of_order,
)

#: the frames store integers as int64: a longer one (a garbled or hostile number) is not recorded.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, kw_only=True)
class Family:
    """A log family: how to recognise its lines and how to read them."""

    name: str
    """Registry name, e.g. ``megatron``; also the value of the ``family`` column."""
    markers: tuple[str, ...]
    """Fixed substrings; a line is given to ``parse_line`` only if it contains one of them."""
    parse_line: Callable[[str, int, RunBuilder], None] | None = None
    """Read one record (1-based ``lineno``) no kind or block took; never raises. None: there is none."""
    description: str = ""
    """One line for ``--family`` help and error messages."""
    context: bool = False
    """True for launcher/cluster context (Slurm): such a family is never a run's primary family."""
    finish: Callable[[RunBuilder], None] | None = None
    """Called once after a run's files were read, to read a record kept for the end (the last of many
    progress-bar updates); never raises."""
    kinds: tuple[RecordKind, ...] = ()
    """Records read column-wise: ``parse_line`` never sees them."""
    blocks: tuple[Block, ...] = ()
    """Multi-line blocks read column-wise: ``parse_line`` never sees their records."""
    steps_before_timers: bool = False
    """True if a step's record is printed inside the step, before that step's timers (``settle``)."""
    engine: bool = False
    """True for an engine that a framework drives (DeepSpeed under Megatron-DeepSpeed or the HF Trainer):
    a step's metrics are the framework's record's where it logged the step, whichever line came first."""
    fallback: bool = False
    """True for a family of free-form words (a custom loop's): its facts yield to any other family's
    statements of them, whichever line came first."""


#: What a failure event says about how a run ended (``RunBuilder.fail``), strongest first: a HARDWARE
#: fault (a GPU's fatal Xid) explains the errors the software then printed, wherever the kernel's line
#: lands; a root CAUSE (an exception, OOM, a watchdog timeout, a time limit, a cancel) explains it; EFFECT
#: is how a process ended (signal 9), REPORT only that one failed (an exit code), CLEANUP a launcher
#: stopping the others. The run's reason is the first event of the strongest weight in line order.
HARDWARE, CAUSE, EFFECT, REPORT, CLEANUP = 4, 3, 2, 1, 0
#: the kind of a failure a program printed on a build of its own that failed, with no exception (Megatron's
#: dataset helpers): the toolchain's error before it says why (the Slurm family's ``finish``)
BUILD_FAILED = "build failed"
#: the label of a run's end on its own time budget (Megatron's ``--exit-duration-in-mins``, Lightning's Timer):
#: a timeout, as a scheduler's time limit, though the program chose it
TIME_BUDGET_LABEL = "time budget spent: "
#: the ``consequences`` column: at most this many evidence lines, one per kind, each cut to REASON_CHARS.
MAX_CONSEQUENCES = 5
REASON_CHARS = 300


@dataclass
class RunBuilder:
    """Facts, steps, timers and failures of one run as its lines are read. ``settle.settle_runs`` merges
    the step and timer events once every file was read: then ``iterations``, ``timers`` and
    ``last_iteration`` are known."""

    path: str
    facts: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, str] = field(default_factory=dict)
    families_seen: dict[str, int] = field(default_factory=dict)
    # family -> order of its first record counted in ``families_seen`` (a fact may hang on it: ``settle``)
    first_seen: dict[str, int] = field(default_factory=dict)
    failure: tuple[str, str, int] | None = None  # (status, reason, line): the strongest, first event
    failure_weight: int = -1  # HARDWARE, CAUSE, EFFECT, REPORT or CLEANUP of ``failure``
    failure_kind: str = ""  # what kind of event ``failure`` is ("exception", "killed", ...)
    # the other failure events, one per kind: (file number, line, kind, quoted line), see fail()
    consequences: list[tuple[int, int, str, str]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)  # per-family scratch (multi-line blocks)
    current_file: str = ""  # the file being read (a run may be a job's .out and .err)
    files: list[str] = field(default_factory=list)  # the files read, in order (``kinds.order_key``'s index)
    failure_path: str | None = None  # the file holding the failure evidence line
    # (evidence, line, file, order): the run reached its end (the last such record)
    completion: tuple[str, int, str, int] | None = None
    # (evidence, line, file, order): a launcher said its workers exited cleanly; weaker than ``completion``
    clean_exit: tuple[str, int, str, int] | None = None
    position: int = 0  # ``kinds.order_key`` of the record being read: the order of the events it makes
    event_index: int = 0  # events the record made so far (the reader sets it to 0 per record)
    # step events of the Python families: (order, step, mode, family, line, file, metrics)
    step_events: list[tuple] = field(default_factory=list)
    # failure events of the Python families as FAILURE_EVENT_SCHEMA's rows; after ``settle``, every
    # failure event of the run (``refold``)
    failure_events: list[tuple] = field(default_factory=list)
    last_exception: tuple[int, str] | None = None  # (line, file) of the last traceback exception folded
    launch_start: int = -1
    """The order where the run's last launch starts (``settle``; a family reading a scheduler's requeue sets
    it as it reads): the failure events before it are an earlier launch's, consequences only (a job
    requeued or restarted ended as its last launch did)."""
    earlier_failure: tuple[str, str, int, str | None] | None = None
    """The strongest of those, as ``(status, reason, line, file)``, first in line order."""
    earlier_weight: int = -1  # the weight of ``earlier_failure``
    # facts a record kind states too: every statement of the Python families, (order, family, value, line)
    fact_statements: dict[str, list[tuple[int, str, Any, int]]] = field(default_factory=dict)
    launch_candidates: list[tuple[int, str]] = field(default_factory=list)  # (order, family), see new_launch
    # after ``settle``
    iteration_frame: pl.DataFrame | None = None
    timer_frame: pl.DataFrame | None = None
    last_iteration: int | None = None

    def saw(self, family: str, count: int = 1, at: int | None = None) -> None:
        """Count ``count`` records of ``family`` (family detection uses these counts), the first of them at
        order ``at`` (default: the record being read)."""
        self.families_seen[family] = self.families_seen.get(family, 0) + count
        at = self.position if at is None else at
        if at < self.first_seen.get(family, at + 1):
            self.first_seen[family] = at

    def _order(self) -> int:
        order = self.position + PYTHON_EVENTS + min(self.event_index, 127)
        self.event_index += 1
        return order

    def data_parallel_only(self) -> None:
        """The run's framework parallelizes data alone (DDP, FSDP, ZeRO): TP and PP are 1 where nothing
        states them, so its DP is its GPUs (``reader.derive_facts``)."""
        for name in ("tp", "pp"):
            if name not in self.facts:
                self.set_fact(name, 1, "derived", 0)

    def set_fact(self, name: str, value: Any, family: str, lineno: int, *, override: bool = False) -> None:
        """Record a run fact. The first family to state a fact wins over other families (DeepSpeed's
        ``world_size`` of a Megatron run is its DP size, not the GPU count); a family's later statement
        replaces its own earlier one, so a job that relaunched its training reports the final attempt.
        ``override`` (the run's manifest) always wins."""
        if value is None:
            return
        # fits() only for an int outside int64 (it notes the line): a call per fact cost more than the test
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            self.fits(name, value, family, lineno)
            return
        statements = self.fact_statements.get(name)
        if statements is not None and not override:
            statements.append((self.position, family, value, lineno))
        facts = self.facts
        if not override and name in facts:
            owner = self.provenance.get(name, "").partition(":")[0]
            if owner != family or owner == "manifest":
                return
        facts[name] = value
        self.provenance[name] = f"{family}:{lineno}"

    def add_iteration(self, step: int | None, family: str, lineno: int, **metrics: Any) -> None:
        """Record metrics of training step ``step`` (None: the last step logged before); repeated steps
        (many ranks) merge, first value wins (``settle.settle_runs``)."""
        if step is not None and not self.fits("iteration", step, family, lineno):
            return
        kept = {k: v for k, v in metrics.items() if v is not None and self.fits(k, v, family, lineno)}
        self.step_events.append((self._order(), step, RECORD, family, lineno, len(self.files) - 1, kept))

    def spent_time_budget(self, text: str, lineno: int) -> None:
        """Record the run's stop on its own time budget (``TIME_BUDGET_LABEL``): a timeout."""
        self.fail("timeout", f"{TIME_BUDGET_LABEL}{text.strip()}", lineno, kind="time budget")

    def requeued(self) -> None:
        """The scheduler stopped the job here (a preemption); it may have run again in this log, from the
        next record on. It did if its steps went back after it (``REQUEUED``): a checkpoint's resume does
        steps again, where a stopped process's buffered lines written after the scheduler's word go on."""
        self.launch_candidates.append((self.position + (1 << RECORD_SHIFT), REQUEUED))

    def new_launch(self, family: str) -> None:
        """The training may have started again in this log (an arguments dump: a relaunch appending to its
        job's file, a resume). It did if ``family`` logged a step since its previous call: a step logged
        again then replaces the earlier launch's row, where ranks printing one step merge (first wins)."""
        self.launch_candidates.append((self.position, family))

    @property
    def iterations(self) -> dict[int, dict[str, Any]]:
        """The settled rows by step, each without its null columns (for reading a few)."""
        if self.iteration_frame is None:
            return {}
        rows = self.iteration_frame.iter_rows(named=True)
        return {row["iteration"]: {k: v for k, v in row.items() if v is not None} for row in rows}

    @property
    def timers(self) -> list[dict[str, Any]]:
        """The settled timers as dicts, for reading a few."""
        if self.timer_frame is None:
            return []
        return self.timer_frame.select("iteration", "timer", "ms", "family", "line", "source_path").to_dicts()

    def fail(self, status: str, reason: str, lineno: int, *, weight: int = CAUSE, kind: str = "") -> None:
        """Record a failure event: the run's ``failure`` if stronger (``weight``) than the one on record,
        else a consequence (the first of its ``kind``; none of the failure's kind, which repeats it)."""
        event = (self._order(), status, reason, weight, kind, False, False)
        self.failure_events.append(event)
        self._fold(event, lineno, self.current_file)

    def _fold(self, event: tuple, lineno: int, path: str) -> None:
        """One failure event (FAILURE_EVENT_SCHEMA's row), in line order, into ``failure`` and
        ``consequences`` (see ``fail``). Its ``exception``: a traceback's exception line (read column-wise);
        ``chained``: one of a chained traceback, which replaces the failure when that is the exception line
        before it (the process died of the last one raised, a KeyboardInterrupt's or a signal's too)."""
        order, status, reason, weight, kind, exception, chained = event
        reason = reason.strip()[:REASON_CHARS]
        if order < self.launch_start:
            if weight > self.earlier_weight:
                self.earlier_failure, self.earlier_weight = (status, reason, lineno, path), weight
            self._consequence(kind, reason, lineno, path)
        elif (
            chained
            and self.failure is not None
            and self.failure_kind == "exception"
            and (self.failure[2], self.failure_path) == self.last_exception
        ):
            self.failure, self.failure_path = (status, reason, lineno), path
            self.failure_weight, self.failure_kind = weight, kind
        elif self.failure is None or weight > self.failure_weight:
            before = (self.failure_kind, self.failure, self.failure_path)
            self.failure, self.failure_path = (status, reason, lineno), path
            self.failure_weight, self.failure_kind = weight, kind
            if before[1] is not None:  # the weaker evidence on record follows from this one
                self._consequence(before[0], before[1][1], before[1][2], before[2])
        else:
            self._consequence(kind, reason, lineno, path)
        if exception:
            self.last_exception = (lineno, path)

    def refold(self, events: list[tuple]) -> None:
        """Fold ``events`` (every failure event of the run, as FAILURE_EVENT_SCHEMA's rows, in line order)
        anew into ``failure`` and ``consequences``; they are ``failure_events`` from then on, so that a
        family's ``finish`` can re-decide an event it read before the column-wise ones were known."""
        self.failure, self.failure_weight, self.failure_kind, self.failure_path = None, -1, "", None
        self.consequences, self.last_exception = [], None
        self.earlier_failure, self.earlier_weight = None, -1
        self.state.pop("failure_files", None)
        for event in events:
            self._fold(event, line_of_order(event[0]), self.files[event[0] >> FILE_SHIFT])
        self.failure_events = events

    def _consequence(self, kind: str, reason: str, lineno: int, path: str | None) -> None:
        seen = [known for _, _, known, _ in self.consequences]
        if kind == self.failure_kind or kind in seen or len(seen) >= MAX_CONSEQUENCES:
            return
        files = self.state.setdefault("failure_files", {})
        number = files.setdefault(path, len(files))
        self.consequences.append((number, lineno, kind, reason))

    def consequence_lines(self) -> list[str]:
        """The consequences in reading order, each quoted as ``file:line: evidence``."""
        names = {number: path for path, number in self.state.get("failure_files", {}).items()}
        quoted = []
        for number, lineno, _, reason in sorted(self.consequences):
            where = f"{Path(names[number]).name}:{lineno}" if names.get(number) else f"line {lineno}"
            quoted.append(f"{where}: {reason}"[:REASON_CHARS])
        return quoted

    def complete(self, evidence: str, lineno: int) -> None:
        """Record that the run reached its end (final metrics, "after training is done")."""
        self.completion = (evidence.strip()[:300], lineno, self.current_file, self.position)

    def exited_cleanly(self, evidence: str, lineno: int) -> None:
        """Record the first line of a launcher saying its workers exited with code 0: the run is ``ok``
        if nothing failed, but unlike :meth:`complete` it never outweighs a failure (one worker can exit
        cleanly while another fails)."""
        if self.clean_exit is None:
            self.clean_exit = (evidence.strip()[:300], lineno, self.current_file, self.position)

    def fits(self, name: str, value: Any, family: str, lineno: int) -> bool:
        """Whether a frame column can hold ``value``; if not, the line is noted in ``parse_errors``
        (polars refuses a whole frame for one integer beyond int64, e.g. ``99999999999999999999999``)."""
        if isinstance(value, bool) or not isinstance(value, int) or INT64_MIN <= value <= INT64_MAX:
            return True
        self.note(family, lineno, f"{name}={value} {TOO_LONG}")
        return False

    def note(self, family: str, lineno: int, message: str) -> None:
        """A line ``family`` could not read: kept in ``parse_errors``, never silently dropped."""
        self.state.setdefault("parse_errors", []).append(f"{family}:{lineno}: {message}")


LineReader = Callable[[str, int, RunBuilder], None]


def is_guarded(parse_line: LineReader) -> bool:
    """Whether ``parse_line`` was made safe by ``never_raises`` (it notes its own errors)."""
    return getattr(parse_line, "never_raises", False)


def never_raises(family: str) -> Callable[[LineReader], LineReader]:
    """A family's ``parse_line`` made safe: an error on one line is noted in ``parse_errors``
    (family, line number, error) and the parse goes on (mlcommons/logging's rule, STYLE.md 3)."""

    def decorate(parse_line: LineReader) -> LineReader:
        @functools.wraps(parse_line)
        def guarded(text: str, lineno: int, run: RunBuilder) -> None:
            try:
                parse_line(text, lineno, run)
            except Exception as error:  # noqa: BLE001 - a bad line must never stop the parse
                run.note(family, lineno, f"{type(error).__name__}: {error}")

        guarded.never_raises = True  # type: ignore[attr-defined]
        return guarded

    return decorate

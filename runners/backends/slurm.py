"""The Slurm backend: ``sbatch --parsable`` the rendered script, follow the job, parse its log.

Submitting records the job id in the run directory's manifest (``slurm_job_id``). With ``wait``
the job is followed with ``squeue`` while it is queued or running, then ``scontrol show job`` gives
its final state and exit code (no ``sacct``: a cluster without accounting has none). The final
state and exit code go into the manifest too, and the job's output is parsed
(``logstat.api.load_runs`` on the run directory) so the user sees at once whether the log says
the run was ok, and how many iterations it logged.

``job_status`` and ``cancel_run`` are what ``logstat status`` and ``logstat cancel`` call. The
Slurm commands find the cluster the usual way (``SLURM_CONF`` or the compiled-in default).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logstat.runners.backends import LaunchResult, stderr_echo
from logstat.runners.manifest import read_manifest, update_manifest, utc_now

from logstat.errors import LogstatError

if TYPE_CHECKING:
    from logstat.runners.render import RenderedRun

    from logstat.api import ParseResult

NAME = "slurm"
#: States after which a job never runs again (Slurm's job_state_string values).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
POLL_INTERVAL_S = 2.0
#: Without a terminal, one plain progress line this often (and at every state change).
PLAIN_PROGRESS_INTERVAL_S = 30.0
#: How long slurmctld may stay unreachable while following a job before giving up on following it.
UNREACHABLE_GIVE_UP_S = 120.0
COMMAND_TIMEOUT_S = 60.0
_SIGNAL_EXIT_BASE = 128  # a process killed by signal N exits with 128+N, as in the shell


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    """What Slurm says about one job."""

    job_id: str
    """Slurm job id."""
    state: str
    """Slurm job state (PENDING, RUNNING, COMPLETED, TIMEOUT, CANCELLED, FAILED, ...), or UNKNOWN."""
    reason: str | None = None
    """Slurm's reason field (TimeLimit, NonZeroExitCode, Resources, ...)."""
    exit_code: int | None = None
    """The batch script's exit code; 128+N when killed by signal N; None while it runs or unknown."""
    run_time: str | None = None
    """Elapsed time as Slurm prints it ([D-]HH:MM:SS)."""
    time_limit: str | None = None
    """Time limit as Slurm prints it."""
    nodes: str | None = None
    """Node list."""

    @property
    def finished(self) -> bool:
        return self.state in FINAL_STATES


def preflight(run: RenderedRun) -> None:
    """Refuse before the run directory exists when there is no ``sbatch`` to submit with."""
    if shutil.which("sbatch") is None:
        raise LogstatError(
            "backend slurm: `sbatch` is not on PATH (on a machine without Slurm use --backend local; "
            "for a one-node test cluster: make slurm-up, then export SLURM_CONF as it prints)"
        )


def submit_command(run: RenderedRun) -> list[str]:
    """The exact submission command (also what the manifest records)."""
    return sbatch_command(run.script_path)


def sbatch_command(script: Path) -> list[str]:
    """``sbatch --parsable SCRIPT``: the job id alone on stdout."""
    return ["sbatch", "--parsable", str(script)]


def launch(
    run: RenderedRun,
    *,
    wait: bool = False,
    echo: Callable[[str], None] = stderr_echo,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> LaunchResult:
    """Submit ``run``'s sbatch script; with ``wait``, follow the job to its end and parse its log."""
    job_id = submit(run)
    log_path = run.slurm_log_path(job_id)
    echo(f"submitted Slurm job {job_id}; log: {log_path}")
    if not wait:
        info = job_info(job_id)
        return LaunchResult(
            backend=NAME,
            run_dir=run.run_dir,
            job_id=job_id,
            log_path=log_path,
            state=info.state if info else None,
            message=f"job {job_id} submitted; follow it with: logstat status {run.run_dir}",
        )
    info = follow(job_id, log_path=log_path, echo=echo, poll_interval_s=poll_interval_s)
    update_manifest(
        run.run_dir,
        slurm_state=info.state,
        slurm_reason=info.reason,
        exit_code=info.exit_code,
        slurm_ended_utc=utc_now(),
    )
    status, summary = parsed_status(run.run_dir)
    # The caller prints the message (logstat run does): the last line the user sees.
    message = f"job {job_id} {info.state} (exit code {_text(info.exit_code)}); {summary}"
    exit_code = info.exit_code
    if exit_code is None:  # Slurm forgot the job before we saw its end: the log is the only witness
        exit_code = 0 if status == "ok" else 1
    return LaunchResult(
        backend=NAME,
        run_dir=run.run_dir,
        job_id=job_id,
        log_path=log_path,
        exit_code=exit_code,
        state=info.state,
        message=message,
    )


#: what sbatch says when it finds no cluster at all (no slurm.conf, no DNS SRV record, no controller)
NO_CLUSTER_MARKERS = (
    "establish a configuration source",
    "Unable to process configuration file",
    "Unable to contact slurm controller",
)


def _no_cluster_hint(error: str) -> str:
    """sbatch's own words for "no cluster" (a failed DNS SRV lookup) do not say what to do."""
    if not any(marker in error for marker in NO_CLUSTER_MARKERS):
        return ""
    return (
        " (no Slurm cluster answers here: set SLURM_CONF to your cluster's slurm.conf, or start a one-node"
        " test cluster with make slurm-up and export SLURM_CONF as it prints, or use --backend local)"
    )


def submit(run: RenderedRun) -> str:
    """``sbatch --parsable`` the script from the run directory; the job id, recorded in the manifest."""
    try:
        job_id = submit_script(run.script_path, cwd=run.run_dir)
    except SubmitError as exc:
        update_manifest(run.run_dir, slurm_submit_error=exc.error)
        raise
    update_manifest(run.run_dir, slurm_job_id=job_id, slurm_submitted_utc=utc_now())
    return job_id


class SubmitError(LogstatError):
    """sbatch refused a script; ``error`` is its message on one line."""

    def __init__(self, message: str, error: str) -> None:
        super().__init__(message)
        self.error = error


def submit_script(script: Path, *, cwd: Path) -> str:
    """``sbatch --parsable SCRIPT`` run in ``cwd``; the job id (an array's job id for a job array)."""
    done = _slurm(sbatch_command(script), cwd=cwd)
    if done.returncode != 0:
        error = _one_line(done.stderr or done.stdout) or f"exit code {done.returncode}"
        raise SubmitError(f"sbatch refused {script}: {error}{_no_cluster_hint(error)}", error)
    # --parsable prints "jobid" or "jobid;cluster".
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise LogstatError(f"sbatch printed no job id for {script}: {done.stdout.strip()!r}")
    return job_id


def follow(
    job_id: str,
    *,
    log_path: Path | None = None,
    echo: Callable[[str], None] = stderr_echo,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> JobInfo:
    """Poll the job until it ends, showing progress; its final :class:`JobInfo`.

    Ctrl-C stops following, not the job (the message says how to cancel it).
    """
    progress = _Progress(echo)
    unreachable_since: float | None = None
    try:
        while True:
            info = queue_info(job_id)
            if info is None or info.finished:
                # Gone from the queue or ended: scontrol has the final state and the exit code.
                info = job_info(job_id) or info
            if info is not None and info.finished:
                progress.done()
                return info
            if info is None:
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > UNREACHABLE_GIVE_UP_S:
                    progress.done()
                    echo(
                        f"job {job_id}: Slurm does not answer or no longer knows it; its log says what happened"
                    )
                    return JobInfo(job_id=job_id, state="UNKNOWN")
            else:
                unreachable_since = None
                progress.show(info, log_path)
            time.sleep(poll_interval_s)
    except KeyboardInterrupt:
        progress.done()
        echo(f"stopped following job {job_id}; it keeps running (logstat status / logstat cancel RUN_DIR)")
        raise


def queue_info(job_id: str) -> JobInfo | None:
    """The job as ``squeue`` shows it (queued, running, recently ended), or None if not listed."""
    done = _slurm(["squeue", "--noheader", "--states=all", "--jobs", job_id, "--format=%i|%T|%r|%M|%l|%N"])
    for line in done.stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) == 6 and fields[0] == job_id:
            return JobInfo(
                job_id=job_id,
                state=fields[1],
                reason=_none_if_empty(fields[2]),
                run_time=fields[3],
                time_limit=fields[4],
                nodes=_none_if_empty(fields[5]),
            )
    return None


_FIELD = re.compile(r"(?:^|\s)(JobState|Reason|ExitCode|RunTime|TimeLimit|NodeList)=(\S*)")
#: what sbatch --parsable prints as a job id: digits, or digits_digits for an array task.
_JOB_ID = re.compile(r"\d+(?:_\d+)?")


def job_info(job_id: str) -> JobInfo | None:
    """The job as ``scontrol show job`` shows it (until slurmctld forgets it, MinJobAge after its end)."""
    done = _slurm(["scontrol", "--oneliner", "show", "job", job_id])
    record = _job_record(done.stdout, job_id) if done.returncode == 0 else None
    if record is None:
        return None
    fields = dict(_FIELD.findall(record))
    state = fields.get("JobState", "UNKNOWN")
    info = JobInfo(
        job_id=job_id,
        state=state,
        reason=_none_if_empty(fields.get("Reason")),
        run_time=fields.get("RunTime"),
        time_limit=fields.get("TimeLimit"),
        nodes=_none_if_empty(fields.get("NodeList")),
    )
    if state in FINAL_STATES:
        info = replace(info, exit_code=exit_code(state, fields.get("ExitCode", "")))
    return info


def _job_record(text: str, job_id: str) -> str | None:
    """The line of ``scontrol --oneliner show job`` about ``job_id``: ``JobId=ID`` for a job, and
    for an array task ``A_T`` (whose own JobId is another number) ``ArrayJobId=A ArrayTaskId=T``."""
    array_id, _, task = job_id.partition("_")
    wanted = f"ArrayJobId={array_id} ArrayTaskId={task} " if task else f"JobId={job_id} "
    return next((line for line in text.splitlines() if wanted in line + " "), None)


def exit_code(state: str, slurm_exit_code: str) -> int | None:
    """One exit code from Slurm's ``ExitCode=code:signal``: the code, else 128+signal; a job that
    did not complete is never 0 (a time limit kills with a signal Slurm may report as ``0:15``)."""
    code_text, _, signal_text = slurm_exit_code.partition(":")
    if not code_text.isdigit():
        return None
    code, signal = int(code_text), int(signal_text) if signal_text.isdigit() else 0
    if code == 0 and signal:
        code = _SIGNAL_EXIT_BASE + signal
    if code == 0 and state != "COMPLETED":
        code = 1
    return code


def parse_run(run_dir: Path) -> ParseResult:
    """The parse of a run directory's log(s), as ``logstat parse RUN_DIR`` gives it."""
    from logstat.api import load_runs

    return load_runs([run_dir])


def parsed_status(run_dir: Path) -> tuple[str | None, str]:
    """What the parse of the run's log says: (status or None, one line with status, reason, iterations).

    Never raises: a log that cannot be read is said so in the line.
    """
    try:
        runs = parse_run(run_dir).runs
    except LogstatError as exc:
        return None, f"log not parsed: {exc}"
    if runs.height == 0:
        return None, f"no log found in {run_dir}"
    row = runs.row(0, named=True)
    summary = f"log says {row['status']}"
    if row.get("reason") and row["status"] != "ok":
        summary += f" ({row['reason']})"
    if row.get("iterations") is not None:
        summary += f", {row['iterations']} iterations logged"
    return row["status"], summary


# --- logstat status / logstat cancel ---------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RunStatus:
    """One submitted run as ``logstat status`` shows it."""

    run_dir: Path
    """The run directory."""
    job_id: str | None
    """Slurm job id from the manifest (None: never submitted to Slurm)."""
    state: str
    """Slurm's state if it still knows the job, else the final state recorded in the manifest."""
    source: str
    """Where ``state`` comes from: squeue, scontrol, manifest or none."""
    exit_code: int | None = None
    """Exit code when ended."""
    reason: str | None = None
    """Slurm's reason field."""
    run_time: str | None = None
    """Elapsed time as Slurm prints it."""
    log_path: Path | None = None
    """The job's output file."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "job_id": self.job_id,
            "state": self.state,
            "source": self.source,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "run_time": self.run_time,
            "log": str(self.log_path) if self.log_path else None,
        }


def find_run_dirs(root: Path) -> list[Path]:
    """Run directories under ``root`` (``runs/<spec>/<time>-<id>/``) whose manifest names a Slurm job or
    records a local launch."""
    found = []
    for manifest in sorted(Path(root).glob("*/*/manifest.json")):
        try:
            recorded = read_manifest(manifest)
            if recorded.get("slurm_job_id") or recorded.get("backend") == "local":
                found.append(manifest.parent)
        except LogstatError:
            continue  # an unreadable manifest is reported when named explicitly, not when scanning
    return found


def run_status(run_dir: Path) -> RunStatus:
    """The state of the run in ``run_dir``: live from Slurm, else as recorded when it ended; a local
    run's as its manifest records it (logstat.runners.backends.local.recorded_state)."""
    run_dir = Path(run_dir)
    manifest = _manifest_of(run_dir)
    if manifest.get("backend") == "local":
        return _local_run_status(run_dir, manifest)
    if not manifest.get("slurm_job_id"):
        return RunStatus(run_dir=run_dir, job_id=None, state="NOT_SUBMITTED", source="manifest")
    job_id = _job_id_of(manifest, run_dir)
    log_path = run_dir / f"slurm-{job_id}.out"
    log = log_path if log_path.exists() else None
    live, source = job_info(job_id), "scontrol"
    if live is None:
        live, source = queue_info(job_id), "squeue"
    if live is not None:
        return RunStatus(
            run_dir=run_dir,
            job_id=job_id,
            state=live.state,
            source=source,
            exit_code=live.exit_code,
            reason=live.reason,
            run_time=live.run_time,
            log_path=log,
        )
    recorded = manifest.get("slurm_state")
    return RunStatus(
        run_dir=run_dir,
        job_id=job_id,
        state=recorded or "ENDED",
        source="manifest" if recorded else "none",
        exit_code=manifest.get("exit_code"),
        reason=manifest.get("slurm_reason"),
        log_path=log,
    )


def _local_run_status(run_dir: Path, manifest: dict[str, Any]) -> RunStatus:
    from logstat.runners.backends.local import recorded_state

    state, reason = recorded_state(run_dir, manifest)
    log_path = run_dir / manifest["log"] if manifest.get("log") else None
    return RunStatus(
        run_dir=run_dir,
        job_id=None,
        state=state,
        source="manifest",
        exit_code=manifest.get("exit_code"),
        reason=reason,
        log_path=log_path if log_path and log_path.exists() else None,
    )


def cancel_run(run_dir: Path) -> str:
    """``scancel`` the job of ``run_dir`` (the id in its manifest); the job id."""
    run_dir = Path(run_dir)
    manifest = _manifest_of(run_dir)
    if not manifest.get("slurm_job_id"):
        raise LogstatError(f"{run_dir}: manifest.json has no slurm_job_id (was it run with --backend slurm?)")
    job_id = _job_id_of(manifest, run_dir)
    cancel_job(job_id)
    update_manifest(run_dir, slurm_cancel_requested_utc=utc_now())
    return str(job_id)


def cancel_job(job_id: str) -> None:
    """``scancel JOB_ID`` (a job, an array task ``A_T``, or a whole array ``A``)."""
    if shutil.which("scancel") is None:
        raise LogstatError("`scancel` is not on PATH: cannot cancel Slurm jobs from this machine")
    done = _slurm(["scancel", str(job_id)])
    if done.returncode != 0:
        raise LogstatError(f"scancel {job_id} failed: {_one_line(done.stderr or done.stdout)}")


# --- helpers ---------------------------------------------------------------------------------


def _job_id_of(manifest: dict[str, Any], run_dir: Path) -> str:
    """The manifest's Slurm job id, checked: it goes to scontrol/squeue/scancel and into a file name."""
    job_id = str(manifest["slurm_job_id"])
    if isinstance(manifest["slurm_job_id"], bool) or not _JOB_ID.fullmatch(job_id):
        raise LogstatError(
            f"{run_dir}/manifest.json: slurm_job_id={manifest['slurm_job_id']!r} is not a Slurm job id "
            "(digits, or digits_digits for an array task)"
        )
    return job_id


def _manifest_of(run_dir: Path) -> dict[str, Any]:
    if not (run_dir / "manifest.json").is_file():
        raise LogstatError(f"{run_dir}: no manifest.json here (not a run directory made by logstat run)")
    return read_manifest(run_dir)


class _Progress:
    """A progress line: redrawn in place on a terminal, else a plain line per change or interval."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.tty = sys.stderr.isatty()
        self.last_state: str | None = None
        self.last_plain = 0.0
        self.drawn = False

    def show(self, info: JobInfo, log_path: Path | None) -> None:
        line = f"job {info.job_id} {info.state}"
        if info.run_time:
            line += f" {info.run_time}/{info.time_limit or '?'}"
        if info.state == "PENDING" and info.reason:
            line += f" ({info.reason})"
        if self.tty:
            last = _last_line(log_path)
            columns = shutil.get_terminal_size().columns
            text = f"{line} | {last}" if last else line
            sys.stderr.write("\r\x1b[K" + text[: columns - 1])
            sys.stderr.flush()
            self.drawn = True
        elif info.state != self.last_state or time.monotonic() - self.last_plain >= PLAIN_PROGRESS_INTERVAL_S:
            self.echo(line)
            self.last_plain = time.monotonic()
        self.last_state = info.state

    def done(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.drawn = False


def _last_line(path: Path | None, tail_bytes: int = 4096) -> str:
    """The last non-empty line of the log (read from its end: logs grow large)."""
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - tail_bytes))
        lines = handle.read().decode(errors="replace").splitlines()
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def _slurm(args: Sequence[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a Slurm command; a missing program or a hang becomes a failed result, not a traceback."""
    try:
        return subprocess.run(
            list(args),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return subprocess.CompletedProcess(list(args), 127, "", f"{args[0]}: command not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            list(args), 124, "", f"{args[0]}: no answer in {COMMAND_TIMEOUT_S:.0f} s"
        )


def _one_line(text: str) -> str:
    """Slurm's messages span lines ("invalid partition ..." then "submission failed"); errors are one line."""
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())


def _none_if_empty(text: str | None) -> str | None:
    return None if text in (None, "", "(null)", "None", "n/a") else text


def _text(value: object) -> str:
    return "unknown" if value is None else str(value)

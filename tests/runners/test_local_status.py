"""`logstat status` of a local run: the outcome its manifest records, or whether its launcher still runs.

(Real local runs stopped by Ctrl-C or SIGTERM, and their status, are in test_cli_run.py.)
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from logstat.runners.backends import slurm
from logstat.runners.manifest import update_manifest

LOGSTAT = Path(sys.executable).parent / "logstat"


def local_run_dir(parent: Path, name: str, **fields) -> Path:
    """A run directory whose manifest.json is a local run's, with ``fields``."""
    run_dir = parent / name
    run_dir.mkdir()
    manifest = {"backend": "local", "slurm_job_id": None, "log": "train.log", **fields}
    manifest.setdefault("host", {"hostname": socket.gethostname()})
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "train.log").write_text("")
    return run_dir


def status_rows(*run_dirs: Path) -> list[dict]:
    done = subprocess.run(
        [str(LOGSTAT), "status", *map(str, run_dirs), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_status_of_ended_local_runs_is_their_recorded_outcome(tmp_path):
    """It said NOT_SUBMITTED, exit -, for every local run (a local sweep's points already showed this)."""
    started = {"started_utc": "2026-01-01T12:00:00+00:00", "ended_utc": "2026-01-01T12:01:00+00:00"}
    completed = local_run_dir(tmp_path, "completed", exit_code=0, **started)
    failed = local_run_dir(tmp_path, "failed", exit_code=1, **started)
    cancelled = local_run_dir(tmp_path, "cancelled", exit_code=1, interrupted_by="SIGINT", **started)
    rows = status_rows(completed, failed, cancelled)
    assert [(r["state"], r["exit_code"], r["source"]) for r in rows] == [
        ("COMPLETED", 0, "manifest"),
        ("FAILED", 1, "manifest"),
        ("CANCELLED", 1, "manifest"),
    ]
    assert "SIGINT" in rows[2]["reason"]
    assert rows[0]["log"] == str(completed / "train.log")


def test_status_without_run_dirs_lists_local_runs_too(tmp_path):
    """Plain `logstat status` listed runs with a Slurm job id only: every local run was left out."""
    spec_dir = tmp_path / "runs" / "gpt2-tiny-ddp-powersgd"
    spec_dir.mkdir(parents=True)
    ended = {"exit_code": 0, "ended_utc": "2026-01-01T12:01:00+00:00"}
    completed = local_run_dir(spec_dir, "20260101T120000Z-aaaaaa", **ended)
    local_run_dir(spec_dir, "20260101T130000Z-bbbbbb", exit_code=1, ended_utc="2026-01-01T13:01:00+00:00")
    (spec_dir / "not-a-run").mkdir()  # no manifest: no run
    done = subprocess.run(
        [str(LOGSTAT), "status", "--runs-root", str(tmp_path / "runs"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(row["run_dir"], row["state"]) for row in rows] == [
        (str(completed), "COMPLETED"),
        (str(spec_dir / "20260101T130000Z-bbbbbb"), "FAILED"),
    ]


def test_a_local_run_without_outcome_is_running_only_while_its_launcher_runs(tmp_path):
    """The launcher runs in the run directory: a live process there with the recorded pid is the run
    still going; without one, no outcome was recorded (logstat was killed), and status says so."""
    run_dir = local_run_dir(tmp_path, "run", started_utc="2026-01-01T12:00:00+00:00")
    launcher = subprocess.Popen(["sleep", "60"], cwd=run_dir)
    try:
        update_manifest(run_dir, launcher_pid=launcher.pid)
        running = slurm.run_status(run_dir)
    finally:
        launcher.kill()
        launcher.wait()
    gone = slurm.run_status(run_dir)
    assert (running.state, running.exit_code, running.reason) == ("RUNNING", None, None)
    assert gone.state == "UNKNOWN" and gone.exit_code is None
    assert "no outcome recorded" in gone.reason and "not running" in gone.reason


def test_a_local_run_started_elsewhere_without_outcome_is_unknown_here(tmp_path):
    run_dir = local_run_dir(tmp_path, "run", started_utc="x", launcher_pid=1, host={"hostname": "elsewhere"})
    status = slurm.run_status(run_dir)
    assert status.state == "UNKNOWN" and "started on elsewhere" in status.reason


def test_a_local_run_not_started_yet(tmp_path):
    assert slurm.run_status(local_run_dir(tmp_path, "run")).state == "NOT_STARTED"

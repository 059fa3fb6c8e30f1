"""The Slurm backend end to end on the real one-node cluster of tests/slurm_cluster.py.

The tiny DDP+PowerSGD and HF ZeRO-3 specs are rendered, submitted with sbatch (one node, two
processes via torch.distributed.run), followed to their end and parsed back. A job that sleeps
past its 1-minute time limit is submitted before everything else and checked last (Slurm rounds
limits to whole minutes and checks them about every 30 s), so its ~90 s overlap the other tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from logstat.runners.backends import slurm
from logstat.runners.manifest import build_manifest, read_manifest
from logstat.runners.render import RenderedRun, render, sbatch_script
from logstat.runners.rundir import create_run_dir, run_dir_path
from logstat.runners.spec import load_spec

from logstat.api import load_runs
from logstat.errors import LogstatError
from tests.runners.launch import free_ports

LOGSTAT = str(Path(sys.executable).with_name("logstat"))
SLEEPER = 'import time\nprint("sleeping past the time limit", flush=True)\ntime.sleep(600)\n'


def prepare(
    spec_name: str, runs_root: Path, *overrides: str, program: tuple[str, ...] | None = None
) -> RenderedRun:
    """Render a shipped spec into a new run directory, as `logstat run --backend slurm` does.

    A free rendezvous port: other tests (and other people) may be running torch.distributed on 6000.
    """
    spec = load_spec(spec_name, [f"cluster.master_port={free_ports()}", *overrides])
    run = render(spec, run_dir_path(runs_root, spec.name))
    if program is not None:
        run = replace(run, program=program)
        run = replace(run, sbatch_script=sbatch_script(run))
    create_run_dir(run, build_manifest(run, backend="slurm", command=slurm.submit_command(run)))
    return run


def wait_for_state(job_id: str, wanted: set[str], timeout_s: float) -> slurm.JobInfo:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = slurm.job_info(job_id)
        if info is not None and info.state in wanted:
            return info
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not in {wanted} after {timeout_s} s: {slurm.job_info(job_id)}")


def line_number_of(path: Path, text: str) -> int:
    """1-based number of the first line of ``path`` containing ``text`` (computed apart from the parser)."""
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("slurm-runs")


@dataclass
class FollowedJob:
    """A job submitted at fixture time and followed by a background thread until it ends."""

    run: RenderedRun
    job_id: str
    submitted_at: float
    follower: threading.Thread | None = None
    info: slurm.JobInfo | None = None
    ended_at: float | None = None

    def follow_to_end(self) -> None:
        self.info = slurm.follow(self.job_id, echo=lambda line: None, poll_interval_s=1.0)
        self.ended_at = time.monotonic()


@pytest.fixture(scope="module")
def time_limited_job(slurm_cluster, runs_root: Path) -> Iterator[FollowedJob]:
    """A rendered run whose program sleeps past its 1-minute limit, submitted first, checked last.

    A thread follows it from the start, so its end is seen even if the other tests outlast MinJobAge
    (after which scontrol forgets the job). SLURM_CONF stays set for the rest of this module.
    """
    sleeper = runs_root / "sleep_past_limit.py"
    sleeper.write_text(SLEEPER)
    run = prepare("gpt2-tiny-ddp-powersgd", runs_root, "cluster.time_limit=00:01:00", program=(str(sleeper),))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(slurm_cluster.conf))
        job = FollowedJob(run=run, job_id=slurm.submit(run), submitted_at=time.monotonic())
        job.follower = threading.Thread(target=job.follow_to_end, daemon=True)
        job.follower.start()
        yield job


@pytest.fixture(autouse=True)
def _submit_the_time_limited_job_first(request) -> None:
    # Requested by the first Slurm test of this module, so its 60-90 s run beside the other tests.
    if request.node.get_closest_marker("slurm") is not None:
        request.getfixturevalue("time_limited_job")


# --- without a cluster ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "slurm_exit", "expected"),
    [
        ("COMPLETED", "0:0", 0),
        ("FAILED", "3:0", 3),
        ("TIMEOUT", "0:15", 128 + 15),  # SIGTERM at the limit
        ("CANCELLED", "0:9", 128 + 9),
        ("NODE_FAIL", "0:0", 1),  # did not complete: never 0
        ("COMPLETED", "", None),
    ],
)
def test_exit_code_from_slurm_code_and_signal(state: str, slurm_exit: str, expected: int | None) -> None:
    assert slurm.exit_code(state, slurm_exit) == expected


def test_status_and_cancel_refuse_a_directory_without_manifest(tmp_path: Path) -> None:
    with pytest.raises(LogstatError, match="no manifest.json"):
        slurm.run_status(tmp_path)
    with pytest.raises(LogstatError, match="no manifest.json"):
        slurm.cancel_run(tmp_path)


def test_cancel_refuses_a_run_never_submitted_to_slurm(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"backend": "local", "slurm_job_id": None}))
    with pytest.raises(LogstatError, match="no slurm_job_id"):
        slurm.cancel_run(tmp_path)
    assert slurm.run_status(tmp_path).state == "NOT_STARTED"  # a local run: its manifest says how far it got


def test_preflight_refuses_without_sbatch_before_anything_is_created(tmp_path: Path) -> None:
    command = [
        LOGSTAT,
        "run",
        "gpt2-tiny-ddp-powersgd",
        "--backend",
        "slurm",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, "PATH": str(tmp_path)}
    )  # no sbatch
    assert done.returncode == 1
    assert done.stderr.startswith("Error: backend slurm: `sbatch` is not on PATH")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("sbatch_error", "hinted"),
    [  # sbatch 22.05's own words (Debian 12), joined into one line as submit() does
        (
            "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host / sbatch: error: "
            "fetch_config: DNS SRV lookup failed / sbatch: error: _establish_config_source: failed to fetch "
            "config / sbatch: fatal: Could not establish a configuration source",
            True,
        ),
        (
            "sbatch: error: s_p_parse_file: cannot stat file /tmp/x.conf: No such file or directory, retrying "
            "in 1sec up to 60sec / sbatch: error: ClusterName needs to be specified / sbatch: fatal: Unable to "
            "process configuration file",
            True,
        ),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", False),
    ],
)
def test_no_cluster_at_all_gets_a_hint_a_real_refusal_does_not(sbatch_error: str, hinted: bool) -> None:
    hint = slurm._no_cluster_hint(sbatch_error)
    assert ("make slurm-up" in hint and "SLURM_CONF" in hint) if hinted else hint == ""


# --- on the cluster ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.slurm
def test_tiny_ddp_powersgd_through_logstat_run_completes_and_parses_back(runs_root: Path) -> None:
    # The user's path: `logstat run SPEC --backend slurm --wait`, a real process with no terminal.
    command = [LOGSTAT, "run", "gpt2-tiny-ddp-powersgd", "--backend", "slurm", "--wait"]
    command += ["--runs-dir", str(runs_root), "--set", f"cluster.master_port={free_ports()}"]
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)

    assert done.returncode == 0, done.stderr
    run_dir = Path(done.stdout.strip())
    manifest = read_manifest(run_dir)
    job_id = manifest["slurm_job_id"]
    assert job_id.isdigit()
    assert (manifest["slurm_state"], manifest["exit_code"]) == ("COMPLETED", 0)
    assert manifest["command"] == ["sbatch", "--parsable", str(run_dir / "run.sbatch")]
    log_path = run_dir / f"slurm-{job_id}.out"
    stderr = done.stderr.splitlines()
    assert f"submitted Slurm job {job_id}; log: {log_path}" in stderr
    # Without a terminal: plain progress lines (state changes, then every 30 s), elapsed/limit as squeue prints.
    assert any(re.fullmatch(rf"job {job_id} RUNNING \d+:\d\d/10:00", line) for line in stderr), stderr
    assert stderr[-1] == f"job {job_id} COMPLETED (exit code 0); log says ok, 5 iterations logged"

    assert "comm hook: powerSGD_hook" in log_path.read_text()  # the hook was really installed in the job
    parsed = load_runs([run_dir])
    row = parsed.runs.row(0, named=True)
    assert parsed.runs.height == 1
    assert (row["job_id"], row["status"], row["iterations"]) == (job_id, "ok", 5)
    # 2 processes on 1 node, micro 2 x gas 2 x DP 2 = global 8 (the spec's numbers, worked by hand).
    assert (row["gpus"], row["micro_batch_size"], row["gas"], row["global_batch_size"]) == (2, 2, 2, 8)
    assert parsed.iterations["iteration"].to_list() == [1, 2, 3, 4, 5]


@pytest.mark.slow
@pytest.mark.slurm
def test_a_submission_sbatch_refuses_is_an_error_naming_why_and_recorded(runs_root: Path) -> None:
    command = [LOGSTAT, "run", "gpt2-tiny-ddp-powersgd", "--backend", "slurm", "--runs-dir", str(runs_root)]
    done = subprocess.run([*command, "--set", "cluster.partition=nosuch"], capture_output=True, text=True)

    assert done.returncode == 1
    error = done.stderr.splitlines()[-1]
    assert error.startswith("Error: sbatch refused ") and "invalid partition specified: nosuch" in error
    run_dir = Path(error.removeprefix("Error: sbatch refused ").split(":")[0]).parent
    manifest = read_manifest(run_dir)
    assert manifest["slurm_job_id"] is None
    assert "invalid partition specified: nosuch" in manifest["slurm_submit_error"]


@pytest.mark.slow
@pytest.mark.slurm
def test_tiny_hf_zero3_through_sbatch_completes_and_parses_back(runs_root: Path) -> None:
    run = prepare("gpt2-tiny-hf-zero3", runs_root)
    result = slurm.launch(run, wait=True, echo=lambda line: None, poll_interval_s=1.0)

    assert result.state == "COMPLETED" and result.exit_code == 0
    log = result.log_path.read_text()
    assert "is DeepSpeedEngine: True | zero stage: 3" in log
    assert "partitioned: True" in log
    parsed = load_runs([run.run_dir])
    row = parsed.runs.row(0, named=True)
    assert (row["job_id"], row["status"], row["iterations"]) == (result.job_id, "ok", 5)
    assert row["zero_stage"] == 3


@pytest.mark.slow
@pytest.mark.slurm
def test_cancelled_job_ends_cancelled_and_parses_as_cancelled(runs_root: Path) -> None:
    sleeper = runs_root / "sleep_until_cancelled.py"
    sleeper.write_text(SLEEPER)
    run = prepare("gpt2-tiny-ddp-powersgd", runs_root, program=(str(sleeper),))
    job_id = slurm.submit(run)
    log_path = run.slurm_log_path(job_id)
    deadline = time.monotonic() + 60
    while "sleeping past the time limit" not in (log_path.read_text() if log_path.exists() else ""):
        assert time.monotonic() < deadline, "the job's program never started"
        time.sleep(0.5)

    shown = subprocess.run([LOGSTAT, "status", str(run.run_dir)], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()
    assert header.split()[:3] == ["RUN_DIR", "JOB_ID", "STATE"]
    assert row.split()[:3] == [str(run.run_dir), job_id, "RUNNING"]

    cancelled = subprocess.run([LOGSTAT, "cancel", str(run.run_dir)], capture_output=True, text=True)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stderr.startswith(f"scancel {job_id}: cancel requested")
    info = slurm.follow(job_id, log_path=log_path, echo=lambda line: None, poll_interval_s=0.5)
    assert info.state == "CANCELLED"

    parsed = load_runs([run.run_dir])
    row = parsed.runs.row(0, named=True)
    assert (row["job_id"], row["status"]) == (job_id, "cancelled")
    # slurmstepd writes a JOB and a STEP line (in either order): the first one is the evidence.
    assert row["reason_line"] == line_number_of(log_path, " CANCELLED AT ")
    after = subprocess.run([LOGSTAT, "status", "--json", str(run.run_dir)], capture_output=True, text=True)
    assert json.loads(after.stdout)["state"] == "CANCELLED"


@pytest.mark.slow
@pytest.mark.slurm
def test_job_past_its_time_limit_ends_timeout_with_reason_time_limit(time_limited_job: FollowedJob) -> None:
    run, job_id = time_limited_job.run, time_limited_job.job_id
    log_path = run.slurm_log_path(job_id)
    time_limited_job.follower.join(timeout=240)
    info = time_limited_job.info
    assert info is not None, "the follower saw no end of the job"
    took_s = time_limited_job.ended_at - time_limited_job.submitted_at

    assert (info.state, info.reason, info.exit_code) == ("TIMEOUT", "TimeLimit", 128 + 15)
    assert 55 < took_s < 150  # a 1-minute limit, checked about every 30 s
    cancelled_line = line_number_of(log_path, " DUE TO TIME LIMIT ***")
    job_line = next(line for line in log_path.read_text().splitlines() if f"*** JOB {job_id} ON " in line)
    assert job_line.endswith(" DUE TO TIME LIMIT ***")
    parsed = load_runs([run.run_dir])
    row = parsed.runs.row(0, named=True)
    assert (row["job_id"], row["status"]) == (job_id, "timeout")  # as Slurm's state says
    assert "time limit" in row["reason"].lower()
    assert row["reason_line"] == cancelled_line

    # `logstat status` with no RUN_DIR lists every submitted run under the root, this one included.
    listed = subprocess.run(
        [LOGSTAT, "status", "--json", "--runs-root", str(run.run_dir.parent.parent)],
        capture_output=True,
        text=True,
    )
    states = {json.loads(line)["job_id"]: json.loads(line)["state"] for line in listed.stdout.splitlines()}
    assert states[job_id] == "TIMEOUT"


@pytest.mark.slow
@pytest.mark.slurm
def test_status_falls_back_to_the_manifest_once_slurm_forgot_the_job(tmp_path: Path) -> None:
    # Job 999999 was never seen by this cluster: as after MinJobAge, Slurm no longer knows it.
    manifest = {
        "slurm_job_id": "999999",
        "slurm_state": "TIMEOUT",
        "exit_code": 143,
        "slurm_reason": "TimeLimit",
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    status = slurm.run_status(tmp_path)
    assert (status.state, status.source, status.exit_code, status.reason) == (
        "TIMEOUT",
        "manifest",
        143,
        "TimeLimit",
    )


@pytest.mark.slow
@pytest.mark.slurm
def test_progress_line_is_redrawn_in_place_on_a_terminal(tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "short.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --output={tmp_path}/short-%j.out\necho started\nsleep 3\n")
    job_id = subprocess.run(
        ["sbatch", "--parsable", str(script)], capture_output=True, text=True
    ).stdout.strip()
    controller, terminal = os.openpty()
    with open(terminal, "w") as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        plain: list[str] = []
        info = slurm.follow(
            job_id, log_path=tmp_path / f"short-{job_id}.out", echo=plain.append, poll_interval_s=0.5
        )
    os.set_blocking(controller, False)
    chunks = []
    with suppress(OSError):  # EAGAIN: all read; EIO: the terminal side is closed and drained
        while chunk := os.read(controller, 4096):
            chunks.append(chunk)
    os.close(controller)
    shown = b"".join(chunks).decode()

    assert info.state == "COMPLETED" and plain == []  # on a terminal nothing goes through plain lines
    assert f"\r\x1b[Kjob {job_id} RUNNING 0:0" in shown
    assert "| started" in shown  # the log's last line rides along
    assert shown.endswith("\r\n")  # the line is closed when the job ends (the tty maps \n to \r\n)

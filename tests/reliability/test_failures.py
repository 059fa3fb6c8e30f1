"""Failure taxonomy end to end: ``logstat parse`` names what ended each failed run and quotes the
evidence line; ``logstat table`` keeps every such run and marks it; a run that simply stops is
``incomplete``. The logs are fixtures/failures/ (real torchrun and DeepSpeed launcher output, and
message texts of NCCL, srun and slurmstepd) and fixtures/slurm/ (the parser helper's failure logs)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from logstat.api import load_runs
from logstat.cli import main

ROOT = Path(__file__).resolve().parents[2]
FAILURES = ROOT / "fixtures" / "failures"
SLURM = ROOT / "fixtures" / "slurm"

#: file -> (status, start of the reason, a part of the reason, its line, logged iterations); read by
#: eye from each file (the line number is that of the evidence line in the file).
EXPECTED = {
    "torchrun-oom-3001.out": (
        "failed",
        "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory.",
        "Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB",
        14,
        2,
    ),
    "torchrun-sigkill-3002.out": ("failed", "killed: exitcode  : -9 (pid: 2460)", "(SIGKILL)", 46, 2),
    "torchrun-traceback-3003.out": (
        "failed",
        "ValueError: hidden_size=8192 is not divisible by num_attention_heads=48",
        "",
        12,
        2,
    ),
    "deepspeed-launcher-sigkill-3004.out": (
        "failed",
        "worker failed: [ERROR] [launch.py:259:sigkill_handler]",
        "exits with return code = -9",
        14,
        2,
    ),
    "nccl-watchdog-torch2-3005.out": (
        "failed",
        "NCCL timeout/error: [E1121 22:14:31.392847512 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
        "collective operation timeout",
        "Timeout(ms)=600000) ran for 600017 milliseconds",
        3,
        2,
    ),
    "srun-task-killed-3006.out": ("failed", "srun: error: r7i4n2: task 3: Killed", "", 4, 1),
    "nodefail-slurmstepd-3007.out": (
        "failed",
        "node failure: slurmstepd: error: *** JOB 3007 ON r7i4n1 CANCELLED AT 2021-05-26T11:40:13",
        "DUE TO NODE FAILURE",
        3,
        2,
    ),
    "oomkill-cgroup2-3008.out": (
        "failed",
        "host out of memory: slurmstepd: error: Detected 1 oom_kill event in StepId=3008.batch.",
        "cgroup out-of-memory handler",
        2,
        1,
    ),
    "nccl-watchdog-task-failure-3009.out": (
        "failed",
        "NCCL timeout/error: [E1121 22:14:31.392847512 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught",
        "Timeout(ms)=600000",
        3,
        2,
    ),
    "torchrun-argparse-3010.out": (
        "failed",
        "worker.py: error: argument --position-embedding-type: invalid choice: 'alibi'",
        "(choose from 'learned_absolute', 'rope')",
        8,
        0,
    ),
    "deepspeed-launcher-argparse-3011.out": (
        "failed",
        "worker.py: error: argument --position-embedding-type: invalid choice: 'alibi'",
        "",
        11,
        0,
    ),
    "oomkill-after-sigkill-3012.out": (
        "failed",
        "host out of memory: slurmstepd: error: Detected 1 oom-kill event(s) in StepId=3012.0.",
        "cgroup out-of-memory handler",
        51,
        2,
    ),
    "torchrun-gloo-peer-reset-3013.out": (
        "failed",
        "FileNotFoundError: [Errno 2] No such file or directory: '/gpfsscratch/rech/eha/",
        "meg-gpt2_text_document.idx",
        12,
        2,
    ),
    "torchrun-oom-atexit-3014.out": (
        "failed",
        "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory.",
        "Tried to allocate 2.00 GiB",
        14,
        2,
    ),
    "hf-final-metrics-atexit-3015.out": (
        "ok",
        "final train metrics logged (final_train_runtime_s=11.23)",
        "",
        8,
        2,
    ),
    "mpirun-384-ranks-3016.out.gz": (
        "failed",
        "FileNotFoundError: [Errno 2] No such file or directory: '/gpfs/oscar-en/shard_0263_text_document.idx'",
        "",
        22,
        0,
    ),
    "timelimit-signal-traceback-3017.out": (
        "timeout",
        "time limit: slurmstepd: error: *** JOB 3017 ON r7i4n1 CANCELLED AT 2021-05-26T13:00:21 DUE TO TIME LIMIT ***",
        "",
        9,
        2,
    ),
    "torchrun-segfault-3019.out": ("failed", "Fatal Python error: Segmentation fault", "", 9, 2),
    "watchdog-cuda-error-3020.out": (
        "failed",
        "[E1121 22:02:06.412538901 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group "
        "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
        "",
        9,
        2,
    ),
    # c10d's rendezvous retries are warnings that name a connection reset: the log simply stops
    "c10d-warnings-3018.out": ("incomplete", "log stops after iteration 2 of 1000", "", 4, 2),
}

#: file -> the lines of its ``consequences`` (the evidence that followed from the reason), read by eye:
#: one per kind of event, in line order; the reason's own kind (the same error of another rank, a
#: watchdog line repeated by ``what():``) is not repeated.
CONSEQUENCES = {
    "torchrun-oom-3001.out": [34],  # ChildFailedError
    "torchrun-sigkill-3002.out": [28],  # ChildFailedError; its "Signal 9 (SIGKILL)" line repeats line 46
    "torchrun-traceback-3003.out": [32],
    "deepspeed-launcher-sigkill-3004.out": [12],  # the first "Killing subprocess"
    "nccl-watchdog-torch2-3005.out": [],
    "srun-task-killed-3006.out": [],
    "nodefail-slurmstepd-3007.out": [],
    "oomkill-cgroup2-3008.out": [],
    "nccl-watchdog-task-failure-3009.out": [
        10,
        11,
        13,
    ],  # rank 6's ncclRemoteError, srun, DUE TO TASK FAILURE
    "torchrun-argparse-3010.out": [28],
    "deepspeed-launcher-argparse-3011.out": [16, 18],  # Killing subprocess, exits with return code = 2
    "oomkill-after-sigkill-3012.out": [28, 46, 50],  # ChildFailedError, SIGKILL, srun's exit code
    "torchrun-gloo-peer-reset-3013.out": [21, 41],  # rank 0's "Connection closed by peer", ChildFailedError
    "torchrun-oom-atexit-3014.out": [40, 49],  # ChildFailedError, rank 0's SIGKILL
    "hf-final-metrics-atexit-3015.out": [],
    "mpirun-384-ranks-3016.out.gz": [4995],  # mpirun's "Primary job  terminated normally, but ..."
    # the agent's word on the time limit's SIGTERM, then its SignalException
    "timelimit-signal-traceback-3017.out": [10, 41],
    "c10d-warnings-3018.out": [],
    "torchrun-segfault-3019.out": [33, 51],  # ChildFailedError, the root cause's SIGSEGV
    # ChildFailedError, the root cause's SIGABRT, srun's exit code; what() repeats line 9
    "watchdog-cuda-error-3020.out": [44, 62, 66],
}


def lines_of(path: Path) -> list[str]:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode().split("\n")


def logstat(capsys, *args) -> tuple[int, str, str]:
    """Run the real console entry point in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main([*map(str, args)])
        raise SystemExit(0)
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


@pytest.fixture(scope="module")
def parsed_failures() -> dict[str, dict]:
    result = load_runs([FAILURES, SLURM])
    return {Path(row["path"]).name: row for row in result.runs.iter_rows(named=True)}


def test_every_failure_fixture_has_an_expectation():
    logs = [*FAILURES.glob("*.out"), *FAILURES.glob("*.out.gz")]
    assert sorted(p.name for p in logs) == sorted(EXPECTED) == sorted(CONSEQUENCES)


def test_parse_json_reports_status_reason_and_evidence_line(capsys):
    code, out, err = logstat(capsys, "parse", FAILURES, "--format", "json")
    assert code == 0 and err == ""
    rows = {Path(row["path"]).name: row for row in json.loads(out)}
    assert sorted(rows) == sorted(EXPECTED)
    for name, (status, start, part, line, iterations) in EXPECTED.items():
        row = rows[name]
        got = (row["status"], row["reason"][: len(start)], part in row["reason"], row["reason_line"])
        assert got == (status, start, True, line), name
        assert row["iterations"] == iterations, name
        lines = lines_of(FAILURES / name)
        evidence = lines[line - 1]
        if status == "ok":
            assert "train_runtime" in evidence, name
        elif status == "incomplete":
            assert evidence.startswith(" iteration        2/"), name
        else:
            assert start.split(": ", 1)[-1][:40] in evidence, name
        consequences = row["consequences"]
        assert [int(c.split(":")[1]) for c in consequences] == CONSEQUENCES[name], name
        for quoted, at in zip(consequences, CONSEQUENCES[name], strict=True):
            assert quoted.startswith(f"{name}:{at}: "), name
            assert lines[at - 1].strip()[-30:] in quoted or lines[at - 1].strip()[:40] in quoted, name


def test_parse_table_lists_every_failed_run_with_its_reason(capsys):
    code, out, err = logstat(capsys, "parse", FAILURES)
    assert code == 0
    for name, (status, start, *_rest) in EXPECTED.items():
        row = next(line for line in out.splitlines() if line.startswith(name))
        assert row.split()[2] == status
        if status == "ok":
            assert not any(line.startswith(f"{name}: ") for line in out.splitlines()), name
            continue
        notes = out.split(f"\n{name}: {status}", 1)[1].split("\n")
        assert start[:60] in notes[0]
        # each consequence on its own line under the reason
        then = [line for line in notes[1 : 1 + len(CONSEQUENCES[name])] if line.startswith("    then ")]
        assert [int(line.split(":")[1]) for line in then] == CONSEQUENCES[name], name


def test_table_marks_failed_runs_and_drops_none(capsys, parsed_failures):
    """Every run is a row; its Notes say the status; Throughput is `fail` exactly where no step
    after warm-up was timed in a run that did not end ok (the seed's perl printed `fail` for such runs)."""
    code, out, err = logstat(capsys, "table", FAILURES, SLURM)
    assert code == 0
    table_rows = [line for line in out.splitlines() if re.match(r"\|\s*[\d ]*\|", line) and ".out" in line]
    assert len(table_rows) == len(parsed_failures)
    for name, run in parsed_failures.items():
        cells = next(row for row in table_rows if f" {name} " in row or f" {name} (" in row)
        if run["status"] != "ok":  # and the cause when the reason names one: "(failed: OOM)"
            assert f"{name} ({run['status']})" in cells or f"{name} ({run['status']}: " in cells
        timed = run["sec_per_iter"] is not None
        # an ok run without a step time did not fail (analytics.tables): its cell is empty
        assert (" fail |" in cells) == (not timed and run["status"] != "ok"), name


def _cut_after_line(path: Path, line: int, tmp_path: Path) -> Path:
    lines = path.read_bytes().split(b"\n")
    cut = tmp_path / path.name
    cut.write_bytes(b"\n".join(lines[:line]) + b"\n")
    return cut


def _ok_runs_with_steps() -> list[tuple[Path, int, int]]:
    """(fixture, line of its 2nd logged step, steps up to that line) of every bundled run that ended ok
    after 3+ steps: 2 steps, or more where a line holds several (a progress bar's updates); not a run whose
    every step is on that line (torchtune's bar, one line of carriage returns): cut there, it is whole."""
    result = load_runs([ROOT / "fixtures"])
    ok = result.runs.filter(result.runs["status"] == "ok", result.runs["iterations"] >= 3)
    chosen = []
    for path in ok["path"]:
        steps = result.iterations.filter(result.iterations["path"] == path).sort("iteration")
        line = steps["line"][1]
        if (kept := steps.filter(steps["line"] <= line).height) < steps.height:
            chosen.append((Path(path), line, kept))
    return chosen


def test_a_run_that_simply_stops_is_incomplete(tmp_path, generated):
    """Every bundled run that ended ok, cut after its second logged step (as a job that hangs, or
    whose node vanished, leaves it): incomplete, its two steps kept, and the reason says so."""
    runs = _ok_runs_with_steps()
    assert len(runs) >= 3  # HF Trainer (2) and Megatron-LM fixtures at the time of writing
    for path, line, kept in runs:
        cut = _cut_after_line(path, line, tmp_path)
        result = load_runs([cut])
        row = result.runs.row(0, named=True)
        generated["ok runs cut mid-training"] += 1
        assert (row["status"], row["iterations"]) == ("incomplete", kept), path.name
        assert "stops" in row["reason"] or "no failure or end message" in row["reason"], path.name


def test_an_earlier_failure_is_superseded_by_a_later_end(tmp_path):
    """A relaunched job: the first attempt's OOM, then a complete run in the same file -> ok, and the
    reason still mentions the earlier failure (nothing is hidden)."""
    first = (FAILURES / "torchrun-oom-3001.out").read_text()
    second = (ROOT / "fixtures" / "megatron" / "megatron_lm_h100-2001.out").read_text()
    log = tmp_path / "relaunched-4001.out"
    log.write_text(first + second)
    row = load_runs([log]).runs.row(0, named=True)
    assert row["status"] == "ok"
    assert "after an earlier failure at line 14: CUDA out of memory" in row["reason"]


def test_the_evidence_of_a_finished_job_points_into_the_file_holding_it(tmp_path):
    """A job's .out holds the final train metrics and its .err only warnings: the reason's file and
    line are the .out's (the evidence was once attributed to the last file read, the .err)."""
    fixture = ROOT / "fixtures" / "hf_trainer" / "hf_gpt2_tiny_ds_zero2_2cpu.log"
    (tmp_path / "job-5.out").write_bytes(fixture.read_bytes())
    (tmp_path / "job-5.err").write_text("UserWarning: something harmless\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["status"], Path(row["reason_path"]).name) == ("ok", "job-5.out")
    evidence = fixture.read_bytes().decode().split("\n")[row["reason_line"] - 1]
    assert "train_runtime" in evidence or "train_samples_per_second" in evidence


def test_384_interleaved_rank_tracebacks_give_the_first_ranks_exception(parsed_failures):
    """mpirun's 384 ranks fail together: the reason is the first exception line in the file (found
    here by a plain scan), not the last rank's, and mpirun's summary is kept as a consequence."""
    name = "mpirun-384-ranks-3016.out.gz"
    lines = lines_of(FAILURES / name)
    assert sum("Traceback (most recent call last):" in line for line in lines) == 384
    assert sum(line.count("FileNotFoundError") for line in lines) == 384
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("FileNotFoundError"))
    row = parsed_failures[name]
    assert (row["status"], row["reason_line"]) == ("failed", first)
    assert row["reason"] == lines[first - 1].strip()
    mpirun = next(n for n, line in enumerate(lines, 1) if "terminated normally, but" in line)
    assert row["consequences"] == [f"{name}:{mpirun}: {lines[mpirun - 1]}"]

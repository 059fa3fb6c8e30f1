"""`logstat run` as a user types it: plans on stdout, one-line refusals, nothing created when refused,
and (slow) real local runs of the tiny specs on 2 CPU processes, parsed back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

LOGSTAT = Path(sys.executable).parent / "logstat"


def logstat(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [str(LOGSTAT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def test_dry_run_prints_the_plan_as_the_issue_types_it():
    done = logstat(
        "run", "runners/specs/gpt2-52b-megatron-ds.toml", "--dry-run", cwd=Path(__file__).parents[2]
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "#SBATCH --nodes=16\n" in out and "    --nnodes 16 \\\n" in out
    assert "# world 64 = 16 nodes x 4 GPUs; TP 4 x PP 16 x DP 1\n" in out
    assert "# global batch 1024 = micro 4 x gas 256 x DP 1;" in out
    assert "pipeline efficiency 94.5% (gas/(gas+PP-1))" in out  # 256 / 271
    assert "# estimate: 161 days for 100B tokens at an assumed 46.7 TFLOPs/GPU (145.9 s/iteration" in out
    assert '"train_batch_size": 1024' in out and "[batch]\nmicro = 4\ngas = 256\nglobal_batch = 1024\n" in out


def test_dry_run_is_the_default_and_writes_no_run_directory(tmp_path):
    done = logstat("run", "gpt2-tiny-hf-zero3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "==> " in done.stdout and "ds_config.json <==" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_overrides_reach_the_plan(tmp_path):
    done = logstat("run", "gpt2-52b-megatron-ds", "--set", "parallel.pp=8", "--set", "batch.micro=2",
                   "--set", "batch.global_batch=none", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "TP 4 x PP 8 x DP 2" in done.stdout and "global batch 1024 = micro 2 x gas 256 x DP 2" in done.stdout
    )


def test_a_bad_spec_is_refused_in_one_line_naming_field_value_and_rule(tmp_path):
    done = logstat(
        "run", "gpt2-52b-megatron-ds", "--set", "parallel.pp=7", "--backend", "local", cwd=tmp_path
    )
    line = one_line_error(done)
    assert line.startswith("Error: spec 'gpt2-52b-megatron-ds' refused: ")
    assert "parallel.pp=7 does not divide model.num_layers=64" in line
    assert list(tmp_path.iterdir()) == []


def test_warnings_go_to_stderr(tmp_path):
    done = logstat("run", "gpt2-52b-megatron-ds", "--set", "batch.gas=32", "--set", "batch.global_batch=none",
                   cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0
    assert (
        "warning: batch.gas=32 < 8*parallel.pp=128: pipeline efficiency gas/(gas+PP-1) = 68.1%" in done.stderr
    )
    assert "# warning: batch.gas=32" in done.stdout  # and in the plan itself


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("gpt2-tiny-hf-zero3", "--backend", "k8s"),
            "backend 'k8s' is unknown (backends: dry-run, local, slurm)",
        ),
        (("no-such.toml",), "spec 'no-such.toml' is neither a file nor a shipped spec"),
        (("gpt2-tiny-hf-zero3", "--set", "batch.micro=two"), "batch.micro must be an integer"),
    ],
)
def test_user_errors_are_one_line(tmp_path, args, message):
    assert message in one_line_error(logstat("run", *args, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_local_refuses_a_multi_node_spec_and_points_to_the_tiny_variant(tmp_path):
    line = one_line_error(logstat("run", "gpt2-52b-hf-zero3", "--backend", "local", cwd=tmp_path))
    assert "cluster.nodes=16: the local backend runs on this one host" in line
    assert "logstat run gpt2-tiny-hf-zero3 --backend local" in line
    assert list(tmp_path.iterdir()) == []


def test_local_refuses_what_does_not_fit_in_memory_on_cpu(tmp_path):
    if cuda_available():
        pytest.skip("this host has CUDA: the CPU memory rule does not apply")
    done = logstat("run", "gpt2-52b-hf-zero3", "--backend", "local", "--set", "cluster.nodes=1",
                   "--set", "batch.global_batch=none", cwd=tmp_path)  # fmt: skip
    line = one_line_error(done)
    assert "GiB of model states for its 4 CPU processes" in line and "too big to run on CPU" in line
    assert "logstat run gpt2-tiny-hf-zero3 --backend local" in line
    assert list(tmp_path.iterdir()) == []


def test_local_refuses_megatron_without_cuda(tmp_path):
    if cuda_available():
        pytest.skip("this host has CUDA")
    line = one_line_error(logstat("run", "gpt2-tiny-megatron-ds", "--backend", "local", cwd=tmp_path))
    assert "stack megatron-deepspeed needs CUDA GPUs" in line and "this host has no CUDA GPU" in line
    assert list(tmp_path.iterdir()) == []


def test_megatron_launch_needs_a_checkout_and_data(tmp_path, monkeypatch):
    from logstat.runners.spec import load_spec
    from logstat.runners.stacks import get_stack

    from logstat.errors import LogstatError

    monkeypatch.delenv("MEGATRON_DEEPSPEED_DIR", raising=False)
    check = get_stack("megatron-deepspeed").launch_check
    with pytest.raises(LogstatError, match="megatron.dir is not set and MEGATRON_DEEPSPEED_DIR is empty"):
        check(load_spec("gpt2-52b-megatron-ds"))
    checkout = tmp_path / "Megatron-DeepSpeed"
    checkout.mkdir()
    monkeypatch.setenv("MEGATRON_DEEPSPEED_DIR", str(checkout))
    with pytest.raises(LogstatError, match="has no pretrain_gpt.py: not a Megatron-DeepSpeed checkout"):
        check(load_spec("gpt2-52b-megatron-ds"))
    (checkout / "pretrain_gpt.py").write_text("")
    with pytest.raises(LogstatError, match="megatron.data_path is not set"):
        check(load_spec("gpt2-52b-megatron-ds"))
    data = ["megatron.data_path=d/text_document", "megatron.vocab_file=v.json", "megatron.merge_file=m.txt"]
    check(load_spec("gpt2-52b-megatron-ds", data))  # accepted


def launched_run_dir(done: subprocess.CompletedProcess, tmp_path: Path, spec: str) -> Path:
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    assert run_dir.parent == tmp_path / "runs" / spec
    return run_dir


@pytest.mark.slow
def test_local_run_of_the_tiny_ddp_spec_parses_back(tmp_path):
    from logstat.api import load_runs

    done = logstat("run", "gpt2-tiny-ddp-powersgd", "--backend", "local", cwd=tmp_path, timeout=300)
    run_dir = launched_run_dir(done, tmp_path, "gpt2-tiny-ddp-powersgd")
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "manifest.json",
        "run.sbatch",
        "spec.toml",
        "train.log",
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["exit_code"] == 0 and manifest["log"] == "train.log"
    assert (
        manifest["command"][manifest["command"].index("-m", 4) + 1]
        == "logstat.runners.entrypoints.ddp_powersgd"
    )
    log = (run_dir / "train.log").read_text()
    assert "comm hook: powerSGD_hook" in log  # the entry point's evidence that the hook is installed
    runs = load_runs([run_dir]).runs
    assert runs.height == 1
    row = runs.row(0, named=True)
    assert row["status"] == "ok", row["reason"]
    assert (row["iterations"], row["global_batch_size"], row["micro_batch_size"], row["dp"]) == (5, 8, 2, 2)


@pytest.mark.slow
def test_local_run_of_the_tiny_hf_zero3_spec(tmp_path):
    done = logstat("run", "gpt2-tiny-hf-zero3", "--backend", "local", cwd=tmp_path, timeout=300)
    run_dir = launched_run_dir(done, tmp_path, "gpt2-tiny-hf-zero3")
    log = (run_dir / "train.log").read_text()
    assert "is DeepSpeedEngine: True | zero stage: 3" in log
    assert "train batch size: 8 | micro batch size per gpu: 2 | gradient accumulation steps: 2" in log
    assert "partitioned: True" in log
    assert json.loads((run_dir / "manifest.json").read_text())["exit_code"] == 0


def processes_in(directory: Path) -> list[int]:
    """Pids of this user's processes whose working directory is ``directory`` (a local run's launcher
    and workers run in the run directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == directory:
                    found.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours
    return found


def is_worker(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"torch.distributed.run" not in argv and b"logstat.runners.entrypoints.ddp_powersgd" in argv


def start_long_local_run(
    tmp_path: Path, stderr_path: Path, *, sets: tuple[str, ...] = (), started_when: str = " iteration "
) -> tuple[subprocess.Popen, Path]:
    """`logstat run` of the tiny DDP spec for 100000 steps (``sets``: more --set values), once its log
    holds ``started_when`` (an iteration's line); the process
    and its run directory. logstat leads a process group of its own, as a shell's foreground job does,
    so that ``os.killpg`` reaches it as a terminal's Ctrl-C would (its launcher has a session of its own).
    Its stderr (every line of the training) goes to a file: an unread pipe would fill and stall it."""
    import time

    command = [str(LOGSTAT), "run", "gpt2-tiny-ddp-powersgd", "--backend", "local", "--set", "steps=100000"]
    command += [item for value in sets for item in ("--set", value)]
    with stderr_path.open("w") as stderr:
        started = subprocess.Popen(command, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                   stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                   text=True, start_new_session=True)  # fmt: skip
    spec_dir = tmp_path / "runs" / "gpt2-tiny-ddp-powersgd"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and started.poll() is None:
        logs = list(spec_dir.glob("*/train.log"))
        if logs and started_when in logs[0].read_text():
            return started, logs[0].parent
        time.sleep(0.2)
    stop_all(started, None)
    pytest.fail(f"the run never logged an iteration; logstat's stderr:\n{stderr_path.read_text()[-3000:]}")


def stop_all(started: subprocess.Popen, run_dir: Path | None) -> None:
    """Kill what a test left running: logstat, and the launcher and workers in ``run_dir``."""
    import signal

    if started.poll() is None:
        started.kill()
        started.wait()
    for pid in processes_in(run_dir) if run_dir else []:
        os.kill(pid, signal.SIGKILL)


def local_status(run_dir: Path, cwd: Path) -> dict:
    done = logstat("status", str(run_dir), "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_a_local_run_whose_worker_dies_exits_non_zero(tmp_path):
    """A worker killed mid-run (as by the OOM killer): logstat exits non-zero, so make's `&&` stops."""
    import signal

    started, run_dir = start_long_local_run(tmp_path, tmp_path / "stderr.txt")
    try:
        worker = next(pid for pid in processes_in(run_dir) if is_worker(pid))
        os.kill(worker, signal.SIGKILL)
        stdout, _ = started.communicate(timeout=120)
    finally:
        stop_all(started, run_dir)
    assert started.returncode != 0
    assert stdout.strip() == str(run_dir)  # the run directory is still named, for the log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["exit_code"] not in (0, None)


@pytest.mark.slow
def test_ctrl_c_on_a_local_run_stops_its_workers_and_records_it_cancelled(tmp_path):
    """Ctrl-C in the terminal (SIGINT to logstat's process group): the launcher and workers get it, their
    shutdown reaches train.log, the manifest records the outcome, and logstat exits 130."""
    import signal

    from logstat.api import load_runs

    started, run_dir = start_long_local_run(tmp_path, tmp_path / "stderr.txt")
    try:
        running = local_status(run_dir, cwd=tmp_path)
        os.killpg(started.pid, signal.SIGINT)
        started.wait(timeout=60)
        left = processes_in(run_dir)
    finally:
        stop_all(started, run_dir)
    assert running["state"] == "RUNNING" and running["exit_code"] is None
    assert started.returncode == 130 and "Aborted." in (tmp_path / "stderr.txt").read_text()
    assert left == []
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert (
        manifest["exit_code"] is not None and manifest["ended_utc"] and manifest["interrupted_by"] == "SIGINT"
    )
    assert "KeyboardInterrupt" in (run_dir / "train.log").read_text()  # the workers' own shutdown
    row = load_runs([run_dir]).runs.row(0, named=True)
    assert row["status"] == "cancelled", row["reason"]
    assert local_status(run_dir, cwd=tmp_path)["state"] == "CANCELLED"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_sigterm_or_sighup_to_logstat_stops_its_local_run_instead_of_orphaning_it(tmp_path, name):
    """A scheduler's or `timeout`'s SIGTERM, or a closed terminal's SIGHUP, to logstat alone: the launcher
    and workers stop too (they used to train on under init, unseen), the manifest records the outcome,
    and logstat exits 128 + the signal's number."""
    import signal

    sent = signal.Signals[name]
    started, run_dir = start_long_local_run(tmp_path, tmp_path / "stderr.txt")
    try:
        os.kill(started.pid, sent)
        started.wait(timeout=60)
        left = processes_in(run_dir)
    finally:
        stop_all(started, run_dir)
    assert started.returncode == 128 + sent
    assert left == []
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["exit_code"] is not None and manifest["ended_utc"] and manifest["interrupted_by"] == name
    assert local_status(run_dir, cwd=tmp_path)["state"] == "CANCELLED"
    from logstat.api import load_runs

    # the parse agrees: logstat's own closing line outranks the agent's SignalException it caused
    row = load_runs([run_dir]).runs.row(0, named=True)
    assert (row["status"], row["reason"].split(":")[:2]) == ("cancelled", ["logstat", f" {name}"]), row[
        "reason"
    ]


@pytest.mark.slow
def test_sigkill_to_logstat_still_stops_its_local_run(tmp_path):
    """No handler sees a SIGKILL: the kernel's parent-death signal stops the launcher, which stops its
    workers. They trained on, orphaned, until they next wrote to the dead logstat's pipe (here: never,
    no step is logged). Nothing recorded the outcome: the status says so."""
    import signal
    import time

    started, run_dir = start_long_local_run(
        tmp_path, tmp_path / "stderr.txt", sets=("train.log_interval=100000",), started_when="training ..."
    )
    try:
        started.kill()
        started.wait(timeout=10)
        deadline = time.monotonic() + 60
        while processes_in(run_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = processes_in(run_dir)
    finally:
        stop_all(started, run_dir)
    assert started.returncode == -signal.SIGKILL
    assert left == []
    status = local_status(run_dir, cwd=tmp_path)
    assert status["state"] == "UNKNOWN" and "its launcher is not running" in status["reason"]


def test_local_refuses_fp16_that_deepspeeds_cpu_accelerator_lacks(tmp_path):
    """On CPU, DeepSpeed runs on its CPU accelerator; fp16 there needs oneDNN fp16 support. A spec asking
    for it is refused before a run directory exists, naming the field (it used to fail in every worker)."""
    if cuda_available():
        pytest.skip("this host has CUDA")
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    if CPU_Accelerator().is_fp16_supported():
        pytest.skip("DeepSpeed's CPU accelerator supports fp16 on this host")
    done = logstat(
        "run", "gpt2-tiny-hf-zero3", "--backend", "local", "--set", "train.precision=fp16", cwd=tmp_path
    )
    line = one_line_error(done)
    assert line.startswith("Error: train.precision='fp16': DeepSpeed's CPU accelerator")
    assert "use train.precision=fp32" in line
    assert list(tmp_path.iterdir()) == []

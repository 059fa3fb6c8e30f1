"""The local backend: torch.distributed.run on this host, output to the run directory's train.log.

With CUDA it runs the spec's processes on this host's GPUs. Without, it runs the same stack on
CPU with gloo (DeepSpeed with ``DS_ACCELERATOR=cpu``) if the model states of all processes fit
in this host's available memory; otherwise it refuses and points to the spec's tiny variant.
Megatron-DeepSpeed needs CUDA: refused without it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from logstat.runners.backends import LaunchResult, stderr_echo
from logstat.runners.manifest import update_manifest, utc_now
from logstat.runners.render import RenderedRun
from logstat.runners.rundir import open_new_log
from logstat.runners.validate import GIB, model_state_memory_per_rank

from logstat.errors import LogstatError

#: Share of the host's available memory the model states of a CPU run may take (activations,
#: the Python processes and the OS need the rest).
CPU_MEMORY_SHARE = 0.5


def preflight(run: RenderedRun) -> None:
    """Refuse what cannot run on this host, before any file is written."""
    spec = run.spec
    tiny = (
        f"; try the tiny variant: logstat run {spec.tiny_variant} --backend local"
        if spec.tiny_variant
        else ""
    )
    gpus = cuda_device_count()
    if spec.stack == "megatron-deepspeed" and gpus == 0:
        raise LogstatError(
            "stack megatron-deepspeed needs CUDA GPUs (fused kernels, NCCL) and a checkout; this host has no "
            "CUDA GPU: use --dry-run here, or --backend slurm on a GPU cluster (its tiny variant needs CUDA too)"
        )
    if spec.cluster.nodes != 1:
        raise LogstatError(
            f"cluster.nodes={spec.cluster.nodes}: the local backend runs on this one host; "
            f"use --backend slurm{tiny}"
        )
    if gpus:
        if spec.cluster.use_gpus and spec.cluster.gpus_per_node > gpus:
            raise LogstatError(
                f"cluster.gpus_per_node={spec.cluster.gpus_per_node} but this host has {gpus} GPU(s)"
            )
        return
    needed_gib = cpu_model_state_gib(run)
    available_gib = available_memory_gib()
    if available_gib is not None and needed_gib > CPU_MEMORY_SHARE * available_gib:
        raise LogstatError(
            f"spec {spec.name} needs ~{needed_gib:.1f} GiB of model states for its {spec.world_size} CPU "
            f"processes; this host has {available_gib:.1f} GiB available (at most {CPU_MEMORY_SHARE:.0%} "
            f"usable): too big to run on CPU{tiny}"
        )
    _refuse_precision_deepspeed_cpu_lacks(run)


def _refuse_precision_deepspeed_cpu_lacks(run: RenderedRun) -> None:
    """A DeepSpeed stack on CPU runs on DeepSpeed's CPU accelerator: refuse a half precision it lacks
    (its fp16 needs oneDNN fp16 support), which would otherwise fail in every worker after start-up."""
    precision = run.spec.train.precision
    if run.deepspeed_config is None or precision not in ("fp16", "bf16"):
        return
    if deepspeed_cpu_supports(precision, python=run.python) is False:
        raise LogstatError(
            f"train.precision={precision!r}: DeepSpeed's CPU accelerator (this host has no CUDA GPU) "
            f"does not support {precision} here; use train.precision=fp32, or a GPU host"
        )


def deepspeed_cpu_supports(precision: str, *, python: str) -> bool | None:
    """DeepSpeed's CPU accelerator's own answer (``is_fp16_supported()``/``is_bf16_supported()``),
    asked in a child process as the run's workers will be (importing deepspeed here would fix this
    process's accelerator and print its banner); None when it cannot be asked."""
    code = (
        "from deepspeed.accelerator import get_accelerator; "
        f"print(bool(get_accelerator().is_{precision}_supported()))"
    )
    try:
        done = subprocess.run(
            [python, "-c", code],
            env={**os.environ, "DS_ACCELERATOR": "cpu"},
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
    return {"True": True, "False": False}.get(answer[0]) if answer else None


def launch(run: RenderedRun, *, wait: bool = True, echo: Callable[[str], None] = stderr_echo) -> LaunchResult:
    """Run the launcher in the foreground (``wait`` is implied), teeing its output to train.log."""
    port = free_port()
    argv = run.launcher_argv(node_rank=0, master_addr="127.0.0.1", master_port=port)
    env = {**os.environ, **run.env}
    if cuda_device_count() == 0:
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed otherwise looks for CUDA
    log_path = run.local_log_path
    update_manifest(run.run_dir, command=argv, log=log_path.name, started_utc=utc_now())
    echo(f"local: {' '.join(argv[:8])} ... (log: {log_path})")
    with open_new_log(log_path) as log:
        exit_code = _run_teeing(argv, env=env, cwd=run.run_dir, log=log, echo=echo)
    update_manifest(run.run_dir, exit_code=exit_code, ended_utc=utc_now())
    state = "COMPLETED" if exit_code == 0 else "FAILED"
    return LaunchResult(
        backend="local",
        run_dir=run.run_dir,
        exit_code=exit_code,
        log_path=log_path,
        state=state,
        message=f"local run {state.lower()} (exit {exit_code}); log {log_path}",
    )


def _run_teeing(argv: list[str], *, env: dict[str, str], cwd: Path, log, echo: Callable[[str], None]) -> int:
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,  # so that an interrupt can stop the launcher and all its workers
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            log.flush()
            echo(line.rstrip("\n"))
        return process.wait()
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGTERM)
        code = process.wait()
        log.write(f"logstat: interrupted by the user; launcher exit {code}\n")
        raise


def cuda_device_count() -> int:
    """CUDA GPUs visible here (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_model_state_gib(run: RenderedRun) -> float:
    """Model-state memory of all processes of a CPU run (GiB), by the spec's optimizer and precision.

    formulas.zero_model_state_memory per process (its TP*PP share, partitioned over DP by the
    ZeRO stage; what offload moves to "CPU" is on this host too), times the processes.
    """
    memory = model_state_memory_per_rank(run.spec)
    return (memory.gpu_bytes + memory.cpu_bytes) * run.spec.world_size / GIB


def available_memory_gib() -> float | None:
    """MemAvailable of /proc/meminfo in GiB (None where there is no /proc)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / GIB
    except OSError:
        return None
    return None


def free_port() -> int:
    """A TCP port free on this host right now (parallel local runs must not share 6000)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

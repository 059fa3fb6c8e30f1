"""The local backend: torch.distributed.run on this host, output to the run directory's train.log.

With CUDA it runs the spec's processes on this host's GPUs. Without, it runs the same stack on
CPU with gloo (DeepSpeed with ``DS_ACCELERATOR=cpu``) if the model states of all processes fit
in this host's available memory; otherwise it refuses and points to the spec's tiny variant.
Megatron-DeepSpeed needs CUDA: refused without it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TextIO

from logstat.parsers.slurm import RUNNER_STOP
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
    """Run the launcher in the foreground (``wait`` is implied), teeing its output to train.log.

    A SIGINT (Ctrl-C), SIGTERM or SIGHUP (a closed terminal or SSH session) to logstat stops the launcher
    and its workers too (see :func:`_stop_launcher`); once the outcome is in the manifest, SIGINT goes on
    as KeyboardInterrupt (the CLI's "Aborted.", exit 130), the others as exit 128 + their number. On Linux
    the launcher gets SIGTERM when logstat dies of anything else (SIGKILL, which no handler sees).
    """
    port = free_port()
    argv = run.launcher_argv(node_rank=0, master_addr="127.0.0.1", master_port=port)
    env = {**os.environ, **run.env}
    if cuda_device_count() == 0:
        env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed otherwise looks for CUDA
    log_path = run.local_log_path
    update_manifest(run.run_dir, command=argv, log=log_path.name, started_utc=utc_now())
    echo(f"local: {' '.join(argv[:8])} ... (log: {log_path})")
    with open_new_log(log_path) as log:
        outcome = _run_teeing(argv, env=env, cwd=run.run_dir, log=log, echo=echo)
    stopped_by = {"interrupted_by": outcome.stopped_by.name} if outcome.stopped_by else {}
    update_manifest(run.run_dir, exit_code=outcome.exit_code, ended_utc=utc_now(), **stopped_by)
    if outcome.received is not None:
        _pass_on(outcome.received)
    state = "COMPLETED" if outcome.exit_code == 0 else "FAILED"
    return LaunchResult(
        backend="local",
        run_dir=run.run_dir,
        exit_code=outcome.exit_code,
        log_path=log_path,
        state=state,
        message=f"local run {state.lower()} (exit {outcome.exit_code}); log {log_path}",
    )


#: Signals that stop a local run: logstat passes them to the launcher's process group (torchrun's agent
#: handles each, as it does SIGQUIT, by stopping its workers).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: prctl(2)'s option: the signal the kernel sends a process when the thread that started it ends
PR_SET_PDEATHSIG = 1
#: Seconds the launcher has to stop its workers after each signal before the next, stronger one
#: (torchrun answers SIGINT/SIGTERM by stopping its workers, which print how they ended).
STOP_GRACE_S = 5.0
#: How often the waiting loops look at the launcher and at signals received.
POLL_S = 0.1


@dataclass(frozen=True)
class _Outcome:
    exit_code: int
    """The launcher's exit status (negative: killed by that signal)."""
    stopped_by: signal.Signals | None
    """The signal to logstat that stopped the run, if one did."""
    received: signal.Signals | None
    """The first signal to logstat while the launcher ran or its last lines were read (logstat acts on
    it once the outcome is recorded), even one that came after the launcher had ended by itself."""


def _run_teeing(
    argv: list[str], *, env: dict[str, str], cwd: Path, log: TextIO, echo: Callable[[str], None]
) -> _Outcome:
    """Run the launcher until it exits, every line of its output to ``log`` and ``echo``.

    The launcher leads a session of its own (so that its whole process tree can be signalled at once):
    a terminal's Ctrl-C or a scheduler's SIGTERM reaches logstat only, and is passed on to it here.
    """
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=_stopped_with_logstat(),
    )
    try:
        with _signals_noted(STOP_SIGNALS) as received:
            reader = _start_copying(process.stdout, log=log, echo=echo)
            update_manifest(cwd, launcher_pid=process.pid)  # `logstat status` asks whether it still runs
            code = _wait_or_stop(process, received, echo=echo)
            stopped_by = _first_signal(received)  # one noted after the launcher ended did not stop it
            _finish_copying(reader, process)
    finally:
        if process.poll() is None:  # an error of logstat's own: never leave the training running unseen
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
    if stopped_by is not None:
        log.write(f"logstat: {stopped_by.name}: {RUNNER_STOP} (launcher exit {code})\n")
    return _Outcome(exit_code=code, stopped_by=stopped_by, received=_first_signal(received))


def _stopped_with_logstat() -> Callable[[], None] | None:
    """What the launcher runs before its program (Linux): ask the kernel for SIGTERM when logstat dies,
    so that a SIGKILL to logstat, which no handler sees, does not leave the launcher and its workers
    training unseen. The launcher is started from the thread that waits for it (the main one)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _first_signal(received: list[int]) -> signal.Signals | None:
    return signal.Signals(received[0]) if received else None


@contextmanager
def _signals_noted(signals: tuple[signal.Signals, ...]) -> Iterator[list[int]]:
    """While inside, each of ``signals`` is only noted, in the list yielded: the launcher must be stopped
    and the outcome recorded before logstat acts on it. Signals already ignored (a job started with
    ``nohup``) stay ignored; outside the main thread, where Python cannot handle signals, none is noted."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    # None: a handler set outside Python, which could not be put back
    previous = {sig: signal.getsignal(sig) for sig in signals}
    previous = {sig: handler for sig, handler in previous.items() if handler not in (signal.SIG_IGN, None)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _start_copying(stream: IO[str], *, log: TextIO, echo: Callable[[str], None]) -> threading.Thread:
    """Copy the launcher's output in a thread of its own, so that it is read to the end whatever the main
    thread does: unread, a full pipe would block the launcher (and its shutdown) on its next line."""
    reader = threading.Thread(
        target=_copy_lines, args=(stream, log, echo), name="launcher-output", daemon=True
    )
    reader.start()
    return reader


def _copy_lines(stream: IO[str], log: TextIO, echo: Callable[[str], None] | None) -> None:
    for line in stream:
        log.write(line)
        log.flush()  # the log is read while the run goes (tail -f, `logstat parse`)
        if echo is not None:
            try:
                echo(line.rstrip("\n"))
            except (OSError, ValueError):
                echo = None  # stderr gone (terminal closed): the log still gets every line


def _finish_copying(reader: threading.Thread, process: subprocess.Popen) -> None:
    """Wait for the last lines of the ended launcher; kill what of its group still holds the pipe."""
    reader.join(timeout=STOP_GRACE_S)
    if reader.is_alive():
        _signal_group(process.pid, signal.SIGKILL)
        reader.join(timeout=STOP_GRACE_S)


def _wait_or_stop(process: subprocess.Popen, received: list[int], *, echo: Callable[[str], None]) -> int:
    """The launcher's exit status, once it ended by itself or was stopped on a signal to logstat."""
    while (code := process.poll()) is None:
        if received:
            return _stop_launcher(process, received, echo=echo)
        time.sleep(POLL_S)
    return code


def _stop_launcher(process: subprocess.Popen, received: list[int], *, echo: Callable[[str], None]) -> int:
    """Pass the signal received on to the launcher's process group (torchrun stops its workers, which
    print their KeyboardInterrupt on SIGINT), then SIGTERM, then SIGKILL, each after STOP_GRACE_S
    or at once on another signal to logstat (a second Ctrl-C hurries)."""
    first = signal.Signals(received[0])
    steps = list(dict.fromkeys([first, signal.SIGTERM, signal.SIGKILL]))
    echo(
        f"logstat: {first.name}: stopping the run ({', then '.join(s.name for s in steps)} to the launcher "
        f"and its workers, {STOP_GRACE_S:g} s apart)"
    )
    for step in steps:
        _signal_group(process.pid, step)
        code = _wait_at_most(process, STOP_GRACE_S, received)
        if code is not None:
            return code
    return process.wait()


def _wait_at_most(process: subprocess.Popen, seconds: float, received: list[int]) -> int | None:
    """The launcher's exit status if it ends within ``seconds`` and no new signal comes meanwhile."""
    signals_before = len(received)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(received) == signals_before:
        if (code := process.poll()) is not None:
            return code
        time.sleep(POLL_S)
    return process.poll()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # all of them have ended already


def _pass_on(stopped_by: signal.Signals) -> None:
    """Go on as the signal would have without logstat's handler: SIGINT as KeyboardInterrupt (the CLI
    says "Aborted." and exits 130), any other as exit 128 + its number (143 for SIGTERM), as a shell
    reports a process the signal ended."""
    if stopped_by == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + stopped_by)


def recorded_state(run_dir: Path, manifest: Mapping[str, Any]) -> tuple[str, str | None]:
    """A local run's state and its reason: the outcome its manifest records once the launcher ended
    (COMPLETED, FAILED, CANCELLED when a signal to logstat stopped it), else NOT_STARTED, RUNNING
    while its launcher runs on this host, or UNKNOWN with why."""
    code = manifest.get("exit_code")
    if code is not None:
        stopped_by = manifest.get("interrupted_by")
        if stopped_by:
            return "CANCELLED", f"{stopped_by} to logstat stopped the launcher (exit {code})"
        return ("COMPLETED" if code == 0 else "FAILED"), None
    if not manifest.get("started_utc"):
        return "NOT_STARTED", None
    return _unended_state(run_dir, manifest)


def _unended_state(run_dir: Path, manifest: Mapping[str, Any]) -> tuple[str, str | None]:
    """A started run without an outcome: running, or ended while no logstat was there to record it."""
    host = (manifest.get("host") or {}).get("hostname")
    if host and host != socket.gethostname():
        return "UNKNOWN", f"no outcome recorded yet; started on {host}: its processes are not visible here"
    if _launcher_runs(run_dir, manifest.get("launcher_pid")):
        return "RUNNING", None
    return "UNKNOWN", (
        "no outcome recorded and its launcher is not running: logstat was stopped before the run "
        "ended (see its log)"
    )


def _launcher_runs(run_dir: Path, pid: Any) -> bool:
    """Whether process ``pid`` lives in ``run_dir``: the launcher runs there, so a pid reused by
    another process since does not pass for it."""
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) == Path(run_dir).resolve()
    except OSError:
        return False  # no such process (or not ours to see, or no /proc)


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

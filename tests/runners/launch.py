"""Launching the entry points in tests: the tiny runs' command lines and 2-process CPU torchrun."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping

import pytest


def flag_argv(flags: Mapping[str, str], overrides: Mapping[str, str]) -> list[str]:
    """``flags`` as a command line, with ``overrides`` (``num_heads="3"`` for ``--num-heads``) replacing values."""
    merged = {**flags, **{f"--{name.replace('_', '-')}": value for name, value in overrides.items()}}
    return [item for pair in merged.items() for item in pair]


def cpu_env() -> dict[str, str]:
    """This environment on CPU only: one thread per rank, DeepSpeed's CPU accelerator, no GPU seen."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": ""}


def torchrun(module: str, argv: list[str], *, timeout_s: float) -> subprocess.CompletedProcess:
    """``python -u -m torch.distributed.run --nproc_per_node 2 -m MODULE ARGV`` on CPU.

    Without ``--master_port`` a single-node torchrun rendezvouses on ``localhost:0`` (a free
    port), so concurrent runs never collide. The launcher gets its own session so that on a
    timeout it and its workers are killed together, and the test fails showing their output.
    """
    command = [
        sys.executable,
        "-u",
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "-m",
        module,
        *argv,
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cpu_env(),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"{module} did not finish in {timeout_s} s; stdout:\n{stdout[-2000:]}\nstderr:\n{stderr[-2000:]}"
        )
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


#: ports handed out by free_ports in this process: a job may not have bound its port yet when the next asks
_HANDED_OUT: set[int] = set()


def free_ports(count: int = 1) -> int:
    """The first of ``count`` consecutive TCP ports free on this machine and not handed out before, below
    the kernel's ephemeral range: a port in that range (what binding port 0 hands out) can be taken
    meanwhile by any process's outgoing connection or by gloo's own listeners, and a sweep's tasks
    rendezvous on base + task."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            low = int(ranges.read().split()[0])
    except OSError:
        low = 32768  # Linux's default
    for base in range(20000 + os.getpid() % 5000, low - count):
        ports = range(base, base + count)
        if _HANDED_OUT.isdisjoint(ports) and all(map(_bindable, ports)):
            _HANDED_OUT.update(ports)
            return base
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True

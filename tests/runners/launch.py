"""Launching the entry points in tests: the tiny runs' command lines and 2-process CPU torchrun."""

from __future__ import annotations

import os
import signal
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

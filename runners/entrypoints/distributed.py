"""Helpers of the distributed entry points: whole-line output, and an end without torch's gloo
teardown deadlock."""

from __future__ import annotations

import os
import sys

import torch.distributed as dist


def finish(backend: str) -> None:
    """Synchronise all ranks, release the process group, and end the process cleanly.

    With gloo, torch 2.13 can deadlock at exit: the last owner of the process group (DDP's
    Reducer, DeepSpeed's engine) runs ``~ProcessGroupGloo`` holding the GIL, which joins the
    gloo worker thread while that thread waits for the GIL to free the tensors of the last
    collective (seen here with py-spy: ``~Reducer -> ~ProcessGroupGloo -> thread::join`` against
    ``~AsyncBarrierWork -> decref_pyobject -> gil_scoped_acquire``; intermittently). Everything
    is done and flushed by then, so a gloo process ends without running those destructors.
    """
    dist.barrier()
    dist.destroy_process_group()
    if backend == "gloo":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def emit(line: str) -> None:
    """Write ``line`` and its newline in one write, so that ranks sharing a file never glue lines.

    Under ``python -u`` a ``print`` writes the text and the newline separately: another rank's
    output can land between them.
    """
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

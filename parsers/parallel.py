"""Reading many runs on every core.

Runs are independent: one worker reads all files of a run, so each result is what the serial reader
gives, in the runs' order. A worker sends back its runs' frames, not their builders: the parent only
joins them, and the rows are built on every core. Workers are started with ``spawn``: forking a process
that runs polars' threads can deadlock the child. Starting one takes a fraction of a second, so small
inputs are read here. A script asking for workers must guard its top level with ``if __name__ ==
"__main__":`` (spawned workers re-import it).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import polars as pl
from logstat.parsers import reader
from logstat.parsers.source import file_size

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

#: below this many bytes in total, starting workers costs more than it saves
PARALLEL_MIN_BYTES = 32 << 20
#: the environment variable polars sizes its thread pool by, when it is imported
POLARS_THREADS = "POLARS_MAX_THREADS"


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask: a Slurm allocation may hold fewer than the node)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_workers(groups: Sequence[reader.RunFiles]) -> int:
    """One worker per usable core when there are several runs and enough bytes to share; else 1."""
    cores = usable_cores()
    if cores < 2 or len(groups) < 2:
        return 1
    total_bytes = sum(file_size(path) for files in groups for path in files.files)
    return min(cores, len(groups)) if total_bytes >= PARALLEL_MIN_BYTES else 1


def read_frames(
    groups: Sequence[reader.RunFiles],
    *,
    family: str | None = None,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``reader.frames`` of every run of ``groups`` (in order), read with ``family`` forced or detected by
    ``workers`` processes (None: one per core for big inputs, 1: this process only). ``progress(done,
    total)`` after each run."""
    count = default_workers(groups) if workers is None else max(1, min(workers, len(groups)))
    report = progress or (lambda done, total: None)
    if count == 1:
        active = reader.active_families(family)
        results: list[reader.RunResult] = []
        for batch in _batches(groups, 1):
            results.extend(reader.read_runs(batch, active, forced=family))
            report(len(results), len(groups))
        return reader.frames(results)
    # here: parsing one small file should not pay for importing these
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    parts: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]] = []
    # not multiprocessing.Pool: its worker-minding thread took ~1.7 ms of CPU per run read, on the
    # cores the readers need (a 1,000-file parse: ~1.7 s); the executor's thread wakes only for results
    tasks = [(batch, family) for batch in _batches(groups, count)]
    with _polars_threads_per_worker(count):
        pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"))
        try:
            # map submits every task: the workers start now, with this environment and SIGINT held
            with _interrupts_held():
                results = pool.map(_frames_of_batch, tasks)
            done = 0
            for batch, part in results:
                parts.append(part)
                done += batch
                report(done, len(groups))
        except BaseException:  # Ctrl-C, an error: the workers' results would never be read
            _stop(pool)
            raise
        pool.shutdown()
    # not rechunked: one copy of the rows in memory; the frames are read column by column anyway
    return tuple(pl.concat([part[index] for part in parts], rechunk=False) for index in range(3))


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT blocked while workers start: a process started so keeps it blocked for good (the mask is
    inherited, and nothing in a worker unblocks it), so Ctrl-C, which the terminal sends to every process
    of its group, is the parent's alone (a worker interrupted while importing or sending its frames
    printed a traceback, or left the parent waiting). The parent's other threads may still take the
    signal: a Ctrl-C meanwhile is held, raised once the workers started (one interrupted in the middle
    of receiving its start-up data printed a traceback). Only the main thread handles signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: pressed.append(number))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if previous is not None:  # None: a handler not set from Python, which cannot be put back
            signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def _stop(pool: ProcessPoolExecutor) -> None:
    """End the workers now, not after their batches. The executor has no public way to: its processes are
    killed, and its result pipe's last write end, the parent's, closed, as the executor's thread may be
    reading a result a killed worker left half-written (which it would wait for at exit, forever)."""
    workers, results = list((pool._processes or {}).values()), pool._result_queue
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=5)
    results._writer.close()


@contextmanager
def _polars_threads_per_worker(workers: int) -> Iterator[None]:
    """Workers started in this block give polars their share of the cores, not every core each (on a
    ~1 MiB file the threads only take turns: ~45% more CPU, the same wall time). A spawned worker
    imports polars after this is set; a POLARS_MAX_THREADS the user set stays."""
    if POLARS_THREADS in os.environ:
        yield
        return
    os.environ[POLARS_THREADS] = str(max(1, usable_cores() // workers))
    try:
        yield
    finally:
        os.environ.pop(POLARS_THREADS, None)


def _frames_of_batch(
    task: tuple[list[reader.RunFiles], str | None],
) -> tuple[int, tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]:
    """Worker side: a batch of runs and their frames. Families are resolved here by name (Family objects
    hold lambdas: not picklable)."""
    batch, family = task
    return len(batch), reader.frames(reader.read_runs(batch, reader.active_families(family), forced=family))


#: runs settled together: their records are read in one polars query (a query costs milliseconds)
BATCH_RUNS = 64


def _batches(groups: Sequence[reader.RunFiles], workers: int) -> list[list[reader.RunFiles]]:
    """``groups`` in order, cut into batches of at most BATCH_RUNS, at least four per worker when
    there are workers to share them (the last ones finish together)."""
    size = max(1, min(BATCH_RUNS, -(-len(groups) // (4 * workers)) if workers > 1 else BATCH_RUNS))
    return [list(groups[start : start + size]) for start in range(0, len(groups), size)]

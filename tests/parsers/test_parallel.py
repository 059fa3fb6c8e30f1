"""Reading runs in worker processes: how many workers, and how many polars threads each one gets."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from logstat.parsers import parallel, reader


def _worker_pool_sizes(workers: int) -> list[int]:
    """The polars thread pool size of each of ``workers`` spawned the way ``read_frames`` spawns them."""
    spawn = multiprocessing.get_context("spawn")
    with parallel._polars_threads_per_worker(workers), ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        # polars' own function: a worker imports it without importing this test module, which a
        # spawned process can do only when pytest was started as ``python -m pytest`` (cwd on sys.path)
        return [future.result() for future in [pool.submit(pl.thread_pool_size) for _ in range(workers * 4)]]


def test_each_worker_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.delenv("POLARS_MAX_THREADS", raising=False)
    cores = parallel.usable_cores()
    assert set(_worker_pool_sizes(2)) == {max(1, cores // 2)}
    # this process is left as it was: its own pool was sized at import, its environment is restored
    assert "POLARS_MAX_THREADS" not in os.environ


def test_a_users_polars_threads_setting_is_kept(monkeypatch):
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")
    assert set(_worker_pool_sizes(2)) == {3}
    assert os.environ["POLARS_MAX_THREADS"] == "3"


def _runs(tmp_path: Path, count: int, size: int) -> list[reader.RunFiles]:
    paths = []
    for index in range(count):
        path = tmp_path / f"run{index}.log"
        path.write_bytes(b"x" * size)
        paths.append(path)
    return reader.group_runs(paths)


@pytest.mark.parametrize(
    ("runs", "bytes_each", "cores", "expected"),
    [
        (1, 10_000, 2, 1),  # one run: nothing to share
        (3, 10_000, 2, 1),  # too few bytes: starting workers costs more than it saves
        (3, 50_000, 2, 2),
        (3, 50_000, 8, 3),  # no more workers than runs
        (3, 50_000, 1, 1),
    ],
)
def test_default_workers(tmp_path, monkeypatch, runs, bytes_each, cores, expected):
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 100_000)
    monkeypatch.setattr(parallel, "usable_cores", lambda: cores)
    assert parallel.default_workers(_runs(tmp_path, runs, bytes_each)) == expected


@pytest.fixture(scope="module")
def big_runs(tmp_path_factory) -> Path:
    """Three runs of 64 MiB each: enough bytes for workers, seconds of reading."""
    root = tmp_path_factory.mktemp("big")
    text = (Path(__file__).resolve().parents[2] / "fixtures/megatron/meg_gpt2_perf_n16.out").read_bytes()
    for job in (8001, 8002, 8003):
        (root / f"big-{job}.out").write_bytes(text * (64 * 2**20 // len(text)))
    return root


@pytest.mark.skipif(parallel.usable_cores() < 2, reason="workers need two cores")
@pytest.mark.parametrize("after_s", [0.0, 0.3])
def test_ctrl_c_while_workers_read_ends_the_parse_at_once_and_quietly(big_runs, after_s):
    # the terminal sends SIGINT to the whole process group: the workers too, maybe still starting up
    import signal
    import subprocess
    import sys
    import time

    command = [sys.executable, "-c", "from logstat.cli import main; main()", "parse", str(big_runs)]
    parse = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    children = Path(f"/proc/{parse.pid}/task/{parse.pid}/children")
    deadline = time.monotonic() + 30
    while not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(after_s)
    os.killpg(parse.pid, signal.SIGINT)
    try:
        _, err = parse.communicate(timeout=30)
    finally:
        if parse.poll() is None:
            os.killpg(parse.pid, signal.SIGKILL)
    assert (parse.returncode, err.decode()) == (130, "\nAborted.\n")


def test_the_workers_read_frames_starts_get_their_share_of_the_cores(monkeypatch):
    # each spawned worker imports polars with POLARS_MAX_THREADS set to its share, whenever it starts
    monkeypatch.delenv(parallel.POLARS_THREADS, raising=False)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 4)
    seen: list[str | None] = []
    start = multiprocessing.get_context("spawn").Process.start

    def recorded(process):
        seen.append(os.environ.get(parallel.POLARS_THREADS))
        return start(process)

    monkeypatch.setattr(multiprocessing.get_context("spawn").Process, "start", recorded)
    logs = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "megatron").glob("*.out"))[:2]
    runs, _, _ = parallel.read_frames(reader.group_runs(logs), workers=2)
    assert runs.height == 2 and seen == ["2", "2"]

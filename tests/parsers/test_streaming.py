"""Reading whole logs: ranks' prefixes and progress bars change nothing but the text around records,
glued ranks' records are each read, chunk and batch edges change nothing, workers give the frames one
process gives, and memory does not grow with the size of a file."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tracemalloc
from pathlib import Path

import polars as pl
import pytest
from logstat.parsers import reader, registry, source
from polars.testing import assert_frame_equal

from logstat.api import load_runs
from tests.conftest import FIXTURES

ITERATION_MARKER = "elapsed time per iteration"
MEGATRON_3D = FIXTURES / "megatron" / "meg_ds_3d_gpt2_perf_n16-ds-on.out"
MEGATRON_SMALL = FIXTURES / "megatron" / "meg_gpt2_perf_n16.out"
FRAMES = ("runs", "iterations", "timers")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _glued(lines: list[str]) -> str:
    """Real lines as 64 ranks write them into one file: pairs glued with torchrun tags."""
    pairs = zip(lines[::2], lines[1::2], strict=False)
    return "".join(f"[default{n % 8}]:{a}[default{(n + 1) % 8}]:{b}\n" for n, (a, b) in enumerate(pairs))


def _prefixed(text: str) -> str:
    """Every line of ``text`` behind a launcher prefix of its own kind, a progress bar's carriage
    return before every fifth: the same lines, the same records."""
    prefixes = ["12: ", "[default3]:", "10.0.0.2: ", "localhost: ", "[rank7]:", "r7i4n1: "]
    out = []
    for number, line in enumerate(text.split("\n")[:-1]):
        bar = " 45%|####5     | 450/1000\r" if number % 5 == 4 else ""
        out.append(f"{prefixes[number % len(prefixes)]}{bar}{line}")
    return "\n".join(out) + "\n" if out else ""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Every fixture (the real logs included), glued multi-rank files and gzip copies, in one tree."""
    root = tmp_path_factory.mktemp("streaming-corpus")
    shutil.copytree(FIXTURES, root / "fixtures")
    (root / "glued-3001.out").write_text(_glued(_lines(MEGATRON_3D)))
    (root / "glued-3002.out.gz").write_bytes(gzip.compress(_glued(_lines(MEGATRON_SMALL)).encode()))
    (root / "small-3003.out.gz").write_bytes(gzip.compress(MEGATRON_SMALL.read_bytes()))
    return root


def _parse(paths: list[Path], workers: int = 1) -> tuple[pl.DataFrame, ...]:
    result = load_runs([str(path) for path in paths], workers=workers)
    return result.runs, result.iterations, result.timers


def _assert_same(got, want, drop: tuple[str, ...] = ()) -> None:
    for name, mine, theirs in zip(FRAMES, got, want, strict=True):
        try:
            assert_frame_equal(
                mine.drop(drop, strict=False), theirs.drop(drop, strict=False), check_exact=True
            )
        except AssertionError as exc:
            raise AssertionError(f"the {name} frames differ: {exc}") from None


def test_glued_ranks_records_are_each_read(corpus):
    runs, iterations, _ = _parse([corpus / "glued-3001.out", corpus / "glued-3002.out.gz"])
    expected = sum(ITERATION_MARKER in line for line in _lines(MEGATRON_3D))  # counted with plain search
    assert expected == 49
    glued = iterations.filter(pl.col("path") == str(corpus / "glued-3001.out"))
    assert glued["iteration"].to_list() == list(range(1, expected + 1))
    plain = _parse([MEGATRON_3D])[1]
    assert glued["elapsed_ms"].to_list() == plain["elapsed_ms"].to_list()
    assert runs["gpus"].to_list() == [64, 64]


def test_prefixes_and_progress_bars_change_nothing_but_the_path(tmp_path):
    for path in sorted(FIXTURES.rglob("*.out")):
        if path.name.endswith(".gz"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        (tmp_path / "plain").mkdir(exist_ok=True)
        (tmp_path / "prefixed").mkdir(exist_ok=True)
        (tmp_path / "plain" / path.name).write_text(text)
        (tmp_path / "prefixed" / path.name).write_text(_prefixed(text))
    plain, prefixed = _parse([tmp_path / "plain"]), _parse([tmp_path / "prefixed"])
    assert plain[1].height > 100
    # (the warnings name the files they are about)
    _assert_same(prefixed, plain, drop=("path", "paths", "source_path", "reason_path", "warnings"))


@pytest.mark.parametrize("batch_bytes", [1000, 1 << 16])
def test_chunk_and_batch_edges_change_nothing(corpus, monkeypatch, batch_bytes):
    """Small chunks and batches put lines, glued records, blocks and many runs across their edges."""
    want = _parse([corpus])
    with monkeypatch.context() as patch:
        patch.setattr(source, "CHUNK_BYTES", min(batch_bytes, 4096))
        patch.setattr(source, "BATCH_BYTES", batch_bytes)
        got = _parse([corpus])
    _assert_same(got, want)


def test_parallel_workers_equal_one_process(corpus):
    """Runs read by two worker processes come back whole and in order: the same frames as one process."""
    _assert_same(_parse([corpus], workers=2), _parse([corpus], workers=1))


def test_library_default_reads_in_process_even_for_an_unguarded_script(corpus, tmp_path):
    """Spawned workers re-import the caller's main module: a script without the ``__main__`` guard
    that got workers by default would hang. load_runs reads in its own process unless asked."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from logstat.parsers import parallel\n"
        "parallel.PARALLEL_MIN_BYTES = 0  # as if the corpus were big\n"
        "from logstat.api import load_runs\n"
        f"print(load_runs([{str(corpus)!r}]).runs.height)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout) == _parse([corpus])[0].height


def _noise_lines() -> list[bytes]:
    """Real log lines holding no family's marker: what most of a big log is made of."""
    markers = [m.encode() for family in registry.families() for m in family.markers]
    lines = []
    for path in sorted(FIXTURES.rglob("*.out")):
        for line in path.read_bytes().splitlines():
            if line.strip() and b"\x00" not in line and not any(m in line for m in markers):
                lines.append(line)
    return lines


def _write_generated(path: Path, size: int, noise: list[bytes], iteration_lines: list[bytes]) -> None:
    """``size`` bytes of real noise with a real iteration line after every 200 noise lines. The steps
    repeat, so what the run keeps (one row per distinct step) does not grow with the file."""
    block = []
    for index, line in enumerate(noise):
        block.append(line)
        if index % 200 == 199:
            block.append(iteration_lines[(index // 200) % len(iteration_lines)])
    data = b"\n".join(block) + b"\n"
    with open(path, "wb") as out:
        for _ in range(-(-size // len(data))):
            out.write(data)


def _peak_bytes_reading(path: Path) -> int:
    active = reader.active_families(None)
    (files,) = reader.group_runs([path])
    tracemalloc.start()
    try:
        result = reader.read_runs([files], active)[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.run.iterations, "the generated file's iteration lines were read"
    return peak


@pytest.mark.slow
def test_memory_does_not_grow_with_file_size(tmp_path):
    noise = _noise_lines()
    iteration_lines = [line.encode() for line in _lines(MEGATRON_3D) if ITERATION_MARKER in line]
    small, large = tmp_path / "small-4001.out", tmp_path / "large-4002.out"
    _write_generated(small, 5 * source.BATCH_BYTES, noise, iteration_lines)  # past the first batches
    _write_generated(large, 50 << 20, noise, iteration_lines)
    peak_small, peak_large = _peak_bytes_reading(small), _peak_bytes_reading(large)
    # A streamed read holds a few chunks in Python's heap, whatever the file's size: the batch read and
    # the one read ahead, with the copies cut at their last line end (polars' frames live outside it).
    batch = source.BATCH_BYTES
    assert peak_large < 8 * batch, f"peak {peak_large / 2**20:.1f} MiB reading a 50 MiB file"
    assert peak_large - peak_small < 2 * batch, (peak_small, peak_large)

"""The fast parse path gives exactly the results of the plain path, and memory does not grow with file size.

The plain (reference) path decodes every line of a file and lets each family check its markers in
Python; the fast path (``parsers/source.py``) searches raw byte chunks for the markers and decodes
only the lines that hold one. Both read the same varied corpus: every fixture, the real logs of
``fixtures/bigscience``, several ranks' records glued into one line, launcher prefixes, carriage
returns, and gzip files. The frames must be equal, cell for cell; also when the runs are read by
several worker processes.
"""

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


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _glued(lines: list[str]) -> str:
    """Real lines as 64 ranks write them into one file: pairs glued with torchrun tags, every third
    line behind an ``srun --label`` prefix, a tqdm-style carriage return before every fifth."""
    out = []
    for index in range(0, len(lines) - 1, 2):
        first, second = lines[index], lines[index + 1]
        if index % 6 == 0:
            out.append(f"[default{index % 8}]:{first}[default{(index + 1) % 8}]:{second}")
        elif index % 6 == 2:
            out.append(f"{index % 64}: {first}")
            out.append(f"{(index + 1) % 64}: {second}")
        else:
            out.append(f"progress {index}%\r{first}")
            out.append(second)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Every fixture (the real logs included), glued multi-rank files and gzip copies, in one tree."""
    root = tmp_path_factory.mktemp("fast-path-corpus")
    shutil.copytree(FIXTURES, root / "fixtures")
    (root / "glued-3001.out").write_text(_glued(_lines(MEGATRON_3D)))
    (root / "glued-3002.out.gz").write_bytes(gzip.compress(_glued(_lines(MEGATRON_SMALL)).encode()))
    (root / "small-3003.out.gz").write_bytes(gzip.compress(MEGATRON_SMALL.read_bytes()))
    return root


def _parse(root: Path, workers: int = 1):
    result = load_runs([str(root)], workers=workers)
    return result.runs, result.iterations, result.timers


def _reference_parse(root: Path, monkeypatch):
    """The plain path: no byte-level prefilter, every line decoded and checked in Python."""
    with monkeypatch.context() as patch:
        patch.setattr(reader, "marker_needles", lambda markers: None)
        return _parse(root)


def _assert_same(fast, reference) -> None:
    for name, got, want in zip(("runs", "iterations", "timers"), fast, reference, strict=True):
        try:
            assert_frame_equal(got, want, check_exact=True)
        except AssertionError as exc:
            raise AssertionError(f"{name} frame differs between the fast and the plain path: {exc}") from None


def test_fast_path_equals_reference_path(corpus, monkeypatch):
    reference = _reference_parse(corpus, monkeypatch)
    fast = _parse(corpus)
    _assert_same(fast, reference)
    with monkeypatch.context() as patch:  # the small files too searched by polars, as big ones are
        patch.setattr(source, "PYTHON_SEARCH_BYTES", 0)
        _assert_same(_parse(corpus), reference)
    # The corpus did exercise the parsers: the glued file holds every step of its source
    # (counted here with plain substring search on the source's lines), each once.
    expected_steps = sum(ITERATION_MARKER in line for line in _lines(MEGATRON_3D))
    iterations = fast[1].filter(pl.col("path") == str(corpus / "glued-3001.out"))
    assert expected_steps == 49
    assert iterations.height == expected_steps
    assert iterations["iteration"].to_list() == list(range(1, 50))


@pytest.mark.parametrize("search", ["polars", "re"])
def test_fast_path_across_chunk_boundaries(corpus, monkeypatch, search):
    """Tiny chunks put lines, glued records and markers across chunk edges: results stay the same,
    whether polars searches the chunks or re does (as it does small ones)."""
    reference = _reference_parse(corpus, monkeypatch)
    with monkeypatch.context() as patch:
        patch.setattr(source, "CHUNK_BYTES", 1000)
        patch.setattr(source, "PYTHON_SEARCH_BYTES", 0 if search == "polars" else 1 << 62)
        fast = _parse(corpus)
    _assert_same(fast, reference)


def test_parallel_workers_equal_one_process(corpus):
    """Runs read by two worker processes come back whole and in order: the same frames as one process."""
    _assert_same(_parse(corpus, workers=2), _parse(corpus, workers=1))


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
    assert int(done.stdout) == _parse(corpus)[0].height


def _noise_lines() -> list[bytes]:
    """Real log lines holding no family's marker: what most of a big log is made of."""
    markers = [m.encode() for family in registry.families() for m in family.markers]
    logs = sorted(FIXTURES.rglob("*.out"))
    lines = []
    for path in logs:
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
        result = reader.read_run(files, active)
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
    _write_generated(small, 5 * source.CHUNK_BYTES, noise, iteration_lines)  # past the first chunks
    _write_generated(large, 50 << 20, noise, iteration_lines)
    peak_small, peak_large = _peak_bytes_reading(small), _peak_bytes_reading(large)
    # A streamed read holds a few chunks, whatever the file's size: the one parsed and the one read
    # ahead, each with the copy cut at its last line end (polars' frames live outside Python's heap).
    chunk = source.CHUNK_BYTES
    assert peak_large < 8 * chunk, (
        f"peak {peak_large / 2**20:.1f} MiB reading a 50 MiB file ({chunk >> 20} MiB chunks)"
    )
    # The read-ahead thread may be one chunk further along at the peak of one read than of the other
    # (thread timing); holding the 30 MiB of extra lines would exceed this many times over.
    assert peak_large - peak_small < 2 * chunk, (peak_small, peak_large)

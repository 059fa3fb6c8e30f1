"""Escape sequences anywhere in a line never hide a record: fixtures/ansi/ holds real DeepSpeed and
Megatron messages as rich writes them to a terminal (colour codes inside ``step=`` and ``time (ms)``,
OSC 8 hyperlinks); their records are those of the same messages without colour."""

import shutil

import polars as pl
import pytest
from logstat.parsers import source
from logstat.parsers.source import BATCH_BYTES

from logstat.api import load_runs
from tests.conftest import FIXTURES

ANSI = FIXTURES / "ansi"
PROVENANCE = ["path", "source_path"]


def test_rich_coloured_deepspeed_steps_are_read():
    result = load_runs([ANSI / "deepspeed_rich_handler.log"])
    assert result.runs["family"].to_list() == ["deepspeed"]
    its = result.iterations
    assert its["iteration"].to_list() == [2, 4, 6]
    assert its["lr"].to_list() == [0.001] * 3
    # CurrSamplesPerSec and MemAllocated (GB, times 1024 to MiB) of the engine's throughput lines
    assert its["samples_per_sec"].to_list() == [None, 1432.750178503156, 530.8481454704389]
    assert its["mem_allocated_mb"].to_list() == [None, 0.37 * 1024, 0.37 * 1024]


def test_rich_coloured_megatron_iterations_and_timers_are_read():
    result = load_runs([ANSI / "megatron_rich_print.log"])
    row = result.runs.row(0, named=True)
    assert (row["family"], row["gpus"], row["tp"], row["pp"], row["dp"]) == ("megatron", 64, 4, 16, 1)
    assert result.iterations["elapsed_ms"].to_list() == [155483.8, 129028.8, 128891.5]
    timers = result.timers
    assert timers.height == 3 * 11  # eleven timers after each of the three steps
    first = timers.filter(pl.col("iteration") == 1, pl.col("timer") == "forward-compute")
    assert first["ms"].to_list() == [32054.16]


@pytest.mark.parametrize(
    ("coloured", "plain"),
    [
        ("deepspeed_rich_handler.log", "deepspeed_engine.messages"),
        ("megatron_rich_print.log", "megatron_training.messages"),
    ],
)
@pytest.mark.parametrize("noise_lines", [0, BATCH_BYTES // 23 + 1])
def test_coloured_log_reads_as_its_plain_messages(tmp_path, coloured, plain, noise_lines):
    """One message per line in both files, so even the line numbers agree; with the noise ahead, the
    messages are in a second batch."""
    noise = b"building the model ...\n" * noise_lines
    (tmp_path / "coloured.log").write_bytes(noise + (ANSI / coloured).read_bytes())
    (tmp_path / "plain.log").write_bytes(noise + (ANSI / plain).read_bytes())
    got = load_runs([tmp_path / "coloured.log"])
    want = load_runs([tmp_path / "plain.log"])
    assert got.iterations.height > 0
    assert got.iterations.drop(PROVENANCE).equals(want.iterations.drop(PROVENANCE))
    assert got.timers.drop(PROVENANCE).equals(want.timers.drop(PROVENANCE))


def test_escape_sequences_of_every_kind_are_dropped():
    lines = [
        "\x1b[33mstep\x1b[0m=\x1b[1;36m2\x1b[0m, skipped=0",  # CSI colours inside a marker
        "x \x1b]8;id=1;file:///a.py\x1b\\a.py\x1b]8;;\x1b\\ y",  # OSC 8 hyperlink, ESC \ terminated
        "\x1b]0;title\x07iteration 3/ 10 |",  # OSC window title, BEL terminated
        "\x1b(B\x1b[miteration 4/ 10 |\x1b[2K\x1b[1A",  # tput sgr0, erase line, cursor up
        "café \x1b7saved\x1b8",  # DEC save/restore cursor next to UTF-8
        "iteration 1/ 10 | no escape here",
    ]
    plain = source._plain(pl.Series("text", lines)).to_list()
    assert plain == [
        "step=2, skipped=0",
        "x a.py y",
        "iteration 3/ 10 |",
        "iteration 4/ 10 |",
        "café saved",
        "iteration 1/ 10 | no escape here",
    ]


def test_the_fixture_is_what_rich_writes(tmp_path):
    """colour.py makes the fixtures with the installed rich: its escape codes are rich's own, and the
    records the reader finds in a fresh output are those of the committed one."""
    pytest.importorskip("rich")
    for name in ("colour.py", "deepspeed_engine.messages", "megatron_training.messages"):
        shutil.copy(ANSI / name, tmp_path / name)
    import runpy

    runpy.run_path(str(tmp_path / "colour.py"), run_name="__main__")
    for name in ("deepspeed_rich_handler.log", "megatron_rich_print.log"):
        fresh = load_runs([tmp_path / name]).iterations.drop(PROVENANCE)
        assert b"\x1b[" in (tmp_path / name).read_bytes()
        assert fresh.equals(load_runs([ANSI / name]).iterations.drop(PROVENANCE))

"""The progress bar of long parses: on a terminal only, for many runs or big files."""

import io
import os
import pty
import shutil
import subprocess
import sys

from logstat import progress
from logstat.progress import MIN_BYTES, MIN_RUNS, progress_bar
from tests.conftest import FIXTURES


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_stderr_is_not_a_terminal():
    assert progress_bar([MIN_BYTES] * MIN_RUNS, stream=io.StringIO()) is None


def test_no_bar_for_a_few_small_runs():
    assert progress_bar([1000] * (MIN_RUNS - 1), stream=Terminal()) is None


def test_a_bar_for_many_runs_advances_by_bytes_and_ends_its_line(monkeypatch):
    monkeypatch.setattr(progress, "REDRAW_SECONDS", 0)  # every call draws (no throttle in a test)
    out = Terminal()
    sizes = [1024] * (MIN_RUNS - 1) + [19 * 1024]  # the last run holds half the bytes
    show = progress_bar(sizes, stream=out)
    show(MIN_RUNS - 1, MIN_RUNS)
    show(MIN_RUNS, MIN_RUNS)
    frames = out.getvalue().split("\r")[1:]
    assert frames[0] == "reading [..............................]   0%  0/20 runs, 0 B of 38.0 KiB"
    assert frames[1] == "reading [###############...............]  50%  19/20 runs, 19.0 KiB of 38.0 KiB"
    assert frames[2] == "reading [##############################] 100%  20/20 runs, 38.0 KiB of 38.0 KiB\n"


def test_a_bar_for_one_big_file():
    out = Terminal()
    show = progress_bar([MIN_BYTES], stream=out)
    assert out.getvalue() == "\rreading [..............................]   0%  0/1 runs, 0 B of 64.0 MiB"
    show(1, 1)
    assert out.getvalue().endswith("100%  1/1 runs, 64.0 MiB of 64.0 MiB\n")


def _many_logs(tmp_path):
    for n in range(MIN_RUNS):
        shutil.copy(FIXTURES / "megatron" / "meg_gpt2_perf_n16.out", tmp_path / f"run-{n}.out")


def test_parse_draws_the_bar_on_a_terminal_stderr_only(tmp_path):
    _many_logs(tmp_path)
    command = [sys.executable, "-c", "from logstat.cli import main; main()", "parse", str(tmp_path)]
    piped = subprocess.run(command, capture_output=True, text=True)
    # copies of one log: a warning each that its steps are in another, and no bar
    warned = [line for line in piped.stderr.splitlines() if "timed steps are also in" in line]
    assert piped.returncode == 0 and len(warned) == MIN_RUNS == len(piped.stderr.splitlines())
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=follower, text=True)
        os.close(follower)
        terminal = b""
        while chunk := _read(leader):
            terminal += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0 and done.stdout == piped.stdout
    assert b"reading [##############################] 100%  20/20 runs" in terminal


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal closed: everything was read
        return b""

"""A progress bar on stderr while many or big logs are read: only on a terminal.

Redirected stderr (a file, a pipe, CI) gets nothing: a bar there is noise in the user's log.
The bar advances by bytes (a run is done when its files are), so one huge log among small ones
does not make it race to 99% and then stall.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from itertools import accumulate
from pathlib import Path
from typing import TextIO

#: a bar only for at least this many runs, or at least this many bytes (a few seconds of reading)
MIN_RUNS = 20
MIN_BYTES = 64 * 2**20
WIDTH = 30
#: redraws at most this often (a thousand small runs would otherwise write a thousand lines' worth)
REDRAW_SECONDS = 0.1


def run_sizes(files: Sequence[Path]) -> list[int]:
    """The bytes of each run, in the order the reader reads the runs of ``files``."""
    from logstat.parsers.reader import group_runs
    from logstat.parsers.source import file_size

    return [sum(file_size(path) for path in run.files) for run in group_runs(files)]


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def progress_bar(
    sizes: Sequence[int], *, stream: TextIO | None = None, verb: str = "reading"
) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` callback for :func:`logstat.api.load_files` that draws a bar on
    ``stream`` (stderr), or None when ``stream`` is not a terminal or the input is small (fewer than
    :data:`MIN_RUNS` runs and :data:`MIN_BYTES` bytes). ``sizes``: :func:`run_sizes`."""
    out = sys.stderr if stream is None else stream
    total_bytes = sum(sizes)
    if not _is_terminal(out) or (len(sizes) < MIN_RUNS and total_bytes < MIN_BYTES):
        return None
    done_bytes = [0, *accumulate(sizes)]
    last_draw = [0.0]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        finished = done >= total
        if not finished and done and now - last_draw[0] < REDRAW_SECONDS:
            return
        last_draw[0] = now
        read = done_bytes[min(done, len(sizes))]
        fraction = read / total_bytes if total_bytes else done / max(total, 1)
        filled = round(WIDTH * fraction)
        bar = "#" * filled + "." * (WIDTH - filled)
        out.write(
            f"\r{verb} [{bar}] {fraction:4.0%}  {done}/{total} runs, {_size(read)} of {_size(total_bytes)}"
        )
        if finished:
            out.write("\n")
        out.flush()

    show(0, len(sizes))
    return show


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def load_with_progress(paths: Sequence[str | Path], *, family: str | None, warmup: int):
    """:func:`logstat.api.load_runs` of ``paths`` with a :func:`progress_bar` on a terminal."""
    from logstat.api import find_logs, load_files, warn_unlisted

    files = find_logs(paths, skipped=warn_unlisted)
    progress = progress_bar(run_sizes(files)) if _is_terminal(sys.stderr) else None
    return load_files(files, family=family, warmup=warmup, progress=progress)

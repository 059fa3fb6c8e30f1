"""Feeding one log family in tests, through the reader's own path (polars' records, kinds, blocks, the
Python residue), without family detection and conclusion (job id, manifest, derived facts)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import polars as pl
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.reader import RunFiles, read_settled


def feed_file(family: Family, path: Path) -> RunBuilder:
    """The run ``family`` reads from ``path`` (alone: no other family's records)."""
    return read_settled([RunFiles(key=str(path), files=(Path(path),))], [family])[0].run


def feed_lines(family: Family, lines: Iterable[str], *, path: str = "lines.log") -> RunBuilder:
    """The run ``family`` reads from a log of ``lines`` (numbered from 1). The log is a file that is gone
    once read: its rows name no ``source_path``."""
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / Path(path).name
        log.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        run = feed_file(family, log)
    for name in ("iteration_frame", "timer_frame"):
        frame = getattr(run, name)
        if frame is not None:
            setattr(run, name, frame.with_columns(source_path=pl.lit(None, dtype=pl.String)))
    return run

"""Feeding one log family in tests, without the reader's family detection and frames."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.source import records


def feed_file(family: Family, path: Path, run: RunBuilder | None = None) -> RunBuilder:
    """Give ``family`` the lines the reader gives it: the records (ranks split apart) holding one of
    its markers, and every record while it captures a block."""
    run = run or RunBuilder(path=str(path))
    with open(path, "rb") as stream:
        for lineno, raw in enumerate(stream, 1):
            for record in records(raw.decode("utf-8", "replace")):
                if family.name in run.capturing or any(marker in record for marker in family.markers):
                    family.parse_line(record, lineno, run)
    if family.finish is not None:
        family.finish(run)
    return run


def feed_lines(family: Family, lines: Iterable[str], *, path: str = "lines") -> RunBuilder:
    """Give ``family`` every line, numbered from 1 (no marker filter: it must ignore what is not its own)."""
    run = RunBuilder(path=path)
    for lineno, line in enumerate(lines, 1):
        family.parse_line(line, lineno, run)
    if family.finish is not None:
        family.finish(run)
    return run

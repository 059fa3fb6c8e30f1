"""Feeding one log family in tests, without the reader's family detection and frames."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import order_key
from logstat.parsers.source import records


def _give(family: Family, record: str, lineno: int, index: int, run: RunBuilder) -> None:
    """One record as the reader gives it: a record of one of the family's kinds is read column-wise
    (the family sees it only while it captures a block), any other goes to ``parse_line``."""
    run.position, run.event_index = order_key(0, lineno, index), 0
    kind = next((number for number, kind in enumerate(family.kinds) if kind.holds(record)), None)
    if kind is not None:
        run.defer(record, kind)
        if family.kinds[kind].evidence:
            run.saw(family.name)
        if family.name not in run.capturing:
            return
    family.parse_line(record, lineno, run)


def _finish(family: Family, run: RunBuilder) -> RunBuilder:
    run.settle(family.kinds)
    if family.finish is not None:
        family.finish(run)
    return run


def feed_file(family: Family, path: Path, run: RunBuilder | None = None) -> RunBuilder:
    """Give ``family`` the lines the reader gives it: the records (ranks split apart) holding one of
    its markers, and every record while it captures a block."""
    run = run or RunBuilder(path=str(path))
    run.files.append(str(path))
    with open(path, "rb") as stream:
        for lineno, raw in enumerate(stream, 1):
            for index, record in enumerate(records(raw.decode("utf-8", "replace"))):
                if family.name in run.capturing or any(marker in record for marker in family.markers):
                    _give(family, record, lineno, index, run)
    return _finish(family, run)


def feed_lines(family: Family, lines: Iterable[str], *, path: str = "lines") -> RunBuilder:
    """Give ``family`` every line, numbered from 1 (no marker filter: it must ignore what is not its own)."""
    run = RunBuilder(path=path)
    for lineno, line in enumerate(lines, 1):
        _give(family, line, lineno, 0, run)
    return _finish(family, run)

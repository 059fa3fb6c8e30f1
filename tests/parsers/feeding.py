"""Feeding one log family in tests, through the reader's own path (polars' records, kinds, blocks, the
Python residue), without family detection and conclusion (job id, manifest, derived facts)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

import polars as pl
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.reader import RunFiles, read_settled
from logstat.parsers.records import split_records

from logstat.api import load_runs


def feed_file(family: Family, path: Path) -> RunBuilder:
    """The run ``family`` reads from ``path`` (alone: no other family's records)."""
    return read_settled([RunFiles(key=str(path), files=(Path(path),))], [family])[0].run


def feed_each(family: Family, logs: Iterable[Iterable[str]]) -> list[RunBuilder]:
    """The runs ``family`` reads from each log of ``logs`` (lines), the logs read together (one pass of
    the reader, as it reads many files: a property test tries many logs at the cost of one)."""
    with tempfile.TemporaryDirectory() as directory:
        paths = []
        for number, lines in enumerate(logs):
            paths.append(Path(directory) / f"log-{number}.log")
            paths[-1].write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        results = read_settled([RunFiles(key=str(path), files=(path,)) for path in paths], [family])
    return [result.run for result in results]


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


def records_of(lines: list[str]) -> list[str]:
    """The records of ``lines`` as the reader splits them (launcher prefixes cut, glued ranks and carriage
    returns split, blank records dropped)."""
    separator = next(c for c in map(chr, range(0xE000, 0xF900)) if not any(c in line for line in lines))
    frame = pl.LazyFrame(
        {
            "run": 0,
            "row": range(len(lines)),
            "order": [row << 16 for row in range(len(lines))],
            "text": lines,
        },
        schema={"run": pl.Int64, "row": pl.Int64, "order": pl.Int64, "text": pl.String},
    )
    return split_records(frame, separator).collect().sort("order").get_column("text").to_list()


def line_of(path: Path, text: str) -> int:
    """The number of ``path``'s first line holding ``text``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


def first_run(path: Path) -> tuple[dict, pl.DataFrame]:
    """The first run row of the logs at ``path`` (its provenance read) and the iterations."""
    result = load_runs([path])
    row = result.runs.row(0, named=True)
    return {**row, "provenance": json.loads(row["provenance"] or "{}")}, result.iterations

"""Snapshot the parse output before a speed change, and check that it is unchanged after.

    python tests/bench/golden.py save     # before touching the parse path
    python tests/bench/golden.py check    # after each change: prints OK, or the columns that differ

It holds today's code equal to yesterday's (a family change, a narrower marker, a record read
column-wise): it parses the fixtures (the real logs of ``fixtures/bigscience`` included), the fixtures
with each framework family forced, and, when ``make bench`` has built ``bench-corpus/``, 150 of its small files and the
first 60 MB of its large one, and keeps the runs/iterations/timers frames under ``bench-corpus/golden/``
(git-ignored). Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import polars as pl

from logstat.api import load_runs

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "bench-corpus"
GOLDEN = CORPUS / "golden"
FRAMES = ("runs", "iterations", "timers")
SAMPLE_FILES = 150
HEAD_BYTES = 60_000_000


def inputs() -> dict[str, tuple[list[Path], str | None]]:
    """Name -> (paths, forced family) of every input that exists here."""
    found: dict[str, tuple[list[Path], str | None]] = {"fixtures": ([ROOT / "fixtures"], None)}
    for family in ("megatron", "deepspeed", "hf-trainer"):
        found[f"fixtures-as-{family}"] = ([ROOT / "fixtures"], family)
    many = sorted((CORPUS / "many").glob("*"))[:SAMPLE_FILES]
    if many:
        found["bench-many-sample"] = (many, None)
    single = sorted((CORPUS / "single").glob("*"))
    if single:
        found["bench-single-head"] = ([_head_of(single[0])], None)
    return found


def _head_of(path: Path) -> Path:
    """The first HEAD_BYTES of ``path``, copied once under GOLDEN."""
    head = GOLDEN / "inputs" / f"head-{path.name}"
    if not head.exists():
        head.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as source:
            head.write_bytes(source.read(HEAD_BYTES))
    return head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", choices=("save", "check"))
    mode = parser.parse_args().mode
    differing = 0
    for name, (paths, family) in inputs().items():
        started = time.perf_counter()
        result = load_runs(paths, family=family, workers=1)
        took = time.perf_counter() - started
        for kind in FRAMES:
            frame, stored = getattr(result, kind), GOLDEN / f"{name}.{kind}.parquet"
            if mode == "save":
                stored.parent.mkdir(parents=True, exist_ok=True)
                frame.write_parquet(stored)
            elif not stored.exists():
                print(f"{name}.{kind}: no snapshot; run `save` first", file=sys.stderr)
                differing += 1
            elif not frame.equals(pl.read_parquet(stored)):
                differing += 1
                print(
                    f"{name}.{kind} differs: {_difference(frame, pl.read_parquet(stored))}", file=sys.stderr
                )
        print(f"{name}: {took:.2f} s")
    if mode == "check":
        print("OK" if not differing else f"{differing} frames differ")
    return 1 if differing else 0


def _difference(got: pl.DataFrame, want: pl.DataFrame) -> str:
    """Where two frames first differ: the columns one has alone (the rest compared), their heights, or the
    first columns and rows that do."""
    notes = [f"{label}: {sorted(names)}" for label, names in _columns_alone(got, want) if names]
    common = [column for column in got.columns if column in want.columns]
    got, want = got.select(common), want.select(common)
    if got.height != want.height:
        return "; ".join([*notes, f"height {got.height}, snapshot {want.height}"])
    for column in got.columns:
        if got[column].equals(want[column]):
            continue
        # as Python values: a list column's cells are Series, whose != is element-wise; nan == nan here
        mine, theirs = got[column].to_list(), want[column].to_list()
        rows = [row for row in range(got.height) if repr(mine[row]) != repr(theirs[row])][:3]
        notes.append(f"{column} rows {rows}: {[mine[r] for r in rows]} vs {[theirs[r] for r in rows]}")
    return "; ".join(notes[:4]) or "column order"


def _columns_alone(got: pl.DataFrame, want: pl.DataFrame) -> list[tuple[str, set[str]]]:
    return [
        ("new columns", set(got.columns) - set(want.columns)),
        ("gone", set(want.columns) - set(got.columns)),
    ]


if __name__ == "__main__":
    sys.exit(main())

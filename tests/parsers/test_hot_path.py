"""The records Python still reads on the hot path, on real lines and edge cases with the values they hold:
DeepSpeed's ``step=`` lines (``_STEP_LINE``, their one definition), the profiler's scaled values, and
the reader's routing of the lines polars searched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from logstat.parsers import deepspeed, reader, source
from logstat.parsers.base import Family

from tests.conftest import FIXTURES


def _log_lines(keep) -> list[str]:
    """Every line of the bundled logs (the real ones included) for which ``keep(line)`` holds."""
    roots = [FIXTURES]
    lines = []
    for root in roots:
        for path in sorted(
            p for p in root.rglob("*") if p.is_file() and p.suffix in (".out", ".err", ".log", ".txt")
        ):
            # as the reader sees them: without colour codes (fixtures/ansi/)
            text = source.without_escapes(Path(path).read_bytes()).decode("utf-8", errors="replace")
            lines += [line for line in text.splitlines() if keep(line)]
    return lines


def _step_lines() -> list[str]:
    return _log_lines(lambda line: "step=" in line)


def test_every_real_step_line_is_read_once():
    lines = _step_lines()
    # counted independently: DeepSpeed's plain "step=N, skipped=M" progress lines (18 in the fixtures
    # and real logs today, checked with grep), each read once
    plain = re.compile(r"(?:^|[^A-Za-z0-9_/])step=[0-9]+, skipped=[0-9]+, lr=\[")
    expected = sum(len(plain.findall(line)) for line in lines)
    assert expected >= 18
    assert sum(len(list(deepspeed.step_records(line))) for line in lines) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Rank 0] step=10, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]", [(10, 2, 5e-05)]),
        ("step=3, skipped=0, lr=[0.0001, 0.0001], mom=[(0.9, 0.999)]", [(3, 0, 0.0001)]),
        ("step=3 , skipped=\t1 , lr=[ 2.5e-4 , 1 ]", [(3, 1, 0.00025)]),
        ("step = 3, skipped=1, lr=[1]", []),
        ("step=4, skipped=0, lr=[]", [(4, 0, None)]),
        ("step=4, skipped=0, lr=[ ]", [(4, 0, None)]),
        ("step=5, skipped=0, lr=[NaN]", [(5, 0, float("nan"))]),
        ("step=5, skipped=0, lr=[-Inf, 1]", [(5, 0, float("-inf"))]),
        ("step=5, skipped=0, lr=[1.0,]", []),  # a trailing comma is no list
        ("step=5, skipped=0, lr=[1.0.2]", []),
        ("step=5, Skipped=0, lr=[1.0]", []),  # the literals keep their case
        ("global_step=5, skipped=0, lr=[1]", []),
        ("micro/step=5, skipped=0, lr=[1]", []),
        ("step=x step=6, skipped=1, lr=[2]step=7, skipped=1, lr=[3]", [(6, 1, 2.0), (7, 1, 3.0)]),
        ("step=٣, skipped=0, lr=[1]", []),  # integer is ASCII digits
        ("step=8, skipped=0, lr=[١.5]", [(8, 0, 1.5)]),  # number's \d is any digit, as float() reads it
    ],
)
def test_edge_cases(text, expected):
    assert repr(list(deepspeed.step_records(text))) == repr(expected)


def test_a_record_polars_splits_off_is_routed_by_its_own_markers(tmp_path, monkeypatch):
    """A launcher prefix is not part of the record: a marker only in the prefix (a host named like one)
    routes the line nowhere, and a marker in the record routes it to its family, so the reader needs no
    search of its own. A line Python splits (glued ranks) keeps the mask of the whole line."""
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)  # polars' search, as on a big file
    log = tmp_path / "job-1.out"
    log.write_text("alpha1: nothing\nalpha1: beta here\n0: alpha\n[default0]:alpha[default1]:x\n")
    got = list(
        source.routed_records(
            log,
            (b"alpha", b"beta"),
            ((b"alpha",), (b"beta",)),
            lambda: False,
            source.SourceReport(path=str(log)),
        )
    )
    assert got == [
        (1, "alpha1: nothing", 0, "nothing", False),
        (2, "alpha1: beta here", 0b10, "beta here", False),
        (3, "0: alpha", 0b01, "alpha", False),
        (4, "[default0]:alpha[default1]:x", 0b01, None, False),
    ]
    seen = []
    family = Family(name="alpha", markers=("alpha",), parse_line=lambda text, n, run: seen.append((n, text)))
    reader.read_run(reader.RunFiles(key=str(log), files=(log,)), [family])
    assert seen == [(3, "alpha"), (4, "alpha")]


def test_routed_lines_masks_marked_and_captured_lines(tmp_path, monkeypatch):
    """Each line's mask names the routes whose markers it holds; an unmarked line read while a block
    is open has mask 0. Colour codes are gone before the search: one inside a marker hides nothing."""
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)  # polars' search, as on a big file
    log = tmp_path / "job-1.out"
    lines = [
        "alpha here",
        "nothing",
        "beta and alpha",
        "OPEN",
        "plain inside",
        "beta inside",
        "CLOSE",
        "beta al\x1b[0mpha",
    ]
    log.write_text("\n".join(lines) + "\n")
    routes = ((b"alpha",), (b"beta",), (b"OPEN", b"CLOSE"))
    needles = (b"alpha", b"beta", b"OPEN", b"CLOSE")
    state = {"open": False}
    got = []
    for lineno, text, mask in source.routed_lines(
        log, needles, routes, lambda: state["open"], source.SourceReport(path=str(log))
    ):
        got.append((lineno, text, mask))
        state["open"] = text == "OPEN" or (state["open"] and text != "CLOSE")
    assert got == [
        (1, "alpha here", 0b001),
        (3, "beta and alpha", 0b011),
        (4, "OPEN", 0b100),
        (5, "plain inside", 0),
        (6, "beta inside", 0b010),
        (7, "CLOSE", 0b100),
        (8, "beta alpha", 0b011),
    ]


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        (" 2.63 K ", "", 2630.0),
        ("377.89 us", "s", 377.89e-6),
        ("1.5T", "", 1.5e12),
        ("52 B", "", 52e9),
        ("3\tM", "", 3e6),
        ("nan", "", float("nan")),
        ("-INF G", "", float("-inf")),
        ("1e", "", None),
        ("2.5 KB", "", None),
        ("12 k", "", None),  # prefixes keep their case
        ("", "", None),
    ],
)
def test_scaled_edge_cases(text, unit, expected):
    assert repr(deepspeed._scaled(text, unit)) == repr(expected)

"""DeepSpeed's records on real lines and edge cases with the values they hold: ``step=`` lines
(``_STEP_LINE``, their one definition) and the profiler's scaled values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from logstat.parsers import deepspeed, source

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
            text = re.sub(source.ESCAPE, "", Path(path).read_bytes().decode("utf-8", errors="replace"))
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

"""Shared pieces of the reliability tests: real lines to mutate, and the count of generated inputs.

Every property test adds the number of inputs it tried to the ``generated`` counter; the terminal
summary prints the counts (also under ``-q``), so the number of examples run is in the test output.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
#: longest real line used whole; longer ones (64 ranks glued) are cut to this many characters.
MAX_LINE_CHARS = 2000

_GENERATED = pytest.StashKey[Counter]()


@pytest.fixture(scope="session")
def generated(request: pytest.FixtureRequest) -> Counter:
    """Counter of generated inputs per test (session-scoped, so hypothesis tests may use it)."""
    return request.config.stash.setdefault(_GENERATED, Counter())


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    counts = config.stash.get(_GENERATED, None)
    if not counts:
        return
    terminalreporter.write_sep("-", f"reliability: {sum(counts.values())} generated inputs tried")
    for name, count in sorted(counts.items()):
        terminalreporter.write_line(f"{count:9d}  {name}")


def _log_files() -> list[Path]:
    files = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.suffix in (".out", ".err", ".log"))
    return files


@cache
def _real_lines() -> tuple[str, ...]:
    """Every distinct non-blank line of the bundled fixtures (the real logs included)."""
    seen: dict[str, None] = {}
    for path in _log_files():
        for line in path.read_bytes().decode("utf-8", errors="replace").splitlines():
            if line.strip():
                seen.setdefault(line[:MAX_LINE_CHARS], None)
    return tuple(seen)


@cache
def _marker_lines() -> tuple[str, ...]:
    """One real line per marker of every registered family (the lines the families read)."""
    from logstat.parsers import registry

    lines = _real_lines()
    chosen: dict[str, None] = {}
    for family in registry.families():
        for marker in family.markers:
            found = next((line for line in lines if marker in line), None)
            if found is not None:
                chosen.setdefault(found, None)
    return tuple(chosen)


@pytest.fixture(scope="session")
def real_lines() -> tuple[str, ...]:
    """Every distinct non-blank line of fixtures/ (cut at MAX_LINE_CHARS)."""
    return _real_lines()


@pytest.fixture(scope="session")
def marker_lines() -> tuple[str, ...]:
    """One real line per marker of every registered family."""
    return _marker_lines()

"""The reader's routing of the lines polars searched (DeepSpeed's ``step=`` lines and profiler values,
read column-wise now, are tested in test_deepspeed_edges.py)."""

from __future__ import annotations

from logstat.parsers import reader, source
from logstat.parsers.base import Family


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

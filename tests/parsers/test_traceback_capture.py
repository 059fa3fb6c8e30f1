"""A ``CaptureLines`` block: of the lines its ``collapse`` matches, one after another, the reader
hands over only the last."""

from __future__ import annotations

from logstat.parsers import source
from logstat.parsers.base import CaptureLines
from logstat.parsers.source import SourceReport

from tests.conftest import FIXTURES

MPIRUN_384_RANKS = FIXTURES / "failures" / "mpirun-384-ranks-3016.out.gz"


FRAMES = CaptureLines("File|Error", collapse=r'^\s*File "')


def test_a_run_of_collapsible_lines_is_handed_over_by_its_last_line(tmp_path, monkeypatch):
    """Of frames one after another only the last is delivered; one right before a marked line that
    is not the regex's (which reads what the frame set) is delivered too, one before a marked frame is
    not. A line with colour codes, or one polars does not split into one record, is never collapsed.
    The Python cutter delivers every line."""
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)  # one small chunk, searched by polars
    body = [
        "OPEN",  # 1
        '  File "a"',  # 2: collapsed
        "    source",  # 3
        '[rank1]:  File "b"',  # 4: the last of its run
        "ValueError",  # 5
        '  File "c"',  # 6: collapsed (the marked frame 7 overwrites it)
        '  File "MARK"',  # 7: marked
        '  File "d"',  # 8: delivered: the marked line 9, none of the regex's, reads what it sets
        "MARK",  # 9
        '  File "e"',  # 10: collapsed
        '  File "f"',  # 11: the last of its run
        '  File "g"\x1b',  # 12: an escape the reader leaves: not collapsing
        '  File "h" [rank2]: File "i"',  # 13: two records: not collapsing
        "CLOSE",  # 14
        '  File "after"',  # 15
    ]
    path = tmp_path / "tb.log"
    path.write_text("\n".join(body) + "\n")
    delivered = {}
    for readable in (source.frame_readable, lambda chunk: False):
        state = {"open": False}
        with monkeypatch.context() as patch:
            patch.setattr(source, "frame_readable", readable)
            seen = []
            for n, _, _, _ in source.routed_records(
                path,
                (b"OPEN", b"CLOSE", b"MARK"),
                (),
                lambda state=state: state["open"],
                SourceReport(path="x"),
                patterns=(FRAMES,),
            ):
                seen.append(n)
                if n in (1, 14):
                    state["open"] = FRAMES if n == 1 else False
        delivered[readable is source.frame_readable] = seen
    assert delivered[True] == [1, 4, 5, 7, 8, 9, 11, 12, 13, 14]
    assert delivered[False] == list(range(1, 15))


def test_an_undeclared_capture_is_collapsed_too(tmp_path):
    """A ``CaptureLines`` no family declared is searched when first asked for, collapse included."""
    path = tmp_path / "tb.log"
    lines = ["OPEN"] + ['  File "x"'] * 3000 + ["ValueError", "CLOSE"]
    path.write_text("\n".join(lines) + "\n")
    state = {"open": False}
    seen = []
    for n, text in source.marked_lines(
        path, (b"OPEN", b"CLOSE"), lambda: state["open"], SourceReport(path="x")
    ):
        seen.append(n)
        if text in ("OPEN", "CLOSE"):
            state["open"] = FRAMES if text == "OPEN" else False
    assert seen == [1, 3001, 3002, 3003]

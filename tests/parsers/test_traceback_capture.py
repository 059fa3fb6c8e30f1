"""An open traceback's frames reach the Slurm family only where they can matter.

While a traceback is open the family needs its frames only for the line of the last one (the give-up
window is counted from it), so of frames delivered one after another the reader hands over only the
last (``CaptureLines.collapse``). The results must be those of the plain path, which hands over every
line: on the 384 ranks' interleaved tracebacks of ``fixtures/failures`` and on generated tracebacks cut
into small chunks, around marked lines, colour codes and launcher prefixes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from logstat.parsers import reader, registry, slurm, source
from logstat.parsers.base import CaptureLines
from logstat.parsers.source import SourceReport, records, single_record

from tests.conftest import FIXTURES
from tests.parsers.random_text import joined

MPIRUN_384_RANKS = FIXTURES / "failures" / "mpirun-384-ranks-3016.out.gz"


def _read_counting(path: Path) -> tuple[reader.RunResult, list[str]]:
    """``read_run`` of ``path`` by every family, with the records handed to the Slurm family."""
    handed: list[str] = []

    def counting(text: str, lineno: int, run) -> None:
        handed.append(text)
        slurm.parse_line(text, lineno, run)

    active = [replace(f, parse_line=counting) if f.name == slurm.NAME else f for f in registry.families()]
    return reader.read_run(reader.RunFiles(key=str(path), files=(path,)), active), handed


def _is_frame(record: str) -> bool:
    return record.strip().startswith('File "')


def test_the_384_ranks_frames_mostly_stay_in_polars(monkeypatch):
    """384 ranks' interleaved tracebacks: 1827 frames were handed over one by one, now 335 (the last
    before another kind of line), with the same reason and line as the plain path, which reads every line."""
    result, handed = _read_counting(MPIRUN_384_RANKS)
    with monkeypatch.context() as patch:
        patch.setattr(reader, "marker_needles", lambda markers: None)
        reference, every_record = _read_counting(MPIRUN_384_RANKS)
    assert sum(map(_is_frame, every_record)) == 1827
    assert sum(map(_is_frame, handed)) == 335
    assert len(handed) == 1061
    status = reader.status_of(result)
    assert status == reader.status_of(reference)
    assert status[:3] == (
        "failed",
        "FileNotFoundError: [Errno 2] No such file or directory: '/gpfs/oscar-en/shard_0263_text_document.idx'",
        22,
    )
    assert result.run.consequence_lines() == reference.run.consequence_lines()


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
            for n, _, _, _, _ in source.routed_records(
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


# --- the Slurm family's collapse regex, as polars reads a raw line ---------------------------------------

_SPACE = (" ", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\xa0", "\u3000")
_PIECES = (
    'File "',
    "File ",
    "Traceback (most recent call last):",
    "Traceback (most recent",
    "[rank1]:",
    "[default0]:",
    "12: ",
    "node3: ",
    "]:",
    "\r",
    "x",
    "é",
    "ValueError: ",
    *_SPACE,
)


@settings(max_examples=2000, deadline=None)
@given(joined(_PIECES, max_size=8))
def test_a_collapsing_line_is_one_record_that_only_moves_the_traceback_on(line):
    """What polars collapses, Python reads as one record that is a frame or a header (so, inside a
    traceback, it sets ``traceback_last`` and nothing else)."""
    collapsing = (
        pl.select(single_record(pl.lit(line)).str.contains(slurm.TRACEBACK_CAPTURE.collapse).fill_null(False))
        .to_series()
        .item()
    )
    if collapsing:
        (record,) = records(line)
        assert record.strip().startswith(('File "', "Traceback (most recent call last)"))


# --- generated tracebacks: the same results as the plain path --------------------------------------------

_LINES = [
    "Traceback (most recent call last):",
    "[rank3]: Traceback (most recent call last):",
    '  File "/x/train.py", line 12, in <module>',
    '[rank3]:   File "/x/train.py", line 7, in main',
    '  File "/x/Killed.py", line 1, in f',  # a marked frame
    '  File "/x/OutOfMemoryError.py", line 3, in g',  # marked, and an OOM to the family
    'File "/x/OutOfMemoryError.py", line 3, in g',
    '  File "\x1b[31m/x/colour.py\x1b[0m", line 2, in h',
    '    pretrain(rank)  File "/x/glued.py", line 28, in pretrain',
    "    raise RuntimeError('Error: closed')",
    "           ^^^^^^^",
    "ValueError: bad value",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "During handling of the above exception, another exception occurred:",
    "Exception ignored in atexit callback: <function f at 0x1>",
    "srun: error: r7i4n2: task 3: Exited with exit code 1",
    "Killing subprocess 4443",
    "connection reset by peer",
    "+ N_NODES=4",
    "iteration 10/100 | elapsed time per iteration (ms): 100.0",
    "noise",
    "",
]


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few lines, each searched by polars."""
    monkeypatch.setattr(source, "CHUNK_BYTES", 300)
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)
    return monkeypatch


_GAPS = st.integers(0, 6)
#: the give-up window of real logs: never reached in a generated one
NEVER_REACHED = slurm.TRACEBACK_MAX_LINES


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(_LINES), _GAPS), min_size=1, max_size=30))
@example([(_LINES[0], 4), (_LINES[2], 0), (_LINES[2], 0), ("Killing subprocess 4443", 0), (_LINES[2], 0)])
@example([(_LINES[0], 4), (_LINES[2], 0), (_LINES[2], 0), ("ValueError: bad value", 0)])
@example([(_LINES[0], 5), ('  File "/x/Killed.py", line 1, in f', 0)])
@pytest.mark.parametrize("window", [4, NEVER_REACHED])
def test_generated_tracebacks_read_as_every_frame_reads_them(small_chunks, tmp_path_factory, window, lines):
    """Lines of tracebacks and around them, each followed by a few lines no family reads (so that a
    give-up window of 4 lines ends, or does not, between any two of them), read as when every frame
    was handed over; and, where the window never ends, as the plain path reads every line (where it
    ends, the plain path gives up at the first line past it, the others at the next line they read)."""
    small_chunks.setattr(slurm, "TRACEBACK_MAX_LINES", window)
    path = tmp_path_factory.mktemp("tb") / "job-1.out"
    path.write_text("".join(line + "\n" + "gap\n" * gap for line, gap in lines))
    collapsed, _ = _read_counting(path)
    with small_chunks.context() as patch:
        patch.setattr(slurm, "TRACEBACK_CAPTURE", slurm.TRACEBACK_LINES)  # every frame, as before
        every_frame, _ = _read_counting(path)
    assert reader.runs_row(collapsed) == reader.runs_row(every_frame)
    if window == NEVER_REACHED:
        with small_chunks.context() as patch:
            patch.setattr(reader, "marker_needles", lambda markers: None)
            plain, _ = _read_counting(path)
        assert reader.runs_row(collapsed) == reader.runs_row(plain)

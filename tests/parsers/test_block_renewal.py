"""Blocks that their records renew (``Block.renews``) and openers that only herald one (``Block.heralds``),
on a small synthetic family read by the real engine: where such a block ends, what it holds (reads and
swallows), and that chunk and batch edges change nothing. The Slurm family's tracebacks are such blocks."""

from __future__ import annotations

from functools import partial

import polars as pl
import pytest
from logstat.parsers import source
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import Block, Events, RecordTest
from logstat.parsers.reader import RunFiles, read_settled


def _block_events(records: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """One note per block, at its opener: its records as ``role:line:text``, joined."""
    blocks = (
        records.sort("order")
        .group_by("block", maintain_order=True)
        .agg(message=pl.format("{}:{}:{}", "role", "line", "text").str.join("|"))
        .select(order="block", family=pl.lit("probe"), message="message")
    )
    return Events(notes=[blocks.collect()])


BLOCK = Block(
    family="probe",
    name="tb",
    opens=RecordTest(markers=("OPEN", "HERALD")),
    heralds=RecordTest(markers=("HERALD",)),
    herald_lines=2,
    body=RecordTest(markers=("OPEN", "HERALD")),
    renews=RecordTest(pattern="^KEEP"),
    closes=RecordTest(pattern="^END"),
    max_lines=3,
    hint="OPEN|HERALD|KEEP|END",
    swallows=True,
    read=_block_events,
)


def _read(tmp_path, log: str) -> tuple[list[str], list[tuple[int, str]]]:
    """The blocks (``line: records``) and the records that reached ``parse_line`` of ``log``."""
    seen = []

    def parse(text: str, lineno: int, run: RunBuilder) -> None:
        seen.append((lineno, text))

    family = Family(name="probe", markers=("OPEN", "HERALD", "note"), parse_line=parse, blocks=(BLOCK,))
    path = tmp_path / "run.log"
    path.write_text(log)
    (result,) = read_settled([RunFiles(key=str(path), files=(path,))], [family])
    return [note.partition(":")[2] for note in result.run.state.get("parse_errors", [])], seen


def test_renewing_records_keep_a_block_open_each_within_max_lines_of_the_one_before(tmp_path):
    log = "OPEN\nKEEP a\nx\nx\nKEEP b\nx\nx\nx\nnote in\nx\nnote out\nEND\n"
    blocks, seen = _read(tmp_path, log)
    # KEEP b (line 5) renews the block up to line 8: the note of line 9 is outside, read as usual
    assert blocks == ["1: 0:1:OPEN"]
    assert seen == [(9, "note in"), (11, "note out")]
    # without KEEP b the block ends after line 5: its END is no closer
    blocks, seen = _read(tmp_path, "OPEN\nKEEP a\nx\nx\nx\nnote\nEND\n")
    assert blocks == ["1: 0:1:OPEN"] and seen == [(6, "note")]


def test_a_renewed_block_ends_at_its_closer_and_swallows_the_family_inside(tmp_path):
    blocks, seen = _read(tmp_path, "note 1\nOPEN\nKEEP\nnote 4\nOPEN again\nEND\nnote 7\n")
    assert blocks == ["2: 0:2:OPEN|1:5:OPEN again|2:6:END"]
    assert seen == [(1, "note 1"), (7, "note 7")]


def test_a_chain_of_renewals_reaches_a_closer_far_past_max_lines_after_its_opener(tmp_path):
    # the lines are read in windows of max_lines from each opener, widened while renewals come near the end
    log = "OPEN\n" + "KEEP\nx\n" * 6 + "note 14\nEND\nnote 16\n"
    blocks, seen = _read(tmp_path, log)
    assert blocks == ["1: 0:1:OPEN|2:15:END"]
    assert seen == [(16, "note 16")]
    # a window widened into the next opener's reads its lines once
    blocks, seen = _read(tmp_path, "OPEN\nx\nKEEP\nx\nx\nOPEN 6\nx\nEND\nnote 9\n")
    assert blocks == ["1: 0:1:OPEN|1:6:OPEN 6"]
    assert seen == [(9, "note 9")]


def test_an_opener_that_does_not_renew_inside_a_block_does_not_extend_it(tmp_path):
    blocks, seen = _read(tmp_path, "OPEN\nx\nOPEN 2\nx\nx\nnote\n")
    assert blocks == ["1: 0:1:OPEN|1:3:OPEN 2"]
    assert seen == [(6, "note")]


def test_a_herald_holds_from_the_opener_that_follows_it_in_time(tmp_path):
    blocks, seen = _read(tmp_path, "HERALD\nnote 2\nOPEN\nKEEP\nnote 5\nEND\nnote 7\n")
    # the lines between the herald and its opener are read as usual; the block holds from its opener
    assert blocks == ["1: 0:1:HERALD|1:3:OPEN|2:6:END"]
    assert seen == [(2, "note 2"), (7, "note 7")]


def test_a_herald_no_opener_follows_in_time_is_a_block_of_its_own(tmp_path):
    blocks, seen = _read(tmp_path, "HERALD\nnote 2\nEND\nx\nOPEN\nnote 6\nEND\n")
    # END (line 3) closes nothing: the herald's block is its own record; OPEN (line 5) opens a block
    assert blocks == ["1: 0:1:HERALD", "5: 0:5:OPEN|2:7:END"]
    assert seen == [(2, "note 2")]


def test_of_heralds_one_after_another_the_last_one_heralds(tmp_path):
    blocks, seen = _read(tmp_path, "HERALD 1\nHERALD 2\nOPEN\nEND\n")
    assert blocks == ["1: 0:1:HERALD 1", "2: 0:2:HERALD 2|1:3:OPEN|2:4:END"]
    assert seen == []


@pytest.mark.parametrize("batch_bytes", [1, 5, 16, 40, 1 << 20])
def test_chunk_and_batch_edges_change_nothing(tmp_path, monkeypatch, batch_bytes):
    monkeypatch.setattr(source, "CHUNK_BYTES", min(batch_bytes, 64))
    monkeypatch.setattr(source, "batches", partial(source.batches, batch_bytes=batch_bytes))
    log = (
        "HERALD\nx\nOPEN\nKEEP\nx\nx\nKEEP\nnote 8\nx\nx\nx\nx\nnote 13\n"
        "HERALD\nnote 15\nx\nOPEN\nnote 18\nx\nEND\nnote 21\nHERALD\nx\n"
    )
    blocks, seen = _read(tmp_path, log)
    assert blocks == [
        "1: 0:1:HERALD|1:3:OPEN",
        "14: 0:14:HERALD",
        "17: 0:17:OPEN|2:20:END",
        "22: 0:22:HERALD",
    ]
    assert seen == [(13, "note 13"), (15, "note 15"), (21, "note 21")]

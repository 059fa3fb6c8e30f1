"""The engine's contract with a family, on small synthetic families: which records reach ``parse_line``
(in line order), which a record kind or a block takes, where blocks open and end (closers, records that
end them, max_lines, the end of their file, across batches), and that many runs in one batch, chunk and
batch edges change nothing."""

from __future__ import annotations

from functools import partial

import polars as pl
import pytest
from logstat.parsers import engine, source
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import (
    BODY,
    CLOSER,
    ENDED,
    OPENER,
    SEEN,
    Block,
    Events,
    RecordKind,
    RecordTest,
    marks_of,
)
from logstat.parsers.reader import RunFiles, read_settled


def _recorder(seen: list) -> callable:
    def parse(text: str, lineno: int, run: RunBuilder) -> None:
        seen.append((run.path.rsplit("/", 1)[-1], lineno, text))

    return parse


def _read(tmp_path, families, *logs: str) -> list[RunBuilder]:
    groups = []
    for number, text in enumerate(logs):
        path = tmp_path / f"run{number}.log"
        path.write_text(text)
        groups.append(RunFiles(key=str(path), files=(path,)))
    return [result.run for result in read_settled(groups, families)]


def test_a_family_gets_its_marked_records_in_line_order(tmp_path):
    alpha, beta = [], []
    families = [
        Family(name="alpha", markers=("alpha",), parse_line=_recorder(alpha)),
        Family(name="beta", markers=("beta",), parse_line=_recorder(beta)),
    ]
    _read(
        tmp_path,
        families,
        "alpha1: nothing\nalpha1: beta here\n0: alpha\n[default0]:alpha[default1]:beta alpha\nnone\n",
    )
    # a marker in a launcher prefix routes nothing; glued records are routed each by its own markers
    assert alpha == [("run0.log", 3, "alpha"), ("run0.log", 4, "alpha"), ("run0.log", 4, "beta alpha")]
    assert beta == [("run0.log", 2, "beta here"), ("run0.log", 4, "beta alpha")]


def _steps(records: pl.LazyFrame) -> Events:
    return Events(
        steps=[
            records.select(
                "order",
                step=pl.col("text").str.extract(r"step (\d+)", 1).cast(pl.Int64),
                mode=pl.lit(0, dtype=pl.Int8),
                family=pl.lit("probe"),
                loss=pl.col("text").str.extract(r"loss (\S+)", 1).cast(pl.Float64),
            ).collect()
        ],
        marks=[marks_of(records, "probe", SEEN)],
    )


STEP = RecordKind(
    family="probe", name="step", test=RecordTest(markers=("step ",), unless=("skip",)), read=_steps
)


def test_a_kinds_records_are_read_column_wise_and_the_rest_go_to_python(tmp_path):
    seen = []
    probe = Family(name="probe", markers=("step ", "note"), parse_line=_recorder(seen), kinds=(STEP,))
    (run,) = _read(tmp_path, [probe], "step 1 loss 2.5\nnote a\nstep 2 loss 1.5 skip\nstep 3 loss 0.5\n")
    assert seen == [("run0.log", 2, "note a"), ("run0.log", 3, "step 2 loss 1.5 skip")]
    assert {step: row["loss"] for step, row in run.iterations.items()} == {1: 2.5, 3: 0.5}
    assert [row["line"] for row in run.iterations.values()] == [1, 4]
    assert run.families_seen == {"probe": 2}


def _block_events(records: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """One note per block, at its opener: its records as ``role:text``, joined."""
    blocks = (
        records.sort("order")
        .group_by("block", maintain_order=True)
        .agg(message=pl.format("{}:{}", "role", "text").str.join("|"))
        .select(order="block", family=pl.lit("probe"), message="message")
    )
    return Events(notes=[blocks.collect()])


def _block_family(seen: list, **options) -> Family:
    block = Block(
        family="probe",
        name="dump",
        opens=RecordTest(markers=("BEGIN",)),
        body=RecordTest(pattern=r"^\s*\w+ = "),
        closes=RecordTest(pattern=r"^END$"),
        ends=RecordTest(markers=("step ",)),
        read=_block_events,
        **options,
    )
    return Family(
        name="probe", markers=("BEGIN", "step ", "note"), parse_line=_recorder(seen), blocks=(block,)
    )


def _blocks(run: RunBuilder) -> list[str]:
    """Each block's records as the probe's reader noted them: ``line: role:text|role:text...``."""
    return [note.removeprefix("probe:") for note in run.state.get("parse_errors", [])]


def test_a_block_reads_its_lines_to_its_closer(tmp_path):
    seen = []
    log = "note 0\nBEGIN\na = 1\nnot a body line\n  b = 2\nEND\nc = 3\nnote 7\n"
    (run,) = _read(tmp_path, [_block_family(seen)], log)
    assert _blocks(run) == [f"2: {OPENER}:BEGIN|{BODY}:a = 1|{BODY}:  b = 2|{CLOSER}:END"]
    assert seen == [("run0.log", 1, "note 0"), ("run0.log", 8, "note 7")]


def test_a_record_of_the_family_that_ends_a_block_is_read_as_usual_too(tmp_path):
    seen = []
    log = "BEGIN\na = 1\nnote inside\nstep 4\nb = 2\n"
    (run,) = _read(tmp_path, [_block_family(seen)], log)
    assert _blocks(run) == [f"1: {OPENER}:BEGIN|{BODY}:a = 1|{ENDED}:step 4"]
    assert seen == [("run0.log", 3, "note inside"), ("run0.log", 4, "step 4")]


def test_a_block_that_swallows_keeps_its_familys_records_inside_from_python(tmp_path):
    seen = []
    log = "BEGIN\na = 1\nnote inside\nEND\nnote after\n"
    (run,) = _read(tmp_path, [_block_family(seen, swallows=True)], log)
    assert _blocks(run) == [f"1: {OPENER}:BEGIN|{BODY}:a = 1|{CLOSER}:END"]
    assert seen == [("run0.log", 5, "note after")]


def test_an_opener_inside_an_open_block_is_one_of_its_records(tmp_path):
    seen = []
    log = "BEGIN\na = 1\nBEGIN\nb = 2\nEND\nBEGIN\nc = 3\nEND\n"
    (run,) = _read(tmp_path, [_block_family(seen)], log)
    # the first block read its inner opener's lines as its own and ended at the first END
    assert _blocks(run) == [
        f"1: {OPENER}:BEGIN|{BODY}:a = 1|{BODY}:b = 2|{CLOSER}:END",
        f"6: {OPENER}:BEGIN|{BODY}:c = 3|{CLOSER}:END",
    ]
    assert seen == []


def test_a_block_ends_max_lines_after_its_opener_and_with_its_file(tmp_path):
    seen = []
    log = "BEGIN\na = 1\nb = 2\nc = 3\nd = 4\n"
    (run,) = _read(tmp_path, [_block_family(seen, max_lines=2)], log)
    assert _blocks(run) == [f"1: {OPENER}:BEGIN|{BODY}:a = 1|{BODY}:b = 2"]
    (run,) = _read(tmp_path, [_block_family(seen)], log)
    assert _blocks(run) == [f"1: {OPENER}:BEGIN|{BODY}:a = 1|{BODY}:b = 2|{BODY}:c = 3|{BODY}:d = 4"]


def test_the_hint_picks_the_raw_lines_a_block_splits_into_records(tmp_path):
    seen = []
    log = "BEGIN\na = 1\nb = 2\nEND\n"
    (run,) = _read(tmp_path, [_block_family(seen, hint=r"b = |END")], log)
    assert _blocks(run) == [f"1: {OPENER}:BEGIN|{BODY}:b = 2|{CLOSER}:END"]


@pytest.mark.parametrize("batch_bytes", [1, 7, 40, 1 << 20])
def test_blocks_and_kinds_read_the_same_across_chunks_and_batches(tmp_path, monkeypatch, batch_bytes):
    monkeypatch.setattr(source, "CHUNK_BYTES", min(batch_bytes, 64))
    monkeypatch.setattr(source, "BATCH_BYTES", batch_bytes)
    seen = []
    family = _block_family(seen, swallows=True)
    family = Family(
        name="probe",
        markers=family.markers,
        parse_line=family.parse_line,
        blocks=family.blocks,
        kinds=(STEP,),
    )
    log = "note 1\nBEGIN\na = 1\nb = 2\nnote in\nEND\nstep 7 loss 1\nBEGIN\nc = 3\nstep 8 loss 2\nnote 11\n"
    first, second = _read(tmp_path, [family], log, "BEGIN\nz = 9\n")
    assert _blocks(first) == [
        f"2: {OPENER}:BEGIN|{BODY}:a = 1|{BODY}:b = 2|{CLOSER}:END",
        f"8: {OPENER}:BEGIN|{BODY}:c = 3|{ENDED}:step 8 loss 2",
    ]
    assert {step: row["loss"] for step, row in first.iterations.items()} == {7: 1.0, 8: 2.0}
    # the second run's block begins in its own file: nothing of the first run's leaks into it
    assert _blocks(second) == [f"1: {OPENER}:BEGIN|{BODY}:z = 9"]
    assert [(name, line) for name, line, _ in seen] == [("run0.log", 1), ("run0.log", 11)]


def test_many_small_runs_in_one_batch_keep_their_own_records(tmp_path):
    seen = []
    probe = Family(name="probe", markers=("step ", "note"), parse_line=_recorder(seen), kinds=(STEP,))
    runs = _read(tmp_path, [probe], *[f"note {n}\nstep {n} loss {n}\n" for n in range(1, 6)])
    assert [list(run.iterations) for run in runs] == [[1], [2], [3], [4], [5]]
    assert seen == [(f"run{n - 1}.log", 1, f"note {n}") for n in range(1, 6)]


def test_a_segment_never_ends_inside_a_block_of_its_read(tmp_path, monkeypatch):
    """Two blocks of one read overlap: when the first has ended and the second is still open, the segment
    read ends before the first's opener, not inside the first at the second's."""

    def block(name: str, opener: str, closer: str) -> Block:
        body, closes = RecordTest(pattern=r"^\w+ = "), RecordTest(pattern=f"^{closer}$")
        return Block(
            family="probe",
            name=name,
            opens=RecordTest(markers=(opener,)),
            body=body,
            closes=closes,
            read=_block_events,
        )

    family = Family(
        name="probe",
        markers=("BEGIN", "OPEN"),
        blocks=(block("a", "BEGIN", "END"), block("b", "OPEN", "CLOSE")),
    )
    log = "BEGIN\na = 1\nOPEN\nb = 2\nEND\nc = 3\nCLOSE\n"
    expected = [
        f"1: {OPENER}:BEGIN|{BODY}:a = 1|{BODY}:b = 2|{CLOSER}:END",
        f"3: {OPENER}:OPEN|{BODY}:b = 2|{BODY}:c = 3|{CLOSER}:CLOSE",
    ]
    assert _blocks(_read(tmp_path, [family], log)[0]) == expected
    monkeypatch.setattr(engine, "FLUSH_RECORDS", 1)  # a segment read after every line
    monkeypatch.setattr(source, "CHUNK_BYTES", 1)
    monkeypatch.setattr(source, "batches", partial(source.batches, batch_bytes=1))
    assert _blocks(_read(tmp_path, [family], log)[0]) == expected

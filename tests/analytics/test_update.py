"""`--update`: the seed's TFlops column recomputed in place, every other byte kept."""

import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logstat.analytics.update import format_report, update_tflops_file, update_tflops_text

from tests.conftest import SEED_DOC


@pytest.fixture
def seed_bytes() -> bytes:
    return SEED_DOC.read_bytes()


def test_pristine_seed_document_is_left_byte_identical_and_untouched(tmp_path, seed_bytes):
    doc = tmp_path / "gpt2.md"
    doc.write_bytes(seed_bytes)
    os.utime(doc, (1_000_000, 1_000_000))
    result = update_tflops_file(doc)
    assert doc.read_bytes() == seed_bytes
    assert doc.stat().st_mtime == 1_000_000  # not even rewritten
    assert result.changed == []
    # 11 tables of the seed have GPUs, Size, Glob-BS, Throughput and TFlops; 64 data rows, 3 unreadable.
    assert (result.tables, result.rows) == (11, 64)


def test_unreadable_rows_are_left_alone_and_reported(seed_bytes):
    result = update_tflops_text(seed_bytes.decode("utf-8", "surrogateescape"))
    assert [(s.line, s.reason) for s in result.skipped] == [
        (169, "Throughput is empty"),
        (279, "Throughput 'OOM' is not a time in seconds like 129s"),
        (319, "Glob-BS is empty"),
    ]


def test_altered_cells_are_restored_and_exactly_those_rows_listed(tmp_path, seed_bytes):
    lines = seed_bytes.decode("utf-8").split("\n")
    # line 113 "| 129s | 52.8 |" (Megatron), 250 "| 89.0s | 35.3 |" (ZeRO), 298 "| 58.72s | 14.0 |" (HF)
    altered = list(lines)
    altered[112] = altered[112].replace("|   52.8 |", "|   99.9 |")
    altered[249] = altered[249].replace("|   35.3 |", "|    3.5 |")
    altered[297] = altered[297].replace("|   14.0 |", "|  140.0 |")
    assert sum(a != b for a, b in zip(altered, lines, strict=True)) == 3
    doc = tmp_path / "gpt2.md"
    doc.write_text("\n".join(altered), encoding="utf-8")
    result = update_tflops_file(doc)
    assert doc.read_bytes() == seed_bytes
    assert [(c.line, c.old, c.new) for c in result.changed] == [
        (113, "99.9", "52.8"),
        (250, "3.5", "35.3"),
        (298, "140.0", "14.0"),
    ]
    assert [round(c.delta, 1) for c in result.changed] == [-47.1, 31.8, -126.0]
    report = format_report(result, name="gpt2.md")
    assert report[0].startswith("gpt2.md:113: TFlops 99.9 -> 52.8 (-47.1)  |   64 | 52B  |")
    assert len(report) == 3


def test_dry_run_reports_but_does_not_write(tmp_path, seed_bytes):
    doc = tmp_path / "gpt2.md"
    altered = seed_bytes.replace(b"| 129s       |   52.8 |", b"| 129s       |   52.0 |")
    doc.write_bytes(altered)
    result = update_tflops_file(doc, dry_run=True)
    assert [c.line for c in result.changed] == [113]
    assert doc.read_bytes() == altered


TABLE = """Intro text | with a pipe.

| GPUs | Size | Glob-BS | Throughput | TFlops | Notes |
| ---: | ---: | ------: | ---------: | -----: | ----- |
|   64 | 52B  |    1024 | 129s       |    9.9 | a \\| b |
|   16 | 7.5B |       4 | 0.661s     |        | empty |
|      |      |         |            |        |       |
| 64   | 52B  | 1024    | 146s       | 1   | left-aligned, 0 decimals |
|   64 | 350M |    1024 | 1.5s       |    1.0 | millions |

| GPUs | Size | Throughput | TFlops |
| ---: | ---: | ---------: | -----: |
|   64 | 52B  | 129s       |    9.9 |
"""


def test_cells_keep_width_alignment_and_decimals():
    result = update_tflops_text(TABLE)
    lines = result.text.split("\n")
    # 52 * 8 * 1024 * 1024 / (129 * 64 * 1e3) = 52.835 -> wider than "9.9": the padding gives way
    assert lines[4] == "|   64 | 52B  |    1024 | 129s       |   52.8 | a \\| b |"
    # an empty cell is filled, right-aligned as the delimiter row says: 7.5*8*1024*4/(0.661*16e3) = 23.237
    assert lines[5] == "|   16 | 7.5B |       4 | 0.661s     |   23.2 | empty |"
    # left-aligned cell, the number of decimals of the old value: 52*8*1024*1024/(146*64e3) = 46.68 -> 47
    assert lines[7] == "| 64   | 52B  | 1024    | 146s       | 47  | left-aligned, 0 decimals |"
    # 0.35 * 8 * 1024 * 1024 / (1.5 * 64e3) = 30.58
    assert lines[8] == "|   64 | 350M |    1024 | 1.5s       |   30.6 | millions |"
    # a table without Glob-BS is not a TFlops table: untouched
    assert lines[12] == "|   64 | 52B  | 129s       |    9.9 |"
    assert [c.line for c in result.changed] == [5, 6, 8, 9]
    assert result.changed[1].delta is None and result.changed[1].old == ""


def test_crlf_and_non_utf8_bytes_are_kept(tmp_path):
    doc = tmp_path / "t.md"
    body = TABLE.replace("\n", "\r\n").encode() + b"caf\xe9 latin-1 byte\r\n"
    doc.write_bytes(body)
    update_tflops_file(doc)
    out = doc.read_bytes()
    assert out.endswith(b"caf\xe9 latin-1 byte\r\n")
    assert b"|   52.8 | a \\| b |\r\n" in out
    assert out.count(b"\r\n") == body.count(b"\r\n")
    assert len(re.findall(rb"\r\n", out)) == len(out.split(b"\n")) - 1  # no bare \n appeared


def test_write_is_atomic_keeps_mode_and_follows_symlinks(tmp_path):
    target = tmp_path / "real.md"
    target.write_text(TABLE)
    target.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    update_tflops_file(link)
    assert link.is_symlink()
    assert "|   52.8 |" in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "real.md"]  # no temp file left


def test_factor_3_without_checkpointing():
    result = update_tflops_text(TABLE, checkpointing=False)
    # 52 * 3 * 2 * 1024 * 1024 / (129 * 64 * 1e3) = 39.63
    assert "|   39.6 | a \\| b |" in result.text


TFLOPS_ROW = re.compile(r"^(\| +\d+ +\| +[\d.]+B.*\| +[\d.]+s +\| +)([\d.]+)( .*)$")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_set_of_altered_cells_is_restored_and_exactly_listed(seed_bytes, data):
    lines = seed_bytes.decode("utf-8").split("\n")
    rows = [i for i, line in enumerate(lines) if TFLOPS_ROW.match(line)]
    assert len(rows) == 61  # the seed's rows with a TFlops value (64 read, 3 of them unreadable)
    picked = data.draw(st.lists(st.sampled_from(rows), min_size=1, max_size=8, unique=True))
    altered = list(lines)
    for i in picked:
        head, old, tail = TFLOPS_ROW.match(lines[i]).groups()
        # no wider than the old value: a wider cell would move the padding, which the restore keeps
        widest = 10 ** (len(old) - 2) - 0.1
        value = data.draw(st.floats(min_value=0, max_value=widest).map(lambda v: f"{v:.1f}"))
        value = value if len(value) <= len(old) else old
        # another value as wide: 9.2 + 1 would be wider, so it wraps round to 0.2
        value = value if value != old else f"{(float(old) + 1) % (widest + 0.1):.1f}"
        left_aligned = tail.startswith("  ")  # "| 46.7   |": an editor types over it from the left
        altered[i] = head + (value.ljust(len(old)) if left_aligned else value.rjust(len(old))) + tail
    result = update_tflops_text("\n".join(altered))
    assert result.text == "\n".join(lines)
    assert sorted(c.line for c in result.changed) == sorted(i + 1 for i in picked)


def test_tables_in_fenced_code_blocks_are_text():
    fenced = "```\n" + TABLE + "```\n\n~~~~\n" + TABLE + "~~~~\n"
    result = update_tflops_text(fenced + TABLE)
    assert result.text.startswith(fenced)
    assert result.tables == 1 and [c.line for c in result.changed] == [
        n + fenced.count("\n") for n in (5, 6, 8, 9)
    ]


def _generated(columns=None, **overrides) -> str:
    """The markdown ``logstat table`` prints for one 16-GPU run of seq 2048 (a Megatron-LM H100 log's facts)."""
    import polars as pl
    from logstat.analytics.tables import render_tables
    from logstat.parsers.schema import RUNS_SCHEMA, SUMMARY_SCHEMA

    size_b, sec = 6.66, 4.66
    run = {
        "path": "/logs/megatron_lm_h100-2001.out",
        "family": "megatron",
        "status": "ok",
        "gpus": 16,
        "dp": 2,
        "pp": 2,
        "gas": 64,
        "micro_batch_size": 2,
        "global_batch_size": 256,
        "seq_len": 2048,
        "activation_checkpointing": True,
        "model_size_b": size_b,
        "sec_per_iter": sec,
        "sec_per_iter_source": "median of 4 logged step times after the first 1",
        # 6.66 * 8 * 2048 * 256 / (4.66 * 16e3) = 374.66
        "tflops_per_gpu": size_b * 8 * 2048 * 256 / (sec * 16e3),
        **overrides,
    }
    return render_tables(pl.DataFrame([run], schema={**RUNS_SCHEMA, **SUMMARY_SCHEMA}), columns=columns)


def test_a_generated_table_comes_back_unchanged_and_rows_it_cannot_reproduce_are_reported():
    text = _generated()
    assert "| 6.7B |" in text and "|  374.7 |" in text
    result = update_tflops_text(text)
    assert result.text == text and result.changed == []
    # the rounded cells give 6.7 * 8 * 2048 * 256 / (4.66 * 16e3) = 376.90, not the run's 374.66
    [skipped] = result.skipped
    assert skipped.line == 5
    assert "376.9 (seq 2048, factor 4)" in skipped.reason and "regenerate" in skipped.reason


def test_a_generated_table_without_its_seq_column_is_never_recomputed_with_seq_1024():
    # the user's own --columns, no Seq: the seed's seq 1024 would halve the run's TFlops (188.5)
    text = _generated(columns=("GPUs", "Size", "Glob-BS", "Throughput", "TFlops", "Notes"))
    assert "Seq" not in text and "|  374.7 |" in text
    result = update_tflops_text(text)
    assert result.text == text and result.changed == []
    [skipped] = result.skipped
    assert "the rounded cells give 188.5 (seq 1024, factor 4)" in skipped.reason


def test_seq_and_ckpt_columns_a_copied_table_shows_are_read_per_row():
    generated = _generated(
        activation_checkpointing=False, tflops_per_gpu=6.66 * 6 * 2048 * 256 / (4.66 * 16e3)
    )
    header = generated.split("\n")[2]
    assert [c.strip() for c in header.split("|")[1:-1]] == [
        "GPUs",
        "Size",
        "DP",
        "PP",
        "PP Chunks",
        "Mic-BS",
        "Glob-BS",
        "Seq",
        "Ckpt",
        "Throughput",
        "TFlops",
        "Notes",
    ]
    # pasted into a hand-kept document without the legend: a table like the seed's, recomputed
    # from its cells, with the row's own seq 2048 and factor 3: 6.7*3*2*2048*256/(4.66*16e3) = 282.68
    pasted = "\n".join(generated.split("\n")[:5]) + "\n"
    result = update_tflops_text(pasted)
    assert [(c.old, c.new) for c in result.changed] == [("281.0", "282.7")]

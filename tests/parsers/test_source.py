"""The line source: gzip by magic bytes, binary/empty/truncated files, prefixes, glued records, the prefilter."""

import gzip

from logstat.parsers.source import SourceReport, marked_lines, marker_needles, records, strip_prefixes


def lines_of(path, markers=None, wants_all=lambda: False):
    report = SourceReport(path=str(path))
    return list(marked_lines(path, marker_needles(markers or []), wants_all, report)), report


def test_prefixes_of_every_launcher_are_stripped():
    assert strip_prefixes("12: iteration 3") == "iteration 3"
    assert strip_prefixes(" 0:  iteration 3") == " iteration 3"
    assert strip_prefixes("[default3]:iteration 3") == "iteration 3"
    assert strip_prefixes("10.0.0.2: iteration 3") == "iteration 3"
    assert strip_prefixes("localhost: iteration 3") == "iteration 3"
    assert strip_prefixes("[rank7]:iteration 3") == "iteration 3"
    assert strip_prefixes("r7i4n1: iteration 3") == "iteration 3"
    assert strip_prefixes("localhost: [default1]:x") == "x"


def test_ordinary_text_is_not_taken_for_a_prefix():
    for text in ("WARNING: could not find", "Error: x", "time (ms) | forward: 1", "Config: alpha=0.1"):
        assert strip_prefixes(text) == text


def test_glued_ranks_are_split_into_records():
    glued = (
        "[default0]:iteration 1 | a: 1 |[default3]:[Rank 3] (after 1 iterations) memory (MB) | allocated: 2"
    )
    assert records(glued) == [
        "iteration 1 | a: 1 |",
        "[Rank 3] (after 1 iterations) memory (MB) | allocated: 2",
    ]
    assert records("step 1\rstep 2") == ["step 1", "step 2"]
    assert records("   ") == []


def test_prefilter_yields_only_marked_lines_with_their_physical_numbers(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("noise\nthe iteration 1\nnoise\nnoise\nan iteration 2\nlast")
    got, report = lines_of(path, ["iteration"])
    assert got == [(2, "the iteration 1"), (5, "an iteration 2")]
    assert report.problem is None


def test_all_lines_while_a_family_wants_them(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("a\nSTART\nb\nc\nEND\nd\n")
    state = {"open": False}
    out = []
    report = SourceReport(path=str(path))
    for lineno, text in marked_lines(path, (b"START", b"END"), lambda: state["open"], report):
        out.append((lineno, text))
        if text in ("START", "END"):
            state["open"] = text == "START"
    assert out == [(2, "START"), (3, "b"), (4, "c"), (5, "END")]


def test_line_numbers_hold_across_chunks(tmp_path, monkeypatch):
    from logstat.parsers import source

    monkeypatch.setattr(source, "CHUNK_BYTES", 7)
    path = tmp_path / "a.log"
    path.write_text("".join(f"line {i} {'X' if i % 10 == 0 else ''}\n" for i in range(1, 101)))
    got, _ = lines_of(path, ["X"])
    assert [n for n, _ in got] == list(range(10, 101, 10))


def test_gzip_is_read_by_content_not_name(tmp_path):
    path = tmp_path / "job-1.out.gz"
    path.write_bytes(gzip.compress(b"a\nmarker here\n"))
    got, report = lines_of(path, ["marker"])
    assert got == [(2, "marker here")] and report.compressed


def test_truncated_gzip_keeps_what_was_read_and_says_why(tmp_path):
    body = "".join(f"marker {i}\n" for i in range(5000)).encode()
    data = gzip.compress(body)
    path = tmp_path / "cut.log.gz"
    path.write_bytes(data[: len(data) // 2])
    got, report = lines_of(path, ["marker"])
    assert 0 < len(got) < 5000
    assert got[0] == (1, "marker 0")
    assert "truncated" in report.problem


def test_binary_file_yields_nothing(tmp_path):
    path = tmp_path / "model.out"
    path.write_bytes(bytes(range(256)) * 4)
    got, report = lines_of(path, ["a"])
    assert got == [] and "binary" in report.problem


def test_undecodable_bytes_do_not_crash(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"iteration \xff\xfe 1\n")
    got, _ = lines_of(path, ["iteration"])
    assert got == [(1, "iteration \ufffd\ufffd 1")]

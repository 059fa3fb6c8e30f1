"""The line source: gzip by magic bytes, binary/empty/truncated files, prefixes, glued records, the prefilter."""

import gzip

import pytest
from hypothesis import given
from logstat.parsers.source import SourceReport, marked_lines, marker_needles, records, strip_prefixes

from tests.conftest import FIXTURES
from tests.parsers.random_text import joined


@pytest.fixture(autouse=True)
def polars_searches_every_chunk(monkeypatch):
    """These tests hold polars' search to the Python cutter on small files: polars must search them
    (outside these tests a chunk under PYTHON_SEARCH_BYTES is searched with re, see SEARCH_WAYS)."""
    from logstat.parsers import source

    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 0)


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


#: how a chunk is searched: polars' line frame; the Python cutter on polars' marker search (chunks
#: polars' reader cannot split); the Python cutter on re's marker search (small chunks)
SEARCH_WAYS = {
    "polars": {"PYTHON_SEARCH_BYTES": 0},
    "python cutter": {"PYTHON_SEARCH_BYTES": 0, "frame_readable": lambda chunk: False},
    "re": {"PYTHON_SEARCH_BYTES": 1 << 62},
}


def _every_way(monkeypatch, read):
    """``read()`` with each of SEARCH_WAYS in place, by name."""
    from logstat.parsers import source

    out = {}
    for way, settings in SEARCH_WAYS.items():
        with monkeypatch.context() as patch:
            for name, value in settings.items():
                patch.setattr(source, name, value)
            out[way] = read()
    return out


def _records_every_way(path, needles, routes, wants_all, monkeypatch):
    """``routed_lines`` of every way of SEARCH_WAYS (records and the report's line count), polars' first."""
    from logstat.parsers import source

    def read():
        report = SourceReport(path=str(path))
        lines = [
            (n, records(text), mask)
            for n, text, mask in source.routed_lines(path, needles, routes, wants_all, report)
        ]
        return lines, report.lines

    return list(_every_way(monkeypatch, read).values())


TRICKY = (
    b"start MARK\r\n"  # CRLF
    b"\n\n"  # empty lines count
    b"bad utf-8 \xff\xe2\x82 MARK\n"
    b"ansi \x1b[32mMA\x1b[0mRK\x1b[0m\n"  # colour codes, one inside the marker: read without them
    b'quoted "MARK, x" ; # MARK\n'  # CSV quoting and comments mean nothing here
    b"progress 1%\rprogress 2% OTHER\r\n"
    b"[default0]:MARK 1[default1]:OTHER 2\n"
    b"last MARK"  # no newline at the end
)


def source_frame_readable(chunk: bytes) -> bool:
    from logstat.parsers import source

    return source.frame_readable(chunk)


def test_polars_line_frames_equal_the_python_line_cutter(tmp_path, monkeypatch):
    path = tmp_path / "tricky.log"
    path.write_bytes(TRICKY)
    assert source_frame_readable(TRICKY)
    routes = ((b"MARK",), (b"OTHER",))
    frame_path, *python_paths = _records_every_way(
        path, (b"MARK", b"OTHER"), routes, lambda: False, monkeypatch
    )
    assert python_paths == [frame_path] * 2
    lines, count = frame_path
    assert [n for n, _, _ in lines] == [1, 4, 5, 6, 7, 8, 9] and count == 9
    assert lines[0] == (1, ["start MARK"], 1)
    assert lines[2] == (5, ["ansi MARK"], 1)
    assert lines[4] == (7, ["progress 1%", "progress 2% OTHER"], 2)
    # one separator byte sends its chunk to the Python cutter, with the same result
    path.write_bytes(TRICKY.replace(b"bad utf-8", b"unit\x1fsep"))
    frame_path, *python_paths = _records_every_way(path, (b"MARK",), routes, lambda: False, monkeypatch)
    assert python_paths == [frame_path] * 2 and len(frame_path[0]) == 6
    # polars' reader drops a byte-order mark at the start: such a chunk is cut in Python, which keeps it
    path.write_bytes(b"\xef\xbb\xbf" + TRICKY)
    assert not source_frame_readable(path.read_bytes())
    frame_path, *python_paths = _records_every_way(path, (b"MARK",), routes, lambda: False, monkeypatch)
    assert python_paths == [frame_path] * 2 and frame_path[0][0] == (1, ["\ufeffstart MARK"], 1)


def test_polars_line_frames_give_every_line_while_a_block_is_open(tmp_path, monkeypatch):
    from logstat.parsers import source

    monkeypatch.setattr(source, "CHUNK_BYTES", 64)  # the open block crosses chunks and capture windows
    monkeypatch.setattr(source, "CAPTURE_WINDOW", 3)
    path = tmp_path / "block.log"
    path.write_bytes(
        b"noise\nOPEN\n" + b"".join(b"in %d\n" % i for i in range(40)) + b"\nCLOSE\nnoise MARK\n" + TRICKY
    )
    state = {"open": False}

    def wants_all() -> bool:
        return state["open"]

    def read():
        seen = []
        report = SourceReport(path=str(path))
        for n, text, mask in source.routed_lines(
            path, (b"OPEN", b"CLOSE", b"MARK"), ((b"MARK",),), wants_all, report
        ):
            seen.append((n, text.rstrip("\r"), mask))
            if text in ("OPEN", "CLOSE"):
                state["open"] = text == "OPEN"
        return seen, report.lines

    results = list(_every_way(monkeypatch, read).values())
    assert results[1:] == [results[0]] * 2
    seen = results[0][0]
    assert [n for n, _, _ in seen[:43]] == list(range(2, 45))  # OPEN, 40 lines, an empty one, CLOSE
    assert seen[41] == (43, "", 0) and seen[42] == (44, "CLOSE", 0) and seen[43] == (45, "noise MARK", 1)


def test_small_chunks_are_searched_by_re_with_polars_result(monkeypatch):
    """routed_starts by re (chunks under PYTHON_SEARCH_BYTES) equals polars' on real log chunks cut
    anywhere: the same marked lines, the same route masks."""
    from logstat.parsers import registry, source

    families = list(registry.families())
    needles = source.marker_needles([m for family in families for m in family.markers])
    routes = tuple(source.marker_needles(list(family.markers)) or () for family in families)
    checked = marked = 0
    logs = sorted(path for path in FIXTURES.rglob("*") if path.suffix in (".out", ".err", ".log"))
    for path in logs:
        data = path.read_bytes()
        for start in range(0, min(len(data), 200_000), 3_000):
            chunk = data[start : start + 7_000]
            by_re = source._routed_starts_by_re(chunk, needles, routes)
            assert by_re == source.routed_starts(chunk, needles, routes)  # polars: the autouse fixture
            checked += 1
            marked += len(by_re[0])
    assert checked > 100 and marked > 1000
    monkeypatch.setattr(source, "PYTHON_SEARCH_BYTES", 8 << 10)
    assert source.search_chunk(b"MARK\n", (b"MARK",), ()) is None  # small: cut and searched in Python


PREFIX_PIECES = [
    "12: ", "0: ", "123456: ", "[default3]:", "[rank7]:", "[default]:", "10.0.0.2: ", "1.2.3: ",
    "localhost: ", "node12: ", "r7i4n1.cluster: ", "Node1: ", "node: ", " ", "\t", "\x0c", "\x1c",
    "\r", "\x1b[0m", "é", "\u3000", "iteration 3 | a: 1 |", "x", ":", "]", "[", "1", "a", "-", ".",
]  # fmt: skip


def _single_record_by_polars(texts: list[str]) -> list[str | None]:
    import polars as pl
    from logstat.parsers.source import single_record

    frame = pl.DataFrame({"line": texts}, schema={"line": pl.String})
    return frame.select(single_record(pl.col("line"))).to_series().to_list()


@given(joined(PREFIX_PIECES, max_size=8))
def test_single_record_by_polars_equals_records(text):
    (single,) = _single_record_by_polars([text])
    if single is not None:
        assert records(text) == ([single] if single else [])


def test_single_record_by_polars_takes_the_common_lines():
    texts = [
        "12: iteration 3", "[default3]:x | y", "  ", "localhost: 10.0.0.2: z", "plain", "a\rb", "é 1: x",
        "[rank1]:0: x", "[default3]:x[default4]:y", "a [default3]:x", "[default3]:x]: y", " [default3]:x",
    ]  # fmt: skip
    assert _single_record_by_polars(texts) == [
        "iteration 3", "x | y", "", "z", "plain", None, None,  # CR; non-ASCII
        "x", None, None, None, None,  # a "]:" after the first character may glue ranks
    ]  # fmt: skip
    real = [
        line
        for path in sorted(FIXTURES.rglob("*.out"))
        for line in path.read_text(errors="replace").splitlines()
    ]
    singles = _single_record_by_polars(real)
    assert sum(single is not None for single in singles) > 0.9 * len(real)
    assert all(
        records(text) == ([s] if s else []) for text, s in zip(real, singles, strict=True) if s is not None
    )


def test_an_open_block_can_ask_for_only_the_lines_it_reads(tmp_path, monkeypatch):
    """While a block wants the lines matching a regex, only those, the marked lines and lines with
    colour codes (whose removal may join a match) are delivered; the Python cutter delivers every line
    (more lines are always safe), and True still means every line."""
    from logstat.parsers import source

    monkeypatch.setattr(source, "CHUNK_BYTES", 64)
    monkeypatch.setattr(source, "CAPTURE_WINDOW", 2)
    body = (
        ["noise", "OPEN"] + [f"arg_{i} ..... {i}" for i in range(30)] + ["k\x1b[0mept", "CLOSE", "kept after"]
    )
    body[10] = body[20] = "kept ..... 1"
    path = tmp_path / "block.log"
    path.write_text("\n".join(body) + "\n")
    delivered = {}
    for wanted_open in ("kept", True):
        for readable in (source.frame_readable, lambda chunk: False):
            state = {"open": False}
            with monkeypatch.context() as patch:
                patch.setattr(source, "frame_readable", readable)
                seen = []
                for n, text in marked_lines(
                    path, (b"OPEN", b"CLOSE"), lambda state=state: state["open"], SourceReport(path="x")
                ):
                    seen.append(n)
                    if text in ("OPEN", "CLOSE"):
                        state["open"] = wanted_open if text == "OPEN" else False
            delivered[wanted_open, readable is source.frame_readable] = seen
    every_line_of_the_block = list(range(2, 35))
    assert delivered["kept", True] == [2, 11, 21, 33, 34]  # OPEN, the two kept lines, colour codes, CLOSE
    assert delivered["kept", False] == every_line_of_the_block
    assert delivered[True, True] == delivered[True, False] == every_line_of_the_block


def test_declared_block_patterns_are_searched_ahead_with_the_same_result(tmp_path, monkeypatch):
    """A regex the families declare is searched with each chunk (in the read-ahead thread); the rows
    it gives are those an undeclared regex finds when first asked for."""
    from logstat.parsers import source

    monkeypatch.setattr(source, "CHUNK_BYTES", 256)
    path = tmp_path / "block.log"
    body = ["OPEN"] + [f"{'kept' if i % 7 == 0 else 'arg'}_{i} ..... {i}" for i in range(60)] + ["CLOSE", "x"]
    path.write_text("\n".join(body) + "\n")
    seen = {}
    for patterns in ((), ("kept",), ("other", "kept")):
        state = {"open": False}
        lines = []
        for n, text, _, _, _ in source.routed_records(
            path,
            (b"OPEN", b"CLOSE"),
            (),
            lambda state=state: state["open"],
            SourceReport(path="x"),
            patterns=patterns,
        ):
            lines.append(n)
            if text in ("OPEN", "CLOSE"):
                state["open"] = "kept" if text == "OPEN" else False
        seen[patterns] = lines
    assert (
        seen[()]
        == seen[("kept",)]
        == seen[("other", "kept")]
        == [1] + [i + 2 for i in range(0, 60, 7)] + [62]
    )


EDGE_FILES = [
    b"\n", b"\n\n\n", b" ", b"\r\n", b"\r", b"x", b"MARK", b"\n\nMARK", b"MARK\r\r\n", b"a\x00MARK\n",
    b'"MARK\n"x\n', b"\xff\xfeMARK\n", b"MARK\r", b"\rMARK\n", b"MARK\nlast unmarked", b"MARK\n\n",
]  # fmt: skip


@pytest.mark.parametrize("content", EDGE_FILES)
def test_tiny_and_odd_files_read_the_same_both_ways(tmp_path, monkeypatch, content):
    """Records, masks and the line count (an unterminated last line counts only if it was read) are
    the same on polars' line frames and on the Python cutter."""
    path = tmp_path / "edge.log"
    path.write_bytes(content)
    frame_path, *python_paths = _records_every_way(
        path, (b"MARK",), ((b"MARK",),), lambda: False, monkeypatch
    )
    assert python_paths == [frame_path] * 2

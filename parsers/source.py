"""Raw log bytes -> numbered lines, streamed: plain or compressed files, launcher prefixes stripped.

The hot path never hands Python a line that carries no marker: each chunk of bytes (about 4 MiB) is
split into lines and decoded by polars' CSV reader (one field per line), searched for every family's
markers at once (one regex alternation of the literals) and routed to the families whose markers a line holds,
all in polars; Python sees only the marked lines. A family that has a multi-line block open (an
arguments dump, a traceback) asks for every line for a while; those lines are fetched from the chunk's
frame. A chunk the CSV reader cannot split exactly (it holds the separator byte, or starts with a BOM)
is cut line by line in Python, as is every chunk on the reference path (no markers).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import closing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NamedTuple

import polars as pl
from logstat.parsers.base import CaptureLines
from logstat.parsers.kinds import RecordKind, kind_index, order_key

CHUNK_BYTES = 4 << 20
#: a chunk smaller than this is searched with re, not polars: a polars query has a fixed cost (1.3 to
#: 3 ms a chunk) that re's search of a short .err file's lines, or of the last line of a file cut
#: before its newline (a chunk of its own), stays well under; at 16 KiB the two cost the same
PYTHON_SEARCH_BYTES = 8 << 10
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
# "BZh" is plain text: bzip2 also needs its block size digit and a block (or end-of-stream) magic.
BZIP2_MAGIC = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")

# Prefixes launchers put before each line of a rank: `srun --label` ("12: "), torchrun/ accelerate
# tags ("[default3]:"), pdsh/DeepSpeed's multi-node runner ("10.0.0.2: ", "localhost: ", "node12: ")
# and torchrun's local-rank filter ("[rank7]:"). Several may be stacked.
_BRACKET_TAG = r"\[(?:default|rank)\d+\]:"


def _leading_prefix(space: str, digit: str) -> str:
    """The stacked launcher prefixes at the start of a line, as a pattern over the given classes."""
    return (
        rf"^(?:{space}*(?:\[(?:default|rank){digit}+\]:|{digit}{{1,5}}: |(?:{digit}{{1,3}}\.){{3}}{digit}{{1,3}}: "
        rf"|localhost: |[a-z][a-z0-9-]*{digit}[a-z0-9-]*(?:\.[a-z0-9.-]+)?: ))+"
    )


_LEADING_PREFIX = re.compile(_leading_prefix(r"\s", r"\d"))
# The same pattern for polars' (Rust) regex engine over ASCII lines, with the classes Python's
# ``\s`` and ``\d`` have there; Rust's leftmost-first matching finds what Python's backtracking finds.
_ASCII_LEADING_PREFIX = _leading_prefix(r"[\t\n\x0b\x0c\r\x1c-\x1f ]", "[0-9]")
_ASCII_FIRST_TAG = r"^\[(?:default|rank)[0-9]+\]:"  # _BRACKET_TAG at the start of an ASCII line
_ASCII_WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes from ASCII text
# Bracketed tags are unambiguous, so a line holding several of them is several ranks' records glued
# (also after trailing spaces: DeepSpeed pads values, "samples/second:   475.07  [default3]:...").
_GLUED_TAG = re.compile(r"(?<=.)(?=" + _BRACKET_TAG + ")")
# Escape sequences (ECMA-48) that coloured loggers, rich and progress bars write: CSI (colours, cursor
# moves), OSC up to its terminator (rich's file hyperlinks, window titles) and the short ones (``ESC ( B``
# of ``tput sgr0``, ``ESC 7``). rich colours the parts of a record, so a code can sit inside a marker
# (``\x1b[33mstep\x1b[0m=``, ``time \x1b[1m(\x1b[0mms``): chunks are read without them.
_ESCAPE = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[ -/]*[0-~])"
_ANSI = re.compile(_ESCAPE)
_ANSI_BYTES = re.compile(_ESCAPE.encode())


@dataclass
class SourceReport:
    """What reading a file found out about the file itself (not about the training run)."""

    path: str
    bytes_read: int = 0
    lines: int = 0
    problem: str | None = None
    """Why (part of) the file could not be read: binary content, a truncated gzip stream, ..."""
    compressed: bool = False


def without_escapes(chunk: bytes) -> bytes:
    """``chunk`` without its escape sequences (colour codes), so that the marker search, which looks at
    the raw bytes, finds a marker a colour code cut in two. A chunk without ESC is returned as it is: one
    byte search, no copy. No sequence holds a newline: line numbers stay."""
    return _ANSI_BYTES.sub(b"", chunk) if b"\x1b" in chunk else chunk


def strip_prefixes(text: str) -> str:
    """Drop the launcher prefixes at the start of ``text``."""
    match = _LEADING_PREFIX.match(text)
    return text[match.end() :] if match else text


def records(text: str) -> list[str]:
    """Split one physical line into the records of the ranks glued in it, prefixes stripped.

    Carriage returns (progress bars) separate records too; ANSI colour codes are dropped.
    """
    if "\x1b" not in text and "\r" not in text and "]:" not in text:
        # the common line, one record: the loop below without its splitting
        match = _LEADING_PREFIX.match(text)
        record = (text[match.end() :] if match else text).rstrip("\n")
        return [record] if record.strip() else []
    out: list[str] = []
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    for piece in text.split("\r"):
        for record in _GLUED_TAG.split(piece) if "]:" in piece else (piece,):
            record = strip_prefixes(record).rstrip("\n")
            if record.strip():
                out.append(record)
    return out


def single_record(line: pl.Expr) -> pl.Expr:
    """``records(line)`` computed by polars where a line is one record: the record (prefixes
    stripped), ``""`` when the line holds none, null when Python must split it (colour codes, carriage
    returns, a ``]:`` that may glue ranks, non-ASCII text). A line that opens with a bracketed tag
    holding the line's only ``]:`` (torchrun's ``--tee``, every line of such a log) glues nothing:
    ``_GLUED_TAG`` splits only before a tag after the first character."""
    separators = line.str.count_matches("]:", literal=True)
    simple = ~line.str.contains(r"[^\x00-\x0c\x0e-\x1a\x1c-\x7f]") & (
        (separators == 0) | ((separators == 1) & line.str.contains(_ASCII_FIRST_TAG))
    )
    record = line.str.replace(_ASCII_LEADING_PREFIX, "")
    blank = record.str.strip_chars(_ASCII_WHITESPACE) == ""
    return pl.when(simple).then(pl.when(blank).then(pl.lit("")).otherwise(record))


def open_log(path: Path):
    """Open ``path`` for binary reading; gzip, xz and bzip2 (archived logs) are recognised by their
    magic bytes, not their name."""
    with open(path, "rb") as probe:
        magic = probe.read(10)
    if magic.startswith(GZIP_MAGIC):
        return gzip.open(path, "rb"), True
    if magic.startswith(XZ_MAGIC):
        return lzma.open(path, "rb"), True
    if BZIP2_MAGIC.match(magic):
        return bz2.open(path, "rb"), True
    return open(path, "rb"), False


def _read_block(stream, report: SourceReport, carry: bytes) -> bytes:
    """``carry`` and about CHUNK_BYTES (decompressed) bytes after it, joined in one copy; ``carry``
    alone at the end. ``read1`` hands out what was decompressed so far, so a truncated gzip stream
    still yields everything before the cut. Counts the new bytes in ``report``."""
    parts: list[bytes] = [carry]
    size = 0
    while size < CHUNK_BYTES:
        try:
            part = stream.read1(CHUNK_BYTES - size)
        except (EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
            kind = {"LZMAFile": "xz", "BZ2File": "bzip2"}.get(type(stream).__name__, "gzip")
            report.problem = f"{kind} stream truncated or corrupt ({exc})"
            break
        if not part:
            break
        parts.append(part)
        size += len(part)
    report.bytes_read += size
    return b"".join(parts)


def _chunks(stream, report: SourceReport) -> Iterator[bytes]:
    """Chunks that end at a line boundary (the last one may not), counting bytes; never raises."""
    carry = b""
    while True:
        block = carry if report.problem else _read_block(stream, report, carry)
        if len(block) == len(carry):  # nothing new: the end
            if carry:
                yield carry
            return
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            carry = block
            continue
        carry, chunk = block[cut:], block[:cut]
        del block  # a copy is out: the block need not live on while the chunk is parsed
        yield chunk
        del chunk  # nor the chunk while the next one is read


#: share of control characters and invalid UTF-8 above which a head holding NUL bytes is binary.
BINARY_NOISE_SHARE = 0.1
_NOISE = re.compile("[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f\ufffd]")


def is_binary(head: bytes) -> bool:
    """A binary file (checkpoint, image, archive) holds NUL bytes among much other non-text. A text
    log may hold NUL bytes too, a block of them where a crashed node's last writes were lost on a
    shared file system, and stays text around them: its lines are still read."""
    if b"\x00" not in head:
        return False
    text = head.replace(b"\x00", b"").decode("utf-8", errors="replace")
    return not text.strip() or len(_NOISE.findall(text)) > BINARY_NOISE_SHARE * len(text)


def routed_starts(
    chunk: bytes, needles: tuple[bytes, ...], routes: tuple[tuple[bytes, ...], ...]
) -> tuple[list[int], list[int]]:
    """``(starts, masks)``: the sorted start offsets of the lines of ``chunk`` holding any of
    ``needles`` and, per such line, a bit mask whose bit ``i`` says the line holds one of ``routes[i]``
    (one family's markers), so the reader tries only the families a line names. polars' regex engine
    searches all needles in one pass (``_needle_pattern``); the per-route searches run on the marked
    lines only. Latin-1 gives one character per byte, so character offsets are byte offsets and the
    (ASCII) needles match exactly where they match the bytes. A small chunk is searched with re."""
    if len(chunk) < PYTHON_SEARCH_BYTES:
        return _routed_starts_by_re(chunk, needles, routes)
    lines = pl.Series(chunk.decode("latin-1").split("\n"), dtype=pl.String)
    lengths = lines.str.len_chars() + 1
    frame = pl.DataFrame({"start": lengths.cum_sum() - lengths, "line": lines}).filter(
        pl.col("line").str.contains(_needle_pattern(needles))
    )
    bits = [
        pl.col("line").str.contains(_needle_pattern(route)).cast(pl.Int64) * (1 << index)
        for index, route in enumerate(routes)
        if route
    ]
    if not bits:
        return frame["start"].to_list(), []
    masks = frame.select(pl.sum_horizontal(bits).alias("mask"))["mask"]
    return frame["start"].to_list(), masks.to_list()


def _routed_starts_by_re(
    chunk: bytes, needles: tuple[bytes, ...], routes: tuple[tuple[bytes, ...], ...]
) -> tuple[list[int], list[int]]:
    """``routed_starts`` of a small chunk, a line at a time with re on the bytes (the same lines:
    the needles are ASCII, as in polars' search of the latin-1 text)."""
    has_needle = _bytes_search(needles)
    route_searches = [(_bytes_search(route), 1 << index) for index, route in enumerate(routes) if route]
    starts: list[int] = []
    masks: list[int] = []
    start = 0
    for line in chunk.split(b"\n"):
        if has_needle(line):
            starts.append(start)
            masks.append(sum(bit for search, bit in route_searches if search(line)))
        start += len(line) + 1
    return starts, masks if route_searches else []


@cache
def _bytes_search(needles: tuple[bytes, ...]) -> Callable[[bytes], re.Match[bytes] | None]:
    return re.compile(b"|".join(re.escape(needle) for needle in needles)).search


@cache
def _needle_pattern(needles: tuple[bytes, ...]) -> str:
    """One regex alternation of the literal ``needles``: a line matches it iff it holds one of them.
    polars caches the compiled regex (Rust's engine searches the literals with SIMD), where
    ``contains_any`` builds its Aho-Corasick automaton anew on every call: ~0.5 ms, per chunk and
    route, more than the search of a small file itself."""
    return "|".join(re.escape(needle.decode("latin-1")) for needle in needles)


def marked_lines(
    path: Path,
    needles: tuple[bytes, ...] | None,
    wanted: Callable[[], bool | str],
    report: SourceReport,
) -> Iterator[tuple[int, str]]:
    """Yield ``(lineno, text)`` of the lines of ``path`` that contain one of ``needles`` (all lines
    if it is None), plus, while ``wanted()`` asks for them, every line (True) or the lines matching a
    regex (a str; lines with colour codes too, whose removal can join what the regex looks for). Line
    numbers are 1-based physical lines of the (decompressed) file. Binary files yield nothing and say
    so in ``report.problem``."""
    for lineno, text, _ in routed_lines(path, needles, (), wanted, report):
        yield lineno, text


#: the mask ``routed_lines`` gives a line it did not search per route: every route may match.
ALL_ROUTES = -1


def routed_lines(
    path: Path,
    needles: tuple[bytes, ...] | None,
    routes: tuple[tuple[bytes, ...], ...],
    wanted: Callable[[], bool | str],
    report: SourceReport,
) -> Iterator[tuple[int, str, int]]:
    """``marked_lines`` plus, per line, the bit mask of ``routes`` it holds (see ``routed_starts``; 0 for
    an unmarked line read because ``wanted()`` asked for it); ``ALL_ROUTES`` when ``needles`` is None (no byte
    scan), and for a line with colour codes (removing them can join a marker the raw bytes do not hold).
    Where polars split the line's one record off (``routed_records``' single), the mask is the record's:
    a marker in a launcher prefix routes nothing."""
    for lineno, text, mask, _, _ in routed_records(path, needles, routes, wanted, report):
        yield lineno, text, mask


def routed_records(
    path: Path,
    needles: tuple[bytes, ...] | None,
    routes: tuple[tuple[bytes, ...], ...],
    wanted: Callable[[], bool | str],
    report: SourceReport,
    *,
    patterns: tuple[str, ...] = (),
    kinds: tuple[RecordKind, ...] = (),
    kind_bits: tuple[int, ...] = (),
    kind_records: list[pl.DataFrame] | None = None,
    file_index: int = 0,
) -> Iterator[tuple[int, str, int, str | None, bool]]:
    """``routed_lines`` plus the line's ``single_record`` where polars found it (None: split the line
    with ``records``) and whether polars took that record as one of ``kinds``: such a record goes to
    ``kind_records`` (frames of ``order``, ``text``, ``kind``; ordered as the ``file_index``-th file of
    the run), and its line is delivered only while ``wanted()`` asks for more lines, with the route bit
    of the kind's family (``kind_bits``) cleared. ``patterns``: the regexes ``wanted()`` may return,
    searched with each chunk."""
    stream, report.compressed = open_log(path)
    # a file of one chunk has nothing to read ahead: handing work to a thread would only cost
    ahead = report.compressed or file_size(path) > CHUNK_BYTES
    # the escape sequences go in the reading thread, before the search (map is lazy: it runs there too)
    plain_chunks = map(without_escapes, _chunks(stream, report))
    searched_chunks = _searched_ahead(
        plain_chunks, needles, routes, patterns, (kinds, kind_bits), ahead=ahead
    )
    # closing: the read-ahead thread is done with the stream before the stream is closed
    with stream, closing(searched_chunks) as chunks:
        lineno = 0  # lines before the chunk: its newlines, plus an unterminated last line if it was read
        first = True
        for chunk, searched in chunks:
            if first and is_binary(chunk):
                report.problem = "binary content (NUL bytes): not a text log"
                return
            first = False
            if searched is not None:
                if kind_records is not None and searched.kind_records.height:
                    shift = order_key(file_index, lineno)
                    kind_records.append(searched.kind_records.with_columns(pl.col("order") + shift))
                lineno = yield from _frame_chunk_lines(chunk, searched, lineno, any(routes), wanted)
            else:
                lineno = yield from _chunk_lines(chunk, lineno, needles, routes, wanted)
            report.lines = lineno
            # let go of this chunk before asking for the next: the reading thread is already reading
            # the one after it, and a third chunk held here would raise the peak by CHUNK_BYTES
            del chunk, searched


def frame_readable(chunk: bytes) -> bool:
    """Whether polars' CSV reader splits ``chunk`` into exactly its lines: no byte of it is the
    reader's field separator, and it does not start with a byte-order mark (which the reader drops)."""
    return bool(chunk) and LINE_SEPARATOR not in chunk and not chunk.startswith(UTF8_BOM)


#: a byte that is not text (ASCII "unit separator"): the CSV reader's field separator, so a line is one field.
LINE_SEPARATOR = b"\x1f"
UTF8_BOM = b"\xef\xbb\xbf"
#: lines fetched at once while a family reads every line (an open block is usually short).
CAPTURE_WINDOW = 256


class WantedRows(NamedTuple):
    """The rows of a chunk an open block wants (``SearchedChunk.wanted``)."""

    delivered: list[int]
    """The rows matching its regex, or holding colour codes, but ``collapsed``."""
    collapsed: list[int] = []
    """The rows a ``CaptureLines`` lets go: each matches ``collapse`` and so does the next row of the
    regex (in the chunk), so that row overwrites what it would set. Where a marked row that is not one
    of the regex's comes between, the reader hands over the collapsed row before it after all."""


@dataclass(frozen=True)
class SearchedChunk:
    """A chunk's lines as polars split them, and its marked lines: 0-based rows, texts, route masks."""

    lines: pl.Series
    rows: list[int]
    texts: list[str]
    masks: list[int]
    singles: list[str | None]
    """``single_record`` of each marked line."""
    wanted: dict[str | CaptureLines, WantedRows]
    """Per regex an open block may want: the rows matching it, or holding colour codes (whose removal
    may join a match). Filled ahead for the families' declared patterns, else when first asked for."""
    taken: list[bool]
    """Per marked line: polars read its record as a record kind."""
    kind_rows: list[int]
    """Rows of records polars read as a record kind that no other family's marker routes to Python:
    delivered only while a block is open (it may end there)."""
    kind_records: pl.DataFrame
    """The kinds' records (``order``: ``order_key`` of file 0, line ``row + 1``; ``text``; ``kind``)."""


def file_size(path: os.PathLike) -> int:
    """The size of ``path`` in bytes; 0 if it cannot be read (the reader reports that file in its run's row)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _searched_ahead(
    chunks: Iterator[bytes],
    needles: tuple[bytes, ...] | None,
    routes: tuple[tuple[bytes, ...], ...],
    patterns: tuple[str, ...],
    kinds: tuple[tuple[RecordKind, ...], tuple[int, ...]],
    *,
    ahead: bool,
) -> Iterator[tuple[bytes, SearchedChunk | None]]:
    """Each chunk with its ``SearchedChunk`` (None: cut it in Python). With ``ahead``, the next chunk
    is read and searched in a thread while the caller's families parse this one: file reads,
    decompression and polars release the GIL, so on two cores that work mostly hides behind the parsing.
    The block ``patterns`` are searched with every chunk: one pass of them all joined, then each on the
    few candidate lines, costs less than searching a chunk again each time a block opens in it."""
    if needles is None:
        yield from ((chunk, None) for chunk in chunks)
        return

    def read_and_search() -> tuple[bytes, SearchedChunk | None] | None:
        chunk = next(chunks, None)
        return None if chunk is None else (chunk, search_chunk(chunk, needles, routes, patterns, kinds))

    if not ahead:
        while (item := read_and_search()) is not None:
            yield item
        return
    pending = _read_ahead_pool().submit(read_and_search)
    try:
        while (item := pending.result()) is not None:
            pending = _read_ahead_pool().submit(read_and_search)
            yield item
            del item  # not held while waiting for the next: the reader is done with it
    finally:
        wait([pending])  # the thread must be done with the stream before the caller closes it


@cache
def _read_ahead_pool() -> ThreadPoolExecutor:
    """One reading thread for the process (starting a thread per file costs more than a small file's
    parse). Like polars' own thread pool it does not survive a fork: logstat's workers are spawned."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="logstat-read-ahead")


def search_chunk(
    chunk: bytes,
    needles: tuple[bytes, ...],
    routes: tuple[tuple[bytes, ...], ...],
    patterns: tuple[str, ...] = (),
    kinds: tuple[tuple[RecordKind, ...], tuple[int, ...]] = ((), ()),
) -> SearchedChunk | None:
    """The marked lines of ``chunk`` found by polars, the rows each of ``patterns`` wants, and the
    records of ``kinds`` (the kinds and their families' route bits); None if polars cannot
    split the chunk exactly, or the chunk is small enough for re (``PYTHON_SEARCH_BYTES``)."""
    if len(chunk) < PYTHON_SEARCH_BYTES or not frame_readable(chunk):
        return None
    try:
        lines = _line_frame(chunk)
    except pl.exceptions.PolarsError:
        return None  # whatever the CSV reader refuses, the Python cutter reads
    record_kinds, kind_bits = kinds
    queries = [_marked_query(lines.lazy(), needles, routes, record_kinds, kind_bits)]
    if patterns:
        queries.append(_wanted_query(lines.lazy(), patterns))
    # one call runs both (in parallel): each call to polars has a fixed cost a small file feels
    marked, *found = pl.collect_all(queries)
    of_kinds = marked.filter(pl.col("kind") >= 0)
    records = of_kinds.select(
        order=(pl.col("n").cast(pl.Int64) + 1) * order_key(0, 1), text="single", kind="kind"
    )
    python = marked.filter((pl.col("kind") < 0) | (pl.col("mask") != 0))
    return SearchedChunk(
        lines=lines["line"],
        rows=python["n"].to_list(),
        texts=python["line"].to_list(),
        masks=python["mask"].to_list(),
        singles=python["single"].to_list(),
        wanted=_rows_per_pattern(found[0], patterns) if found else {},
        taken=(python["kind"] >= 0).to_list(),
        kind_rows=of_kinds.filter(pl.col("mask") == 0)["n"].to_list(),
        kind_records=records,
    )


def _line_frame(chunk: bytes) -> pl.DataFrame:
    """The lines of ``chunk``, one row each with its 0-based index ``n``, split and decoded by polars'
    CSV reader (multi-threaded, no Python object per line). Invalid UTF-8 is replaced as
    ``bytes.decode(errors="replace")`` does; an empty line is null; a CR before LF is dropped."""
    return pl.read_csv(
        chunk,
        has_header=False,
        separator=LINE_SEPARATOR.decode(),
        quote_char=None,
        schema={"line": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
        row_index_name="n",
    )


def _frame_chunk_lines(
    chunk: bytes, searched: SearchedChunk, lineno: int, routed: bool, wanted: Callable[[], bool | str]
) -> Iterator[tuple[int, str, int, str | None, bool]]:
    """``_chunk_lines`` of a chunk polars searched, with each line's ``single_record`` and whether polars
    read it as a record kind: Python sees only the marked lines it must read, and the lines an open block
    wants (``wanted``, see ``marked_lines``; the kinds' lines among them). ``routed``: the masks say which
    routes a line holds. Returns the line count after the chunk."""
    rows, texts, masks, singles, taken = (
        searched.rows,
        searched.texts,
        searched.masks,
        searched.singles,
        searched.taken,
    )
    kind_rows = searched.kind_rows
    total, count, kind_count = len(searched.lines), len(rows), len(kind_rows)
    window_start, window = 0, []
    pos = index = kind_index = last_read = (
        0  # next line to look at; first marked (kind) row at or after it; lines read
    )
    while True:
        while index < count and rows[index] < pos:
            index += 1
        next_marked = rows[index] if index < count else total
        want = wanted()
        if want:  # an open block may end at a kind's line: those are delivered too
            while kind_index < kind_count and kind_rows[kind_index] < pos:
                kind_index += 1
            next_kind = kind_rows[kind_index] if kind_index < kind_count else total
        else:
            next_kind = total
        if want is True:
            pos = min(pos, next_marked, next_kind)
        elif want:
            rows_wanted = searched.wanted.get(want)
            if rows_wanted is None:  # a regex no family declared: searched now, once per chunk
                rows_wanted = searched.wanted[want] = _wanted_rows(searched.lines, (want,))[want]
            matching = rows_wanted.delivered
            at = bisect_left(matching, pos)
            # a kind's row delivered while a block is open is read like a marked row
            next_read = min(next_marked, next_kind)
            following = min(matching[at] if at < len(matching) else total, next_read)
            if rows_wanted.collapsed and following == next_read < total:  # a marked row is next
                following = _uncollapsed(rows_wanted, pos, next_read)
            pos = following
        else:
            pos = next_marked
        if pos >= total:
            break
        if pos == next_marked:
            text, mask, single, kind = texts[index], masks[index], singles[index], taken[index]
        elif pos == next_kind:
            text = searched.lines[pos]
            text, mask, single, kind = text, 0, single_record_of(text), True
        else:
            if not window_start <= pos < window_start + len(window):
                window_start = pos
                window = searched.lines.slice(pos, CAPTURE_WINDOW).to_list()
            # an unmarked line: Python splits it (a polars query per window costs more than it saves)
            text, single, kind = window[pos - window_start] or "", None, False
            mask = 0 if routed and "\x1b" not in text else ALL_ROUTES
        yield lineno + pos + 1, text, mask, single, kind
        pos += 1
        last_read = pos
    # the line count holds an unterminated last line only if it was read (as the Python cutter counts)
    unterminated_read = not chunk.endswith(b"\n") and last_read == total
    return lineno + chunk.count(b"\n") + unterminated_read


def single_record_of(line: str) -> str:
    """The one record of a line polars split off as one (``single_record``), prefixes stripped."""
    return strip_prefixes(line).rstrip("\n")


def _uncollapsed(rows_wanted: WantedRows, pos: int, marked: int) -> int:
    """The row to hand over next, from ``pos`` on, when it would be the ``marked`` row: the last
    collapsed row before it, if the marked row is not one of the regex's rows. A collapsed row counts
    on the next row of the regex to overwrite what it sets; a marked row between them (a launcher's
    kill, another family's record) may read it first."""
    collapsed = rows_wanted.collapsed
    before = bisect_left(collapsed, marked) - 1
    if before < 0 or collapsed[before] < pos:
        return marked
    # one of the regex's rows is delivered or collapsed itself: then it is the row the collapsed row
    # counted on (any row of the regex in between would have been handed over before)
    if _holds(rows_wanted.delivered, marked) or _holds(collapsed, marked):
        return marked
    return collapsed[before]


def _holds(rows: list[int], row: int) -> bool:
    """Whether the sorted ``rows`` hold ``row``."""
    at = bisect_left(rows, row)
    return at < len(rows) and rows[at] == row


def _wanted_rows(
    lines: pl.Series, patterns: tuple[str | CaptureLines, ...]
) -> dict[str | CaptureLines, WantedRows]:
    """Per regex of ``patterns``: the rows of ``lines`` matching it or holding colour codes."""
    if not patterns:
        return {}
    return _rows_per_pattern(
        _wanted_query(lines.to_frame("line").with_row_index("n").lazy(), patterns).collect(), patterns
    )


def _wanted_query(lines: pl.LazyFrame, patterns: tuple[str | CaptureLines, ...]) -> pl.LazyFrame:
    """One row: per regex of ``patterns`` (column ``"0"``, ``"1"``, ...) the list of rows ``n`` of
    ``lines`` matching it or holding colour codes, but those a ``CaptureLines`` collapses (column
    ``"0 collapsed"``, ...). One pass of all the regexes joined picks the candidate lines; each regex
    then runs on those only."""
    candidates, wanted, collapsing, per_pattern = _wanted_exprs(patterns)
    # a column per step: polars runs the record's expressions once, where one select of them all
    # cost as much as the whole search of the regexes again
    return lines.filter(candidates).with_columns(wanted).with_columns(collapsing).select(per_pattern)


@cache
def _wanted_exprs(
    patterns: tuple[str | CaptureLines, ...],
) -> tuple[pl.Expr, list[pl.Expr], list[pl.Expr], list[pl.Expr]]:
    """``_wanted_query``'s expressions, built once per set of patterns (building them costs more than
    running them on a small file): the candidate lines; for each ``CaptureLines``, the lines it wants
    and, of those, the ones whose record matches its ``collapse``; the result's columns."""
    line = pl.col("line")
    colour = line.str.contains("\x1b", literal=True)
    regexes = [_regex(pattern) for pattern in patterns]
    candidates = line.str.contains("|".join(f"(?:{regex})" for regex in regexes)) | colour
    wanted, collapsing, per_pattern = [], [], []
    for index, (pattern, regex) in enumerate(zip(patterns, regexes, strict=True)):
        if isinstance(pattern, str):
            per_pattern.append(
                pl.col("n").filter(line.str.contains(regex) | colour).implode().alias(str(index))
            )
            continue
        wanted_name, collapsing_name = f"{index} wanted", f"{index} collapsing"
        wanted.append((line.str.contains(regex) | colour).alias(wanted_name))
        # a line polars does not split into one record (colour codes among others) is never collapsed
        record_matches = single_record(line).str.contains(pattern.collapse).fill_null(False)
        collapsing.append((pl.col(wanted_name) & record_matches).alias(collapsing_name))
        # of the wanted rows, those followed by another one whose record matches: it overwrites them
        matching = pl.col(collapsing_name).filter(pl.col(wanted_name))
        collapsed = matching & matching.shift(-1, fill_value=False)
        rows = pl.col("n").filter(pl.col(wanted_name))
        per_pattern.append(rows.filter(~collapsed).implode().alias(str(index)))
        per_pattern.append(rows.filter(collapsed).implode().alias(f"{index} collapsed"))
    return candidates, wanted, collapsing, per_pattern


def _regex(pattern: str | CaptureLines) -> str:
    """The regex of the lines a pattern wants."""
    return pattern if isinstance(pattern, str) else pattern.regex


def _rows_per_pattern(
    found: pl.DataFrame, patterns: tuple[str | CaptureLines, ...]
) -> dict[str | CaptureLines, WantedRows]:
    """``_wanted_query``'s one row as pattern -> rows."""
    row = found.row(0, named=True)
    return {
        pattern: WantedRows(row[str(index)], row.get(f"{index} collapsed", []))
        for index, pattern in enumerate(patterns)
    }


def _marked_query(
    lines: pl.LazyFrame,
    needles: tuple[bytes, ...],
    routes: tuple[tuple[bytes, ...], ...],
    kinds: tuple[RecordKind, ...] = (),
    kind_bits: tuple[int, ...] = (),
) -> pl.LazyFrame:
    """The rows of ``lines`` holding one of ``needles``, with their route ``mask`` (``routed_starts``),
    their ``single_record`` and the index of the record ``kind`` of that record (-1: none; a line
    Python must split is none here). A kind's record is no longer routed to its family."""
    marked, single, columns = _marked_exprs(needles, routes)
    frame = lines.filter(marked).with_columns(single).select(columns)
    if not kinds:
        return frame.with_columns(kind=pl.lit(-1, dtype=pl.Int32))
    kind = kind_index(kinds, pl.col("single")).fill_null(-1)
    own_bit = pl.lit(0, dtype=pl.Int64)
    for index in reversed(range(len(kinds))):
        own_bit = (
            pl.when(pl.col("kind") == index).then(pl.lit(kind_bits[index], dtype=pl.Int64)).otherwise(own_bit)
        )
    # a colour-coded line is routed to every family (ALL_ROUTES): polars did not split it, so no kind
    return frame.with_columns(
        kind=pl.when(pl.col("mask") == ALL_ROUTES).then(-1).otherwise(kind)
    ).with_columns(
        mask=pl.when(pl.col("kind") >= 0).then(pl.col("mask") & ~own_bit).otherwise(pl.col("mask"))
    )


@cache
def _marked_exprs(
    needles: tuple[bytes, ...], routes: tuple[tuple[bytes, ...], ...]
) -> tuple[pl.Expr, pl.Expr, list[pl.Expr | str]]:
    """``_marked_query``'s expressions, built once per set of markers: the marked lines, their
    record, and the columns of the result."""
    line = pl.col("line")
    # the routes of the record itself where polars split it off (the reader then needs no search of
    # its own: a launcher prefix holding a marker routes nothing), else of the line
    routed = pl.coalesce(pl.col("single"), line)
    bits = [
        routed.str.contains(_needle_pattern(route)).cast(pl.Int64) * (1 << index)
        for index, route in enumerate(routes)
        if route
    ]
    mask = pl.sum_horizontal(bits) if bits else pl.lit(ALL_ROUTES, dtype=pl.Int64)
    columns = [
        "n",
        "line",
        pl.when(line.str.contains("\x1b", literal=True)).then(ALL_ROUTES).otherwise(mask).alias("mask"),
        "single",
    ]
    return line.str.contains(_needle_pattern(needles)), single_record(line).alias("single"), columns


def _chunk_lines(
    chunk: bytes,
    lineno: int,
    needles: tuple[bytes, ...] | None,
    routes: tuple[tuple[bytes, ...], ...],
    wanted: Callable[[], bool | str],
) -> Iterator[tuple[int, str, int, None, bool]]:
    """The (marked) lines of one chunk, cut and decoded one by one in Python: the reference path, and
    the path of chunks polars' reader cannot split exactly. Returns the line count after the chunk."""
    starts, masks = routed_starts(chunk, needles, routes) if needles is not None else ([], [])
    index, pos, size = 0, 0, len(chunk)
    while pos < size:
        mask = ALL_ROUTES
        if needles is None:
            start = pos
        elif wanted():  # a regex of wanted lines counts as all: more lines are always safe
            start = pos
            if any(routes):  # the line's routes are known too: its own mask if marked, else none
                while index < len(starts) and starts[index] < pos:
                    index += 1
                mask = masks[index] if index < len(starts) and starts[index] == pos else 0
        else:
            while index < len(starts) and starts[index] < pos:
                index += 1
            if index == len(starts):
                break
            start = starts[index]
            if masks:
                mask = masks[index]
            lineno += chunk.count(b"\n", pos, start)
        end = chunk.find(b"\n", start)
        end = size if end < 0 else end
        lineno += 1
        text = chunk[start:end].decode("utf-8", errors="replace")
        yield lineno, text, ALL_ROUTES if "\x1b" in text else mask, None, False
        pos = end + 1
    if pos < size:
        lineno += chunk.count(b"\n", pos, size)
    return lineno


def marker_needles(markers: list[str]) -> tuple[bytes, ...] | None:
    """The distinct ``markers`` as bytes; None when there are none (then every line is read)."""
    unique = tuple(dict.fromkeys(m.encode() for m in markers if m))
    return unique or None

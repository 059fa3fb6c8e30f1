"""Raw log bytes -> numbered lines, as one polars frame per batch of about ``BATCH_BYTES``.

Files are read in chunks of whole lines; the chunks of as many runs' files as fit make a batch that
polars' CSV reader splits and decodes at once (no Python object per line, a few hundred polars calls for
a thousand small files). Each line of a batch knows its run, its file and its 1-based line number there.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import lzma
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

import polars as pl
from logstat.parsers.kinds import FILE_SHIFT, LINE_SHIFT

CHUNK_BYTES = 16 << 20
#: a batch is read once this many bytes are gathered (the chunks of small files share one): a batch in
#: flight holds ~5x its bytes, and three are (one being prepared, one ahead, one read)
BATCH_BYTES = 24 << 20
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
# "BZh" is plain text: bzip2 also needs its block size digit and a block (or end-of-stream) magic.
BZIP2_MAGIC = re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)")
#: compressed files Python's standard library does not read (zstd, lz4 frames, zip): reported, not read
#: as text (a small one may hold no NUL byte, and would be read as garbled lines)
UNREADABLE_MAGIC = {b"\x28\xb5\x2f\xfd": "zstd", b"\x04\x22\x4d\x18": "lz4", b"PK\x03\x04": "zip"}
#: archives by name (tar however compressed, zip): a walk lists a row for one that holds logs, not read
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".zip")
#: a tar archive's header names its format at byte 257 (POSIX's ``ustar\0``, GNU's ``ustar  ``)
TAR_MAGIC_AT, TAR_MAGIC = 257, b"ustar"
#: how far into a tar its members' names are looked for (they are spread through it, between the files)
ARCHIVE_SCAN_BYTES = 64 << 20
# Escape sequences (ECMA-48) of coloured loggers and progress bars: CSI (colours, cursor moves), OSC up
# to its terminator (rich's hyperlinks, window titles), the short ones (``ESC ( B``, ``ESC 7``). rich
# colours a record's parts, so a code can sit inside a marker (``\x1b[33mstep\x1b[0m=``): dropped first.
# No sequence holds a newline: lines stay.
ESCAPE = r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\)|[ -/]*[0-~])"


def path_text(path: str | os.PathLike) -> str:
    """A file's name as text for the frames: as written, or, where the name's bytes are no UTF-8 (a name
    Python holds with surrogates, which polars refuses), those bytes as ``\\xff`` escapes."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


@dataclass
class SourceReport:
    """What reading a file found out about the file itself (not about the training run)."""

    path: str
    bytes_read: int = 0
    lines: int = 0
    written: bool = False
    """Whether a line holds more than whitespace."""
    problem: str | None = None
    """Why (part of) the file could not be read: binary content, a truncated gzip stream, ..."""
    compressed: bool = False
    hole: str | None = None
    """Where text was lost inside the file (NUL bytes in its place): read around, a warning."""


@dataclass(frozen=True)
class Piece:
    """Whole lines of one file, a batch's unit: ``run`` and ``file`` (indexes), ``first_line`` (lines of
    the file before it), ``data``, of which ``data[:end]`` are its ``lines`` lines (the last may lack its
    newline, at its file's end); what follows is part of a line the next piece holds whole."""

    run: int
    file: int
    first_line: int
    data: bytes
    end: int
    lines: int
    holed: bool = False
    """Whether its lines hold NUL bytes (a hole: ``_around_holes``)."""

    @property
    def parts(self) -> list[bytes | memoryview]:
        """Its whole lines for a batch's join, the last one newline-terminated: a view of ``data`` (and a
        newline), so that the join is the only copy."""
        lines = memoryview(self.data)[: self.end]
        return [lines] if not lines or lines[-1] == 10 else [lines, b"\n"]


@dataclass
class Batch:
    """A batch's lines: ``lines`` (``row``, ``text``: null for an empty line) and, per piece, the first row
    and what its rows are (``pieces``: ``row``, ``run``, ``file``, ``first_line``); ``located`` turns rows
    into runs and orders."""

    lines: pl.DataFrame
    pieces: pl.DataFrame
    separator: str = "\x1f"
    """A character no line holds, for splitting records (private-use if it holds every candidate)."""
    files: list[tuple[int, int]] = field(default_factory=list)
    """``(run, file)`` of each file the batch reads, in reading order."""
    continues: int | None = None
    """The run whose last file goes on in the next batch."""

    def located(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        """``frame`` (with ``row``) with each row's ``run`` and ``order`` (its line's ``kinds.order_key``)."""
        line = pl.col("first_line") + pl.col("row") - pl.col("start") + 1
        return (
            frame.join_asof(
                self.pieces.lazy().rename({"row": "start"}),
                left_on="row",
                right_on="start",
                check_sortedness=False,
            )
            .with_columns(order=pl.col("file") * (1 << FILE_SHIFT) + line * (1 << LINE_SHIFT))
            .drop("start", "file", "first_line")
        )


def _decompressor(magic: bytes):
    """The ``open`` of a file's compression (gzip, xz, bzip2) or UTF-16 encoding by its first bytes
    (``magic``); None if plain UTF-8."""
    if magic.startswith(GZIP_MAGIC):
        return gzip.open
    if magic.startswith(XZ_MAGIC):
        return lzma.open
    if magic.startswith(UTF16_BOMS):
        return Utf16Stream
    return bz2.open if BZIP2_MAGIC.match(magic) else None


#: a UTF-16 file's byte order marks (Windows PowerShell 5's ``>`` and ``Out-File`` write UTF-16LE with one)
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class Utf16Stream:
    """A UTF-16 file read as UTF-8, as a decompressor's stream is (``read1``): the BOM names the byte
    order and is dropped; a pair of bytes that is no character is U+FFFD."""

    def __init__(self, path: os.PathLike, mode: str = "rb") -> None:
        self._raw = open(path, mode)  # noqa: SIM115 - closed by __exit__, as gzip.open's file is
        self._decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")

    def read1(self, size: int) -> bytes:
        """UTF-8 of the next ``size`` bytes or more (none: the end)."""
        while data := self._raw.read(size):
            if text := self._decoder.decode(data):
                return text.encode("utf-8", "surrogatepass")
        return self._decoder.decode(b"", final=True).encode("utf-8", "surrogatepass")

    def __enter__(self) -> Utf16Stream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._raw.close()


def file_size(path: os.PathLike) -> int:
    """The size of ``path`` in bytes; 0 if unreadable (the reader reports that file in its run's row)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _read_block(stream, report: SourceReport, carry: bytes) -> bytes:
    """``carry`` and about CHUNK_BYTES decompressed bytes after it (none at the end), counted in ``report``.
    ``read1`` hands out what was decompressed so far: a truncated stream yields all before the cut."""
    parts: list[bytes] = [carry]
    size = 0
    while size < CHUNK_BYTES:
        try:
            part = stream.read1(CHUNK_BYTES - size)
        except (EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
            kind = {"LZMAFile": "xz", "BZ2File": "bzip2", "Utf16Stream": "UTF-16"}.get(
                type(stream).__name__, "gzip"
            )
            report.problem = f"{kind} stream truncated or corrupt ({exc})"
            break
        if not part:
            break
        parts.append(part)
        size += len(part)
    report.bytes_read += size
    return b"".join(parts)


def _chunks(stream, report: SourceReport) -> Iterator[tuple[bytes, int]]:
    """The chunks of a decompressed ``stream``, as ``_plain_chunks``'s, counting bytes; never raises."""
    carry = b""
    while True:
        block = carry if report.problem else _read_block(stream, report, carry)
        if len(block) == len(carry):  # nothing new: the end
            if carry:
                yield carry, len(carry)
            return
        end = block.rfind(b"\n") + 1
        if end:
            yield block, end
        carry = block[end:]


#: share of control characters and invalid UTF-8 above which a head holding NUL bytes is binary.
BINARY_NOISE_SHARE = 0.1
#: the characters a line of text has at least, for ``is_binary``: a binary's few newlines cut short lines;
#: and the share of a head's characters such lines make in a text log at least (a binary's: ~none; a small
#: log with a 4 KiB block of garbage: ~45%)
CLEAN_LINE, TEXT_SHARE = 20, 0.25
_NOISE = re.compile("[\x01-\x08\x0e-\x1a\x1c-\x1f\x7f\ufffd]")


def is_binary(head: bytes) -> bool:
    """A binary file (checkpoint, image, archive) holds NUL bytes among much other non-text; a text log
    may hold a block of NULs too (a crashed node's writes lost on a shared file system), or of garbage,
    text around it: ``TEXT_SHARE`` of it at least is lines of text (``CLEAN_LINE`` characters and more, no
    noise)."""
    if b"\x00" not in head:
        return False
    text = head.replace(b"\x00", b"").decode("utf-8", errors="replace")
    if not text.strip():
        return True
    if len(_NOISE.findall(text)) <= BINARY_NOISE_SHARE * len(text):
        return False
    lines = text.split("\n")
    clean = sum(len(line) for line in lines if len(line) >= CLEAN_LINE and not _NOISE.search(line))
    return clean < len(text) * TEXT_SHARE


#: the bytes read to tell a file's format: a magic number, a zip's first entry's name, a tar header's magic
_MAGIC_BYTES = 512


def head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a log, decompressed; none of one that cannot be read."""
    try:
        with open(path, "rb") as probe:
            magic = probe.read(_MAGIC_BYTES)
        data = bytearray()
        with (_decompressor(magic) or open)(path, "rb") as stream:
            while len(data) < size and (more := stream.read1(size - len(data))):
                data += more
        return bytes(data)
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return b""


def _unreadable_problem(compression: str, magic: bytes, path: Path) -> str:
    """What a file in a format Python's standard library does not read is: torch.save's zip (its first
    entry ``<name>/data.pkl``, a local file header's name at byte 30) is a checkpoint, not a log; another
    zip an archive."""
    name_length = int.from_bytes(magic[26:28], "little")
    if compression == "zip" and magic[30 : 30 + name_length].endswith(b"data.pkl"):
        return "a PyTorch checkpoint (torch.save), not a log"
    if compression == "zip":
        return archive_problem("zip", path)
    return f"{compression}-compressed: logstat does not read it (decompress it first)"


def archive_members(path: Path) -> list[str] | None:
    """The names of the files in archive ``path`` (a zip's, or a tar's however compressed: those in its
    first ARCHIVE_SCAN_BYTES), None if it is no archive or cannot be listed."""
    import tarfile  # here: an archive is rare, the two modules cost a parse ~17 ms to import
    import zipfile

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                return [member.filename for member in archive.infolist() if not member.is_dir()]
        names = []
        with open(path, "rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as archive:
            for member in archive:
                names += [member.name] if member.isfile() else []
                if raw.tell() > ARCHIVE_SCAN_BYTES:
                    break
        return names
    except (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError, zlib.error):
        return None


def archive_problem(kind: str, path: Path) -> str:
    """A row's reason for an archive: the files it holds (the first few), and that it is not read."""
    names = archive_members(path) or []
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    holding = f" of {len(names)} file{'s' * (len(names) != 1)} ({shown})" if names else ""
    return f"a {kind} archive{holding}: logstat does not read archives (extract it first)"


def _file_chunks(path: Path, report: SourceReport) -> Iterator[tuple[bytes, int]]:
    """The chunks ``(data, end)`` of one file, as ``Piece``'s; none of a binary or unreadable file, whose
    ``report`` says why. A plain file is read straight into them (``os.pread``: one copy of each byte)."""
    try:
        with open(path, "rb") as probe:
            magic = probe.read(_MAGIC_BYTES)
        unreadable = next((name for start, name in UNREADABLE_MAGIC.items() if magic.startswith(start)), None)
        if unreadable is not None:
            report.problem = _unreadable_problem(unreadable, magic, path)
            return
        decompressor = _decompressor(magic)
        # a tar of text logs is text but for its headers: read, they would be garbled lines
        if (head(path, _MAGIC_BYTES) if decompressor else magic).startswith(TAR_MAGIC, TAR_MAGIC_AT):
            report.problem = archive_problem("tar", path)
            return
        if decompressor is None:
            yield from _unbinary(_plain_chunks(path, report), report)
            return
        report.compressed = True
        with decompressor(path, "rb") as stream:
            yield from _unbinary(_chunks(stream, report), report)
    except OSError as exc:
        report.problem = f"cannot read: {exc.strerror or exc}"


def _unbinary(chunks: Iterator[tuple[bytes, int]], report: SourceReport) -> Iterator[tuple[bytes, int]]:
    """``chunks``, unless the first is binary content (then none, and ``report`` says so)."""
    for number, (chunk, end) in enumerate(chunks):
        # searched in place first: a copy of a file's first chunk for every text log is ~1 GiB for 1,000 files
        if number == 0 and chunk.find(b"\x00", 0, end) >= 0 and is_binary(chunk[:end]):
            report.problem = "binary content (NUL bytes): not a text log"
            return
        yield chunk, end


def _plain_chunks(path: Path, report: SourceReport) -> Iterator[tuple[bytes, int]]:
    """Chunks of about CHUNK_BYTES of a plain file, each read straight into its ``bytes``: a chunk may
    end with part of a line, which the next one reads again whole."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        offset, size = 0, CHUNK_BYTES
        while chunk := os.pread(descriptor, size, offset):
            # the file goes on: the chunk ends at its last line's end (a longer line: read twice as much)
            end = len(chunk) if len(chunk) < size else chunk.rfind(b"\n") + 1
            size = CHUNK_BYTES if end else 2 * size
            if end:
                offset += end
                report.bytes_read = offset
                yield chunk, end
    finally:
        os.close(descriptor)


def batches(
    runs: Sequence[Sequence[Path]], reports: Sequence[list[SourceReport]], batch_bytes: int | None = None
) -> Iterator[list[Piece | tuple[int, int]]]:
    """The pieces of ``runs``' files in reading order in batches of about ``batch_bytes`` (BATCH_BYTES, read
    at the call: tests patch it) for ``frame_batch``, a ``(run, file)`` after a file's last piece;
    ``reports`` gets a ``SourceReport`` per file opened."""
    items: list[Piece | tuple[int, int]] = []
    size = 0
    for run, files in enumerate(runs):
        for file, path in enumerate(files):
            report = SourceReport(path=path_text(path))
            reports[run].append(report)
            lines = 0
            for data, end in _file_chunks(Path(path), report):
                if lines == 0 and data.startswith(BOM):  # no text: the line after it starts the file
                    data, end = data[len(BOM) :], end - len(BOM)
                    if not end:
                        continue
                if data[end - 1] != 10:  # the file's last chunk, its last line cut: its value may be short
                    data, end = _without_cut_value(data, end)
                if (hole := data.find(b"\x00", 0, end)) >= 0 and report.hole is None:
                    report.hole = _hole_note(data, hole, lines)
                report.written = report.written or _NOT_BLANK.search(data, 0, end) is not None
                count = data.count(b"\n", 0, end) + (data[end - 1] != 10)  # a chunk is never empty
                piece = Piece(
                    run=run, file=file, first_line=lines, data=data, end=end, lines=count, holed=hole >= 0
                )
                items.append(piece)
                lines += count
                report.lines = lines
                size += end
                if size >= (batch_bytes or BATCH_BYTES):
                    yield items
                    items, size = [], 0
            items.append((run, file))
    if items:
        yield items


#: a byte that Python's ``str.strip`` keeps
_NOT_BLANK = re.compile(rb"[^\s\x1c-\x1f]")
#: a number after ``=``, ``:``, ``[``, ``(``, ``,`` or ``/`` (its delimiter, kept: group 1) where a write was
#: cut, maybe inside the number (``CurrSamplesPerSec=6`` of ``=65.5``, a total's ``/ 1`` of ``/ 1000``)
_CUT_NUMBER = r"([=:\[(,/])[ \t]*[-+]?(?:[0-9]|\.[0-9])[0-9.eE+-]*"
#: such a number at the end of a file's last line that no newline ends: writers end their lines with one, so
#: the write was cut (a process killed with its buffer half flushed, a log copied while written)
_CUT_VALUE = re.compile(rf"{_CUT_NUMBER}\Z".encode())


def _without_cut_value(data: bytes, end: int) -> tuple[bytes, int]:
    """``data[:end]`` without a number its cut last line ends with (``_CUT_VALUE``), its delimiter kept."""
    cut = _CUT_VALUE.search(data, data.rfind(b"\n", 0, end) + 1, end)
    if cut is None:
        return data, end
    return data[: cut.start() + 1], cut.start() + 1


#: a run of NUL bytes in a text log is a hole: a crashed node's writes lost on a shared file system, the
#: file's size kept. The text before it was cut there (a number before it may be short: dropped, its
#: delimiter kept, as at a cut file's end) and the text after it is another write: a record break (\r)
_HOLE = "\x00+"
_CUT_BY_HOLE = rf"{_CUT_NUMBER}\x00+"
#: UTF-8's byte order mark, which some editors and Windows tools write at a file's start
BOM = b"\xef\xbb\xbf"


def _around_holes(text: pl.Series) -> pl.Series:
    """``text`` with each run of NUL bytes a record break (\r), a number cut by it dropped."""
    holed = text.str.contains("\x00", literal=True).arg_true()
    broken = text.gather(holed).str.replace_all(_CUT_BY_HOLE, "${1}\r").str.replace_all(_HOLE, "\r")
    return text.scatter(holed, broken)


def _hole_note(data: bytes, hole: int, first_line: int) -> str:
    """What a file's first hole (``data[hole]``, a NUL byte) is, with its line number."""
    line = first_line + data.count(b"\n", 0, hole) + 1
    return (
        f"NUL bytes in place of text from line {line} (writes lost: a node crashed while writing?); "
        "a line they cut keeps the text before them, a number cut by them dropped"
    )


def _plain(text: pl.Series) -> pl.Series:
    """``text`` with the colour codes of the few lines holding one dropped, before anything searches it."""
    coloured = text.str.contains("\x1b", literal=True).arg_true()
    plain = text.gather(coloured).str.replace_all(ESCAPE, "")
    return text.scatter(coloured, plain)


def frame_batch(items: list[Piece | tuple[int, int]]) -> Batch:
    """The lines of a batch's pieces in one frame, split and decoded by polars' CSV reader."""
    pieces = [item for item in items if isinstance(item, Piece)]
    starts = [0, *accumulate(piece.lines for piece in pieces[:-1])] if pieces else []
    table = pl.DataFrame(
        [
            (start, piece.run, piece.file, piece.first_line)
            for start, piece in zip(starts, pieces, strict=True)
        ],
        schema=PIECE_SCHEMA,
        orient="row",
    )
    files = list(dict.fromkeys((item.run, item.file) if isinstance(item, Piece) else item for item in items))
    last = items[-1]
    continues = last.run if isinstance(last, Piece) else None
    if not pieces:
        return Batch(lines=pl.DataFrame(schema=LINE_SCHEMA), pieces=table, files=files, continues=continues)
    # each batch's bytes start with an empty line, which _split drops (one copy of a batch's bytes)
    if len(pieces) == 1:  # read as it is: a piece of a line after its end is one row, dropped
        data, cut = b"\n" + pieces[0].data, pieces[0].end < len(pieces[0].data)
    else:
        data, cut = b"".join([b"\n", *(part for piece in pieces for part in piece.parts)]), False
    separator = _absent_character(data)
    text = _split(data, separator)
    if cut:
        text = text.head(text.len() - 1)
    if b"\x1b" in data:  # colour codes: dropped before anything searches the lines
        text = _plain(text)
    if any(piece.holed for piece in pieces):
        text = _around_holes(text)
    lines = text.to_frame("text").with_row_index("row").cast(LINE_SCHEMA)
    return Batch(lines=lines, pieces=table, separator=separator or "\ue000", files=files, continues=continues)


#: the columns of ``Batch.lines`` and ``Batch.pieces``
LINE_SCHEMA = {"row": pl.Int64, "text": pl.String}
PIECE_SCHEMA = {"row": pl.Int64, "run": pl.Int64, "file": pl.Int64, "first_line": pl.Int64}


def _absent_character(data: bytes) -> str | None:
    """A control character ``data`` does not hold: the CSV reader's field separator (so a line is one
    field) and the records' splitter; None if it holds them all."""
    return next((chr(code) for code in _SEPARATORS if bytes([code]) not in data), None)


#: the separators tried, in order: the ASCII separators, then other control characters logs do not hold
_SEPARATORS = (0x1F, 0x1E, 0x1D, 0x1C, *range(1, 9), *range(0x0E, 0x1B))


def _split(data: bytes, separator: str | None) -> pl.Series:
    """The lines of ``data`` after its first, empty, line, decoded as ``bytes.decode(errors="replace")``
    does; an empty line is null, a CR before the newline dropped (it would only end a record). The empty
    first line is for polars' CSV reader: it drops a leading BOM, and takes data whose first bytes look
    like a compressed stream's magic (``x^``, ``x\\x9c``: zlib) for one, and fails on it."""
    if separator is None:  # every candidate byte is in the batch: cut and decode in Python
        lines = data.decode("utf-8", "replace").split("\n")[1:]
        if lines[-1] == "":
            lines.pop()
        return pl.Series("text", [line.removesuffix("\r") or None for line in lines], dtype=pl.String)
    lines = pl.read_csv(
        data,
        has_header=False,
        separator=separator,
        quote_char=None,
        schema={"text": pl.String},
        encoding="utf8-lossy",
        truncate_ragged_lines=True,
    )["text"]
    return lines.slice(1)

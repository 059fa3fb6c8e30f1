"""Recompute the TFlops column of the markdown tables of an existing document, in place.

This is the seed's "secret formula" perl one-liner (seeds/001_gpt2_experiments_tables.md,
"Maintenance") made safe: every table whose header has GPUs, Size, Glob-BS, Throughput and TFlops
columns gets its TFlops cells recomputed from the row's own cells with the seed formula; every
other byte of the file is kept (a recomputed cell keeps its width, alignment and number of
decimals, so a document whose TFlops already follow the formula comes out byte-identical). Rows
whose cells cannot be read (e.g. "OOM") are left alone and reported, never dropped.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from logstat.analytics.formulas import seed_tflops_per_gpu

#: The seed tables' sequence length ("Seq length is 1024"), used when a table has no Seq column.
SEED_SEQ_LEN = 1024

#: header name (lower case, without spaces, dashes, underscores) -> the column it is.
_HEADER_ALIASES: dict[str, str] = {
    "gpus": "gpus",
    "size": "size",
    "globbs": "global_batch",
    "globalbs": "global_batch",
    "gbs": "global_batch",
    "throughput": "throughput",
    "tflops": "tflops",
    "seq": "seq_len",
    "seqlen": "seq_len",
}
REQUIRED_COLUMNS = ("gpus", "size", "global_batch", "throughput", "tflops")

_PIPE = re.compile(r"(?<!\\)\|")
_DELIMITER_ROW = re.compile(r"^\s*\|?(\s*:?-+:?\s*\|)+\s*(:?-+:?\s*)?$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_INT = re.compile(r"^\d+$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([MBT])$", re.IGNORECASE)
_SECONDS = re.compile(r"^(\d+(?:\.\d+)?)\s*s$")
_NUMBER = re.compile(r"^\d+(?:\.(\d+))?$")
_SIZE_UNIT_B = {"m": 1e-3, "b": 1.0, "t": 1e3}


@dataclass(frozen=True, kw_only=True)
class RowChange:
    """A TFlops cell that was rewritten."""

    line: int
    """1-based line number in the document."""
    row: str
    """The row as it was (without the line ending)."""
    old: str
    """The TFlops cell's old text, stripped ("" when it was empty)."""
    new: str
    """The recomputed TFlops text."""

    @property
    def delta(self) -> float | None:
        """new - old, None when the old cell was empty."""
        return float(self.new) - float(self.old) if self.old else None


@dataclass(frozen=True, kw_only=True)
class RowSkipped:
    """A row of a TFlops table whose cells could not be read; it was left exactly as it was."""

    line: int
    """1-based line number in the document."""
    row: str
    """The row (without the line ending)."""
    reason: str
    """Which cell and why, e.g. ``Throughput 'OOM' is not a time in seconds``."""


@dataclass(frozen=True, kw_only=True)
class UpdateResult:
    """The updated text and what happened to each row of the tables that were recomputed."""

    text: str
    """The whole document after the update."""
    tables: int
    """How many tables had the five columns."""
    rows: int
    """How many data rows of those tables were read (blank spacer rows not counted)."""
    changed: list[RowChange] = field(default_factory=list)
    skipped: list[RowSkipped] = field(default_factory=list)


def _column_key(header_cell: str) -> str | None:
    return _HEADER_ALIASES.get(re.sub(r"[\s\-_]", "", header_cell).lower())


def _is_table_line(line: str) -> bool:
    return line.lstrip(" ").startswith("|")


def _right_aligned(delimiter_cell: str) -> bool:
    return delimiter_cell.strip().endswith(":") and not delimiter_cell.strip().startswith(":")


def _read_row(cells: list[str], columns: dict[str, int]) -> tuple[dict[str, float], str | None]:
    """The numbers of a row, or the reason it cannot be read (naming the cell)."""

    def cell(key: str) -> str:
        index = columns[key]
        return cells[index].strip() if index < len(cells) else ""

    values: dict[str, float] = {}
    readers = (
        ("gpus", "GPUs", _INT, "is not a whole number of GPUs", lambda m: float(m.group(0))),
        ("size", "Size", _SIZE, "is not a size like 52B", lambda m: float(m[1]) * _SIZE_UNIT_B[m[2].lower()]),
        ("global_batch", "Glob-BS", _INT, "is not a whole batch size", lambda m: float(m.group(0))),
        ("throughput", "Throughput", _SECONDS, "is not a time in seconds like 129s", lambda m: float(m[1])),
    )
    if "seq_len" in columns:
        readers += (("seq_len", "Seq", _INT, "is not a whole sequence length", lambda m: float(m.group(0))),)
    for key, name, pattern, rule, convert in readers:
        text = cell(key)
        match = pattern.match(text)
        if match is None:
            return values, f"{name} {text!r} {rule}" if text else f"{name} is empty"
        values[key] = convert(match)
    if values["gpus"] == 0 or values["throughput"] == 0:
        return values, "GPUs and Throughput must not be 0"
    if not all(math.isfinite(value) for value in values.values()):
        return values, "a number in the row is too large to compute with"
    tflops = cell("tflops")
    if tflops and not _NUMBER.match(tflops):
        return values, f"TFlops {tflops!r} is not a number"
    return values, None


def _rewrite_cell(raw: str, new: str, *, right: bool) -> str:
    """``new`` in place of the cell's content, keeping the cell's width and alignment if it fits."""
    content = raw.strip()
    lead = len(raw) - len(raw.lstrip(" ")) if content else None
    trail = len(raw) - len(raw.rstrip(" ")) if content else None
    width = len(raw)
    if content:
        right = lead > trail or (lead == trail and right)
    if right:
        trail = 1 if trail is None else trail
        return " " * max(1, width - trail - len(new)) + new + " " * trail
    lead = 1 if lead is None else lead
    return " " * lead + new + " " * max(1, width - lead - len(new))


def _update_table(
    lines: list[str],
    header: int,
    end: int,
    checkpointing: bool,
    changed: list[RowChange],
    skipped: list[RowSkipped],
) -> int:
    """Recompute the TFlops cells of the table ``lines[header:end]``; returns rows read."""
    header_cells = _PIPE.split(lines[header])
    columns = {key: i for i, c in enumerate(header_cells) if (key := _column_key(c)) is not None}
    delimiter_cells = _PIPE.split(lines[header + 1])
    tflops_index = columns["tflops"]
    right = tflops_index < len(delimiter_cells) and _right_aligned(delimiter_cells[tflops_index])
    rows = 0
    for i in range(header + 2, end):
        line = lines[i].rstrip("\r")
        line_ending = lines[i][len(line) :]
        cells = _PIPE.split(line)
        if all(not c.strip() for c in cells):
            continue  # the seed's blank spacer rows
        rows += 1
        values, problem = _read_row(cells, columns)
        if problem is None and tflops_index >= len(cells):
            problem = "the row has no TFlops cell"
        if problem is not None:
            skipped.append(RowSkipped(line=i + 1, row=line, reason=problem))
            continue
        old = cells[tflops_index].strip()
        old_decimals = _NUMBER.match(old)
        decimals = len(old_decimals[1] or "") if old_decimals else 1
        tflops = seed_tflops_per_gpu(
            size_b=values["size"],
            seq_len=int(values.get("seq_len", SEED_SEQ_LEN)),
            global_batch=int(values["global_batch"]),
            sec_per_iter=values["throughput"],
            gpus=int(values["gpus"]),
            checkpointing=checkpointing,
        )
        new = f"{tflops:.{decimals}f}"
        if new == old:
            continue
        cells[tflops_index] = _rewrite_cell(cells[tflops_index], new, right=right)
        lines[i] = "|".join(cells) + line_ending
        changed.append(RowChange(line=i + 1, row=line, old=old, new=new))
    return rows


def update_tflops_text(text: str, *, checkpointing: bool = True) -> UpdateResult:
    """Recompute the TFlops cells of every table of ``text`` that has the five columns.

    ``checkpointing`` picks the seed formula's factor (4 with activation checkpointing, as the
    seed's tables use; 3 without).
    """
    lines = text.split("\n")
    changed: list[RowChange] = []
    skipped: list[RowSkipped] = []
    tables = rows = 0
    i = 0
    fence: str | None = None  # a table inside a fenced code block is text, not a table
    while i < len(lines) - 1:
        marker = _FENCE.match(lines[i])
        if marker and (fence is None or marker[1].startswith(fence)):
            fence = marker[1] if fence is None else None
        if fence or not (_is_table_line(lines[i]) and _DELIMITER_ROW.match(lines[i + 1].rstrip("\r"))):
            i += 1
            continue
        end = i + 2
        while end < len(lines) and _is_table_line(lines[end]):
            end += 1
        keys = {_column_key(c) for c in _PIPE.split(lines[i])}
        if all(k in keys for k in REQUIRED_COLUMNS):
            tables += 1
            rows += _update_table(lines, i, end, checkpointing, changed, skipped)
        i = end
    return UpdateResult(text="\n".join(lines), tables=tables, rows=rows, changed=changed, skipped=skipped)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data``: a temporary file in the same directory, then a rename.

    A reader never sees half a file, and a failure leaves the original untouched. The file keeps
    its permission bits; a symbolic link is followed (its target is replaced, not the link).
    """
    target = Path(os.path.realpath(path))
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, target.stat().st_mode & 0o7777)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def update_tflops_file(path: Path, *, checkpointing: bool = True, dry_run: bool = False) -> UpdateResult:
    """Recompute the TFlops cells of the markdown file ``path`` in place (see :func:`update_tflops_text`).

    Bytes that are not valid UTF-8 are carried through unchanged. The file is written only when a
    cell changed (and not with ``dry_run``), atomically.
    """
    original = Path(path).read_bytes()
    result = update_tflops_text(original.decode("utf-8", "surrogateescape"), checkpointing=checkpointing)
    if result.changed and not dry_run:
        write_atomically(Path(path), result.text.encode("utf-8", "surrogateescape"))
    return result


def format_report(result: UpdateResult, *, name: str) -> list[str]:
    """One line per changed row (``name:LINE: TFlops OLD -> NEW (+DELTA) | row``)."""
    report = []
    for change in result.changed:
        delta = (
            f"{change.delta:+.{len(change.new.partition('.')[2])}f}" if change.delta is not None else "new"
        )
        old = change.old or "(empty)"
        report.append(f"{name}:{change.line}: TFlops {old} -> {change.new} ({delta})  {change.row.strip()}")
    return report


def format_skipped(result: UpdateResult, *, name: str) -> list[str]:
    """One line per row left alone because a cell could not be read."""
    return [f"{name}:{s.line}: left alone: {s.reason}  {s.row.strip()}" for s in result.skipped]

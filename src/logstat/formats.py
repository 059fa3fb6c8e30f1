"""Frames -> text or files: a readable table, markdown, JSON, CSV, parquet.

Data goes to stdout (or ``--output``), never mixed with messages; an existing output file is never
overwritten; binary parquet is never written to a terminal.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl

from logstat.analytics.display import mfu_text, tflops_text
from logstat.errors import LogstatError
from logstat.files import write_new
from logstat.parsers.schema import label_of_path, run_labels

#: how a value of the readable run table is written: decimals, None = as is, or a function
#: of :mod:`logstat.analytics.display` (the TFLOPs and MFU format every command shares).
Shown = int | None | Callable[[float | None], str | None]
#: (column, heading, how shown) of the readable run table.
RUN_COLUMNS: tuple[tuple[str, str, Shown], ...] = (
    ("name", "run", None),
    ("family", "family", None),
    ("status", "status", None),
    ("gpus", "GPUs", None),
    ("tp", "TP", None),
    ("pp", "PP", None),
    ("dp", "DP", None),
    ("micro_batch_size", "MBS", None),
    ("global_batch_size", "GBS", None),
    ("seq_len", "seq", None),
    ("hidden_size", "hidden", None),
    ("num_layers", "layers", None),
    ("activation_checkpointing", "ckpt", None),
    ("iterations", "iters", None),
    ("last_iteration", "last", None),
    ("sec_per_iter", "s/iter", 2),
)
TFLOPS_COLUMNS: tuple[tuple[str, str, Shown], ...] = (
    ("model_size_b", "size B", 2),
    ("samples_per_sec", "samples/s", 2),
    ("tokens_per_sec", "tokens/s", 0),
    ("tflops_per_gpu", "TFLOPs/GPU", tflops_text),
    ("logged_tflops_per_gpu", "logged", tflops_text),
    ("mfu", "MFU", mfu_text),
    ("hfu", "HFU", mfu_text),
    ("model_state_gb_pred", "mem pred GB", 1),
    ("mem_logged_gb", "mem logged GB", 1),
    ("mem_pred_ratio", "pred/logged", 2),
)
TFLOPS_ONLY = ("tflops_per_gpu", "tflops_per_gpu_megatron", "mfu", "hfu")


def run_records(runs: pl.DataFrame, *, tflops: bool) -> pl.DataFrame:
    """The run frame as scripts get it: every column, TFLOPs/MFU only with ``--tflops``."""
    return runs if tflops else runs.drop(TFLOPS_ONLY)


#: numbers at least this large are printed in scientific notation in the readable table.
HUGE = 1e15


def _cell(value, decimals: Shown) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if callable(decimals):
        return decimals(value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and abs(value) >= HUGE:
        return f"{value:.3g}"  # a garbled log's 1e305 samples/s would be a 300-digit column
    if isinstance(value, float) and decimals is not None and 0 < abs(value) < 0.5 * 10**-decimals:
        return f"{value:.2g}"  # a tiny test model's 0.00011 B is not 0.00: it would read as no model
    if isinstance(value, float) and decimals is not None:
        return f"{value:,.{decimals}f}" if decimals == 0 else f"{value:.{decimals}f}"
    return str(value)


def _rows(frame: pl.DataFrame, columns) -> list[list[str]]:
    return [
        [_cell(row.get(name), decimals) for name, _, decimals in columns]
        for row in frame.iter_rows(named=True)
    ]


def text_table(frame: pl.DataFrame, columns, *, markdown: bool) -> str:
    """Fixed-width columns (numbers right-aligned), or a GitHub markdown table."""
    headings = [heading for _, heading, _ in columns]
    rows = _rows(frame, columns)
    numeric = [frame.schema.get(name, pl.String).is_numeric() for name, _, _ in columns]
    if markdown:
        align = ["---:" if num else "---" for num in numeric]
        lines = ["| " + " | ".join(headings) + " |", "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headings)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if num else c.ljust(w) for c, w, num in zip(cells, widths, numeric, strict=True)
        )

    return "\n".join([line(headings), line(["-" * w for w in widths]), *(line(r) for r in rows)]).rstrip()


def runs_text(runs: pl.DataFrame, *, tflops: bool, markdown: bool, warmup: int) -> str:
    """The readable run table, then the reasons of runs that did not end well, then what the
    statistics are."""
    columns = RUN_COLUMNS + (TFLOPS_COLUMNS if tflops else ())
    frame = runs.with_columns(name=run_labels(runs))
    parts = [text_table(frame, columns, markdown=markdown), ""]
    # markdown: one list item per note (plain lines would run into one paragraph) and the quoted log
    # line as code (its '*** JOB ... CANCELLED ***' would render as emphasis)
    item, quote = ("- ", _code_span) if markdown else ("", str)
    for row in frame.filter(pl.col("status") != "ok").iter_rows(named=True):
        where = f" ({Path(row['reason_path']).name}:{row['reason_line']})" if row["reason_line"] else ""
        parts.append(f"{item}{row['name']}: {row['status']}{where}: {quote(row['reason'])}")
        # what followed from it (a launcher's exit, Slurm's cancel, other ranks' errors), under it
        sub = "  - " if markdown else "    "
        parts.extend(f"{sub}then {quote(evidence)}" for evidence in row.get("consequences") or ())
    for row in frame.filter(pl.col("model_size_note").is_not_null()).iter_rows(named=True):
        parts.append(f"{item}{row['name']}: model size: {row['model_size_note']}")
    if markdown and parts[-1]:
        parts.append("")
    parts.append(
        f"s/iter: median of the logged steps after the first {warmup} (--warmup), or global batch / samples/s "
        "where a log has no step times (column sec_per_iter_source of --format json says which)."
    )
    if tflops:
        if markdown:
            parts.append("")
        parts.append(
            f"TFLOPs/GPU: seed formula {quote('size_B*f*2*seq*GBS/(s_per_iter*GPUs*1e3)')}, f=4 with activation "
            "checkpointing, 3 without; size from the shape in units of 1e9; logged: the log's own TFLOP/s/GPU "
            "(median after --warmup; a disagreement over 10% with Megatron-LM's count, Narayanan et al. eq. 3 "
            "generalized to the run's GQA, FFN, SwiGLU and MoE, is a warning). "
            "MFU: model FLOPs (that count without recomputation, PaLM's definition) / the GPU model's dense peak; "
            "HFU: the FLOPs executed (that count with the run's recomputation) / the peak ('-' when the GPU model "
            "is unknown). mem pred GB: ZeRO model-state estimate per GPU (16 bytes/param; stage, offload, "
            "params / (TP*PP)); mem logged GB: the log's peak allocated memory (largest rank); pred/logged: "
            "their ratio (activations and buffers make up the rest). GB = 1e9 bytes."
        )
    return "\n".join(parts) + "\n"


def run_warnings(runs: pl.DataFrame) -> list[str]:
    """One stderr line per run with warnings (lines that could not be read, a log's own TFLOP/s that
    disagrees with logstat's count, an MFU above the peak, steps another row holds too): every command
    that reads logs says them, as the data (a table's cells) cannot."""
    return [
        f"warning: {path}: {len(notes)} warning(s), first: {notes[0]}"
        for path, notes in runs.select("path", "warnings").iter_rows()
        if notes is not None and len(notes)
    ]


def warmup_warnings(runs: pl.DataFrame, warmup: int) -> list[str]:
    """One line per run whose logged steps all fell in the ``--warmup``: its s/iter is empty for that
    reason alone, which the table cannot tell apart from a run that logged no time. The default
    warm-up of 1 is said under every table, and a run that died after its first step is the seed's
    'fail': only a larger warm-up is reported."""
    if warmup <= 1:
        return []
    starved = runs.filter(
        (pl.col("iterations") > 0)
        & pl.col("sec_per_iter").is_null()
        & (pl.col("warmup_skipped") >= pl.col("iterations"))
    )
    return [
        f"warning: {path}: --warmup {warmup} leaves none of its {steps} logged step(s); "
        "its s/iter and TFLOPs are empty (lower --warmup)"
        for path, steps in starved.select("path", "iterations").iter_rows()
    ]


def _code_span(text: str) -> str:
    """``text`` as a markdown code span, its fence longer than any run of backticks inside it."""
    ticks = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{ticks} {text} {ticks}"


def step_rows_text(steps: pl.DataFrame, runs: pl.DataFrame, *, markdown: bool) -> str:
    """One row per logged step (or step's timer); ``path`` shows the name of its run in ``runs``
    (:func:`run_labels`)."""
    columns = [(name, name, None) for name in steps.columns]
    names = label_of_path(runs)
    frame = steps.with_columns(pl.col("path").replace_strict(names, default=None, return_dtype=pl.String))
    return text_table(frame, columns, markdown=markdown) + "\n"


def _flat(frame: pl.DataFrame) -> pl.DataFrame:
    """CSV has no lists: join list columns with ';'."""
    return frame.with_columns(
        pl.col(name).list.join(";") for name, dtype in frame.schema.items() if isinstance(dtype, pl.List)
    )


def json_text(frame: pl.DataFrame) -> str:
    """A JSON array of objects (NaN/inf become null: JSON has neither). The frame keeps ``provenance``
    as a JSON string; here it is an object, so ``jq '.[].provenance.dp'`` works without a second decode."""
    rows = frame.to_dicts()
    clean = [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in rows
    ]
    for row in clean:
        if isinstance(row.get("provenance"), str):
            row["provenance"] = json.loads(row["provenance"])
    return json.dumps(clean, indent=2) + "\n"


def write(frame: pl.DataFrame, fmt: str, text_for_table, output: str | None) -> None:
    """Write ``frame`` in ``fmt`` to ``output`` (never overwriting) or stdout."""
    if fmt == "parquet":
        if output is None:
            if sys.stdout.isatty():
                raise LogstatError(
                    "--format parquet is binary: give --output FILE (not written to a terminal)"
                )
            frame.write_parquet(sys.stdout.buffer)
            return
        buffer = io.BytesIO()
        frame.write_parquet(buffer)
        _write_new(output, buffer.getvalue())
        return
    if fmt == "json":
        text = json_text(frame)
    elif fmt == "csv":
        text = _flat(frame).write_csv()
    else:
        text = text_for_table(markdown=fmt == "markdown")
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    _write_new(output, text.encode("utf-8"))


def _write_new(output: str, data: bytes) -> None:
    """Write ``data`` to the new file ``output`` atomically: a temporary file in the same directory,
    then a hard link that fails if ``output`` exists. A write cut short (disk full, Ctrl-C) leaves no
    partial file under the user's name, and nothing the user made is overwritten."""
    target = refuse_unwritable_output(output)
    try:
        write_new(target, data)
    except FileExistsError:
        raise LogstatError(_exists(output)) from None


def refuse_unwritable_output(output: str) -> Path:
    """``output`` as a path, or a LogstatError when it exists, or its directory does not or cannot take a
    new file: called before any log is read (minutes on a big corpus), and again just before writing."""
    target = Path(output)
    if target.exists() or target.is_symlink():
        raise LogstatError(_exists(output))
    if not target.parent.is_dir():
        raise LogstatError(f"--output {output}: directory {target.parent} does not exist")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise LogstatError(
            f"--output {output}: directory {target.parent} is not writable (permission denied)"
        )
    return target


def _exists(output: str) -> str:
    return f"--output {output}: file exists; logstat never overwrites a file (choose a new name)"

"""The seed-style table of one sweep: the varied fields as columns, rows sorted by them.

Every point of the sweep is a row, as the seed's hand-made sweeps kept theirs: a measured point
shows its Throughput and TFlops (the best TFlops in bold), a point whose run failed shows ``fail``
or, when its log says CUDA out of memory, ``OOM`` (the seed's word); a point that never ran shows
``pruned`` with its rule in Notes, one without a log yet shows ``no log``. Cells use the
formatters of :mod:`logstat.analytics.tables`, so a sweep's numbers read like every other table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

import polars as pl
from logstat.analytics.tables import COLUMNS, _legend, _markdown, _with_formula_facts

#: Spec field -> the seed's header for it (other fields keep their dotted name).
SEED_HEADERS: dict[str, str] = {
    "batch.micro": "Mic-BS",
    "batch.gas": "PP Chunks",
    "batch.global_batch": "Glob-BS",
    "parallel.tp": "TP",
    "parallel.pp": "PP",
    "train.zero_stage": "Zero",
    "train.offload_optimizer": "Opt Offl",
    "train.offload_param": "Par Offl",
    "model.seq_len": "Seq",
    "cluster.gpu_model": "GPU",
}
#: The parser's own words for an out-of-memory failure (logstat.parsers.slurm).
OOM_REASON = "CUDA out of memory"
_NOTE_PRUNED = "pruned"
_NOTE_NO_LOG = "no log"


def render_sweep_table(
    points: Sequence[Mapping[str, Any]], runs: pl.DataFrame, *, title: str, grid: Sequence[str]
) -> str:
    """Markdown: ``### title``, the table and its legend.

    ``points`` are sweep.json's points (``values``, ``dir``, ``rule``, ``reason``, ``world_size``,
    ``dp``, ``global_batch``, ``params``); ``runs`` the parse of the points' run directories
    (RUNS_SCHEMA and SUMMARY_SCHEMA columns), matched to a point by the directory of its log.
    ``grid`` is the varied fields, in the order of the sweep's axes.
    """
    rows, extras = _rows(points, runs, grid)
    frame = pl.DataFrame(rows, schema=runs.schema, orient="row").with_columns(
        pl.Series("_name", [extra["name"] for extra in extras], dtype=pl.String),
        pl.Series("_kind", [extra["kind"] for extra in extras], dtype=pl.String),
    )
    varied = [SEED_HEADERS.get(key, key) for key in grid]
    shown = ["GPUs", "Size", *varied]
    shown += [h for h in ("DP", "Glob-BS") if h not in varied]
    shown += ["Throughput", "TFlops", "Notes"]
    # Seq and Ckpt where the TFlops formula read a value other than the seed's, as the other tables do
    shown = list(_with_formula_facts(tuple(shown), frame.filter(pl.col("_kind") == "run")))
    cells = frame.select(
        _cell(header).alias(f"c{i}") for i, header in enumerate(shown) if header not in varied
    )
    best = _best(frame)
    table_rows = []
    for number, extra in enumerate(extras):
        computed = iter(cells.row(number))
        row = []
        for header in shown:
            if header in varied:
                row.append(_value_text(extra["values"].get(grid[varied.index(header)])))
                continue
            text = next(computed)
            is_best = best is not None and frame["tflops_per_gpu"][number] == best
            if header == "TFlops" and is_best and frame["status"][number] not in ("failed", "cancelled"):
                text = f"**{text}**"
            row.append(text)
        table_rows.append(tuple(row))
    right = [
        COLUMNS[h.lower()].right if h.lower() in COLUMNS else _numeric(h, extras, grid, varied) for h in shown
    ]
    legend = _legend(frame.filter(pl.col("_kind") == "run"), shown)
    note = (
        "_Rows sorted by the swept fields; **bold** = the best TFlops; `OOM` = the log says CUDA out of "
        "memory; `pruned` = not run, the rule in Notes; `no log` = no output yet._"
    )
    return "\n".join([f"### {title}", "", *_markdown(shown, table_rows, right), "", legend, note, ""])


def _rows(
    points: Sequence[Mapping[str, Any]], runs: pl.DataFrame, grid: Sequence[str]
) -> tuple[list[tuple], list[dict[str, Any]]]:
    """One row per run of a kept point (its log's parse), per kept point without a log, and per
    pruned point; sorted by the swept values. Rows without a parse hold the facts sweep.json has."""
    by_dir: dict[str, list[dict[str, Any]]] = {}
    for run in runs.iter_rows(named=True):
        by_dir.setdefault(PurePath(run["path"]).parent.name, []).append(run)
    empty = dict.fromkeys(runs.columns)
    found: list[tuple[tuple, dict[str, Any], dict[str, Any]]] = []
    for point in points:
        values = point.get("values") or {}
        key = tuple(_sort_key(values.get(field)) for field in grid) + (point.get("index") or 0,)
        name = point.get("dir")
        facts = {
            **empty,
            "gpus": point.get("world_size"),
            "dp": point.get("dp"),
            "global_batch_size": point.get("global_batch"),
            "model_size_b": point["params"] / 1e9 if _number(point.get("params")) else None,
        }
        if name is None:
            reason = f"{point.get('rule')}: {point.get('reason')}"
            found.append((key, facts, {"kind": "pruned", "name": reason, "values": values}))
            continue
        logs = by_dir.get(name, [])
        for run in logs:
            found.append(
                (key, run, {"kind": "run", "name": f"{name}/{PurePath(run['path']).name}", "values": values})
            )
        if not logs:
            found.append(
                (key, facts, {"kind": "no-log", "name": f"{name} ({_NOTE_NO_LOG})", "values": values})
            )
    found.sort(key=lambda item: item[0])
    return [tuple(row[c] for c in runs.columns) for _, row, _ in found], [extra for _, _, extra in found]


def _oom() -> pl.Expr:
    """The log says CUDA out of memory (the parser's reason)."""
    reason = pl.col("reason").fill_null("")
    return (pl.col("status") == "failed") & reason.str.contains(OOM_REASON, literal=True)


def _cell(header: str) -> pl.Expr:
    kind = pl.col("_kind")
    if header == "TFlops":  # empty on an OOM row, as the seed's: that configuration does not run
        return pl.when(_oom()).then(pl.lit(None, pl.String)).otherwise(COLUMNS["tflops"].cell())
    if header == "Throughput":
        return (
            pl.when(kind == "pruned")
            .then(pl.lit(_NOTE_PRUNED))
            .when(kind == "no-log")
            .then(pl.lit(_NOTE_NO_LOG))
            .when(_oom())
            .then(pl.lit("OOM"))
            .otherwise(COLUMNS["throughput"].cell())
        )
    if header == "Notes":
        return pl.when(kind == "run").then(COLUMNS["notes"].cell()).otherwise(pl.col("_name"))
    return COLUMNS[header.lower()].cell()


def _best(frame: pl.DataFrame) -> float | None:
    """The highest TFlops of a run that did not fail or get cancelled (what it measured before it
    ended is no configuration to pick)."""
    ended_badly = {"failed", "cancelled"}
    finite = [
        row["tflops_per_gpu"]
        for row in frame.select("tflops_per_gpu", "status").iter_rows(named=True)
        if _number(row["tflops_per_gpu"]) and row["status"] not in ended_badly
    ]
    return max(finite) if finite else None


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _sort_key(value: object) -> tuple:
    """Unknown values last; numbers by value; anything else by its text."""
    if value is None:
        return (2, 0, "")
    if _number(value):
        return (0, value, "")
    return (1, 0, str(value))


def _value_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "Y" if value else "N"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _numeric(
    header: str, extras: Sequence[Mapping[str, Any]], grid: Sequence[str], varied: Sequence[str]
) -> bool:
    """A varied column is right-aligned when it holds numbers, like the seed's numeric columns."""
    field = grid[varied.index(header)]
    values = [extra["values"].get(field) for extra in extras]
    return all(value is None or _number(value) for value in values)

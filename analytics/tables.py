"""The seed's markdown tables (seeds/001_gpt2_experiments_tables.md), regenerated from the runs frame.

One table per stack, rows sorted by GPU count, the seed's columns (choosable), and under each
table a line saying which statistic and which formula its numbers use. Failed runs are kept:
a run without a measured time shows ``fail`` in Throughput, as the seed's perl one-liner printed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
from logstat.analytics import formulas
from logstat.analytics.display import mfu_text, tflops_text
from logstat.analytics.update import GENERATED_MARK, SEED_SEQ_LEN
from logstat.parsers.schema import run_labels
from logstat.parsers.slurm import CAUSE_LABELS, OOM_LABEL


def _fixed(expr: pl.Expr, decimals: int) -> pl.Expr:
    """A number as text with exactly ``decimals`` decimals (polars has no printf); null (an empty
    cell) for nan, inf or a number beyond int64 once scaled, which a hostile log can produce."""
    scale = 10**decimals
    scaled = (expr * scale).round(0).cast(pl.Int64, strict=False)
    if decimals == 0:
        return scaled.cast(pl.String)
    magnitude = scaled.abs()
    sign = pl.when(scaled < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    fraction = (magnitude % scale).cast(pl.String).str.zfill(decimals)
    return pl.format("{}{}.{}", sign, magnitude // scale, fraction)


def _below(expr: pl.Expr, bound: float, decimals: int) -> pl.Expr:
    """Whether ``expr`` is under ``bound`` as written with ``decimals`` decimals: 99.96 written with one
    is 100.0, not under 100 (the format is chosen from the number the cell shows)."""
    scale = 10**decimals
    return (expr * scale).round(0) < bound * scale


def _integer(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.String)


def _yes_no(name: str) -> pl.Expr:
    return pl.when(pl.col(name)).then(pl.lit("Y")).when(pl.col(name).not_()).then(pl.lit("N"))


def size_text() -> pl.Expr:
    """``52B`` like the seed; one decimal below 10B (``7.5B``), ``350M`` below 1B, and ``110K`` below
    1M (a tiny test model would otherwise read ``0M``, as if it had no parameters)."""
    size_b = pl.col("model_size_b")
    return (
        pl.when(_below(size_b * 1e6, 1000, 0))
        .then(pl.format("{}K", _fixed(size_b * 1e6, 0)))
        .when(_below(size_b * 1000, 1000, 0))
        .then(pl.format("{}M", _fixed(size_b * 1000, 0)))
        .when(_below(size_b, 10, 1))
        .then(pl.format("{}B", _fixed(size_b, 1)))
        .otherwise(pl.format("{}B", _fixed(size_b, 0)))
    )


def _throughput() -> pl.Expr:
    """Seconds per iteration like the seed's cells (``129s``, ``90.5s``, ``0.661s``); ``fail`` if unmeasured.

    A run that ended ``ok`` but logs no per-iteration time (minGPT's epoch averages) did not fail:
    its cell is empty, like any fact the log does not give.
    """
    sec = pl.col("sec_per_iter")
    unmeasured = sec.is_null() | sec.is_nan() | sec.is_infinite()
    return (
        pl.when(unmeasured & (pl.col("status") == "ok"))
        .then(pl.lit(""))
        .when(unmeasured)
        .then(pl.lit("fail"))
        .when(_below(sec, 10, 3))
        .then(pl.format("{}s", _fixed(sec, 3)))
        .when(_below(sec, 100, 1))
        .then(pl.format("{}s", _fixed(sec, 1)))
        .otherwise(pl.format("{}s", _fixed(sec, 0)))
    )


def _shown(name: str, text: Callable[[float | None], str | None]) -> pl.Expr:
    """The column as :mod:`logstat.analytics.display` writes it for a reader (one definition for
    every command; a table has a handful of rows, so a Python call per cell costs nothing)."""
    return pl.col(name).map_elements(text, return_dtype=pl.String, skip_nulls=True)


def _days_100b(gpu_days: bool) -> pl.Expr:
    """Days (or GPU-days) to train 100B tokens at the run's tokens/s (seed 000's "jours pour 100b tokens"):
    whole from 10 up, as the seed writes them, one decimal below (a fast run's 0.3 days is not 0)."""
    days = formulas.days_to_train(tokens=100e9, tokens_per_sec=pl.col("tokens_per_sec"))
    days = formulas.gpu_days(days=days, gpus=pl.col("gpus")) if gpu_days else days
    return pl.when(_below(days, 10, 1)).then(_fixed(days, 1)).otherwise(_fixed(days, 0))


def _memory_prediction() -> pl.Expr:
    """``13.0/20.9 GB (0.62)``: the ZeRO model-state estimate, the logged peak allocated memory and
    their ratio; ``13.3/- GB`` when the log gives no memory (the estimate stands alone); empty when the
    estimate is unknown."""
    predicted = _fixed(pl.col("model_state_gb_pred"), 1)
    both = pl.format(
        "{}/{} GB ({})", predicted, _fixed(pl.col("mem_logged_gb"), 1), _fixed(pl.col("mem_pred_ratio"), 2)
    )
    return pl.coalesce(both, pl.format("{}/- GB", predicted))


#: characters of a run's name that markdown would read as markup: ``*`` and a backtick open emphasis and
#: code, brackets a link, ``<`` HTML (a pipe, which ends a cell, is escaped in every cell). ``_`` stays:
#: GitHub does not emphasise inside a word, and every log name has them (``meg_gpt2_perf_n16.out``)
_MARKUP = r"([\\*`\[\]<])"


def _plain_name() -> pl.Expr:
    """The row's name (``_name``) with its markup escaped: a name is text, never emphasis or a link."""
    return pl.col("_name").str.replace_all(_MARKUP, r"\$1")


#: a reason that is an exception's line: its class
_EXCEPTION = r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)):"


def _cause() -> pl.Expr:
    """What a failed run died of, in a word or two: the reason's label (CUDA out of memory as the seed's
    ``OOM``), else the exception's class; null when the reason has neither (the status says the rest)."""
    reason = pl.col("reason")
    label = reason.str.extract(f"^({'|'.join(re.escape(label) for label in CAUSE_LABELS)})")
    return (
        pl.when(label == OOM_LABEL)
        .then(pl.lit("OOM"))
        .otherwise(
            pl.coalesce(
                label.str.strip_suffix(": "), reason.str.extract(_EXCEPTION).str.split(".").list.last()
            )
        )
    )


def _notes() -> pl.Expr:
    """The run's name (so a reader can check the row), and the status of a run that did not end ok with
    its cause when the reason names one (``meg_oom.out (failed: OOM)``); ``_name`` (set by
    :func:`render_tables`) is the spec name and run id of a ``logstat run`` directory, else the log's file
    name with the directories that tell same-named logs apart."""
    name, status, cause = _plain_name(), pl.col("status"), _cause()
    return (
        pl.when(status.is_null() | (status == "ok"))
        .then(name)
        .when(cause.is_not_null() & (status != "timeout"))  # a timeout's cause is its time limit
        .then(pl.format("{} ({}: {})", name, status, cause))
        .otherwise(pl.format("{} ({})", name, status))
    )


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column a table can show."""

    header: str
    """The header cell, as the seed writes it."""
    cell: Callable[[], pl.Expr]
    """The cell text of every row (null shows as an empty cell)."""
    right: bool = True
    """Right-aligned (``---:``) like the seed's numbers; False for text."""


COLUMNS: dict[str, Column] = {
    c.header.lower(): c
    for c in (
        Column(header="GPUs", cell=lambda: _integer("gpus")),
        Column(header="Size", cell=size_text),
        Column(header="TP", cell=lambda: _integer("tp")),
        Column(header="DP", cell=lambda: _integer("dp")),
        Column(header="PP", cell=lambda: _integer("pp")),
        Column(header="PP Chunks", cell=lambda: _integer("gas")),
        Column(header="Zero", cell=lambda: _integer("zero_stage")),
        Column(header="Opt Offl", cell=lambda: _yes_no("offload_optimizer"), right=False),
        Column(header="Par Offl", cell=lambda: _yes_no("offload_param"), right=False),
        Column(header="Mic-BS", cell=lambda: _integer("micro_batch_size")),
        Column(header="Glob-BS", cell=lambda: _integer("global_batch_size")),
        Column(header="Seq", cell=lambda: _integer("seq_len")),
        Column(header="Ckpt", cell=lambda: _yes_no("activation_checkpointing"), right=False),
        Column(header="Throughput", cell=_throughput),
        Column(header="TFlops", cell=lambda: _shown("tflops_per_gpu", tflops_text)),
        Column(header="TFlops Megatron", cell=lambda: _shown("tflops_per_gpu_megatron", tflops_text)),
        Column(header="TFlops Logged", cell=lambda: _shown("logged_tflops_per_gpu", tflops_text)),
        Column(header="MFU", cell=lambda: _shown("mfu", mfu_text)),
        Column(header="HFU", cell=lambda: _shown("hfu", mfu_text)),
        Column(header="Mem pred/logged", cell=_memory_prediction),
        Column(header="Days 100B", cell=lambda: _days_100b(gpu_days=False)),
        Column(header="GPU-days 100B", cell=lambda: _days_100b(gpu_days=True)),
        Column(header="GPU", cell=lambda: pl.col("gpu_model"), right=False),
        Column(header="Notes", cell=_notes, right=False),
    )
}

_MEGATRON = ("GPUs", "Size", "DP", "PP", "PP Chunks", "Mic-BS", "Glob-BS", "Throughput", "TFlops", "Notes")
_ZERO = ("GPUs", "Size", "TP", "DP", "Mic-BS", "Glob-BS", "Throughput", "TFlops", "Notes")
_HF = ("GPUs", "Size", "Zero", "Opt Offl", "Par Offl", "Mic-BS", "Glob-BS", "Throughput", "TFlops", "Notes")
_OTHER = ("GPUs", "Size", "TP", "DP", "PP", "Mic-BS", "Glob-BS", "Throughput", "TFlops", "Notes")
_DDP = ("GPUs", "Size", "DP", "Mic-BS", "Glob-BS", "Throughput", "TFlops", "Notes")

#: stack title -> the seed's columns for it, in the order the seed's sections come.
STACKS: dict[str, tuple[str, ...]] = {
    "Megatron": _MEGATRON,
    "Megatron + DeepSpeed 3D": _MEGATRON,
    "Megatron + DeepSpeed ZeRO": _ZERO,
    "HF Trainer + DeepSpeed": _HF,
    "DeepSpeed": _ZERO,
    "minGPT": _OTHER,
    "PyTorch DDP + PowerSGD": _DDP,
}

#: a `logstat run` stack (its manifest's ``stack``) whose logs borrow another family's format:
#: the DDP + PowerSGD entry point writes Megatron's log lines, but it is not Megatron.
RUNNER_STACKS = {"ddp-powersgd": "PyTorch DDP + PowerSGD"}


def stack_title() -> pl.Expr:
    """The seed section a run belongs to: its runner stack when its manifest names one of
    :data:`RUNNER_STACKS`, else its log family and parallelism."""
    family = pl.col("family")
    runner = pl.col("stack").replace_strict(RUNNER_STACKS, default=None, return_dtype=pl.String)
    return (
        pl.when(runner.is_not_null())
        .then(runner)
        .when(family == "megatron")
        .then(pl.lit("Megatron"))
        # a pipeline, or no ZeRO: not the seed's ZeRO section (PP 1, ZeRO sharding the data parallel ranks)
        .when(
            (family == "megatron-deepspeed") & ((pl.col("pp").fill_null(1) > 1) | (pl.col("zero_stage") == 0))
        )
        .then(pl.lit("Megatron + DeepSpeed 3D"))
        .when(family == "megatron-deepspeed")
        .then(pl.lit("Megatron + DeepSpeed ZeRO"))
        .when((family == "hf-trainer") & _with_deepspeed())
        .then(pl.lit("HF Trainer + DeepSpeed"))
        .when(family == "hf-trainer")
        .then(pl.lit("HF Trainer"))
        .when(family == "deepspeed")
        .then(pl.lit("DeepSpeed"))
        .when(family == "mingpt")
        .then(pl.lit("minGPT"))
        .otherwise(pl.format("Other ({})", family.fill_null("unknown")))
    )


def _with_deepspeed() -> pl.Expr:
    """Whether a run's log shows DeepSpeed: its ZeRO stage, its records, or the config HF's arguments name
    (not an HF Trainer run under DDP, FSDP or one GPU: the seed's section is DeepSpeed's)."""
    seen = pl.col("families").list.contains("deepspeed").fill_null(False)
    return pl.col("zero_stage").is_not_null() | pl.col("deepspeed_config").is_not_null() | seen


def parse_columns(spec: str | None) -> tuple[str, ...] | None:
    """``"GPUs,Size,TFlops"`` -> the column headers; ValueError naming the unknown ones and the valid ones,
    or a column named twice."""
    if spec is None:
        return None
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name.lower() not in COLUMNS]
    if unknown or not names:
        valid = ", ".join(c.header for c in COLUMNS.values())
        raise ValueError(
            f"--columns: unknown column(s) {', '.join(unknown) or '(none given)'}; choose from {valid}"
        )
    headers = tuple(COLUMNS[name.lower()].header for name in names)
    if twice := sorted({header for header in headers if headers.count(header) > 1}):
        raise ValueError(f"--columns: {', '.join(twice)} named twice; a table shows a column once")
    return headers


def _markdown(
    headers: Sequence[str], rows: list[tuple[str | None, ...]], right: Sequence[bool] | None = None
) -> list[str]:
    """A GitHub table, padded so that it reads as a table in plain text too; ``right`` says which
    columns are right-aligned (default: as :data:`COLUMNS` says of each header)."""
    cells = [[(v or "").replace("|", "\\|") for v in row] for row in rows]
    widths = [max([len(h), 3, *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    right = list(right) if right is not None else [COLUMNS[h.lower()].right for h in headers]

    def line(values: Sequence[str]) -> str:
        padded = (v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True))
        return "| " + " | ".join(padded) + " |"

    delimiter = (
        "| "
        + " | ".join(("-" * (w - 1) + ":") if r else "-" * w for w, r in zip(widths, right, strict=True))
        + " |"
    )
    return [line(headers), delimiter, *(line(r) for r in cells)]


#: facts a seed table leaves unsaid because all its runs share them: (its columns, the header, the fact, the
#: seed's value, the header it goes before). Seed 001's Megatron tables: "`TP=4` in all of entries"; its
#: ZeRO table is DeepSpeedExamples' Megatron-LM-v1.1.5-ZeRO3 (stage 3)
UNSAID = ((_MEGATRON, "TP", "tp", 4, "DP"), (_ZERO, "Zero", "zero_stage", 3, "Mic-BS"))


def _with_unsaid(headers: tuple[str, ...], group: pl.DataFrame) -> tuple[str, ...]:
    """The stack's columns, plus a fact its seed table leaves unsaid (``UNSAID``) when a run's value is
    not the seed's: without it two rows of different tensor parallelism (or ZeRO stage) read alike."""
    for columns, header, fact, seed_value, before in UNSAID:
        if headers == columns and not group[fact].drop_nulls().is_in([seed_value]).all():
            at = headers.index(before)
            headers = (*headers[:at], header, *headers[at:])
    return headers


def _with_formula_facts(headers: tuple[str, ...], group: pl.DataFrame) -> tuple[str, ...]:
    """The stack's columns, plus Seq and Ckpt after Glob-BS when a run's TFlops used a sequence
    length other than the seed's 1024 or no activation checkpointing (factor 3): a reader (and
    ``--update`` of a copy) sees every fact the TFlops formula read."""
    if "TFlops" not in headers:
        return headers
    with_tflops = group.filter(pl.col("tflops_per_gpu").is_not_null())
    extra = []
    if "Seq" not in headers and (with_tflops["seq_len"] != SEED_SEQ_LEN).any():
        extra.append("Seq")
    if "Ckpt" not in headers and with_tflops["activation_checkpointing"].not_().any():
        extra.append("Ckpt")
    if not extra:
        return headers
    at = headers.index("Glob-BS") + 1 if "Glob-BS" in headers else headers.index("TFlops")
    return (*headers[:at], *extra, *headers[at:])


def _legend(group: pl.DataFrame, headers: Sequence[str]) -> str:
    """The line under a table: that logstat made it (``--update`` reads this), which statistic and
    which formula its numbers use."""
    parts = [f"Table {GENERATED_MARK}, every number from each run's unrounded facts"]
    if "Throughput" in headers:
        # Each run's source names its own step count; the legend names the kinds of statistic (a run
        # without one, "no steady state: ...", is a `fail` or empty cell, which the legend explains).
        sources = group["sec_per_iter_source"].drop_nulls()
        kinds = sorted({re.sub(r"\bof \d+ ", "of the ", s) for s in sources if not s.startswith("no ")})
        parts.append(
            f"Throughput = seconds per iteration (one global batch): {'; '.join(kinds) or 'no timed iterations'}"
            "; `fail` = no timed iteration after the warm-up in a run that did not end ok (empty: an ok run "
            "whose log times no iteration)"
        )
    if "TFlops" in headers:
        parts.append(
            "TFlops = per GPU, seed formula `Size * f * 2 * seq * Glob-BS / (Throughput * GPUs * 1e3)`, "
            "f = 4 with activation checkpointing, 3 without"
        )
    if "TFlops Megatron" in headers:
        parts.append(
            "TFlops Megatron = Megatron-LM's num_floating_point_operations (Narayanan et al. 2021 eq. 3 with "
            "the run's GQA, FFN width, SwiGLU, MoE top-k; attention and logits counted), recomputation included"
        )
    if "TFlops Logged" in headers:
        parts.append(
            "TFlops Logged = the log's own TFLOP/s per GPU (its counting rule), median after warm-up"
        )
    if "MFU" in headers:
        parts.append(
            "MFU = model FLOPs (Megatron-LM's count without recomputation, PaLM's definition) / the GPU's dense fp16/bf16 peak"
        )
    if "HFU" in headers:
        parts.append(
            "HFU = FLOPs executed (Megatron-LM's count with the run's recomputation) / the same peak"
        )
    if "Mem pred/logged" in headers:
        parts.append(
            "Mem pred/logged = ZeRO model-state estimate per GPU (16 bytes/param) / the logged peak allocated "
            "memory, GB of 1e9 bytes, (their ratio); `-` = the log gives no memory"
        )
    if "Days 100B" in headers or "GPU-days 100B" in headers:
        parts.append("Days 100B = 100e9 / tokens per second / 86400 (seed 000), GPU-days = days * GPUs")
    if "Size" in headers:
        parts.append("Size = parameters from the shape, units of 1e9")
    parts.append("an empty cell = the log does not say (or a fact the number needs is missing)")
    return "_" + "; ".join(parts) + "._"


def render_tables(runs: pl.DataFrame, *, columns: Sequence[str] | None = None) -> str:
    """Markdown: a ``### stack`` heading, a table and its legend line for each stack in ``runs``.

    ``runs`` has the columns of RUNS_SCHEMA and SUMMARY_SCHEMA (logstat.parsers.schema).
    ``columns`` (headers of :data:`COLUMNS`) replaces every stack's default columns.
    """
    if runs.is_empty():
        return ""
    titled = runs.with_columns(stack_title().alias("_stack"), _name=run_labels(runs))
    order = {title: i for i, title in enumerate(STACKS)}
    titles = sorted(titled["_stack"].unique().to_list(), key=lambda t: (order.get(t, len(order)), t))
    out: list[str] = []
    for title in titles:
        group = titled.filter(pl.col("_stack") == title).sort(["gpus", "path"], nulls_last=True)
        headers = (
            tuple(columns)
            if columns
            else _with_formula_facts(_with_unsaid(STACKS.get(title, _OTHER), group), group)
        )
        cells = group.select(COLUMNS[h.lower()].cell().alias(h) for h in headers)
        out += [f"### {title}", "", *_markdown(headers, cells.rows()), "", _legend(group, headers), ""]
    return "\n".join(out)

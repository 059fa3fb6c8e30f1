"""Charts of parsed runs (altair; PNG/SVG rendered by vl-convert-python, HTML self-contained).

- GPU-days to train 100B tokens against the number of GPUs, one line per configuration family
  (the figure of seeds/000_deepspeed_jean_zay_bloom7b_notes.md);
- training loss against iteration, one line per run;
- the per-iteration time breakdown from the logs' timer lines (Megatron's, DeepSpeed's), one panel
  per run that has timings, one bar per timer.

Runs are named as in the tables (spec name/run id for a ``logstat run`` directory, else the log).

Only ``logstat plot`` imports this module: altair is heavy and the other commands do not need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import altair as alt
import polars as pl
from logstat.analytics import formulas
from logstat.analytics.display import mfu_text, tflops_text
from logstat.analytics.tables import size_text, stack_title
from logstat.parsers.schema import label_of_path, run_names

from logstat.files import write_new

#: the token budget of seed 000's figure ("compute-days to train on 100b tokens").
TOKENS_100B = 100e9
FORMATS = ("html", "png", "svg")
#: legends below the plot, long labels (log file names, configurations) not cut.
_LEGEND = alt.Legend(orient="bottom", direction="vertical", labelLimit=600, titleLimit=600)


def _run(frame: pl.DataFrame, names: dict[str, str] | None = None) -> pl.Expr:
    """The run's name: ``names`` (path -> :func:`~logstat.parsers.schema.run_labels`, from the runs
    frame) or else the log file name with the directories that tell same-named logs apart."""
    if names is None:
        names = dict(zip(frame["path"].to_list(), run_names(frame["path"]).to_list(), strict=True))
    return pl.col("path").replace_strict(names, default=None, return_dtype=pl.String).alias("run")


#: what the configuration family names, in its order (the legend's title says it).
FAMILY_PARTS = "stack, size, TP, ZeRO, micro batch, seq"


def _configuration() -> pl.Expr:
    """The configuration family a run belongs to, one line of the figure: stack (as the tables title
    it, so a DDP + PowerSGD run is not "megatron"), model size (as the tables write it), TP, ZeRO
    stage, micro batch and sequence length, as seed 000's lines ("DDP+...+powerSGD, bloom-7b, bs=2,
    context=1024") are.

    Not GPUs, PP nor DP: they grow along a line (one node per pipeline stage in seed 001).
    """
    return pl.concat_str(
        [
            stack_title(),
            size_text().fill_null("size ?"),
            pl.format("TP {}", pl.col("tp").fill_null(1)),
            pl.format("ZeRO {}", pl.col("zero_stage")).fill_null("no ZeRO"),
            pl.format("mbs {}", pl.col("micro_batch_size")).fill_null("mbs ?"),
            pl.format("seq {}", pl.col("seq_len")).fill_null("seq ?"),
        ],
        separator=", ",
    ).alias("configuration")


def _shown(name: str, text) -> pl.Expr:
    return pl.col(name).map_elements(text, return_dtype=pl.String, skip_nulls=True).fill_null("-")


def gpu_days_data(runs: pl.DataFrame, *, tokens: float = TOKENS_100B) -> pl.DataFrame:
    """One row per run with a measured throughput: GPUs, days and GPU-days for ``tokens`` tokens."""
    days = formulas.days_to_train(tokens=tokens, tokens_per_sec=pl.col("tokens_per_sec"))
    return (
        runs.filter(
            pl.col("tokens_per_sec").is_finite()
            & (pl.col("tokens_per_sec") > 0)
            & pl.col("gpus").is_not_null()
        )
        .select(
            _run(runs, label_of_path(runs)),
            _configuration(),
            pl.col("gpus"),
            pl.col("sec_per_iter"),
            pl.col("tokens_per_sec"),
            days.alias("days"),
            formulas.gpu_days(days=days, gpus=pl.col("gpus")).alias("gpu_days"),
            # the tables' and parse's formats, as text: vega-lite's own cannot write 0.0123
            _shown("tflops_per_gpu", tflops_text).alias("tflops"),
            _shown("mfu", mfu_text).alias("mfu"),
            pl.col("status"),
        )
        # a point of a run that did not end ok says so in its label, as the tables' Notes do
        .with_columns(
            label=pl.when(pl.col("status").is_null() | (pl.col("status") == "ok"))
            .then("run")
            .otherwise(pl.format("{} ({})", "run", "status"))
        )
        .sort("configuration", "gpus", "run")
    )


def gpu_days_chart(runs: pl.DataFrame, *, tokens: float = TOKENS_100B) -> alt.LayerChart:
    """GPU-days to train ``tokens`` against the number of GPUs, one line per configuration family
    (seed 000's figure): the runs of a family at several GPU counts are joined.

    Each point is labelled with its run, so a static PNG can be checked against the table.
    """
    data = gpu_days_data(runs, tokens=tokens)
    budget = f"{tokens / 1e9:g}B"
    base = alt.Chart(data).encode(
        # ticks at the GPU counts the runs have: a log axis's own ticks (20, 30...) name none of them
        x=alt.X(
            "gpus:Q",
            title="GPUs",
            scale=alt.Scale(type="log", base=2),
            axis=alt.Axis(values=sorted(data["gpus"].unique().to_list()), format="d"),
        ),
        y=alt.Y("gpu_days:Q", title=f"GPU-days for {budget} tokens (days x GPUs)"),
        color=alt.Color("configuration:N", title=f"Configuration family ({FAMILY_PARTS})", legend=_LEGEND),
        tooltip=[
            "run",
            "configuration",
            "gpus",
            "status",
            alt.Tooltip("sec_per_iter:Q", title="s/iteration", format=".4~g"),  # 129, 4.66, 0.045
            alt.Tooltip("tokens_per_sec:Q", title="tokens/s", format=",.0f"),
            alt.Tooltip("tflops:N", title="TFLOPs/GPU"),
            alt.Tooltip("mfu:N", title="MFU"),
            alt.Tooltip("days:Q", title="days", format=".1f"),
            alt.Tooltip("gpu_days:Q", title="GPU-days", format=",.0f"),
        ],
    )
    lines = base.mark_line(point=alt.OverlayMarkDef(size=60))
    labels = base.mark_text(align="left", dx=8, fontSize=10).encode(text="label:N")
    title = f"GPU-days to train {budget} tokens vs number of GPUs"
    return alt.layer(lines, labels).properties(title=title, width=520, height=320)


def loss_data(iterations: pl.DataFrame, names: dict[str, str] | None = None) -> pl.DataFrame:
    """The logged training loss of each run, by iteration. A nan or inf loss (a diverged or overflowed
    step) cannot be drawn: it stays in the iterations frame and the tables, not in the chart.
    ``names``: run path -> name (see :func:`_run`)."""
    return (
        iterations.filter(pl.col("loss").is_finite())
        .select(_run(iterations, names), "iteration", "loss", "family", "line")
        .sort("run", "iteration")
    )


def loss_chart(iterations: pl.DataFrame, names: dict[str, str] | None = None) -> alt.Chart:
    """Training loss against iteration, one line per run."""
    return (
        alt.Chart(loss_data(iterations, names), title="Training loss vs iteration")
        .mark_line(point=True)
        .encode(
            x=alt.X("iteration:Q", title="Iteration (optimizer step)"),
            y=alt.Y("loss:Q", title="Loss (nats per token)", scale=alt.Scale(zero=False)),
            color=alt.Color("run:N", title="Run", legend=_LEGEND),
            tooltip=["run", "iteration", alt.Tooltip("loss:Q", format=".4f"), "family", "line"],
        )
        .properties(width=520, height=320)
    )


def timer_data(
    timers: pl.DataFrame, names: dict[str, str] | None = None, families: dict[str, str] | None = None
) -> pl.DataFrame:
    """Median milliseconds of each timer of each run over its logged steps, for the runs that have a
    timing to draw (a run whose timers are all 0 would be an empty panel).

    Timers printed before the first step (setup, checkpoint loading) happen once, not per
    iteration, and are left out. ``names``: run path -> name (see :func:`_run`); ``families``: run
    path -> the run's log family, which the chart names instead of the timer lines' (a Megatron-DeepSpeed
    run's Megatron and DeepSpeed engine timers are its own).
    """
    if families is not None:
        timers = timers.with_columns(
            pl.col("path").replace_strict(families, default=None, return_dtype=pl.String).alias("family")
        )
    medians = (
        timers.filter(pl.col("iteration").is_not_null() & pl.col("ms").is_finite())
        .group_by(_run(timers, names), "timer")
        .agg(
            pl.col("ms").median().alias("median_ms"),
            pl.len().alias("steps"),
            pl.col("family").drop_nulls().first().alias("family"),
        )
    )
    drawn = medians.filter((pl.col("median_ms") > 0).any().over("run"))
    return drawn.sort("run", "timer")


#: how a timer line's family is called in the chart's title.
_TIMER_SOURCES = {
    "megatron": "Megatron",
    "megatron-deepspeed": "Megatron-DeepSpeed",
    "deepspeed": "DeepSpeed",
}


def timer_title(data: pl.DataFrame) -> str:
    """What the breakdown shows: whose timer lines, of how many runs."""
    families = sorted({_TIMER_SOURCES.get(f, f) for f in data["family"].drop_nulls().unique()})
    sources = " and ".join(families) if families else "the logs'"
    runs = data["run"].n_unique()
    return (
        f"Time per iteration by timer, median over the logged steps ({sources} timer lines, "
        f"{runs} run{'s' if runs != 1 else ''})"
    )


def timer_chart(
    timers: pl.DataFrame, names: dict[str, str] | None = None, families: dict[str, str] | None = None
) -> alt.FacetChart:
    """Per-iteration time breakdown from the logs' ``time (ms) |`` lines: one panel per run with
    timings, one bar per timer.

    Bars side by side, not stacked: Megatron's timers nest (e.g. ``backward`` contains the
    gradient all-reduce), so stacking them would count time twice. Each panel has its own time
    axis: a CPU test run's microseconds beside a 52B run's minutes would be invisible bars.
    """
    data = timer_data(timers, names, families)
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            y=alt.Y("timer:N", title=None, sort="-x"),
            x=alt.X("median_ms:Q", title="Time per iteration (ms, median)"),
            color=alt.Color("run:N", legend=None),
            tooltip=["run", "timer", alt.Tooltip("median_ms:Q", title="ms", format=",.1f"), "steps"],
        )
        .properties(width=520, height=alt.Step(14))
        .facet(row=alt.Row("run:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))
        .resolve_scale(x="independent", y="independent")
        .properties(title=timer_title(data))
    )


def charts_of(
    runs: pl.DataFrame, iterations: pl.DataFrame, timers: pl.DataFrame
) -> dict[str, alt.TopLevelMixin]:
    """The charts that have data, by file stem; runs named as in the tables."""
    names = label_of_path(runs)
    families = dict(zip(runs["path"].to_list(), runs["family"].to_list(), strict=True))
    charts = {}
    if not gpu_days_data(runs).is_empty():
        charts["gpu_days_100b"] = gpu_days_chart(runs)
    if not loss_data(iterations, names).is_empty():
        charts["loss"] = loss_chart(iterations, names)
    if not timer_data(timers, names, families).is_empty():
        charts["time_breakdown"] = timer_chart(timers, names, families)
    return charts


def planned_files(stems: Sequence[str], out_dir: Path, formats: Sequence[str]) -> list[Path]:
    """The files :func:`write_charts` would write."""
    return [out_dir / f"{stem}.{fmt}" for stem in stems for fmt in formats]


def write_charts(
    charts: dict[str, alt.Chart], out_dir: Path, *, formats: Sequence[str] = ("html", "png")
) -> list[Path]:
    """Write every chart in every format under ``out_dir`` (created if missing).

    Nothing is overwritten: if any of the files exists, FileExistsError names it and nothing is
    written.
    """
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"format(s) {', '.join(unknown)} unknown; choose from {', '.join(FORMATS)}")
    files = planned_files(list(charts), out_dir, formats)
    existing = [f for f in files if f.exists()]
    if existing:
        raise FileExistsError(f"{existing[0]} exists; logstat never overwrites a file (choose another --out)")
    # Everything is rendered before the first file is written: a chart that fails to render leaves
    # no half-written set of files behind (which would also block the next attempt).
    rendered = []
    for stem, chart in charts.items():
        for fmt in formats:
            if fmt == "png":
                content: bytes | str = _png(chart)
            else:
                content = chart.to_html(inline=True) if fmt == "html" else _svg(chart)
            rendered.append((out_dir / f"{stem}.{fmt}", content))
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for path, content in rendered:
            data = content if isinstance(content, bytes) else content.encode("utf-8")
            write_new(path, data)
            written.append(path)
    except BaseException:
        # a full disk or Ctrl-C halfway: take back this call's own files, so the next attempt is
        # not refused because of them
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return written


def _png(chart: alt.TopLevelMixin) -> bytes:
    import vl_convert

    return vl_convert.vegalite_to_png(chart.to_json(), scale=2)


def _svg(chart: alt.TopLevelMixin) -> str:
    import vl_convert

    return vl_convert.vegalite_to_svg(chart.to_json())

"""Charts of parsed runs (altair; PNG/SVG rendered by vl-convert-python, HTML self-contained).

- GPU-days to train 100B tokens against the number of GPUs, one line per configuration
  (the figure of seeds/000_deepspeed_jean_zay_bloom7b_notes.md);
- training loss against iteration, one line per run;
- the per-iteration time breakdown from Megatron's timer lines, one bar per timer and run.

Only ``logstat plot`` imports this module: altair is heavy and the other commands do not need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import altair as alt
import polars as pl
from logstat.analytics import formulas
from logstat.parsers.schema import run_names

from logstat.files import write_new

#: the token budget of seed 000's figure ("compute-days to train on 100b tokens").
TOKENS_100B = 100e9
FORMATS = ("html", "png", "svg")
#: legends below the plot, long labels (log file names, configurations) not cut.
_LEGEND = alt.Legend(orient="bottom", direction="vertical", labelLimit=600)


def _run(frame: pl.DataFrame) -> pl.Expr:
    """The run's log file name, with the directories that tell same-named logs (train.log) apart."""
    names = dict(zip(frame["path"].to_list(), run_names(frame["path"]).to_list(), strict=True))
    return pl.col("path").replace_strict(names, default=None, return_dtype=pl.String).alias("run")


def _configuration() -> pl.Expr:
    """What makes runs one line of the figure: stack, model size, TP, ZeRO, micro batch.

    Not PP nor DP: they grow with the number of GPUs along a line (one node per stage in the seed).
    """
    size_b = pl.col("model_size_b")
    # a tiny test model would round to "0.0B", which reads as no model
    size = (
        pl.when(size_b < 1e-3)
        .then(pl.format("{}K", (size_b * 1e6).round(0).cast(pl.Int64)))
        .when(size_b < 0.05)
        .then(pl.format("{}M", (size_b * 1e3).round(0).cast(pl.Int64)))
        .otherwise(pl.format("{}B", size_b.round(1)))
    )
    return pl.concat_str(
        [
            pl.col("family").fill_null("unknown"),
            size.fill_null("?B"),
            pl.format("TP{}", pl.col("tp").fill_null(1)),
            pl.format("ZeRO {}", pl.col("zero_stage")).fill_null("no ZeRO"),
            pl.format("mbs {}", pl.col("micro_batch_size")).fill_null("mbs ?"),
        ],
        separator=", ",
    ).alias("configuration")


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
            _run(runs),
            _configuration(),
            pl.col("gpus"),
            pl.col("sec_per_iter"),
            pl.col("tokens_per_sec"),
            days.alias("days"),
            formulas.gpu_days(days=days, gpus=pl.col("gpus")).alias("gpu_days"),
        )
        .sort("configuration", "gpus", "run")
    )


def gpu_days_chart(runs: pl.DataFrame, *, tokens: float = TOKENS_100B) -> alt.LayerChart:
    """GPU-days to train ``tokens`` against the number of GPUs, per configuration (seed 000's figure).

    Each point is labelled with its log file, so a static PNG can be checked against the table.
    """
    data = gpu_days_data(runs, tokens=tokens)
    budget = f"{tokens / 1e9:g}B"
    base = alt.Chart(data).encode(
        x=alt.X("gpus:Q", title="GPUs", scale=alt.Scale(type="log", base=2)),
        y=alt.Y("gpu_days:Q", title=f"GPU-days for {budget} tokens (days x GPUs)"),
        color=alt.Color("configuration:N", title="Configuration", legend=_LEGEND),
        tooltip=[
            "run",
            "configuration",
            "gpus",
            alt.Tooltip("sec_per_iter:Q", title="s/iteration", format=".1f"),
            alt.Tooltip("tokens_per_sec:Q", title="tokens/s", format=",.0f"),
            alt.Tooltip("days:Q", title="days", format=".1f"),
            alt.Tooltip("gpu_days:Q", title="GPU-days", format=",.0f"),
        ],
    )
    lines = base.mark_line(point=alt.OverlayMarkDef(size=60))
    labels = base.mark_text(align="left", dx=8, fontSize=10).encode(text="run:N")
    title = f"GPU-days to train {budget} tokens vs number of GPUs"
    return alt.layer(lines, labels).properties(title=title, width=520, height=320)


def loss_data(iterations: pl.DataFrame) -> pl.DataFrame:
    """The logged training loss of each run, by iteration. A nan or inf loss (a diverged or overflowed
    step) cannot be drawn: it stays in the iterations frame and the tables, not in the chart."""
    return (
        iterations.filter(pl.col("loss").is_finite())
        .select(_run(iterations), "iteration", "loss", "family", "line")
        .sort("run", "iteration")
    )


def loss_chart(iterations: pl.DataFrame) -> alt.Chart:
    """Training loss against iteration, one line per run."""
    return (
        alt.Chart(loss_data(iterations), title="Training loss vs iteration")
        .mark_line(point=True)
        .encode(
            x=alt.X("iteration:Q", title="Iteration (optimizer step)"),
            y=alt.Y("loss:Q", title="Loss (nats per token)", scale=alt.Scale(zero=False)),
            color=alt.Color("run:N", title="Run (log file)", legend=_LEGEND),
            tooltip=["run", "iteration", alt.Tooltip("loss:Q", format=".4f"), "family", "line"],
        )
        .properties(width=520, height=320)
    )


def timer_data(timers: pl.DataFrame) -> pl.DataFrame:
    """Median milliseconds of each timer of each run over its logged steps.

    Timers printed before the first step (setup, checkpoint loading) happen once, not per
    iteration, and are left out.
    """
    return (
        timers.filter(pl.col("iteration").is_not_null() & pl.col("ms").is_finite())
        .group_by(_run(timers), "timer")
        .agg(pl.col("ms").median().alias("median_ms"), pl.len().alias("steps"))
        .sort("run", "timer")
    )


def timer_chart(timers: pl.DataFrame) -> alt.FacetChart:
    """Per-iteration time breakdown from Megatron's ``time (ms) |`` lines, one bar per timer and run.

    Bars side by side, not stacked: Megatron's timers nest (e.g. ``backward`` contains the
    gradient all-reduce), so stacking them would count time twice.
    """
    title = "Per-iteration time breakdown (Megatron timers, median over logged steps)"
    return (
        alt.Chart(timer_data(timers))
        .mark_bar()
        .encode(
            y=alt.Y("timer:N", title=None, sort="-x"),
            x=alt.X("median_ms:Q", title="Time per iteration (ms, median)"),
            color=alt.Color("run:N", title="Run (log file)", legend=_LEGEND),
            tooltip=["run", "timer", alt.Tooltip("median_ms:Q", title="ms", format=",.1f"), "steps"],
        )
        .properties(width=520, height=alt.Step(14))
        .facet(row=alt.Row("run:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))
        .resolve_scale(y="independent")
        .properties(title=title)
    )


def charts_of(
    runs: pl.DataFrame, iterations: pl.DataFrame, timers: pl.DataFrame
) -> dict[str, alt.TopLevelMixin]:
    """The charts that have data, by file stem."""
    charts = {}
    if not gpu_days_data(runs).is_empty():
        charts["gpu_days_100b"] = gpu_days_chart(runs)
    if not loss_data(iterations).is_empty():
        charts["loss"] = loss_chart(iterations)
    if not timer_data(timers).is_empty():
        charts["time_breakdown"] = timer_chart(timers)
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

"""Per-run summary columns (SUMMARY_SCHEMA) computed from the runs and iterations frames.

Steady state: the first ``warmup`` logged steps include start-up (compilation, allocator warm-up,
pipeline fill), so seconds per iteration is the median of the logged steps after them (DESIGN.md
"Warm-up"). Where a log has no per-step time, it comes from samples/s: DeepSpeed's per-step
throughput (median after warm-up) or HF Trainer's final ``train_samples_per_second`` (the seed's
``glob_bs / samples_per_second``), else HF's ``train_runtime / steps``, ``1 / train_steps_per_second``
or tqdm's rate of the training bar; the ``sec_per_iter_source`` column says which. All arithmetic is in polars expressions built from the
pure functions of :mod:`logstat.analytics.formulas`.
"""

from __future__ import annotations

import polars as pl
from logstat.analytics import formulas
from logstat.analytics.gpus import GPUS, peak_tflops
from logstat.parsers.schema import RUNS_SCHEMA, SUMMARY_SCHEMA

GIB_PER_GB = 2**30 / 1e9
#: a logged model size further than this from ours is reported in ``model_size_note``.
MODEL_SIZE_TOLERANCE = 0.005
PRECISIONS = ("fp16", "bf16", "fp32")


def _f(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Float64)


def _measured(name: str) -> pl.Expr:
    """A duration or rate only if it can be one: a garbled line's nan, inf, 0 or negative is no
    measurement (it would make the median and every number derived from it wrong or infinite)."""
    value = pl.col(name).cast(pl.Float64)
    return pl.when(value.is_finite() & (value > 0)).then(value)


def step_stats(iterations: pl.DataFrame, warmup: int) -> pl.DataFrame:
    """Per run: distinct steps, and medians of step time and samples/s over the steps after warm-up."""
    steady = pl.int_range(pl.len()).over("path") >= warmup
    return (
        iterations.sort("path", "iteration")
        .with_columns(
            steady=steady, elapsed_ms=_measured("elapsed_ms"), samples_per_sec=_measured("samples_per_sec")
        )
        .group_by("path")
        .agg(
            iterations=pl.col("iteration").n_unique(),
            logged_steps=pl.len(),
            steady_steps=pl.col("elapsed_ms").filter(pl.col("steady")).count(),
            steady_elapsed_ms=pl.col("elapsed_ms").filter(pl.col("steady")).median(),
            steady_samples_per_sec=pl.col("samples_per_sec").filter(pl.col("steady")).median(),
            steady_samples_steps=pl.col("samples_per_sec").filter(pl.col("steady")).count(),
        )
    )


def _peak_expr() -> pl.Expr:
    """Dense peak TFLOP/s of the run's GPU model at its precision (null when the GPU is unknown)."""
    table = {f"{name}|{precision}": peak_tflops(name, precision) for name in GPUS for precision in PRECISIONS}
    key = pl.col("gpu_model") + "|" + pl.col("precision").fill_null("fp16")
    return key.replace_strict(table, default=None, return_dtype=pl.Float64)


def summarize(runs: pl.DataFrame, iterations: pl.DataFrame, *, warmup: int = 1) -> pl.DataFrame:
    """``runs`` with the SUMMARY_SCHEMA columns added (replacing them if present)."""
    stats = step_stats(iterations, warmup)
    base = runs.select(list(RUNS_SCHEMA)).join(stats, on="path", how="left")
    gbs = _f("global_batch_size")
    from_elapsed = _f("steady_elapsed_ms") / 1000
    from_samples = formulas.sec_per_iter_from_samples(
        global_batch=gbs, samples_per_sec=_f("steady_samples_per_sec")
    )
    from_final = formulas.sec_per_iter_from_samples(
        global_batch=gbs, samples_per_sec=_measured("final_samples_per_sec")
    )
    from_runtime, from_steps_rate, from_progress = _hf_step_time()
    sec_per_iter = pl.coalesce(
        from_elapsed, from_samples, from_final, from_runtime, from_steps_rate, from_progress
    )
    source = (
        pl.when(from_elapsed.is_not_null())
        .then(
            pl.format(
                "median of {} logged step times after the first {}", pl.col("steady_steps"), pl.lit(warmup)
            )
        )
        .when(from_samples.is_not_null())
        .then(
            pl.format(
                "global batch / median samples/s of {} steps after the first {}",
                pl.col("steady_samples_steps"),
                pl.lit(warmup),
            )
        )
        .when(from_final.is_not_null())
        .then(pl.lit("global batch / final train_samples_per_second"))
        .when(from_runtime.is_not_null())
        .then(pl.format("final train_runtime / {} steps", _hf_steps().cast(pl.Int64)))
        .when(from_steps_rate.is_not_null())
        .then(pl.lit("1 / final train_steps_per_second"))
        .when(from_progress.is_not_null())
        .then(pl.lit("tqdm rate of the training progress bar (last update)"))
        .when(pl.col("logged_steps") > 0)
        .then(
            pl.format(
                "no steady state: {} logged step(s), warm-up {}", pl.col("logged_steps"), pl.lit(warmup)
            )
        )
    )
    vocab = pl.coalesce(_f("vocab_size"), _f("padded_vocab_size"))
    flops_vocab = pl.coalesce(_f("padded_vocab_size"), _f("vocab_size"))
    size_b = (
        formulas.gpt2_params(
            hidden=_f("hidden_size"), layers=_f("num_layers"), vocab=vocab, seq_len=_f("seq_len")
        )
        / 1e9
    )
    out = base.with_columns(
        warmup_skipped=pl.min_horizontal(pl.col("logged_steps").fill_null(0), pl.lit(warmup)),
        sec_per_iter=sec_per_iter,
        sec_per_iter_source=source,
        model_size_b=size_b,
    ).with_columns(
        samples_per_sec=gbs / pl.col("sec_per_iter"),
    )
    out = out.with_columns(
        tokens_per_sec=pl.col("samples_per_sec") * _f("seq_len"),
        model_size_note=_model_size_note(),
        tflops_per_gpu=_by_checkpointing(
            lambda ckpt: formulas.seed_tflops_per_gpu(
                size_b=pl.col("model_size_b"),
                seq_len=_f("seq_len"),
                global_batch=gbs,
                sec_per_iter=pl.col("sec_per_iter"),
                gpus=_f("gpus"),
                checkpointing=ckpt,
            )
        ),
        tflops_per_gpu_megatron=_by_checkpointing(
            lambda ckpt: formulas.tflops_per_gpu(
                flops_per_iteration=formulas.megatron_flops_per_iteration(
                    global_batch=gbs,
                    seq_len=_f("seq_len"),
                    layers=_f("num_layers"),
                    hidden=_f("hidden_size"),
                    vocab=flops_vocab,
                    checkpointing=ckpt,
                ),
                sec_per_iter=pl.col("sec_per_iter"),
                gpus=_f("gpus"),
            )
        ),
    )
    out = out.with_columns(
        mfu=formulas.mfu(tflops_per_gpu=pl.col("tflops_per_gpu"), peak_tflops=_peak_expr())
    )
    return (
        out.with_columns(
            iterations=pl.col("iterations").fill_null(0),
            warmup_skipped=pl.col("warmup_skipped").fill_null(0),
        )
        .select([*RUNS_SCHEMA, *SUMMARY_SCHEMA])
        .cast(SUMMARY_SCHEMA)
    )


def _hf_steps() -> pl.Expr:
    """The steps HF Trainer's final metrics cover: the step ``Trainer.train()`` returned, else the planned
    ``max_steps`` (``speed_metrics`` is given ``max_steps`` as the step count)."""
    return pl.coalesce(_f("final_steps"), _f("train_iters"))


def _hf_step_time() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Seconds per step of an HF Trainer run whose logged dicts carry no time: ``train_runtime / steps``,
    ``1 / train_steps_per_second``, and tqdm's rate of the training bar, in that order of preference.

    ``train_steps_per_second`` is ``steps / train_runtime`` rounded to 3 decimals (``speed_metrics``;
    today's dicts print it ``.4g``): 0.007 for a 137 s step, so ``train_runtime / steps`` is preferred
    where the steps are known and agree with it (a run resumed from a checkpoint timed fewer steps)."""
    steps = _hf_steps()
    runtime = _measured("final_train_runtime_s")
    logged_rate = _measured("final_steps_per_sec")
    agrees = logged_rate.is_null() | ((steps / runtime - logged_rate).abs() <= 0.0005 + 0.0005 * logged_rate)
    from_runtime = pl.when((steps > 0) & agrees).then(runtime / steps)
    return from_runtime, 1 / logged_rate, _measured("progress_sec_per_iter")


def _by_checkpointing(build) -> pl.Expr:
    """The formula with the factor for the run's activation checkpointing; null when unknown."""
    ckpt = pl.col("activation_checkpointing")
    return pl.when(ckpt).then(build(True)).when(~ckpt).then(build(False))


def _model_size_note() -> pl.Expr:
    """Say when the log's own "Model size" disagrees with ours, and why when it used 2**30."""
    logged = _f("logged_model_size")
    ours = pl.col("model_size_b")
    off = (logged / ours - 1).abs()
    as_gib = (logged * GIB_PER_GB / ours - 1).abs()
    return (
        pl.when(logged.is_null() | ours.is_null() | (off <= MODEL_SIZE_TOLERANCE))
        .then(None)
        .when(as_gib <= 0.01)
        .then(
            pl.format(
                "log says {}B: counted in 2**30, which is {}e9; computed {}B (1e9) from the shape",
                logged,
                (logged * GIB_PER_GB).round(2),
                ours.round(2),
            )
        )
        .otherwise(pl.format("log says {}B; computed {}B from the shape", logged, ours.round(2)))
    )

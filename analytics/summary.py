"""Per-run summary columns (SUMMARY_SCHEMA) computed from the runs and iterations frames.

Steady state: the first ``warmup`` logged steps include start-up (compilation, allocator warm-up,
pipeline fill), so seconds per iteration is the median of the logged steps after them (DESIGN.md
"Warm-up"). Where a log has no per-step time, it comes from samples/s: DeepSpeed's per-step
throughput (median after warm-up) or HF Trainer's final ``train_samples_per_second`` (the seed's
``glob_bs / samples_per_second``), else HF's ``train_runtime / steps``, ``1 / train_steps_per_second``
or tqdm's rate of the training bar (the only one of a run stopped early: transformers 4's final metrics
count the planned steps; of a run resumed from a checkpoint, only ``train_runtime`` over the steps after
it: transformers 4's samples/s count the whole schedule); the ``sec_per_iter_source`` column says which. DeepSpeed's flops
profiler times one profiled micro-batch (its ``iter latency`` and ``samples/second``), not a step, so
it is no source of them.

MFU counts model FLOPs (PaLM's definition, no recomputed forward), HFU the hardware FLOPs of the
run's activation checkpointing. A log's own TFLOP/s figure is shown beside logstat's, and a
disagreement beyond ``TFLOPS_TOLERANCE`` is added to ``warnings`` with the likely counting rule
behind it. The ZeRO model-state estimate is shown beside the logged peak allocated memory.

All arithmetic is in polars expressions built from the pure functions of
:mod:`logstat.analytics.formulas`.
"""

from __future__ import annotations

import itertools

import polars as pl
from logstat.analytics import formulas
from logstat.analytics.gpus import GPUS, peak_tflops
from logstat.parsers.schema import MIB, RUNS_SCHEMA, SUMMARY_SCHEMA

GIB_PER_GB = 2**30 / 1e9
#: a log's own TFLOP/s further than this from logstat's count is reported in ``warnings``.
TFLOPS_TOLERANCE = 0.10
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
    """Per run: distinct steps, and medians of step time and samples/s over the steps after warm-up of the
    last launch that logged any (``timed_launch``: a relaunch starts up again, perhaps on other GPUs or
    batches, and the run's facts are its last launch's); under a batch-size rampup (Megatron's
    ``--rampup-batch-size``), over those at the run's last batch size, and under a sequence-length
    curriculum (Megatron-DeepSpeed's) at its last length (``last_seq_len``). The memory peak is the last launch's
    that logged one; ``evaluation_s`` the time of the last launch's evaluations."""
    batch, launch, seq = pl.col("global_batch_size"), pl.col("launch").fill_null(0), pl.col("seq_len")
    at_last_batch = batch.is_null() | (batch == _last_launchs(batch, launch).over("path"))
    at_last_length = seq.is_null() | (seq == _last_launchs(seq, launch).over("path"))
    after_warmup = pl.int_range(pl.len()).over("path", "launch") >= warmup
    timed = launch == launch.filter(after_warmup).max().over("path")
    steady_tflops = pl.col("logged_tflops_per_gpu").filter(pl.col("steady"))
    # DeepSpeed's flops profiler times one step past the first by design (engine.py profiles at
    # global_steps == profile_step, counted after each step): its figure stands where no steady one does
    by_profiler = (pl.col("family") == "deepspeed") & pl.col("logged_tflops_per_gpu").is_not_null()
    profiled = pl.col("logged_tflops_per_gpu").filter(
        by_profiler & (launch == launch.filter(by_profiler).max())
    )
    profiled_only = (steady_tflops.count() == 0) & (profiled.count() > 0)
    memory = pl.col("mem_max_allocated_mb")
    return (
        iterations.sort("path", "iteration")
        .with_columns(launch.fill_null(0))
        .with_columns(steady=after_warmup & timed & at_last_batch & at_last_length)
        .with_columns(
            elapsed_ms=_measured("elapsed_ms"),
            samples_per_sec=_measured("samples_per_sec"),
            logged_tflops_per_gpu=_measured("logged_tflops_per_gpu"),
            mem_max_allocated_mb=_measured("mem_max_allocated_mb"),
        )
        .group_by("path")
        .agg(
            iterations=pl.col("iteration").n_unique(),
            last_step=pl.col("iteration").max(),
            # the steps between logged ones (a single one: its own step, the first multiple of the interval)
            step_interval=pl.col("iteration")
            .unique()
            .sort()
            .diff()
            .min()
            .fill_null(pl.col("iteration").min()),
            logged_steps=pl.len(),
            timed_steps=(pl.col("elapsed_ms").is_not_null() | pl.col("samples_per_sec").is_not_null()).sum(),
            nan_losses=_nan_loss().sum(),
            first_nan_loss=pl.col("iteration").filter(_nan_loss()).min(),
            steady_steps=pl.col("elapsed_ms").filter(pl.col("steady")).count(),
            ramped=batch.drop_nulls().n_unique() > 1,
            lengthened=seq.drop_nulls().n_unique() > 1,
            last_seq_len=_last_launchs(seq, launch),
            steady_elapsed_ms=pl.col("elapsed_ms").filter(pl.col("steady")).median(),
            steady_samples_per_sec=pl.col("samples_per_sec").filter(pl.col("steady")).median(),
            steady_samples_steps=pl.col("samples_per_sec").filter(pl.col("steady")).count(),
            steady_logged_tflops=pl.when(profiled_only)
            .then(profiled.median())
            .otherwise(steady_tflops.median()),
            steady_logged_tflops_steps=pl.when(profiled_only)
            .then(profiled.count())
            .otherwise(steady_tflops.count()),
            logged_tflops_family=pl.when(profiled_only)
            .then(pl.lit("deepspeed"))
            .otherwise(
                pl.col("family")
                .filter(pl.col("steady") & pl.col("logged_tflops_per_gpu").is_not_null())
                .first()
            ),
            logged_tflops_in_warmup=profiled_only,
            timed_launch=launch.filter(pl.col("steady")).first(),
            # the evaluations of the last launch, which its training session's run time counts (HF Trainer)
            evaluation_s=pl.col("eval_runtime_s").cast(pl.Float64).filter(launch == launch.max()).sum(),
            # the allocator's running peak: the largest of every logged step, warm-up included
            max_allocated_mb=memory.filter(launch == launch.filter(memory.is_not_null()).max()).max(),
        )
    )


def _last_launchs(value: pl.Expr, launch: pl.Expr) -> pl.Expr:
    """The last ``value`` the last launch logged that logged one, in step order: a relaunch with another
    batch size may stop below the steps an earlier launch logged."""
    logged = launch.filter(value.is_not_null())
    return value.filter(launch == logged.max()).drop_nulls().last()


def _of_launch() -> pl.Expr:
    """`` of relaunch N`` where the steady steps are a relaunch's, else nothing: N is the iteration rows'
    ``launch`` (0 the first launch, so relaunch 1 the first relaunch)."""
    launch = pl.col("timed_launch")
    return pl.when(launch > 0).then(pl.format(" of relaunch {}", launch)).otherwise(pl.lit(""))


def _peak_expr() -> pl.Expr:
    """Dense peak TFLOP/s of the run's GPU model at its precision (null when the GPU is unknown)."""
    table = {f"{name}|{precision}": peak_tflops(name, precision) for name in GPUS for precision in PRECISIONS}
    key = pl.col("gpu_model") + "|" + pl.col("precision").fill_null("fp16")
    return key.replace_strict(table, default=None, return_dtype=pl.Float64)


def summarize(runs: pl.DataFrame, iterations: pl.DataFrame, *, warmup: int = 1) -> pl.DataFrame:
    """``runs`` with the SUMMARY_SCHEMA columns added (replacing them if present)."""
    stats = step_stats(iterations, warmup).join(steps_read_twice(iterations), on="path", how="left")
    base = (
        runs.lazy().select(list(RUNS_SCHEMA)).join(stats.lazy(), on="path", how="left", maintain_order="left")
    )
    gbs = _f("global_batch_size")
    from_elapsed = _f("steady_elapsed_ms") / 1000
    from_samples = formulas.sec_per_iter_from_samples(
        global_batch=gbs, samples_per_sec=_f("steady_samples_per_sec")
    )
    from_final = formulas.sec_per_iter_from_samples(
        global_batch=gbs, samples_per_sec=_measured("final_samples_per_sec")
    )
    timed = ~_stopped_early()
    from_runtime, from_steps_rate, from_progress = _hf_step_time(timed)
    # the seed's global batch / samples/s, unless it miscounts the samples: an epoch-based run's are its
    # examples times its epochs (trainer.py's num_train_samples), not its steps' samples
    # ... or packed sequences (Axolotl's sample packing counts the dataset's rows): its steps/s says so
    samples_rate, steps_rate = _measured("final_samples_per_sec"), _measured("final_steps_per_sec")
    counted = (from_runtime.is_null() | _to_printed_digits(gbs / from_runtime, samples_rate)) & (
        steps_rate.is_null() | _to_printed_digits(samples_rate / gbs, steps_rate)
    )
    from_final = pl.when(timed & ~_resumed() & counted).then(from_final)
    share = _training_share()
    from_final, from_runtime, from_steps_rate = (
        from_final * share,
        from_runtime * share,
        from_steps_rate * share,
    )
    sec_per_iter = pl.coalesce(
        from_elapsed, from_samples, from_final, from_runtime, from_steps_rate, from_progress
    )
    source = (
        pl.when(from_elapsed.is_not_null())
        .then(
            pl.format(
                "median of {} logged step times after the first {}{}{}{}",
                pl.col("steady_steps"),
                pl.lit(warmup),
                _of_launch(),
                pl.when(pl.col("ramped"))
                .then(pl.lit(" at the last global batch size"))
                .otherwise(pl.lit("")),
                pl.when(pl.col("lengthened"))
                .then(pl.format(" at the last sequence length ({})", pl.col("last_seq_len")))
                .otherwise(pl.lit("")),
            )
        )
        .when(from_samples.is_not_null())
        .then(
            pl.format(
                "global batch / median samples/s of {} steps after the first {}{}",
                pl.col("steady_samples_steps"),
                pl.lit(warmup),
                _of_launch(),
            )
        )
        .when(from_final.is_not_null())
        .then(pl.format("global batch / final train_samples_per_second{}", _less_evaluations()))
        .when(from_runtime.is_not_null())
        .then(pl.format("final train_runtime / {} steps{}", _hf_steps().cast(pl.Int64), _less_evaluations()))
        .when(from_steps_rate.is_not_null())
        .then(pl.format("1 / final train_steps_per_second{}", _less_evaluations()))
        .when(from_progress.is_not_null())
        .then(pl.lit("tqdm rate of the training progress bar (last update)"))
        .when(pl.col("timed_steps") > 0)
        .then(
            pl.format(
                "no steady state: {} logged step(s), warm-up {}", pl.col("logged_steps"), pl.lit(warmup)
            )
        )
        .when(pl.col("logged_steps") > 0)
        .then(pl.format("no step time: {} logged step(s), none timed", pl.col("logged_steps")))
    )
    out = base.with_columns(
        warmup_skipped=pl.min_horizontal(pl.col("logged_steps").fill_null(0), pl.lit(warmup)),
        sec_per_iter=sec_per_iter,
        sec_per_iter_source=source,
        model_size_b=pl.coalesce(_model_params() / 1e9, _logged_size_b()),
        _shape_size_b=_model_params() / 1e9,
        _runtime_sec_per_iter=from_runtime,
    ).with_columns(
        samples_per_sec=gbs / pl.col("sec_per_iter"),
    )
    out = out.with_columns(
        tokens_per_sec=pl.col("samples_per_sec") * _trained_seq_len(),
        model_size_note=_model_size_note(),
        tflops_per_gpu=_by_checkpointing(
            lambda ckpt: formulas.seed_tflops_per_gpu(
                size_b=_model_params(active=True) / 1e9,
                seq_len=_trained_seq_len(),
                global_batch=gbs,
                sec_per_iter=pl.col("sec_per_iter"),
                gpus=_f("gpus"),
                checkpointing=ckpt,
            )
        ),
        tflops_per_gpu_megatron=_by_checkpointing(_megatron_tflops),
    )
    # model FLOPs: no recomputed forward whatever the run's checkpointing (PaLM's MFU)
    model_tflops = _megatron_tflops(checkpointing=False)
    peak = _peak_expr()
    out = out.with_columns(
        mfu=formulas.flops_utilization(tflops_per_gpu=model_tflops, peak_tflops=peak),
        hfu=formulas.flops_utilization(tflops_per_gpu=pl.col("tflops_per_gpu_megatron"), peak_tflops=peak),
        logged_tflops_per_gpu=pl.col("steady_logged_tflops"),
        model_state_gb_pred=_model_state_bytes() / 1e9,
        mem_logged_gb=pl.coalesce(pl.col("max_allocated_mb"), _measured("peak_memory_mib")) * MIB / 1e9,
        _model_tflops=model_tflops,
    ).with_columns(
        mem_pred_ratio=pl.col("model_state_gb_pred") / pl.col("mem_logged_gb"),
        warnings=_with_notes(
            pl.col("warnings"),
            _tflops_disagreement(warmup),
            _nan_losses(),
            _read_twice(),
            _above_peak(),
            _step_times_disagree(),
            _parallel_sizes_disagree(),
        ),
    )
    return (
        out.with_columns(
            iterations=pl.col("iterations").fill_null(0),
            last_iteration=_last_iteration(),
            warmup_skipped=pl.col("warmup_skipped").fill_null(0),
        )
        .select([*RUNS_SCHEMA, *SUMMARY_SCHEMA])
        .cast(SUMMARY_SCHEMA)
        .collect()
    )


def _last_iteration() -> pl.Expr:
    """The step a run got to: its last logged one, or its planned ones where it ended ok within a logging
    interval of them (a run of 2,634 steps logging every 500 logs 2,500 last, and ran them all); a planned
    end short of them (Megatron's ``--exit-duration-in-mins``) keeps its last logged step. HF Trainer's
    returned ``global_step`` (``TrainOutput``, at the training's end) is the step it got to where it is
    further, and so is its training bar's count (``progress_steps``: ProgressCallback updates it at every
    step's end, the dicts come every ``logging_steps``) where a run stopped between two dicts."""
    last, planned = pl.col("last_step"), pl.col("train_iters")
    reached = (pl.col("status") == "ok") & (planned >= last) & (planned - last < pl.col("step_interval"))
    further = pl.max_horizontal(last, pl.col("final_steps"), pl.col("progress_steps"))
    return pl.when(reached.fill_null(False)).then(planned).otherwise(further)


def _model_params(*, active: bool = False) -> pl.Expr:
    """The model's parameters from its shape: a Llama-style shape's (SwiGLU, or grouped-query attention) by
    :func:`formulas.llama_params`, with its heads' widths, FFN width and untied output layer; any other
    shape's by the seed's GPT-2 count (:func:`formulas.gpt2_params`). ``untied_embeddings`` unstated is
    untied for a Llama-style shape (Llama 2 and 3, Mistral 7B, Qwen2 7B on keep a separate output layer);
    an unknown FFN width is 4h and unknown heads eq. 3's (as in :func:`_megatron_tflops`). An MoE run
    (``moe_topk``) counts its ``moe_experts`` in its MoE layers; without their number, which holds most
    of its parameters, its size is unknown (null), not a dense model's. ``active``: the parameters a token
    passes, its ``moe_topk`` experts of each MoE layer (what the seed's FLOPs formula multiplies). The
    vocabulary is the true one when known, else the padded one, for both."""
    hidden, layers = _f("hidden_size"), _f("num_layers")
    vocab = pl.coalesce(_f("vocab_size"), _f("padded_vocab_size"))
    moe, experts = _counted("moe_topk").is_not_null(), _counted("moe_topk" if active else "moe_experts")
    shape = _layer_shape()
    llama = formulas.llama_params(
        **shape,
        layers=layers,
        vocab=vocab,
        untied=pl.col("untied_embeddings").fill_null(True),
        experts=pl.when(moe).then(experts).otherwise(1.0),
        moe_layers=pl.when(moe).then(pl.coalesce(_counted("moe_layers"), layers)).otherwise(0.0),
    )
    llama_style = shape["swiglu"] | _counted("num_query_groups").is_not_null() | moe
    return (
        pl.when(moe & experts.is_null())
        .then(pl.lit(None, pl.Float64))
        .when(llama_style)
        .then(llama)
        .otherwise(
            formulas.gpt2_params(
                hidden=hidden,
                layers=layers,
                vocab=vocab,
                seq_len=_f("seq_len"),
                untied=pl.col("untied_embeddings").fill_null(False),
            )
        )
    )


def _model_state_bytes() -> pl.Expr:
    """ZeRO model-state bytes per GPU (:func:`formulas.zero_model_state_memory`) for the run's stage
    and offloads, over the parameters of one TP x PP rank (no TP or PP in the log: 1), with Adam's
    states (the optimizer of every family logstat reads; logs seldom name it): mixed precision unless
    the run trained in fp32. Null when the stage, the model size, DP, or an offload the stage allows
    is unknown."""
    stage = pl.col("zero_stage")
    params = pl.col("model_size_b") * 1e9 / (_f("tp").fill_null(1) * _f("pp").fill_null(1))
    mixed_precision = pl.col("precision").fill_null("fp16") != "fp32"
    cases: list[tuple[pl.Expr, pl.Expr]] = []
    for zero_stage, mixed in itertools.product((0, 1, 2, 3), (True, False)):
        state_bytes = formulas.model_state_bytes_per_param(optimizer="adam", mixed_precision=mixed)
        # an offload only ZeRO stage >= 1 (optimizer) or 3 (parameters) allows needs no flag below it
        for offload_optimizer in (False, True) if zero_stage >= 1 else (False,):
            for offload_param in (False, True) if zero_stage == 3 else (False,):
                condition = (stage == zero_stage) & (mixed_precision == mixed)
                if zero_stage >= 1:
                    condition &= pl.col("offload_optimizer") == offload_optimizer
                if zero_stage == 3:
                    condition &= pl.col("offload_param") == offload_param
                memory = formulas.zero_model_state_memory(
                    params=params,
                    dp=_f("dp"),
                    stage=zero_stage,
                    state_bytes=state_bytes,
                    offload_optimizer=offload_optimizer,
                    offload_param=offload_param,
                )
                cases.append((condition, memory.gpu_bytes))
    (first_condition, first_bytes), *others = cases
    expr = pl.when(first_condition).then(first_bytes)
    for condition, gpu_bytes in others:
        expr = expr.when(condition).then(gpu_bytes)
    return expr


def _with_notes(notes: pl.Expr, *added: pl.Expr) -> pl.Expr:
    """``notes`` (a list, maybe null) with each of ``added`` appended where it is not null."""
    for note in added:
        listed = notes.fill_null(pl.lit([], dtype=pl.List(pl.String)))
        notes = pl.when(note.is_null()).then(notes).otherwise(listed.list.concat(pl.concat_list(note)))
    return notes


#: a run whose timed steps are in another run too, this many at least and this share of its own, is a
#: copy of the other's output or holds one
COPIED_STEPS, COPIED_SHARE = 3, 0.5
#: the runs a step's copies are looked for among (by name): a step that a thousand files hold is not
#: compared a million times
COPY_CANDIDATES = 8


def steps_read_twice(iterations: pl.DataFrame) -> pl.DataFrame:
    """Per run (``path``) whose timed steps another run logged too, the same step with the same loss, learning
    rate and time to the printed digit (a wall-clock time no other run repeats step after step): ``copied_steps``,
    ``timed_steps`` and ``copied_from``, the run holding most of them. One job's output read from two places
    (a ``tee -a`` copy of every job's output beside the jobs' .out, torchrun's ``--log-dir`` beside the
    job's .out, a tool's copy of the console) counts its steps in each row."""
    keys = ("iteration", "loss", "lr", "elapsed_ms", "samples_per_sec")
    if iterations["path"].n_unique() < 2:  # one run: no other to hold its steps
        schema = {
            "path": pl.String,
            "timed_steps": pl.UInt32,
            "copied_steps": pl.UInt32,
            "copied_from": pl.String,
        }
        return pl.DataFrame(schema=schema)
    timed = (
        iterations.lazy()
        .filter(
            pl.col("elapsed_ms").is_not_null() | pl.col("samples_per_sec").is_not_null(),
            pl.col("loss").is_not_null() | pl.col("lr").is_not_null(),
        )
        .select("path", step=pl.struct(keys).hash())
        .unique()
    )
    held_twice = timed.group_by("step").len().filter(pl.col("len") > 1)
    copied = timed.join(held_twice, on="step", how="semi")
    holders = copied.group_by("step").agg(other=pl.col("path").sort().head(COPY_CANDIDATES))
    most_shared = (
        copied.join(holders, on="step")
        .explode("other")
        .filter(pl.col("other") != pl.col("path"))
        .group_by("path", "other")
        .len()
        .sort("path", "len", "other", descending=[False, True, False])
        .group_by("path", maintain_order=True)
        .agg(copied_from=pl.col("other").first())
    )
    counted = timed.group_by("path").agg(timed_steps=pl.len())
    shared = copied.group_by("path").agg(copied_steps=pl.len())
    return counted.join(shared, on="path").join(most_shared, on="path").collect()


def _read_twice() -> pl.Expr:
    """A note on a run whose steps another run holds too (``steps_read_twice``), else on each row of a job
    id that several rows have (one job's output read from two places, or two clusters' jobs that share an
    id: the note says "if")."""
    copied, timed = pl.col("copied_steps"), pl.col("timed_steps")
    copy = pl.format(
        "{} of its {} timed steps are also in {} (same step, loss, learning rate and time): one run's output "
        "read twice (a tee'd copy, torchrun's --log-dir beside the job's .out) counts its steps in each",
        copied,
        timed,
        pl.col("copied_from"),
    )
    job, rows = pl.col("job_id"), pl.len().over("job_id")
    job_twice = pl.format(
        "job {}: {} rows; if they are one job's output read from two places (a tee'd copy, torchrun's "
        "--log-dir beside the job's .out), its steps are counted in each",
        job,
        rows,
    )
    is_copy = (copied >= COPIED_STEPS) & (copied >= COPIED_SHARE * timed)
    return pl.when(is_copy).then(copy).when(job.is_not_null() & (rows > 1)).then(job_twice)


def _above_peak() -> pl.Expr:
    """A note when the model FLOP/s is above the GPU's peak (MFU over 100%): no run does that, so a fact
    behind the count is wrong (the GPU model, the GPU count, the batch or the shape) or the step time is
    not a whole step's."""
    mfu = pl.col("mfu")
    note = pl.format(
        "MFU {}% is above the {}'s peak: a fact the count takes (GPUs, batch, shape, GPU model) or the step "
        "time is wrong",
        (mfu * 100).round(1),
        pl.col("gpu_model"),
    )
    return pl.when(mfu > 1).then(note)


def _parallel_sizes_disagree() -> pl.Expr:
    """A note when the log's GPUs are not TP x PP x CP x DP (Megatron-LM's initialize_model_parallel divides
    the world so; experts parallelize within DP): one of the sizes is not this run's (a config's default,
    another launch's), and the per-GPU numbers divide by the GPUs."""
    product = _f("tp") * _f("pp") * _f("cp").fill_null(1) * _f("dp")
    note = pl.format(
        "parallel sizes: TP {} x PP {} x CP {} x DP {} = {} GPUs, but the log says {}: one of them is not this "
        "run's",
        pl.col("tp"),
        pl.col("pp"),
        pl.col("cp").fill_null(1),
        pl.col("dp"),
        # a product past int64 (sizes no run has, read off a garbled line) is printed as the float it is
        pl.when(product < 2**62)
        .then(product.cast(pl.Int64).cast(pl.String))
        .otherwise(product.cast(pl.String)),
        pl.col("gpus"),
    )
    return pl.when(product.is_not_null() & _f("gpus").is_not_null() & (product != _f("gpus"))).then(note)


#: how far a run's step time may be from its whole session's (HF's train_runtime over its steps) before
#: one of them is not timing one step: warm-up, saves and a slow first step make the session's longer, not 3x
STEP_TIMES_RATIO = 3.0


def _step_times_disagree() -> pl.Expr:
    """A note when the s/iter taken from the steps is a ``STEP_TIMES_RATIO`` or more away from the final
    train_runtime over the steps: one of the two does not time a step (a rate per micro-batch or per rank,
    another batch size, a session that timed other steps)."""
    chosen, session = pl.col("sec_per_iter"), pl.col("_runtime_sec_per_iter")
    apart = pl.max_horizontal(session / chosen, chosen / session)
    note = pl.format(
        "s/iter {} ({}) and the final train_runtime over the steps ({} s) differ {}x: one of them does not "
        "time one step",
        chosen.round_sig_figs(4),
        pl.col("sec_per_iter_source"),
        session.round_sig_figs(4),
        apart.round_sig_figs(3),
    )
    return pl.when(apart >= STEP_TIMES_RATIO).then(note)


def _nan_loss() -> pl.Expr:
    """A logged step whose loss went nan: printed so, or counted by Megatron's "number of nan iterations"
    with no loss printed (Megatron prints the mean loss only when it is above 0, so nan leaves the line
    without one; a finite one printed beside the count is of the interval's other iterations, the nan ones
    skipped: the training went on)."""
    return pl.col("loss").is_nan() | ((pl.col("nan") > 0) & pl.col("loss").is_null())


def _nan_losses() -> pl.Expr:
    """A note when the logged loss went nan (an fp16 overflow that never recovered, a bad batch): the run
    may have ended ok, its numbers are those of a diverged training."""
    first, count = pl.col("first_nan_loss"), pl.col("nan_losses")
    note = pl.format(
        "loss: nan from iteration {} ({} of {} logged steps)", first, count, pl.col("logged_steps")
    )
    return pl.when(first.is_not_null()).then(note)


def _off_by(value: pl.Expr, reference: pl.Expr) -> pl.Expr:
    """How far ``value`` is from ``reference``, as a fraction of it (0.1 = 10%)."""
    return (value / reference - 1).abs()


def _tflops_disagreement(warmup: int) -> pl.Expr:
    """A note when the log's own TFLOP/s/GPU is off logstat's count (Megatron-LM's, Narayanan et al.
    eq. 3 generalized: like Megatron and DeepSpeed's profiler, it counts attention and logits) by more than
    ``TFLOPS_TOLERANCE``: both numbers, and the counting rule that explains the gap. None when a Megatron
    log's figure is its own rule's (model FLOPs, the recomputed forward not counted): every Megatron-LM
    run with recomputation logs that, and the MFU column is the same count."""
    logged = pl.col("logged_tflops_per_gpu")
    ours = pl.col("tflops_per_gpu_megatron")
    ckpt = pl.col("activation_checkpointing")
    reason = (
        pl.when(pl.col("logged_tflops_family") == "deepspeed")
        .then(
            pl.lit(
                "DeepSpeed's flops profiler counts the FLOPs of one profiled micro-batch (3x its forward, plus "
                "recompute_fwd_factor) over that micro-batch's fwd+bwd+step latency, not a whole step "
                "(every micro-batch of the global batch) over the step time"
            )
        )
        .when(ckpt & (_off_by(logged, pl.col("_model_tflops")) <= TFLOPS_TOLERANCE))
        .then(
            pl.format(
                "the log counts model FLOPs without the recomputed forward ({} by that rule), as Megatron-LM's "
                "num_floating_point_operations does; logstat counts the recomputation of activation checkpointing",
                pl.col("_model_tflops").round_sig_figs(4),
            )
        )
        .when(_off_by(logged, pl.col("tflops_per_gpu")) <= TFLOPS_TOLERANCE)
        .then(
            pl.format(
                "the log counts like the seed formula ({} by that rule), without attention scores and logits",
                pl.col("tflops_per_gpu").round_sig_figs(4),
            )
        )
        .otherwise(
            pl.lit(
                "no counting rule of logstat's matches: the log's own step time differs, or its model has what "
                "logstat's count does not know (a shape fact the log does not print, shared experts, multi-latent "
                "attention, another vocabulary)"
            )
        )
    )
    direction = pl.when(logged > ours).then(pl.lit("above")).otherwise(pl.lit("below"))
    # Megatron-LM's own throughput is model FLOPs by definition: agreeing with that rule is no disagreement
    megatrons_own = (pl.col("logged_tflops_family") == "megatron") & ckpt
    megatrons_own &= _off_by(logged, pl.col("_model_tflops")) <= TFLOPS_TOLERANCE
    return (
        pl.when(
            logged.is_null() | ours.is_null() | (_off_by(logged, ours) <= TFLOPS_TOLERANCE) | megatrons_own
        )
        .then(None)
        .otherwise(
            pl.format(
                "tflops: the log's own {} TFLOP/s/GPU ({}, median of {} step(s) {}) is {}% {} "
                "logstat's {} (Megatron-LM's count, Narayanan et al. 2021 eq. 3 generalized{}); likely reason: {}",
                logged.round_sig_figs(4),
                pl.col("logged_tflops_family"),
                pl.col("steady_logged_tflops_steps"),
                pl.when(pl.col("logged_tflops_in_warmup"))
                .then(pl.format("its profiler timed, all among the first {}", pl.lit(warmup)))
                .otherwise(pl.format("after the first {}", pl.lit(warmup))),
                (_off_by(logged, ours) * 100).round(1),
                direction,
                ours.round_sig_figs(4),
                pl.when(ckpt).then(pl.lit(", recomputed forward counted")).otherwise(pl.lit("")),
                reason,
            )
        )
    )


def _megatron_tflops(checkpointing: bool) -> pl.Expr:
    """TFLOP/s per GPU by Megatron-LM's count (:func:`formulas.megatron_flops_per_iteration`) at the
    steady-state step time, with the run's grouped-query attention, attention width, FFN width,
    SwiGLU and MoE top-k; a fact the log does not give is the GPT-2 default of eq. 3 (no GQA, h/a per
    head, 4h, no SwiGLU, no MoE). The logits count the padded vocabulary the model computes when the
    log gives it. Without the head count the attention is eq. 3's whatever the other facts say (its
    widths are read per head). A count of 0 or less (a garbled line) is no fact."""
    flops_per_iteration = formulas.megatron_flops_per_iteration(
        **_layer_shape(),
        global_batch=_f("global_batch_size"),
        seq_len=_trained_seq_len(),
        layers=_f("num_layers"),
        vocab=pl.coalesce(_f("padded_vocab_size"), _f("vocab_size")),
        checkpointing=checkpointing,
        recomputed_share=(_counted("recomputed_layers") / _f("num_layers")).fill_null(1.0),
        moe_topk=_counted("moe_topk").fill_null(1.0),
        moe_layers=pl.coalesce(_counted("moe_layers"), _f("num_layers")),
    )
    return formulas.tflops_per_gpu(
        flops_per_iteration=flops_per_iteration, sec_per_iter=pl.col("sec_per_iter"), gpus=_f("gpus")
    )


def _layer_shape() -> dict[str, pl.Expr]:
    """A layer's shape as both counts take it (:func:`formulas.llama_params`,
    :func:`formulas.megatron_flops_per_iteration`): the width, the attention's (``_attention_shape``), the
    FFN's (4h unless stated; an expert's the FFN's unless stated, the shared experts' 0), SwiGLU or not."""
    hidden = _f("hidden_size")
    heads, query_groups, kv_channels = _attention_shape()
    ffn = pl.coalesce(_counted("ffn_hidden_size"), 4 * hidden)
    return dict(
        hidden=hidden,
        heads=heads,
        query_groups=query_groups,
        kv_channels=kv_channels,
        ffn_hidden=ffn,
        swiglu=pl.col("swiglu").fill_null(False),
        moe_ffn_hidden=pl.coalesce(_counted("moe_ffn_hidden_size"), ffn),
        shared_ffn_hidden=_counted("moe_shared_ffn_hidden_size").fill_null(0.0),
    )


def _attention_shape() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Heads, query groups and head width of the run's attention: the groups default to the heads (no
    GQA), the width to h / heads; without the head count 1 head of width h in 1 group, eq. 3's attention
    whatever the other facts say (its widths are read per head)."""
    hidden, heads = _f("hidden_size"), _counted("num_heads")
    heads_known = heads.is_not_null()
    query_groups = pl.when(heads_known).then(pl.coalesce(_counted("num_query_groups"), heads)).otherwise(1.0)
    kv_channels = (
        pl.when(heads_known).then(pl.coalesce(_counted("kv_channels"), hidden / heads)).otherwise(hidden)
    )
    return heads.fill_null(1.0), query_groups, kv_channels


def _trained_seq_len() -> pl.Expr:
    """The sequence length of the steady steps: the last logged one under a curriculum (its steps are timed
    at it), else the run's."""
    return pl.coalesce(pl.col("last_seq_len").cast(pl.Float64), _f("seq_len"))


def _counted(name: str) -> pl.Expr:
    """A count of the model's shape as a float, null unless positive."""
    value = _f(name)
    return pl.when(value > 0).then(value)


def _hf_steps() -> pl.Expr:
    """The steps HF Trainer's final metrics cover: the step ``Trainer.train()`` returned, else the planned
    ``max_steps`` (``speed_metrics`` is given ``max_steps`` as the step count); of a run resumed from a
    checkpoint, those after it (``train_runtime`` times this session only)."""
    return pl.coalesce(_f("final_steps"), _stopped_at(), _f("train_iters")) - _f("resumed_step").fill_null(0)


def _stopped_at() -> pl.Expr:
    """The step an HF Trainer run ``_stopped_early`` at: its last logged one, where the steps between its
    logged ones are a twentieth of it at most. Early stopping ends a run at an evaluation, after that
    step's log when the logging interval divides the evaluation interval, else within an interval of it;
    its ``train_runtime`` times the steps it ran."""
    last = _f("last_step")
    return pl.when(_stopped_early() & (_f("step_interval").fill_null(1) <= last / 20)).then(last)


def _resumed() -> pl.Expr:
    """An HF Trainer run resumed from a checkpoint: transformers 4's final samples/s and steps/s count the
    whole schedule over this session's runtime, 5's the steps after the checkpoint, so only ``train_runtime``
    over those steps times a step of either."""
    return (_f("resumed_step") > 0).fill_null(False)


def _stopped_early() -> pl.Expr:
    """An HF Trainer run whose last logged step falls a tenth or more short of the planned ones (early
    stopping), by more than the steps between its logged ones (a run logging every 500 of 950 steps logs
    500 last): transformers 4's final metrics count the planned steps (``speed_metrics`` is given
    ``max_steps``), not those run, so neither its samples/s nor its steps/s times a step."""
    last, planned = _f("last_step"), _f("train_iters")
    short = (last < 0.9 * planned) & (last + _f("step_interval").fill_null(1) <= planned)
    return short.fill_null(False)


def _hf_step_time(timed: pl.Expr) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Seconds per step of an HF Trainer run whose logged dicts carry no time: ``train_runtime / steps``
    (of a run stopped early, the steps it ran: ``_stopped_at``), ``1 / train_steps_per_second`` (where its
    final metrics are ``timed``: not ``_stopped_early``), and tqdm's rate of the training bar, in that order
    of preference.

    ``train_steps_per_second`` is ``steps / train_runtime`` rounded to 3 decimals (``speed_metrics``;
    today's dicts print it ``.4g``): 0.007 for a 137 s step, so ``train_runtime / steps`` is preferred
    where the steps are known and agree with it (a run resumed from a checkpoint at a step not logged timed
    fewer steps), or the run's resumed step is known."""
    steps = _hf_steps()
    runtime = _measured("final_train_runtime_s")
    logged_rate = _measured("final_steps_per_sec")
    agrees = logged_rate.is_null() | _to_printed_digits(steps / runtime, logged_rate)
    counted = ((agrees | _resumed()) & timed) | _stopped_at().is_not_null()
    from_runtime = pl.when((steps > 0) & counted).then(runtime / steps)
    from_rate = pl.when(timed & ~_resumed()).then(1 / logged_rate)
    return from_runtime, from_rate, _measured("progress_sec_per_iter")


def _to_printed_digits(computed: pl.Expr, printed: pl.Expr) -> pl.Expr:
    """``computed`` agrees with a rate HF Trainer printed to 3 decimals (``speed_metrics``) or 4 significant
    digits (today's dicts)."""
    return (computed - printed).abs() <= 0.0005 + 0.0005 * printed


def _training_share() -> pl.Expr:
    """The share of HF Trainer's ``train_runtime`` spent training: its final metrics time the whole training
    loop (trainer.py's ``speed_metrics`` from the loop's start), the evaluations inside it (``eval_steps``)
    too, which its logged dicts time (``eval_runtime``); 1 where none was logged."""
    evaluations = pl.col("evaluation_s") / _measured("final_train_runtime_s")
    return pl.when(_evaluations_taken()).then(1 - evaluations).otherwise(1.0)


def _less_evaluations() -> pl.Expr:
    """`` less N s of evaluation`` where ``_training_share`` took the evaluations out."""
    less = pl.format(" less {} s of evaluation", pl.col("evaluation_s").round(1))
    return pl.when(_evaluations_taken()).then(less).otherwise(pl.lit(""))


def _evaluations_taken() -> pl.Expr:
    """Evaluations were logged, and took less than the training session's run time."""
    evaluations = pl.col("evaluation_s")
    return (evaluations > 0) & (_measured("final_train_runtime_s") > evaluations)


def _by_checkpointing(build) -> pl.Expr:
    """The formula with the factor for the run's activation checkpointing; null when unknown."""
    ckpt = pl.col("activation_checkpointing")
    return pl.when(ckpt).then(build(True)).when(~ckpt).then(build(False))


def _logged_size_b() -> pl.Expr:
    """The log's own parameter count (billions) where it can be one: the size where no shape is printed
    (HF Trainer's trainable parameters, nanoGPT's, DeepSpeed's profiler or pipeline count)."""
    logged = _f("logged_model_size")
    return pl.when((logged > 0) & logged.is_finite()).then(logged)


def _model_size_note() -> pl.Expr:
    """Say when the log's own "Model size" disagrees with ours, and why when it used 2**30; or that the size
    is the log's own count, where the log prints no shape."""
    logged = _f("logged_model_size")
    ours = pl.col("_shape_size_b")
    off = (logged / ours - 1).abs()
    as_gib = (logged * GIB_PER_GB / ours - 1).abs()
    return (
        pl.when(ours.is_null() & pl.col("model_size_b").is_not_null())
        .then(
            pl.concat_str(
                pl.lit("the log's own parameter count: it prints no shape to count from"),
                pl.when(pl.col("family") == "hf-trainer")
                .then(pl.lit(" (HF Trainer counts the trainable parameters: an adapter's alone under PEFT)"))
                .otherwise(pl.lit("")),
            )
        )
        # a count printed in billions to two decimals (DeepSpeed's zero.Init) that is ours, rounded
        .when(logged.is_null() | ours.is_null() | (off <= MODEL_SIZE_TOLERANCE) | (ours.round(2) == logged))
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

"""The frames that are the contract between the layers, each schema declared once.

``runs``: one row per run (one log, or a job's ``.out`` and ``.err``); ``iterations``: one per logged
step; ``timers``: one per step and timer name. Facts come from the log (or the run's manifest), never
guessed: unknown is null. Units are in the column names.
"""

import os
from collections import Counter
from pathlib import Path

import polars as pl

#: bytes of the MiB the memory columns count in (Megatron's "memory (MB)", DeepSpeed's "GB" back to MiB,
#: minGPT's MiB, LitGPT's GB of 1e9 bytes converted)
MIB = 2**20

RUNS_SCHEMA: dict[str, pl.DataType] = {
    "path": pl.String,  # the run's main log file
    "paths": pl.List(pl.String),  # every file read for this run (.out + .err of one job)
    "family": pl.String,  # primary: a registered family (parsers/registry.py), megatron-deepspeed, unknown
    "families": pl.List(pl.String),  # every family seen in the run's lines
    "job_id": pl.String,
    "status": pl.String,  # ok | failed | timeout | cancelled | incomplete | empty | unreadable
    "reason": pl.String,  # the evidence line (quoted) or why nothing was read
    "reason_line": pl.Int64,  # line number of the evidence
    "reason_path": pl.String,  # the file holding the evidence line (a job's .err, say)
    # the other failure evidence as "file:line: evidence", in reading order, one per kind, at most 5
    "consequences": pl.List(pl.String),
    "gpus": pl.Int64,  # world size
    "gpus_per_node": pl.Int64,
    "nodes": pl.Int64,
    "tp": pl.Int64,
    "pp": pl.Int64,
    "cp": pl.Int64,  # context parallelism (Megatron-LM's --context-parallel-size): splits each sequence
    "dp": pl.Int64,
    "micro_batch_size": pl.Int64,
    "global_batch_size": pl.Int64,
    "gas": pl.Int64,  # gradient accumulation steps (= PP chunks with pipeline parallelism)
    "seq_len": pl.Int64,
    "hidden_size": pl.Int64,
    "ffn_hidden_size": pl.Int64,
    "num_layers": pl.Int64,
    "num_heads": pl.Int64,
    "vocab_size": pl.Int64,
    "padded_vocab_size": pl.Int64,
    "num_query_groups": pl.Int64,  # grouped-query attention's key/value heads; null when GQA is off
    "kv_channels": pl.Int64,  # width of an attention head (Megatron's default h / heads)
    "swiglu": pl.Boolean,  # gated MLP of three matrices (Megatron's --swiglu)
    # a separate output layer, not the token embedding's matrix (Megatron's --untie-embeddings-and-output-weights,
    # HF's tie_word_embeddings false); null when the log does not say
    "untied_embeddings": pl.Boolean,
    "moe_topk": pl.Int64,  # experts a token is routed to; null without MoE
    "moe_experts": pl.Int64,  # experts of each MoE layer (Megatron's --num-experts); null without MoE
    "moe_ffn_hidden_size": pl.Int64,  # an expert's FFN width (Megatron's --moe-ffn-hidden-size); null: ffn's
    "moe_shared_ffn_hidden_size": pl.Int64,  # the shared experts' FFN width a token also passes; null: none
    "moe_layers": pl.Int64,  # the layers whose MLP is MoE (Megatron's --moe-layer-freq); null: all, with MoE
    "zero_stage": pl.Int64,
    "deepspeed_config": pl.String,  # the DeepSpeed config an HF Trainer run names (TrainingArguments' deepspeed)
    "offload_optimizer": pl.Boolean,
    "offload_param": pl.Boolean,
    "activation_checkpointing": pl.Boolean,
    "recomputed_layers": pl.Int64,  # layers whose forward runs twice, when not all (Megatron's block method)
    "precision": pl.String,  # fp16 | bf16 | fp32
    "gpu_model": pl.String,  # normalised, e.g. "V100-SXM2-32GB", "A100-SXM4-80GB", "H100-SXM"
    "train_iters": pl.Int64,  # planned training steps (Megatron's train_iters, HF's max_steps)
    "train_epochs": pl.Int64,  # planned epochs (torchtune's config epochs)
    "steps_per_epoch": pl.Int64,  # optimizer steps an epoch takes (torchtune's training bar's total)
    "logged_model_size": pl.Float64,  # the log's own "Model size" number, as printed (billions in its unit)
    "final_train_runtime_s": pl.Float64,  # HF Trainer's train_runtime
    "final_samples_per_sec": pl.Float64,  # HF Trainer's train_samples_per_second
    "final_steps": pl.Int64,  # HF Trainer's global_step / max_steps reached
    "final_steps_per_sec": pl.Float64,  # HF Trainer's train_steps_per_second
    "resumed_step": pl.Int64,  # the step of the checkpoint the last training resumed from (HF Trainer, Megatron)
    "progress_sec_per_iter": pl.Float64,  # tqdm's rate of the training progress bar, last update
    "progress_steps": pl.Int64,  # the training progress bar's count at its last update (HF: steps done)
    "avg_epoch_time_s": pl.Float64,  # minGPT/Lightning benchmark
    "peak_memory_mib": pl.Float64,  # minGPT/Lightning benchmark
    "stack": pl.String,  # a `logstat run` runner stack (manifest): megatron-deepspeed, hf-zero3, ddp-powersgd
    "spec_name": pl.String,  # a `logstat run` directory's spec name (manifest)
    "run_id": pl.String,  # a `logstat run` directory's name, <UTC time>-<short id> (manifest)
    "provenance": pl.String,  # JSON object: fact name -> "family:line" (or "manifest")
    "warnings": pl.List(pl.String),  # lines or files that could not be read ("family:line: why")
}

ITERATIONS_SCHEMA: dict[str, pl.DataType] = {
    "path": pl.String,  # run key (the run's main log file)
    "iteration": pl.Int64,
    "launch": pl.Int64,  # the job's launch that logged the step: 0 the first, 1 after a relaunch (requeue)...
    "elapsed_ms": pl.Float64,  # time of this step (Megatron: elapsed time per iteration)
    "samples_per_sec": pl.Float64,
    "tokens_per_sec": pl.Float64,
    "global_batch_size": pl.Int64,  # the step's, where logged each step (Megatron: a batch-size rampup)
    "seq_len": pl.Int64,  # the step's, where logged each step (Megatron-DeepSpeed: a sequence-length curriculum)
    "loss": pl.Float64,
    "lr": pl.Float64,
    "loss_scale": pl.Float64,
    "grad_norm": pl.Float64,
    "skipped": pl.Int64,
    "nan": pl.Int64,
    "mem_allocated_mb": pl.Float64,
    "mem_max_allocated_mb": pl.Float64,
    "logged_tflops_per_gpu": pl.Float64,  # Megatron's own "throughput per GPU (TFLOP/s/GPU)"
    "eval_runtime_s": pl.Float64,  # an evaluation run after this step (HF Trainer's eval_runtime), seconds
    "family": pl.String,  # provenance of this row
    "line": pl.Int64,  # provenance of this row (line number in `path`, or in the file of `source_path`)
    "source_path": pl.String,  # the file holding `line` (a job's .err, say); `path` is the run
}

TIMERS_SCHEMA: dict[str, pl.DataType] = {
    "path": pl.String,
    "iteration": pl.Int64,  # the step whose timers these are (last step logged before the line)
    "timer": pl.String,  # e.g. forward-compute, backward-compute, optimizer
    "ms": pl.Float64,
    "family": pl.String,
    "line": pl.Int64,
    "source_path": pl.String,  # the file holding `line`
}

#: columns the analytics layer adds to ``runs`` (logstat.analytics.summary).
SUMMARY_SCHEMA: dict[str, pl.DataType] = {
    "iterations": pl.Int64,  # distinct logged training steps
    "last_iteration": pl.Int64,  # the last step logged: how far the run got (every log interval-th is logged)
    "warmup_skipped": pl.Int64,  # how many leading steps the steady-state statistic skipped
    "sec_per_iter": pl.Float64,  # steady state: median of logged steps after warm-up
    "sec_per_iter_source": pl.String,  # which log values it was computed from
    "samples_per_sec": pl.Float64,
    "tokens_per_sec": pl.Float64,
    "model_size_b": pl.Float64,  # computed from the shape, units of 1e9
    "model_size_note": pl.String,  # disagreement with the log's own line, if any
    "tflops_per_gpu": pl.Float64,  # seed formula (factor 4 with activation checkpointing, 3 without)
    "tflops_per_gpu_megatron": pl.Float64,  # Megatron-LM's count (eq. 3 generalized, its recomputation)
    "mfu": pl.Float64,  # model FLOPs (that count without recomputation, PaLM's MFU) / the GPU's dense peak
    "hfu": pl.Float64,  # hardware FLOPs (that count with the run's recomputation) / the GPU's dense peak
    "logged_tflops_per_gpu": pl.Float64,  # the log's own TFLOP/s/GPU, median of the steps after warm-up
    "model_state_gb_pred": pl.Float64,  # ZeRO model-state estimate per GPU (16 bytes/param), 1e9 bytes
    "mem_logged_gb": pl.Float64,  # logged peak allocated memory per GPU (largest rank), 1e9 bytes
    "mem_pred_ratio": pl.Float64,  # model_state_gb_pred / mem_logged_gb (activations are not predicted)
}


def run_names(paths: pl.Series) -> pl.Series:
    """A short readable name per run ``path``: the file name, or as many trailing directories as it
    takes to tell runs apart, so the ``train.log`` of every ``logstat run`` directory is not one name, and
    at least those that name the run where its file's name does not (``reader.name_depth``)."""
    from logstat.parsers.reader import name_depth  # the reader's conventions; it imports this module

    distinct = paths.drop_nulls().unique()
    # this system's separators only: a name's non-UTF-8 bytes are written as \xff escapes on POSIX
    native = (lambda path: path.replace(os.altsep, os.sep)) if os.altsep else (lambda path: path)
    parts = {path: native(path).rstrip(os.sep).split(os.sep) for path in distinct}
    least = {path: name_depth(Path(native(path))) for path in distinct}
    names: dict[str, str] = {}
    depth = 1
    while len(names) < len(parts):
        suffixes = {path: "/".join(p[-depth:]) for path, p in parts.items()}
        counts = Counter(suffixes.values())
        for path, suffix in suffixes.items():
            named = counts[suffix] == 1 and depth >= least[path]
            if path not in names and (named or depth >= len(parts[path])):
                names[path] = suffix
        depth += 1
    return paths.replace_strict(names, default=None, return_dtype=pl.String)


def run_labels(runs: pl.DataFrame) -> pl.Series:
    """Each run's name for a reader: ``spec name/run id`` of a ``logstat run`` directory (its manifest
    says both), else :func:`run_names`, which two logs of one run directory keep to be told apart."""
    by_log = run_names(runs["path"])
    by_run = pl.concat_str([runs["spec_name"], runs["run_id"]], separator="/")
    shared = by_run.is_duplicated() & by_run.is_not_null()
    return pl.select(
        pl.when(by_run.is_null() | shared).then(by_log).otherwise(by_run).alias("path")
    ).to_series()


def label_of_path(runs: pl.DataFrame) -> dict[str, str]:
    """Run path -> :func:`run_labels`, to name the iterations and timers of ``runs``."""
    return dict(zip(runs["path"].to_list(), run_labels(runs).to_list(), strict=True))

"""The dry-run backend: print the plan (estimate, script, DeepSpeed JSON, resolved spec); create nothing."""

from __future__ import annotations

import sys
from collections.abc import Callable

from logstat.runners.backends import LaunchResult, stderr_echo
from logstat.runners.render import RenderedRun, ds_config_text
from logstat.runners.spec import spec_to_toml
from logstat.runners.validate import Estimate, estimate


def launch(
    run: RenderedRun, *, wait: bool = False, echo: Callable[[str], None] = stderr_echo
) -> LaunchResult:
    """Write the plan to stdout (it is the command's data); nothing is created or started."""
    sys.stdout.write(format_plan(run))
    sys.stdout.flush()
    return LaunchResult(backend="dry-run", run_dir=None, message=f"dry run: {run.run_dir} not created")


def format_plan(run: RenderedRun) -> str:
    """The plan as text: a summary with the estimate, then every file the run directory would hold."""
    parts = [summary(run, estimate(run.spec)), ""]
    files = [(run.script_path.name, run.sbatch_script)]
    if run.deepspeed_config is not None:
        files.append((run.ds_config_path.name, ds_config_text(run.deepspeed_config)))
    files.append((run.spec_path.name, spec_to_toml(run.spec)))
    for name, text in files:
        parts += [f"==> {run.run_dir / name} <==", text]
    return "\n".join(parts)


def summary(run: RenderedRun, plan: Estimate) -> str:
    """A few ``#`` lines: shape, parallelism, batch, estimate and warnings."""
    spec, cluster, batch = run.spec, run.spec.cluster, run.spec.batch
    model, parallel = spec.model, spec.parallel
    device, per = ("GPUs", "GPU") if cluster.use_gpus else ("CPU processes", "process")
    lines = [
        f"# plan {spec.name} ({spec.stack}): {spec.description}".rstrip(": "),
        f"# run directory (created at launch): {run.run_dir}",
        f"# model: {plan.params:,} parameters = {plan.params / 1e9:.3g}B (h {model.hidden_size}, l {model.num_layers}, "
        f"heads {model.num_heads}, seq {model.seq_len}, vocab {model.vocab_size})",
        f"# world {spec.world_size} = {cluster.nodes} node{'s' if cluster.nodes > 1 else ''} x "
        f"{cluster.gpus_per_node} {device}; TP {parallel.tp} x PP {parallel.pp} x DP {spec.dp}",
        f"# global batch {batch.global_batch} = micro {batch.micro} x gas {batch.gas} x DP {spec.dp}; "
        f"{spec.steps} steps, {spec.train.precision}, activation checkpointing "
        f"{'on' if spec.train.activation_checkpointing else 'off'}, ZeRO {spec.train.zero_stage}",
        f"# estimate: model-state memory {_size(plan.model_state_gib_per_gpu)} per {per} (before activations); "
        f"pipeline efficiency {plan.pipeline_efficiency:.1%} (gas/(gas+PP-1))",
    ]
    if plan.days is not None:
        speed = (
            f"an assumed {plan.tflops_per_gpu:g} TFLOPs/GPU ({plan.sec_per_iter:.1f} s/iteration; estimate.tflops_per_gpu)"
            if spec.estimate.sec_per_iter is None
            else f"{plan.sec_per_iter:g} s/iteration ({plan.tflops_per_gpu:.1f} TFLOPs/GPU; estimate.sec_per_iter)"
        )
        lines.append(f"# estimate: {plan.days:.0f} days for {plan.tokens / 1e9:g}B tokens at {speed}")
    else:
        lines.append(
            "# estimate: days to train not estimated (set estimate.tflops_per_gpu or estimate.sec_per_iter)"
        )
    lines += [f"# warning: {warning}" for warning in run.warnings]
    return "\n".join(lines)


def _size(gib: float) -> str:
    return f"{gib:.1f} GiB" if gib >= 1 else f"{gib * 1024:.1f} MiB"

"""The formulas of the seeds and papers, as pure functions. Each docstring cites its source.

Units are in the names: ``_b`` is billions (1e9, never 2**30), ``_s`` seconds, ``tflops``
1e12 floating-point operations per second.
"""

from __future__ import annotations


def gpt2_params(*, hidden: int, layers: int, vocab: int, seq_len: int) -> int:
    """Parameter count of a GPT-2 style model: ``l*(12h^2 + 13h) + v*h + s*h + 2h``.

    Source: seeds/001_gpt2_experiments_tables.md ("Model sizes"); per layer 12h^2 weights of
    attention (4h^2) and MLP (8h^2) plus 13h biases and layer-norm gains; the token (v*h) and
    position (s*h) embeddings, and the final layer norm (2h).
    """
    h = hidden
    return layers * (12 * h * h + 13 * h) + vocab * h + seq_len * h + 2 * h


def seed_tflops_per_gpu(
    *, size_b: float, seq_len: int, global_batch: int, sec_per_iter: float, gpus: int, checkpointing: bool
) -> float:
    """TFLOPs per GPU by the seed's formula: ``size_B * f * 2 * seq * gbs / (sec * gpus * 1e3)``.

    ``f`` = 4 with activation checkpointing (forward, backward = 2x forward, recomputed forward),
    3 without. Source: seeds/001_gpt2_experiments_tables.md ("secret formula"). It ignores the
    attention-score and logit FLOPs; see :func:`megatron_flops_per_iteration` for those.
    """
    factor = 4 if checkpointing else 3
    return size_b * factor * 2 * seq_len * global_batch / (sec_per_iter * gpus * 1e3)


def megatron_flops_per_iteration(
    *, global_batch: int, seq_len: int, layers: int, hidden: int, vocab: int, checkpointing: bool
) -> float:
    """Model FLOPs of one iteration, Narayanan et al. 2021, "Efficient Large-Scale Language
    Model Training on GPU Clusters Using Megatron-LM", eq. 3.

    With full activation recomputation: ``96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h))``.
    Without it the transformer part is 3/4 of that (no recomputed forward) and the logits
    stay at 3 passes: ``72*B*s*l*h^2*(1 + s/(6h)) + 6*B*s*h*V``.
    """
    b, s, n_layers, h, v = global_batch, seq_len, layers, hidden, vocab
    if checkpointing:
        return 96 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))
    return 72 * b * s * n_layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v


def tflops_per_gpu(*, flops_per_iteration: float, sec_per_iter: float, gpus: int) -> float:
    """Achieved TFLOPs per GPU from FLOPs per iteration (e.g. :func:`megatron_flops_per_iteration`)."""
    return flops_per_iteration / (sec_per_iter * gpus * 1e12)


def mfu(*, tflops_per_gpu: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved / peak, a fraction (PaLM, Chowdhery et al. 2022, app. B)."""
    return tflops_per_gpu / peak_tflops


def sec_per_iter_from_samples(*, global_batch: int, samples_per_sec: float) -> float:
    """Seconds per iteration from a samples/s rate (HF Trainer): ``global_batch / samples_per_sec``.

    Source: shared DESIGN.md "Throughput in the seed tables".
    """
    return global_batch / samples_per_sec


def days_to_train(*, tokens: float, tokens_per_sec: float) -> float:
    """Days to train ``tokens`` tokens: ``N / tokens_per_sec / 86400``.

    Source: seeds/000_deepspeed_jean_zay_bloom7b_notes.md ("days for 100B tokens").
    """
    return tokens / tokens_per_sec / 86400


def pipeline_efficiency(*, gas: int, pp: int) -> float:
    """Fraction of time a pipeline stage is busy: ``gas / (gas + PP - 1)`` (bubble of PP-1 chunks).

    Source: seeds/002_deepspeed_notes.md; GPipe (Huang et al. 2019). With gas = 8*PP it is ~0.9.
    """
    return gas / (gas + pp - 1)


def global_batch(*, micro_batch: int, gas: int, dp: int) -> int:
    """``global_batch = micro_batch * gas * DP``. Source: seeds/002_deepspeed_notes.md."""
    return micro_batch * gas * dp


def data_parallel_size(*, world: int, tp: int, pp: int) -> int:
    """``DP = world / (TP * PP)``. Source: seeds/002_deepspeed_notes.md; Megatron's initialize."""
    return world // (tp * pp)

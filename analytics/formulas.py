"""The formulas of the seeds and papers, as pure functions. Each docstring cites its source.

Units are in the names: ``_b`` is billions (1e9, never 2**30), ``_s`` seconds, ``tflops``
1e12 floating-point operations per second.
"""

from __future__ import annotations

from dataclasses import dataclass


def gpt2_params(*, hidden: int, layers: int, vocab: int, seq_len: int, untied: bool = False) -> int:
    """Parameter count of a GPT-2 style model: ``l*(12h^2 + 13h) + v*h + s*h + 2h``, plus ``v*h`` if
    ``untied``.

    Source: seeds/001_gpt2_experiments_tables.md ("Maintenance", the corrected size one-liner); per layer 12h^2 weights of
    attention (4h^2) and MLP (8h^2) plus 13h biases and layer-norm gains; the token (v*h) and
    position (s*h) embeddings, and the final layer norm (2h). An output layer not tied to the token
    embedding (GPT-NeoX's ``no_weight_tying``, Megatron-LM's ``--untie-embeddings-and-output-weights``) is a
    second ``v*h`` matrix.
    """
    h = hidden
    return layers * (12 * h * h + 13 * h) + (1 + untied) * vocab * h + seq_len * h + 2 * h


def llama_params(
    *,
    hidden: int,
    layers: int,
    vocab: int,
    heads: int | None = None,
    query_groups: int | None = None,
    kv_channels: int | None = None,
    ffn_hidden: int | None = None,
    swiglu: bool = True,
    untied: bool = True,
    experts: int | None = None,
    moe_ffn_hidden: int | None = None,
    shared_ffn_hidden: int = 0,
    moe_layers: int | None = None,
) -> float:
    """Parameter count of a Llama-style decoder: ``l*(2*h*kv*(a + g) + m*h*ffn + 2h) + h + V*h*(2 if untied else 1)``.

    Per layer the query (h x a*kv), key and value (2 x h x g*kv) and output (a*kv x h) projections, the
    MLP (``m`` = 3 matrices h x ffn with SwiGLU: gate, up, down; else 2) and the two RMSNorm gains (2h);
    then the final RMSNorm (h), the token embedding (V*h) and, ``untied``, a separate output layer (V*h).
    No biases and no position embeddings (rotary). Sources: Touvron et al. 2023, "LLaMA: Open and
    Efficient Foundation Language Models" (section 2.2: RMSNorm pre-normalization, SwiGLU, RoPE) and
    "Llama 2" (grouped-query attention); Megatron-LM's own count, megatron/training/
    theoretical_memory_usage.py ``compute_weight_and_optimizer_memory``: ``2*h*l*((1 + g/a)*kv*a/h
    + ffn/h*(3/2 if swiglu else 1) + norms) + V*h*(2 if untied else 1)``, the same terms. Llama-3-8B
    (h 4096, l 32, a 32, g 8, kv 128, ffn 14336, V 128256, untied): 8,030,261,248; Llama-2-7B (g = a = 32,
    ffn 11008, V 32000): 6,738,415,616.

    Defaults as :func:`megatron_flops_per_iteration`'s: ``query_groups`` None (g = a), ``kv_channels`` None
    (h/a), ``ffn_hidden`` None (4h); ``heads`` is needed only with ``query_groups`` or ``kv_channels``.
    ``untied`` defaults to True: Llama 2 and 3, Mistral 7B and Qwen2 7B on keep a separate output layer.
    With ``experts`` (a mixture of experts, Mixtral / Megatron-LM ``--num-experts``) each of ``moe_layers``
    layers (None: all) holds that many MLPs ``moe_ffn_hidden`` wide (None: ``ffn``), a shared expert
    ``shared_ffn_hidden`` wide and the router's h x experts; Mixtral-8x7B (h 4096, l 32, a 32, g 8, kv
    128, ffn 14336, 8 experts, V 32000, untied): 46,702,792,704, Mistral AI's "46.7B total parameters".
    Written with +, * and / of the arguments only: exact on ints (given ``kv_channels``) and
    fractions.Fraction, and valid on polars expressions, ``swiglu`` and ``untied`` (a Boolean is 0 or 1) too.
    """
    h = hidden
    query_width = h if kv_channels is None else kv_channels * heads  # a*kv
    if query_groups is None:  # g = a
        key_value_width = query_width
    else:  # g*kv
        key_value_width = query_groups * (h / heads if kv_channels is None else kv_channels)
    ffn = 4 * h if ffn_hidden is None else ffn_hidden
    attention = 2 * h * query_width + 2 * h * key_value_width
    matrices = 2 + swiglu
    mlp = matrices * h * ffn
    embeddings = (1 + untied) * vocab * h
    dense = layers * (attention + mlp + 2 * h) + h + embeddings
    if experts is None:
        return dense
    expert_ffn = ffn if moe_ffn_hidden is None else moe_ffn_hidden
    moe_mlp = experts * matrices * h * expert_ffn + matrices * h * shared_ffn_hidden + h * experts
    return dense + (layers if moe_layers is None else moe_layers) * (moe_mlp - mlp)


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
    *,
    global_batch: int,
    seq_len: int,
    layers: int,
    hidden: int,
    vocab: int,
    checkpointing: bool,
    heads: int | None = None,
    query_groups: int | None = None,
    kv_channels: int | None = None,
    ffn_hidden: int | None = None,
    swiglu: bool = False,
    moe_topk: int = 1,
    moe_ffn_hidden: int | None = None,
    shared_ffn_hidden: int = 0,
    moe_layers: int | None = None,
    recomputed_share: float = 1,
) -> float:
    """FLOPs of one iteration: Megatron-LM's ``num_floating_point_operations``, which generalizes
    Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM") eq. 3 to today's model shapes, plus the recomputed forward when ``checkpointing``.

    Megatron-LM, megatron/training/training.py ``num_floating_point_operations`` (core_r0.7.0 on),
    without recomputation:
    ``12*B*s*l*h^2 * [(1 + g/a + s/h) * (kv*a/h) + (ffn*topk + shared)/h * (3/2 if swiglu else 1)
    + V/(2*l*h)]``: per layer the query and output projections (1), the key and value projections of
    ``g`` query groups (g/a), the attention scores and their product with the values (s/h), all scaled
    by the query projection width ``kv*a`` over ``h``; the MLP (``ffn`` wide, three matrices with SwiGLU
    instead of two; with MoE ``topk`` experts per token, each ``moe_ffn_hidden`` wide (Megatron-LM's
    ``--moe-ffn-hidden-size``, ``ffn`` unless given), plus the shared experts' ``shared_ffn_hidden``
    (``--moe-shared-expert-intermediate-size``, core_r0.9 on), in ``moe_layers`` of the layers (``None``:
    all; ``--moe-layer-freq``, core_r0.10 on), the others dense ``ffn``; the logits (V/(2lh)). 12 = 2 FLOPs per
    multiply-add x 3 passes (forward, backward = 2x forward) x the 2 matrices of each term.
    Defaults are the GPT-2 shape of eq. 3: ``query_groups`` None (no grouped-query attention: g = a),
    ``kv_channels`` None (h/a), ``ffn_hidden`` None (4h), no SwiGLU, ``moe_topk`` 1 (no MoE); ``heads``
    is needed only with ``query_groups`` or ``kv_channels``. With them the count is eq. 3's
    ``72*B*s*l*h^2*(1 + s/(6h)) + 6*B*s*h*V``.

    With full activation recomputation (``checkpointing``), which Megatron-LM's count leaves out, the
    layers' forward runs twice: the layer part is 4 passes instead of 3 (4/3 of it), the logits stay
    at 3 (the output layer is not recomputed); of ``recomputed_share`` of the layers only when not all
    are (Megatron-LM's ``--recompute-method block``: ``--recompute-num-layers`` of each stage's). With the defaults this is eq. 3 as printed:
    ``96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h))``.

    The count without recomputation is the *model* FLOPs of PaLM's MFU (Chowdhery et al. 2022,
    "PaLM: Scaling Language Modeling with Pathways", appendix B): per token ``6N + 12*L*H*Q*T``
    with N the weights matmuls touch and H*Q = h, T = s for the defaults. The count with it is the
    *hardware* FLOPs (HFU): what the GPU executes, the recomputed forward included.
    """
    b, s, n_layers, h, v = global_batch, seq_len, layers, hidden, vocab
    # Written with +, * and / of the arguments only: exact on fractions.Fraction, and valid on polars
    # expressions, swiglu a Boolean one too (the caller fills a run's unknown shape facts with these defaults).
    query_width = 1 if kv_channels is None else kv_channels * heads / h
    key_value_share = 1 if query_groups is None else query_groups / heads
    ffn = 4 * h if ffn_hidden is None else ffn_hidden
    moe_share = 1 if moe_layers is None else moe_layers / n_layers
    experts = (ffn if moe_ffn_hidden is None else moe_ffn_hidden) * moe_topk + shared_ffn_hidden
    mlp = ((1 - moe_share) * ffn + moe_share * experts) / h
    mlp = mlp * (2 + swiglu) / 2  # three matrices instead of two
    one_pass_of_layers = 4 * b * s * n_layers * h * h * ((1 + key_value_share + s / h) * query_width + mlp)
    logits = 6 * b * s * h * v
    return (3 + (recomputed_share if checkpointing else 0)) * one_pass_of_layers + logits


def tflops_per_gpu(*, flops_per_iteration: float, sec_per_iter: float, gpus: int) -> float:
    """Achieved TFLOPs per GPU from FLOPs per iteration (e.g. :func:`megatron_flops_per_iteration`)."""
    return flops_per_iteration / (sec_per_iter * gpus * 1e12)


def flops_utilization(*, tflops_per_gpu: float, peak_tflops: float) -> float:
    """Achieved TFLOP/s per GPU over the GPU's peak, a fraction (PaLM, Chowdhery et al. 2022, app. B).

    It is the model FLOPs utilisation (MFU) when ``tflops_per_gpu`` counts the model FLOPs, which
    do not depend on how the run trades memory for compute: no recomputed forward
    (:func:`megatron_flops_per_iteration` with ``checkpointing=False``). Counting the recomputed
    forward too gives the hardware FLOPs utilisation (HFU), 4/3 of the MFU's transformer part with
    full activation recomputation.
    """
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


def tokens_per_sec(*, global_batch: int, seq_len: int, sec_per_iter: float) -> float:
    """Training throughput in tokens/s: ``global_batch * seq_len / sec_per_iter``.

    Source: shared DESIGN.md "Throughput in the seed tables" (seconds per iteration = one global batch).
    """
    return global_batch * seq_len / sec_per_iter


def gpu_days(*, days: float, gpus: int) -> float:
    """GPU-days ("compute-days"): wall-clock days times the number of GPUs.

    Source: seeds/000_deepspeed_jean_zay_bloom7b_notes.md, the figure "Number of compute-days to
    train on 100b tokens as a function of the number of GPUs".
    """
    return days * gpus


def megatron_training_days(*, tokens: float, params: float, gpus: int, tflops_per_gpu: float) -> float:
    """End-to-end training time in days: ``8*T*P / (n*X)``, Narayanan et al. 2021, eq. 4.

    ``T`` tokens, ``P`` parameters, ``n`` GPUs, ``X`` achieved TFLOP/s per GPU. The factor 8 is
    the paper's (and the seed's ``4*2``) count with activation recomputation; the paper's
    example: GPT-3 175B on 300B tokens, 1024 A100 at 140 TFLOP/s -> about 34 days.
    """
    return 8 * tokens * params / (gpus * tflops_per_gpu * 1e12) / 86400


#: Bytes per parameter of the model states with mixed-precision Adam (Rajbhandari et al. 2020,
#: "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", section 3.1, K = 12).
FP16_PARAM_BYTES = 2
FP16_GRAD_BYTES = 2
ADAM_FP32_STATE_BYTES = 12  # fp32 master weights, momentum and variance
FP32_BYTES = 4
#: Optimizers by their fp32 states per parameter: (keeps a momentum, keeps a full second moment).
#: Adam/AdamW: momentum and variance (Kingma & Ba 2015; Loshchilov & Hutter 2019); SGD: a momentum
#: buffer (Megatron's --sgd-momentum 0.9); Adafactor: no momentum (beta1 = 0, Shazeer & Stern 2018
#: section 5, torch.optim.Adafactor) and a *factored* second moment, counted by the caller.
OPTIMIZER_STATES = {
    "adam": (True, True),
    "adamw": (True, True),
    "sgd": (True, False),
    "adafactor": (False, False),
}


@dataclass(frozen=True, kw_only=True)
class ModelStateBytes:
    """Bytes per parameter of each model state ZeRO partitions (stage 3, 2, 1 in this order)."""

    weights: float
    """The weights the forward pass uses (2 in fp16/bf16, 4 in fp32)."""
    grads: float
    """Their gradients (same precision as the weights)."""
    optimizer: float
    """Everything the optimizer keeps: ZeRO's K (12 for mixed-precision Adam)."""

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def model_state_bytes_per_param(
    *, optimizer: str, mixed_precision: bool, factored_second_moment_per_param: float = 0.0
) -> ModelStateBytes:
    """Bytes per parameter of weights, gradients and optimizer states, by optimizer and precision.

    Mixed precision (fp16/bf16) keeps 2-byte weights and gradients and an fp32 master copy of the
    weights in the optimizer (Rajbhandari et al. 2020, section 3.1: Adam's K = 4 + 4 + 4 = 12, 16
    bytes/param in all); fp32 training keeps 4-byte weights and gradients and no master copy. The
    optimizer adds 4 bytes per fp32 state element: Adam/AdamW 4 + 4 (momentum, variance), SGD with
    momentum 4 (2 + 2 + 4 + 4 = 12 mixed), Adafactor (Shazeer & Stern 2018, "Adafactor: Adaptive
    Learning Rates with Sublinear Memory Cost") only its factored second moment, rows + cols per
    matrix instead of rows * cols: ``factored_second_moment_per_param`` is that element count over
    the parameters (see :func:`gpt2_adafactor_second_moment_elements`), so mixed-precision Adafactor
    is 2 + 2 + 4 + O((rows+cols)/(rows*cols)).
    """
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer={optimizer!r} is unknown; known: {', '.join(OPTIMIZER_STATES)}")
    momentum, full_second_moment = OPTIMIZER_STATES[optimizer]
    second_moment = 1.0 if full_second_moment else factored_second_moment_per_param
    master = 1 if mixed_precision else 0
    weight_bytes = FP16_PARAM_BYTES if mixed_precision else FP32_BYTES
    return ModelStateBytes(
        weights=weight_bytes,
        grads=weight_bytes,
        optimizer=FP32_BYTES * (master + momentum + second_moment),
    )


def gpt2_adafactor_second_moment_elements(*, hidden: int, layers: int, vocab: int, seq_len: int) -> int:
    """Adafactor's second-moment elements for a GPT-2 (:func:`gpt2_params` shapes): ``29*l*h + v + s + 4h``.

    torch.optim.Adafactor (Shazeer & Stern 2018, algorithm 4) keeps a row and a column factor
    (rows + cols elements) for every tensor of 2 or more dimensions and a full variance for vectors.
    Matrices (transformers' GPT2 Conv1D shapes): per layer (h, 3h), (h, h), (h, 4h), (4h, h) -> 16h;
    token (v, h) and position (s, h) embeddings -> v + s + 2h. Vectors: per layer 13h (biases and
    layer norms), final layer norm 2h.
    """
    h = hidden
    return layers * (16 * h + 13 * h) + (vocab + h) + (seq_len + h) + 2 * h


@dataclass(frozen=True, kw_only=True)
class ZeroMemory:
    """Model-state memory of one GPU (and what offload keeps on the host instead)."""

    gpu_bytes: float
    """Weights, gradients and optimizer states held on the GPU."""
    cpu_bytes: float
    """The part moved to CPU memory by optimizer/parameter offload."""


def zero_model_state_memory(
    *,
    params: float,
    dp: int,
    stage: int,
    state_bytes: ModelStateBytes,
    offload_optimizer: bool = False,
    offload_param: bool = False,
) -> ZeroMemory:
    """Model-state bytes per GPU under ZeRO, given the bytes per parameter of each state.

    ``params`` is Ψ held by this GPU's model-parallel rank (the model's count / (TP*PP)), ``dp``
    is N, the data-parallel degree ZeRO partitions over; ``state_bytes`` the weights' (W), the
    gradients' (G) and the optimizer's (K) bytes per parameter (:func:`model_state_bytes_per_param`).
    Stage 0: (W+G+K)Ψ; stage 1 (optimizer states partitioned): (W+G)Ψ + KΨ/N; stage 2
    (+ gradients): WΨ + (G+K)Ψ/N; stage 3 (+ weights): (W+G+K)Ψ/N. With mixed-precision Adam
    (W=2, G=2, K=12): 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N. Optimizer offload moves the K part to CPU
    (ZeRO-Offload, stages 1-3); parameter offload moves the weight partition too (ZeRO-Infinity,
    stage 3 only). Activations and buffers are not counted. Source: Rajbhandari et al. 2020,
    figure 1 and section 3.1; shared DESIGN.md "ZeRO model-state memory"; seeds/002_deepspeed_notes.md.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"zero stage={stage} must be 0, 1, 2 or 3")
    if offload_optimizer and stage == 0:
        raise ValueError("offload_optimizer needs zero stage >= 1 (DeepSpeed's ZeRO-Offload)")
    if offload_param and stage != 3:
        raise ValueError(f"offload_param needs zero stage 3, not {stage} (DeepSpeed's ZeRO-Infinity)")
    n = dp
    param_b = state_bytes.weights * params / (n if stage >= 3 else 1)
    grad_b = state_bytes.grads * params / (n if stage >= 2 else 1)
    optim_b = state_bytes.optimizer * params / (n if stage >= 1 else 1)
    on_cpu = (optim_b if offload_optimizer else 0.0) + (param_b if offload_param else 0.0)
    return ZeroMemory(gpu_bytes=param_b + grad_b + optim_b - on_cpu, cpu_bytes=on_cpu)

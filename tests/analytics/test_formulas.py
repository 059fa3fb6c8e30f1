"""Each formula against a hand computation written here, with the numbers of the seeds and papers."""

from fractions import Fraction

import pytest
from logstat.analytics import formulas as f
from logstat.analytics.gpus import peak_tflops


def test_gpt2_params_of_the_52b_preset():
    # h=8192, l=64, s=1024, v=50257, expanded by hand:
    per_layer = 12 * 8192 * 8192 + 13 * 8192  # 805_306_368 + 106_496
    assert per_layer == 805_412_864
    expected = 64 * 805_412_864 + 50257 * 8192 + 1024 * 8192 + 2 * 8192
    assert expected == 51_966_533_632
    assert f.gpt2_params(hidden=8192, layers=64, vocab=50257, seq_len=1024) == 51_966_533_632


def test_gpt2_params_untied_adds_a_second_vocabulary_matrix():
    tied = f.gpt2_params(hidden=8192, layers=64, vocab=50257, seq_len=1024)
    assert (
        f.gpt2_params(hidden=8192, layers=64, vocab=50257, seq_len=1024, untied=True) == tied + 50257 * 8192
    )


def test_gpt2_params_of_the_seed_maintenance_example():
    # The seed's one-liner: h=4096, l=36, s=512, v=50257 prints "Model size: 7B".
    count = f.gpt2_params(hidden=4096, layers=36, vocab=50257, seq_len=512)
    assert count == 36 * (12 * 4096**2 + 13 * 4096) + 50257 * 4096 + 512 * 4096 + 2 * 4096
    assert f"{count / 10**9:.0f}B" == "7B"


def test_llama_params_of_llama_3_8b_is_its_published_count():
    # h 4096, l 32, a 32 heads of kv 128, g 8 query groups, SwiGLU ffn 14336, V 128256, untied output layer
    h, layers, a, g, kv, ffn, v = 4096, 32, 32, 8, 128, 14336, 128256
    attention = h * a * kv + 2 * h * g * kv + a * kv * h  # q, k + v, out: 16_777_216 + 8_388_608 + 16_777_216
    mlp = 3 * h * ffn  # gate, up, down: 176_160_768
    per_layer = attention + mlp + 2 * h  # + two RMSNorm gains
    assert per_layer == 218_112_000
    expected = layers * per_layer + h + 2 * v * h  # final RMSNorm, embedding and output layer
    assert expected == 8_030_261_248  # torchtitan's "size: 8,030,261,248 total parameters", HF's config
    count = f.llama_params(
        hidden=h, layers=layers, vocab=v, heads=a, query_groups=g, kv_channels=kv, ffn_hidden=ffn
    )
    assert count == 8_030_261_248
    # the head width defaults to h/a (128 here): the same count
    assert f.llama_params(hidden=h, layers=layers, vocab=v, heads=a, query_groups=g, ffn_hidden=ffn) == count
    # tied (one V x h matrix): the output layer's 525_336_576 less
    assert (
        count
        - f.llama_params(
            hidden=h,
            layers=layers,
            vocab=v,
            heads=a,
            query_groups=g,
            kv_channels=kv,
            ffn_hidden=ffn,
            untied=False,
        )
        == v * h
        == 525_336_576
    )


def test_llama_params_of_llama_2_7b_is_its_published_count():
    # h 4096, l 32, a = g = 32 (no GQA), SwiGLU ffn 11008, V 32000, untied
    h, layers, ffn, v = 4096, 32, 11008, 32000
    per_layer = 4 * h * h + 3 * h * ffn + 2 * h  # q, k, v, out; gate, up, down; 2 RMSNorms
    assert per_layer == 67_108_864 + 135_266_304 + 8192 == 202_383_360
    expected = layers * per_layer + h + 2 * v * h
    assert expected == 6_738_415_616
    assert f.llama_params(hidden=h, layers=layers, vocab=v, ffn_hidden=ffn) == 6_738_415_616
    spelled_out = f.llama_params(
        hidden=h, layers=layers, vocab=v, heads=32, query_groups=32, kv_channels=128, ffn_hidden=ffn
    )
    assert spelled_out == 6_738_415_616


def test_llama_params_of_mixtral_8x7b_counts_every_expert():
    # Mixtral-8x7B: Mistral-7B's attention (a 32, g 8, kv 128), 8 SwiGLU experts of ffn 14336 a layer and
    # their router (h x 8), V 32000, untied: "46.7B total parameters"
    h, layers, g, kv, ffn, v, experts = 4096, 32, 8, 128, 14336, 32000, 8
    per_layer = 2 * h * h + 2 * h * g * kv + experts * 3 * h * ffn + h * experts + 2 * h
    expected = layers * per_layer + h + 2 * v * h
    assert expected == 46_702_792_704
    shape = dict(hidden=h, layers=layers, vocab=v, heads=32, query_groups=g, kv_channels=kv, ffn_hidden=ffn)
    assert f.llama_params(**shape, experts=experts) == 46_702_792_704
    # every other layer an MoE one (Megatron-LM's --moe-layer-freq 2): 16 of them, 16 dense
    half = f.llama_params(**shape, experts=experts, moe_layers=16)
    assert half == f.llama_params(**shape) + 16 * (experts * 3 * h * ffn + h * experts - 3 * h * ffn)


def test_llama_params_without_swiglu_has_two_mlp_matrices_and_works_on_fractions():
    h, layers, v = Fraction(64), Fraction(2), Fraction(100)
    count = f.llama_params(
        hidden=h, layers=layers, vocab=v, heads=Fraction(4), query_groups=Fraction(2), swiglu=False
    )
    # a*kv = h = 64, g*kv = 2 * 16 = 32, ffn 4h = 256
    assert count == 2 * (2 * 64 * 64 + 2 * 64 * 32 + 2 * 64 * 256 + 2 * 64) + 64 + 2 * 100 * 64


def test_seed_tflops_52b_64_gpus_gbs_1024_129s_is_52_8():
    # 52 * 4 * 2 * 1024 * 1024 / (129 * 64 * 1e3) = 436207616 / 8256000
    value = f.seed_tflops_per_gpu(
        size_b=52, seq_len=1024, global_batch=1024, sec_per_iter=129, gpus=64, checkpointing=True
    )
    assert value == pytest.approx(436207616 / 8256000)
    assert f"{value:.1f}" == "52.8"


def test_seed_tflops_factor_3_without_checkpointing():
    value = f.seed_tflops_per_gpu(
        size_b=52, seq_len=1024, global_batch=1024, sec_per_iter=129, gpus=64, checkpointing=False
    )
    assert value == pytest.approx(52 * 3 * 2 * 1024 * 1024 / (129 * 64 * 1e3))
    assert f"{value:.2f}" == "39.63"


def test_seed_bash_example_of_the_megatron_section():
    # THROUGHPUT=122 NNODES=16 MSIZE=52 MICRO_BATCH_SIZE=4 DP_SIZE=1 PP_CHUNKS=256 -> 55.86675409836065573770
    gbs = f.global_batch(micro_batch=4, gas=256, dp=1)
    value = f.seed_tflops_per_gpu(
        size_b=52, seq_len=1024, global_batch=gbs, sec_per_iter=122, gpus=16 * 4, checkpointing=True
    )
    assert value == pytest.approx(55.86675409836065573770, rel=1e-12)


def test_megatron_flops_with_recomputation_is_the_seed_count_plus_attention_and_logits():
    b, s, layers, h, v = 1024, 1024, 64, 8192, 50257
    flops = f.megatron_flops_per_iteration(
        global_batch=b, seq_len=s, layers=layers, hidden=h, vocab=v, checkpointing=True
    )
    # 96*B*s*l*h^2 is 8 FLOPs per token per transformer-layer weight (12*l*h^2 of them): the seed's 4*2.
    weights_only = 8 * (12 * layers * h * h) * b * s
    assert flops == pytest.approx(weights_only * (1 + 1024 / 49152 + 50257 / (16 * 64 * 8192)))
    assert flops / weights_only == pytest.approx(1 + 0.0208333 + 0.0059911, rel=1e-6)
    tflops = f.tflops_per_gpu(flops_per_iteration=flops, sec_per_iter=129, gpus=64)
    assert tflops == pytest.approx(flops / (129 * 64 * 1e12))
    # 8 * 51.54e9 weights * 1048576 tokens / (129 s * 64 GPUs * 1e12) = 52.35, times 1.02682 = 53.75
    assert f"{tflops:.1f}" == "53.8"


def test_megatron_flops_without_recomputation():
    b, s, layers, h, v = 8, 2048, 24, 2048, 51200
    flops = f.megatron_flops_per_iteration(
        global_batch=b, seq_len=s, layers=layers, hidden=h, vocab=v, checkpointing=False
    )
    # 3 passes (forward + 2x backward) of 24*B*s*l*h^2*(1 + s/6h) plus 3 * 2*B*s*h*V for the logits.
    assert flops == pytest.approx(3 * 24 * b * s * layers * h * h * (1 + s / (6 * h)) + 3 * 2 * b * s * h * v)


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize(
    ("b", "s", "layers", "h", "heads", "v"),
    [(1024, 1024, 64, 8192, 32, 50688), (8, 2048, 24, 2048, 16, 51200), (16, 1024, 48, 1600, 25, 50257)],
)
def test_megatron_lm_count_with_gpt2_defaults_is_eq_3_exactly(checkpointing, b, s, layers, h, heads, v):
    # eq. 3 as Narayanan et al. 2021 print it (with recomputation), and its 3-pass layer part without,
    # in exact rational arithmetic: the generalized count must be the same number, not a close one.
    b, s, layers, h, v = (Fraction(x) for x in (b, s, layers, h, v))
    if checkpointing:
        eq3 = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    else:
        eq3 = 72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v
    shape = dict(global_batch=b, seq_len=s, layers=layers, hidden=h, vocab=v, checkpointing=checkpointing)
    assert f.megatron_flops_per_iteration(**shape) == eq3
    # the GPT-2 facts spelled out (a 2021 dump's kv_channels h/a, ffn 4h, a query group per head)
    spelled = f.megatron_flops_per_iteration(
        **shape,
        heads=Fraction(heads),
        query_groups=Fraction(heads),
        kv_channels=h / heads,
        ffn_hidden=4 * h,
        swiglu=False,
        moe_topk=1,
    )
    assert spelled == eq3
    assert isinstance(spelled, Fraction)  # no float crept in: the equality above is exact
    # in floats the two orders of operations agree to the last digit or two
    floats = {k: (float(x) if isinstance(x, Fraction) else x) for k, x in shape.items()}
    assert f.megatron_flops_per_iteration(**floats) == pytest.approx(float(eq3), rel=1e-15, abs=0)


# Llama-3-8B's shape (Meta's config.json): h 4096, 32 layers, 32 heads, 8 key/value heads of 128, FFN
# 14336 with SwiGLU, vocabulary 128256; 8192 tokens per sequence, 128 sequences per step.
LLAMA3_8B = dict(h=4096, layers=32, heads=32, groups=8, kv=128, ffn=14336, v=128256, s=8192, b=128)


def _llama_matmul_flops(*, recomputed_forward: bool) -> int:
    """Counted here by matrix products, per token and layer, in multiply-adds (2 FLOPs each)."""
    m = LLAMA3_8B
    q_and_out = 2 * m["h"] * m["heads"] * m["kv"]  # query projection h x 4096, output 4096 x h
    k_and_v = 2 * m["h"] * m["groups"] * m["kv"]  # 8 groups of 128 for keys and values
    scores_and_mix = 2 * m["s"] * m["heads"] * m["kv"]  # Q K^T and softmax(.) V over s positions
    swiglu_mlp = 3 * m["h"] * m["ffn"]  # gate, up (h x ffn) and down (ffn x h)
    layer = q_and_out + k_and_v + scores_and_mix + swiglu_mlp
    logits = m["h"] * m["v"]
    tokens = m["b"] * m["s"]
    layer_passes = 4 if recomputed_forward else 3  # forward + backward (2x), + recomputed forward
    return 2 * tokens * (layer_passes * m["layers"] * layer + 3 * logits)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_megatron_lm_count_of_a_llama_3_8b_shape(checkpointing):
    m = LLAMA3_8B
    expected = _llama_matmul_flops(recomputed_forward=checkpointing)
    shape = dict(
        global_batch=m["b"],
        seq_len=m["s"],
        layers=m["layers"],
        hidden=m["h"],
        vocab=m["v"],
        checkpointing=checkpointing,
        heads=m["heads"],
        query_groups=m["groups"],
        kv_channels=m["kv"],
        ffn_hidden=m["ffn"],
        swiglu=True,
    )
    exact = f.megatron_flops_per_iteration(
        **{k: Fraction(x) if type(x) is int else x for k, x in shape.items()}
    )
    assert exact == expected
    assert f.megatron_flops_per_iteration(**shape) == pytest.approx(expected, rel=1e-15, abs=0)


def test_megatron_lm_count_of_moe_routes_each_token_through_topk_mlps():
    # Mixtral-8x7B-like: h 4096, ffn 14336 SwiGLU, 8 experts, top-2: the MLP term doubles, nothing else
    shape = dict(global_batch=4, seq_len=4096, layers=32, hidden=4096, vocab=32000, checkpointing=False)
    gqa = dict(heads=32, query_groups=8, kv_channels=128, ffn_hidden=14336, swiglu=True)
    dense = f.megatron_flops_per_iteration(**shape, **gqa)
    moe = f.megatron_flops_per_iteration(**shape, **gqa, moe_topk=2)
    mlp_per_token_layer = 2 * 3 * 3 * 4096 * 14336  # 3 passes x 2 FLOPs x 3 matrices
    assert moe - dense == pytest.approx(4 * 4096 * 32 * mlp_per_token_layer, rel=1e-12)


def test_megatron_lm_count_of_moe_in_some_layers_is_a_dense_model_and_a_moe_model_of_their_layers():
    # --moe-layer-freq: 3 of 8 layers MoE (top-2 of experts 1024 wide, a shared one 512), 5 dense (FFN 2816):
    # each layer's count and the logits' once, so the parts' sum less one model's logits
    shape = dict(global_batch=8, seq_len=1024, hidden=512, vocab=32000, checkpointing=False, heads=8)
    shape = {k: Fraction(v) if type(v) is int else v for k, v in shape.items()}
    width = dict(ffn_hidden=Fraction(2816), swiglu=True)
    experts = dict(moe_topk=Fraction(2), moe_ffn_hidden=Fraction(1024), shared_ffn_hidden=Fraction(512))
    mixed = f.megatron_flops_per_iteration(
        **shape, **width, **experts, layers=Fraction(8), moe_layers=Fraction(3)
    )
    dense = f.megatron_flops_per_iteration(**shape, **width, layers=Fraction(5))
    moe = f.megatron_flops_per_iteration(**shape, **width, **experts, layers=Fraction(3))
    logits = 6 * 8 * 1024 * 512 * 32000
    assert mixed == dense + moe - logits


def test_megatron_lm_count_with_a_share_of_the_layers_recomputed():
    # 8 of 40 layers run their forward twice (Megatron-LM's block method): 3 passes of every layer, one more
    # of those 8, 3 of the logits (GPT-2 shape: a layer is 12 h^2 + 2 s h multiply-adds per token)
    b, s, layers, h, v = 16, 2048, 40, 5120, 51200
    per_layer = 12 * h * h + 2 * s * h
    expected = 2 * b * s * ((3 * layers + 8) * per_layer + 3 * h * v)
    shape = dict(global_batch=b, seq_len=s, layers=layers, hidden=h, vocab=v)
    counted = f.megatron_flops_per_iteration(
        **{k: Fraction(x) for k, x in shape.items()}, checkpointing=True, recomputed_share=Fraction(8, 40)
    )
    assert counted == expected


def test_megatron_lm_count_of_moe_with_narrow_experts_and_shared_experts():
    # Qwen2-57B-A14B's shape (its config.json): h 3584, 28 layers, 28 heads of 128 sharing 4 key/value
    # heads, SwiGLU experts 2560 wide, 8 of 64 per token, shared experts 20480 wide; the dense FFN width
    # (18944) is no layer's: Megatron-LM counts moe_ffn_hidden_size x topk + the shared width
    h, layers, heads, groups, kv, v, s, b = 3584, 28, 28, 4, 128, 151936, 4096, 512
    expert, topk, shared = 2560, 8, 20480
    per_layer = (
        2 * h * heads * kv + 2 * h * groups * kv + 2 * s * heads * kv + 3 * h * (expert * topk + shared)
    )
    expected = 2 * b * s * (3 * layers * per_layer + 3 * h * v)
    shape = dict(global_batch=b, seq_len=s, layers=layers, hidden=h, vocab=v, checkpointing=False)
    moe = dict(heads=heads, query_groups=groups, kv_channels=kv, ffn_hidden=18944, swiglu=True, moe_topk=topk)
    counted = f.megatron_flops_per_iteration(
        **{k: Fraction(x) for k, x in shape.items() if k != "checkpointing"},
        checkpointing=False,
        **{k: Fraction(x) if type(x) is int else x for k, x in moe.items()},
        moe_ffn_hidden=Fraction(expert),
        shared_ffn_hidden=Fraction(shared),
    )
    assert counted == expected


@pytest.mark.parametrize(
    ("params", "tokens", "gpus", "tflops", "days"),
    [
        (175e9, 300e9, 1024, 140, 34),  # GPT-3 on 1024 A100: "about 34 days" (Narayanan et al. 2021, 5.1)
        (1008e9, 450e9, 3072, 163, 84),  # the 1T model on 3072 A100: "around 84 days"
    ],
)
def test_megatron_training_days_of_the_paper(params, tokens, gpus, tflops, days):
    value = f.megatron_training_days(tokens=tokens, params=params, gpus=gpus, tflops_per_gpu=tflops)
    assert value == pytest.approx(8 * tokens * params / (gpus * tflops * 1e12) / 86400)
    assert round(value) == days


def test_flops_utilization_of_52_8_tflops_on_v100():
    value = f.flops_utilization(tflops_per_gpu=52.8, peak_tflops=peak_tflops("V100-SXM2-32GB"))
    assert value == pytest.approx(52.8 / 125)


@pytest.mark.parametrize(
    ("layers", "hidden", "heads", "seq", "vocab"),
    [(64, 8192, 32, 1024, 50257), (118, 18432, 48, 2048, 256000)],
)
def test_megatron_flops_without_recomputation_are_palms_model_flops(layers, hidden, heads, seq, vocab):
    # PaLM (Chowdhery et al. 2022) appendix B: model FLOPs per token 6N + 12*L*H*Q*T, N the weights
    # matmuls touch (12*l*h^2 in the layers, V*h for the logits), H heads of size Q = h/H, T = seq.
    n = 12 * layers * hidden**2 + vocab * hidden
    per_token = 6 * n + 12 * layers * heads * (hidden // heads) * seq
    flops = f.megatron_flops_per_iteration(
        global_batch=8, seq_len=seq, layers=layers, hidden=hidden, vocab=vocab, checkpointing=False
    )
    assert flops == pytest.approx(8 * seq * per_token, rel=1e-12)


def test_gpu_peaks():
    assert peak_tflops("V100-SXM2-32GB", "fp16") == 125
    assert peak_tflops("V100-SXM2-32GB", "bf16") is None  # Volta has no bf16 tensor cores
    assert peak_tflops("A100-SXM4-80GB", "bf16") == 312
    assert peak_tflops("H100-SXM", "bf16") == 989
    assert peak_tflops("H100-NVL", "bf16") == 1671 / 2  # the datasheet's figure is with 2:4 sparsity
    assert peak_tflops("TPU-v4", "bf16") is None
    assert peak_tflops(None) is None
    assert peak_tflops("A100-SXM4-80GB", None) == 312  # unknown precision: the fp16 peak
    assert peak_tflops("A100-SXM4-80GB", "fp32") is None  # not the half-precision tensor-core peak


def test_sec_per_iter_from_hf_samples_per_second():
    # seed: "total throughput in the table is glob_bs/samples_per_second"; 512 / 3.67 samples/s
    assert f.sec_per_iter_from_samples(global_batch=512, samples_per_sec=3.67) == pytest.approx(
        139.509, abs=1e-3
    )


def test_days_and_gpu_days_for_100b_tokens_of_the_52b_benchmark():
    tokens_per_s = f.tokens_per_sec(global_batch=1024, seq_len=1024, sec_per_iter=129)
    assert tokens_per_s == pytest.approx(1048576 / 129)  # 8128.5 tokens/s
    days = f.days_to_train(tokens=100e9, tokens_per_sec=tokens_per_s)
    assert days == pytest.approx(100e9 * 129 / 1048576 / 86400)
    assert round(days, 1) == 142.4
    assert round(f.gpu_days(days=days, gpus=64)) == 9113


def test_gpu_days_of_seed_000():
    # "Deepspeed stage 1+ gradacc 256 ... 32xA100: 29 jours" and "48xA100: 19 jours pour 100b tokens":
    # nearly the same compute, 928 and 912 GPU-days (the figure's flat line means linear scaling).
    assert f.gpu_days(days=29, gpus=32) == 928
    assert f.gpu_days(days=19, gpus=48) == 912
    # days_to_train inverts tokens/s: 100B tokens in 29 days is 100e9 / (29 * 86400) tokens/s.
    assert f.days_to_train(tokens=100e9, tokens_per_sec=100e9 / (29 * 86400)) == pytest.approx(29)


def test_pipeline_efficiency_seed_002():
    # "if you set gas=8*PP you should get 90% pipeline efficiency"; "16*PP increases efficiency to 94%"
    assert f.pipeline_efficiency(gas=8 * 16, pp=16) == pytest.approx(128 / 143)
    assert round(f.pipeline_efficiency(gas=8 * 16, pp=16), 2) == 0.90
    assert round(f.pipeline_efficiency(gas=16 * 16, pp=16), 2) == 0.94
    assert f.pipeline_efficiency(gas=4, pp=1) == 1.0


def test_batch_arithmetic_of_the_seed_tables():
    assert f.data_parallel_size(world=64, tp=4, pp=16) == 1
    assert f.global_batch(micro_batch=4, gas=256, dp=1) == 1024
    # ZeRO table: 64 GPUs, TP 4, no PP -> DP 16, mbs 48 -> 768
    assert f.data_parallel_size(world=64, tp=4, pp=1) == 16
    assert f.global_batch(micro_batch=48, gas=1, dp=16) == 768


ADAM = f.model_state_bytes_per_param(optimizer="adam", mixed_precision=True)


@pytest.mark.parametrize(
    ("optimizer", "mixed_precision", "factored", "weights", "grads", "optimizer_bytes"),
    [
        # ZeRO section 3.1: mixed-precision Adam keeps 2 + 2 + K, K = 12 (fp32 master, momentum, variance)
        ("adam", True, 0.0, 2, 2, 12),
        ("adamw", True, 0.0, 2, 2, 12),
        # SGD with momentum: 2 + 2 + 4 (master) + 4 (momentum) = 12 bytes/param
        ("sgd", True, 0.0, 2, 2, 8),
        # Adafactor: no momentum, factored second moment (here 0.01 element per parameter)
        ("adafactor", True, 0.01, 2, 2, 4 + 4 * 0.01),
        # fp32: no master copy; weights and gradients 4 bytes
        ("adam", False, 0.0, 4, 4, 8),
        ("sgd", False, 0.0, 4, 4, 4),
        ("adafactor", False, 0.01, 4, 4, 4 * 0.01),
    ],
)
def test_model_state_bytes_follow_the_optimizer(
    optimizer, mixed_precision, factored, weights, grads, optimizer_bytes
):
    found = f.model_state_bytes_per_param(
        optimizer=optimizer, mixed_precision=mixed_precision, factored_second_moment_per_param=factored
    )
    assert (found.weights, found.grads) == (weights, grads)
    assert found.optimizer == pytest.approx(optimizer_bytes)


def test_an_unknown_optimizer_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="optimizer='lamb' is unknown; known: adam, adamw, sgd, adafactor"):
        f.model_state_bytes_per_param(optimizer="lamb", mixed_precision=True)


def test_zero_memory_of_sgd_and_adafactor_by_hand():
    psi, n = 1e9, 8
    sgd = f.model_state_bytes_per_param(optimizer="sgd", mixed_precision=True)
    assert f.zero_model_state_memory(params=psi, dp=n, stage=0, state_bytes=sgd).gpu_bytes == 12 * psi
    assert f.zero_model_state_memory(params=psi, dp=n, stage=1, state_bytes=sgd).gpu_bytes == pytest.approx(
        4 * psi + 8 * psi / n
    )
    adafactor = f.model_state_bytes_per_param(
        optimizer="adafactor", mixed_precision=True, factored_second_moment_per_param=0.001
    )
    assert f.zero_model_state_memory(params=psi, dp=1, stage=0, state_bytes=adafactor).gpu_bytes == (
        pytest.approx(8.004 * psi)
    )


@pytest.mark.parametrize(
    ("stage", "gb"),
    # ZeRO paper figure 1: Ψ = 7.5B, N_d = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.88 GB
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_memory_of_the_zero_paper_example(stage, gb):
    memory = f.zero_model_state_memory(params=7.5e9, dp=64, stage=stage, state_bytes=ADAM)
    assert round(memory.gpu_bytes / 1e9, 1) == gb
    assert memory.cpu_bytes == 0


def test_zero_memory_formulas_by_hand():
    psi, n = 1e9, 8
    assert f.zero_model_state_memory(params=psi, dp=n, stage=0, state_bytes=ADAM).gpu_bytes == 16 * psi
    assert f.zero_model_state_memory(params=psi, dp=n, stage=1, state_bytes=ADAM).gpu_bytes == pytest.approx(
        4 * psi + 12 * psi / n
    )
    assert f.zero_model_state_memory(params=psi, dp=n, stage=2, state_bytes=ADAM).gpu_bytes == pytest.approx(
        2 * psi + 14 * psi / n
    )
    assert f.zero_model_state_memory(params=psi, dp=n, stage=3, state_bytes=ADAM).gpu_bytes == pytest.approx(
        16 * psi / n
    )


def test_zero_offload_moves_the_optimizer_and_parameters_to_cpu():
    psi, n = 1e9, 8
    s2 = f.zero_model_state_memory(params=psi, dp=n, stage=2, state_bytes=ADAM, offload_optimizer=True)
    assert s2.gpu_bytes == pytest.approx(2 * psi + 2 * psi / n)
    assert s2.cpu_bytes == pytest.approx(12 * psi / n)
    s3 = f.zero_model_state_memory(
        params=psi, dp=n, stage=3, state_bytes=ADAM, offload_optimizer=True, offload_param=True
    )
    assert s3.gpu_bytes == pytest.approx(2 * psi / n)  # only the fp16 gradient partition stays
    assert s3.cpu_bytes == pytest.approx(14 * psi / n)


def test_zero_memory_rejects_impossible_settings():
    with pytest.raises(ValueError, match="stage=4"):
        f.zero_model_state_memory(params=1e9, dp=8, state_bytes=ADAM, stage=4)
    with pytest.raises(ValueError, match="offload_param needs zero stage 3"):
        f.zero_model_state_memory(params=1e9, dp=8, state_bytes=ADAM, stage=2, offload_param=True)
    with pytest.raises(ValueError, match="offload_optimizer"):
        f.zero_model_state_memory(params=1e9, dp=8, state_bytes=ADAM, stage=0, offload_optimizer=True)

"""`logstat estimate` numbers against hand computations (the seed's 52B benchmark): the text of the
one planner (logstat.runners.validate), on the spec the options describe."""

import copy

import pytest
from logstat.runners.plan_text import BASE_SPEC, estimate_text, preset_msize
from logstat.runners.spec import SpecError, build_spec


def memory_rows(text: str) -> dict[str, list[str]]:
    """The ZeRO memory table's rows by stage cell, cells stripped."""
    rows = [line for line in text.splitlines() if line.startswith("|")][2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return {c[0]: c[1:] for c in cells}


def planned(*overrides: str):
    return build_spec(copy.deepcopy(BASE_SPEC), overrides)


SEED_52B = ("model.preset=52", "cluster.gpus_per_node=64", "parallel.tp=4", "parallel.pp=16", "train.zero_stage=1",
            "batch.micro=4", "batch.gas=256", "estimate.sec_per_iter=129.0")  # fmt: skip


def test_preset_msize_comes_from_the_runners_presets():
    assert preset_msize("52B") == 52 and preset_msize("7") == 7
    with pytest.raises(ValueError, match="no GPT-2 preset of size 53B; presets: 7, 14"):
        preset_msize("53B")
    with pytest.raises(ValueError, match="not a preset size like 52B"):
        preset_msize("big")


def test_the_52b_benchmark_estimate():
    text = estimate_text(planned(*SEED_52B, "cluster.gpu_model=V100-SXM2-32GB"))
    assert "Model: GPT-2 52B preset: hidden 8192, layers 64" in text
    assert "Parameters: 51.97B (51,966,533,632)" in text
    assert "Parallelism: 64 GPUs = TP 4 x PP 16 x DP 1" in text
    assert "Global batch: 1024 = micro batch 4 x gas 256 x DP 1" in text
    assert "Pipeline efficiency: 94.5% = gas/(gas+PP-1) = 256/271" in text  # 256/271 = 0.9446
    # Ψ per rank = 51966533632 / 64 = 811.98M; ZeRO 1 with N = 1 keeps all 16 bytes: 12.99 GB
    assert "adam in fp16: 2 + 2 + 12 = 16 bytes/param" in text
    assert "Ψ = 0.812B per TP x PP rank, partitioned over N = DP = 1" in text
    # offloaded: 4Ψ = 3.25 GB stay, 12Ψ = 9.74 GB go
    assert memory_rows(text)["1 (this run)"] == ["13.0", "3.2", "-", "9.7"]
    assert "This run (ZeRO 1): 13.0 GB per GPU" in text
    # 1024 * 1024 / 129 = 8128.5 tokens/s
    assert "129 s/iteration = 8,128 tokens/s" in text
    # seed formula with the computed size: 51.9665 * 8 * 1024 * 1024 / (129 * 64e3) = 52.80
    assert "TFLOPs per GPU: 52.8 (seed formula, factor 4); 53.8 (Megatron eq. 3)" in text
    # the same definitions as the parse/table MFU and HFU columns: model FLOPs (no recomputation)
    # 72*B*s*l*h^2*(1 + s/6h) + 6*B*s*h*V = 3.336e17 per step / (129 s * 64 GPUs) = 40.4 TFLOPs,
    # 32.3% of 125 (the seed's factor 4 made it 42.2%); HFU 53.8 / 125 = 43.0%
    b, s, layers, h, v = 1024, 1024, 64, 8192, 50257
    model = (72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v) / (129 * 64 * 1e12)
    assert f"{model:.1f}" == "40.4" and f"{model / 125:.1%}" == "32.3%"
    assert (
        "MFU: 32.3% of the V100-SXM2-32GB fp16 dense peak 125 TFLOPs (model FLOPs 40.4 TFLOPs: eq. 3 without "
        "recomputation); HFU: 43.0% (eq. 3 as run)"
    ) in text
    # 100e9 / 8128.5 / 86400 = 142.39 days; * 64 = 9113 GPU-days
    assert text.endswith("Days for 100B tokens: 142.4 (9,113 GPU-days)\n")


def test_zero_memory_with_data_parallelism():
    # 8 GPUs, DP 8, the 7B preset (h 4096, l 36): Ψ = 36*(12*4096^2+13*4096) + 50257*4096 + 1024*4096 + 2*4096
    psi = 36 * (12 * 4096**2 + 13 * 4096) + 50257 * 4096 + 1024 * 4096 + 2 * 4096
    text = estimate_text(planned("model.preset=7", "cluster.gpus_per_node=8", "train.zero_stage=3", "stack=hf-zero3",
                                 "train.optimizer=adamw", "train.offload_optimizer=true", "train.offload_param=true"))  # fmt: skip
    rows = memory_rows(text)
    assert rows["3 (this run)"] == [f"{n * psi / 8 / 1e9:.1f}" for n in (16, 4, 2, 14)]
    stage2 = [(2 * psi + 14 * psi / 8) / 1e9, (2 * psi + 2 * psi / 8) / 1e9, None, 12 * psi / 8 / 1e9]
    assert rows["2"] == [f"{v:.1f}" if v else "-" for v in stage2]
    assert rows["0"] == [f"{16 * psi / 1e9:.1f}", "-", "-", "-"]
    assert "TFLOPs and days: give --sec-per-iter" in text


def test_memory_follows_the_optimizer():
    # SGD with momentum, mixed precision: 2 + 2 + 4 + 4 = 12 bytes/param; 7B on 8 GPUs at ZeRO 0
    psi = 36 * (12 * 4096**2 + 13 * 4096) + 50257 * 4096 + 1024 * 4096 + 2 * 4096
    text = estimate_text(planned("model.preset=7", "cluster.gpus_per_node=8", "train.optimizer=sgd"))
    assert "sgd in fp16: 2 + 2 + 8 = 12 bytes/param" in text
    assert memory_rows(text)["0 (this run)"][0] == f"{12 * psi / 1e9:.1f}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("cluster.gpus_per_node=63",), r"\(tp=4 \* pp=16\) does not divide the world size"),
        (("batch.gas=0",), "batch.gas=0 must be >= 1"),
        (("estimate.sec_per_iter=0",), "estimate.sec_per_iter=0.0 must be > 0"),
        (("train.zero_stage=2",), "ZeRO stages 2 and 3 do not work with pipeline parallelism"),
        (("parallel.pp=3", "cluster.gpus_per_node=12"), "parallel.pp=3 does not divide model.num_layers=64"),
        (
            ("train.optimizer=adafactor",),
            "train.optimizer='adafactor' is not one of stack megatron-deepspeed's",
        ),
    ],
)
def test_impossible_plans_are_refused_as_run_refuses_them(overrides, message):
    with pytest.raises(SpecError, match=message):
        estimate_text(planned(*SEED_52B, *overrides))


def test_the_stages_the_planner_refuses_are_named_under_the_memory_table():
    text = estimate_text(planned(*SEED_52B))  # PP 16: ZeRO 2 and 3 are refused
    assert (
        "ZeRO 2 and 3: refused for this run (train.zero_stage=2 with parallel.pp=16: ZeRO stages 2 and 3 do not "
        "work with pipeline parallelism (seed 002: use stage 0 or 1 with PP))"
    ) in text
    data_parallel = estimate_text(
        planned("model.preset=7", "cluster.gpus_per_node=8", "stack=hf-zero3", "train.optimizer=adamw")
    )
    assert "refused for this run" not in data_parallel

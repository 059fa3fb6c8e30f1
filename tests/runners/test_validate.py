"""Validation: one test per refusal (field, value and rule in the message), the warnings, the estimate."""

from __future__ import annotations

import pytest
from logstat.runners.spec import SpecError, load_spec
from logstat.runners.validate import check, estimate, slurm_time_limit_s, validate

BASE = "gpt2-52b-megatron-ds"  # 16 x 4 GPUs, TP 4, PP 16, DP 1, mbs 4, gas 256, gbs 1024, 64 layers, 32 heads


def problems(name: str, *overrides: str) -> list[str]:
    return [str(p) for p in check(load_spec(name, overrides)).problems]


def refused(name: str, *overrides: str) -> str:
    found = problems(name, *overrides)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    "name",
    [
        "gpt2-52b-megatron-ds",
        "gpt2-52b-hf-zero3",
        "gpt2-52b-ddp-powersgd",
        "gpt2-tiny-megatron-ds",
        "gpt2-tiny-hf-zero3",
        "gpt2-tiny-ddp-powersgd",
    ],
)
def test_shipped_specs_are_valid(name):
    assert problems(name) == []


def test_world_not_divisible_by_tp_times_pp():
    assert refused(BASE, "cluster.nodes=15", "batch.global_batch=none") == (
        "parallel.tp*parallel.pp=64 (tp=4 * pp=16) does not divide the world size "
        "cluster.nodes*cluster.gpus_per_node=15*4=60"
    )


def test_layers_not_divisible_by_pp():
    # pp=8 keeps the world divisible (64 / 32 = DP 2); 64 layers are fine, 60 are not.
    assert refused(BASE, "parallel.pp=8", "model.preset=none", "model.hidden_size=8192", "model.num_layers=60",
                   "batch.global_batch=none") == "parallel.pp=8 does not divide model.num_layers=60"  # fmt: skip


def test_the_issue_example_pp_7():
    found = problems(BASE, "parallel.pp=7")
    assert "parallel.pp=7 does not divide model.num_layers=64" in found


def test_heads_not_divisible_by_tp():
    assert refused(BASE, "parallel.tp=3", "cluster.gpus_per_node=3", "batch.global_batch=none") == (
        "parallel.tp=3 does not divide model.num_heads=32"
    )


def test_hidden_not_divisible_by_heads():
    assert (
        refused("gpt2-tiny-hf-zero3", "model.num_heads=3")
        == "model.num_heads=3 does not divide model.hidden_size=64"
    )


def test_global_batch_must_be_micro_times_gas_times_dp():
    assert refused(BASE, "batch.global_batch=1000") == (
        "batch.global_batch=1000 != batch.micro*batch.gas*DP = 4*256*1 = 1024 "
        "(global = micro * gas * DP, DP = world / (TP*PP))"
    )


def test_micro_batch_zero_is_caught_before_megatron_asserts():
    assert refused(BASE, "batch.micro=0") == (
        "batch.micro=0 must be >= 1 (Megatron would stop later with 'Micro batch size per gpu: 0')"
    )


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_2_and_3_refused_with_pipeline_parallelism(stage):
    assert refused(BASE, f"train.zero_stage={stage}") == (
        f"train.zero_stage={stage} with parallel.pp=16: ZeRO stages 2 and 3 do not work with pipeline "
        "parallelism (seed 002: use stage 0 or 1 with PP)"
    )


def test_zero_3_without_pipeline_is_fine():
    assert problems("gpt2-52b-hf-zero3", "train.zero_stage=2") == []


@pytest.mark.parametrize("stage", [2, 3])
def test_megatron_deepspeed_refuses_zero_2_and_3_even_with_one_stage(stage):
    # pretrain_gpt.py builds a PipelineModule under --deepspeed whatever --pipeline-model-parallel-size is
    message = refused(BASE, "parallel.pp=1", "batch.global_batch=none", f"train.zero_stage={stage}")
    assert message.startswith(
        f"train.zero_stage={stage} is not implemented by stack megatron-deepspeed (stages: 0, 1): "
        "pretrain_gpt.py builds its model as a DeepSpeed PipelineModule"
    )
    assert "'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'" in message


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("steps=0",), "steps=0 must be >= 1"),
        (("batch.gas=0",), "batch.gas=0 must be >= 1"),
        (("parallel.tp=0",), "parallel.tp=0 must be >= 1"),
        (("cluster.gpus_per_node=0",), "cluster.gpus_per_node=0 must be >= 1"),
        (("train.lr=0",), "train.lr=0.0 must be > 0"),
        (("train.precision=fp8",), "train.precision='fp8' must be one of fp32, fp16, bf16"),
        (("train.zero_stage=4",), "train.zero_stage=4 must be 0, 1, 2 or 3"),
        (("train.offload_optimizer=true",), "train.offload_optimizer=True needs train.zero_stage >= 1 (ZeRO-Offload)"),
        (("train.zero_stage=1", "train.offload_param=true"),
         "train.offload_param=True needs train.zero_stage=3, not 1 (ZeRO-Infinity)"),
        (("train.optimizer=adafactor",), "train.optimizer='adafactor' is not one of stack megatron-deepspeed's: adam, sgd"),
        (("stack=jax",), "stack='jax' is unknown (stacks: megatron-deepspeed, hf-zero3, ddp-powersgd)"),
        (("name=../escape",), "name='../escape' must be a plain name (letters, digits, '.', '_', '-'): it names runs/<name>/"),
        (("cluster.time_limit=6 hours",), "cluster.time_limit='6 hours' is not a Slurm time ([D-]HH:MM:SS or minutes)"),
        (("cluster.master_port=70000",), "cluster.master_port=70000 is not a TCP port (1-65535)"),
        (("cluster.cpus_per_task=0",), "cluster.cpus_per_task=0 must be >= 1"),
        (("train.seed=-1",), "train.seed=-1 must be in 0..2**32-1: numpy's seed range (PowerSGD, HF set_seed "
                             "and Megatron seed numpy with it)"),
        (("train.seed=4294967296",), "train.seed=4294967296 must be in 0..2**32-1: numpy's seed range (PowerSGD, "
                                     "HF set_seed and Megatron seed numpy with it)"),
        (("train.precision=bf16",), "train.precision='bf16' needs bf16 tensor cores, which "
                                    "cluster.gpu_model='V100-SXM2-32GB' has not"),
        (("megatron.data_impl=foo",), "megatron.data_impl='foo' must be one of lazy, cached, mmap, infer (--data-impl)"),
        (("megatron.split=abc",), "megatron.split='abc' must be up to three weights of train, validation and test "
                                  "split at ',' or '/', not all zero (--split, e.g. 949,50,1)"),
        (("megatron.split=0,0,0",), "megatron.split='0,0,0' must be up to three weights of train, validation and "
                                    "test split at ',' or '/', not all zero (--split, e.g. 949,50,1)"),
        (("model.vocab_size=128",), "model.vocab_size=128 must be GPT-2's 50257 with stack megatron-deepspeed: "
                                    "pretrain_gpt.py takes its vocabulary from megatron.vocab_file "
                                    "(GPT2BPETokenizer), not from a size"),
    ],
)  # fmt: skip
def test_field_refusals(overrides, message):
    assert refused(BASE, *overrides) == message


def test_control_characters_in_sbatch_fields_are_refused():
    assert refused(BASE, "cluster.job_name=a\nrm -rf x") == (
        "cluster.job_name='a\\nrm -rf x' contains a control character (newline, tab...): "
        "#SBATCH lines cannot hold one"
    )


def test_data_parallel_stacks_refuse_model_parallelism():
    assert refused("gpt2-52b-hf-zero3", "parallel.tp=4", "batch.global_batch=none") == (
        "parallel.tp=4 must be 1: stack hf-zero3 is data parallel only"
    )


def test_ddp_refuses_zero():
    assert refused("gpt2-tiny-ddp-powersgd", "train.zero_stage=1") == (
        "train.zero_stage=1 is not implemented by stack ddp-powersgd (stages: 0)"
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.seq_len=1", "model.seq_len=1 must be >= 2: a causal LM predicts each next token, one has none"),
        ("model.vocab_size=1", "model.vocab_size=1 must be >= 2: a vocabulary of one token leaves nothing to predict"),
        # h 64, vocab 128, seq 32: the MLP's 64 x 256 compresses while 2*320*r < 16384, r <= 25
        ("ddp.powersgd_rank=26", "ddp.powersgd_rank=26 compresses none of the model's gradient matrices: PowerSGD "
                                 "sends an n x m one as rank-r factors only when 2*(n+m)*r < n*m (torch's "
                                 "min_compression_rate 2), so r <= 25 here"),
    ],
)  # fmt: skip
def test_settings_that_would_train_nothing_are_refused(override, message):
    # each ran before: NaN losses from the first steps, or a PowerSGD hook of "compression rate: 1.000"
    assert refused("gpt2-tiny-ddp-powersgd", override) == message
    assert problems("gpt2-tiny-ddp-powersgd", "ddp.powersgd_rank=25") == []


@pytest.mark.parametrize(
    ("name", "override", "message"),
    [
        ("gpt2-tiny-hf-zero3", "ddp.powersgd_rank=8",
         "ddp.powersgd_rank=8 is read by stack ddp-powersgd only; stack hf-zero3 ignores it"),
        ("gpt2-tiny-ddp-powersgd", "megatron.split=98,2,0",
         "megatron.split='98,2,0' is read by stack megatron-deepspeed only; stack ddp-powersgd ignores it"),
        ("gpt2-tiny-hf-zero3", "megatron.data_path=data/text_document",
         "megatron.data_path='data/text_document' is read by stack megatron-deepspeed only; stack hf-zero3 ignores it"),
        (BASE, "ddp.powersgd_start_iter=10",
         "ddp.powersgd_start_iter=10 is read by stack ddp-powersgd only; stack megatron-deepspeed ignores it"),
    ],
)  # fmt: skip
def test_another_stacks_setting_is_refused_not_ignored(name, override, message):
    assert refused(name, override) == message
    assert problems(name) == []  # its defaults are no setting


def test_powersgd_start_iter_must_allow_warm_start():
    assert refused("gpt2-tiny-ddp-powersgd", "ddp.powersgd_start_iter=1").startswith(
        "ddp.powersgd_start_iter=1 must be >= 2"
    )


def test_every_problem_is_reported_at_once():
    with pytest.raises(SpecError) as info:
        validate(load_spec(BASE, ["parallel.pp=7", "batch.micro=0"]))
    message = str(info.value)
    assert "batch.micro=0 must be >= 1" in message
    assert "parallel.pp=7 does not divide model.num_layers=64" in message
    assert "(tp=4 * pp=7) does not divide the world size" in message


def test_warning_when_gas_under_8_pp():
    report = check(load_spec(BASE, ["batch.gas=32", "batch.global_batch=none"]))
    assert report.problems == []
    # 32 / (32 + 16 - 1) = 0.6808...
    assert report.warnings == [
        "batch.gas=32 < 8*parallel.pp=128: pipeline efficiency gas/(gas+PP-1) = 68.1%, under 90% (seed 002)"
    ]


def test_no_warning_at_8_pp():
    assert check(load_spec(BASE, ["batch.gas=128", "batch.global_batch=none"])).warnings == []


def test_warning_when_zero_memory_exceeds_the_gpu():
    # 52B on DDP with fp16 Adafactor: 2 (weights) + 2 (grads) + 4 (fp32 master) bytes/param on every GPU,
    # plus Adafactor's factored second moment: 4 bytes per element, rows+cols per matrix, full vectors.
    h, layers, v, s = 8192, 64, 50257, 1024
    params = layers * (12 * h * h + 13 * h) + v * h + s * h + 2 * h
    matrices = layers * ((h + 3 * h) + (h + h) + (h + 4 * h) + (4 * h + h)) + (v + h) + (s + h)
    vectors = layers * 13 * h + 2 * h
    state_bytes = 2 + 2 + 4 + 4 * (matrices + vectors) / params
    gib = state_bytes * params / 2**30
    report = check(load_spec("gpt2-52b-ddp-powersgd"))
    assert report.warnings == [
        f"ZeRO model-state memory estimate {gib:.1f} GiB ({gib * 2**30 / 1e9:.1f} GB, as the estimate's table "
        "writes it) per GPU (train.zero_stage=0, DP=64, TP*PP=1, "
        f"train.optimizer=adafactor: {state_bytes:.4g} bytes/param) exceeds the V100-SXM2-32GB's 32 GiB, "
        "before activations"
    ]
    assert f"{gib:.1f}" == "387.2"  # not Adam's 16 bytes/param (774.4 GiB)


def test_sgd_keeps_12_bytes_per_param_not_adams_16():
    # Megatron with SGD + momentum, fp16: 2 + 2 + 4 (master) + 4 (momentum); ZeRO 0 on a TP*PP = 64 slice
    plan = estimate(load_spec(BASE, ["train.optimizer=sgd"]))
    assert plan.state_bytes.total == 12
    assert plan.model_state_gib_per_gpu == pytest.approx(12 * 51_966_533_632 / 64 / 2**30)


def test_adafactor_second_moment_count_is_torchs_own():
    """The factored-state count of the planner against the state torch.optim.Adafactor really keeps
    for a GPT-2 built the way the DDP entry point builds it."""
    import torch
    from logstat.analytics.formulas import gpt2_adafactor_second_moment_elements
    from transformers import GPT2Config, GPT2LMHeadModel

    h, layers, v, s = 64, 2, 128, 32
    model = GPT2LMHeadModel(GPT2Config(n_embd=h, n_layer=layers, n_head=2, n_positions=s, vocab_size=v))
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3)
    model(
        input_ids=torch.zeros(1, s, dtype=torch.long), labels=torch.zeros(1, s, dtype=torch.long)
    ).loss.backward()
    optimizer.step()
    held = sum(
        tensor.numel()
        for state in optimizer.state.values()
        for name, tensor in state.items()
        if name in ("row_var", "col_var", "variance")
    )
    assert held == gpt2_adafactor_second_moment_elements(hidden=h, layers=layers, vocab=v, seq_len=s)


def test_warning_when_the_time_limit_is_shorter_than_the_run():
    # 1000 steps at the assumed 46.7 TFLOPs/GPU: 145.85 s each = 40.5 h, over the 6 h limit
    report = check(load_spec(BASE, ["steps=1000"]))
    assert report.warnings == [
        "cluster.time_limit='06:00:00' (6.0 h) is shorter than the estimated run time steps=1000 x 145.9 "
        "s/iteration (at the assumed estimate.tflops_per_gpu=46.7) = 40.5 h: Slurm would cancel the job "
        "before its last step"
    ]
    measured = check(
        load_spec(BASE, ["estimate.tflops_per_gpu=none", "estimate.sec_per_iter=129", "steps=200"])
    )
    assert measured.warnings == [
        "cluster.time_limit='06:00:00' (6.0 h) is shorter than the estimated run time steps=200 x 129.0 "
        "s/iteration (estimate.sec_per_iter) = 7.2 h: Slurm would cancel the job before its last step"
    ]
    assert check(load_spec(BASE, ["steps=100"])).warnings == []  # 4.05 h
    assert check(load_spec(BASE, ["steps=1000", "cluster.time_limit=0"])).warnings == []  # 0: no limit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 1800), ("30:15", 1815), ("06:00:00", 21600), ("2-12", 216000), ("1-01:30", 91800),
     ("1-00:00:07", 86407), ("0", None), ("6 hours", None)],
)  # fmt: skip
def test_slurm_time_limits(text, seconds):
    assert slurm_time_limit_s(text) == seconds


def test_speed_given_twice_is_refused():
    assert refused(BASE, "estimate.sec_per_iter=129") == (
        "estimate.sec_per_iter=129.0 and estimate.tflops_per_gpu both give the speed: give one "
        "(the other follows from it)"
    )


def test_estimate_refuses_what_run_refuses():
    with pytest.raises(SpecError, match="parallel.pp=7 does not divide model.num_layers=64"):
        estimate(load_spec(BASE, ["parallel.pp=7"]))


def test_zero_3_memory_fits_and_does_not_warn():
    # Same model, ZeRO-3 over 64 GPUs: 16 * 51.97e9 / 64 bytes = 12.1 GiB < 32.
    assert check(load_spec("gpt2-52b-hf-zero3")).warnings == []


def test_estimate_of_the_52b_benchmark():
    plan = estimate(load_spec(BASE))
    h, layers, v, s = 8192, 64, 50257, 1024
    params = layers * (12 * h * h + 13 * h) + v * h + s * h + 2 * h
    assert plan.params == params == 51_966_533_632
    # ZeRO 0 on a TP*PP = 64 slice: 16 bytes * params / 64.
    assert plan.model_state_gib_per_gpu == pytest.approx(16 * params / 64 / 2**30)
    assert plan.pipeline_efficiency == pytest.approx(256 / (256 + 16 - 1))
    # Seed formula solved for time at the assumed 46.7 TFLOPs: size_B*4*2*seq*gbs / (46.7 * 64 * 1e3).
    sec = (params / 1e9) * 4 * 2 * 1024 * 1024 / (46.7 * 64 * 1e3)
    assert plan.sec_per_iter == pytest.approx(sec)
    assert sec == pytest.approx(145.85, abs=0.01)  # the seed measured 146 s at 46.7 TFLOPs
    assert plan.days == pytest.approx(100e9 / (1024 * 1024 / sec) / 86400)


def test_nul_bytes_are_refused_in_any_string_field():
    assert refused(BASE, "megatron.data_path=a\0b") == (
        "megatron.data_path='a\\x00b' contains a NUL byte, which no command line, path or file name can hold"
    )


@pytest.mark.parametrize("split", ["949,50,1", "98,2,0", "100", "0.9/0.1", "969,30"])
def test_megatron_splits_it_reads(split):
    assert problems(BASE, f"megatron.split={split}") == []


def test_seed_bounds_and_bf16_on_gpus_that_have_it():
    assert problems("gpt2-tiny-ddp-powersgd", "train.seed=0") == []
    assert problems("gpt2-tiny-ddp-powersgd", f"train.seed={2**32 - 1}") == []
    assert problems(BASE, "train.precision=bf16", "cluster.gpu_model=A100-SXM4-80GB") == []
    assert problems(BASE, "train.precision=bf16", "cluster.gpu_model=none") == []  # unknown: not refused


def test_a_count_refused_is_not_refused_again_through_the_global_batch_derived_from_it():
    # global = micro * gas * nodes * gpus_per_node / (TP*PP): 0 because nodes is, which is the one problem
    assert problems("gpt2-tiny-ddp-powersgd", "cluster.nodes=0") == ["cluster.nodes=0 must be >= 1"]
    assert problems("gpt2-tiny-ddp-powersgd", "cluster.gpus_per_node=0") == [
        "cluster.gpus_per_node=0 must be >= 1"
    ]

"""The four real BigScience logs: every fact the Megatron and Slurm families read, against values
computed independently with grep/awk (the command is beside each value)."""

import pytest

from logstat.api import load_runs

L = "fixtures/bigscience"


@pytest.fixture(scope="module")
def rows(real_logs):
    runs = load_runs([real_logs]).runs
    return {
        path.rsplit("/", 1)[1]: row
        for path, row in zip(runs["path"], runs.iter_rows(named=True), strict=True)
    }


# grep -E "^  (world_size|tensor_model_parallel_size|pipeline_model_parallel_size|data_parallel_size|
#   micro_batch_size|global_batch_size|seq_length|hidden_size|ffn_hidden_size|num_layers|num_attention_heads|
#   train_iters) " $L/meg_gpt2_perf_n16.out | awk '{print $1"="$NF}'
MEG_GPT2 = {
    "gpus": 64,
    "tp": 4,
    "pp": 16,
    "dp": 1,
    "micro_batch_size": 4,
    "global_batch_size": 1024,
    "seq_len": 1024,
    "hidden_size": 8192,
    "ffn_hidden_size": 32768,
    "num_layers": 64,
    "num_heads": 32,
    "train_iters": 1000,
    # grep -o "padded vocab.*" -> (size: 50257) ... (new size: 50688)
    "vocab_size": 50257,
    "padded_vocab_size": 50688,
    # grep -o "micro-batches to constant [0-9]*"
    "gas": 256,
    # checkpoint_activations .... True ; fp16 .... True
    "activation_checkpointing": True,
    "precision": "fp16",
    # grep -o "iteration *[0-9]*/ *[0-9]*" | sort -u | wc -l
    "iterations": 3,
    "family": "megatron",
    "status": "incomplete",
}


def test_meg_gpt2_facts(rows):
    row = rows["meg_gpt2_perf_n16.out"]
    assert {k: row[k] for k in MEG_GPT2} == MEG_GPT2
    assert row["gpu_model"] is None and row["mfu"] is None  # the log never names its GPU: not guessed


def test_meg_gpt2_numbers(rows):
    row = rows["meg_gpt2_perf_n16.out"]
    # grep -o "elapsed time per iteration (ms): [0-9.]*" | awk '{print $NF}' | tail -n +2 | sort -n -> median
    assert row["sec_per_iter"] == pytest.approx(128.96015)
    # l*(12h^2+13h) + v*h + s*h + 2h with h=8192, l=64, v=50257, s=1024, by hand:
    params = 64 * (12 * 8192**2 + 13 * 8192) + 50257 * 8192 + 1024 * 8192 + 2 * 8192
    assert params == 51_966_533_632
    assert row["model_size_b"] == pytest.approx(51.966533632)
    # seed: size_B * 4 * 2 * seq * gbs / (s_per_iter * gpus * 1e3) = 52.8 (seed 001 reports 52-53)
    assert row["tflops_per_gpu"] == pytest.approx(51.966533632 * 4 * 2 * 1024 * 1024 / (128.96015 * 64 * 1e3))
    assert row["tflops_per_gpu"] == pytest.approx(52.8, abs=0.05)
    assert row["samples_per_sec"] == pytest.approx(1024 / 128.96015)
    assert row["tokens_per_sec"] == pytest.approx(1024 * 1024 / 128.96015)
    assert row["reason_line"] == 345  # grep -n " iteration        3/" -> 345


def test_meg_ds_3d_facts_and_numbers(rows):
    row = rows["meg_ds_3d_gpt2_perf_n16-ds-on.out"]
    expected = dict(MEG_GPT2, iterations=49, zero_stage=0)
    expected.pop("family")
    assert {k: row[k] for k in expected} == expected
    # DeepSpeed's config printer says "world_size ... 1" (its data-parallel size): Megatron's 64 stays
    assert row["gpus"] == 64
    # median of the 48 step times after the first (awk as above): 137103.55 ms
    assert row["sec_per_iter"] == pytest.approx(137.10355)
    assert row["family"] == "megatron-deepspeed"


def test_meg_ds_3d_iterations_and_memory(real_logs):
    its = load_runs([real_logs / "meg_ds_3d_gpt2_perf_n16-ds-on.out"]).iterations
    assert its["iteration"].to_list() == list(range(1, 50))
    first = its.row(0, named=True)
    # grep -n "iteration        1/" -> line 901: elapsed 159778.9, lm-loss 1.244238E+01, lr 1.875E-05
    assert (first["elapsed_ms"], first["loss"], first["lr"]) == (159778.9, 12.44238, 1.875e-05)
    # grep "(after 1 iterations)" | grep -o "| allocated: [0-9.]*" | sort -g | tail -1 ; same for max allocated
    assert first["mem_allocated_mb"] == 12923.83251953125
    assert first["mem_max_allocated_mb"] == 19961.072265625


def test_meg_ds_zero_old_megatron(rows):
    row = rows["meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out"]
    # "using world size: 64 and model-parallel size: 4"; args batch_size 48, zero_stage 3
    expected = {
        "gpus": 64,
        "tp": 4,
        "pp": 1,
        "dp": 16,
        "micro_batch_size": 48,
        "seq_len": 1024,
        "hidden_size": 8192,
        "num_layers": 64,
        "num_heads": 32,
        "zero_stage": 3,
        "activation_checkpointing": True,
        "precision": "fp16",
        "iterations": 3,
        "logged_model_size": 52.005,  # "Effective Tera Flops per GPU: 41.94 and total parameters 52.005 B"
    }
    assert {k: row[k] for k in expected} == expected
    assert row["sec_per_iter"] == pytest.approx(124.9101)  # median of 125912.4 and 123907.8 ms
    assert row["model_size_note"] is None  # 52.005 vs 51.97: 0.07% apart, same unit


def test_meg_ds_zero_tflops_agree_with_its_own_effective_tflops(rows):
    row = rows["meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out"]
    assert row["global_batch_size"] == 768
    # the log's own "Effective Tera Flops per GPU" of steps 2 and 3: 40.6 and 41.26, median 40.93
    assert row["tflops_per_gpu"] == pytest.approx((40.6 + 41.26) / 2, rel=0.01)


def test_hf_log_runs_are_one_row_with_its_attempts(rows):
    row = rows["hf_ds_gpt2_perf_n16_bs4-mbs8.out"]
    assert row["iterations"] == 0  # no per-step lines: grep -c "'loss'" -> 0
    # the job ran three configurations; the last one (micro batch 8, train_batch_size 512) finished:
    # grep -o "'train_samples_per_second': [0-9.]*" | sort | uniq -c -> 15 x 3.663, 1 x 3.664
    assert row["gpus"] == 64
    assert row["status"] == "ok"
    assert row["global_batch_size"] == 512
    assert row["sec_per_iter"] == pytest.approx(512 / 3.663, rel=0.001)

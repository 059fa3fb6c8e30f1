"""Summary columns from hand-built frames: the steady-state statistic and its source, model size and
its note, TFLOPs by both formulas, MFU (null when the GPU is unknown)."""

import polars as pl
import pytest
from logstat.analytics.summary import summarize
from logstat.parsers.schema import ITERATIONS_SCHEMA, RUNS_SCHEMA

SHAPE_52B = {"hidden_size": 8192, "num_layers": 64, "seq_len": 1024, "vocab_size": 50257}


def runs(*rows):
    return pl.DataFrame([{k: r.get(k) for k in RUNS_SCHEMA} for r in rows], schema=RUNS_SCHEMA, strict=False)


def iterations(path, **columns):
    n = len(next(iter(columns.values())))
    data = {"path": [path] * n, "iteration": list(range(1, n + 1)), **columns}
    return pl.DataFrame(
        [{k: data.get(k, [None] * n)[i] for k in ITERATIONS_SCHEMA} for i in range(n)],
        schema=ITERATIONS_SCHEMA,
    )


def one(run_rows, its, **kw):
    return summarize(run_rows, its, **kw).row(0, named=True)


def test_median_after_warmup_and_the_warmup_option():
    its = iterations("a", elapsed_ms=[100000.0, 4000.0, 2000.0, 3000.0])
    row = one(runs({"path": "a"}), its)
    assert (row["iterations"], row["warmup_skipped"], row["sec_per_iter"]) == (4, 1, 3.0)
    assert row["sec_per_iter_source"] == "median of 3 logged step times after the first 1"
    row = one(runs({"path": "a"}), its, warmup=2)
    assert row["sec_per_iter"] == 2.5 and row["warmup_skipped"] == 2
    row = one(runs({"path": "a"}), its, warmup=0)
    assert row["sec_per_iter"] == 3.5


def test_only_warmup_steps_gives_no_steady_state():
    row = one(runs({"path": "a"}), iterations("a", elapsed_ms=[5000.0]))
    assert row["sec_per_iter"] is None
    assert row["sec_per_iter_source"] == "no steady state: 1 logged step(s), warm-up 1"


def test_sec_per_iter_from_deepspeed_samples_and_hf_final_metrics():
    its = iterations("ds", samples_per_sec=[1.0, 8.0, 8.0])
    row = one(runs({"path": "ds", "global_batch_size": 64}), its)
    assert row["sec_per_iter"] == 8.0 and row["sec_per_iter_source"].startswith(
        "global batch / median samples/s"
    )
    hf = runs({"path": "hf", "global_batch_size": 512, "final_samples_per_sec": 3.663})
    row = one(hf, iterations("other", elapsed_ms=[1.0]))
    assert row["sec_per_iter"] == pytest.approx(512 / 3.663)
    assert row["sec_per_iter_source"] == "global batch / final train_samples_per_second"
    assert row["iterations"] == 0


def test_hf_step_time_without_a_global_batch_runtime_per_step_then_steps_per_second_then_tqdm():
    no_steps = iterations("other", elapsed_ms=[1.0])
    # speed_metrics: train_steps_per_second = round(steps / runtime, 3); 6 / 8.669 = 0.692
    hf = {"path": "hf", "final_train_runtime_s": 8.669, "final_steps_per_sec": 0.692, "train_iters": 6}
    row = one(runs(hf), no_steps)
    assert row["sec_per_iter"] == pytest.approx(8.669 / 6)
    assert row["sec_per_iter_source"] == "final train_runtime / 6 steps"
    # TrainOutput's global_step, when printed, is the step count before max_steps
    row = one(runs(dict(hf, final_steps=6, train_iters=60)), no_steps)
    assert row["sec_per_iter"] == pytest.approx(8.669 / 6)
    # a resumed run timed fewer steps than planned: 60 / 8.669 = 6.92 is no 0.692, so 1 / 0.692
    row = one(runs(dict(hf, train_iters=60)), no_steps)
    assert row["sec_per_iter"] == pytest.approx(1 / 0.692)
    assert row["sec_per_iter_source"] == "1 / final train_steps_per_second"
    # no final metrics (the run failed): tqdm's last rate
    failed = {"path": "hf", "progress_sec_per_iter": 1.9, "train_iters": 6}
    row = one(runs(failed), no_steps)
    assert row["sec_per_iter"] == 1.9
    assert row["sec_per_iter_source"] == "tqdm rate of the training progress bar (last update)"
    # the seed's glob_bs / samples_per_second stays first when the global batch is known
    row = one(runs(dict(hf, global_batch_size=96, final_samples_per_sec=11.07)), no_steps)
    assert row["sec_per_iter"] == pytest.approx(96 / 11.07)


def test_tflops_factor_follows_activation_checkpointing_and_is_null_when_unknown():
    base = {"path": "a", "gpus": 64, "global_batch_size": 1024, **SHAPE_52B}
    its = iterations("a", elapsed_ms=[1.0, 129000.0])
    with_ckpt = one(runs(dict(base, activation_checkpointing=True)), its)
    without = one(runs(dict(base, activation_checkpointing=False)), its)
    unknown = one(runs(base), its)
    size = 51.966533632
    assert with_ckpt["tflops_per_gpu"] == pytest.approx(size * 4 * 2 * 1024 * 1024 / (129 * 64 * 1e3))
    assert without["tflops_per_gpu"] == pytest.approx(size * 3 * 2 * 1024 * 1024 / (129 * 64 * 1e3))
    assert unknown["tflops_per_gpu"] is None and unknown["tflops_per_gpu_megatron"] is None
    # Narayanan et al. eq. 3 with the unpadded vocab (no padded size known), by hand
    b, s, layers, h, v = 1024, 1024, 64, 8192, 50257
    flops = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert with_ckpt["tflops_per_gpu_megatron"] == pytest.approx(flops / (129 * 64 * 1e12))


def test_mfu_needs_a_known_gpu_and_uses_the_precision():
    base = {"path": "a", "gpus": 8, "global_batch_size": 8, "activation_checkpointing": False, **SHAPE_52B}
    its = iterations("a", elapsed_ms=[1.0, 1000.0])
    a100 = one(runs(dict(base, gpu_model="A100-SXM4-80GB", precision="bf16")), its)
    assert a100["mfu"] == pytest.approx(a100["tflops_per_gpu"] / 312.0)
    v100 = one(runs(dict(base, gpu_model="V100-SXM2-32GB", precision="fp16")), its)
    assert v100["mfu"] == pytest.approx(v100["tflops_per_gpu"] / 125.0)
    assert one(runs(dict(base, gpu_model="TPU-v4")), its)["mfu"] is None
    assert one(runs(base), its)["mfu"] is None


def test_model_size_note_spots_the_2_pow_30_unit():
    # seed 001: an old script printed the size in 2**30 units: 51.97e9 / 2**30 = 48.4 "B"
    row = one(runs({"path": "a", **SHAPE_52B, "logged_model_size": 48.4}), iterations("x", elapsed_ms=[1.0]))
    assert row["model_size_b"] == pytest.approx(51.966533632)
    assert row["model_size_note"].startswith("log says 48.4B: counted in 2**30")
    other = one(
        runs({"path": "a", **SHAPE_52B, "logged_model_size": 60.0}), iterations("x", elapsed_ms=[1.0])
    )
    assert other["model_size_note"] == "log says 60.0B; computed 51.97B from the shape"
    close = one(
        runs({"path": "a", **SHAPE_52B, "logged_model_size": 52.005}), iterations("x", elapsed_ms=[1.0])
    )
    assert close["model_size_note"] is None


def test_padded_vocab_is_used_when_the_true_one_is_unknown():
    shape = {"hidden_size": 64, "num_layers": 2, "seq_len": 128, "padded_vocab_size": 128}
    row = one(runs({"path": "a", **shape}), iterations("x", elapsed_ms=[1.0]))
    assert row["model_size_b"] == pytest.approx(
        (2 * (12 * 64 * 64 + 13 * 64) + 128 * 64 + 128 * 64 + 2 * 64) / 1e9
    )

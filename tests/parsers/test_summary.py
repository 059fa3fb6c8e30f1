"""Summary columns from hand-built frames: the steady-state statistic and its source, model size and
its note, TFLOPs by both formulas, MFU/HFU (null when the GPU is unknown), the log's own TFLOP/s
beside logstat's, the ZeRO model-state estimate beside the logged memory; and the DeepSpeed
throughput of the real fixtures, read off their lines here."""

import re
import statistics
from pathlib import Path

import polars as pl
import pytest
from logstat.analytics.summary import summarize
from logstat.parsers.schema import ITERATIONS_SCHEMA, RUNS_SCHEMA

from logstat.api import load_runs

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
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


def test_a_loss_gone_nan_is_a_warning_of_its_first_step_and_count():
    nan = float("nan")
    row = one(runs({"path": "a"}), iterations("a", loss=[2.5, 2.4, nan, 2.3, nan], elapsed_ms=[1000.0] * 5))
    assert row["warnings"] == ["loss: nan from iteration 3 (2 of 5 logged steps)"]
    assert (
        one(runs({"path": "a"}), iterations("a", loss=[2.5, 2.4], elapsed_ms=[1.0, 1.0]))["warnings"] is None
    )


def test_megatrons_nan_iterations_are_nan_losses(tmp_path):
    # training_log adds "lm loss" only `if avg > 0.0` (false for nan) and counts the step in "number of nan
    # iterations": a diverged Megatron run prints no nan at all
    steps = [
        f" iteration {step:8d}/    1000 | consumed samples: {step * 128:10d} | elapsed time per iteration (ms): 900.0 |"
        f" learning rate: 1.000E-04 | global batch size:   128 |{loss} loss scale: 1.0 | grad norm: {norm} |"
        f" number of skipped iterations:   0 | number of nan iterations: {nans:3d} |"
        for step, loss, norm, nans in [
            (100, " lm loss: 2.500000E+00 |", "1.234", 0),
            (200, " lm loss: 2.400000E+00 |", "1.100", 0),
            (300, "", "nan", 37),
            (400, "", "nan", 100),
        ]
    ]
    log = tmp_path / "diverged-81009.out"
    log.write_text("\n".join(steps) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert row["warnings"] == ["loss: nan from iteration 300 (2 of 4 logged steps)"]
    # a finite loss beside the count is the interval's other iterations': the nan ones were skipped
    skipped = [step.replace("128 | loss scale", "128 | lm loss: 2.300000E+00 | loss scale") for step in steps]
    log.write_text("\n".join(skipped) + "\n")
    assert not load_runs([log]).runs.row(0, named=True)["warnings"]


def test_a_job_id_of_several_rows_is_a_warning_on_each():
    rows = runs(
        {"path": "a", "job_id": "6701"}, {"path": "b", "job_id": "6701"}, {"path": "c"}, {"path": "d"}
    )
    its = pl.concat([iterations(path, elapsed_ms=[1000.0, 1000.0]) for path in "abcd"])
    warnings = summarize(rows, its).sort("path")["warnings"].to_list()
    note = (
        "job 6701: 2 rows; if they are one job's output read from two places (a tee'd copy, torchrun's "
        "--log-dir beside the job's .out), its steps are counted in each"
    )
    assert warnings == [[note], [note], None, None]


def test_a_relaunch_with_another_batch_size_is_timed_at_its_own_below_the_earlier_launchs_steps():
    # launch 0: steps 10-40 at 64 samples; launch 1 (a bigger batch) resumes from step 10: 20, 30 at 128
    its = iterations("a", elapsed_ms=[2000.0, 4000.0, 3800.0, 2000.0], global_batch_size=[64, 128, 128, 64])
    its = its.with_columns(iteration=pl.Series([10, 20, 30, 40]), launch=pl.Series([0, 1, 1, 0]))
    row = one(runs({"path": "a", "global_batch_size": 128}), its)
    assert row["sec_per_iter"] == 3.8
    assert row["sec_per_iter_source"] == (
        "median of 1 logged step times after the first 1 of relaunch 1 at the last global batch size"
    )


def test_a_batch_size_rampup_times_the_steps_at_the_last_batch_size():
    # Megatron's --rampup-batch-size: 32 -> 64 -> 128 samples a step, each step as fast per sample
    batches, times = [32, 32, 64, 64, 128, 128, 128], [500.0, 400.0, 800.0, 800.0, 1600.0, 1500.0, 1700.0]
    its = iterations("a", elapsed_ms=times, global_batch_size=batches)
    row = one(runs({"path": "a", "global_batch_size": 128}), its)
    assert (row["sec_per_iter"], row["samples_per_sec"]) == (1.6, 80.0)
    assert (
        row["sec_per_iter_source"]
        == "median of 3 logged step times after the first 1 at the last global batch size"
    )


def test_a_sequence_length_curriculum_times_and_counts_the_steps_at_the_last_length():
    # Megatron-DeepSpeed's curriculum: 64 -> 128 -> 256 tokens a sequence, 512 sequences a step
    lengths, times = [64, 128, 128, 256, 256, 256], [900.0, 300.0, 320.0, 600.0, 610.0, 640.0]
    its = iterations("a", elapsed_ms=times).with_columns(seq_len=pl.Series(lengths))
    shape = {"hidden_size": 2048, "num_layers": 24, "vocab_size": 50304, "activation_checkpointing": False}
    row = one(runs({"path": "a", "global_batch_size": 512, "seq_len": 2048, "gpus": 8, **shape}), its)
    assert (row["sec_per_iter"], row["tokens_per_sec"]) == (0.61, 512 * 256 / 0.61)
    assert row["sec_per_iter_source"] == (
        "median of 3 logged step times after the first 1 at the last sequence length (256)"
    )
    b, s, h, layers, v = 512, 256, 2048, 24, 50304
    flops = 72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v  # eq. 3 at the trained length
    assert row["tflops_per_gpu_megatron"] == pytest.approx(flops / (0.61 * 8 * 1e12), rel=1e-12)


def test_a_relaunch_on_other_gpus_is_timed_and_its_memory_read_alone():
    # a job requeued from 16 onto 32 GPUs (the run's facts are the last launch's): 4.6 s a step, then 2.4
    times = [9000.0, 4600.0, 4600.0, 4600.0, 7000.0, 2400.0, 2402.0]
    its = iterations("a", elapsed_ms=times, launch=[0, 0, 0, 0, 1, 1, 1])
    its = its.with_columns(mem_max_allocated_mb=pl.Series([20000.0] * 4 + [12000.0] * 3))
    row = one(runs({"path": "a", "gpus": 32}), its)
    # each launch starts up again: launch 2's first step (7 s) is its warm-up
    assert (row["sec_per_iter"], row["mem_logged_gb"]) == (2.401, 12000.0 * 2**20 / 1e9)
    assert row["sec_per_iter_source"] == "median of 2 logged step times after the first 1 of relaunch 1"


def test_a_last_launch_with_only_its_warmup_step_leaves_the_launch_before_timed():
    its = iterations("a", elapsed_ms=[9000.0, 4600.0, 4400.0, 7000.0], launch=[0, 0, 0, 1])
    its = its.with_columns(mem_max_allocated_mb=pl.Series([20000.0, 20000.0, 21000.0, 15000.0]))
    row = one(runs({"path": "a"}), its)
    assert row["sec_per_iter"] == 4.5 and row["sec_per_iter_source"].endswith("after the first 1")
    assert row["mem_logged_gb"] == 15000.0 * 2**20 / 1e9  # the peak of the last launch that logged one


def test_only_warmup_steps_gives_no_steady_state():
    row = one(runs({"path": "a"}), iterations("a", elapsed_ms=[5000.0]))
    assert row["sec_per_iter"] is None
    assert row["sec_per_iter_source"] == "no steady state: 1 logged step(s), warm-up 1"


def test_the_last_logged_step_says_how_far_a_run_got_when_every_50th_is_logged():
    steps = list(range(50, 2000, 50))
    its = iterations("a", elapsed_ms=[120.0] * len(steps)).with_columns(iteration=pl.Series(steps))
    row = one(runs({"path": "a"}), its)
    assert (row["iterations"], row["last_iteration"]) == (39, 1950)


def test_steps_logged_without_a_time_say_so():
    # HF Trainer's loss dicts with no progress bar and DeepSpeed's steps_per_print past the run's end
    row = one(runs({"path": "a"}), iterations("a", loss=[9.1, 8.7, 8.2]))
    assert row["sec_per_iter"] is None
    assert row["sec_per_iter_source"] == "no step time: 3 logged step(s), none timed"


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


def test_an_hf_run_stopped_early_is_timed_by_its_bar_not_its_planned_steps_final_metrics():
    # transformers 4's speed_metrics over max_steps: 2000 planned steps of 64 samples in 1800 s -> 71.111
    # samples/s and 1.111 steps/s, of a run that early stopping ended at step 600 (3 s a step)
    final = {"final_samples_per_sec": 71.111, "final_steps_per_sec": 1.111, "final_train_runtime_s": 1800.0}
    hf = {"path": "hf", "global_batch_size": 64, "train_iters": 2000, "progress_sec_per_iter": 3.0, **final}
    row = one(runs(hf), _steps("hf", [200, 400, 600]))
    assert (row["sec_per_iter"], row["sec_per_iter_source"]) == (
        3.0,
        "tqdm rate of the training progress bar (last update)",
    )
    # run to its end, the same metrics time its steps
    row = one(runs(hf), _steps("hf", [1000, 1500, 2000]))
    assert row["sec_per_iter"] == pytest.approx(64 / 71.111)


def test_an_hf_run_stopped_early_logging_often_is_timed_by_its_runtime_over_the_steps_it_ran():
    # early stopping ended a run of 5000 planned steps (64 samples) at step 2200, logging every 50 and
    # evaluating every 200 (41.5 s each); transformers 4's final metrics: train_runtime 4516.79 s of the loop,
    # samples/s and steps/s over the 5000 planned steps (70.847, 1.107): neither times a step
    final = {"final_train_runtime_s": 4516.79, "final_samples_per_sec": 70.847, "final_steps_per_sec": 1.107}
    hf = {"path": "hf", "global_batch_size": 64, "train_iters": 5000, **final}
    logged = list(range(50, 2201, 50))
    its = _steps("hf", logged).with_columns(
        eval_runtime_s=pl.Series([41.5 if step % 200 == 0 else None for step in logged])
    )
    row = one(runs(hf), its)
    assert row["sec_per_iter"] == pytest.approx((4516.79 - 11 * 41.5) / 2200, rel=1e-12)
    assert row["sec_per_iter_source"] == "final train_runtime / 2200 steps less 456.5 s of evaluation"


def test_an_hf_runs_samples_per_second_that_its_steps_per_second_belie_times_no_step():
    # Axolotl's sample packing: train_samples_per_second counts the dataset's rows (1,900 x 4 epochs over
    # 5019.7 s), not the 312 steps' packed sequences of 16; steps/s (0.062) times the step, no planned steps known
    final = {"final_train_runtime_s": 5019.7333, "final_samples_per_sec": 1.514, "final_steps_per_sec": 0.062}
    row = one(runs({"path": "hf", "global_batch_size": 16, **final}), _steps("hf", [100, 200, 312]))
    assert (row["sec_per_iter"], row["sec_per_iter_source"]) == (
        pytest.approx(1 / 0.062),
        "1 / final train_steps_per_second",
    )
    # samples/s that agrees with steps/s (16 x 0.0946 = 1.514) times it
    agreeing = {**final, "final_steps_per_sec": 0.095}
    row = one(runs({"path": "hf", "global_batch_size": 16, **agreeing}), _steps("hf", [100, 200, 312]))
    assert row["sec_per_iter"] == pytest.approx(16 / 1.514)


@pytest.mark.parametrize(
    ("logged", "timed"),
    [([500], True), ([300, 600, 900], True), ([300, 600], False), ([100, 200, 300, 400, 500], False)],
)
def test_an_hf_run_logging_seldom_is_not_taken_for_one_stopped_early(logged, timed):
    # 950 planned steps of 64 samples in 190 s (0.2 s a step): logging every 500 steps logs step 500 last,
    # every 300 step 900; one that logged 600 or 500 last but logs every 300 or 100 steps stopped early
    final = {"final_samples_per_sec": 320.0, "final_train_runtime_s": 190.0, "final_steps_per_sec": 5.0}
    hf = {"path": "hf", "global_batch_size": 64, "train_iters": 950, **final}
    row = one(runs(hf), _steps("hf", logged))
    assert row["sec_per_iter"] == (pytest.approx(0.2) if timed else None)


@pytest.mark.parametrize(
    ("samples_per_sec", "steps_per_sec"),
    [
        (
            50.98,
            1.593,
        ),  # transformers 4: the whole schedule's 1562 steps of 32 samples over this session's time
        (25.49, 0.797),  # transformers 5: the 781 steps run after the checkpoint
    ],
)
def test_a_resumed_hf_run_is_timed_by_the_steps_after_its_checkpoint(samples_per_sec, steps_per_sec):
    final = {"final_train_runtime_s": 980.5, "final_samples_per_sec": samples_per_sec}
    hf = {"path": "hf", "global_batch_size": 32, "train_iters": 1562, "resumed_step": 781, **final}
    row = one(runs({**hf, "final_steps_per_sec": steps_per_sec}), _steps("hf", [1000, 1500, 1560]))
    assert (row["sec_per_iter"], row["sec_per_iter_source"]) == (
        980.5 / 781,
        "final train_runtime / 781 steps",
    )


@pytest.mark.parametrize("launches", [[0, 0, 0], [0, 1, 1]])
def test_an_hf_runs_evaluations_are_taken_out_of_its_training_runtime(launches):
    # 1000 steps of 64 samples in 500 s of train_runtime, of which evaluations after steps 400 and 800 took
    # 30 s and 70 s (trainer.py times the whole loop; eval_runtime each evaluation); of a relaunch, the
    # runtime is its session's: only its own evaluations count
    final = {"final_train_runtime_s": 500.0, "final_samples_per_sec": 128.0, "final_steps_per_sec": 2.0}
    hf = {"path": "hf", "global_batch_size": 64, "train_iters": 1000, **final}
    its = _steps("hf", [400, 800, 1000]).with_columns(
        eval_runtime_s=pl.Series([30.0, 70.0, None]), launch=pl.Series(launches)
    )
    row = one(runs(hf), its)
    evaluations = 100.0 if launches[0] == launches[1] else 70.0
    assert row["sec_per_iter"] == pytest.approx(64 / 128.0 * (1 - evaluations / 500.0), rel=1e-12)
    assert row["sec_per_iter_source"] == (
        f"global batch / final train_samples_per_second less {evaluations} s of evaluation"
    )
    without = one(runs(hf), its.with_columns(eval_runtime_s=None))
    assert without["sec_per_iter"] == 0.5


def test_an_epoch_based_hf_run_is_timed_by_its_steps_not_its_examples():
    # 3 epochs of 1000 examples at a global batch of 128: 8 steps an epoch (the last one short), 24 in 240 s;
    # speed_metrics counts num_examples x epochs = 3000 samples (trainer.py's num_train_samples): 12.5/s
    final = {"final_train_runtime_s": 240.0, "final_samples_per_sec": 12.5, "final_steps_per_sec": 0.1}
    hf = {"path": "hf", "global_batch_size": 128, "train_iters": 24, **final}
    row = one(runs(hf), _steps("hf", [8, 16, 24]))
    assert (row["sec_per_iter"], row["sec_per_iter_source"]) == (10.0, "final train_runtime / 24 steps")
    # a max_steps run's samples are its steps': the seed's global batch / samples/s (to its printed digits)
    row = one(runs({**hf, "final_samples_per_sec": 12.8}), _steps("hf", [8, 16, 24]))
    assert (row["sec_per_iter"], row["sec_per_iter_source"]) == (
        10.0,
        "global batch / final train_samples_per_second",
    )


def _steps(path: str, steps: list[int]) -> pl.DataFrame:
    """HF Trainer's logged steps (a loss each, no time)."""
    return iterations(path, loss=[2.0] * len(steps)).with_columns(iteration=pl.Series(steps))


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
    # the seed's glob_bs / samples_per_second stays first when the global batch is known: 6 x 96 / 8.669
    row = one(runs(dict(hf, global_batch_size=96, final_samples_per_sec=66.443)), no_steps)
    assert row["sec_per_iter"] == pytest.approx(96 / 66.443)
    assert row["sec_per_iter_source"] == "global batch / final train_samples_per_second"


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


def model_flops_52b(batch: int) -> float:
    """PaLM's model FLOPs of one step of the 52B shape (Chowdhery et al. 2022, app. B), by hand:
    per token 6N + 12*L*H*Q*T, N = 12*l*h^2 + V*h, H*Q = h, T = seq; no recomputed forward."""
    h, layers, v, s = 8192, 64, 50257, 1024
    return batch * s * (6 * (12 * layers * h * h + v * h) + 12 * layers * h * s)


def test_mfu_needs_a_known_gpu_and_uses_the_precision():
    base = {"path": "a", "gpus": 8, "global_batch_size": 8, "activation_checkpointing": False, **SHAPE_52B}
    its = iterations("a", elapsed_ms=[1.0, 1000.0])
    model_tflops = model_flops_52b(8) / (1.0 * 8 * 1e12)
    a100 = one(runs(dict(base, gpu_model="A100-SXM4-80GB", precision="bf16")), its)
    assert a100["mfu"] == pytest.approx(model_tflops / 312.0)
    v100 = one(runs(dict(base, gpu_model="V100-SXM2-32GB", precision="fp16")), its)
    assert v100["mfu"] == pytest.approx(model_tflops / 125.0)
    assert one(runs(dict(base, gpu_model="TPU-v4")), its)["mfu"] is None
    assert one(runs(base), its)["mfu"] is None


def test_a_model_flop_rate_above_the_gpus_peak_is_a_warning():
    # the 52B shape, 8 samples a step on 8 A100s: 1 s a step is more than 312 TFLOP/s, 2 s is not
    base = {
        "path": "a",
        "gpus": 8,
        "global_batch_size": 8,
        "gpu_model": "A100-SXM4-80GB",
        "precision": "bf16",
    }
    base |= SHAPE_52B
    fast = one(runs(base), iterations("a", elapsed_ms=[1.0, 1000.0]))
    mfu = model_flops_52b(8) / (1.0 * 8 * 1e12) / 312.0
    assert mfu > 1 and fast["warnings"] == [
        f"MFU {round(mfu * 100, 1)}% is above the A100-SXM4-80GB's peak: a fact the count takes (GPUs, batch, "
        "shape, GPU model) or the step time is wrong"
    ]
    assert one(runs(base), iterations("a", elapsed_ms=[1.0, 2000.0]))["warnings"] is None


def test_mfu_is_the_same_with_and_without_checkpointing_and_hfu_counts_the_recomputation():
    base = {"path": "a", "gpus": 64, "global_batch_size": 1024, "gpu_model": "V100-SXM2-32GB", **SHAPE_52B}
    its = iterations("a", elapsed_ms=[1.0, 129000.0])
    with_ckpt = one(runs(dict(base, activation_checkpointing=True)), its)
    without = one(runs(dict(base, activation_checkpointing=False)), its)
    unknown = one(runs(base), its)
    mfu = model_flops_52b(1024) / (129 * 64 * 1e12) / 125
    assert with_ckpt["mfu"] == pytest.approx(mfu)
    assert without["mfu"] == pytest.approx(mfu)
    assert unknown["mfu"] == pytest.approx(mfu)  # model FLOPs do not depend on the recomputation
    # hardware FLOPs: Narayanan et al. eq. 3 with full recomputation, the layers' forward run twice
    b, s, layers, h, v = 1024, 1024, 64, 8192, 50257
    hardware = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert with_ckpt["hfu"] == pytest.approx(hardware / (129 * 64 * 1e12) / 125)
    assert without["hfu"] == pytest.approx(mfu)
    assert unknown["hfu"] is None


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


@pytest.mark.parametrize(("logged", "noted"), [(0.35, False), (0.36, True), (0.3548, False)])
def test_a_size_logged_to_two_decimals_is_the_shapes_when_it_rounds_to_it(logged, noted):
    # GPT-2 medium: 12 l h^2 (1 + 13 / 12h + (V + s) / 12 l h) = 354.82M, which DeepSpeed's zero.Init
    # prints as "num_elems = 0.35B": 1.4% off, no disagreement
    shape = {"hidden_size": 1024, "num_layers": 24, "seq_len": 1024, "vocab_size": 50257}
    row = one(runs({"path": "a", **shape, "logged_model_size": logged}), iterations("x", elapsed_ms=[1.0]))
    assert row["model_size_b"] == pytest.approx(0.35482, abs=1e-5)
    assert (row["model_size_note"] is not None) == noted


def test_padded_vocab_is_used_when_the_true_one_is_unknown():
    shape = {"hidden_size": 64, "num_layers": 2, "seq_len": 128, "padded_vocab_size": 128}
    row = one(runs({"path": "a", **shape}), iterations("x", elapsed_ms=[1.0]))
    assert row["model_size_b"] == pytest.approx(
        (2 * (12 * 64 * 64 + 13 * 64) + 128 * 64 + 128 * 64 + 2 * 64) / 1e9
    )


def _log_lines(path: Path, pattern: str) -> list[tuple[str, ...]]:
    return [m.groups() for m in re.finditer(pattern, path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("name", ["ds_zero1_fp32_2cpu.log", "ds_zero3_offload_bf16_2cpu.log"])
def test_deepspeed_throughput_is_the_logs_own_samples_per_sec(name):
    """DeepSpeed's ThroughputTimer prints CurrSamplesPerSec = train_batch_size / that step's time; the
    flops profiler's "iter latency" (one profiled micro-batch's fwd+bwd+step) is no step time."""
    path = FIXTURES / "deepspeed" / name
    (batch,) = _log_lines(path, r"print\]   train_batch_size \.+ (\d+)")
    first_step = min(int(s) for (s,) in _log_lines(path, r"\] step=(\d+), skipped") if int(s) > 0)
    rates = [
        float(rate)
        for step, rate in _log_lines(
            path, r"global_step=(\d+), RunningAvgSamplesPerSec=[\d.]+, CurrSamplesPerSec=([\d.]+)"
        )
        if int(step) > first_step  # --warmup 1 leaves out the first logged step
    ]
    assert len(rates) == 2
    row = load_runs([path], warmup=1).runs.row(0, named=True)
    assert row["samples_per_sec"] == pytest.approx(statistics.median(rates))
    assert row["sec_per_iter"] == pytest.approx(int(batch[0]) / statistics.median(rates))
    assert row["sec_per_iter_source"] == "global batch / median samples/s of 2 steps after the first 1"


def test_deepspeed_profiler_tflops_is_the_logged_figure_and_memory_the_timer_lines():
    path = FIXTURES / "deepspeed" / "ds_zero1_fp32_2cpu.log"
    # "Profile Summary at step N:" then "FLOPS per GPU = 3 * fwd flops per GPU / iter latency:  V MFLOPS"
    profiled = _log_lines(
        path, r"Profile Summary at step (\d+):(?:.*\n)+?FLOPS per GPU = .*: +([\d.]+) MFLOPS"
    )
    assert [step for step, _ in profiled] == ["3", "4"]  # the first logged step is 2 (warm-up)
    row = load_runs([path], warmup=1).runs.row(0, named=True)
    assert row["logged_tflops_per_gpu"] == pytest.approx(
        statistics.median(float(v) / 1e6 for _, v in profiled)
    )
    # "MaxMemAllocated=0.37GB": DeepSpeed's GB is 1024**3 bytes
    peak = max(float(gb) for (gb,) in _log_lines(path, r"MaxMemAllocated=([\d.]+)GB"))
    assert row["mem_logged_gb"] == pytest.approx(peak * 2**30 / 1e9)
    # a 2-layer MLP: no transformer shape; its size is the profiler's "params of model" (2.63 K), and its ZeRO-1
    # fp32 state on 2 GPUs 4 + 4 bytes of weight and gradient and Adam's 8 over the 2 a parameter
    assert row["model_size_b"] == pytest.approx(2.63e3 / 1e9)
    assert row["model_state_gb_pred"] == pytest.approx(2.63e3 * (4 + 4 + 8 / 2) / 1e9)


def test_deepspeed_profiler_tflops_in_the_warm_up_stands_where_no_steady_step_logs_one(tmp_path):
    """DeepSpeed profiles the step after ``profile_step`` steps (engine.py: global_steps == profile_step),
    never the first: its figure counts where it is the run's only logged TFLOP/s, even at the first row."""
    text = (FIXTURES / "deepspeed" / "ds_zero1_fp32_2cpu.log").read_text(encoding="utf-8")
    banner = "\n-------------------------- DeepSpeed Flops Profiler"
    first, second = (m.start() for m in re.finditer(re.escape(banner), text))
    end_of_second = text.index("Flops profiler finished\n", second) + len("Flops profiler finished\n")
    only_profile = text[:second] + text[end_of_second:]
    path = tmp_path / "profiled_at_1.log"
    path.write_text(only_profile.replace("Profile Summary at step 3:", "Profile Summary at step 1:"))
    ((step, mflops),) = _log_lines(
        path, r"Profile Summary at step (\d+):(?:.*\n)+?FLOPS per GPU = .*: +([\d.]+) MFLOPS"
    )
    result = load_runs([path], warmup=1)
    assert result.iterations.sort("iteration")["iteration"][0] == int(step) == 1  # the warm-up row
    row = result.runs.row(0, named=True)
    assert row["logged_tflops_per_gpu"] == pytest.approx(float(mflops) / 1e6)
    # where a profiled step is steady, the warm-up's is not taken: at warm-up 2, step 4's alone
    fixture = FIXTURES / "deepspeed" / "ds_zero1_fp32_2cpu.log"
    ((step_4,),) = _log_lines(
        fixture, r"Profile Summary at step 4:(?:.*\n)+?FLOPS per GPU = .*: +([\d.]+) MFLOPS"
    )
    row = load_runs([fixture], warmup=2).runs.row(0, named=True)
    assert row["logged_tflops_per_gpu"] == pytest.approx(float(step_4) / 1e6)


def test_an_hf_run_without_a_printed_config_is_sized_by_its_trainable_parameters(tmp_path):
    """Trainer._inner_training_loop's banner counts the trainable parameters (``{:,}``): with no shape
    printed, that is the size, and the note says whose count it is."""
    banner = [
        "***** Running training *****",
        "  Num examples = 52,002",
        "  Num Epochs = 3",
        "  Instantaneous batch size per device = 4",
        "  Total train batch size (w. parallel, distributed & accumulation) = 256",
        "  Gradient Accumulation steps = 8",
        "  Total optimization steps = 609",
        "  Number of trainable parameters = 6,738,415,616",
    ]
    log = tmp_path / "train.log"
    log.write_text("".join(f"[INFO|trainer.py:2128] 2025-03-01 10:00:00,000 >> {line}\n" for line in banner))
    row = load_runs([log]).runs.row(0, named=True)
    assert row["family"] == "hf-trainer"
    assert row["model_size_b"] == 6_738_415_616 / 1e9
    assert row["model_size_note"] == (
        "the log's own parameter count: it prints no shape to count from (HF Trainer counts the trainable "
        "parameters: an adapter's alone under PEFT)"
    )


STEP = {"gpus": 16, "global_batch_size": 256, "activation_checkpointing": True}
H100_SHAPE = {"hidden_size": 4096, "num_layers": 32, "seq_len": 2048, "padded_vocab_size": 50304}
# a long sequence for its width: attention (s/6h = 0.67) puts eq. 3 far above the seed formula
LONG_SEQ_SHAPE = {"hidden_size": 1024, "num_layers": 24, "seq_len": 4096, "padded_vocab_size": 50304}


def _tflops_by_rule(shape: dict) -> dict[str, float]:
    """TFLOP/s/GPU of ``shape`` at 4.66 s per step of 256 sequences on 16 GPUs by each counting rule, by hand."""
    b, s, layers, h, v = (
        256,
        shape["seq_len"],
        shape["num_layers"],
        shape["hidden_size"],
        shape["padded_vocab_size"],
    )
    per_gpu = 4.66 * 16 * 1e12
    size = layers * (12 * h * h + 13 * h) + v * h + s * h + 2 * h
    return {
        "eq3_recompute": 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h)) / per_gpu,
        "model": (72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v) / per_gpu,
        "seed": size * 4 * 2 * s * b / per_gpu,
    }


def _with_logged(tflops: list[float], family: str = "megatron", shape: dict = H100_SHAPE) -> dict:
    its = iterations("a", elapsed_ms=[9000.0] + [4660.0] * (len(tflops) - 1), logged_tflops_per_gpu=tflops)
    its = its.with_columns(family=pl.lit(family))
    return one(runs({"path": "a", **STEP, **shape}), its)


def test_logged_tflops_beside_ours_and_no_warning_when_they_agree():
    ours = _tflops_by_rule(H100_SHAPE)["eq3_recompute"]
    row = _with_logged([150.0, ours * 1.08, ours * 1.09, ours * 1.07])
    assert row["logged_tflops_per_gpu"] == pytest.approx(ours * 1.08)  # the warm-up step left out
    assert row["tflops_per_gpu_megatron"] == pytest.approx(ours)
    assert row["warnings"] is None  # 8% off: within 10%


def _sig4(value: float) -> str:
    return str(float(f"{value:.4g}"))


@pytest.mark.parametrize(
    ("rule", "family", "shape", "reason"),
    [
        ("seed", "megatron", LONG_SEQ_SHAPE, "the log counts like the seed formula"),
        (0.5, "megatron", H100_SHAPE, "no counting rule of logstat's matches"),
        (1.5, "megatron", H100_SHAPE, "no counting rule of logstat's matches"),
        (
            "model",
            "deepspeed",
            H100_SHAPE,
            "DeepSpeed's flops profiler counts the FLOPs of one profiled micro-batch",
        ),
    ],
)
def test_logged_tflops_off_by_more_than_10_percent_is_a_warning_with_the_likely_reason(
    rule, family, shape, reason
):
    counts = _tflops_by_rule(shape)
    logged = counts[rule] if isinstance(rule, str) else counts["eq3_recompute"] * rule
    row = _with_logged([1.0, logged, logged], family, shape)
    ours = counts["eq3_recompute"]
    assert abs(logged / ours - 1) > 0.1
    (note,) = row["warnings"]
    assert note.startswith(
        f"tflops: the log's own {_sig4(logged)} TFLOP/s/GPU ({family}, median of 2 step(s) after the first 1) is "
        f"{round(abs(logged / ours - 1) * 100, 1)}% {'above' if logged > ours else 'below'} logstat's {_sig4(ours)} (Megatron-LM's count, Narayanan et al. 2021 eq. 3 generalized, "
        f"recomputed forward counted); likely reason: {reason}"
    )
    if rule in ("model", "seed") and family == "megatron":
        assert f"({_sig4(counts[rule])} by that rule)" in note


def test_a_megatron_lm_log_with_recomputation_logs_model_flops_and_is_no_disagreement():
    # fixtures/megatron/megatron_lm_h100-2001.out steps 2-5: "throughput per GPU (TFLOP/s/GPU): 303.1,
    # 303.3, 302.8, 303.2", Megatron-LM's num_floating_point_operations (recomputation not counted); logstat's
    # eq. 3 counts the recomputed forward: 401.27 at the median 4.6605 s, a third more, explained by the rule
    row = load_runs([FIXTURES / "megatron" / "megatron_lm_h100-2001.out"], warmup=1).runs.row(0, named=True)
    assert row["logged_tflops_per_gpu"] == pytest.approx(statistics.median([303.1, 303.3, 302.8, 303.2]))
    assert row["tflops_per_gpu_megatron"] == pytest.approx(401.27, abs=0.01)
    assert row["mfu"] * 989.0 == pytest.approx(row["logged_tflops_per_gpu"], rel=0.001)
    assert row["warnings"] == []
    # the same figure from another family's log (DeepSpeed's profiler) is still a disagreement
    counts = _tflops_by_rule(H100_SHAPE)
    assert _with_logged([1.0, counts["model"], counts["model"]], "megatron", H100_SHAPE)["warnings"] is None
    (note,) = _with_logged([1.0, counts["model"], counts["model"]], "deepspeed", H100_SHAPE)["warnings"]
    assert "DeepSpeed's flops profiler" in note


@pytest.mark.parametrize(
    ("facts", "psi_bytes"),
    [
        # Ψ = size / (TP*PP) held per GPU; N = DP. Rajbhandari et al. 2020, figure 1, K = 12
        ({"zero_stage": 0}, lambda psi, n: 16 * psi),
        ({"zero_stage": 1, "offload_optimizer": False}, lambda psi, n: 4 * psi + 12 * psi / n),
        ({"zero_stage": 1, "offload_optimizer": True}, lambda psi, n: 4 * psi),
        ({"zero_stage": 2, "offload_optimizer": False}, lambda psi, n: 2 * psi + 14 * psi / n),
        ({"zero_stage": 3, "offload_optimizer": False, "offload_param": False}, lambda psi, n: 16 * psi / n),
        ({"zero_stage": 3, "offload_optimizer": True, "offload_param": False}, lambda psi, n: 4 * psi / n),
        ({"zero_stage": 3, "offload_optimizer": True, "offload_param": True}, lambda psi, n: 2 * psi / n),
    ],
)
def test_zero_model_state_prediction_beside_the_logged_peak(facts, psi_bytes):
    run = {"path": "a", "tp": 2, "pp": 4, "dp": 8, **SHAPE_52B, **facts}
    row = one(runs(run), iterations("a", mem_max_allocated_mb=[30000.0, 31500.5, 31000.0]))
    psi = 51966533632 / (2 * 4)
    assert row["model_state_gb_pred"] == pytest.approx(psi_bytes(psi, 8) / 1e9)
    assert row["mem_logged_gb"] == pytest.approx(31500.5 * 2**20 / 1e9)  # MiB, largest of every step
    assert row["mem_pred_ratio"] == pytest.approx(psi_bytes(psi, 8) / (31500.5 * 2**20))


@pytest.mark.parametrize(
    "facts",
    [
        {},  # no ZeRO stage in the log
        {"zero_stage": 2},  # whether the optimizer is offloaded is unknown
        {"zero_stage": 3, "offload_optimizer": False},  # whether the parameters are offloaded is unknown
        {"zero_stage": 1, "offload_optimizer": False, "dp": None},  # N unknown
    ],
)
def test_zero_model_state_prediction_is_null_when_a_fact_is_unknown(facts):
    run = {"path": "a", "dp": 8, **SHAPE_52B, **facts}
    row = one(runs(run), iterations("a", mem_max_allocated_mb=[30000.0, 31000.0]))
    assert row["model_state_gb_pred"] is None and row["mem_pred_ratio"] is None
    assert row["mem_logged_gb"] == pytest.approx(31000.0 * 2**20 / 1e9)


def test_zero_model_state_of_the_real_3d_log_and_its_peak_memory():
    path = FIXTURES / "megatron" / "meg_ds_3d_gpt2_perf_n16-ds-on.out"
    # ZeRO stage 0, TP 4 x PP 16 of the 52B shape: 16 bytes x 51,966,533,632 / 64 per GPU
    predicted = 16 * 51966533632 / 64
    logged = max(
        float(mb) for (mb,) in _log_lines(path, r"\| max allocated: ([\d.]+) \|")
    )  # MiB, largest rank
    row = load_runs([path], warmup=1).runs.row(0, named=True)
    assert (row["zero_stage"], row["tp"], row["pp"]) == (0, 4, 16)
    assert row["model_state_gb_pred"] == pytest.approx(predicted / 1e9)
    assert row["mem_logged_gb"] == pytest.approx(logged * 2**20 / 1e9)
    assert row["mem_pred_ratio"] == pytest.approx(predicted / (logged * 2**20))


LLAMA_LOG = FIXTURES / "megatron_llama" / "megatron_lm_llama3_8b_h100-2005.out"


def test_a_llama_3_8b_megatron_lm_log_agrees_with_its_own_tflops():
    # The fixture's shape (its arguments dump): h 4096, 32 layers, 32 heads of 128, 8 query groups, SwiGLU
    # FFN 14336, padded vocab 128256, seq 8192, global batch 128, 8 H100, no recomputation. FLOPs of a step
    # counted by matrix products per token and layer, in multiply-adds (2 FLOPs each), 3 passes:
    h, a, g, kv, ffn, v, s, b, layers = 4096, 32, 8, 128, 14336, 128256, 8192, 128, 32
    layer = 2 * h * a * kv + 2 * h * g * kv + 2 * s * a * kv + 3 * h * ffn  # q+out, k+v, scores+mix, MLP
    flops = 2 * 3 * b * s * (layers * layer + h * v)
    assert flops == 60_726_027_202_068_480
    steps = [
        (float(ms), float(tflops))
        for ms, tflops in _log_lines(
            LLAMA_LOG,
            r"elapsed time per iteration \(ms\): ([\d.]+) \| throughput per GPU \(TFLOP/s/GPU\): ([\d.]+)",
        )
    ]
    assert len(steps) == 6
    sec = statistics.median(ms for ms, _ in steps[1:]) / 1000  # after the first (warm-up) step
    row = load_runs([LLAMA_LOG], warmup=1).runs.row(0, named=True)
    assert (row["num_query_groups"], row["kv_channels"], row["swiglu"], row["moe_topk"]) == (
        8,
        128,
        True,
        None,
    )
    assert row["untied_embeddings"] is True  # untie_embeddings_and_output_weights ..... True
    assert row["activation_checkpointing"] is False and row["gpu_model"] == "H100-SXM"
    assert row["sec_per_iter"] == pytest.approx(sec, rel=1e-12)
    assert row["tflops_per_gpu_megatron"] == pytest.approx(flops / (sec * 8 * 1e12), rel=1e-12)
    assert row["mfu"] == pytest.approx(flops / (sec * 8 * 1e12) / 989, rel=1e-12)
    assert row["hfu"] == pytest.approx(row["mfu"], rel=1e-12)  # nothing recomputed
    # each logged figure is the count at its own step time, to the printed decimal
    for ms, logged in steps:
        assert logged == round(flops / (ms / 1000 * 8 * 1e12), 1)
    assert row["logged_tflops_per_gpu"] == pytest.approx(statistics.median(t for _, t in steps[1:]))
    assert row["warnings"] == []
    # its parameters by the Llama count (was 7.00B by GPT-2's, which has no GQA, a 4h two-matrix MLP and a
    # tied output layer, but biases and position embeddings): per layer q + out, k + v, MLP, 2 RMSNorms;
    # final norm, embedding and the untied output layer
    params = layers * (2 * h * a * kv + 2 * h * g * kv + 3 * h * ffn + 2 * h) + h + 2 * v * h
    assert params == 8_030_261_248
    assert row["model_size_b"] == pytest.approx(params / 1e9, rel=1e-15)
    # the seed formula's TFLOPs take that size (no recomputation: factor 3)
    assert row["tflops_per_gpu"] == pytest.approx(params / 1e9 * 3 * 2 * s * b / (sec * 8 * 1e3), rel=1e-12)


# Llama-3-70B-like: h 8192, 80 layers, 64 heads of 128, 8 query groups, SwiGLU FFN 28672, vocab 128256
LLAMA_70B = {
    "hidden_size": 8192,
    "num_layers": 80,
    "num_heads": 64,
    "num_query_groups": 8,
    "kv_channels": 128,
    "ffn_hidden_size": 28672,
    "swiglu": True,
    "seq_len": 8192,
    "padded_vocab_size": 128256,
}


def _llama_70b_flops(*, recomputed: bool, topk: int = 1) -> int:
    """FLOPs of a step of 64 sequences by matrix products per token, in multiply-adds (2 FLOPs each)."""
    h, a, g, kv, ffn, v, s, b, layers = 8192, 64, 8, 128, 28672, 128256, 8192, 64, 80
    layer = 2 * h * a * kv + 2 * h * g * kv + 2 * s * a * kv + 3 * h * ffn * topk
    return 2 * b * s * ((4 if recomputed else 3) * layers * layer + 3 * h * v)


@pytest.mark.parametrize(("checkpointing", "topk"), [(False, None), (True, None), (False, 2), (None, None)])
def test_gqa_swiglu_moe_runs_count_their_shape_and_hfu_adds_the_recomputed_forward(checkpointing, topk):
    run = {"path": "a", "gpus": 64, "global_batch_size": 64, "gpu_model": "H100-SXM", "precision": "bf16"}
    run.update(LLAMA_70B, activation_checkpointing=checkpointing, moe_topk=topk)
    model = _llama_70b_flops(recomputed=False, topk=topk or 1)
    # the log counts like Megatron-LM (no recomputed forward), at 20 s per step after a slow first one
    logged = model / (20 * 64 * 1e12)
    its = iterations("a", elapsed_ms=[30000.0, 20000.0, 20000.0], logged_tflops_per_gpu=[1.0, logged, logged])
    row = one(runs(run), its.with_columns(family=pl.lit("megatron")))
    assert row["mfu"] == pytest.approx(logged / 989, rel=1e-12)
    if checkpointing is None:  # unknown recomputation: no hardware count
        assert row["tflops_per_gpu_megatron"] is None and row["hfu"] is None
        return
    hardware = _llama_70b_flops(recomputed=checkpointing, topk=topk or 1) / (20 * 64 * 1e12)
    assert row["tflops_per_gpu_megatron"] == pytest.approx(hardware, rel=1e-12)
    assert row["hfu"] == pytest.approx(hardware / 989, rel=1e-12)
    # the log leaves the recomputed forward out, as Megatron-LM does: its own rule, no disagreement
    assert row["warnings"] is None
    # eq. 3 alone (FFN 4h, no GQA, no SwiGLU, no MoE): 5% below a dense run's own figure, 44% below top-2 MoE's
    h, s, b, layers, v = 8192, 8192, 64, 80, 128256
    eq3 = (72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v) / (20 * 64 * 1e12)
    assert round(1 - eq3 / logged, 2) == (0.44 if topk else 0.05)
    # the seed's formula multiplies the parameters a token passes: an MoE run's top-k experts, not all
    active = _llama_70b_params(experts=topk or 0)  # (a router of h x top-k: a 1e-5 share)
    seed = active * (4 if checkpointing else 3) * 2 * 8192 * 64 / (20 * 64 * 1e12)
    assert row["tflops_per_gpu"] == pytest.approx(seed, rel=1e-9)


def _llama_70b_params(*, untied: bool = True, gated: bool = True, experts: int = 0) -> int:
    h, a, g, kv, ffn, v, layers = 8192, 64, 8, 128, 28672, 128256, 80
    mlp = (3 if gated else 2) * h * ffn
    if experts:  # each layer's MLP an expert of `experts`, and the router's h x experts
        mlp = experts * mlp + h * experts
    layer = h * a * kv + 2 * h * g * kv + a * kv * h + mlp + 2 * h
    return layers * layer + h + (2 if untied else 1) * v * h


@pytest.mark.parametrize(
    ("facts", "params"),
    [
        ({}, _llama_70b_params()),  # untied unless the log says otherwise: Llama 2 and 3's
        ({"untied_embeddings": True}, _llama_70b_params()),
        ({"untied_embeddings": False}, _llama_70b_params(untied=False)),  # one V x h matrix
        ({"swiglu": False}, _llama_70b_params(gated=False)),  # GQA alone is Llama-style: two MLP matrices
        ({"swiglu": None, "num_query_groups": None}, None),  # neither: GPT-2's count
        ({"moe_topk": 2, "moe_experts": 8}, _llama_70b_params(experts=8)),  # MoE: every expert's MLP
        ({"moe_topk": 2}, "unknown"),  # MoE without its experts' number: no size, not a dense model's
    ],
)
def test_a_llama_style_shape_counts_llamas_parameters_and_the_zero_estimate_takes_them(facts, params):
    run = {"path": "a", "gpus": 64, "dp": 8, "tp": 8, "pp": 1, "zero_stage": 1, "offload_optimizer": False}
    run.update(LLAMA_70B, precision="bf16", **facts)
    row = one(runs(run), iterations("a", elapsed_ms=[1.0]))
    assert _llama_70b_params() == 70_553_706_496  # Llama-3-70B's published count
    if params == "unknown":
        assert (row["model_size_b"], row["model_state_gb_pred"]) == (None, None)
        return
    if params is None:
        h, layers, s, v = 8192, 80, 8192, 128256  # the padded vocabulary when the true one is unknown
        params = layers * (12 * h * h + 13 * h) + v * h + s * h + 2 * h
    assert row["model_size_b"] == pytest.approx(params / 1e9, rel=1e-15)
    # ZeRO-1 of mixed-precision Adam over DP 8, per TP rank: (2 + 2) + 12 / 8 bytes per parameter
    psi = params / 8
    assert row["model_state_gb_pred"] == pytest.approx((4 * psi + 12 * psi / 8) / 1e9, rel=1e-12)


def test_a_llama_logs_own_size_agrees_with_ours():
    # torchtitan prints "size: 8,030,261,248 total parameters": no note (it was "computed 7.0B from the shape")
    rows = load_runs([FIXTURES / "torchtitan"]).runs
    assert rows["model_size_b"].to_list() == [pytest.approx(8.030261248, rel=1e-15)] * 3
    assert rows["model_size_note"].to_list() == [None] * 3


def test_a_share_of_recomputed_layers_counts_their_forward_alone():
    # the 70B shape with 20 of its 80 layers recomputed: HFU counts 3 passes of all, one more of the 20
    run = {"path": "a", "gpus": 64, "global_batch_size": 64, "gpu_model": "H100-SXM", "precision": "bf16"}
    run.update(LLAMA_70B, activation_checkpointing=True, recomputed_layers=20)
    h, a, g, kv, ffn, v, s, b = 8192, 64, 8, 128, 28672, 128256, 8192, 64
    layer = 2 * h * a * kv + 2 * h * g * kv + 2 * s * a * kv + 3 * h * ffn
    flops = 2 * b * s * ((3 * 80 + 20) * layer + 3 * h * v)
    its = iterations("a", elapsed_ms=[30000.0, 20000.0, 20000.0])
    row = one(runs(run), its.with_columns(family=pl.lit("megatron")))
    assert row["tflops_per_gpu_megatron"] == pytest.approx(flops / (20 * 64 * 1e12), rel=1e-12)
    assert row["hfu"] == pytest.approx(flops / (20 * 64 * 1e12) / 989, rel=1e-12)


def test_moe_runs_count_their_experts_width_and_shared_experts():
    # the 70B shape with MoE layers: 8 experts of 3584 per token (not the dense 28672) and 7168 of shared experts
    run = {"path": "a", "gpus": 64, "global_batch_size": 64, "gpu_model": "H100-SXM", "precision": "bf16"}
    run.update(LLAMA_70B, activation_checkpointing=False, moe_topk=8)
    run.update(moe_ffn_hidden_size=3584, moe_shared_ffn_hidden_size=7168)
    h, a, g, kv, v, s, b, layers = 8192, 64, 8, 128, 128256, 8192, 64, 80
    layer = 2 * h * a * kv + 2 * h * g * kv + 2 * s * a * kv + 3 * h * (3584 * 8 + 7168)
    flops = 2 * b * s * (3 * layers * layer + 3 * h * v)
    its = iterations("a", elapsed_ms=[30000.0, 20000.0, 20000.0])
    row = one(runs(run), its.with_columns(family=pl.lit("megatron")))
    assert row["tflops_per_gpu_megatron"] == pytest.approx(flops / (20 * 64 * 1e12), rel=1e-12)


@pytest.mark.parametrize(
    "facts",
    [
        {},  # a 2021 log: none of the new facts
        {
            "num_heads": 32,
            "kv_channels": 128,
            "ffn_hidden_size": 16384,
            "swiglu": False,
        },  # GPT-2's spelled out
        {"num_heads": None, "num_query_groups": 8, "kv_channels": 64},  # widths per head, heads unknown
        {"num_heads": 0, "num_query_groups": 8, "kv_channels": 128},  # garbled counts are no facts
        {"num_heads": 32, "kv_channels": 0, "ffn_hidden_size": -1, "moe_topk": 0},
    ],
)
def test_unknown_or_garbled_shape_facts_count_as_eq_3(facts):
    ours = _tflops_by_rule(H100_SHAPE)
    row = _with_logged([1.0, 1.0], shape={**H100_SHAPE, **facts})
    assert row["tflops_per_gpu_megatron"] == pytest.approx(ours["eq3_recompute"], rel=1e-12)


def _megatron_step(step: int, ms: float, loss: float) -> str:
    return (
        f" iteration {step:8d}/     100 | consumed samples: {step * 64:12d} | elapsed time per iteration (ms): "
        f"{ms:.1f} | learning rate: {step * 1e-5:.3E} | global batch size:    64 | lm loss: {loss:.6E} | "
        "loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )


def test_steps_that_another_run_holds_too_are_a_warning_naming_it(tmp_path):
    # BigScience's layout: each job's .out, and main_log.txt that every job tee -a's into; a rerun of job
    # 101 (same losses, its own times) and a log sharing two of job 101's steps are no copies
    first = [_megatron_step(step, 1000.0 + step, 8.0 - step / 10) for step in range(1, 6)]
    second = [_megatron_step(step, 1100.0 + step, 8.0 - step / 10) for step in range(6, 11)]
    rerun = [_megatron_step(step, 990.0 + step, 8.0 - step / 10) for step in range(1, 6)]
    files = {
        "job-101.out": first,
        "job-102.out": second,
        "main_log.txt": first + second,
        "job-103.out": rerun,
        "job-104.out": first[:2]
        + [_megatron_step(step, 980.0 + step, 8.0 - step / 10) for step in range(3, 6)],
    }
    for name, lines in files.items():
        (tmp_path / name).write_text("".join(lines))
    rows = load_runs([tmp_path]).runs
    warned = {Path(row["path"]).name: row["warnings"] for row in rows.iter_rows(named=True)}

    def copy(steps: int, of: int, other: str) -> list[str]:
        return [
            f"{steps} of its {of} timed steps are also in {tmp_path / other} (same step, loss, learning rate "
            "and time): one run's output read twice (a tee'd copy, torchrun's --log-dir beside the job's .out) "
            "counts its steps in each"
        ]

    assert warned == {
        "job-101.out": copy(5, 5, "main_log.txt"),
        "job-102.out": copy(5, 5, "main_log.txt"),
        "main_log.txt": copy(10, 10, "job-101.out"),  # as many of each job's: the first by name
        "job-103.out": [],
        "job-104.out": [],
    }


@pytest.mark.parametrize(("runtime_s", "warned"), [(30.12, True), (4.5, False), (0.9, True)])
def test_a_step_time_far_from_the_sessions_is_a_warning(runtime_s, warned):
    # 10 steps of DeepSpeed's samples/s (global batch 128 / 42.6 samples/s = 3.005 s) against HF's final
    # train_runtime over the same 10 steps: 30.12 s a step is 10x, 4.5 s a warm-up and saves, 0.9 s 3.3x less
    row = one(
        runs(
            {
                "path": "a",
                "global_batch_size": 128,
                "final_train_runtime_s": runtime_s * 10,
                "final_steps": 10,
            }
        ),
        iterations("a", samples_per_sec=[40.0] + [42.6] * 4),
    )
    notes = [note for note in row["warnings"] or [] if "differ" in note]
    assert row["sec_per_iter"] == pytest.approx(128 / 42.6)
    assert bool(notes) == warned
    if warned:
        ratio = max(runtime_s / (128 / 42.6), (128 / 42.6) / runtime_s)
        assert notes[0].endswith(f"differ {float(f'{ratio:.3g}')}x: one of them does not time one step")


@pytest.mark.parametrize(
    ("status", "planned", "last"),
    [
        ("ok", 2634, 2634),  # every 500 of 2,634 steps logged: it ran them all
        ("incomplete", 2634, 2500),  # stopped somewhere after its last logged step
        ("ok", 20000, 2500),  # a planned end short of its steps (an exit duration)
        ("ok", None, 2500),
    ],
)
def test_a_run_that_ended_ok_within_a_logging_interval_of_its_steps_reached_them(status, planned, last):
    run = {"path": "hf", "status": status, "train_iters": planned}
    row = one(runs(run), _steps("hf", [500, 1000, 1500, 2000, 2500]))
    assert (row["iterations"], row["last_iteration"]) == (5, last)


def test_parallel_sizes_whose_product_passes_int64_are_noted_not_raised():
    its = iterations("a", elapsed_ms=[1000.0] * 3)
    # sizes read off a garbled line: TP x DP is 2**63, past int64
    row = one(runs({"path": "a", "tp": 2**62, "pp": 1, "dp": 2, "gpus": 8}), its)
    assert row["warnings"] == [
        "parallel sizes: TP 4611686018427387904 x PP 1 x CP 1 x DP 2 = 9.223372036854776e+18 GPUs, but the log "
        "says 8: one of them is not this run's"
    ]


def test_a_world_that_is_not_the_product_of_the_parallel_sizes_is_noted():
    its = iterations("a", elapsed_ms=[1000.0] * 3)
    # a PP 4 x DP 8 pipeline config read on 8 GPUs: one of the sizes is not the run's
    row = one(runs({"path": "a", "tp": 1, "pp": 4, "dp": 8, "gpus": 8}), its)
    assert row["warnings"] == [
        "parallel sizes: TP 1 x PP 4 x CP 1 x DP 8 = 32 GPUs, but the log says 8: one of them is not this run's"
    ]
    # context parallelism takes its share: TP 8 x PP 16 x CP 16 x DP 8 = 16,384
    assert (
        one(runs({"path": "a", "tp": 8, "pp": 16, "cp": 16, "dp": 8, "gpus": 16384}), its)["warnings"] is None
    )
    assert one(runs({"path": "a", "tp": 2, "dp": 4, "gpus": 8}), its)["warnings"] is None  # PP unknown

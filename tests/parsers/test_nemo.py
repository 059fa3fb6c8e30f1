"""NeMo 2.0's per-step lines and Lightning's planned end, on a fixture in their formats (fixtures/nemo/)."""

from __future__ import annotations

import re
import statistics

import pytest
from logstat.parsers import nemo

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines

LOG = FIXTURES / "nemo" / "nemo2_llama3_8b_pretrain-5001.out"


def test_a_nemo_2_run_is_timed_by_its_steps_and_ends_at_its_planned_steps():
    lines = LOG.read_text(encoding="utf-8").splitlines()
    steps = [line for line in lines if line.startswith("Training epoch ")]
    times = [float(re.search(r"train_step_timing in s: ([\d.]+)", line)[1]) for line in steps]
    row = load_runs([LOG], warmup=1).runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("nemo", "ok", 20)
    assert row["reason"] == "`Trainer.fit` stopped: `max_steps=20` reached."
    assert row["sec_per_iter"] == statistics.median(times[1:])
    assert (row["global_batch_size"], row["samples_per_sec"]) == (128, 128 / statistics.median(times[1:]))


def test_each_field_of_a_progress_line_is_its_steps_metric():
    run = feed_lines(
        nemo.FAMILY,
        [
            "Training epoch 1, iteration 3/99 | lr: 4.5e-07 | global_batch_size: 256 | global_step: 103 | "
            "reduced_train_loss: 10.93 | train_step_timing in s: 5.817 | consumed_samples: 26624",
            # no global_step (a metric left out): the iteration numbers the step
            "Training epoch 1, iteration 4/99 | reduced_train_loss: 10.88 | train_step_timing in s: 6",
        ],
    )
    rows = run.iteration_frame.select("iteration", "loss", "lr", "elapsed_ms", "global_batch_size").rows()
    assert rows == [(4, 10.88, None, 6000.0, None), (103, 10.93, 4.5e-07, 5817.0, 256)]
    assert run.facts["global_batch_size"] == 256


@pytest.mark.parametrize(
    "end",
    ["`Trainer.fit` stopped: `max_steps=100` reached.", "`Trainer.fit` stopped: `max_epochs=3` reached."],
)
def test_lightnings_planned_end_completes_the_run(end):
    run = feed_lines(nemo.FAMILY, ["Training epoch 0, iteration 0/99 | train_step_timing in s: 5.8", end])
    assert run.completion[0] == end


def test_lightnings_world_and_precision_and_nemos_parallel_groups_are_the_runs_layout():
    # Lightning (fabric's _init_dist_connection, the accelerator connector) and NeMo's megatron_init, per rank
    lines = [
        "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/16",
        "All distributed processes registered. Starting with 16 processes",
        "Using bfloat16 Automatic Mixed Precision (AMP)",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:350] Rank 0 has data parallel group : [0, 4, 8, 12]",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:358] Rank 0 has context parallel group: [0, 2]",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:380] Rank 0 has tensor model parallel group: [0, 1]",
        "[NeMo I 2025-01-20 08:12:10 megatron_init:402] Rank 0 has pipeline model parallel group: [0]",
        "Training epoch 0, iteration 9/99 | lr: 1.5e-05 | global_batch_size: 32 | global_step: 9 | "
        "reduced_train_loss: 10.43 | train_step_timing in s: 1.52 | consumed_samples: 320",
    ]
    run = feed_lines(nemo.FAMILY, lines)
    layout = {name: run.facts.get(name) for name in ("gpus", "precision", "dp", "cp", "tp", "pp")}
    assert layout == {"gpus": 16, "precision": "bf16", "dp": 4, "cp": 2, "tp": 2, "pp": 1}
    assert run.provenance["gpus"] == "nemo:2" and run.provenance["tp"] == "nemo:6"  # its last statement
    fp16 = feed_lines(nemo.FAMILY, ["Using 16bit Automatic Mixed Precision (AMP)"])
    assert fp16.facts["precision"] == "fp16"

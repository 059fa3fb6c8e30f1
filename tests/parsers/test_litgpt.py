"""LitGPT's step lines, arguments, parameter counts, resume and end, on fixtures in its print formats
(fixtures/litgpt/); the expected numbers are computed here from the lines' own text."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from logstat.parsers import litgpt

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines, line_of

LOGS = FIXTURES / "litgpt"
LORA = LOGS / "litgpt_lora_llama3_8b-5201.out"
PRETRAIN = LOGS / "litgpt_pretrain_tinyllama_resumed_oom-5202.out"
STEP = re.compile(r"iter (\d+) step (\d+) \| loss train: ([\d.]+), .* iter time: ([\d.]+) ms( \(step\))?")


def _steps(path) -> dict[int, dict[str, float]]:
    """Per optimizer step, its first line's loss and, on a ``(step)`` line, the step's time: the
    iteration's times the iterations a step takes (``iter / step``)."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if (match := STEP.search(line)) and int(match[2]) > 0:
            iteration, step = int(match[1]), int(match[2])
            elapsed = float(match[4]) * (iteration // step) if match[5] else None
            found.setdefault(step, {"loss": float(match[3]), "elapsed_ms": elapsed})
    return found


def test_a_lora_finetune_is_a_step_a_row_timed_by_its_iterations():
    steps = _steps(LORA)
    result = load_runs([LORA], warmup=1)
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"], row["last_iteration"]) == (
        "litgpt",
        "ok",
        60,
        60,
    )
    assert row["reason"] == "| - Training Time             :  80.55 s"
    its = result.iterations.sort("iteration")
    assert its["iteration"].to_list() == sorted(steps) == list(range(1, 61))
    # log_interval 1 with 4 iterations a step: a step's row is its "(step)" line's
    assert its["loss"].to_list() == [steps[step]["loss"] for step in sorted(steps)]
    assert its["elapsed_ms"].to_list() == pytest.approx([steps[step]["elapsed_ms"] for step in sorted(steps)])
    times = [steps[step]["elapsed_ms"] for step in sorted(steps)]
    assert row["sec_per_iter"] == pytest.approx(statistics.median(times[1:]) / 1000)


def test_the_arguments_and_counts_are_the_runs_facts_with_their_lines():
    row = load_runs([LORA]).runs.row(0, named=True)
    facts = {
        "gpus": 1, "global_batch_size": 8, "micro_batch_size": 2, "train_iters": 60, "seq_len": 512,
        "logged_model_size": (3_407_872 + 8_030_261_248) / 1e9,
        "peak_memory_mib": round(19.84e9 / 2**20, 2),
    }  # fmt: skip
    assert {name: row[name] for name in facts} == facts
    provenance = json.loads(row["provenance"])
    lines = {
        "gpus": "TrainArgs(", "global_batch_size": "global_batch_size=", "train_iters": "max_steps=",
        "seq_len": "max_seq_length=", "logged_model_size": "non-trainable parameters",
        "peak_memory_mib": "Memory Used",
    }  # fmt: skip
    assert {name: provenance[name] for name in lines} == {
        name: f"litgpt:{line_of(LORA, text)}" for name, text in lines.items()
    }


def test_a_resumed_pretraining_that_ran_out_of_memory():
    steps = _steps(PRETRAIN)
    result = load_runs([PRETRAIN])
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("litgpt", "failed", 11)
    assert row["reason"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB.")
    assert (row["resumed_step"], row["gpus"], row["global_batch_size"], row["seq_len"]) == (
        1000,
        4,
        512,
        2048,
    )
    assert row["logged_model_size"] == 1.100048384
    assert row["train_iters"] is None  # max_steps=None: the run is planned by max_tokens
    its = result.iterations.sort("iteration")
    assert its["iteration"].to_list() == sorted(steps) == list(range(1001, 1012))
    assert its["elapsed_ms"].to_list() == pytest.approx([steps[step]["elapsed_ms"] for step in sorted(steps)])


def test_lit_gpt_2023_step_line():
    # lit-gpt's finetune/lora.py and pretrain scripts, 2023
    lines = [
        "iter 99 step 24: loss 2.1301, iter time: 401.12ms",
        "iter 100 step 25: loss 2.1234, iter time: 456.78ms (optimizer.step)",
    ]
    run = feed_lines(litgpt.FAMILY, lines)
    # the accumulating iteration's line is not read: the step's is
    frame = run.iteration_frame
    assert frame["iteration"].to_list() == [25]
    assert frame["elapsed_ms"].to_list() == [pytest.approx(456.78 * 4)]
    assert frame["loss"].to_list() == [2.1234]


def test_lit_llamas_iteration_line_is_a_row_each():
    # lit-llama's and mid-2023 lit-gpt's finetune/adapter.py: no step count, the iteration is the row
    lines = ["iter 0: loss 2.2986, time: 1381.20ms", "iter 1: loss 2.2871, time: 402.50ms"]
    frame = feed_lines(litgpt.FAMILY, lines).iteration_frame
    assert frame.select("iteration", "loss", "elapsed_ms").rows() == [(0, 2.2986, 1381.2), (1, 2.2871, 402.5)]


def test_lit_gpt_2023_pretrainings_block_size_is_the_length_trained_on():
    config = "{'name': 'tiny-llama-1.1b', 'block_size': 2048, 'vocab_size': 32000, 'n_layer': 22}"
    run = feed_lines(litgpt.FAMILY, [f"Loading model with {config}"])
    assert (run.facts["seq_len"], run.families_seen.get("litgpt")) == (2048, 1)
    # finetuning's names its checkpoint: its data's length is its own
    finetuning = f"Loading model 'checkpoints/tiiuae/falcon-7b/lit_model.pth' with {config}"
    assert "seq_len" not in feed_lines(litgpt.FAMILY, [finetuning]).facts


def test_other_programs_lines_are_not_litgpts():
    lines = [
        "iter 100: loss 4.2341, time 312.45ms, mfu 38.21%",  # nanoGPT's step line
        "iter 240: val loss 1.2113, val time: 8123.40 ms",  # LitGPT's own validation: no step
        "  Number of trainable parameters = 3,407,872",  # the HF Trainer's banner
        " 'devices': 8,",  # a dict's key with no TrainArgs after it
        "                    max_steps=500,",  # a field with no TrainArgs before it
        "Total parameters: 1234567",  # not LitGPT's thousands separators
    ]
    run = feed_lines(litgpt.FAMILY, lines)
    assert run.iteration_frame is None or run.iteration_frame.height == 0
    assert run.facts == {}
    assert run.families_seen == {}


def test_a_trainable_count_alone_outside_a_litgpt_run_is_no_size():
    # a script's own count (an adapter's, maybe): no LitGPT arguments before it
    run = feed_lines(litgpt.FAMILY, ["Number of trainable parameters: 3,407,872"])
    assert "logged_model_size" not in run.facts


def test_full_finetunings_trainable_count_is_the_models_size():
    # finetune/full.py prints the trainable count alone: every weight trains
    lines = [
        "'train': TrainArgs(save_interval=1000, log_interval=1, global_batch_size=16, micro_batch_size=1)"
    ]
    run = feed_lines(litgpt.FAMILY, [*lines, "Number of trainable parameters: 8,030,261,248"])
    assert run.facts["logged_model_size"] == 8.030261248
    # LoRA's non-trainable count after it: the sum
    lora = [
        *lines,
        "Number of trainable parameters: 3,407,872",
        "Number of non-trainable parameters: 8,030,261,248",
    ]
    assert feed_lines(litgpt.FAMILY, lora).facts["logged_model_size"] == (3_407_872 + 8_030_261_248) / 1e9


def test_lit_gpt_2023s_hyperparameters_dict_states_the_gpus_and_batches():
    # finetune/full.py, 2023: fabric.print(hparams), its module-level settings, then the trainable count
    hparams = (
        "{'eval_interval': 600, 'save_interval': 1000, 'eval_iters': 100, 'log_interval': 1, 'devices': 4, "
        "'learning_rate': 3e-05, 'batch_size': 16.0, 'micro_batch_size': 1, 'gradient_accumulation_iters': "
        "16.0, 'max_iters': 150000, 'weight_decay': 0.01, 'warmup_steps': 100}"
    )
    run = feed_lines(litgpt.FAMILY, [hparams, "Number of trainable parameters: 7,217,189,760"])
    facts = {name: run.facts.get(name) for name in ("gpus", "micro_batch_size", "gas", "logged_model_size")}
    assert facts == {"gpus": 4, "micro_batch_size": 1, "gas": 16, "logged_model_size": 7.21718976}


def test_a_litgpt_runs_gpus_are_its_data_parallel_ranks():
    # Fabric's FSDP or DDP: no tensor or pipeline parallelism, so the batch's accumulation follows
    row = load_runs([LORA]).runs.row(0, named=True)
    assert (row["tp"], row["pp"], row["dp"], row["gas"]) == (1, 1, 1, 4)


def test_a_memory_line_whose_number_is_garbled_is_no_fact_and_no_error():
    # found by the hostile-numbers property test: "12.5.6" is no number; float() raised on it
    run = feed_lines(litgpt.FAMILY, ["Memory used: 12.5.6 GB", "Memory used: 12.56 GB"])
    assert run.state.get("parse_errors") is None
    assert run.facts["peak_memory_mib"] == round(12.56e9 / 2**20, 2)


def test_a_refused_checkpoint_directory_is_the_cause_of_the_exit_after_it(tmp_path):
    # litgpt/utils.py check_valid_checkpoint_dir: its message on stderr, then SystemExit(1), no traceback
    refused = "checkpoint_dir '/ckpt/meta-llama/Meta-Llama-3-8B' is missing the files: ['lit_model.pth']."
    lines = [
        refused,
        "Find download instructions at https://github.com/Lightning-AI/litgpt/blob/main/tutorials",
    ]
    exited = "srun: error: gpu-03: task 0: Exited with exit code 1"
    (tmp_path / "ft-88123.err").write_text("\n".join([*lines, exited]) + "\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["family"], row["status"], row["reason"]) == ("litgpt", "failed", refused)
    absent = "checkpoint_dir '/ckpt/llama' is not a checkpoint directory."
    run = feed_lines(litgpt.FAMILY, [absent])
    assert run.failure[:3] == ("failed", absent, 1)

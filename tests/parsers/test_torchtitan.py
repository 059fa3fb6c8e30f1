"""torchtitan's step lines (2025's tps and tflops, 2024's wps), start-up facts and end, on fixtures in its
formats (fixtures/torchtitan/); the expected numbers are computed here from the lines' own text."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from logstat.parsers import torchtitan

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines, line_of

LOGS = FIXTURES / "torchtitan"
COMPLETE = LOGS / "titan_llama3_8b_h100-4101.out"
OLDER = LOGS / "titan_wps_llama3_8b_tp2-4102.out"
OOM = LOGS / "titan_llama3_8b_oom-4103.out"
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
PREFIX = "[titan] 2025-03-01 10:00:12,345 - root - INFO - "


def _steps(path) -> list[dict[str, float]]:
    """Each step line's numbers, as a reader of the log would take them."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        plain = COLOUR.sub("", line)
        if re.search(r"step: +\d+  loss:", plain):
            pairs = re.findall(r"(\w+): +([\d,.]+)", plain.split(" - INFO - ")[1])
            found.append({name: float(value.replace(",", "")) for name, value in pairs})
    return found


def test_a_complete_run_is_timed_by_its_tokens_per_second():
    steps = _steps(COMPLETE)
    result = load_runs([COMPLETE], warmup=1)
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("torchtitan", "ok", 20)
    assert row["reason"].endswith(" - INFO - Training completed")
    # one rank's batch (1 x 8192 tokens) at its tps, each rank its own GPU (FSDP over all 8)
    local_batch, seq_len, gpus = 1, 8192, 8
    times = [local_batch * seq_len / step["tps"] * 1000 for step in steps]
    its = result.iterations.sort("iteration")
    assert its["iteration"].to_list() == [int(step["step"]) for step in steps] == list(range(1, 21))
    assert its["elapsed_ms"].to_list() == pytest.approx(times, rel=1e-12)
    assert its["elapsed_ms"][1] == pytest.approx(1 * 8192 / 6012 * 1000, rel=1e-12)
    assert its["tokens_per_sec"].to_list() == [step["tps"] * gpus for step in steps]
    assert its["loss"].to_list() == [step["loss"] for step in steps]
    assert its["grad_norm"].to_list() == [step["grad_norm"] for step in steps]
    assert its["logged_tflops_per_gpu"].to_list() == [step["tflops"] for step in steps]
    assert its["mem_max_allocated_mb"].null_count() == 20  # the line's memory is the reserved peak
    assert row["sec_per_iter"] == pytest.approx(statistics.median(times[1:]) / 1000, rel=1e-12)
    assert row["logged_tflops_per_gpu"] == statistics.median(step["tflops"] for step in steps[1:])
    # logstat's MFU (its own model FLOPs at that step time) is torchtitan's printed one
    assert row["mfu"] == pytest.approx(statistics.median(step["mfu"] for step in steps[1:]) / 100, abs=5e-4)
    # and so are its TFLOP/s by Megatron-LM's count: selective recomputation recomputes no matmul
    assert row["tflops_per_gpu_megatron"] == pytest.approx(row["logged_tflops_per_gpu"], rel=1e-3)


def test_the_start_up_lines_are_the_runs_facts_with_their_lines():
    row = load_runs([COMPLETE]).runs.row(0, named=True)
    facts = {
        "gpus": 8, "dp": 8, "tp": 1, "pp": 1, "cp": 1,
        "micro_batch_size": 1, "global_batch_size": 8, "gas": 1, "seq_len": 8192, "train_iters": 20,
        "hidden_size": 4096, "num_layers": 32, "num_heads": 32, "num_query_groups": 8, "vocab_size": 128256,
        "ffn_hidden_size": 14336, "swiglu": True, "untied_embeddings": True, "logged_model_size": 8.030261248,
        "gpu_model": "H100-SXM", "precision": "bf16", "activation_checkpointing": False,
    }  # fmt: skip
    assert {name: row[name] for name in facts} == facts
    provenance = json.loads(row["provenance"])
    lines = {
        "gpus": "device mesh with", "dp": "device mesh with", "hidden_size": "TransformerModelArgs(",
        "ffn_hidden_size": "TransformerModelArgs(", "untied_embeddings": "TransformerModelArgs(",
        "logged_model_size": "total parameters",
        "gpu_model": "CUDA capacity:", "precision": "handled by fully_shard", "seq_len": "Training starts",
        "global_batch_size": "Training starts", "micro_batch_size": "Training starts",
        "activation_checkpointing": "Applied selective activation checkpointing",
    }  # fmt: skip
    assert {name: provenance[name] for name in lines} == {
        name: f"torchtitan:{line_of(COMPLETE, text)}" for name, text in lines.items()
    }
    assert provenance["gas"] == "derived:0"  # global / (local x DP)


def test_a_2024_run_has_wps_and_no_step_time_without_its_batch():
    steps = _steps(OLDER)
    result = load_runs([OLDER])
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("torchtitan", "ok", 4)
    assert (row["gpus"], row["dp"], row["tp"], row["activation_checkpointing"]) == (8, 4, 2, True)
    # "Training starts at step 1" only: the length is the model's max_seq_len, which train.py set to
    # training.seq_len before it built the model; no global batch, so no step time
    assert (row["seq_len"], json.loads(row["provenance"])["seq_len"]) == (8192, "torchtitan:5")
    assert (row["global_batch_size"], row["precision"], row["sec_per_iter"]) == (None,) * 3
    its = result.iterations.sort("iteration")
    assert its["iteration"].to_list() == [1, 10, 20, 30]
    assert its["tokens_per_sec"].to_list() == [step["wps"] * 8 for step in steps]
    assert its["elapsed_ms"].null_count() == its["logged_tflops_per_gpu"].null_count() == 4
    assert its["grad_norm"].null_count() == 4


def test_a_run_that_ran_out_of_memory_failed_of_it_and_keeps_its_steps():
    steps = _steps(OOM)
    result = load_runs([OOM])
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("torchtitan", "failed", 3)
    assert row["reason"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.")
    assert row["reason_line"] == line_of(OOM, "[rank0]: torch.OutOfMemoryError")
    assert any("ChildFailedError" in line for line in row["consequences"])
    # a DP rank reads local batch x gas x seq tokens a step; its tps divides them by its TP group too
    local_batch, gas, seq_len, tp = 4, 2, 8192, 2
    assert (row["micro_batch_size"], row["gas"], row["tp"], row["dp"]) == (local_batch, gas, tp, 4)
    times = [local_batch * gas * seq_len / (step["tps"] * tp) * 1000 for step in steps]
    assert result.iterations.sort("iteration")["elapsed_ms"].to_list() == pytest.approx(times, rel=1e-12)


def test_each_field_of_a_step_line_in_either_format():
    run = feed_lines(
        torchtitan.FAMILY,
        [
            f"[rank0]:{PREFIX}\x1b[31mstep: 10  \x1b[32mloss:  7.8512  \x1b[38;2;180;60;0mgrad_norm:  1.2345  "
            "\x1b[38;2;54;234;195mmemory: 62.13GiB(78.54%)  \x1b[34mtps: 6,012  \x1b[36mtflops: 1,348.21  "
            "\x1b[35mmfu: 35.21%\x1b[39m",
            f"{PREFIX}step: 1200  loss: 12.0345  memory: 62.13GiB(78.54%)  wps: 12,034  mfu: 35.21%",
        ],
    )
    columns = ("iteration", "loss", "grad_norm", "logged_tflops_per_gpu", "tokens_per_sec", "elapsed_ms")
    # no GPU count nor batch in these lines: no run tokens/s nor step time
    assert run.iteration_frame.select(columns).rows() == [
        (10, 7.8512, 1.2345, 1348.21, None, None),
        (1200, 12.0345, None, None, None, None),
    ]


@pytest.mark.parametrize(
    "line",
    [
        " iteration       10/    1000 | consumed samples:        10240 | elapsed time per iteration (ms): 1234.5 "
        "| learning rate: 1.5E-04 | global batch size:  1024 | lm loss: 7.851E+00 | loss scale: 1.0 |",
        "Training epoch 0, iteration 9/99 | lr: 1.5e-05 | global_step: 9 | reduced_train_loss: 10.43 | "
        "train_step_timing in s: 1.52",
        "{'loss': 7.8512, 'grad_norm': 1.2345, 'learning_rate': 4.5e-05, 'epoch': 0.1}",
        "[2025-03-01 10:00:12,345] [INFO] [engine.py:123:_take_model_step] steps: 10 loss: 7.8512 iter time (s): "
        "1.362 samples/sec: 5.871",
        "sampling step: 10  tps: 6,012",  # a throughput without a training step's loss
        "Epoch 3: Training completed in 5 minutes",
    ],
)
def test_another_familys_line_sharing_a_word_is_not_torchtitans(tmp_path, line):
    run = feed_lines(torchtitan.FAMILY, [line])
    assert (run.iteration_frame, run.completion, run.families_seen.get("torchtitan")) == (None, None, None)
    log = tmp_path / "other-1.out"
    log.write_text(line + "\n", encoding="utf-8")
    assert load_runs([log]).runs["family"].to_list() != ["torchtitan"]


@pytest.mark.parametrize(
    ("dim", "multiple_of", "multiplier", "width"),
    [(4096, 1024, 1.3, 14336), (8192, 4096, 1.3, 28672), (16384, 4096, 1.2, 53248), (4096, 256, None, 11008)],
)
def test_llamas_ffn_width_is_its_feed_forwards_rule(dim, multiple_of, multiplier, width):
    # llama3 8B, 70B, 405B and llama2 7B, as Meta's configs state their intermediate sizes
    assert torchtitan.llama_ffn_hidden_size(dim, multiple_of, multiplier) == width


def test_2025s_trainer_states_its_batch_and_sequence_as_it_is_initialized():
    # torchtitan's Trainer (2025) logs the clauses at the end of __init__, then "Training starts at step 1."
    initialized = (
        "Trainer is initialized with local batch size 4, global batch size 32, gradient accumulation "
    )
    initialized += "steps 1, sequence length 8192, total steps 500 (warmup 50)."
    step = (
        PREFIX
        + "step: {}  loss:  9.3664  grad_norm:  1.3062  memory: 66.02GiB(83.40%)  tps: 1,024  tflops: 60.0"
    )
    run = feed_lines(
        torchtitan.FAMILY,
        [
            "[rank0]:" + PREFIX + "Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]",
            "[rank0]:" + PREFIX + initialized,
            "[rank0]:" + PREFIX + "Training starts at step 1.",
            step.format(1),
            step.format(10),
        ],
    )
    facts = {
        name: run.facts.get(name) for name in ("micro_batch_size", "global_batch_size", "gas", "seq_len")
    }
    assert facts == {"micro_batch_size": 4, "global_batch_size": 32, "gas": 1, "seq_len": 8192}
    assert run.facts["train_iters"] == 500
    # 32 x 8192 tokens over 8 GPUs at 1,024 tokens/s each
    assert run.iteration_frame["elapsed_ms"].to_list() == [32 * 8192 / (1024 * 8) * 1000] * 2


def test_a_mesh_and_a_relaunch_from_a_checkpoint():
    starts = PREFIX + "Training starts at step {}, with local batch size 2, global batch size 32, sequence "
    starts += "length 4096, total steps 1000 (warmup 200)"
    step = (
        PREFIX + "step: {}  loss: {}  grad_norm:  1.0000  memory: 40.00GiB(50.00%)  tps: 4,096  tflops: 1.00"
    )
    run = feed_lines(
        torchtitan.FAMILY,
        [
            PREFIX + "Building 4-D device mesh with ['pp', 'dp_replicate', 'dp_shard', 'tp'], [2, 2, 2, 2]",
            starts.format(1),
            step.format(1, "9.0000"),
            step.format(2, "8.0000"),
            PREFIX + "Loading the checkpoint at step 1.",
            starts.format(2),
            step.format(2, "8.5000"),
            PREFIX + "Training completed",
        ],
    )
    layout = {name: run.facts.get(name) for name in ("gpus", "dp", "tp", "pp", "cp", "resumed_step")}
    assert layout == {"gpus": 16, "dp": 4, "tp": 2, "pp": 2, "cp": 1, "resumed_step": 1}
    # the relaunch's step 2 replaces the first launch's; 32 x 4096 tokens over 16 GPUs at 4,096 each
    rows = run.iteration_frame.select("iteration", "launch", "loss", "elapsed_ms").rows()
    assert rows == [(1, 0, 9.0, 32 * 4096 / (4096 * 16) * 1000), (2, 1, 8.5, 2000.0)]
    assert run.completion[1] == 8
    expert = feed_lines(
        torchtitan.FAMILY, [PREFIX + "Building 2-D device mesh with ['dp_shard', 'ep'], [4, 2]"]
    )
    assert "gpus" not in expert.facts  # an expert mesh overlaps the others: its product is no world size


@pytest.mark.parametrize("multiplier", ["nan", "inf", "1e308", "1.3x"])
def test_a_ffn_multiplier_that_is_no_finite_number_leaves_the_ffn_width_unknown(multiplier):
    # found by the hostile-numbers test: int(nan * hidden) raised
    line = (
        "[rank0]:[titan] 2025-03-01 10:00:00,000 - root - INFO - Building llama3 8B with TransformerModelArgs("
        f"dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256, multiple_of=1024, "
        f"ffn_dim_multiplier={multiplier}, norm_eps=1e-05)"
    )
    run = feed_lines(torchtitan.FAMILY, [line])
    assert "ffn_hidden_size" not in run.facts and run.facts["hidden_size"] == 4096
    assert not run.state.get("parse_errors")
    # the real 8B's multiplier: 2/3 x 4 x 4096 = 10922, x 1.3 = 14198, up to a multiple of 1024
    real = feed_lines(torchtitan.FAMILY, [line.replace(f"={multiplier},", "=1.3,")])
    assert real.facts["ffn_hidden_size"] == 14336


@pytest.mark.parametrize(
    "lines",
    [
        # 2025: components/checkpoint.py's load of a folder named by its step, then the trainer's first step
        ["Loading the checkpoint from ./outputs/checkpoint/step-2000.", "Training starts at step 2001"],
        ["Loading the checkpoint from /lustre/run7/checkpoint/step-2000."],
        ["Training starts at step 2001."],
    ],
)
def test_a_2025_resume_is_read_from_its_checkpoints_folder_or_its_first_step(lines):
    run = feed_lines(torchtitan.FAMILY, [f"[rank0]:{PREFIX}{line}" for line in lines])
    assert run.facts["resumed_step"] == 2000
    assert run.provenance["resumed_step"] == f"torchtitan:{len(lines)}"  # the last says it again


def test_a_first_launch_and_a_seed_checkpoint_resume_nothing():
    run = feed_lines(torchtitan.FAMILY, [PREFIX + "Training starts at step 1."])
    assert "resumed_step" not in run.facts
    # an initial load of weights in another format names no step
    other = feed_lines(torchtitan.FAMILY, [PREFIX + "Loading the checkpoint from /models/llama3-8b/hf."])
    assert "resumed_step" not in other.facts


def test_a_dimension_beyond_int64_is_noted_and_derives_nothing():
    # found by the hostile-numbers test: 2 * (4 * dim) / 3 of a 400-digit dim raised OverflowError
    huge = "9" * 400
    line = (
        f"{PREFIX}Building llama3 8B with TransformerModelArgs(dim={huge}, n_layers=32, n_heads=32, "
        "vocab_size=128256, multiple_of=1024, ffn_dim_multiplier=1.3, norm_eps=1e-05)"
    )
    run = feed_lines(torchtitan.FAMILY, [line])
    assert "hidden_size" not in run.facts and "ffn_hidden_size" not in run.facts
    assert [note.split(":")[2].split("=")[0].strip() for note in run.state["parse_errors"]] == ["hidden_size"]

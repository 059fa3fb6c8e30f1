"""nanoGPT's step lines, printed config and start-up facts, on fixtures in its print formats
(fixtures/nanogpt/); the expected numbers are computed here from the lines' own text."""

from __future__ import annotations

import json
import re
import statistics

import pytest
from logstat.parsers import nanogpt

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines

LOGS = FIXTURES / "nanogpt"
GPT2 = LOGS / "nanogpt_gpt2_124m_8xa100-8801.out"
SHAKESPEARE = LOGS / "nanogpt_shakespeare_char.log"
OOM = LOGS / "nanogpt_gpt2_oom-8803.out"
STEP = re.compile(r"^iter (\d+): loss ([\d.]+), time ([\d.]+)ms, mfu (-?[\d.]+)%$")


def _steps(path) -> list[tuple[int, float, float, float]]:
    """Each step line's iteration, loss, time (ms) and mfu (%)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(int(m[1]), float(m[2]), float(m[3]), float(m[4])) for m in map(STEP.match, lines) if m]


def _last_line_of(path, text: str) -> int:
    """The last line holding ``text``: every rank prints the start-up, the last statement is the fact's."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return max(number for number, line in enumerate(lines, 1) if text in line)


def test_a_ddp_run_is_timed_by_its_step_lines():
    steps = _steps(GPT2)
    result = load_runs([GPT2], warmup=1)
    row = result.runs.row(0, named=True)
    assert (row["family"], row["families"], row["status"]) == ("nanogpt", ["nanogpt"], "incomplete")
    assert (row["iterations"], row["last_iteration"]) == (30, 290)
    its = result.iterations.sort("iteration")
    assert its["iteration"].to_list() == [step for step, *_ in steps] == list(range(0, 300, 10))
    assert its["loss"].to_list() == [loss for _, loss, _, _ in steps]
    assert its["elapsed_ms"].to_list() == [ms for _, _, ms, _ in steps]
    # iter 0's -100.00% is train.py's "not estimated yet" (running_mfu = -1.0): null
    assert steps[0][3] == -100.0
    tflops = [None if mfu < 0 else mfu * 312 / 100 for *_, mfu in steps]
    logged = its["logged_tflops_per_gpu"].to_list()
    assert logged[0] is None and logged[1:] == pytest.approx(tflops[1:], rel=1e-12)
    assert row["sec_per_iter"] == pytest.approx(statistics.median(ms for _, _, ms, _ in steps[1:]) / 1000)
    assert row["logged_tflops_per_gpu"] == pytest.approx(statistics.median(t for t in tflops[1:]), rel=1e-12)


def test_the_config_and_start_up_lines_are_the_runs_facts_with_their_lines():
    row = load_runs([GPT2]).runs.row(0, named=True)
    # 491,520 tokens = 40 accumulation steps x 12 x 1024 (the world is not in it): 480 sequences
    facts = {
        "micro_batch_size": 12, "seq_len": 1024, "global_batch_size": 480, "train_iters": 600000,
        "vocab_size": 50257, "padded_vocab_size": 50304, "logged_model_size": 0.12359,
        # train.py is DDP only: DP the GPUs, and the accumulation per process 480 / (12 x 8)
        "gpus": 8, "tp": 1, "pp": 1, "dp": 8, "gas": 5, "num_layers": None, "hidden_size": None,
        "precision": None,
    }  # fmt: skip
    assert {name: row[name] for name in facts} == facts
    provenance = json.loads(row["provenance"])
    lines = {
        "micro_batch_size": "batch_size = 12", "seq_len": "block_size = 1024", "train_iters": "max_iters = ",
        "global_batch_size": "tokens per iteration will be: 491,520", "vocab_size": "defaulting to vocab_size",
        "padded_vocab_size": "defaulting to vocab_size", "logged_model_size": "number of parameters: 123.59M",
    }  # fmt: skip
    assert {name: provenance[name] for name in lines} == {
        name: f"nanogpt:{_last_line_of(GPT2, text)}" for name, text in lines.items()
    }
    assert provenance["gpus"].startswith("hf-trainer:")  # torchrun's --nproc_per_node=8, echoed


def test_a_run_that_reached_max_iters_is_complete():
    steps = _steps(SHAKESPEARE)
    result = load_runs([SHAKESPEARE], warmup=1)
    row = result.runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"], row["last_iteration"]) == (
        "nanogpt",
        "ok",
        51,
        5000,
    )
    assert row["reason"] == "reached the planned 5000 iterations"
    assert row["reason_line"] == _last_line_of(SHAKESPEARE, "iter 5000: ")
    facts = {
        "num_layers": 6, "num_heads": 6, "hidden_size": 384, "seq_len": 256, "micro_batch_size": 64,
        "global_batch_size": 64, "vocab_size": 65, "padded_vocab_size": None, "train_iters": 5000,
        "gpus": 1, "dp": 1, "gas": 1,
    }  # fmt: skip
    assert {name: row[name] for name in facts} == facts
    # the shell's echo of a bare "python train.py ...": no launcher, one process on one device
    assert json.loads(row["provenance"])["gpus"] == "nanogpt:1"
    # the step of an evaluation (every 500th logged) holds it: the median is the training step's
    assert row["sec_per_iter"] == pytest.approx(statistics.median(ms for _, _, ms, _ in steps[1:]) / 1000)


def test_a_run_out_of_memory_failed_of_it_with_its_overrides():
    row = load_runs([OOM]).runs.row(0, named=True)
    assert (row["family"], row["status"], row["iterations"]) == ("nanogpt", "failed", 0)
    assert row["reason"].startswith("CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory.")
    assert row["reason_line"] == _last_line_of(OOM, "torch.OutOfMemoryError")
    # --batch_size=32 replaces the config file's 12: 40 x 32 x 1024 = 1,310,720 tokens, 1280 sequences
    assert (row["micro_batch_size"], row["global_batch_size"]) == (32, 1280)
    assert (
        json.loads(row["provenance"])["micro_batch_size"]
        == f"nanogpt:{_last_line_of(OOM, 'Overriding: batch_size')}"
    )


def test_config_values_products_comments_and_precision_only_inside_the_config():
    run = feed_lines(
        nanogpt.FAMILY,
        [
            "batch_size = 99",  # before any config: no nanoGPT's
            "Overriding config with config/my.py:",
            "gradient_accumulation_steps = 5 * 8",
            "n_layer = 4 # small",
            "dtype = 'bfloat16'",
            "block_size = 128",
            "",
            "Overriding: dtype = float16",
            "Overriding: n_layer = 8",
            "tokens per iteration will be: 20,480",
            "batch_size = 77",  # after the config: no nanoGPT's
            "found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)",
            "iter 0: loss 4.2000, time 900.00ms, mfu -100.00%",
            "iter 1: loss nan, time 31.50ms, mfu -100.00%",
            "iter 5: loss 3.9000, time 31.25ms, mfu 12.50%",
        ],
    )
    facts = ("micro_batch_size", "num_layers", "seq_len", "precision", "vocab_size", "global_batch_size")
    assert {name: run.facts.get(name) for name in facts} == {
        "micro_batch_size": None, "num_layers": 8, "seq_len": 128, "precision": "fp16", "vocab_size": 65,
        "global_batch_size": 160,
    }  # fmt: skip
    rows = run.iteration_frame.select("iteration", "elapsed_ms", "logged_tflops_per_gpu").rows()
    assert rows == [(0, 900.0, None), (1, 31.5, None), (5, 31.25, 12.5 * 312 / 100)]


def test_gpt2_weights_give_gpt2s_shape_unpadded():
    run = feed_lines(
        nanogpt.FAMILY,
        [
            "defaulting to vocab_size of GPT-2 to 50304 (50257 rounded up for efficiency)",
            "Initializing from OpenAI GPT-2 weights: gpt2-xl",
        ],
    )
    shape = ("num_layers", "num_heads", "hidden_size", "vocab_size", "padded_vocab_size")
    assert tuple(run.facts[name] for name in shape) == (48, 25, 1600, 50257, 50257)


def test_gpt2_weights_give_their_block_unless_the_config_states_one():
    # model.py from_pretrained: "forcing vocab_size=50257, block_size=1024, bias=True"; train.py crops the
    # model to a smaller block_size the config states
    pretrained = [
        "loading weights from pretrained gpt: gpt2-xl",
        "forcing vocab_size=50257, block_size=1024, bias=True",
    ]
    assert feed_lines(nanogpt.FAMILY, pretrained).facts["seq_len"] == 1024
    config = [
        "Overriding config with config/finetune_shakespeare.py:",
        "block_size = 256",
        "Overriding: dtype = float16",
    ]
    assert feed_lines(nanogpt.FAMILY, [*config, *pretrained]).facts["seq_len"] == 256


def test_a_resumed_run_resumes_at_its_first_evaluation():
    # train.py: iter_num = checkpoint['iter_num'] (saved at an evaluation), and the loop evaluates there first
    lines = [
        "Overriding: init_from = resume",
        "Resuming training from out-shakespeare-char",
        "number of parameters: 10.65M",
        "step 5000: train loss 0.6200, val loss 1.7000",
        "iter 5000: loss 0.5805, time 38012.30ms, mfu -100.00%",
        "iter 5010: loss 0.5790, time 41.20ms, mfu -100.00%",
        "step 5250: train loss 0.6100, val loss 1.7100",
    ]
    run = feed_lines(nanogpt.FAMILY, lines)
    assert (run.facts["resumed_step"], run.provenance["resumed_step"]) == (5000, "nanogpt:4")
    fresh = feed_lines(nanogpt.FAMILY, ["Initializing a new model from scratch", *lines[3:]])
    assert "resumed_step" not in fresh.facts


def test_early_nanogpts_step_line_without_mfu_is_a_step():
    # train.py before estimate_mfu (February 2023)
    lines = ["iter 0: loss 4.2764, time 9012.31ms", "iter 10: loss 3.1045, time 118.71ms"]
    run = feed_lines(nanogpt.FAMILY, lines)
    assert {step: (row["loss"], row["elapsed_ms"]) for step, row in run.iterations.items()} == {
        0: (4.2764, 9012.31),
        10: (3.1045, 118.71),
    }
    # something after the time that is not the mfu is not nanoGPT's line
    assert (
        feed_lines(nanogpt.FAMILY, ["iter 10: loss 3.1045, time 118.71ms, tok/s 9000"]).iteration_frame
        is None
    )


@pytest.mark.parametrize(
    "line",
    [
        " iteration       10/     100 | consumed samples:        10240 | elapsed time per iteration (ms): 1234.5 "
        "| learning rate: 1.5E-04 | global batch size:  1024 | lm loss: 7.851E+00 | loss scale: 1.0 |",
        "[2025-03-01 10:00:12,345] [INFO] [engine.py:123:_take_model_step] steps: 10 loss: 7.8512 iter time (s): "
        "1.362 samples/sec: 5.871",
        "{'loss': 7.8512, 'grad_norm': 1.2345, 'learning_rate': 4.5e-05, 'epoch': 0.1}",
        "iter_dt 312.45ms; iter 10: train loss 9.21550",  # minGPT's trainer callback, as its demo prints it
        "Average Epoch time: 45.65 seconds",
        "epoch 1 iter 10: train loss 9.21550. lr 6.000000e-04",  # minGPT's older trainer
        "batch_size = 12",
        "Overriding config: n_layer=4",  # HF run_clm's --config_overrides
    ],
)
def test_another_familys_line_sharing_a_word_is_not_nanogpts(tmp_path, line):
    run = feed_lines(nanogpt.FAMILY, [line])
    assert (run.iteration_frame, run.families_seen.get("nanogpt"), run.facts) == (None, None, {})
    log = tmp_path / "other-1.out"
    log.write_text(line + "\n", encoding="utf-8")
    assert load_runs([log]).runs["family"].to_list() != ["nanogpt"]


@pytest.mark.parametrize(
    ("command", "gpus"),
    [
        ("+ python3 train.py --compile=False", 1),
        ("$ /opt/conda/bin/python -u train.py config/train_gpt2.py", 1),
        ("maria@rig:~/nanoGPT$ python train.py config/finetune_shakespeare.py", 1),  # a prompt's echo
        ("maria@rig:~/nanoGPT$ srun python train.py config/finetune_shakespeare.py", None),
        # a launcher's DDP, and a command that only mentions train.py, say nothing of one process
        ("$ torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2.py", None),
        ("$ srun python train.py config/train_gpt2.py", None),
    ],
)
def test_a_bare_interpreters_train_py_is_one_gpu(command, gpus):
    run = feed_lines(nanogpt.FAMILY, [command, "Initializing a new model from scratch"])
    nanogpt.finish(run)
    assert run.facts.get("gpus") == gpus


def test_a_bare_command_is_no_gpu_count_of_another_familys_run():
    run = feed_lines(nanogpt.FAMILY, ["$ python train.py --model_name_or_path gpt2"])
    nanogpt.finish(run)
    assert "gpus" not in run.facts


def test_a_step_line_glued_after_another_ranks_unfinished_write_is_a_step():
    # ranks with no prefix: one's warning cut short, another's step line written right after it
    glued = "torch._dynamo hit config.cache_size_limit (8iter 10: loss 10.9300, time 450.87ms, mfu -100.00%"
    run = feed_lines(nanogpt.FAMILY, ["iter 0: loss 10.9500, time 31520.33ms, mfu -100.00%", glued])
    assert run.iteration_frame.select("iteration", "loss", "elapsed_ms").rows() == [
        (0, 10.95, 31520.33),
        (10, 10.93, 450.87),
    ]


def test_a_second_run_appended_to_the_log_ends_as_it_did(tmp_path):
    # `python train.py ... | tee -a train.log` twice: the first stopped by Ctrl-C, the second resumed and
    # still running (cut off): train.py's first words start each launch
    def launch(steps: range) -> list[str]:
        return [
            "tokens per iteration will be: 16,384",
            *(f"iter {i}: loss 2.5, time 40.00ms, mfu 5.00%" for i in steps),
        ]

    interrupted = [
        "^CTraceback (most recent call last):",
        '  File "train.py", line 300, in <module>',
        "KeyboardInterrupt",
    ]
    log = tmp_path / "train.log"
    log.write_text("\n".join([*launch(range(0, 50, 10)), *interrupted, *launch(range(40, 90, 10))]) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["last_iteration"]) == ("incomplete", 80)
    assert row["consequences"][0].endswith("KeyboardInterrupt")
    # the first alone ended by the interrupt
    log.write_text("\n".join([*launch(range(0, 50, 10)), *interrupted]) + "\n")
    assert load_runs([log]).runs.row(0, named=True)["status"] == "cancelled"

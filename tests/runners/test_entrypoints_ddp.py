"""The DDP + PowerSGD entry point: its Megatron-format lines against real Megatron lines, its flag
checks, and real 2-process CPU runs (gloo) whose logs show the PowerSGD hook at work."""

from __future__ import annotations

import math
import re

import pytest
from logstat.runners.entrypoints import ddp_powersgd
from logstat.runners.entrypoints.model import GPT2Shape, build_gpt2

from tests.conftest import REAL_LOGS
from tests.runners.launch import flag_argv, torchrun

TINY = {"hidden": 64, "layers": 2, "heads": 2, "seq": 32, "vocab": 128}
# gpt2_params(h=64, l=2, v=128, s=32) by hand: 2*(12*64^2 + 13*64) + 128*64 + 32*64 + 2*64
TINY_PARAMS = 2 * (12 * 4096 + 13 * 64) + 8192 + 2048 + 128
assert TINY_PARAMS == 110336


def ddp_argv(**overrides: str) -> list[str]:
    """The flags H4a's renderer writes, for the tiny model; ``overrides`` replace values by flag name."""
    flags = {
        "--hidden-size": "64",
        "--num-layers": "2",
        "--num-heads": "2",
        "--seq-length": "32",
        "--vocab-size": "128",
        "--micro-batch-size": "2",
        "--gradient-accumulation-steps": "2",
        "--train-iters": "6",
        "--lr": "1e-3",
        "--optimizer": "adafactor",
        "--precision": "fp32",
        "--powersgd-rank": "2",
        "--powersgd-start-iter": "2",
        "--seed": "1234",
        "--log-interval": "1",
    }
    return flag_argv(flags, overrides)


# --- the format, against real Megatron lines -------------------------------------------------


def test_iteration_line_has_megatrons_layout_field_for_field():
    real = (REAL_LOGS / "meg_gpt2_perf_n16.out").read_text().splitlines()[340]
    ours = ddp_powersgd.megatron_iteration_line(
        iteration=1,
        train_iters=1000,
        consumed_samples=1024,
        elapsed_ms=155483.8,
        learning_rate=0.0,
        global_batch_size=1024,
        lm_loss=12.52221,
        loss_scale=4294967296.0,
        grad_norm=1.2345,
        skipped_iterations=1,
        nan_iterations=0,
    )
    head = real.split(" loss scale:")[0]
    assert ours.startswith(head)
    assert " lm loss: 1.252221E+01 | loss scale: 4294967296.0 | grad norm: 1.234 |" in ours
    assert ours.endswith(real.split("| loss scale: 4294967296.0 |")[1])


def test_arguments_dump_aligns_dots_like_megatron():
    real = (REAL_LOGS / "meg_gpt2_perf_n16.out").read_text().splitlines()
    ours = ddp_powersgd.megatron_arguments_dump({"world_size": 64, "hidden_size": 8192, "DDP_impl": "local"})
    assert ours[0] == real[50] == "------------------------ arguments ------------------------"
    # Megatron sorts case-insensitively: DDP_impl between d... and h...
    assert ours[1:4] == [
        line for line in real if line.startswith(("  DDP_impl ", "  hidden_size ", "  world_size "))
    ]
    assert ours[-1] == "-------------------- end of arguments ---------------------"


def test_header_carries_the_run_facts():
    config = ddp_powersgd.parse_config(ddp_argv() + ["--activation-checkpointing"])
    header = ddp_powersgd.megatron_header(config, world_size=2, backend="gloo")
    assert header[0] == (
        "using world size: 2, data-parallel-size: 2, tensor-model-parallel size: 1, pipeline-model-parallel size: 1 "
    )
    dump = {line.split()[0]: line.split()[-1] for line in header if line.startswith("  ")}
    assert dump["global_batch_size"] == "8"  # 2 micro * 2 gas * 2 ranks
    assert dump["num_attention_heads"] == "2"
    assert dump["checkpoint_activations"] == "True"
    assert dump["fp16"] == dump["bf16"] == "False"
    assert "setting number of micro-batches to constant 2" in header


# --- refusals name the flag and the rule -----------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"micro_batch_size": "0"}, "argument --micro-batch-size: 0 must be >= 1"),
        ({"num_heads": "3"}, "--num-heads=3 must divide --hidden-size=64"),
        ({"powersgd_start_iter": "1"}, "--powersgd-start-iter=1 must be >= 2"),
        ({"precision": "fp8"}, "argument --precision: invalid choice: 'fp8'"),
        ({"optimizer": "sgd"}, "argument --optimizer: invalid choice: 'sgd'"),
        ({"lr": "-1"}, "argument --lr: -1.0 must be a finite number > 0"),
        ({"train_iters": "ten"}, "argument --train-iters: 'ten' is not an integer"),
    ],
)
def test_bad_flags_are_refused_naming_flag_and_rule(overrides, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        ddp_powersgd.parse_config(ddp_argv(**overrides))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# --- real runs ---------------------------------------------------------------------------------


ITERATION = re.compile(
    r"^ iteration +(\d+)/ +(\d+) \| consumed samples: +(\d+) \| elapsed time per iteration \(ms\): ([\d.]+) \|"
    r" learning rate: ([\dE.+-]+) \| global batch size: +(\d+) \| lm loss: ([\dE.+-]+) \| loss scale: ([\d.]+) \|"
    r" grad norm: ([\d.]+) \| number of skipped iterations: +(\d+) \| number of nan iterations: +(\d+) \|$",
    re.MULTILINE,
)


def powersgd_numel_after(shape: GPT2Shape, rank: int) -> int:
    """Elements PowerSGD sends per step for this model, by its rule: a gradient viewed as an n x m
    matrix is sent as rank-r factors ((n + m) * r) when that is less than half of n * m, else whole."""
    total = 0
    for parameter in build_gpt2(shape, seed=0).parameters():
        n = parameter.shape[0]
        m = parameter.numel() // n
        r = min(n, m, rank)
        total += (n + m) * r if (n + m) * r * 2 < n * m else n * m
    return total


@pytest.mark.slow
def test_ddp_powersgd_run_logs_megatron_lines_and_the_hook_at_work(tmp_path):
    train_iters, start_iter, rank = 6, 2, 2
    result = torchrun(
        "logstat.runners.entrypoints.ddp_powersgd", ddp_argv() + ["--activation-checkpointing"], timeout_s=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "using world size: 2, data-parallel-size: 2, tensor-model-parallel size: 1" in out
    assert re.search(r"^  checkpoint_activations \.+ True$", out, re.MULTILINE)
    assert re.search(r"^  global_batch_size \.+ 8$", out, re.MULTILINE)

    rows = ITERATION.findall(out)
    assert [int(row[0]) for row in rows] == list(range(1, train_iters + 1))
    assert {int(row[1]) for row in rows} == {train_iters}
    assert [int(row[2]) for row in rows] == [8 * i for i in range(1, train_iters + 1)]  # consumed samples
    assert {int(row[5]) for row in rows} == {8}  # global batch = 2 micro * 2 gas * 2 ranks
    assert {float(row[4]) for row in rows} == {1e-3}
    # A fresh GPT-2 (init std 0.02) predicts nearly uniformly: the first loss is ln(vocab).
    assert abs(float(rows[0][6]) - math.log(128)) < 0.1
    assert all(float(row[8]) > 0 for row in rows)  # grad norm

    evidence = re.search(
        r"^powersgd \| comm hook: (\S+) \| matrix approximation rank: (\d+) \| start iter: (\d+) \|"
        r" hook iterations: (\d+) \| numel before compression: (\d+) \| numel after compression: (\d+) \|",
        out,
        re.MULTILINE,
    )
    assert evidence, out[-2000:]
    hook, approx_rank, start, hook_iters, before, after = evidence.groups()
    assert hook == "powerSGD_hook"  # the name DDP's own logging data records for the registered hook
    assert (int(approx_rank), int(start)) == (rank, start_iter)
    # One all-reduce per step, not per micro step: no_sync() held back the first of each 2.
    assert int(hook_iters) == train_iters
    compressed_steps = train_iters - start_iter
    assert int(before) == compressed_steps * TINY_PARAMS
    shape = GPT2Shape(hidden_size=64, num_layers=2, num_attention_heads=2, seq_length=32, vocab_size=128)
    assert int(after) == compressed_steps * powersgd_numel_after(shape, rank)
    assert int(after) < int(before) / 10

    log = tmp_path / "ddp-powersgd.out"
    log.write_text(out)
    from logstat.api import load_runs

    parsed = load_runs([log])
    run = parsed.runs.row(0, named=True)
    assert (run["family"], run["status"], run["iterations"]) == ("megatron", "ok", train_iters)
    assert (run["gpus"], run["dp"], run["tp"], run["pp"]) == (2, 2, 1, 1)
    assert (run["micro_batch_size"], run["gas"], run["global_batch_size"]) == (2, 2, 8)
    assert (run["seq_len"], run["hidden_size"], run["num_layers"], run["num_heads"]) == (32, 64, 2, 2)
    assert run["activation_checkpointing"] is True
    assert run["precision"] == "fp32"
    assert parsed.iterations["loss"].to_list() == [float(row[6]) for row in rows]


@pytest.mark.slow
def test_ddp_bf16_adamw_logs_one_averaged_line_per_interval():
    argv = ddp_argv(
        precision="bf16",
        optimizer="adamw",
        train_iters="4",
        log_interval="2",
        gradient_accumulation_steps="3",
        powersgd_rank="1",
        powersgd_start_iter="3",
    )
    result = torchrun("logstat.runners.entrypoints.ddp_powersgd", argv, timeout_s=120)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = ITERATION.findall(result.stdout)
    assert [(int(row[0]), int(row[2]), int(row[5])) for row in rows] == [(2, 24, 12), (4, 48, 12)]
    assert re.search(r"^  bf16 \.+ True$", result.stdout, re.MULTILINE)
    assert "hook iterations: 4 |" in result.stdout

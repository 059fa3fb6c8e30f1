"""`logstat estimate` through the real console entry point."""

import subprocess
import sys

SEED_52B = ["--model", "52B", "--gpus", "64", "--tp", "4", "--pp", "16", "--zero", "1", "--micro-batch", "4"]


def logstat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from logstat.cli import main; main()", *args], capture_output=True, text=True
    )


def test_estimate_of_the_seed_52b_benchmark():
    r = logstat("estimate", *SEED_52B, "--gas", "256", "--sec-per-iter", "129")
    assert r.returncode == 0, r.stderr
    assert "Parameters: 51.97B" in r.stdout
    assert "Pipeline efficiency: 94.5%" in r.stdout
    assert "TFLOPs per GPU: 52.8" in r.stdout
    assert "Days for 100B tokens: 142.4" in r.stdout
    assert r.stderr == ""


def test_estimate_applies_the_checks_of_run():
    """ZeRO 3 with PP > 1 is refused by `logstat run`; the estimate used to print it."""
    r = logstat("estimate", *SEED_52B, "--gas", "256", "--zero", "3")
    assert r.returncode == 1 and r.stdout == ""
    assert "train.zero_stage=3 with parallel.pp=16: ZeRO stages 2 and 3 do not work" in r.stderr


def test_estimate_of_a_spec_warns_as_run_does():
    # 1000 steps at the spec's assumed 46.7 TFLOPs/GPU take 40.5 h, over its 6 h limit
    r = logstat("estimate", "gpt2-52b-megatron-ds", "--set", "steps=1000")
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("warning: cluster.time_limit='06:00:00' (6.0 h) is shorter than the estimated")
    assert "Days for 100B tokens: 161.0" in r.stdout


def test_bad_input_is_one_line_on_stderr_and_exit_1():
    r = logstat("estimate", "--model", "53B", "--gpus", "64")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "Error: logstat estimate: --model 53B: no GPT-2 preset of size 53B; "
        "presets: 7, 14, 18, 25, 30, 39, 52, 65, 81, 97, 116, 136, 158, 181, 206"
    ]
    r = logstat("estimate", "--hidden", "4096", "--gpus", "8")
    assert r.returncode == 1 and "give both --hidden and --layers" in r.stderr


def test_help_has_an_example():
    r = logstat("estimate", "--help")
    assert r.returncode == 0 and "Example:" in r.stdout and "logstat estimate --model 52B" in r.stdout


def test_zero_3_without_a_spec_follows_the_stack_that_implements_it():
    # Megatron-DeepSpeed's pipeline engine refuses ZeRO 2 and 3; the estimate plans the HF ZeRO-3 stack
    r = logstat("estimate", "--hidden", "4096", "--layers", "30", "--gpus", "8", "--zero", "3")
    assert r.returncode == 0, r.stderr
    assert "| 3 (this run) |" in r.stdout
    refused = logstat("estimate", "--hidden", "4096", "--layers", "30", "--gpus", "8", "--zero", "3",
                      "--stack", "megatron-deepspeed")  # fmt: skip
    assert refused.returncode == 1
    assert (
        "train.zero_stage=3 is not implemented by stack megatron-deepspeed (stages: 0, 1)" in refused.stderr
    )

"""The HF Trainer + DeepSpeed entry point: flag and JSON checks, and real 2-process CPU runs at
ZeRO stages 1, 2 and 3 showing the Trainer's DeepSpeed engine and, at stage 3, sharded parameters."""

from __future__ import annotations

import ast
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from logstat.runners.entrypoints import hf_zero3
from logstat.runners.entrypoints.model import GPT2Shape, build_gpt2

from tests.runners.launch import cpu_env, flag_argv, torchrun

TINY_SHAPE = GPT2Shape(hidden_size=64, num_layers=2, num_attention_heads=2, seq_length=32, vocab_size=128)
# gpt2_params(h=64, l=2, v=128, s=32) by hand: 2*(12*64^2 + 13*64) + 128*64 + 32*64 + 2*64
TINY_PARAMS = 110336
MICRO, GAS, WORLD, STEPS = 2, 2, 2, 4


def ds_config(stage: int, **extra) -> dict:
    """A DeepSpeed JSON with explicit batch values, as the runner renders them."""
    return {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": GAS,
        "train_batch_size": MICRO * GAS * WORLD,
        "zero_optimization": {"stage": stage},
        **extra,
    }


def hf_argv(config_path: Path, output_dir: Path, **overrides: str) -> list[str]:
    """The flags H4a's renderer writes, for the tiny model; ``overrides`` replace values by flag name."""
    flags = {
        "--deepspeed": str(config_path),
        "--hidden-size": "64",
        "--num-layers": "2",
        "--num-heads": "2",
        "--seq-length": "32",
        "--vocab-size": "128",
        "--per-device-train-batch-size": str(MICRO),
        "--gradient-accumulation-steps": str(GAS),
        "--max-steps": str(STEPS),
        "--learning-rate": "1e-3",
        "--precision": "fp32",
        "--output-dir": str(output_dir),
        "--seed": "1234",
    }
    return flag_argv(flags, overrides)


# --- refusals name the flag and the rule -----------------------------------------------------


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        (ds_config(4), {}, "zero_optimization.stage=4 must be 0, 1, 2 or 3"),
        (
            {**ds_config(3), "train_micro_batch_size_per_gpu": 4},
            {},
            "train_micro_batch_size_per_gpu=4 in the JSON disagrees with --per-device-train-batch-size = 2",
        ),
        (
            {**ds_config(1), "train_batch_size": 16},
            {},
            "train_batch_size=16 in the JSON disagrees with --per-device-train-batch-size * "
            "--gradient-accumulation-steps * world size 2 = 8",
        ),
        (
            ds_config(2),
            {"precision": "bf16"},
            "bf16.enabled=False in the JSON disagrees with --precision bf16",
        ),
        (
            ds_config(2, fp16={"enabled": True}),
            {},
            "fp16.enabled=True in the JSON disagrees with --precision fp32",
        ),
        (ds_config(3), {"num_heads": "3"}, "--num-heads=3 must divide --hidden-size=64"),
        (ds_config(3), {"precision": "fp8"}, "argument --precision: invalid choice: 'fp8'"),
        (ds_config(3), {"max_steps": "0"}, "argument --max-steps: 0 must be >= 1"),
        (ds_config(3), {"logging_steps": "0"}, "argument --logging-steps: 0 must be >= 1"),
    ],
)
def test_bad_flags_and_json_are_refused_naming_them(
    config, overrides, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("WORLD_SIZE", str(WORLD))
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    with pytest.raises(SystemExit) as exit_info:
        hf_zero3.parse_config(hf_argv(path, tmp_path / "out", **overrides))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_specs_log_interval_is_the_trainers_logging_steps(tmp_path, monkeypatch):
    from logstat.runners.spec import load_spec
    from logstat.runners.stacks import get_stack

    spec = load_spec("gpt2-tiny-hf-zero3", ["train.log_interval=3"])
    program = get_stack("hf-zero3").program(spec, run_dir=tmp_path, ds_config_path=tmp_path / "ds.json")
    assert program[program.index("--logging-steps") + 1] == "3"
    monkeypatch.setenv("WORLD_SIZE", str(WORLD))
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds_config(3)))
    assert hf_zero3.parse_config(hf_argv(path, tmp_path / "out", logging_steps="3")).logging_steps == 3
    assert hf_zero3.parse_config(hf_argv(path, tmp_path / "out")).logging_steps == 1


def test_missing_or_broken_json_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        hf_zero3.parse_config(hf_argv(tmp_path / "absent.json", tmp_path / "out"))
    assert f"--deepspeed={tmp_path / 'absent.json'}: no such file" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text('{"zero_optimization": ')
    with pytest.raises(SystemExit):
        hf_zero3.parse_config(hf_argv(broken, tmp_path / "out"))
    assert f"--deepspeed={broken}: not valid JSON" in capsys.readouterr().err


def test_non_object_zero_section_and_file_as_output_dir_are_refused(tmp_path, capsys):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": 3}))
    with pytest.raises(SystemExit):
        hf_zero3.parse_config(hf_argv(path, tmp_path / "out"))
    assert f"--deepspeed={path}: zero_optimization must be an object, not 3" in capsys.readouterr().err
    path.write_text(json.dumps(ds_config(1)))
    a_file = tmp_path / "notes.txt"
    a_file.write_text("the user's")
    with pytest.raises(SystemExit):
        hf_zero3.parse_config(hf_argv(path, a_file))
    assert f"--output-dir={a_file}: exists and is not a directory" in capsys.readouterr().err
    assert a_file.read_text() == "the user's"


def test_auto_batch_values_and_stage_are_read_from_the_json(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}))
    config = hf_zero3.parse_config(hf_argv(path, tmp_path / "out"))
    assert config.zero_stage == 2
    assert config.shape == TINY_SHAPE


def test_unpartitioned_module_reports_whole_parameters():
    line = hf_zero3.partition_evidence(build_gpt2(TINY_SHAPE, seed=0), rank=0, stage=1)
    assert line.startswith(
        f"zero parameters | rank 0 | stage 1 | partitioned: False | parameters: 28 | full numel: {TINY_PARAMS} |"
        f" local numel: {TINY_PARAMS} |"
    )


@pytest.mark.slow
def test_fp16_on_cpu_is_refused_before_anything_starts(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds_config(1, fp16={"enabled": True})))
    argv = hf_argv(path, tmp_path / "out", precision="fp16")
    command = [sys.executable, "-m", "logstat.runners.entrypoints.hf_zero3", *argv]
    # One process, refused before the process group; WORLD_SIZE as the launcher would set it.
    env = {**cpu_env(), "WORLD_SIZE": str(WORLD)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1
    assert "--precision fp16: DeepSpeed's cpu accelerator does not support fp16; use bf16 or fp32 here" in (
        result.stderr
    )


# --- real runs, one per ZeRO stage -----------------------------------------------------------


def rendered_ds_config(stage: int) -> dict:
    """The DeepSpeed JSON the runner renders for the shipped tiny HF spec at ``stage``."""
    from logstat.runners.spec import load_spec
    from logstat.runners.stacks import get_stack

    spec = load_spec("gpt2-tiny-hf-zero3", [f"train.zero_stage={stage}"])
    config = get_stack("hf-zero3").deepspeed_config(spec)
    # The flags below are the tiny model's; the rendered batch must be the one they give.
    assert {key: config[key] for key in ds_config(stage) if key != "zero_optimization"} == {
        key: value for key, value in ds_config(stage).items() if key != "zero_optimization"
    }
    assert config["zero_optimization"]["stage"] == stage
    return config


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda stage: f"zero{stage}")
def hf_run(request, tmp_path_factory):
    """One real 2-process run at the stage: (stage, completed process, output dir, log path)."""
    stage = request.param
    workdir = tmp_path_factory.mktemp(f"hf-zero{stage}")
    config_path = workdir / "ds_config.json"
    config_path.write_text(json.dumps(rendered_ds_config(stage)))
    output_dir = workdir / "output"
    argv = hf_argv(config_path, output_dir) + ["--activation-checkpointing"]
    result = torchrun("logstat.runners.entrypoints.hf_zero3", argv, timeout_s=150)
    log = workdir / f"hf-zero{stage}.out"
    log.write_text(result.stdout + result.stderr)
    return stage, result, output_dir, log


def _dict_lines(stdout: str) -> list[dict]:
    return [ast.literal_eval(line) for line in stdout.splitlines() if line.startswith("{'")]


@pytest.mark.slow
def test_trainer_wraps_a_deepspeed_engine_at_the_json_stage(hf_run):
    stage, result, output_dir, _ = hf_run
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    engine = re.search(r"^deepspeed engine \| .*$", out, re.MULTILINE).group(0)
    assert (
        "trainer.model_wrapped: deepspeed.runtime.engine.DeepSpeedEngine | is DeepSpeedEngine: True |"
        in engine
    )
    assert (
        f"zero stage: {stage} | world size: 2 | train batch size: 8 | micro batch size per gpu: 2 |" in engine
    )
    assert "gradient accumulation steps: 2 |" in engine
    # DeepSpeed's own configuration dump (rank 0, INFO) says the same.
    assert re.search(rf"\[config\.py:\d+:print\]   zero_optimization_stage \.+ {stage}$", out, re.MULTILINE)
    assert re.search(r"\[config\.py:\d+:print\]   train_batch_size \.+ 8$", out, re.MULTILINE)

    logs = _dict_lines(out)
    steps = [entry for entry in logs if "loss" in entry]
    assert len(steps) == STEPS  # logging_steps=1, rank 0 only
    assert [float(entry["epoch"]) for entry in steps] == [0.25, 0.5, 0.75, 1.0]
    # A fresh GPT-2 predicts nearly uniformly: the first loss is ln(vocab), not (s-1)/s of it.
    assert abs(float(steps[0]["loss"]) - math.log(128)) < 0.05
    final = [entry for entry in logs if "train_runtime" in entry]
    assert len(final) == 1 and float(final[0]["train_samples_per_second"]) > 0
    assert "***** train metrics *****" in out
    assert not any(output_dir.iterdir())  # nothing saved: save_strategy="no"


@pytest.mark.slow
def test_parameters_are_sharded_across_ranks_only_at_stage_3(hf_run):
    stage, result, _, _ = hf_run
    assert result.returncode == 0, result.stderr[-3000:]
    lines = re.findall(
        r"^zero parameters \| rank (\d) \| stage (\d) \| partitioned: (\w+) \| parameters: (\d+) \|"
        r" full numel: (\d+) \| local numel: (\d+) \| transformer\.wte\.weight full: (\d+) local: (\d+) \|$",
        result.stdout,
        re.MULTILINE,
    )
    assert sorted(line[0] for line in lines) == ["0", "1"]  # one line per rank
    model = build_gpt2(TINY_SHAPE, seed=0)
    # ZeRO-3 gives each of the 2 ranks ceil(numel / 2) elements of every parameter.
    shard = sum(math.ceil(p.numel() / WORLD) for p in model.parameters())
    for _, line_stage, partitioned, count, full, local, wte_full, wte_local in lines:
        assert (int(line_stage), int(count), int(full), int(wte_full)) == (stage, 28, TINY_PARAMS, 128 * 64)
        if stage == 3:
            assert (partitioned, int(local), int(wte_local)) == ("True", shard, 128 * 64 // 2)
        else:
            assert (partitioned, int(local), int(wte_local)) == ("False", TINY_PARAMS, 128 * 64)


@pytest.mark.slow
def test_hf_log_parses_back(hf_run):
    stage, result, _, log = hf_run
    assert result.returncode == 0, result.stderr[-3000:]
    from logstat.api import load_runs

    parsed = load_runs([log])
    run = parsed.runs.row(0, named=True)
    assert (run["family"], run["status"], run["iterations"]) == ("hf-trainer", "ok", STEPS)
    assert (run["gpus"], run["dp"], run["micro_batch_size"], run["gas"]) == (WORLD, WORLD, MICRO, GAS)
    assert run["global_batch_size"] == MICRO * GAS * WORLD
    assert run["zero_stage"] == stage
    logged = [float(entry["loss"]) for entry in _dict_lines(result.stdout) if "loss" in entry]
    assert parsed.iterations["loss"].to_list() == logged

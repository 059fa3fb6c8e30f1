"""The rendered Megatron-DeepSpeed command against its argument parser's flag list
(fixtures/reference/megatron-deepspeed-flags.tsv, read from pretrain_gpt.py at a named commit)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from logstat.runners.render import render
from logstat.runners.spec import load_spec

FLAGS_TSV = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "megatron-deepspeed-flags.tsv"
SWITCHES = {"store_true", "store_false"}


@pytest.fixture(scope="module")
def flags() -> dict[str, str]:
    if not FLAGS_TSV.is_file():
        pytest.skip(f"flag list not found at {FLAGS_TSV}")
    table = {}
    for line in FLAGS_TSV.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flag, kind = line.split("\t", 1)
        table[flag] = kind
    return table


def value_ok(kind: str, value: str) -> bool:
    """Does ``value`` have the kind argparse declared (type, and choices when a literal list)?"""
    if " choices=" in kind:
        choices_text = kind.split(" choices=", 1)[1]
        try:
            choices = ast.literal_eval(choices_text)
        except (ValueError, SyntaxError):
            choices = None  # computed in the repository (e.g. GLU_ACTIVATIONS.keys()): kind only
        if choices is not None and value not in choices:
            return False
    base = kind.split()[0]
    try:
        if base == "int":
            int(value)
        elif base == "float":
            float(value)
    except ValueError:
        return False
    return not value.startswith("--")


def flag_pairs(arguments: list[str], flags: dict[str, str]) -> list[tuple[str, str | None]]:
    """(flag, value) pairs of a command line, values assigned by the flag list's kinds."""
    pairs, index = [], 0
    while index < len(arguments):
        flag = arguments[index]
        assert flag in flags, f"{flag} is not a flag of Megatron-DeepSpeed's pretrain_gpt.py"
        if flags[flag].split()[0] in SWITCHES:
            pairs.append((flag, None))
            index += 1
        else:
            assert index + 1 < len(arguments), f"{flag} needs a value"
            pairs.append((flag, arguments[index + 1]))
            index += 2
    return pairs


def megatron_run(tmp_path: Path, *overrides: str):
    spec = load_spec("gpt2-52b-megatron-ds", [f"megatron.dir={tmp_path / 'Megatron-DeepSpeed'}", *overrides])
    return render(spec, tmp_path / "run")


def test_the_flag_list_names_its_commit(flags):
    assert "8387ae17c4704f6579f88a84500b535d19d7fbbf" in FLAGS_TSV.read_text().splitlines()[1]
    assert flags["--micro-batch-size"] == "int" and flags["--fp16"] == "store_true"


@pytest.mark.parametrize("overrides", [(), ("parallel.pp=8", "batch.global_batch=none", "batch.gas=64")])
def test_52b_command_uses_only_known_flags_with_values_of_their_kind(flags, tmp_path, overrides):
    run = megatron_run(tmp_path, *overrides)
    script, *arguments = run.program
    assert script == str(tmp_path / "Megatron-DeepSpeed" / "pretrain_gpt.py")
    pairs = flag_pairs(arguments, flags)
    names = [flag for flag, _ in pairs]
    assert len(names) == len(set(names)), "a flag is given twice"
    for flag, value in pairs:
        if value is not None:
            assert value_ok(flags[flag], value), f"{flag} {value!r} is not of kind {flags[flag]!r}"
    for required in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
                     "--global-batch-size", "--deepspeed", "--deepspeed_config", "--fp16", "--checkpoint-activations"):  # fmt: skip
        assert required in names


@pytest.mark.parametrize(
    ("overrides", "expected_dp", "expected_gas"),
    [((), 1, 256), (("parallel.pp=8", "batch.global_batch=none", "batch.gas=64"), 2, 64)],
)
def test_batch_arithmetic_agrees_with_what_megatron_derives(
    flags, tmp_path, overrides, expected_dp, expected_gas
):
    run = megatron_run(tmp_path, *overrides)
    args = dict(flag_pairs(list(run.program[1:]), flags))
    launcher = run.launcher_argv(node_rank=0, master_addr="node-1")
    world = int(launcher[launcher.index("--nnodes") + 1]) * int(
        launcher[launcher.index("--nproc_per_node") + 1]
    )
    tp, pp = int(args["--tensor-model-parallel-size"]), int(args["--pipeline-model-parallel-size"])
    micro, global_batch = int(args["--micro-batch-size"]), int(args["--global-batch-size"])
    # megatron/initialize + microbatches: DP = world / (TP*PP); gas = global / (micro * DP), exactly.
    assert world % (tp * pp) == 0
    dp = world // (tp * pp)
    assert global_batch % (micro * dp) == 0
    gas = global_batch // (micro * dp)
    assert (dp, gas) == (expected_dp, expected_gas)
    # The DeepSpeed JSON says the same three numbers (DeepSpeed asserts train = micro * gas * DP).
    config = run.deepspeed_config
    assert config["train_batch_size"] == global_batch == micro * gas * dp
    assert config["train_micro_batch_size_per_gpu"] == micro
    assert config["gradient_accumulation_steps"] == gas
    assert args["--deepspeed_config"] == str(run.ds_config_path)
    assert int(args["--num-layers"]) % pp == 0 and int(args["--num-attention-heads"]) % tp == 0

"""Rendering: sbatch scripts pass bash -n and shellcheck, counts come from one field, values are
quoted so that hostile strings are inert when the script really runs under bash."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logstat.runners.render import _continued, render, sbatch_header
from logstat.runners.spec import SPECS_DIR, SpecError, load_spec

SHIPPED = sorted(p.stem for p in SPECS_DIR.glob("*.toml"))
# $(...), backticks, both quotes, a backslash, a glob and a variable: all must stay literal.
HOSTILE = "x$(touch PWNED_dollar)`touch PWNED_tick`'\"\\*$HOME;touch PWNED_semi"


def rendered(name: str, tmp_path: Path, *overrides: str, **render_args):
    return render(load_spec(name, overrides), tmp_path / "run", **render_args)


@pytest.mark.parametrize("name", SHIPPED)
def test_rendered_scripts_pass_bash_n(name, tmp_path):
    script = tmp_path / "run.sbatch"
    script.write_text(rendered(name, tmp_path).sbatch_script)
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", SHIPPED)
def test_rendered_scripts_pass_shellcheck(name, tmp_path, shellcheck):
    script = tmp_path / "run.sbatch"
    script.write_text(rendered(name, tmp_path, f"cluster.job_name={HOSTILE}").sbatch_script)
    done = subprocess.run([shellcheck, "--shell=bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


def test_node_count_comes_from_one_field(tmp_path):
    text = rendered(
        "gpt2-52b-megatron-ds", tmp_path, "cluster.nodes=8", "batch.global_batch=none"
    ).sbatch_script
    assert "#SBATCH --nodes=8\n" in text
    assert "    --nnodes 8 \\\n" in text
    assert "    --nproc_per_node 4 \\\n" in text
    assert "#SBATCH --ntasks-per-node=1\n" in text and "#SBATCH --gres=gpu:4\n" in text


def test_srun_asks_for_the_cpus_again(tmp_path):
    # sbatch(1), Slurm 22.05: "srun will not inherit the --cpus-per-task value requested by salloc or sbatch"
    text = rendered("gpt2-52b-megatron-ds", tmp_path).sbatch_script
    assert "#SBATCH --cpus-per-task=40\n" in text
    assert "srun --ntasks-per-node=1 --cpus-per-task=40 --kill-on-bad-exit=1 bash -c" in text
    tiny = rendered("gpt2-tiny-ddp-powersgd", tmp_path).sbatch_script
    assert "srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c" in tiny and "cpus-per-task" not in tiny


def test_a_negative_value_stays_on_its_flags_line():
    assert _continued(["--x", "-1", "--y", "-0.5", "-n", "--z", "-2e-3"]) == [
        "    --x -1 \\",
        "    --y -0.5 \\",
        "    -n \\",
        "    --z -2e-3",
    ]


def test_cpu_spec_requests_no_gpus_and_sets_the_deepspeed_accelerator(tmp_path):
    run = rendered("gpt2-tiny-hf-zero3", tmp_path)
    assert "--gres" not in run.sbatch_script
    assert run.env == {"DS_ACCELERATOR": "cpu"}
    assert "export DS_ACCELERATOR=cpu\n" in run.sbatch_script


def test_only_node_rank_and_master_are_left_to_the_shell(tmp_path):
    text = rendered("gpt2-52b-megatron-ds", tmp_path).sbatch_script
    body = [line for line in text.splitlines() if not line.startswith("#")]
    variables = {word for line in body for word in line.replace('"', " ").split() if word.startswith("$")}
    assert variables == {"$SLURM_JOB_NODELIST", "$SLURM_PROCID", "$MASTER_ADDR", "$0", "$@", "$(scontrol"}
    assert (
        "--hidden-size 8192" in text and "--micro-batch-size 4" in text and "--global-batch-size 1024" in text
    )


@pytest.mark.parametrize("name", ["gpt2-52b-megatron-ds", "gpt2-52b-hf-zero3", "gpt2-tiny-hf-zero3"])
def test_deepspeed_json_has_explicit_consistent_batch_values(name, tmp_path):
    run = rendered(name, tmp_path)
    spec, config = run.spec, run.deepspeed_config
    assert config["train_micro_batch_size_per_gpu"] == spec.batch.micro
    assert config["gradient_accumulation_steps"] == spec.batch.gas
    # DeepSpeed asserts train_batch_size == micro * gas * DP (DP = world / (TP*PP)).
    assert config["train_batch_size"] == spec.batch.micro * spec.batch.gas * spec.world_size // (
        spec.parallel.tp * spec.parallel.pp
    )
    assert config["zero_optimization"]["stage"] == spec.train.zero_stage
    assert str(run.ds_config_path) in run.program
    assert "auto" not in json.dumps(config)


def test_ddp_has_no_deepspeed_json(tmp_path):
    run = rendered("gpt2-tiny-ddp-powersgd", tmp_path)
    assert run.deepspeed_config is None and "ds_config.json" not in run.sbatch_script


@pytest.mark.slow  # imports torch and transformers (~10 s on a busy 2-core machine)
@pytest.mark.parametrize(
    ("name", "module"),
    [("gpt2-tiny-hf-zero3", "hf_zero3"), ("gpt2-tiny-ddp-powersgd", "ddp_powersgd")],
)
def test_entry_point_parsers_accept_the_rendered_arguments(name, module, tmp_path):
    run = rendered(name, tmp_path)
    assert run.program[:2] == ("-m", f"logstat.runners.entrypoints.{module}")
    parser = importlib.import_module(f"logstat.runners.entrypoints.{module}").build_parser()
    args = vars(parser.parse_args(list(run.program[2:])))
    spec = run.spec
    if module == "hf_zero3":
        assert args["per_device_train_batch_size"] == spec.batch.micro and args["max_steps"] == spec.steps
    else:
        assert args["micro_batch_size"] == spec.batch.micro and args["train_iters"] == spec.steps
        assert args["powersgd_rank"] == spec.ddp.powersgd_rank and args["optimizer"] == "adafactor"
    assert args["gradient_accumulation_steps"] == spec.batch.gas
    assert args.get("activation_checkpointing", args.get("checkpoint_activations")) is True


def test_newline_in_an_sbatch_value_is_refused_by_the_renderer(tmp_path):
    spec = load_spec("gpt2-tiny-hf-zero3")
    spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, job_name="a\ntouch PWNED"))
    with pytest.raises(SpecError, match=r"cluster.job_name='a\\ntouch PWNED' contains a control character"):
        render(spec, tmp_path / "run")
    with pytest.raises(SpecError, match="contains a control character"):
        sbatch_header(dataclasses.replace(render(load_spec("gpt2-tiny-hf-zero3"), tmp_path / "a\nb")))


SHIMS = {
    # Slurm's tools, for running the script outside an allocation: one node named node-1, and
    # srun running the single task here with SLURM_PROCID=0.
    "scontrol": '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && echo node-1\n',
    "srun": '#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nSLURM_PROCID=0 exec "$@"\n',
    # The "python" the script runs records its arguments, NUL-separated, and does nothing else.
    "record-argv": '#!/bin/bash\nprintf "%s\\0" "$@" > "$ARGV_FILE"\n',
}


def install_shims(directory: Path) -> Path:
    """``SHIMS`` as executables in a new ``directory``, to put first on PATH."""
    directory.mkdir()
    for name, text in SHIMS.items():
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)
    return directory


def test_hostile_values_are_inert_when_the_script_runs(tmp_path):
    """Job name, checkout path, data path and run directory full of shell syntax (the paths also
    with a newline) reach the program as exact literal arguments, and no payload runs."""
    hostile_dir = tmp_path / f"checkout {HOSTILE}\nline2"
    run_dir = tmp_path / f"runs {HOSTILE}" / "run"
    run_dir.mkdir(parents=True)
    shims = install_shims(tmp_path / "shims")
    spec = load_spec(
        "gpt2-tiny-megatron-ds",
        [f"cluster.job_name={HOSTILE}", f"megatron.dir={hostile_dir}", f"megatron.data_path={HOSTILE}\n2"],
    )
    run = render(spec, run_dir, python=str(shims / "record-argv"))
    script = tmp_path / "run.sbatch"
    script.write_text(run.sbatch_script)
    argv_file = tmp_path / "argv.bin"
    env = {
        "PATH": f"{shims}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "node-1",
        "ARGV_FILE": str(argv_file),
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        ["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    received = argv_file.read_bytes().decode().split("\0")[:-1]
    expected = ["-u", "-m", "torch.distributed.run", "--node_rank", "0", "--master_addr", "node-1"]
    expected += ["--nproc_per_node", "2", "--nnodes", "1", "--master_port", "6000", *run.program]
    assert received == expected
    assert received[expected.index("--data-path") + 1] == f"{HOSTILE}\n2"
    assert run.program[0] == f"{hostile_dir}/pretrain_gpt.py"
    assert (
        f"#SBATCH --job-name='{HOSTILE.replace(chr(39), chr(39) + chr(34) + chr(39) + chr(34) + chr(39))}'"
        in (run.sbatch_script)
    )
    assert list(tmp_path.rglob("PWNED*")) == [] and not list(Path.cwd().glob("PWNED*"))


def test_percent_in_the_run_directory_is_escaped_for_sbatch(tmp_path):
    run = render(load_spec("gpt2-tiny-hf-zero3"), tmp_path / "100%j" / "run")
    assert f"#SBATCH --output={tmp_path}/100%%j/run/slurm-%j.out\n" in run.sbatch_script
    assert run.slurm_log_path("17") == tmp_path / "100%j" / "run" / "slurm-17.out"


# Any text a spec can carry (no NUL: validation refuses it; no lone surrogates: not encodable).
ANY_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=30
)
# What may reach #SBATCH lines and directory names: no control characters (refused there), no "/".
LINE_TEXT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"), min_size=1, max_size=30
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job_name=LINE_TEXT, directory=LINE_TEXT.filter(lambda t: t not in {".", ".."}), data_path=ANY_TEXT)
def test_any_value_reaches_the_program_literally(tmp_path_factory, job_name, directory, data_path):
    """Property: whatever job name, directory name and data path (newlines included) a spec holds,
    the script passes bash -n and, run, hands the program exactly those strings."""
    base = tmp_path_factory.mktemp("quoting")
    run_dir = base / directory / "run"
    run_dir.mkdir(parents=True)
    shims = install_shims(base / "shims")
    spec = load_spec("gpt2-tiny-megatron-ds")
    spec = dataclasses.replace(
        spec,
        cluster=dataclasses.replace(spec.cluster, job_name=job_name),
        megatron=dataclasses.replace(spec.megatron, dir=str(base / directory), data_path=data_path),
    )
    run = render(spec, run_dir, python=str(shims / "record-argv"))
    script = base / "run.sbatch"
    script.write_text(run.sbatch_script)
    env = {"PATH": f"{shims}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node-1", "ARGV_FILE": str(base / "argv")}
    done = subprocess.run(["bash", str(script)], cwd=base, env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    received = (base / "argv").read_bytes().decode().split("\0")[:-1]
    assert received[received.index("--data-path") + 1] == data_path
    assert received[13] == f"{base / directory}/pretrain_gpt.py"
    assert received[14:] == list(run.program[1:])
    assert sorted(p.name for p in base.iterdir()) == sorted(["argv", "run.sbatch", "shims", directory])

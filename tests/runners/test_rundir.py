"""Run directories and manifests: created once, never overwritten, atomic writes, facts recorded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tomllib
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import pytest
from logstat.runners.manifest import build_manifest, read_manifest, update_manifest
from logstat.runners.render import render
from logstat.runners.rundir import atomic_write_text, create_run_dir, open_new_log, run_dir_path
from logstat.runners.spec import load_spec, spec_from_dict

from logstat.errors import LogstatError

REPO = Path(__file__).resolve().parents[2]


def make_run(tmp_path: Path, name: str = "gpt2-tiny-hf-zero3"):
    spec = load_spec(name)
    return render(spec, run_dir_path(tmp_path / "runs", spec.name))


def test_run_dir_path_is_spec_name_then_utc_time_and_short_id(tmp_path):
    now = datetime(2026, 11, 21, 23, 5, 9, tzinfo=UTC)
    path = run_dir_path(tmp_path / "runs", "gpt2-tiny-hf-zero3", now=now, short_id="a1b2c3")
    assert path == tmp_path / "runs" / "gpt2-tiny-hf-zero3" / "20261121T230509Z-a1b2c3"
    assert run_dir_path(tmp_path, "x") != run_dir_path(tmp_path, "x")  # a fresh id each time


def test_manifest_records_the_launch_environment_but_never_a_credential(tmp_path, monkeypatch):
    setting = {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "ib0",
        "OMP_NUM_THREADS": "4",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "DS_ACCELERATOR": "cpu",
        "MASTER_ADDR": "node7",
        "MASTER_PORT": "29500",
        "PYTHONHASHSEED": "0",
    }
    credentials = {"HF_TOKEN": "hf_x", "DS_API_Key": "k", "NCCL_SECRET": "s", "TORCH_PASSWORD_FILE": "p"}
    for name, value in {**setting, **credentials, "EDITOR": "vi"}.items():
        monkeypatch.setenv(name, value)
    run = make_run(tmp_path)
    create_run_dir(run, build_manifest(run, backend="local", command=["echo"]))
    recorded = read_manifest(run.run_dir)["launch_environment"]
    assert {name: recorded.get(name) for name in setting} == setting
    assert not set(credentials) & set(recorded) and "EDITOR" not in recorded
    text = run.manifest_path.read_text()
    assert "hf_x" not in text and "TOKEN" not in text


def test_create_run_dir_writes_spec_script_config_and_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_NNODES", "1")
    run = make_run(tmp_path)
    manifest = build_manifest(run, backend="local", command=["echo", "hi"])
    create_run_dir(run, manifest)
    assert sorted(p.name for p in run.run_dir.iterdir()) == [
        "ds_config.json",
        "manifest.json",
        "run.sbatch",
        "spec.toml",
    ]
    assert spec_from_dict(tomllib.loads(run.spec_path.read_text())) == run.spec
    assert run.script_path.read_text() == run.sbatch_script and os.access(run.script_path, os.X_OK)
    assert json.loads(run.ds_config_path.read_text()) == run.deepspeed_config

    written = read_manifest(run.run_dir)
    assert written["spec"]["batch"] == {"micro": 2, "gas": 2, "global_batch": 8}
    assert written["spec"]["train"]["zero_stage"] == 3
    assert written["command"] == ["echo", "hi"] and written["backend"] == "local"
    assert written["slurm_job_id"] == "4242"
    assert written["slurm"] == {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "1"}
    assert written["host"]["hostname"] == socket.gethostname()
    assert written["packages"]["torch"] == metadata.version("torch")
    assert written["packages"]["deepspeed"] == metadata.version("deepspeed")
    revision = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert written["git"]["logstat"]["revision"] == revision.stdout.strip()
    assert isinstance(written["git"]["logstat"]["dirty"], bool)
    assert written["world_size"] == 2 and written["dp"] == 2


def test_an_existing_run_dir_is_never_reused(tmp_path):
    run = make_run(tmp_path)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "train.log").write_text("precious")
    with pytest.raises(LogstatError, match="exists: runs are never overwritten"):
        create_run_dir(run, {"spec": {}})
    assert [p.name for p in run.run_dir.iterdir()] == ["train.log"]
    assert (run.run_dir / "train.log").read_text() == "precious"


def test_atomic_write_refuses_an_existing_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("user's")
    with pytest.raises(LogstatError, match="exists: logstat never overwrites a file"):
        atomic_write_text(target, "new")
    assert target.read_text() == "user's"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_atomic_write_replace_is_for_logstats_own_files(tmp_path):
    target = tmp_path / "manifest.json"
    atomic_write_text(target, "one")
    atomic_write_text(target, "two", replace=True)
    assert target.read_text() == "two" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_update_manifest_adds_the_job_id_and_keeps_the_rest(tmp_path):
    run = make_run(tmp_path)
    create_run_dir(run, build_manifest(run, backend="slurm", command=["sbatch", "--parsable", "run.sbatch"]))
    before = read_manifest(run.run_dir)
    after = update_manifest(run.run_dir, slurm_job_id="17")
    assert after == {**before, "slurm_job_id": "17"} == read_manifest(run.run_dir)
    assert not [p for p in run.run_dir.iterdir() if p.name.startswith(".")]


def test_a_log_is_never_truncated(tmp_path):
    log = tmp_path / "train.log"
    with open_new_log(log) as handle:
        handle.write("step 1\n")
    with pytest.raises(LogstatError, match="exists: logstat never overwrites a log"):
        open_new_log(log)
    assert log.read_text() == "step 1\n"


def test_unreadable_manifest_is_an_error_not_a_crash(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(LogstatError, match="cannot read manifest"):
        read_manifest(tmp_path)


def test_a_file_where_the_runs_directory_goes_is_named(tmp_path):
    (tmp_path / "gpt2-tiny-ddp-powersgd").write_text("keep")
    run = render(load_spec("gpt2-tiny-ddp-powersgd"), run_dir_path(tmp_path, "gpt2-tiny-ddp-powersgd"))
    with pytest.raises(
        LogstatError, match=r"gpt2-tiny-ddp-powersgd is a file, where the directory of .* goes"
    ):
        create_run_dir(run, {})
    assert (tmp_path / "gpt2-tiny-ddp-powersgd").read_text() == "keep"

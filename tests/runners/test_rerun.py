"""`logstat rerun`: a run named by its directory or by spec name and id (as table Notes name it) is
launched again from its saved spec, with validated overrides, into a new run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from logstat.runners.manifest import build_manifest
from logstat.runners.render import render
from logstat.runners.rerun import find_run
from logstat.runners.rundir import create_run_dir, run_dir_path
from logstat.runners.spec import load_spec

from logstat.errors import LogstatError

LOGSTAT = Path(sys.executable).parent / "logstat"
WHEN = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def made_run(runs: Path, spec_name: str, short_id: str, *overrides: str) -> Path:
    """A run directory as `logstat run` creates it (spec, script, manifest), without training."""
    spec = load_spec(spec_name, overrides)
    run = render(spec, run_dir_path(runs, spec.name, now=WHEN, short_id=short_id))
    create_run_dir(run, build_manifest(run, backend="local", command=["true"]))
    return run.run_dir


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    made_run(root, "gpt2-tiny-ddp-powersgd", "1a2b3c")
    made_run(root, "gpt2-tiny-ddp-powersgd", "d4e5f6")
    made_run(root, "gpt2-tiny-hf-zero3", "1a2b3c")
    return root


@pytest.mark.parametrize(
    "reference",
    [
        "gpt2-tiny-ddp-powersgd 20260101T120000Z-1a2b3c",
        "gpt2-tiny-ddp-powersgd 1a2b3c",
        "gpt2-tiny-ddp-powersgd/20260101T120000Z-1a2b3c/train.log",
        "gpt2-tiny-ddp-powersgd-1a2b3c",
        "| 2 | 0.00B | 1 | 2 | 2 | 8 | 0.1s | 0.0 | gpt2-tiny-ddp-powersgd 20260101T120000Z-1a2b3c (failed) |",
    ],
)
def test_a_run_named_by_spec_name_and_id(runs, reference):
    assert find_run(reference, runs) == runs / "gpt2-tiny-ddp-powersgd" / "20260101T120000Z-1a2b3c"


def test_a_run_directory_or_a_file_in_it(runs):
    run_dir = runs / "gpt2-tiny-hf-zero3" / "20260101T120000Z-1a2b3c"
    assert find_run(str(run_dir), runs) == run_dir
    assert find_run(str(run_dir / "manifest.json"), runs) == run_dir


def test_an_id_alone_names_a_run_only_when_one_run_has_it(runs):
    assert find_run("d4e5f6", runs) == runs / "gpt2-tiny-ddp-powersgd" / "20260101T120000Z-d4e5f6"
    with pytest.raises(
        LogstatError, match=r"'1a2b3c' matches 2 runs under .*/runs/: gpt2-tiny-ddp-powersgd/"
    ):
        find_run("1a2b3c", runs)


def test_nothing_matching_is_refused(runs, tmp_path):
    with pytest.raises(LogstatError, match=r"no run under .*runs/ matches 'gpt2-tiny-hf-zero3 d4e5f6'"):
        find_run("gpt2-tiny-hf-zero3 d4e5f6", runs)
    with pytest.raises(LogstatError, match="not a run directory"):
        find_run(str(tmp_path), runs)


def logstat(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(LOGSTAT), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, stdin=subprocess.DEVNULL)  # fmt: skip


def test_rerun_dry_run_plans_the_saved_spec_with_the_overrides(runs):
    done = logstat("rerun", "gpt2-tiny-ddp-powersgd 1a2b3c", "--set", "steps=3", "--dry-run", cwd=runs.parent)
    assert done.returncode == 0, done.stderr
    assert "\nsteps = 3\n" in done.stdout and "--train-iters 3" in done.stdout
    assert "rerun of " + str(runs / "gpt2-tiny-ddp-powersgd" / "20260101T120000Z-1a2b3c") in done.stderr
    assert len(list(runs.glob("*/*"))) == 3  # nothing created


def test_rerun_overrides_are_validated_like_run(runs):
    done = logstat(
        "rerun", "gpt2-tiny-ddp-powersgd d4e5f6", "--set", "ddp.powersgd_start_iter=1", cwd=runs.parent
    )
    assert done.returncode == 1 and done.stdout == ""
    assert "ddp.powersgd_start_iter=1 must be >= 2" in done.stderr
    assert len(list(runs.glob("*/*"))) == 3


@pytest.mark.slow
def test_a_real_run_rerun_with_fewer_steps_into_a_new_directory(tmp_path):
    from logstat.api import load_runs

    first = logstat("run", "gpt2-tiny-ddp-powersgd", "--backend", "local", cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    original = Path(first.stdout.strip().splitlines()[-1])
    before = {p.name: p.read_bytes() for p in original.iterdir()}
    reference = f"gpt2-tiny-ddp-powersgd {original.name}"
    again = logstat("rerun", reference, "--set", "steps=3", cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    new = Path(again.stdout.strip().splitlines()[-1])
    assert new.parent == original.parent and new != original
    assert {p.name: p.read_bytes() for p in original.iterdir()} == before  # nothing overwritten
    manifest = json.loads((new / "manifest.json").read_text())
    assert manifest["reruns"] == {"run_dir": str(original), "spec_name": "gpt2-tiny-ddp-powersgd",
                                  "run_id": original.name}  # fmt: skip
    assert manifest["backend"] == "local" and manifest["spec"]["steps"] == 3 and manifest["exit_code"] == 0
    assert load_runs([new]).runs.row(0, named=True)["iterations"] == 3


def test_a_rerun_derives_again_what_its_set_changes_the_inputs_of(runs):
    done = logstat(
        "rerun", "gpt2-tiny-ddp-powersgd d4e5f6", "--set", "batch.micro=4", "--dry-run", cwd=runs.parent
    )
    assert done.returncode == 0, done.stderr
    assert "batch.global_batch is derived again: the --set changes what it was derived from" in done.stderr
    assert "global batch 16 = micro 4 x gas 2 x DP 2" in done.stdout
    kept = logstat("rerun", "gpt2-tiny-ddp-powersgd d4e5f6", "--set", "batch.micro=4", "--set",
                   "batch.global_batch=8", "--dry-run", cwd=runs.parent)  # fmt: skip
    assert "batch.global_batch=8 != batch.micro*batch.gas*DP = 4*2*2 = 16" in kept.stderr


def test_a_rerun_of_a_preset_run_takes_the_new_presets_shape(tmp_path):
    run_dir = made_run(tmp_path / "runs", "gpt2-52b-hf-zero3", "aaaaaa")
    done = logstat("rerun", str(run_dir), "--set", "model.preset=7", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (
        "model.hidden_size is derived again" in done.stderr
        and "model.num_layers is derived again" in done.stderr
    )
    assert "--hidden-size 4096" in done.stdout


def test_a_spec_edited_since_the_run_is_refused(runs):
    run_dir = runs / "gpt2-tiny-ddp-powersgd" / "20260101T120000Z-1a2b3c"
    spec = run_dir / "spec.toml"
    spec.write_text(spec.read_text().replace("lr = 0.001", "lr = 0.5"))
    done = logstat("rerun", str(run_dir), "--dry-run", cwd=runs.parent)
    assert done.returncode == 1 and done.stdout == ""
    assert (
        f"{spec} was edited since the run (train.lr 0.001 -> 0.5): a rerun launches what ran" in done.stderr
    )

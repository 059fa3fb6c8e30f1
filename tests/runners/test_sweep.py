"""`logstat sweep` without training: grid parsing, pruning rules, the plan, the sweep directory,
the job array script (run under bash), status of a local sweep, and the table of a sweep whose
run directories hold real logs (fixtures/megatron, fixtures/failures)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from logstat.runners import sweep as sweeps
from logstat.runners.manifest import read_manifest
from logstat.runners.spec import SpecError, load_spec

from logstat.errors import LogstatError
from tests.runners.launch import free_ports

LOGSTAT = Path(sys.executable).parent / "logstat"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GIB = 2**30


def logstat(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LOGSTAT), *args], cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def gpt2_52b_params() -> int:
    """Seed 001's size formula by hand for the 52B preset (h 8192, l 64, vocab 50257, seq 1024)."""
    h, layers, vocab, seq = 8192, 64, 50257, 1024
    return layers * (12 * h * h + 13 * h) + vocab * h + seq * h + 2 * h


#: TP 1/4 x PP chunks 32/256 x PP 16/32 of the 52B spec (64 V100-32GB): every pruning rule appears.
GRID = ("parallel.tp=1,4", "batch.gas=32,256", "parallel.pp=16,32")
DERIVED_GLOBAL = ("batch.global_batch=none",)


def plan_52b(**kwargs) -> sweeps.SweepPlan:
    axes = [sweeps.parse_axis(text) for text in GRID]
    return sweeps.plan_sweep("gpt2-52b-megatron-ds", axes, overrides=DERIVED_GLOBAL, **kwargs)


def test_each_point_is_kept_or_pruned_by_the_first_rule_it_breaks():
    plan = plan_52b()
    got = [(dict(p.settings), p.rule, p.task) for p in plan.points]
    params = gpt2_52b_params()
    # Point 0 (TP 1, PP 16): 16 bytes per parameter over TP*PP = 16 ranks, ZeRO 0 -> 48.4 GiB > 32 GiB.
    assert params * 16 / 16 / GIB > 32 > params * 16 / 32 / GIB
    expected_rules = [
        sweeps.RULE_MEMORY,  # tp1 gas32 pp16
        sweeps.RULE_PIPELINE,  # tp1 gas32 pp32: 32/63 = 50.8%
        sweeps.RULE_MEMORY,  # tp1 gas256 pp16
        None,  # tp1 gas256 pp32: 256/287 = 89.2%, 24.2 GiB
        sweeps.RULE_PIPELINE,  # tp4 gas32 pp16: 32/47 = 68.1%
        sweeps.RULE_REFUSED,  # tp4 pp32: 128 GPUs > 64
        None,  # tp4 gas256 pp16: the seed's run
        sweeps.RULE_REFUSED,
    ]
    assert [rule for _, rule, _ in got] == expected_rules
    assert [task for _, _, task in got] == [None, None, None, 0, None, None, 1, None]
    assert got[0][0] == {"parallel.tp": "1", "batch.gas": "32", "parallel.pp": "16"}
    reasons = {p.index: p.reason for p in plan.pruned}
    assert f"{params * 16 / 16 / GIB:.1f} GiB per GPU" in reasons[0]
    assert "V100-SXM2-32GB's 32 GiB" in reasons[0]
    assert f"= {32 / 63:.1%} < 80%" in reasons[1]
    assert f"= {32 / 47:.1%} < 80%" in reasons[4]
    assert "does not divide the world size" in reasons[5] and "tp=4 * pp=32" in reasons[5]
    kept = plan.kept
    assert [(p.spec.parallel.tp, p.spec.parallel.pp, p.spec.dp, p.spec.batch.global_batch) for p in kept] == [
        (1, 32, 2, 4 * 256 * 2),
        (4, 16, 1, 4 * 256 * 1),
    ]


def test_the_pipeline_floor_is_a_setting():
    assert [p.rule for p in plan_52b(min_pipeline_efficiency=0.5).points][1] is None  # 50.8% >= 50%
    assert [p.rule for p in plan_52b(min_pipeline_efficiency=0.9).points][3] == sweeps.RULE_PIPELINE  # 89.2%


def test_the_plan_lists_every_point_with_its_task_and_rule():
    text = sweeps.format_plan(plan_52b())
    assert text.startswith(
        "# sweep gpt2-52b-megatron-ds (megatron-deepspeed): 2 x 2 x 2 = 8 points, 2 kept, 6 pruned\n"
    )
    lines = [line for line in text.splitlines() if re.match(r"\s*\d+\s", line)]
    rows = [line.split() for line in lines]
    assert [row[:5] for row in rows] == [
        [str(i), task, tp, gas, pp]
        for i, (task, tp, gas, pp) in enumerate(
            [("-", "1", "32", "16"), ("-", "1", "32", "32"), ("-", "1", "256", "16"), ("0", "1", "256", "32")]
            + [
                ("-", "4", "32", "16"),
                ("-", "4", "32", "32"),
                ("1", "4", "256", "16"),
                ("-", "4", "256", "32"),
            ]
        )
    ]
    assert "  pruned (memory): model states 48.4 GiB per GPU" in lines[0] and rows[6][-1] == "kept"
    # the seed's run: 52B on 64 GPUs at the assumed 46.7 TFLOPs/GPU -> 146 s per iteration of 1024
    seconds = gpt2_52b_params() / 1e9 * 4 * 2 * 1024 * 1024 / (46.7 * 64 * 1e3)
    assert rows[6][-2] == f"{seconds:.0f}" == "146"


def test_grid_values_are_typed_by_the_field_and_errors_name_the_grid():
    assert sweeps.parse_axis("train.activation_checkpointing=true,false").values == ("true", "false")
    for text, message in [
        ("batch.micor=1,2", "--grid batch.micor: unknown field 'micor'"),
        ("batch.micro=1,two", "--grid batch.micro='two': batch.micro must be an integer"),
        ("batch.micro=1,1", "--grid batch.micro: value '1' is listed twice"),
        ("batch.micro=1,01", "--grid batch.micro: value '01' is listed twice (as '1')"),
        (
            "train.activation_checkpointing=true,yes",
            "--grid train.activation_checkpointing: value 'yes' is listed twice (as 'true')",
        ),
        ("batch.micro=1,,2", "--grid batch.micro: empty value"),
        ("batch.micro", "must look like section.field=value1,value2"),
    ]:
        with pytest.raises(SpecError, match=re.escape(message)):
            sweeps.parse_axis(text)


def test_a_field_in_both_set_and_grid_is_refused():
    with pytest.raises(LogstatError, match="batch.micro is both a --set and a --grid field"):
        sweeps.plan_sweep(
            "gpt2-tiny-ddp-powersgd", [sweeps.parse_axis("batch.micro=1,2")], overrides=["batch.micro=4"]
        )
    with pytest.raises(LogstatError, match="at least one --grid"):
        sweeps.plan_sweep("gpt2-tiny-ddp-powersgd", [])


def test_a_slurm_sweep_past_the_last_port_is_refused_before_anything_is_made(tmp_path):
    plan = sweeps.plan_sweep(
        "gpt2-tiny-ddp-powersgd",
        [sweeps.parse_axis("batch.micro=1,2,3,4")],
        overrides=["cluster.master_port=65534"],
    )
    with pytest.raises(LogstatError) as refused:
        sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    assert str(refused.value) == (
        "cluster.master_port=65534 + task 2 = 65536 is not a TCP port (1-65535): under Slurm each point of a "
        "sweep listens on cluster.master_port + its task id; set cluster.master_port to at most 65532"
    )
    assert list(tmp_path.iterdir()) == []
    _, runs = sweeps.create_sweep(
        plan, backend="local", runs_root=tmp_path
    )  # no offsets: one point at a time
    assert {run.spec.cluster.master_port for run in runs} == {65534}


def test_array_ranges():
    assert sweeps.array_ranges([0, 1, 2, 3]) == "0-3"
    assert sweeps.array_ranges([7, 0, 1, 4, 5]) == "0-1,4-5,7"
    assert sweeps.array_ranges([3]) == "3"


def test_the_spec_sweep_table_adds_axes_and_run_ignores_it(tmp_path):
    spec = tmp_path / "mine.toml"
    shipped = (sweeps.find_spec("gpt2-tiny-ddp-powersgd")).read_text()
    spec.write_text(
        shipped
        + '\n[sweep]\nmin_pipeline_efficiency = 0.5\n\n[sweep.grid]\nbatch.micro = [1, 2]\n"batch.gas" = [1, 3]\n'
    )
    assert load_spec(spec).batch.micro == 2  # the base point, as `logstat run` launches it
    section = sweeps.sweep_section(spec)
    axes = sweeps.section_axes(section, str(spec))
    assert [(a.key, a.values) for a in axes] == [("batch.micro", ("1", "2")), ("batch.gas", ("1", "3"))]
    done = logstat("sweep", str(spec), "--grid", "batch.gas=2,4", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "# grid: batch.micro = 1, 2\n# grid: batch.gas = 2, 4\n" in done.stdout
    assert "gas/(gas+PP-1) < 50%" in done.stdout
    assert not (tmp_path / "runs").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text(shipped + "\n[sweep]\ngird = 1\n")
    done = logstat("sweep", str(bad), "--dry-run", cwd=tmp_path)
    assert done.returncode == 1 and "unknown key sweep.gird" in done.stderr


def test_recipe_shaden_follows_seed_002():
    sets, axes = sweeps.recipe_settings("shaden", "gpt2-52b-megatron-ds", [])
    # 16 nodes x 4 GPUs: TP = GPUs per node, PP = nodes, chunks 8*PP and 16*PP, micro batch 1 then 2
    assert sets == ["parallel.tp=4", "parallel.pp=16", "batch.global_batch=none"]
    assert [(a.key, a.values) for a in axes] == [("batch.micro", ("1", "2")), ("batch.gas", ("128", "256"))]
    plan = sweeps.plan_sweep("gpt2-52b-megatron-ds", axes, overrides=sets, recipe="shaden")
    assert len(plan.kept) == 4
    assert [p.plan.pipeline_efficiency for p in plan.kept] == pytest.approx([128 / 143, 256 / 271] * 2)


def test_create_sweep_makes_one_run_directory_per_kept_point(tmp_path):
    plan = sweeps.plan_sweep(
        "gpt2-tiny-ddp-powersgd",
        [sweeps.parse_axis("batch.micro=1,2"), sweeps.parse_axis("model.num_heads=2,3,4")],
        overrides=["cluster.master_port=29700"],
    )
    sweep_dir, runs = sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    assert sweep_dir.parent == tmp_path / "gpt2-tiny-ddp-powersgd" and sweep_dir.name.startswith("sweep-")
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["00", "01", "02", "03", "plan.txt", "sweep.json"]
    record = json.loads((sweep_dir / "sweep.json").read_text())
    assert [(p["index"], p["dir"], p["rule"]) for p in record["points"]] == [
        (0, "00", None),
        (1, None, "refused"),
        (2, "01", None),
        (3, "02", None),
        (4, None, "refused"),
        (5, "03", None),
    ]
    assert record["points"][3]["values"] == {"batch.micro": 2, "model.num_heads": 2}
    for task, run in enumerate(runs):
        manifest = read_manifest(run.run_dir)
        assert manifest["sweep"]["task"] == task
        # array tasks may share a node: each point its own rendezvous port
        assert manifest["spec"]["cluster"]["master_port"] == 29700 + task
        assert f"--master_port {29700 + task}" in (run.run_dir / "run.sbatch").read_text()
    again, _ = sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    assert again != sweep_dir  # never the same directory twice


def test_the_array_script_runs_the_point_of_its_task(tmp_path):
    plan = sweeps.plan_sweep("gpt2-tiny-ddp-powersgd", [sweeps.parse_axis("batch.micro=1,2,3")])
    sweep_dir, runs = sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    [(script, tasks)] = sweeps.array_scripts(sweep_dir, runs, width=2, max_parallel=2)
    assert tasks == [0, 1, 2]
    header = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --array=0-2%2" in header
    assert f"#SBATCH --output={sweep_dir}/%2a/slurm-%A_%a.out" in header
    assert "#SBATCH --nodes=1" in header and not any("gres" in line for line in header)
    for run in runs:  # stand-ins for the training script: which point did task N start?
        os.chmod(run.script_path, 0o644)
        run.script_path.write_text(f'echo "ran {run.run_dir.name} in $PWD"\n')
    path = tmp_path / "array.sbatch"
    path.write_text(script)
    for task in (0, 2):
        done = subprocess.run(
            ["bash", str(path)],
            env={**os.environ, "SLURM_ARRAY_TASK_ID": str(task)},
            capture_output=True,
            text=True,
        )
        assert done.stdout == f"ran {task:02d} in {os.getcwd()}\n", done.stderr
    done = subprocess.run(
        ["bash", str(path)], env={**os.environ, "SLURM_ARRAY_TASK_ID": "5"}, capture_output=True, text=True
    )
    assert done.returncode == 2 and "no point for array task 5" in done.stderr


def test_points_with_other_resources_get_their_own_array(tmp_path):
    plan = sweeps.plan_sweep(
        "gpt2-tiny-ddp-powersgd", [sweeps.parse_axis("cluster.time_limit=00:10:00,00:20:00")]
    )
    sweep_dir, runs = sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    scripts = sweeps.array_scripts(sweep_dir, runs, width=2, max_parallel=None)
    assert [tasks for _, tasks in scripts] == [[0], [1]]
    assert ["#SBATCH --time=00:10:00" in s and "#SBATCH --array=0\n" in s for s, _ in scripts] == [
        True,
        False,
    ]
    assert "#SBATCH --time=00:20:00" in scripts[1][0] and "#SBATCH --array=1\n" in scripts[1][0]


def _sweep_with_real_logs(tmp_path: Path) -> Path:
    """The seed's 52B micro-batch sweep (4, 6, 8) x PP (16, 32), its run directories holding real logs:
    micro 4 the seed's own run (fixtures/megatron/meg_gpt2_perf_n16.out), micro 6 a run that ended in
    CUDA OOM (fixtures/failures/torchrun-oom-3001.out), micro 8 no log yet; PP 32 is pruned."""
    plan = sweeps.plan_sweep(
        "gpt2-52b-megatron-ds",
        [sweeps.parse_axis("batch.micro=8,4,6"), sweeps.parse_axis("parallel.pp=16,32")],
        overrides=DERIVED_GLOBAL,
    )
    sweep_dir, runs = sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    by_micro = {run.spec.batch.micro: run.run_dir for run in runs}
    shutil.copy(FIXTURES / "megatron" / "meg_gpt2_perf_n16.out", by_micro[4])
    shutil.copy(FIXTURES / "failures" / "torchrun-oom-3001.out", by_micro[6])
    return sweep_dir


def median_step_seconds(log: Path) -> float:
    """The median of the logged iteration times after the first, read apart from the parser."""
    times = [float(t) for t in re.findall(r"elapsed time per iteration \(ms\): ([\d.]+)", log.read_text())]
    steady = sorted(times[1:])
    middle = len(steady) // 2
    return (steady[middle] if len(steady) % 2 else (steady[middle - 1] + steady[middle]) / 2) / 1000


def test_the_table_of_a_sweep_keeps_every_point(tmp_path):
    sweep_dir = _sweep_with_real_logs(tmp_path)
    done = logstat("table", str(sweep_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"### gpt2-52b-megatron-ds sweep: batch.micro, parallel.pp ({sweep_dir.name})"
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["GPUs", "Size", "Mic-BS", "PP", "DP", "Glob-BS", "Throughput", "TFlops", "Notes"]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:10]]
    # sorted by micro batch, then PP
    assert [(r[2], r[3]) for r in rows] == [
        ("4", "16"),
        ("4", "32"),
        ("6", "16"),
        ("6", "32"),
        ("8", "16"),
        ("8", "32"),
    ]
    seconds = median_step_seconds(FIXTURES / "megatron" / "meg_gpt2_perf_n16.out")
    tflops = gpt2_52b_params() / 1e9 * 4 * 2 * 1024 * 1024 / (seconds * 64 * 1e3)
    assert rows[0][:7] == ["64", "52B", "4", "16", "1", "1024", f"{seconds:.0f}s"]
    assert rows[0][7] == f"**{tflops:.1f}**" == "**52.8**"  # the seed's number, the best of the sweep
    assert rows[0][8] == "01/meg_gpt2_perf_n16.out (incomplete)"  # the grid listed 8, 4, 6
    assert rows[2][6] == "OOM" and rows[2][7] == "" and rows[2][8] == "02/torchrun-oom-3001.out (failed: OOM)"
    assert rows[4][6] == "no log" and rows[4][8] == "00 (no log)"
    for pruned in (rows[1], rows[3], rows[5]):
        assert pruned[6] == "pruned" and pruned[8].startswith("refused: parallel.tp*parallel.pp=128")
        assert pruned[4] == "" and pruned[5] == ""  # no DP where TP*PP does not divide the GPUs


def test_status_of_a_sweep_shows_every_point(tmp_path):
    plan = sweeps.plan_sweep("gpt2-tiny-ddp-powersgd", [sweeps.parse_axis("model.num_heads=2,3")])
    sweep_dir, _ = sweeps.create_sweep(plan, backend="local", runs_root=tmp_path)
    done = logstat("status", str(sweep_dir), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["point"], r["task"], r["state"]) for r in rows] == [(0, 0, "NOT_STARTED"), (1, None, "PRUNED")]
    assert rows[1]["reason"] == "refused: model.num_heads=3 does not divide model.hidden_size=64"
    # plain `logstat status` lists a local sweep too (it listed sweeps with a job array only)
    done = logstat("status", "--runs-root", str(tmp_path), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == rows
    done = logstat("cancel", str(sweep_dir), cwd=tmp_path)
    assert done.returncode == 1 and "no Slurm job array" in done.stderr


# --- real sweeps of the tiny DDP + PowerSGD spec (2 CPU processes per point) -------------------

#: 2 x 3 = 6 points; 3 heads do not divide the hidden size 64: 2 pruned, 4 run.
TINY_SWEEP = ("--grid", "batch.micro=1,2", "--grid", "model.num_heads=2,3,4", "--set", "steps=3")


def tiny_params() -> int:
    h, layers, vocab, seq = 64, 2, 128, 32  # runners/specs/gpt2-tiny-ddp-powersgd.toml
    return layers * (12 * h * h + 13 * h) + vocab * h + seq * h + 2 * h


def assert_rounded(cell: str, value: float) -> None:
    """``cell`` is ``value`` rounded to the decimals the cell shows (however many the table chose)."""
    decimals = len(cell.partition(".")[2])
    assert abs(float(cell) - value) <= 0.5 * 10**-decimals + 1e-12, (cell, value)


def assert_tiny_sweep_table(sweep_dir: Path, log_name) -> None:
    """`logstat table SWEEP_DIR`: every point a row, measured numbers recomputed from each log."""
    done = logstat("table", str(sweep_dir), cwd=sweep_dir)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == [
        "GPUs",
        "Size",
        "Mic-BS",
        "model.num_heads",
        "DP",
        "Glob-BS",
        "Seq",  # 32, not the seed's 1024: the TFlops formula read it, so the table shows it
        "Throughput",
        "TFlops",
        "Notes",
    ]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:10]]
    assert [(r[2], r[3]) for r in rows] == [(m, h) for m in ("1", "2") for h in ("2", "3", "4")]
    record = json.loads((sweep_dir / "sweep.json").read_text())
    dirs = {(p["values"]["batch.micro"], p["values"]["model.num_heads"]): p["dir"] for p in record["points"]}
    measured = {}
    for row in rows:
        micro, heads = int(row[2]), int(row[3])
        if heads == 3:
            assert (
                row[7] == "pruned"
                and row[9] == "refused: model.num_heads=3 does not divide model.hidden_size=64"
            )
            continue
        log = sweep_dir / dirs[(micro, heads)] / log_name(dirs[(micro, heads)])
        seconds = median_step_seconds(log)
        global_batch = micro * 2 * 2  # micro * gas 2 * DP 2
        tflops = tiny_params() / 1e9 * 4 * 2 * 32 * global_batch / (seconds * 2 * 1e3)
        measured[row[3], row[2]] = tflops
        assert row[:2] == ["2", "110K"] and row[4:7] == ["2", str(global_batch), "32"]
        # three decimals, rounded as the table rounds (a median of two steps can end on a tie: 0.0435)
        assert row[7].endswith("s") and len(row[7][:-1].partition(".")[2]) == 3
        assert_rounded(row[7][:-1], seconds)
        assert_rounded(row[8].strip("*"), tflops)
        assert row[9] == f"{dirs[(micro, heads)]}/{log.name}"
    best = max(measured.values())
    assert [row[8].startswith("**") for row in rows if row[3] != "3"] == [
        measured[row[3], row[2]] == best for row in rows if row[3] != "3"
    ]


@pytest.mark.slow
def test_a_local_sweep_runs_the_points_one_after_another(tmp_path):
    done = logstat(
        "sweep",
        "gpt2-tiny-ddp-powersgd",
        *TINY_SWEEP,
        "--backend",
        "local",
        "--runs-dir",
        "runs",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    sweep_dir = Path(done.stdout.strip())
    assert sweep_dir.parent == tmp_path / "runs" / "gpt2-tiny-ddp-powersgd"
    assert "2 x 3 = 6 points, 4 kept, 2 pruned" in done.stderr
    assert [line for line in done.stderr.splitlines() if "local run completed (exit 0)" in line] != []
    started = [read_manifest(sweep_dir / f"{task:02d}")["started_utc"] for task in range(4)]
    assert started == sorted(started)  # one after another, in task order
    assert_tiny_sweep_table(sweep_dir, log_name=lambda name: "train.log")


@pytest.mark.slow
@pytest.mark.slurm
def test_a_slurm_sweep_is_one_job_array(tmp_path):
    done = logstat(
        "sweep",
        "gpt2-tiny-ddp-powersgd",
        *TINY_SWEEP,
        "--set",
        f"cluster.master_port={free_ports(6)}",  # a task each
        "--backend",
        "slurm",
        "--max-parallel",
        "2",
        "--wait",
        "--runs-dir",
        "runs",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    sweep_dir = Path(done.stdout.strip())
    script = (sweep_dir / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-3%2\n" in script
    [array] = json.loads((sweep_dir / "sweep.json").read_text())["arrays"]
    job = array["job_id"]
    assert array["tasks"] == [0, 1, 2, 3]
    for task in range(4):
        assert read_manifest(sweep_dir / f"{task:02d}")["slurm_job_id"] == f"{job}_{task}"
        assert (sweep_dir / f"{task:02d}" / f"slurm-{job}_{task}.out").is_file()
    status = logstat("status", str(sweep_dir), "--json", cwd=tmp_path)
    rows = [json.loads(line) for line in status.stdout.splitlines()]
    assert [(r["task"], r["job_id"], r["state"]) for r in rows] == [
        (0, f"{job}_0", "COMPLETED"),
        (None, None, "PRUNED"),
        (1, f"{job}_1", "COMPLETED"),
        (2, f"{job}_2", "COMPLETED"),
        (None, None, "PRUNED"),
        (3, f"{job}_3", "COMPLETED"),
    ]
    listed = logstat("status", "--runs-root", "runs", "--json", cwd=tmp_path)  # every submitted sweep
    assert [json.loads(line)["job_id"] for line in listed.stdout.splitlines()] == [r["job_id"] for r in rows]
    assert_tiny_sweep_table(sweep_dir, log_name=lambda name: f"slurm-{job}_{int(name)}.out")


@pytest.mark.slow
@pytest.mark.slurm
def test_cancel_of_a_sweep_cancels_its_array(tmp_path):
    import time

    plan = sweeps.plan_sweep("gpt2-tiny-ddp-powersgd", [sweeps.parse_axis("batch.micro=1,2,3")])
    sweep_dir, runs = sweeps.create_sweep(plan, backend="slurm", runs_root=tmp_path)
    for run in runs:  # points that would outlast the test: only a cancel ends them
        os.chmod(run.script_path, 0o644)
        run.script_path.write_text("echo started; sleep 600\n")
    [array] = sweeps.submit_arrays(sweep_dir, runs, width=2, max_parallel=1)
    deadline = time.monotonic() + 60
    while "RUNNING" not in {s.state for s in sweeps.sweep_status(sweep_dir)}:
        assert time.monotonic() < deadline, sweeps.sweep_status(sweep_dir)
        time.sleep(0.5)
    done = logstat("cancel", str(sweep_dir), cwd=tmp_path)
    assert done.returncode == 0 and f"scancel {array['job_id']}" in done.stderr, done.stderr
    while {s.state for s in sweeps.sweep_status(sweep_dir)} != {"CANCELLED"}:
        assert time.monotonic() < deadline + 60, sweeps.sweep_status(sweep_dir)
        time.sleep(0.5)


def test_the_readme_shows_the_current_plan_of_the_seeds_52b_sweep():
    repo = Path(__file__).resolve().parents[2]
    readme = (repo / "README.md").read_text()
    block = readme.split("$ logstat sweep gpt2-52b-megatron-ds --set batch.global_batch=none \\\n", 1)[1]
    command_rest, _, shown = block.partition("\n")
    args = command_rest.split()
    assert args[:6] == [
        "--grid",
        "batch.micro=4,6,8",
        "--grid",
        "batch.gas=256,512",
        "--grid",
        "parallel.pp=16,32",
    ]
    done = logstat("sweep", "gpt2-52b-megatron-ds", "--set", "batch.global_batch=none", *args, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert shown.split("```", 1)[0] == done.stdout


def test_the_grid_comes_from_the_spec_the_recipe_and_the_command_line_later_winning(tmp_path):
    spec = tmp_path / "mine.toml"
    shipped = sweeps.find_spec("gpt2-52b-megatron-ds").read_text()
    spec.write_text(shipped + "\n[sweep.grid]\nbatch.micro = [4, 6]\nparallel.tp = [2, 4]\n")
    section = sweeps.sweep_section(spec)
    sets, axes = sweeps.assemble_grid(
        spec, section, [sweeps.parse_axis("batch.gas=64,128")], overrides=["parallel.tp=4"], recipe="shaden"
    )
    # the recipe's micro 1,2 replaces the spec's 4,6; --grid replaces the recipe's chunks; the user's
    # --set fixes TP (the spec's TP axis is dropped, and so is the recipe's TP = GPUs per node)
    assert [(a.key, a.values) for a in axes] == [("batch.micro", ("1", "2")), ("batch.gas", ("64", "128"))]
    assert sets == ["parallel.pp=16", "batch.global_batch=none"]
    with pytest.raises(LogstatError, match="--grid batch.gas is given twice"):
        sweeps.assemble_grid(
            spec, section, [sweeps.parse_axis("batch.gas=1"), sweeps.parse_axis("batch.gas=2")]
        )

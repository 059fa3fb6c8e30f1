"""Random command lines for every registered command, built from real options and hostile values:
the command either succeeds or fails with one ``Error:`` line on stderr naming the problem; it never
fails with an internal error ("run with --debug"), a traceback, or output on stdout when failing.

Only side-effect-free paths run: ``run`` is always a dry run, and the files ``table --update`` and
``plot`` write go to a fresh temporary directory.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logstat.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
SEED_TABLES = ROOT / "fixtures" / "seeds" / "001_gpt2_experiments_tables.md"
#: examples per command; LOGSTAT_RELIABILITY_SCALE=10 searches ten times longer (make test uses 1).
EXAMPLES = 40 * int(os.environ.get("LOGSTAT_RELIABILITY_SCALE", "1"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
INTERNAL = "run with --debug for the traceback"

#: placeholders (replaced by paths in the scratch directory) and hostile values.
PATHS = ["{log}", "{logs}", "{failures}", "{nope}", "{fifo}", "{dangling}", "{empty}", "{notes}", "{file}/x"]
NUMBERS = ["0", "1", "-1", "4", "64", "129", "nan", "inf", "-inf", "1e-300", "1e300", "9" * 30, "x", ""]
FAMILIES = ["megatron", "hf_trainer", "hf-trainer", "deepspeed", "mingpt", "slurm", "levanter", ""]
OPTIONS: dict[str, list[list[str] | tuple]] = {
    "parse": [
        ["--tflops"],
        ["--iterations"],
        ("--format", ["table", "json", "csv", "markdown", "xml", ""]),
        ("--family", FAMILIES),
        ("--warmup", NUMBERS),
        ("-o", ["{new}.csv", "{file}", "{nope_dir}/out.csv"]),
    ],
    "table": [
        ("--columns", ["GPUs,Size,Throughput,TFlops,MFU,Notes", "Bogus", "", ",", "GPUs,,Size"]),
        ("--family", FAMILIES),
        ("--warmup", NUMBERS),
        ["--dry-run"],
        ["--no-checkpointing"],
    ],
    "plot": [
        ("--out", ["{new}", "{file}", "{empty}"]),
        ("--format", ["html", "gif"]),
        ("--family", FAMILIES),
        ("--warmup", NUMBERS),
    ],
    "estimate": [
        ("--model", ["52B", "7B", "53B", "52b", "", "1000B"]),
        ("--hidden", NUMBERS),
        ("--layers", NUMBERS),
        ("--gpus", NUMBERS),
        ("--tp", NUMBERS),
        ("--pp", NUMBERS),
        ("--zero", ["0", "1", "3", "5", "-1"]),
        ("--micro-batch", NUMBERS),
        ("--gas", NUMBERS),
        ("--sec-per-iter", NUMBERS),
        ("--tokens", NUMBERS),
        ("--gpu", ["A100-SXM4-80GB", "V100-SXM2-32GB", "H100-SXM", "TPU", ""]),
        ("--precision", ["fp16", "bf16", "fp8"]),
        ["--offload-optimizer"],
        ["--offload-param"],
    ],
    "run": [
        (
            "--set",
            [
                "parallel.pp=7",
                "parallel.tp=0",
                "batch.micro=x",
                "train.lr=inf",
                "train.lr=1e-4",
                "cluster.job_name=$(touch PWNED)",
                "cluster.nodes=-1",
                "model.hidden_size=9999999999999999999999",
                "nonsense",
                "estimate.tokens=nan",
            ],
        ),
        ("--backend", ["dry-run", "k8s"]),
        ("--runs-dir", ["{new}", "{file}"]),
    ],
    "rerun": [
        (
            "--set",
            ["steps=3", "parallel.pp=7", "batch.micro=x", "nonsense", "cluster.job_name=$(touch PWNED)"],
        ),
        ("--backend", ["dry-run", "k8s"]),
        ("--runs-dir", ["{new}", "{file}", "{empty}"]),
    ],
    "status": [("--runs-root", ["{empty}", "{file}", "{nope}"]), ["--json"]],
    "cancel": [],
    "sweep": [
        (
            "--grid",
            [
                "batch.micro=1,2",
                "batch.micro=0,x",
                "parallel.tp=1,2,2",
                "model.num_heads=2,3",
                "batch.micor=1",
                "nonsense",
                "cluster.job_name=$(touch PWNED),b",
                "train.lr=inf,nan",
            ],
        ),
        ("--set", ["parallel.pp=7", "batch.micro=2", "nonsense", "batch.global_batch=none"]),
        ("--backend", ["dry-run", "k8s"]),
        ("--min-pipeline-efficiency", ["0.8", "2", "nan", "-1"]),
        ("--max-parallel", ["0", "2"]),
        ("--recipe", ["shaden", "bogus"]),
        ("--runs-dir", ["{new}", "{file}"]),
        ["--wait"],
    ],
}
ARGUMENTS: dict[str, list[str]] = {
    "parse": PATHS,
    "table": PATHS,
    "plot": PATHS,
    "estimate": [],
    "run": [
        "gpt2-tiny-ddp-powersgd",
        "gpt2-52b-megatron-ds",
        "{nope}.toml",
        "{bad_toml}",
        "{empty}",
        "{log}",
    ],
    "rerun": ["{empty}", "{listed}", "{nope}", "{file}", "gpt2-tiny-ddp-powersgd 1a2b3c", "1a2b3c"],
    "status": ["{empty}", "{listed}", "{injected}", "{nope}", "{file}"],
    "cancel": ["{empty}", "{listed}", "{injected}", "{nope}", "{file}"],
    "sweep": ["gpt2-tiny-ddp-powersgd", "gpt2-52b-megatron-ds", "{nope}.toml", "{bad_toml}", "{empty}"],
}


#: a command line that works, which the drawn arguments and options then extend or override (click
#: keeps the last value of an option), so that examples reach past the first check.
BASE: dict[str, list[str]] = {
    "parse": ["{logs}"],
    "table": ["{logs}"],
    "plot": ["{logs}", "--out", "{new}", "--format", "html"],
    "estimate": ["--model", "52B", "--gpus", "64", "--tp", "4", "--pp", "16", "--sec-per-iter", "129"],
    "run": ["gpt2-tiny-ddp-powersgd"],
    "rerun": ["{empty}"],
    "status": ["{empty}"],
    "cancel": ["{listed}"],
    "sweep": ["gpt2-tiny-ddp-powersgd", "--grid", "batch.micro=1,2"],
}


@st.composite
def command_lines(draw, command: str) -> list[str]:
    args = [command]
    if draw(st.integers(0, 3)):  # three times in four: start from a working command line
        args += BASE[command]
    if ARGUMENTS[command]:
        args += draw(st.lists(st.sampled_from(ARGUMENTS[command]), max_size=2))
    for option in draw(st.lists(st.sampled_from(OPTIONS[command]), max_size=4)) if OPTIONS[command] else []:
        if isinstance(option, tuple):
            args += [option[0], draw(st.sampled_from(option[1]))]
        else:
            args += option
    if command in ("run", "rerun", "sweep"):
        args.append("--dry-run")  # never launch anything
    if command == "table" and draw(st.booleans()):
        args += ["--update", draw(st.sampled_from(["{seed_md}", "{notes}", "{nope}.md"]))]
    return args


def scratch(tmp: Path) -> dict[str, str]:
    """The places the placeholders name, made fresh for each example."""
    logs = tmp / "logs"
    logs.mkdir()
    shutil.copy(ROOT / "fixtures" / "megatron" / "meg_gpt2_perf_n16.out", logs / "meg_gpt2_perf_n16.out")
    shutil.copy(ROOT / "fixtures" / "slurm" / "timelimit-1003.out", logs / "timelimit-1003.out")
    (tmp / "empty").mkdir()
    (tmp / "file.txt").write_text("a file\n")
    os.mkfifo(tmp / "fifo.out")
    (tmp / "dangling.out").symlink_to(tmp / "gone.out")
    (tmp / "notes.md").write_text("# Notes\n")
    (tmp / "bad.toml").write_text("[model\n")
    if SEED_TABLES.is_file():
        shutil.copy(SEED_TABLES, tmp / "gpt2.md")
    for name, manifest in (("listed", "[1]"), ("injected", '{"slurm_job_id": "1; touch PWNED"}')):
        (tmp / name).mkdir()
        (tmp / name / "manifest.json").write_text(manifest)
    return {
        "{log}": str(logs / "meg_gpt2_perf_n16.out"),
        "{logs}": str(logs),
        "{failures}": str(ROOT / "fixtures" / "failures"),
        "{nope_dir}": str(tmp / "nodir"),
        "{nope}": str(tmp / "nope"),
        "{fifo}": str(tmp / "fifo.out"),
        "{dangling}": str(tmp / "dangling.out"),
        "{empty}": str(tmp / "empty"),
        "{notes}": str(tmp / "notes.md"),
        "{file}": str(tmp / "file.txt"),
        "{new}": str(tmp / "new"),
        "{bad_toml}": str(tmp / "bad.toml"),
        "{seed_md}": str(tmp / "gpt2.md"),
        "{listed}": str(tmp / "listed"),
        "{injected}": str(tmp / "injected"),
    }


def _placed(arg: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        arg = arg.replace(key, value)
    return arg


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(args)
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    out.flush()
    return code, out.buffer.getvalue().decode("utf-8", errors="replace"), err.getvalue()


@pytest.mark.parametrize("command", list(COMMANDS))
@PROPERTY
@given(data=st.data())
def test_random_command_lines_fail_only_cleanly(command, data, generated, monkeypatch):
    args = data.draw(command_lines(command), label="argv")
    with tempfile.TemporaryDirectory() as tmp:
        places = scratch(Path(tmp))
        argv = [_placed(arg, places) for arg in args]
        monkeypatch.chdir(tmp)
        code, out, err = run_cli(argv)
        assert not list(Path(tmp).rglob("PWNED*"))
    generated[f"command lines ({command}, exit {code})"] += 1
    assert INTERNAL not in err and "Traceback" not in err, (argv, err)
    if code != 0:
        errors = [line for line in err.splitlines() if line.startswith("Error: ")]
        assert len(errors) >= 1, (argv, err)
        assert out == "" or command == "status", (argv, out)

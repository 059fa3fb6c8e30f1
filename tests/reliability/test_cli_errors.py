"""Every user error of every command registered in ``logstat.cli.COMMANDS`` is one line on stderr
starting with ``Error:``, nothing on stdout, a non-zero exit and no traceback; ``--debug`` shows
the traceback. A user error is never reported as an internal exception ("run with --debug")."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from logstat.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "fixtures" / "slurm" / "timelimit-1003.out"
LOGSTAT = Path(sys.executable).with_name("logstat")
SPEC = "gpt2-52b-megatron-ds"
INTERNAL = "run with --debug for the traceback"

#: id -> (arguments, a part the one-line message must hold). ``{tmp}`` is a fresh directory holding
#: ``existing.csv`` (a file), ``empty/`` (a directory without logs), ``fifo.out`` (a named pipe),
#: ``notes.md`` (markdown without tables), ``charts/loss.html`` (a chart), ``bad.toml`` (not TOML) and ``purged-9.out`` (a symbolic link
#: to a file that is gone, as after a scratch purge); ``listed/`` and ``injected/`` are run directories whose
#: manifest.json is a JSON list, or names a job id holding shell syntax.
CASES: dict[str, tuple[list[str], str]] = {
    "parse-missing-path": (["parse", "{tmp}/nope.out"], "nope.out"),
    "parse-missing-dir": (["parse", "{tmp}/nodir/"], "nodir"),
    "parse-path-through-a-file": (["parse", f"{LOG}/x.out"], "x.out"),
    "parse-fifo": (["parse", "{tmp}/fifo.out"], "fifo.out"),
    "parse-dangling-symlink": (["parse", "{tmp}/purged-9.out"], "/gpfsscratch/gone/purged-9.out"),
    "parse-unknown-format": (["parse", str(LOG), "--format", "xml"], "xml"),
    "parse-unknown-family": (["parse", str(LOG), "--family", "nanogpt2"], "nanogpt2"),
    "parse-bad-option": (["parse", str(LOG), "--bogus"], "--bogus"),
    "parse-no-paths": (["parse"], "PATHS"),
    "parse-negative-warmup": (["parse", str(LOG), "--warmup", "-1"], "warmup"),
    "parse-warmup-not-a-number": (["parse", str(LOG), "--warmup", "x"], "warmup"),
    "parse-output-exists": (
        ["parse", str(LOG), "-o", "{tmp}/existing.csv", "--format", "csv"],
        "existing.csv",
    ),
    # an output that exists is refused before any log is read (here: before the missing log is found)
    "parse-output-exists-before-reading": (
        ["parse", "{tmp}/nope.out", "-o", "{tmp}/existing.csv"],
        "existing.csv",
    ),
    "parse-output-dir-missing-before-reading": (
        ["parse", "{tmp}/nope.out", "-o", "{tmp}/nodir/a.csv"],
        "nodir",
    ),
    "parse-dir-without-logs": (["parse", "{tmp}/empty"], "empty"),
    "table-missing-path": (["table", "{tmp}/nope"], "nope"),
    "table-unknown-column": (["table", str(LOG), "--columns", "GPUs,Bogus"], "Bogus"),
    "table-unknown-family": (["table", str(LOG), "--family", "nanogpt2"], "nanogpt2"),
    "table-update-missing": (["table", "--update", "{tmp}/nope.md"], "nope.md"),
    "table-update-and-paths": (["table", str(LOG), "--update", "{tmp}/notes.md"], "not both"),
    "table-update-without-tables": (["table", "--update", "{tmp}/notes.md"], "notes.md"),
    "table-dry-run-alone": (["table", str(LOG), "--dry-run"], "--update"),
    "table-checkpointing-without-update": (["table", str(LOG), "--no-checkpointing"], "--update"),
    "table-columns-with-update": (
        ["table", "--update", "{tmp}/notes.md", "--columns", "GPUs", "--warmup", "2"],
        "--columns, --warmup go with log PATHS",
    ),
    "table-bad-option": (["table", "--bogus"], "--bogus"),
    "table-no-paths-and-no-runs-dir": (["table"], "runs"),
    "plot-missing-path": (["plot", "{tmp}/nope", "--out", "{tmp}/plots"], "nope"),
    "plot-without-out": (["plot", str(LOG)], "--out"),
    "plot-unknown-format": (["plot", str(LOG), "--out", "{tmp}/plots", "--format", "gif"], "gif"),
    "plot-out-is-a-file": (["plot", str(LOG), "--out", "{tmp}/existing.csv"], "existing.csv"),
    "plot-chart-exists-before-reading": (["plot", "{tmp}/nope", "--out", "{tmp}/charts"], "loss.html"),
    "estimate-without-gpus": (["estimate", "--model", "52B"], "--gpus"),
    "estimate-unknown-preset": (["estimate", "--model", "53B", "--gpus", "64"], "53B"),
    "estimate-zero-stage-5": (["estimate", "--model", "52B", "--gpus", "64", "--zero", "5"], "--zero"),
    "estimate-tp-not-dividing": (["estimate", "--model", "52B", "--gpus", "64", "--tp", "3"], "3"),
    "estimate-no-shape": (["estimate", "--gpus", "64"], "--model"),
    "estimate-nan-seconds": (["estimate", "--model", "52B", "--gpus", "64", "--sec-per-iter", "nan"], "nan"),
    "estimate-infinite-tokens": (["estimate", "--model", "52B", "--gpus", "64", "--tokens", "inf"], "inf"),
    "estimate-model-and-shape": (
        ["estimate", "--model", "52B", "--hidden", "1024", "--gpus", "8"],
        "--model",
    ),
    "run-missing-spec": (["run", "{tmp}/nope.toml", "--dry-run"], "nope"),
    "run-spec-not-toml": (["run", "{tmp}/bad.toml", "--dry-run"], "bad.toml"),
    "run-pp-not-dividing-layers": (["run", SPEC, "--set", "parallel.pp=7", "--dry-run"], "7"),
    "run-unknown-field": (["run", SPEC, "--set", "parallel.bogus=1", "--dry-run"], "bogus"),
    "run-set-without-value": (["run", SPEC, "--set", "nonsense", "--dry-run"], "nonsense"),
    "run-unknown-backend": (["run", SPEC, "--backend", "k8s"], "k8s"),
    "run-infinite-learning-rate": (["run", SPEC, "--set", "train.lr=inf", "--dry-run"], "train.lr=inf"),
    "run-infinite-assumed-tflops": (
        ["run", SPEC, "--set", "estimate.tflops_per_gpu=inf", "--dry-run"],
        "estimate.tflops_per_gpu=inf",
    ),
    "run-nan-tokens": (["run", SPEC, "--set", "estimate.tokens=nan", "--dry-run"], "estimate.tokens=nan"),
    "rerun-missing-run": (["rerun", "{tmp}/nope", "--dry-run"], "nope"),
    "rerun-not-a-run-dir": (["rerun", "{tmp}/empty", "--dry-run"], "not a run directory"),
    "rerun-run-dir-without-backend": (["rerun", "{tmp}/listed"], "not an object"),
    "status-missing-dir": (["status", "{tmp}/nope"], "nope"),
    "status-missing-runs-root": (["status", "--runs-root", "{tmp}/nope"], "--runs-root"),
    "status-not-a-run-dir": (["status", "{tmp}/empty"], "empty"),
    "cancel-missing-dir": (["cancel", "{tmp}/nope"], "nope"),
    "cancel-not-a-run-dir": (["cancel", "{tmp}/empty"], "empty"),
    "status-manifest-not-an-object": (["status", "{tmp}/listed"], "not an object"),
    "cancel-manifest-not-an-object": (["cancel", "{tmp}/listed"], "not an object"),
    "status-job-id-not-a-job-id": (["status", "{tmp}/injected"], "is not a Slurm job id"),
    "cancel-job-id-not-a-job-id": (["cancel", "{tmp}/injected"], "is not a Slurm job id"),
    "sweep-without-grid": (["sweep", SPEC, "--dry-run"], "--grid"),
    "sweep-unknown-field": (["sweep", SPEC, "--grid", "batch.micor=1,2", "--dry-run"], "micor"),
    "sweep-bad-value": (["sweep", SPEC, "--grid", "batch.micro=1,x", "--dry-run"], "batch.micro='x'"),
    "sweep-set-and-grid": (
        ["sweep", SPEC, "--set", "batch.micro=1", "--grid", "batch.micro=1,2", "--dry-run"],
        "batch.micro is both",
    ),
    "sweep-field-twice": (
        ["sweep", SPEC, "--grid", "batch.micro=1,2", "--grid", "batch.micro=4", "--dry-run"],
        "--grid batch.micro is given twice",
    ),
    "sweep-too-many-points": (
        [
            "sweep",
            SPEC,
            *[
                a
                for f in ("micro", "gas")
                for a in ("--grid", f"batch.{f}={','.join(map(str, range(1, 102)))}")
            ],
            "--dry-run",
        ],
        "10,201 points",
    ),
    "sweep-unknown-recipe": (["sweep", SPEC, "--recipe", "bogus", "--dry-run"], "bogus"),
    "sweep-everything-pruned": (
        ["sweep", SPEC, "--grid", "parallel.pp=7,9", "--backend", "local"],
        "every point of the sweep is pruned (2 refused)",
    ),
    "sweep-floor-out-of-range": (
        ["sweep", SPEC, "--grid", "batch.micro=1,2", "--min-pipeline-efficiency", "2", "--dry-run"],
        "between 0 and 1",
    ),
    "status-sweep-record-broken": (["status", "{tmp}/badsweep"], "not a sweep record"),
    "cancel-sweep-record-broken": (["cancel", "{tmp}/badsweep"], "not a sweep record"),
    "table-sweep-record-broken": (["table", "{tmp}/badsweep"], "not a sweep record"),
    "unknown-command": (["frobnicate"], "frobnicate"),
}


def logstat(capsys, *args: str) -> tuple[int, str, str]:
    """The real console entry point, in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
        raise SystemExit(0)
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """A fresh current directory with the inputs the cases name (runs/ would be made here)."""
    (tmp_path / "existing.csv").write_text("mine\n")
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo.out")
    (tmp_path / "purged-9.out").symlink_to("/gpfsscratch/gone/purged-9.out")
    for name, manifest in (("listed", "[1, 2]"), ("injected", '{"slurm_job_id": "12; touch PWNED"}')):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(manifest)
    (tmp_path / "listed" / "spec.toml").write_text('name = "x"\n')
    (tmp_path / "notes.md").write_text("# Notes\n\nNo table here.\n")
    (tmp_path / "charts").mkdir()
    (tmp_path / "charts" / "loss.html").write_text("mine\n")
    (tmp_path / "badsweep").mkdir()
    (tmp_path / "badsweep" / "sweep.json").write_text("[1]")
    (tmp_path / "bad.toml").write_text("[model\nhidden = \n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _args(case: str, tmp: Path) -> list[str]:
    return [arg.replace("{tmp}", str(tmp)) for arg in CASES[case][0]]


def test_every_registered_command_has_error_cases():
    covered = {args[0] for args, _ in CASES.values()}
    assert set(COMMANDS) <= covered


@pytest.mark.parametrize("case", list(CASES))
def test_user_error_is_one_line_on_stderr(case, workdir, capsys):
    code, out, err = logstat(capsys, *_args(case, workdir))
    lines = err.strip().splitlines()
    assert code != 0
    assert out == ""
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: "), err
    assert CASES[case][1] in lines[0], err
    assert INTERNAL not in err and "Traceback" not in err


def test_refusals_create_nothing(workdir, capsys):
    """A refused spec makes no run directory; an --output that exists keeps its bytes."""
    for case in (
        "run-pp-not-dividing-layers",
        "run-unknown-field",
        "run-spec-not-toml",
        "parse-output-exists",
    ):
        logstat(capsys, *_args(case, workdir))
    assert not (workdir / "runs").exists()
    assert (workdir / "existing.csv").read_text() == "mine\n"


@pytest.mark.parametrize("case", ["parse-missing-path", "table-update-missing", "run-unknown-field"])
def test_debug_raises_the_error_itself(case, workdir, capsys):
    """With --debug the library's exception propagates (the console then prints its traceback)."""
    from logstat.errors import LogstatError

    with pytest.raises(LogstatError):
        main(["--debug", *_args(case, workdir)])


def test_debug_shows_the_traceback_of_the_real_console_script(tmp_path):
    plain = subprocess.run([LOGSTAT, "parse", tmp_path / "nope.out"], capture_output=True, text=True)
    debug = subprocess.run(
        [LOGSTAT, "--debug", "parse", tmp_path / "nope.out"], capture_output=True, text=True
    )
    assert plain.returncode == 1 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "LogstatError" in debug.stderr and "nope.out" in debug.stderr


def _without_dac_override() -> list[str] | None:
    """setpriv prefix that takes root's permission to read any file (None when unavailable)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        return None
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


@pytest.mark.parametrize("command", ["parse", "table"])
def test_unreadable_file_named_on_the_command_line_is_a_row_beside_the_others(command, tmp_path):
    """A log the user cannot read (mode 000; as root, with the capability to ignore modes dropped), named
    beside a readable one: its row says why, the other is read (a usage error refused both)."""
    prefix = _without_dac_override()
    if prefix is None:
        pytest.skip("needs root and setpriv to make a file unreadable for root")
    secret, readable = tmp_path / "secret-1.out", tmp_path / "timelimit-1003.out"
    secret.write_bytes(LOG.read_bytes())
    secret.chmod(0)
    readable.write_bytes(LOG.read_bytes())
    done = subprocess.run([*prefix, LOGSTAT, command, secret, readable], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "timelimit-1003.out" in done.stdout
    if command == "parse":  # the row, and why on stderr
        assert re.search(r"^secret-1.out +unknown +unreadable ", done.stdout, re.M)
        assert f"{secret}: cannot read: Permission denied" in done.stderr
    else:  # the table's row of the run
        assert "| secret-1.out (unreadable) |" in done.stdout


def test_unreadable_file_in_a_directory_is_a_row_not_a_loss(tmp_path):
    """Inside a directory an unreadable log is a row (status unreadable, reason says why) and the
    other logs are still read; the problem is also said on stderr."""
    prefix = _without_dac_override()
    if prefix is None:
        pytest.skip("needs root and setpriv to make a file unreadable for root")
    (tmp_path / "timelimit-1003.out").write_bytes(LOG.read_bytes())
    secret = tmp_path / "secret-1.out"
    secret.write_bytes(LOG.read_bytes())
    secret.chmod(0)
    done = subprocess.run(
        [*prefix, LOGSTAT, "parse", tmp_path, "--format", "csv"], capture_output=True, text=True
    )
    assert done.returncode == 0
    rows = {line.split(",")[0].rsplit("/", 1)[-1]: line for line in done.stdout.splitlines()[1:]}
    assert ",unreadable," in rows["secret-1.out"] and "Permission denied" in rows["secret-1.out"]
    assert ",timeout," in rows["timelimit-1003.out"]
    assert "secret-1.out" in done.stderr


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C in the middle of a long parse: "Aborted." and exit 130, no traceback."""
    line = next(text for text in LOG.read_text().splitlines() if "elapsed time per iteration" in text)
    step = line.split("/")[0]
    with (tmp_path / "long-1.out").open("w") as out:
        for number in range(1, 200_001):
            out.write(line.replace(step, f" iteration {number:8d}", 1) + "\n")
    started = subprocess.Popen(
        [LOGSTAT, "parse", tmp_path / "long-1.out", "--iterations", "--format", "csv"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # interrupted once it reads the log (~2 s of parsing here), not after a fixed delay: a faster machine
    # finished the parse before a signal sent after 2 s
    _wait_until_open(started.pid, tmp_path / "long-1.out")
    time.sleep(0.2)
    started.send_signal(signal.SIGINT)
    err = started.communicate(timeout=60)[1]
    assert started.returncode == 130
    assert err.strip() == "Aborted."


def _wait_until_open(pid: int, path: Path, timeout: float = 60.0) -> None:
    """Until process ``pid`` holds ``path`` open (Linux's /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # a descriptor closed while listed
            if any(Path(os.readlink(fd)) == path for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return
        time.sleep(0.01)
    raise AssertionError(f"{path} was never opened by process {pid}")


def test_a_dangling_symlink_in_a_directory_is_a_row_not_a_loss(tmp_path, capsys):
    """Logs linked from a purged scratch file system: the run is listed as unreadable, saying why."""
    (tmp_path / "timelimit-1003.out").write_bytes(LOG.read_bytes())
    (tmp_path / "purged-9.out").symlink_to("/gpfsscratch/gone/purged-9.out")
    code, out, err = logstat(capsys, "parse", str(tmp_path), "--format", "json")
    rows = {Path(row["path"]).name: row for row in json.loads(out)}
    assert code == 0
    assert (rows["purged-9.out"]["status"], rows["timelimit-1003.out"]["status"]) == ("unreadable", "timeout")
    assert "No such file or directory" in rows["purged-9.out"]["reason"]
    assert "purged-9.out" in err


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (a disk that fills up mid-write); skipped where mounting is not allowed."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mount_point], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", mount_point], check=True)


def test_an_output_cut_short_by_a_full_disk_leaves_no_partial_file(small_disk, tmp_path, capsys):
    """parse -o on a disk that fills up mid-write: one Error line, and no truncated file under the
    user's name (which would also make the next attempt refuse: 'file exists')."""
    line = next(text for text in LOG.read_text().splitlines() if "elapsed time per iteration" in text)
    step = line.split("/")[0]
    log = tmp_path / "long-1.out"
    log.write_text("".join(line.replace(step, f" iteration {n:8d}", 1) + "\n" for n in range(1, 2001)))
    code, out, err = logstat(
        capsys, "parse", str(log), "--iterations", "--format", "csv", "-o", str(small_disk / "it.csv")
    )
    assert code == 1 and err.startswith("Error: ") and "No space left on device" in err
    assert list(small_disk.iterdir()) == []
    code, out, err = logstat(capsys, "parse", str(LOG), "--format", "csv", "-o", str(small_disk / "runs.csv"))
    assert code == 0 and (small_disk / "runs.csv").read_text().count("\n") == 2  # header + one run


def test_charts_cut_short_by_a_full_disk_leave_no_files(small_disk, capsys):
    """plot on a disk that fills up after some charts: one Error line, and none of the chart files
    (a half-written set would make the next attempt refuse: 'exists')."""
    real = ROOT / "fixtures" / "megatron" / "meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out"
    code, out, err = logstat(
        capsys, "plot", str(real), "--out", str(small_disk / "plots"), "--format", "html"
    )
    assert code == 1 and err.strip().splitlines()[-1].startswith("Error: ") and "No space left" in err
    assert list((small_disk / "plots").iterdir()) == []


def test_bare_logstat_shows_the_help_not_one_squeezed_error_line(capsys):
    code, out, err = logstat(capsys)
    lines = err.splitlines()
    assert code == 2 and out == ""
    assert lines[0] == "Usage: logstat [OPTIONS] COMMAND [ARGS]..."
    assert "    logstat parse logs/ --tflops" in lines and not err.startswith("Error: ")


def test_every_option_of_every_command_says_what_it_does_and_every_command_has_an_example():
    import click

    from logstat.cli import cli

    ctx = click.Context(cli)
    commands = {name: cli.get_command(ctx, name) for name in COMMANDS}
    silent = [
        f"{name} {param.opts[0]}"
        for name, command in commands.items()
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert silent == []
    assert [name for name, command in commands.items() if "Example" not in (command.help or "")] == []


def test_a_closed_stdout_is_one_line_naming_it():
    # `logstat parse logs/ >&-`: Python starts with no sys.stdout; --output still writes
    done = subprocess.run(["bash", "-c", f"'{LOGSTAT}' parse '{LOG}' >&-"], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (
        1,
        "Error: stdout is closed: redirect it to a file, or give --output FILE\n",
    )


def test_an_output_directory_that_takes_no_file_is_refused_before_reading():
    # as root with the capability to ignore modes dropped: a read-only directory, refused at once
    prefix = _without_dac_override()
    if prefix is None:
        pytest.skip("needs root and setpriv to make a directory read-only for root")
    directory = Path(tempfile.mkdtemp())
    try:
        directory.chmod(0o555)
        target = directory / "runs.json"
        command = [*prefix, LOGSTAT, "parse", LOG, "--format", "json", "-o", target]
        done = subprocess.run(command, capture_output=True, text=True)
        assert (done.returncode, done.stdout) == (1, "")
        assert (
            done.stderr
            == f"Error: --output {target}: directory {directory} is not writable (permission denied)\n"
        )
    finally:
        directory.chmod(0o755)
        shutil.rmtree(directory)

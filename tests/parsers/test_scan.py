"""The directory walk: every scheduler's job output is found and a job's files are one run; whatever the
walk passes over is named on stderr with --verbose (fixtures/schedulers/README.md names the formats)."""

import gzip
import json
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from logstat.parsers.reader import group_runs, is_log_file, job_id_from_name

from logstat.api import find_logs
from tests.conftest import FIXTURES
from tests.parsers.test_cli_parse import logstat

SCHEDULERS = FIXTURES / "schedulers"


#: the scheduler fixtures holding the same three steps of meg_gpt2_perf_n16.out (their README): each row
#: says its steps are in the other
COPIES = {"slurm-4001.out": "train.sh.o4005.2", "train.sh.o4005.2": "slurm-4001.out"}


def _copy_warnings(err: str) -> dict[str, str]:
    """The rows the CLI warned of a copy of another's steps, and the file named: {row's name: other's}."""
    said = re.findall(
        r"warning: \S*?([^/\s]+): 1 warning\(s\), first: 3 of its 3 timed steps are also in \S*?([^/\s]+) ",
        err,
    )
    return dict(said)


def test_every_schedulers_job_output_is_one_run_with_its_job_id(capsys):
    code, out, err = logstat(capsys, "parse", SCHEDULERS, "--format", "json")
    assert code == 0 and len(err.splitlines()) == 2 and _copy_warnings(err) == COPIES
    runs = {Path(row["path"]).name: row for row in json.loads(out)}
    assert {name: [Path(p).name for p in row["paths"]] for name, row in runs.items()} == {
        "gpt-4002.out": ["gpt-4002.out"],
        "gpt.4006.stdout": ["gpt.4006.stdout", "gpt.4006.stderr"],
        "pretrain_gpt.o4003": ["pretrain_gpt.o4003", "pretrain_gpt.e4003"],
        "slurm-4001.out": ["slurm-4001.out"],
        "train.sh.o4004": ["train.sh.o4004", "train.sh.e4004"],
        "train.sh.o4005.2": ["train.sh.o4005.2"],
    }
    assert {name: row["job_id"] for name, row in runs.items()} == {
        "gpt-4002.out": "4002",
        "gpt.4006.stdout": "4006",
        "pretrain_gpt.o4003": "4003",
        "slurm-4001.out": "4001",
        "train.sh.o4004": "4004",
        "train.sh.o4005.2": "4005.2",
    }
    # the iteration lines each file holds (3, 2, 2, 1, 3 and 2 in the order above)
    assert {name: row["iterations"] for name, row in runs.items()} == {
        "gpt-4002.out": 2,
        "gpt.4006.stdout": 2,
        "pretrain_gpt.o4003": 2,
        "slurm-4001.out": 3,
        "train.sh.o4004": 1,
        "train.sh.o4005.2": 3,
    }
    # the traceback of a PBS job's .e file is the reason of its row
    assert runs["pretrain_gpt.o4003"]["reason"].startswith("CUDA out of memory")


def test_pairs_of_each_naming_convention_and_array_tasks_stay_apart():
    names = [
        "a.o10", "a.e10", "a.o11",  # PBS: two jobs of one name
        "b.sh.o20.1", "b.sh.e20.1", "b.sh.o20.2",  # SGE array tasks
        "c.o30-4", "c.e30-4",  # Torque array task
        "d.o40", "d.e40", "d.po40", "d.pe40",  # SGE parallel environment files of one job
        "e.stdout", "e.stderr", "e.out",  # LSF's pair and a Slurm .out of the same stem
        "f.o50.gz", "f.e50",  # a compressed half
    ]  # fmt: skip
    root = Path("/logs")
    assert all(is_log_file(root / name) for name in names)
    groups = group_runs([root / name for name in names])
    assert [[p.name for p in g.files] for g in groups] == [
        ["a.o10", "a.e10"],
        ["a.o11"],
        ["b.sh.o20.1", "b.sh.e20.1"],
        ["b.sh.o20.2"],
        ["c.o30-4", "c.e30-4"],
        ["d.o40", "d.e40", "d.po40", "d.pe40"],
        ["e.out"],
        ["e.stdout", "e.stderr"],
        ["f.o50.gz", "f.e50"],
    ]
    assert [job_id_from_name(Path(g.key)) for g in groups] == [
        "10", "11", "20.1", "20.2", "30-4", "40", None, None, "50",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "name",
    [
        "a.o",
        "x.pt",
        "model.bin",
        "notes.md",
        "run.o12x",
        "o12",
        "README",
        "shard.017",
        "run_2024-01-01",
        "core.12345",
    ],
)
def test_names_that_are_no_job_output_are_not_logs(name):
    assert not is_log_file(Path("/logs") / name)


@pytest.mark.parametrize("name", ["typescript", "typescript.gz"])
def test_a_session_script_recorded_is_a_log(name):
    # script(1)'s default file: a terminal's session, a run's output with it
    assert is_log_file(Path("/logs") / name)


@pytest.fixture
def cluttered(tmp_path):
    """The scheduler fixtures among what a run directory also holds."""
    root = tmp_path / "runs"
    shutil.copytree(SCHEDULERS, root)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD.out").write_text("ref: refs/heads/main\n")
    (root / ".nfs000000000abc0001").write_text("")
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "model.pt").write_bytes(b"PK\x03\x04\x00\x00binary")
    (root / "shared").symlink_to(root / "checkpoints")
    os.mkfifo(root / "pipe.out")
    return root


def test_verbose_names_every_file_the_walk_passed_over(capsys, cluttered):
    # W&B's run directory copies the console output (files/output.log) and holds its own debug logs;
    # Megatron's checkpoint directory names its last iteration in a .txt
    wandb = cluttered / "wandb" / "run-20240101_000000-abc123"
    (wandb / "files").mkdir(parents=True)
    (wandb / "files" / "output.log").write_text((SCHEDULERS / "slurm-4001.out").read_text())
    (wandb / "debug.log").write_text(
        "2024-01-01 00:00:00,000 INFO    MainThread:1 [wandb_setup.py] Logging\n"
    )
    (cluttered / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("500\n")
    code, out, err = logstat(capsys, "parse", cluttered, "--verbose", "--format", "json")
    assert code == 0
    assert len(json.loads(out)) == 6
    assert _copy_warnings(err) == COPIES
    assert [line for line in err.splitlines() if not line.startswith("warning: ")] == [
        f"skipped: {cluttered / '.git'}: hidden directory",
        f"skipped: {cluttered / 'shared'}: symbolic link to a directory (not followed)",
        f"skipped: {cluttered / 'wandb'}: W&B's run files (a copy of the console output, W&B's own logs)",
        f"skipped: {cluttered / '.nfs000000000abc0001'}: hidden file",
        f"skipped: {cluttered / 'README.md'}: not named like a log",
        f"skipped: {cluttered / 'pipe.out'}: not a regular file",
        f"skipped: {cluttered / 'checkpoints' / 'latest_checkpointed_iteration.txt'}: Megatron's checkpoint tracker",
        f"skipped: {cluttered / 'checkpoints' / 'model.pt'}: not named like a log",
    ]


def test_wandbs_consoles_are_the_logs_of_a_directory_that_kept_no_other(tmp_path):
    # a platform's or a notebook's runs: W&B's files/output.log is the only console kept
    wandb = tmp_path / "runs" / "wandb"
    consoles = [
        wandb / name / "files" / "output.log" for name in ("run-20240418_031058-a1", "offline-run-2-b2")
    ]
    for console in consoles:
        console.parent.mkdir(parents=True)
        console.write_text((SCHEDULERS / "slurm-4001.out").read_text())
    (wandb / "run-20240418_031058-a1" / "logs").mkdir()
    (wandb / "run-20240418_031058-a1" / "logs" / "debug.log").write_text("wandb's own\n")
    (wandb / "latest-run").symlink_to(consoles[0].parents[1])
    skipped: list[tuple[str, str]] = []
    found = find_logs([tmp_path / "runs"], skipped=lambda path, why: skipped.append((path.name, why)))
    assert found == sorted(consoles)
    assert skipped == [("wandb", "W&B's own files but its runs' consoles (files/output.log)")]
    # beside a log of the directory's own, they are its copies (the walk in the test above)
    (tmp_path / "runs" / "slurm-4001.out").write_text("")
    assert find_logs([tmp_path / "runs"]) == [tmp_path / "runs" / "slurm-4001.out"]


def test_an_archive_holding_logs_is_a_row_that_says_so_and_others_are_passed_over(tmp_path, capsys):
    bundle, data = tmp_path / "job_551204_logs.tar.gz", tmp_path / "shards.tar.gz"
    with tarfile.open(bundle, "w:gz") as archive:
        archive.add(SCHEDULERS / "slurm-4001.out", arcname="job_551204/slurm-551204.out")
    with tarfile.open(data, "w:gz") as archive:
        archive.add(SCHEDULERS / "slurm-4001.out", arcname="shard-000.bin")
    skipped: list[tuple[str, str]] = []
    found = find_logs([tmp_path], skipped=lambda path, why: skipped.append((path.name, why)))
    assert found == [bundle] and skipped == [("shards.tar.gz", "not named like a log")]
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    (row,) = json.loads(out)
    held = "a tar archive of 1 file (job_551204/slurm-551204.out)"
    assert (row["status"], row["reason"]) == (
        "unreadable",
        f"{held}: logstat does not read archives (extract it first)",
    )


def test_a_log_saved_without_a_suffix_is_walked_by_what_it_holds_and_a_script_is_not(tmp_path, capsys):
    # ``kubectl logs pod > worker-0``: torch's launcher, then a traceback; DeepSpeed's checkpoint names its
    # tag in ``latest``, a hostfile its slots, a job script its flags (loss named, no value printed)
    pod = tmp_path / "llama-ft-worker-0"
    launcher = "W0515 08:31:02.811000 1 torch/distributed/run.py:779] Setting OMP_NUM_THREADS\n"
    crash = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\nValueError: bad shard\n'
    )
    pod.write_text(launcher + crash)
    (tmp_path / "latest").write_text("global_step1000")
    (tmp_path / "hostfile").write_text("worker-0 slots=8\nworker-1 slots=8\n")
    (tmp_path / "train").write_text("#!/bin/bash\ntorchrun train.py --loss-scale 0 --steps 100\n")
    os.mkfifo(tmp_path / "console")  # a named pipe: opened to read its head, the walk would wait forever
    skipped: list[tuple[str, str]] = []
    found = find_logs([tmp_path], skipped=lambda path, why: skipped.append((path.name, why)))
    assert found == [pod]
    names = ("console", "hostfile", "latest", "train")
    assert sorted(skipped) == [(name, "not named like a log") for name in names]
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    (row,) = json.loads(out)
    assert (row["status"], row["reason"]) == ("failed", "ValueError: bad shard")


def test_without_verbose_the_walk_says_nothing_and_finds_the_same(capsys, cluttered):
    code, out, err = logstat(capsys, "parse", cluttered, "--format", "json")
    assert code == 0 and len(err.splitlines()) == 2 and _copy_warnings(err) == COPIES
    assert len(json.loads(out)) == 6


def test_find_logs_hands_each_skipped_path_and_reason_to_the_caller(cluttered):
    skipped: list[tuple[str, str]] = []
    found = find_logs([cluttered], skipped=lambda path, why: skipped.append((path.name, why)))
    assert [p.name for p in found] == sorted(p.name for p in SCHEDULERS.iterdir() if p.name != "README.md")
    assert sorted(skipped) == [
        (".git", "hidden directory"),
        (".nfs000000000abc0001", "hidden file"),
        ("README.md", "not named like a log"),
        ("model.pt", "not named like a log"),
        ("pipe.out", "not a regular file"),
        ("shared", "symbolic link to a directory (not followed)"),
    ]


@pytest.mark.parametrize(
    ("name", "job_id"),
    [
        ("slurm-123456.out", "123456"),  # sbatch's default, slurm-%j.out
        ("gpt2-52b-123456.out", "123456"),  # %x-%j.out
        ("123456.out", "123456"),  # -o %j.out
        ("slurm-123456_7.out", "123456_7"),  # an array task, slurm-%A_%a.out: Slurm writes its id so
        ("train-123456_7.err.gz", "123456_7"),
        ("run_2024-01-01.log", None),  # a date, not a job
        ("run.log", None),
        # no extension: LSF's -o name.%J, Slurm's --output=%x.%j or %x-%j (a log of its own)
        ("gpt.123456", "123456"),
        ("gpt2-52b-123456", "123456"),
        ("train.123456_7", "123456_7"),
        ("123456", "123456"),
        ("gpt.123456.gz", "123456"),
    ],
)
def test_the_job_id_of_a_slurm_output_name(name, job_id):
    assert job_id_from_name(Path("/logs") / name) == job_id
    assert is_log_file(Path("/logs") / name) == (job_id is not None or name.endswith(".log"))


def test_one_file_named_two_ways_is_read_once_and_a_pair_named_two_ways_is_one_run(tmp_path, monkeypatch):
    # a relative and an absolute name (or one through ``..``) of one file: the file is read once; a job's
    # .out and .err given so are still one run
    shutil.copytree(SCHEDULERS, tmp_path / "jobs")
    monkeypatch.chdir(tmp_path)
    absolute = tmp_path / "jobs"
    named = ["jobs/slurm-4001.out", absolute / "gpt-4002.out", absolute / "slurm-4001.out"]
    found = find_logs([*named, "jobs/../jobs/slurm-4001.out", "jobs/gpt-4002.out"])
    assert found == [Path("jobs/slurm-4001.out"), absolute / "gpt-4002.out"]
    pair = group_runs([Path("jobs/gpt.4006.stdout"), absolute / "gpt.4006.stderr"])
    assert [run.files for run in pair] == [(Path("jobs/gpt.4006.stdout"), absolute / "gpt.4006.stderr")]


def _iteration(step: int) -> str:
    return (
        f" iteration {step:8d}/      30 | consumed samples: {step * 64:12d} | elapsed time per iteration (ms): "
        "1234.5 | learning rate: 1.000E-04 | global batch size:    64 | lm loss: 7.123456E+00 | loss scale: "
        "4096.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def test_a_rotated_log_is_one_run_read_oldest_first(tmp_path, capsys):
    # logging's RotatingFileHandler and logrotate: train.log is being written, train.log.1 the newest of
    # the rotated ones, train.log.2 older (here compressed)
    root = tmp_path / "run_a"
    root.mkdir()
    for name, steps in (
        ("train.log.2", range(1, 11)),
        ("train.log.1", range(11, 21)),
        ("train.log", range(21, 31)),
    ):
        (root / name).write_text("".join(f"{_iteration(step)}\n" for step in steps))
    with open(root / "train.log.2", "rb") as plain, gzip.open(root / "train.log.2.gz", "wb") as packed:
        packed.write(plain.read())
    (root / "train.log.2").unlink()
    (root / "eval.txt.1").write_text(_iteration(5) + "\n")  # rotated alone: a run of its own
    names = ["train.log", "train.log.1", "train.log.2.gz", "eval.txt.1"]
    assert all(is_log_file(root / name) for name in names)
    groups = group_runs(sorted(root / name for name in names))
    assert [(Path(g.key).name, [p.name for p in g.files]) for g in groups] == [
        ("eval.txt.1", ["eval.txt.1"]),
        ("train.log", ["train.log.2.gz", "train.log.1", "train.log"]),
    ]
    code, out, _ = logstat(capsys, "parse", root, "--iterations", "--format", "json")
    rows = [row for row in json.loads(out) if Path(row["path"]).name == "train.log"]
    assert code == 0 and [row["iteration"] for row in rows] == list(range(1, 31))
    assert [Path(row["source_path"]).name for row in rows[::10]] == [
        "train.log.2.gz",
        "train.log.1",
        "train.log",
    ]


def test_a_log_rotated_by_time_is_one_run_read_oldest_first():
    # TimedRotatingFileHandler: the date (and the hour, minute, second) the file was rotated at
    names = ["train.log", "train.log.2024-05-06", "train.log.2024-05-05", "eval.log.2024-05-06_13-05"]
    names += ["train.log.2024-05-05_23.gz"]
    assert all(is_log_file(Path("/runs") / name) for name in names)
    groups = group_runs([Path("/runs") / name for name in names])
    assert [[p.name for p in g.files] for g in groups] == [
        ["eval.log.2024-05-06_13-05"],
        ["train.log.2024-05-05", "train.log.2024-05-05_23.gz", "train.log.2024-05-06", "train.log"],
    ]


def test_the_files_of_one_jobs_tasks_or_nodes_are_one_run():
    # srun/sbatch --output with %j before a task's (%t) or node's (%N) part: one file per task or node
    names = [
        *("gpt-77001-node01.out", "gpt-77001-node01.err", "gpt-77001-node02.out", "gpt-77001-node02.err"),
        *(
            "bert-77002-0.out",
            "bert-77002-0.err",
            "bert-77002-2.out",
            "bert-77002-10.out",
            "bert-77002-1.out",
        ),
        "bert-77002.out",  # sbatch's own output of the job whose tasks wrote the files above
        *("slurm-77001.out", "slurm-77001.err"),  # the job's own output under Slurm's default name
        # a heterogeneous job's components (%x-%j.het%w... by hand): the job's, read after its own output
        *("train-99001.het0.out", "data-99001.het1.out", "slurm-99001.out"),
        *("77003.gpu-a01.out", "77003.gpu-a02.out"),  # %j.%N
        "slurm-88123_7-node01.out",  # an array task's node
        "88124-gpt3.out",  # %j-%x
        "run-2024-01-01.out",  # a date, no job
        *("exp-2048-ctx.out", "exp-2048-seq.out"),  # a number before words: no job, each a run
        *("gpt2-1558-56789.out", "gpt2-1558-56790.out"),  # a name's number, then the job's: two jobs
        # submitit's <job>_<task>_log (an array task's job id %A_%a)
        *("4243_1_log.out", "4243_0_log.err", "4243_0_log.out", "4244_7_0_log.out", "4244_8_0_log.out"),
    ]
    root = Path("/logs")
    groups = group_runs([root / name for name in names])
    assert [(Path(g.key).name, job_id_from_name(Path(g.key)), [p.name for p in g.files]) for g in groups] == [
        ("4243_0_log.out", "4243", ["4243_0_log.out", "4243_0_log.err", "4243_1_log.out"]),
        ("4244_7_0_log.out", "4244_7", ["4244_7_0_log.out"]),
        ("4244_8_0_log.out", "4244_8", ["4244_8_0_log.out"]),
        ("77003.gpu-a01.out", "77003", ["77003.gpu-a01.out", "77003.gpu-a02.out"]),
        ("88124-gpt3.out", "88124", ["88124-gpt3.out"]),
        (
            "bert-77002.out",
            "77002",
            [
                *("bert-77002.out", "bert-77002-0.out", "bert-77002-0.err", "bert-77002-1.out"),
                *("bert-77002-2.out", "bert-77002-10.out"),
            ],
        ),
        ("exp-2048-ctx.out", None, ["exp-2048-ctx.out"]),
        ("exp-2048-seq.out", None, ["exp-2048-seq.out"]),
        ("gpt2-1558-56789.out", "56789", ["gpt2-1558-56789.out"]),
        ("gpt2-1558-56790.out", "56790", ["gpt2-1558-56790.out"]),
        ("run-2024-01-01.out", None, ["run-2024-01-01.out"]),
        (
            "slurm-77001.out",
            "77001",
            [
                *("slurm-77001.out", "slurm-77001.err"),
                *(
                    "gpt-77001-node01.out",
                    "gpt-77001-node01.err",
                    "gpt-77001-node02.out",
                    "gpt-77001-node02.err",
                ),
            ],
        ),
        ("slurm-88123_7-node01.out", "88123_7", ["slurm-88123_7-node01.out"]),
        ("slurm-99001.out", "99001", ["slurm-99001.out", "data-99001.het1.out", "train-99001.het0.out"]),
    ]


def test_a_tasks_failure_and_another_tasks_steps_are_one_row(tmp_path, capsys):
    # Megatron logs its iterations on the last rank (task 3); task 2 ran out of memory
    (tmp_path / "bert-77002-0.out").write_text("using world size: 4, data-parallel-size: 4\n")
    (tmp_path / "bert-77002-2.err").write_text(
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    step()\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    (tmp_path / "bert-77002-3.out").write_text("".join(f"{_iteration(step)}\n" for step in range(1, 8)))
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 1
    assert (rows[0]["job_id"], rows[0]["status"], rows[0]["iterations"]) == ("77002", "failed", 7)
    assert rows[0]["reason"].startswith("CUDA out of memory")


def test_stdout_and_stderr_files_of_a_directory_are_one_run_and_torchruns_log_dir_too():
    root = Path("/logs")
    names = [
        "91001/stdout.log", "91001/stderr.log",  # a job's directory (--output=logs/%j/stdout.log)
        "manual/stderr.txt", "manual/stdout.txt",
        # torchrun --log-dir (torch/distributed/elastic/multiprocessing/api.py): <log_dir>/<rdzv_run_id>_<tmp>/
        # attempt_<restart>/<local_rank>/{stdout,stderr}.log; a restart is attempt_1
        *(f"tr/91003_k2j3h4xy/attempt_{a}/{r}/{s}.log" for a in (1, 0) for r in (1, 0) for s in ("stderr", "stdout")),
        "tr/91003_k2j3h4xy/attempt_0/filtered_stdout.log",  # a copy of the ranks' lines
        "tr/run_ab12cd34/attempt_0/0/stdout.log",  # a run id that is no job id
    ]  # fmt: skip
    paths = [root / name for name in names]
    assert not is_log_file(root / "tr/91003_k2j3h4xy/attempt_0/filtered_stdout.log")
    groups = group_runs([path for path in paths if is_log_file(path)])
    assert [(str(Path(g.key).relative_to(root)), job_id_from_name(Path(g.key))) for g in groups] == [
        ("91001/stdout.log", "91001"),
        ("manual/stdout.txt", None),
        ("tr/91003_k2j3h4xy/attempt_0/0/stdout.log", "91003"),
        ("tr/run_ab12cd34/attempt_0/0/stdout.log", None),
    ]
    assert [str(p.relative_to(root)) for p in groups[2].files] == [
        f"tr/91003_k2j3h4xy/attempt_{a}/{r}/{s}.log"
        for a in (0, 1)
        for r in (0, 1)
        for s in ("stdout", "stderr")
    ]
    assert [p.name for p in groups[0].files] == ["stdout.log", "stderr.log"]


def test_the_job_whose_torchrun_agent_set_up_a_log_directory_is_one_run_with_it(tmp_path, capsys):
    # torchrun --log-dir --redirects 3: the ranks' lines in <log_dir>/<run id>_<8>/attempt_0/<rank>/, the
    # agent's in the job's output (torch/distributed/elastic/multiprocessing/api.py names the directory);
    # the job's .err holds Slurm's time limit. A copy of the tree elsewhere is a run of its own.
    agent = "I0606 06:00:00.305000 5512 torch/distributed/elastic/multiprocessing/api.py:280] log directory"
    for job, copy in (("train-5522", tmp_path / "job"), ("train-5523", tmp_path / "copy")):
        ranks = copy / "torchlogs" / "none_3zq1k0pd" / "attempt_0"
        for rank in (0, 1):
            (ranks / str(rank)).mkdir(parents=True)
            for stream in ("stdout", "stderr"):
                (ranks / str(rank) / f"{stream}.log").write_text("")
        (ranks / "1" / "stdout.log").write_text("".join(f"{_iteration(step)}\n" for step in range(1, 8)))
        set_to = f"{agent} set to: /cluster/runs/{job}/torchlogs/none_3zq1k0pd\n"
        (copy / f"{job}.out").write_text(
            f"+ torchrun --nproc_per_node 2 --log-dir torchlogs pretrain.py\n{set_to}"
        )
        (copy / f"{job}.err").write_text(
            f"slurmstepd: error: *** JOB {job[-4:]} ON gpu7 CANCELLED AT 2024-06-06T08:00:00 DUE TO TIME LIMIT ***\n"
        )
    groups = group_runs(find_logs([tmp_path]))
    assert [[str(path.relative_to(tmp_path)) for path in group.files] for group in groups] == [
        [
            *(f"copy/torchlogs/none_3zq1k0pd/attempt_0/{rank}/{stream}.log" for rank in (0, 1) for stream in ("stdout", "stderr")),
            "copy/train-5523.out",
            "copy/train-5523.err",
        ],
        [
            *(f"job/torchlogs/none_3zq1k0pd/attempt_0/{rank}/{stream}.log" for rank in (0, 1) for stream in ("stdout", "stderr")),
            "job/train-5522.out",
            "job/train-5522.err",
        ],
    ]  # fmt: skip
    code, out, _ = logstat(capsys, "parse", tmp_path / "job", "--format", "json")
    rows = json.loads(out)
    assert code == 0 and [row["path"] for row in rows] == [str(tmp_path / "job" / "train-5522.out")]
    assert (rows[0]["job_id"], rows[0]["iterations"], rows[0]["last_iteration"]) == ("5522", 7, 7)
    assert rows[0]["status"] == "timeout" and rows[0]["reason"].startswith("time limit")


def test_submitits_hidden_job_folder_is_walked(tmp_path):
    # Hydra's submitit launcher: <sweep>/.submitit/<job>/<job>_<task>_log.{out,err} and its pickles
    folder = tmp_path / "multirun" / ".submitit" / "4242"
    folder.mkdir(parents=True)
    for name in ("4242_0_log.out", "4242_0_log.err", "4242_submitted.pkl"):
        (folder / name).write_text("submitit INFO (2024-03-01 10:00:00,000) - Starting\n")
    (tmp_path / "multirun" / ".git").mkdir()
    (tmp_path / "multirun" / ".git" / "HEAD.out").write_text("ref: refs/heads/main\n")
    skipped = []
    found = find_logs([tmp_path / "multirun"], skipped=lambda path, why: skipped.append((path.name, why)))
    assert [path.name for path in found] == ["4242_0_log.err", "4242_0_log.out"]
    assert skipped == [(".git", "hidden directory"), ("4242_submitted.pkl", "not named like a log")]


def test_nemo_exp_managers_files_are_one_run_and_its_records_of_the_command_and_git_no_logs(tmp_path):
    # nemo_experiments/<name>/<time>/: each rank's NeMo log, Lightning's, the errors; the command line and
    # the git state it records; a tokenizer's files beside a model
    run_dir = tmp_path / "nemo_experiments" / "megatron_gpt" / "2024-03-01_10-00-00"
    run_dir.mkdir(parents=True)
    names = [
        "nemo_log_globalrank-10_localrank-2.txt",
        "nemo_log_globalrank-0_localrank-0.txt",
        "nemo_log_globalrank-2_localrank-0.txt",
        "nemo_error_log.txt",
        "lightning_logs.txt",
        "cmd-args.log",
        "git-info.log",
        "merges.txt",
    ]
    for name in names:
        (run_dir / name).write_text(
            "[NeMo I 2024-03-01 10:00:00 exp_manager:394] Experiments will be logged\n"
        )
    skipped = []
    found = find_logs([tmp_path], skipped=lambda path, why: skipped.append(path.name))
    assert sorted(skipped) == ["cmd-args.log", "git-info.log", "merges.txt"]
    assert [[path.name for path in group.files] for group in group_runs(found)] == [
        [
            "nemo_log_globalrank-0_localrank-0.txt",
            "nemo_log_globalrank-2_localrank-0.txt",
            "nemo_log_globalrank-10_localrank-2.txt",
            "lightning_logs.txt",
            "nemo_error_log.txt",
        ]
    ]


@pytest.mark.parametrize(
    ("named", "partner"),
    [
        ("oom-1001.out", "oom-1001.err"),
        ("oom-1001.err", "oom-1001.out"),
        ("gpt.4006.stdout", "gpt.4006.stderr"),
        ("pretrain_gpt.e4003", "pretrain_gpt.o4003"),
        ("logs/stdout.log", "logs/stderr.log"),
        ("oom-1001.out.gz", "oom-1001.err"),
    ],
)
def test_a_jobs_file_named_alone_is_read_with_its_other_stream_beside_it(tmp_path, named, partner):
    for source in ("slurm/oom-1001.out", "slurm/oom-1001.err", "schedulers/gpt.4006.stdout"):
        shutil.copy(FIXTURES / source, tmp_path)
    for source in (
        "schedulers/gpt.4006.stderr",
        "schedulers/pretrain_gpt.e4003",
        "schedulers/pretrain_gpt.o4003",
    ):
        shutil.copy(FIXTURES / source, tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/stdout.log").write_text("step 1\n")
    (tmp_path / "logs/stderr.log").write_text("error\n")
    if named.endswith(".gz"):
        compressed = gzip.compress((tmp_path / "oom-1001.out").read_bytes())
        (tmp_path / "oom-1001.out").rename(tmp_path / named)
        (tmp_path / named).write_bytes(compressed)
    assert find_logs([tmp_path / named]) == [tmp_path / named, tmp_path / partner]


def test_a_job_named_by_its_output_file_fails_as_its_error_file_says(capsys):
    # the job's .out stops after iteration 2; why is only in its .err
    code, out, _ = logstat(capsys, "parse", FIXTURES / "slurm/oom-1001.out", "--format", "json")
    [row] = json.loads(out)
    assert code == 0 and (row["status"], row["iterations"]) == ("failed", 2)
    assert row["reason"].startswith("CUDA out of memory") and row["reason_path"].endswith("oom-1001.err")
    assert [Path(path).name for path in row["paths"]] == ["oom-1001.out", "oom-1001.err"]


def test_a_directory_the_walk_cannot_list_is_said_without_verbose(tmp_path, capsys, monkeypatch):
    # its logs are missing from the table: said on stderr, as the rest passed over is not. Root lists any
    # directory (the suite may run as root), so the walk's listing of this one fails as it would for a user
    for name in ("readable", "locked"):
        (tmp_path / name).mkdir()
        shutil.copy(FIXTURES / "megatron" / "meg_gpt2_perf_n16.out", tmp_path / name / f"{name}-1.out")
    scandir = os.scandir

    def refused(path="."):
        if Path(path) == tmp_path / "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    monkeypatch.setattr(os, "scandir", refused)
    code, out, err = logstat(capsys, "parse", tmp_path)
    assert code == 0 and "readable-1.out" in out and "locked-1.out" not in out
    assert (
        err
        == f"warning: {tmp_path / 'locked'}: cannot list: Permission denied: the logs in it are not read\n"
    )


@pytest.mark.parametrize(
    ("suffix", "magic", "reason"),
    [
        (".zst", b"\x28\xb5\x2f\xfd", "zstd-compressed: logstat does not read it (decompress it first)"),
        (".lz4", b"\x04\x22\x4d\x18", "lz4-compressed: logstat does not read it (decompress it first)"),
        # a zip is an archive (one that cannot be listed names no file)
        (".zip", b"PK\x03\x04", "a zip archive: logstat does not read archives (extract it first)"),
    ],
)
def test_a_log_compressed_as_logstat_cannot_read_is_a_row_saying_so_not_passed_over(
    tmp_path, capsys, suffix, magic, reason
):
    (tmp_path / f"train-1.out{suffix}").write_bytes(magic + bytes(200))
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    [row] = json.loads(out)
    assert (code, row["status"], row["reason"]) == (0, "unreadable", reason)


def test_a_logging_services_json_export_is_a_log_and_other_json_is_not(tmp_path):
    # Cloud Logging's export (an entry a line, or the console's pretty-printed download), docker's
    # json-file log; a DeepSpeed config and a Trainer's state are JSON of another kind
    exports = {
        "export.jsonl": '{"textPayload": "iteration 3", "severity": "INFO"}\n',
        "downloaded-logs-20241202.json": '[\n  {\n    "insertId": "x1",\n    "textPayload": "iteration 3",\n',
        "events.ndjson": '{"log":"iteration 3\\n","stream":"stdout","time":"2024-06-01T10:00:09Z"}\n',
        "ds_config.json": '{\n  "train_batch_size": 64,\n  "zero_optimization": {"stage": 3}\n}\n',
        "trainer_state.json": '{"log_history": [{"loss": 2.3, "step": 10}], "message": "x"}\n',
    }
    for name, text in exports.items():
        (tmp_path / name).write_text(text)
    passed = []
    found = find_logs([tmp_path], skipped=lambda path, reason: passed.append((path.name, reason)))
    assert sorted(path.name for path in found) == [
        "downloaded-logs-20241202.json",
        "events.ndjson",
        "export.jsonl",
    ]
    assert sorted(passed) == [
        ("ds_config.json", "not named like a log"),
        ("trainer_state.json", "not named like a log"),
    ]


def test_a_sweeps_own_plan_is_no_log(tmp_path):
    # `logstat sweep` writes sweep.json and plan.txt (the plan it printed) beside the points' run directories
    sweep = tmp_path / "runs" / "gpt2-tiny-ddp-powersgd" / "sweep-20260101T000000Z-abc123"
    (sweep / "00").mkdir(parents=True)
    (sweep / "sweep.json").write_text("{}")
    (sweep / "plan.txt").write_text("point  task  batch.micro  GPUs\n    0     0            1     2  kept\n")
    (sweep / "00" / "train.log").write_text("step 1\n")
    (tmp_path / "plan.txt").write_text("a user's notes named like a log: read\n")
    skipped = []
    found = find_logs([tmp_path], skipped=lambda path, why: skipped.append((path.name, why)))
    assert ("plan.txt", "logstat sweep's plan") in skipped
    assert sorted(path.relative_to(tmp_path).as_posix() for path in found) == [
        "plan.txt",
        "runs/gpt2-tiny-ddp-powersgd/sweep-20260101T000000Z-abc123/00/train.log",
    ]


def test_the_ranks_or_pods_own_logs_of_one_prefix_are_one_run():
    # DeepSpeed's launcher --enable_each_rank_log: {%Y%m%d%H%M%S}_rank{N}.log, one prefix a launch; a script's
    # rank{N}.log; rank 0's is the run's main file, the ranks in order
    names = [
        *(f"20240312101530_rank{rank}.log" for rank in (10, 2, 0, 1)),
        *(f"20240312143002_rank{rank}.log" for rank in (1, 0)),
        *("rank1.log", "rank0.log", "train_rank0.txt", "cranky.log"),
        # a script's redirect of each node's launcher
        *("node1.log", "node0.log"),
        # AzureML's user_logs/std_log_process_<rank>.txt; a Kubeflow PyTorchJob's and MPIJob's pods
        *("std_log_process_01.txt", "std_log_process_00.txt"),
        *("ft-worker-1.log", "ft-master-0.log", "ft-worker-0.log", "mpi-worker-0.log", "mpi-launcher.log"),
    ]
    groups = group_runs([Path("/runs/logs") / name for name in names])
    assert [[p.name for p in g.files] for g in groups] == [
        [f"20240312101530_rank{rank}.log" for rank in (0, 1, 2, 10)],
        ["20240312143002_rank0.log", "20240312143002_rank1.log"],
        ["cranky.log"],
        ["ft-master-0.log", "ft-worker-0.log", "ft-worker-1.log"],
        ["mpi-launcher.log", "mpi-worker-0.log"],
        ["node0.log", "node1.log"],
        ["rank0.log", "rank1.log"],
        ["std_log_process_00.txt", "std_log_process_01.txt"],
        ["train_rank0.txt"],
    ]


def test_a_jobs_streams_named_by_a_word_of_their_own_are_one_run():
    # sbatch --output=out-%j.log --error=err-%j.log, %x_%j_stdout.txt, output_%j.log / error_%j.log
    names = ["err-2290017.log", "out-2290017.log", "ft_77_stderr.txt", "ft_77_stdout.txt"]
    names += ["error_5.log", "output_5.log", "output_6.log", "outlier-3.log", "err.log", "out.log"]
    groups = group_runs([Path("/runs/logs") / name for name in names])
    assert [[p.name for p in g.files] for g in groups] == [
        ["err.log"],
        ["ft_77_stdout.txt", "ft_77_stderr.txt"],
        ["out-2290017.log", "err-2290017.log"],
        ["out.log"],
        ["outlier-3.log"],
        ["output_5.log", "error_5.log"],
        ["output_6.log"],
    ]


@pytest.mark.parametrize("named", ["out-2290017.log", "err-2290017.log.gz"])
def test_a_stream_named_by_its_word_alone_brings_the_other(tmp_path, named):
    for name in ("out-2290017.log", "err-2290017.log.gz"):
        (tmp_path / name).write_text("")
    partner = ({"out-2290017.log", "err-2290017.log"} - {named.removesuffix(".gz")}).pop()
    assert [path.name for path in find_logs([tmp_path / named])][1].startswith(partner)


def test_a_directorys_only_batch_output_is_one_run_with_its_only_other_log(tmp_path, capsys):
    # a job's script tees its training into train.log beside slurm-%j.out, or its ranks each write
    # rank<N>.log: the job's, whose else; read after the job's own output (which holds the whole job's
    # words, its restarts' too). Not with two batch outputs (whose log?), nor beside two logs (which one?).
    cases = {
        "ranks": ["slurm-31337.out", "rank1.log", "rank0.log"],
        "tee": ["slurm-1122334.out", "slurm-1122334.err", "train.log", "train.log.1"],
        "two_jobs": ["slurm-31337.out", "slurm-31338.out", "rank0.log"],
        "two_logs": ["slurm-31337.out", "train_rank0.log", "eval_rank0.log"],
    }
    paths = [Path("/runs") / case / name for case, names in cases.items() for name in names]
    assert [[f"{p.parent.name}/{p.name}" for p in g.files] for g in group_runs(paths)] == [
        ["ranks/slurm-31337.out", "ranks/rank0.log", "ranks/rank1.log"],
        ["tee/slurm-1122334.out", "tee/slurm-1122334.err", "tee/train.log.1", "tee/train.log"],
        ["two_jobs/rank0.log"],
        ["two_jobs/slurm-31337.out"],
        ["two_jobs/slurm-31338.out"],
        ["two_logs/eval_rank0.log"],
        ["two_logs/slurm-31337.out"],
        ["two_logs/train_rank0.log"],
    ]
    # alone in its directory, with the ranks' logs the only logs below it (srun ... > ranks/rank$N.log); not
    # with two runs below, nor with a log of its own beside it (the tee's, above)
    below = {
        "sweep/mbs1": ["slurm-4410301.out", "ranks/rank1.log", "ranks/rank0.log"],
        "sweep/mbs2": ["slurm-4410302.out", "ranks/rank0.log", "eval/rank0.log"],
        "sweep/mbs3": ["slurm-4410303.out", "notes.log", "ranks/rank0.log"],
    }
    paths = [Path("/runs") / case / name for case, names in below.items() for name in names]
    assert [[str(p.relative_to("/runs/sweep")) for p in g.files] for g in group_runs(paths)] == [
        ["mbs1/slurm-4410301.out", "mbs1/ranks/rank0.log", "mbs1/ranks/rank1.log"],
        ["mbs2/eval/rank0.log"],
        ["mbs2/ranks/rank0.log"],
        ["mbs2/slurm-4410302.out"],
        ["mbs3/ranks/rank0.log"],
        ["mbs3/slurm-4410303.out", "mbs3/notes.log"],
    ]
    (tmp_path / "train.log").write_text("".join(f"{_iteration(step)}\n" for step in range(1, 6)))
    limit = (
        "slurmstepd: error: *** JOB 1122334 ON gpu7 CANCELLED AT 2025-02-03T08:00:00 DUE TO TIME LIMIT ***"
    )
    (tmp_path / "slurm-1122334.out").write_text(f"{limit}\n")
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    (row,) = json.loads(out)
    assert (code, Path(row["path"]).name, row["job_id"]) == (0, "slurm-1122334.out", "1122334")
    assert (row["status"], row["iterations"], row["last_iteration"]) == ("timeout", 5, 5)


def test_a_restarting_jobs_logs_named_by_its_id_are_one_run_failing_as_the_last_restart_did(tmp_path, capsys):
    # the script starts a restart after each preemption, each writing llama-<job>-r<N>.log; the job's own
    # output holds the preemptions of the restarts before (read first: a launch after them makes them
    # earlier attempts'): the last restart's failure is the run's
    preempted = (
        "slurmstepd: error: *** JOB 8899001 ON nid0{} CANCELLED AT 2024-07-01T0{}:11:13 DUE TO PREEMPTION ***"
    )
    script = [
        f"[restart {n}] writing to logs/llama-8899001-r{n}.log\n{preempted.format(n, n)}" for n in (0, 1)
    ]
    exited = "srun: error: nid0: task 0: Exited with exit code 1"
    (tmp_path / "slurm-8899001.out").write_text("\n".join([*script, "[restart 2] writing", exited, ""]))
    for restart, steps in enumerate((range(1, 4), range(3, 7), range(6, 9))):
        launch = "------------------------ arguments ------------------------\n  seq_length ..... 2048\n"
        launch += "-------------------- end of arguments ---------------------\n"  # Megatron's: a launch
        lines = "".join(f"{_iteration(step)}\n" for step in steps)
        (tmp_path / f"llama-8899001-r{restart}.log").write_text(launch + lines)
    quota = "OSError: [Errno 122] Disk quota exceeded"
    with (tmp_path / "llama-8899001-r2.log").open("a") as log:
        log.write(
            f'Traceback (most recent call last):\n  File "pretrain_gpt.py", line 3, in <module>\n{quota}\n'
        )
    code, out, _ = logstat(capsys, "parse", tmp_path, "--format", "json")
    (row,) = json.loads(out)
    assert (code, Path(row["path"]).name, len(row["paths"])) == (0, "slurm-8899001.out", 4)
    assert (row["status"], row["reason"], row["iterations"], row["last_iteration"]) == ("failed", quota, 8, 8)


def _deepspeed_launch(at: str, ranks: int, log_dir: str) -> str:
    """DeepSpeed's runner and launcher lines of a launch with --enable_each_rank_log (runner.py, launch.py)."""
    cmd = f"-m deepspeed.launcher.launch --world_info=e30= --enable_each_rank_log={log_dir} train.py"
    spawned = "[launch.py:256:main] process {pid} spawned with command: ['python', '-u', 'train.py', '--local_rank={rank}']"
    return "".join(
        [
            f"[{at},681] [INFO] [runner.py:568:main] cmd = /usr/bin/python -u {cmd}\n",
            *(f"[{at},887] [INFO] {spawned.format(pid=5120 + rank, rank=rank)}\n" for rank in range(ranks)),
        ]
    )


def test_deepspeeds_launcher_output_is_one_run_with_the_rank_logs_it_spawned(tmp_path, capsys):
    # deepspeed/launcher/launch.py: <dir>/{time.strftime("%Y%m%d%H%M%S")}_rank{N}.log, the prefix taken the
    # second it spawns the ranks; the job's output has the flag and the spawns. Two launches in one
    # directory each find their own; a copy of the tree elsewhere is a run of its own.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity"
    for copy in ("job", "copy"):
        logs = tmp_path / copy / "rank_logs"
        logs.mkdir(parents=True)
        for prefix, job, at in (
            ("20240312101529", 5566, "2024-03-12 10:15:29"),
            ("20240312143002", 5567, "2024-03-12 14:30:02"),
        ):
            for rank in (0, 1):
                steps = "".join(f"{_iteration(step)}\n" for step in range(1, 5)) if rank == 0 else ""
                failure = f"{oom}\n" if rank == 1 and job == 5566 else ""
                (logs / f"{prefix}_rank{rank}.log").write_text(steps + failure)
            exits = "[2024-03-12 10:20:11,174] [ERROR] [launch.py:331:sigkill_handler] ['python'] exits with return code = 1\n"
            (tmp_path / copy / f"slurm-{job}.out").write_text(_deepspeed_launch(at, 2, "rank_logs") + exits)
    (tmp_path / "job" / "rank_logs" / "20240101000000_rank0.log").write_text(f"{_iteration(1)}\n")
    groups = group_runs(find_logs([tmp_path]))
    assert [[str(path.relative_to(tmp_path)) for path in group.files] for group in groups] == [
        ["copy/rank_logs/20240312101529_rank0.log", "copy/rank_logs/20240312101529_rank1.log", "copy/slurm-5566.out"],
        ["copy/rank_logs/20240312143002_rank0.log", "copy/rank_logs/20240312143002_rank1.log", "copy/slurm-5567.out"],
        ["job/rank_logs/20240101000000_rank0.log"],
        ["job/rank_logs/20240312101529_rank0.log", "job/rank_logs/20240312101529_rank1.log", "job/slurm-5566.out"],
        ["job/rank_logs/20240312143002_rank0.log", "job/rank_logs/20240312143002_rank1.log", "job/slurm-5567.out"],
    ]  # fmt: skip
    code, out, _ = logstat(
        capsys,
        "parse",
        tmp_path / "job" / "slurm-5566.out",
        tmp_path / "job" / "rank_logs",
        "--format",
        "json",
    )
    rows = {Path(row["path"]).name: row for row in json.loads(out)}
    assert code == 0 and set(rows) == {
        "20240101000000_rank0.log",
        "20240312143002_rank0.log",
        "slurm-5566.out",
    }
    failed = rows["slurm-5566.out"]
    assert (failed["status"], failed["iterations"], failed["last_iteration"]) == ("failed", 4, 4)
    assert failed["reason"].startswith("CUDA OOM") or "CUDA out of memory" in failed["reason"]

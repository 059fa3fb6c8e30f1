"""Files -> runs -> frames: group a job's files, stream their lines through the families, build rows.

A batch job's output and error files (same stem, same directory) are one run, read output first, so the
iterations of the one and the failure in the other are one row: Slurm ``%x-%j.out``/``.err``, LSF
``*.stdout``/``*.stderr``, PBS/Torque and SGE ``name.o12345``/``name.e12345`` (an array task adds ``.3``,
Torque ``-3``; SGE's ``name.po12345``/``.pe12345`` too). So are the files of a job's tasks or nodes (Slurm's
``%x-%j-%t.out``, ``%x-%j-%N.out``), a directory's ``stdout.log`` and ``stderr.log`` (the directory named
after the job), the attempts and ranks of a torchrun ``--log-dir`` run, and the ranks' own logs of one
prefix (DeepSpeed's ``--enable_each_rank_log``: ``20240312101530_rank3.log``, with the job output whose
launcher spawned them; ``rank3.log``). Any other log (``*.log``,
``*.txt``, a name that ends with a job id: ``train.123456``) is one run, with its rotated files
(``train.log.2.gz``, ``train.log.1``, read before it, the oldest first).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path

import polars as pl
from logstat.parsers import engine, manifest, registry
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import order_key
from logstat.parsers.records import Plan
from logstat.parsers.schema import ITERATIONS_SCHEMA, RUNS_SCHEMA, TIMERS_SCHEMA
from logstat.parsers.settle import declared_facts, settle_runs
from logstat.parsers.source import SourceReport, path_text
from logstat.parsers.source import head as source_head

#: suffix -> (naming convention, order): a job's output (0) and error (1) file of one convention and
#: one stem are one run (``.out`` pairs with ``.err``, ``.stdout`` with ``.stderr``).
STREAM_SUFFIXES = {".out": ("out", 0), ".err": ("out", 1), ".stdout": ("stdout", 0), ".stderr": ("stdout", 1)}
SINGLE_SUFFIXES = (".log", ".txt")
LOG_SUFFIXES = (*STREAM_SUFFIXES, *SINGLE_SUFFIXES)
# Slurm's %j at the end of the name (``slurm-123456``, ``name-123456``, or the whole stem ``123456``), an
# array task's %A_%a (``slurm-123456_7``); not the day of a date (``run_2024-01-01``)
_JOB_ID_IN_NAME = re.compile(r"(?:^|(?<!\d{4}-\d{2})[-_.])(\d{2,}(?:_\d+)?)$")
# Slurm's %j (or %A_%a) before a task's part (%t: ``gpt-77001-3``) or a node's (%N: ``gpt-77001-node01``,
# ``77003.gpu-a01``: a host name ends with a digit): one job's files, one per task or node. Not an array
# task's ``_7`` (``slurm-1240_7``), a year before its month (``run-2024-01``), a number before words
# (``exp-2048-ctx``)
_JOB_THEN_PART = re.compile(
    r"(?P<job_stem>(?:.*[-_.])?(?P<job>(?!(?:19|20)\d\d[-_.](?:0[1-9]|1[0-2])$)\d{4,}(?:_\d+)?))"
    r"(?P<part>[-.]\d{1,5}|[-_.][A-Za-z][\w-]*\d)"
)
#: submitit's ``<job id>_<task>_log.out`` (its job id an array task's ``%A_%a`` when it is one)
_SUBMITIT_TASK = re.compile(r"(?P<job_stem>(?P<job>\d+(?:_\d+)?))(?P<part>_\d+)_log")
# PBS / SGE job output: ``<name>.o<job>`` (``e`` for errors, ``po``/``pe`` for SGE's parallel environment),
# an array task's index after the job number (``.3``; Torque ``-3``).
_SCHEDULER_STREAM = re.compile(r"(?P<stem>.+)\.(?P<stream>p?[oe])(?P<job>\d+(?:[.-]\d+)?)")
_SCHEDULER_STREAM_ORDER = {"o": 0, "e": 1, "po": 2, "pe": 3}
#: a rotated log (logging's RotatingFileHandler, logrotate): ``train.log.1`` the newest rotated out of
#: ``train.log``, ``train.log.2`` the one before; or by time (TimedRotatingFileHandler: ``train.log.2024-05-06``,
#: by the hour ``.2024-05-06_13``, the minute, the second); one run with its current file, read oldest first
_ROTATED = re.compile(
    r"(?P<base>.+(?:\.log|\.txt))\.(?:(?P<number>[1-9]\d{0,2})"
    r"|(?P<date>\d{4}-\d{2}-\d{2}(?:_\d{2}(?:-\d{2}){0,2})?))"
)
#: a rotated file's order by its time: before the current file's (0), the oldest first
_ROTATED_AT = 10**14
#: a name that is a job id, or ends with one after ``.``, ``-`` or ``_`` and no extension: LSF's ``-o
#: name.%J``, Slurm's ``--output=%x.%j`` or ``%x-%j`` (an array task's ``%A_%a``); one log each. Not a
#: core dump's ``core.<pid>``
_JOB_NAMED = re.compile(r"(?!core\.)(?:.*[._-])?(?P<job>\d{4,}(?:_\d+)?)")


@dataclass(frozen=True, kw_only=True)
class RunFiles:
    """The files of one run."""

    key: str
    """The run's main log file (its ``.out`` when a job has both): the ``path`` column."""
    files: tuple[Path, ...]
    """Every file read for the run, main file first."""


@dataclass
class RunResult:
    """A run after reading: its builder plus what reading its files found out."""

    run: RunBuilder
    files: RunFiles
    reports: list[SourceReport] = field(default_factory=list)
    family: str = "unknown"
    families: list[str] = field(default_factory=list)


#: compressed forms of a log the reader opens (by content; the name only says it is a log): zstd, lz4 and
#: zip it cannot decompress, and names so (its row says to decompress it), not passed over unseen
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".lz4", ".zip")


def _uncompressed_name(path: Path) -> str:
    """The file name with ``.gz``/``.xz``/``.bz2`` looked through: ``job-12.out.gz`` -> ``job-12.out``."""
    return path.name.rpartition(".")[0] if path.name.endswith(COMPRESSED_SUFFIXES) else path.name


def _base(path: Path) -> tuple[str, str]:
    """``(stem, suffix)`` of the uncompressed name: ``job-12.out.gz`` -> ``("job-12", ".out")``."""
    stem, dot, suffix = _uncompressed_name(path).rpartition(".")
    return (stem, "." + suffix) if dot else (suffix, "")


def _scheduler_stream(path: Path) -> re.Match[str] | None:
    """The name of a PBS or SGE job's output or error file, split (``stem``, ``stream``, ``job``)."""
    return _SCHEDULER_STREAM.fullmatch(_uncompressed_name(path))


#: what a program names the session it records, with no suffix: ``script``'s (util-linux) default file
SESSION_RECORDS = frozenset({"typescript"})


def is_log_file(path: Path) -> bool:
    """Whether a file found while walking a directory looks like a log (by its name)."""
    if path.name in _TORCHRUN_COPIES and _ATTEMPT.fullmatch(path.parent.name):
        return False
    return (
        _base(path)[1] in LOG_SUFFIXES
        or _uncompressed_name(path) in SESSION_RECORDS
        or _scheduler_stream(path) is not None
        or _job_named(path) is not None
        or _ROTATED.fullmatch(_uncompressed_name(path)) is not None
    )


#: a logging service's export of a job's lines, a JSON entry a line (Google Cloud Logging's ``textPayload``,
#: ``jsonPayload``; docker's json-file driver's ``log`` and ``stream``) or pretty-printed (its text field's
#: ``"textPayload": "...``, CloudWatch's ``"message": "...``): read as the text each holds
STRUCTURED_SUFFIXES = (".json", ".jsonl", ".ndjson")
_STRUCTURED_KEYS = re.compile(
    rb'^(?:\{(?:[^\n]*"(?:textPayload|jsonPayload)": |"log": ?"[^\n]*"stream": ?")|\s*"(?:textPayload|message)": ")'
)
_STRUCTURED_HEAD_BYTES = 1 << 14


def is_structured_log(path: Path) -> bool:
    """Whether a JSON file is a logging service's export of a job's lines (by its first lines)."""
    if _base(path)[1] not in STRUCTURED_SUFFIXES:
        return False
    return any(
        _STRUCTURED_KEYS.match(line) for line in source_head(path, _STRUCTURED_HEAD_BYTES).splitlines()[:40]
    )


#: a log saved under a name with no suffix (``kubectl logs pod > worker-0``, XPK's
#: ``main_command_log_slice_0_worker_0``): what its head holds makes it one, a line only a run prints (a loss's
#: value, a traceback, torch's launcher, HF's training banner, a step's report), never what a script, a
#: hostfile or DeepSpeed's ``latest`` holds
_UNNAMED_LOG_LINES = re.compile(
    rb"\bloss\b[\"']?\s*[=:]\s*[-+]?\d|^Traceback \(most recent call last\):|torch/distributed/run\.py:\d"
    rb"|\*{5} Running training \*{5}|\b(?:step|iteration|iter)[ =:]+\d+\b.*\bloss",
    re.MULTILINE,
)
_UNNAMED_HEAD_BYTES = 1 << 16


def is_unnamed_log(path: Path) -> bool:
    """Whether a file with no suffix is a log (by its head: ``_UNNAMED_LOG_LINES``)."""
    if "." in path.name:
        return False
    data = source_head(path, _UNNAMED_HEAD_BYTES)
    return b"\x00" not in data and _UNNAMED_LOG_LINES.search(data) is not None


def _job_named(path: Path) -> re.Match[str] | None:
    """The name of a job's output named after its id alone (``train.123456``), split (``job``)."""
    return _JOB_NAMED.fullmatch(_uncompressed_name(path))


def _job_stream(path: Path) -> tuple[tuple[str, str, str], tuple] | None:
    """``((directory, convention, stem), order)`` of a job stream file or a rotated log's, None for a log of
    its own: files with the same key are one run's, read in ``order`` (the job's own output first, then its
    tasks' or nodes' files in their order, each output first; the oldest rotated first, the current file
    last; torchrun's attempts and ranks in their order). ``directory``: absolute, however ``path`` is
    written."""
    directory, (stem, suffix), name = os.path.abspath(path.parent), _base(path), _uncompressed_name(path)
    if stdio := _STDIO.fullmatch(name):
        order = 0 if stdio["stream"] == "stdout" else 1
        if rank := _torchrun_rank(path):  # <run>/attempt_<n>/<rank>/: the run's
            return (os.path.dirname(os.path.dirname(directory)), TORCHRUN, ""), (rank, order)
        return (directory, "stdio", stdio["extension"]), ((), order)
    if nemo := _NEMO_EXP_LOG.fullmatch(name):  # the directory's: NeMo's exp_manager's
        rank = nemo["rank"]
        return (directory, NEMO_EXP, ""), ((0, int(rank)) if rank else (1, nemo[0]), 0)
    if suffix in STREAM_SUFFIXES:
        convention, order = STREAM_SUFFIXES[suffix]
        if part := _task_part(stem):
            return (directory, convention, part["job_stem"]), (_natural(part["part"]), order)
        return (directory, convention, stem), ((), order)
    if ranked := _RANK_LOG.fullmatch(name):
        key = ranked["prefix"] + ranked["word"] + ranked["extension"]
        return (directory, RANKS, key), ((int(ranked["rank"]),), 0)
    if pod := _POD_LOG.fullmatch(name):
        order = (_POD_ROLES.index(pod["role"]), int(pod["index"] or 0))
        return (directory, RANKS, pod["job"] + pod["extension"]), (order, 0)
    if stream := _STREAM_WORD.fullmatch(name):
        key = f"{stream['before']}{{}}{stream['after']}"
        return (directory, "stream word", key), ((), int(stream["stream"] in _ERROR_WORDS))
    if suffix in SINGLE_SUFFIXES:
        return (directory, ROTATED, name), ((), 0)
    if rotated := _ROTATED.fullmatch(name):
        if rotated["date"]:
            rotated_at = int(re.sub(r"\D", "", rotated["date"]).ljust(14, "0"))
            return (directory, ROTATED, rotated["base"]), ((), rotated_at - _ROTATED_AT)
        return (directory, ROTATED, rotated["base"]), ((), -int(rotated["number"]))
    match = _scheduler_stream(path)
    if match is None:
        return None
    return (directory, "scheduler", f"{match['stem']}.{match['job']}"), (
        (),
        _SCHEDULER_STREAM_ORDER[match["stream"]],
    )


#: a job stream's other stream, by the part of its name that says which: ``.out`` <-> ``.err``, ``.stdout``
#: <-> ``.stderr``, ``stdout.log`` <-> ``stderr.log``, PBS/SGE ``.o<job>`` <-> ``.e<job>``
_OTHER_STREAM = {
    suffix: other
    for suffix, (convention, order) in STREAM_SUFFIXES.items()
    for other, (its_convention, its_order) in STREAM_SUFFIXES.items()
    if its_convention == convention and its_order != order
}
_OTHER_STDIO = {"stdout": "stderr", "stderr": "stdout"}
_OTHER_SCHEDULER_STREAM = {"o": "e", "e": "o", "po": "pe", "pe": "po"}


def stream_partners(path: Path) -> list[Path]:
    """The files beside ``path`` holding its job's other stream (its error file for an output file, and the
    other way round), compressed or not: what a run of the job named by one of its files also reads."""
    name = _uncompressed_name(path)
    stem, suffix = _base(path)
    if stdio := _STDIO.fullmatch(name):
        other = _OTHER_STDIO[stdio["stream"]] + stdio["extension"]
    elif suffix in _OTHER_STREAM:
        other = stem + _OTHER_STREAM[suffix]
    elif stream := _STREAM_WORD.fullmatch(name):
        other = stream["before"] + _STREAM_WORDS[stream["stream"]] + stream["after"]
    elif scheduler := _scheduler_stream(path):
        other = f"{scheduler['stem']}.{_OTHER_SCHEDULER_STREAM[scheduler['stream']]}{scheduler['job']}"
    else:
        return []
    named = (path.with_name(other + compressed) for compressed in ("", *COMPRESSED_SUFFIXES))
    return [partner for partner in named if partner.is_file()]


#: NeMo's exp_manager's files of a run (its log directory, ``<exp>/<name>/<time>/``): each rank's NeMo log
#: (``nemo_log_globalrank-3_localrank-1.txt``), then Lightning's (``lightning_logs.txt``) and the warnings and
#: errors (``nemo_error_log.txt``): one run, the ranks in order
NEMO_EXP = "nemo exp_manager"
_NEMO_EXP_LOG = re.compile(
    r"nemo_log_globalrank-(?P<rank>\d+)_localrank-\d+\.txt|lightning_logs\.txt|nemo_error_log\.txt"
)
#: a process's output and error written to a directory of their own (``--output=logs/%j/stdout.log``,
#: torchrun's ``--log-dir``): one run
_STDIO = re.compile(r"(?P<stream>stdout|stderr)(?P<extension>\.log|\.txt)")
#: torchrun's ``--log-dir`` (torch/distributed/elastic/multiprocessing/api.py): ``<log_dir>/<rdzv_run_id>_<8
#: of tempfile's characters>/attempt_<restart>/<local rank>/{stdout,stderr}.log``, and the attempt's copies
#: of the ranks' lines (``filtered_stdout.log``, ``filtered_stderr.log``), not read twice
TORCHRUN = "torchrun"
_ATTEMPT = re.compile(r"attempt_(\d+)")
_TORCHRUN_RUN = re.compile(r"(?P<job>\d{4,}(?:_\d+)?)?.*_[a-z0-9_]{8}")
_TORCHRUN_COPIES = ("filtered_stdout.log", "filtered_stderr.log")


def _torchrun_rank(path: Path) -> tuple[int, int] | None:
    """``(attempt, local rank)`` of a file in torchrun's log directory, None elsewhere."""
    attempt = _ATTEMPT.fullmatch(path.parent.parent.name)
    if attempt is None or not path.parent.name.isdigit():
        return None
    return int(attempt[1]), int(path.parent.name)


def name_depth(path: Path) -> int:
    """How many trailing parts of ``path`` it takes at least to name its run: a process's ``stdout.log``
    says nothing of it, its directory does (``12345/stdout.log``), and in torchrun's log directory the
    run's (``<run>/attempt_0/0/stdout.log``); else its file name."""
    if not _STDIO.fullmatch(_uncompressed_name(path)):
        return 1
    return 4 if _torchrun_rank(path) is not None else 2


def _task_part(stem: str) -> re.Match[str] | None:
    """A job's stream stem split before its task's or node's part (``job_stem``, ``job``, ``part``; submitit's
    ``<job>_<task>_log``). A number after the job's that is not smaller is the job's id after a name's
    number (``gpt2-1558-56789``)."""
    match = _SUBMITIT_TASK.fullmatch(stem) or _JOB_THEN_PART.fullmatch(stem)
    task = match and match["part"][1:]
    if task and task.isdigit() and int(task) >= int(match["job"].partition("_")[0]):
        return None
    return match


def _natural(text: str) -> tuple[tuple[int, int, str], ...]:
    """``text``'s sort key with its numbers as numbers (task 2 before task 10)."""
    return tuple(
        (0, int(chunk), "") if chunk.isdigit() else (1, 0, chunk) for chunk in re.findall(r"\d+|\D+", text)
    )


#: the convention of a log and its rotated files: its main file is the current one, read last
ROTATED = "rotated"
#: a rank's own log beside the others' (DeepSpeed's launcher ``--enable_each_rank_log <dir>``:
#: ``<dir>/{%Y%m%d%H%M%S}_rank{N}.log``, one prefix a launch; a script's ``rank0.log``, ``train_rank3.log``;
#: AzureML's ``user_logs/std_log_process_3.txt``; a node's, ``node1.log``, a script's redirect of each node's
#: launcher): the ranks of one prefix are one run, rank 0's its main file
RANKS = "ranks"
_RANK_LOG = re.compile(
    r"(?P<prefix>(?:.*[_.-])?)(?P<word>rank|process|node)_?(?P<rank>\d{1,6})(?P<extension>\.log|\.txt)"
)
#: a job's two streams named by a word of their own beside its id in a log's name (``sbatch
#: --output=out-%j.log --error=err-%j.log``, ``%x_%j_stdout.txt``, ``output_%j.log`` and ``error_%j.log``):
#: one run, the output first
_STREAM_WORD = re.compile(
    r"(?=.*\d)(?P<before>(?:.*[-_.])?)(?P<stream>stdout|stderr|output|error|out|err)"
    r"(?P<after>(?:[-_.].*)?\.(?:log|txt))"
)
_ERROR_WORDS = {"stderr": "stdout", "error": "output", "err": "out"}
_STREAM_WORDS = _ERROR_WORDS | {output: error for error, output in _ERROR_WORDS.items()}
#: the pods of a Kubeflow training job, each one's log saved as ``<pod>.log`` (``kubectl logs``): a
#: PyTorchJob's ``<job>-master-0`` and ``<job>-worker-<i>``, an MPIJob's ``<job>-launcher`` and its workers
_POD_ROLES = ("master", "launcher", "worker")
_POD_LOG = re.compile(
    r"(?P<job>.+)-(?P<role>master|launcher|worker)(?:-(?P<index>\d{1,5}))?(?P<extension>\.log|\.txt)"
)


def group_runs(paths: Iterable[Path]) -> list[RunFiles]:
    """Group files into runs: a job's output and error files (same stem, same directory, however named:
    relative or absolute) are one, so are a log and its rotated files."""
    groups: dict[tuple[str, str, str], list[tuple[tuple, Path]]] = {}
    runs: list[RunFiles] = []
    for path in paths:
        stream = _job_stream(path)
        if stream is not None:
            key, order = stream
            groups.setdefault(key, []).append((order, path))
        else:
            runs.append(RunFiles(key=path_text(path), files=(path,)))
    torchrun: dict[str, list[RunFiles]] = {}
    ranked: list[RunFiles] = []
    conventions: dict[RunFiles, str] = {}
    for (directory, convention, _), files in groups.items():
        ordered = [path for _, path in sorted(files, key=lambda item: (item[0], item[1].name))]
        main = ordered[-1] if convention == ROTATED else ordered[0]
        runs.append(RunFiles(key=path_text(main), files=tuple(ordered)))
        conventions[runs[-1]] = convention
        if convention == TORCHRUN:
            torchrun.setdefault(os.path.basename(directory), []).append(runs[-1])
        elif convention == RANKS:
            ranked.append(runs[-1])
    runs = _with_rank_log_launchers(_with_launchers(_with_job_logs(runs, conventions), torchrun), ranked)
    return sorted(runs, key=lambda r: r.key)


#: Slurm's default name of a batch job's output (``slurm-%j.out``; an array task's ``slurm-%A_%a.out``)
_BATCH_OUTPUT = re.compile(r"slurm-(?P<job>\d+(?:_\d+)?)")


def _with_job_logs(runs: list[RunFiles], conventions: dict[RunFiles, str]) -> list[RunFiles]:
    """A batch job's own output (``slurm-%j.out``, its ``.err``) joined with the logs beside it that the
    job wrote: those whose names hold its job id (its tasks' or nodes' files, ``srun --output=%x-%j-%t.out``,
    ``%N``, ``%j.%s``; a restart's ``llama-8899001-r1.log``; a heterogeneous job's components
    ``train-9900112.het0.out``), else the directory's only other log (a log and its
    rotated files, ``| tee train.log``; the ranks' logs of one prefix, ``rank<N>.log``), or, alone in its
    directory, the ranks' logs that are the only logs of its subdirectories (``srun ... >
    ranks/rank${SLURM_PROCID}.log``). One run named by the job's file, read first (its lines span the job: a
    restart's preemption before the next restart's failure), then the logs in their names' order. Beside
    any other file, whose an unnamed log is is unknown. ``conventions``: the naming convention that grouped
    each run's files (none for a log alone)."""
    by_directory: dict[Path, list[RunFiles]] = {}
    for run in runs:
        by_directory.setdefault(Path(run.key).absolute().parent, []).append(run)
    joined: dict[RunFiles, RunFiles | None] = {}
    for directory, here in by_directory.items():
        for batch, job in ((run, job) for run in here if (job := _batch_job(run, conventions.get(run)))):
            others = [run for run in here if run is not batch]
            named = [
                run for run in others if re.search(rf"(?:^|[-_.]){job}(?:[-_.]|$)", _base(Path(run.key))[0])
            ]
            if not others:
                others = [
                    run for below, its in by_directory.items() if below.parent == directory for run in its
                ]
                others = others if len(others) == 1 and conventions.get(others[0]) == RANKS else []
            if not named and len(others) == 1 and conventions.get(others[0]) in (RANKS, ROTATED):
                named = others
            if named:
                logs = [path for run in sorted(named, key=lambda r: _natural(r.key)) for path in run.files]
                joined |= dict.fromkeys(named) | {batch: RunFiles(key=batch.key, files=(*batch.files, *logs))}
    return [joined.get(run, run) for run in runs if joined.get(run, run) is not None]


def _batch_job(run: RunFiles, convention: str | None) -> str | None:
    """The job id of a batch job's own output (``slurm-%j.out`` and its ``.err``, nothing else), else None."""
    batch = _BATCH_OUTPUT.fullmatch(_base(Path(run.key))[0]) if convention == "out" else None
    return batch["job"] if batch and len(run.files) <= 2 else None


#: torch elastic's agent names the log directory it set up for the workers (torch/distributed/elastic/
#: multiprocessing/api.py: ``log directory set to: <log_dir>/<run id>_<8 characters>``; older versions the
#: attempt's, ``.../attempt_0``) as it starts them, in the first lines of the launcher's output
_LOG_DIRECTORY_SET = re.compile(rb"log directory set to: \S*?([^/\s]+?)(?:/attempt_\d+)?/?(?:\s|$)")
_LAUNCHER_HEAD_BYTES = 1 << 20


def _with_launchers(runs: list[RunFiles], torchrun: dict[str, list[RunFiles]]) -> list[RunFiles]:
    """torchrun's log-directory runs (``torchrun``: by the directory's name) joined with the job output
    whose agent set the directory up (of runs so named, the one nearest it: a copy of a tree holds the
    same names): one run named by the job's file, the ranks' files read first (the agent's last words and
    the scheduler's come after their lines). Only a job's output in a directory above such a tree, within
    LAUNCHER_LEVELS, is looked into."""
    if not torchrun:
        return runs
    trees = {ranks: Path(ranks.key).absolute().parents[2] for named in torchrun.values() for ranks in named}
    joined: list[RunFiles] = []
    for run in runs:
        if run in trees:
            continue
        directory = Path(run.key).absolute().parent
        if not any(directory in tree.parents[:LAUNCHER_LEVELS] for tree in trees.values()):
            joined.append(run)
            continue
        named = dict.fromkeys(
            name.decode("utf-8", "replace")
            for path in run.files
            for name in _LOG_DIRECTORY_SET.findall(source_head(path, _LAUNCHER_HEAD_BYTES))
        )
        ranks = [_nearest(torchrun[name], run.key) for name in named if torchrun.get(name)]
        joined.append(RunFiles(key=run.key, files=(*(p for r in ranks for p in r.files), *run.files)))
    return [*joined, *(ranks for named in torchrun.values() for ranks in named)]


#: DeepSpeed's launcher with ``--enable_each_rank_log <dir>`` (deepspeed/launcher/launch.py) writes each rank's
#: output to ``<dir>/<prefix>_rank<N>.log``, the prefix its local time (``%Y%m%d%H%M%S``) just before it spawns
#: them; the job's output holds the flag (runner.py's ``cmd = ...``) and launch.py's ``process N spawned``
_EACH_RANK_LOG = re.compile(rb"--enable_each_rank_log[= ]['\"]?([^\s'\"]+?)/?['\"]?(?:\s|$)")
_SPAWNED = re.compile(
    rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[,.]\d+\] \[INFO\] \[launch\.py:\d+:main\] process \d+ spawned"
)
#: how many seconds a spawn is from its prefix's second, at most (the same launch; a copied log's clock may
#: be a second off)
_SPAWN_SECONDS = 10


def _with_rank_log_launchers(runs: list[RunFiles], ranked: list[RunFiles]) -> list[RunFiles]:
    """The ranks' own logs of DeepSpeed's launches (``ranked``: by prefix) joined with the job output whose
    launcher spawned them: its flag names their directory, their prefix is the second of a spawn. One
    run named by the job's file, the ranks' files read first (the launcher's last words come after their
    lines). Only a job's output in a directory above such logs, within LAUNCHER_LEVELS, is looked into."""
    launches = {ranks: launch for ranks in ranked if (launch := _rank_log_launch(ranks)) is not None}
    if not launches:
        return runs
    taken: set[RunFiles] = set()
    joined: list[RunFiles] = []
    for run in runs:
        directory = Path(run.key).absolute().parent
        near = [
            r for r, (place, _) in launches.items() if directory in (place, *place.parents[:LAUNCHER_LEVELS])
        ]
        if run in launches or not near:
            joined.append(run)
            continue
        head = b"".join(source_head(path, _LAUNCHER_HEAD_BYTES) for path in run.files)
        named = {os.path.basename(name.decode("utf-8", "replace")) for name in _EACH_RANK_LOG.findall(head)}
        spawned = [datetime.fromisoformat(stamp.decode()) for stamp in _SPAWNED.findall(head)]
        ranks = [
            r
            for r in near
            if r not in taken
            and launches[r][0].name in named
            and any(abs((at - launches[r][1]).total_seconds()) <= _SPAWN_SECONDS for at in spawned)
        ]
        taken.update(ranks)
        joined.append(RunFiles(key=run.key, files=(*(p for r in ranks for p in r.files), *run.files)))
    return [run for run in joined if run not in taken]


def _rank_log_launch(ranks: RunFiles) -> tuple[Path, datetime] | None:
    """The directory of a launch's rank logs and the time its prefix states, if it is DeepSpeed's."""
    main = Path(ranks.key).absolute()
    prefix = main.name.partition("_rank")[0]
    if not (len(prefix) == 14 and prefix.isdigit()):
        return None
    try:
        return main.parent, datetime.strptime(prefix, "%Y%m%d%H%M%S")
    except ValueError:
        return None


#: how far above a torchrun tree (``<log_dir>/<run>``) its job's output is looked for: ``job/<log_dir>/<run>``
#: up to ``job/<run dir>/logs/<log_dir>/<run>``
LAUNCHER_LEVELS = 4


def _nearest(candidates: list[RunFiles], key: str) -> RunFiles:
    """The run of ``candidates`` whose main file shares the longest path with ``key``, taken out of them."""
    shared = [len(os.path.commonpath([os.path.abspath(c.key), os.path.abspath(key)])) for c in candidates]
    return candidates.pop(shared.index(max(shared)))


def job_id_from_name(path: Path) -> str | None:
    """The job id the scheduler put in a file name: Slurm's ``%j`` (``name-123456.out``, ``123456.out``,
    ``name.123456``, before a task's or node's part: ``name-123456-3.out``, ``name-123456-node01.out``) or
    ``%A_%a`` of an array task (``slurm-123456_7.out``), PBS's and SGE's
    ``name.o123456`` (with an array task's index: ``123456.3``), LSF's ``name.%J``, if any."""
    match = _scheduler_stream(path) or _job_named(path) or _task_part(_base(path)[0])
    if match is not None:
        return match["job"]
    if _STDIO.fullmatch(_uncompressed_name(path)):  # its directory's name: the job's, or torchrun's run's
        torchrun = _torchrun_rank(path) is not None
        match = (_TORCHRUN_RUN if torchrun else _JOB_NAMED).fullmatch(path.parents[2 if torchrun else 0].name)
        return match["job"] if match else None
    match = _JOB_ID_IN_NAME.search(_base(path)[0])
    return match.group(1) if match else None


def read_runs(groups: list[RunFiles], active: list[Family], *, forced: str | None = None) -> list[RunResult]:
    """Read every file of each run through the ``active`` families, settle the runs together (one
    column-wise query for them all), and conclude each run (job id, manifest, derived facts, primary
    family: ``forced`` names it instead of the evidence)."""
    results = read_settled(groups, active)
    for result in results:
        _conclude(result, active, forced)
    return results


def read_settled(groups: list[RunFiles], active: list[Family]) -> list[RunResult]:
    """The runs read and settled, with their families' last words (``Family.finish``), not concluded."""
    plan = plan_of(tuple(active))
    stating = (*plan.kinds, *plan.blocks)
    runs = [RunBuilder(path=files.key, fact_statements=declared_facts(stating)) for files in groups]
    results = [RunResult(run=run, files=files) for run, files in zip(runs, groups, strict=True)]
    events = engine.read(runs, [files.files for files in groups], plan, [r.reports for r in results])
    settle_runs(runs, events)
    for run, files in zip(runs, groups, strict=True):
        run.position, run.event_index = order_key(len(files.files), 0), 0
        for family in active:
            if family.finish is not None:
                family.finish(run)
    return results


@cache
def plan_of(active: tuple[Family, ...]) -> Plan:
    """The reading plan of a set of families (its polars expressions are built once)."""
    return Plan(active)


def _conclude(result: RunResult, active: list[Family], forced: str | None) -> None:
    """What follows from a settled run: the file name's job id, manifest, derived facts, primary family."""
    run, files = result.run, result.files
    run.set_fact("job_id", job_id_from_name(Path(files.key)), "filename", 0)  # None: no fact
    manifest.apply(run, Path(files.key))
    derive_facts(run)
    scores = {family.name: run.families_seen.get(family.name, 0) for family in active}
    result.families = sorted(name for name, score in scores.items() if score > 0)
    result.family = registry.named(forced)[1] if forced else registry.primary(scores, registry.supplied(run))


def derive_facts(run: RunBuilder) -> None:
    """Fill facts that follow by formula from facts the log states (provenance ``derived``):
    DP = world / (TP * PP * CP) (CP 1 unless stated) or world = DP * TP * PP * CP (Megatron-LM's
    initialize_model_parallel; experts parallelize within DP), world = nodes * GPUs per node (or HF's banner's DP), global batch = micro *
    gas * DP (seed 002), gas = global / (micro * DP) as Megatron computes its micro-batch count, and
    micro = global / (gas * DP) where only the count is logged (NeMo 2's). A
    Megatron-LM v1.x dump (2020: a per-GPU ``batch_size``, no global batch) means PP 1 and gas 1: v2.0
    brought pipeline parallelism and micro-batches; DeepSpeed's dump states its accumulation if it ran."""
    facts = run.facts

    def known(*names: str) -> bool:
        return all(isinstance(facts.get(n), int) and facts[n] > 0 for n in names)

    if "gpus" not in facts and known("nodes", "gpus_per_node"):
        run.set_fact("gpus", facts["nodes"] * facts["gpus_per_node"], "derived", 0)
    if "gpus" not in facts and _hf_banner_world(run):
        run.set_fact("gpus", facts["dp"], "derived", 0)
    if _megatron_v1(run):
        run.set_fact("pp", 1, "derived", 0)
        run.set_fact("gas", 1, "derived", 0)
    model_parallel = known("tp", "pp") and facts["tp"] * facts["pp"] * (facts["cp"] if known("cp") else 1)
    if "dp" not in facts and known("gpus") and model_parallel and facts["gpus"] % model_parallel == 0:
        run.set_fact("dp", facts["gpus"] // model_parallel, "derived", 0)
    if "gpus" not in facts and known("dp") and model_parallel:
        run.set_fact("gpus", facts["dp"] * model_parallel, "derived", 0)
    if "global_batch_size" not in facts and known("micro_batch_size", "gas", "dp"):
        global_batch = facts["micro_batch_size"] * facts["gas"] * facts["dp"]
        run.set_fact("global_batch_size", global_batch, "derived", 0)
    if "micro_batch_size" not in facts and known("global_batch_size", "gas", "dp"):
        per_micro_batch = facts["gas"] * facts["dp"]
        if facts["global_batch_size"] % per_micro_batch == 0:
            run.set_fact("micro_batch_size", facts["global_batch_size"] // per_micro_batch, "derived", 0)
    if known("global_batch_size", "micro_batch_size", "dp"):
        per_step = facts["micro_batch_size"] * facts["dp"]
        stated = facts.get("gas")
        ramped = known("gas") and stated * per_step != facts["global_batch_size"] and _batch_of_steps(run)
        if ("gas" not in facts or ramped) and facts["global_batch_size"] % per_step == 0:
            run.set_fact("gas", facts["global_batch_size"] // per_step, "derived", 0, override=ramped)


def _batch_of_steps(run: RunBuilder) -> bool:
    """Whether the run's global batch is its last logged step's, in a batch-size rampup: under Megatron's
    ``--rampup-batch-size`` each step logs its own, growing, while DeepSpeed's config states the
    accumulation of the target batch (BLOOM-176B: 128 micro-batches of its 2048 while its steps ran 352),
    so the steps' accumulation is their batch's over micro x DP, as Megatron counts its micro-batches."""
    frame = run.iteration_frame
    batches = frame["global_batch_size"].drop_nulls() if frame is not None else None
    if batches is None or batches.n_unique() < 2:
        return False
    return batches[-1] == run.facts["global_batch_size"]


def _hf_banner_world(run: RunBuilder) -> bool:
    """Whether the run's DP is HF Trainer's banner's world: its total batch over the per-device batch and
    accumulation counts every GPU (trainer.py: ``train_batch_size`` holds DataParallel's ``n_gpu`` GPUs a
    process, ``world_size`` the processes), and nothing states a model-parallel size."""
    from_banner = run.provenance.get("dp", "").startswith("hf-trainer:")
    return from_banner and all(run.facts.get(name, 1) == 1 for name in ("tp", "pp", "cp"))


def _megatron_v1(run: RunBuilder) -> bool:
    """Whether the run's batch is Megatron-LM v1.x's: a per-GPU batch and a tensor-parallel size from its
    dump, no pipeline of more than one stage (v1.x's own world line, "model-parallel size", states PP 1),
    and nothing stating a global batch or gradient accumulation (from v2.0 every dump prints both)."""
    by_megatron = all(
        run.provenance.get(name, "").startswith("megatron:") for name in ("micro_batch_size", "tp")
    )
    stated = any(name in run.facts for name in ("global_batch_size", "gas"))
    return by_megatron and not stated and run.facts.get("pp", 1) == 1


def status_of(result: RunResult) -> tuple[str, str, int | None, str | None]:
    """``(status, reason, reason_line, reason_path)`` of a run, from the evidence its lines gave."""
    run = result.run
    problems = [r for r in result.reports if r.problem]
    total_bytes = sum(r.bytes_read for r in result.reports)
    if total_bytes == 0 and not problems:
        return "empty", "empty file: no lines to read", None, None
    if not any(r.written for r in result.reports) and not problems:
        return "empty", "blank file: whitespace only", None, None
    anything = bool(run.iterations or run.facts.keys() - {"job_id"} or run.failure)
    if problems and not anything:
        return "unreadable", problems[0].problem, None, problems[0].path
    # a file that could not be read whole (a corrupt gzip stream decompresses fragments of earlier text
    # first) does not reach its planned steps by a step's total
    inferred = None if problems else _completion_from_facts(run)
    completion = _unless_trained_after(run, run.completion) or inferred
    if run.failure is not None:
        status, reason, line = run.failure
        recovered = _before_a_relaunch_that_completed(run, completion)
        if not recovered and (
            completion is None or completion[2] != run.failure_path or completion[1] <= line
        ):
            return status, reason, line, run.failure_path
        return "ok", _after_failure(completion, line, run.failure_path, reason), completion[1], completion[2]
    if completion is not None and run.earlier_failure is not None:  # a relaunch ended what one failed
        _, reason, line, path = run.earlier_failure
        return "ok", _after_failure(completion, line, path, reason), *completion[1:3]
    if completion is not None:
        return "ok", completion[0], completion[1], completion[2]
    if run.clean_exit is not None:
        evidence, line, where, _ = run.clean_exit
        return "ok", f"the launcher reported a clean exit: {evidence}", line, where
    if problems:
        first = problems[0]
        return "incomplete", f"{first.problem}; read up to line {first.lines}", None, first.path
    if not anything:
        return "incomplete", "no record of any known log family", None, None
    if run.last_iteration is not None:
        planned = run.facts.get("train_iters")
        of = f" of {planned}" if planned else ""
        row = run.iterations.get(run.last_iteration, {})
        # a training bar counting past the last logged step (HF's, updated every step) says how far it got
        counted = run.facts.get("progress_steps")
        bar = f" (its progress bar at {counted})" if counted and counted > run.last_iteration else ""
        stops = f"log stops after iteration {run.last_iteration}{of}{bar}, with no failure or end message"
        return (
            "incomplete",
            stops,
            row.get("line"),
            row.get("source_path") or path_text(result.files.files[0]),
        )
    # "stops before any step" would be false of a script printing steps in a format no family reads
    no_steps = "no training step that logstat reads (none logged, or in a format no family knows)"
    return "incomplete", f"{no_steps}, and no failure or end message", None, None


def _after_failure(completion: tuple, line: int, path: str | None, reason: str) -> str:
    """A completion's evidence, and the earlier failure's (its file named when it is another)."""
    where = f"line {line}" if path in (None, completion[2]) else f"{Path(path).name}:{line}"
    return f"{completion[0]} (after an earlier failure at {where}: {reason})"


def _before_a_relaunch_that_completed(run: RunBuilder, completion: tuple | None) -> bool:
    """Whether the run's failure, in a file read after its completion's (a job's .err: no line there says
    when), ended an earlier launch: the training launched again in the completion's file and its last
    launch completed (torchrun --max-restarts: each failed attempt's traceback in the .err, the attempt
    that finished in the .out)."""
    if completion is None or run.failure_path == completion[2] or run.iteration_frame is None:
        return False
    launches = run.iteration_frame.get_column("launch").max() or 0
    return (
        launches > 0
        and completion[3] > run.launch_start
        and run.files.index(completion[2]) < run.files.index(run.failure_path)
    )


def _unless_trained_after(run: RunBuilder, completion: tuple | None) -> tuple | None:
    """``completion``, unless the run logged a training step after it in its file (an evaluation before
    training, a finished run relaunched into the same log): the run did not end there."""
    if completion is None or run.iteration_frame is None:
        return completion
    rows = run.iteration_frame.select("line", path=pl.col("source_path").fill_null(str(run.files[0])))
    later = rows.filter(pl.col("path") == str(completion[2]), pl.col("line") > completion[1])
    return None if later.height else completion


def _completion_from_facts(run: RunBuilder) -> tuple[str, int, str] | None:
    """Completion evidence the families recorded as facts: final train metrics, the last step reaching the
    planned number of steps (``planned - 1`` where the steps count from 0: a loop over ``range(steps)`` logs
    step 0 after its first update, its last is one short of the plan), or the training's progress bar
    counting the steps done (``progress_steps``: updated at each step's end) reaching it."""
    for name in ("final_train_runtime_s", "final_samples_per_sec"):
        if run.provenance.get(name) and name in run.facts:
            return f"final train metrics logged ({name}={run.facts[name]})", *_stated_at(run, name)
    planned = run.facts.get("train_iters")
    from_zero = run.iteration_frame is not None and run.iteration_frame["iteration"].min() == 0
    if planned and run.last_iteration is not None and run.last_iteration >= planned - from_zero:
        row = run.iterations.get(run.last_iteration, {})
        where = str(row.get("source_path") or run.current_file)
        return f"reached the planned {planned} iterations", row.get("line") or 0, where
    done = run.facts.get("progress_steps")
    if planned and done and done >= planned:
        return f"its training progress bar reached the planned {planned} steps", *_stated_at(
            run, "progress_steps"
        )
    return None


def _stated_at(run: RunBuilder, name: str) -> tuple[int, str]:
    """The line and the file of the statement of fact ``name`` that the run kept."""
    line = int(run.provenance[name].rsplit(":", 1)[1])
    return line, run.state.get("fact_files", {}).get(name, run.current_file)


def runs_row(result: RunResult) -> dict:
    """One row of the ``runs`` frame."""
    run = result.run
    status, reason, line, reason_path = status_of(result)
    return {name: run.facts.get(name) for name in RUNS_SCHEMA} | dict(
        path=result.files.key,
        paths=[path_text(p) for p in result.files.files],
        family=result.family,
        families=result.families,
        status=status,
        reason=reason,
        reason_line=line,
        reason_path=reason_path,
        consequences=run.consequence_lines(),
        provenance=json.dumps(run.provenance, sort_keys=True),
        warnings=warnings_of(result),
    )


MAX_WARNINGS = 20


def warnings_of(result: RunResult) -> list[str]:
    """What could not be read, for the ``warnings`` column: capped, with a count of the rest."""
    notes = [f"{r.path}: {note}" for r in result.reports for note in (r.problem, r.hole) if note]
    notes += result.run.state.get("parse_errors", [])
    if len(notes) > MAX_WARNINGS:
        notes = notes[:MAX_WARNINGS] + [f"... and {len(notes) - MAX_WARNINGS} more"]
    return notes


def frames(results: list[RunResult]) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """``(runs, iterations, timers)`` frames of the read runs, each with its declared schema."""
    runs = pl.DataFrame([runs_row(r) for r in results], schema=RUNS_SCHEMA, strict=False)
    iterations = _stacked(results, "iteration_frame", ITERATIONS_SCHEMA)
    timers = _stacked(results, "timer_frame", TIMERS_SCHEMA)
    return runs, iterations, timers


def _stacked(results: list[RunResult], name: str, schema: dict) -> pl.DataFrame:
    """The runs' settled frames ``name`` stacked, each with its run's ``path``, in ``schema``."""
    stacked = [
        frame.with_columns(path=pl.lit(result.files.key))
        for result in results
        if (frame := getattr(result.run, name)) is not None and frame.height
    ]
    if not stacked:
        return pl.DataFrame(schema=schema)
    return pl.concat(stacked, how="vertical_relaxed").select(
        [pl.col(column).cast(dtype) for column, dtype in schema.items()]
    )


def active_families(family: str | None) -> list[Family]:
    """All registered families, or the forced one plus the context families (Slurm)."""
    if family is None:
        return list(registry.families())
    forced = registry.named(family)[0]
    return [*forced] + [f for f in registry.families() if f.context and f not in forced]

"""The public library API that ties parsers and analytics together (the CLI is a thin layer over it).

from logstat.api import load_runs
result = load_runs(["logs/"], warmup=1)
result.runs         # one row per run: facts + summary (sec_per_iter, tflops_per_gpu, mfu, ...)
result.iterations   # one row per logged step, with provenance (family, line)
result.timers       # Megatron's per-step timer breakdown, long format
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from logstat.errors import LogstatError


@dataclass(frozen=True, kw_only=True)
class ParseResult:
    """The frames of a parse (schemas in ``logstat.parsers.schema``)."""

    runs: pl.DataFrame
    """One row per run: RUNS_SCHEMA columns then SUMMARY_SCHEMA columns."""
    iterations: pl.DataFrame
    """One row per logged training step (ITERATIONS_SCHEMA)."""
    timers: pl.DataFrame
    """Timer breakdown per step, one row per timer (TIMERS_SCHEMA)."""
    warmup: int
    """How many leading logged steps the steady-state statistics skipped."""


#: what ``find_logs`` tells ``skipped`` about a path the walk did not take: the path and why.
SkipReport = Callable[[Path, str], None]


def find_logs(paths: Iterable[str | os.PathLike], *, skipped: SkipReport | None = None) -> list[Path]:
    """The log files named by ``paths``: files as given, directories walked recursively for the files
    named like logs (``logstat.parsers.reader.is_log_file``: ``*.out``, ``*.err``, ``*.log``, ``*.txt``,
    ``*.stdout``, ``*.stderr``, PBS/SGE ``name.o123`` / ``name.e123``, a job id without an extension
    (``name.1234``), script(1)'s ``typescript``, rotated logs (``train.log.1``), and ``.gz``, ``.xz``, ``.bz2`` of those; a JSON file whose
    lines are a logging service's entries, ``reader.is_structured_log``; an archive holding a file so
    named, whose row says it is not read, ``_holds_logs``). Every path
    the walk passes over (another name, a hidden file or directory but ``LOG_DIRECTORIES``, a symbolic
    link to a directory, which is not followed, a special file, a tool's files: ``TOOL_DIRECTORIES``,
    ``TOOL_FILES``; but W&B's runs' consoles, ``WANDB_CONSOLES``, where no log is beside their ``wandb``)
    is handed to ``skipped`` with the reason. A path that does not exist is an error naming it. A file named twice
    (relative and absolute, through ``..`` or a link) is one, as first named. A job's file named alone brings
    its other stream beside it (``job.err`` with ``job.out``): the job's failure is often only there."""
    from logstat.parsers.reader import stream_partners

    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(_walk(path, skipped or _ignore)))
        elif path.is_file():
            found += [path, *stream_partners(path)]
        elif path.exists():
            raise LogstatError(f"{path}: not a regular file or directory")
        elif path.is_symlink():
            raise LogstatError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
        else:
            raise LogstatError(f"{path}: no such file or directory")
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


#: what tools write beside the logs, named like logs but none of a run's own: directory or file name -> why
TOOL_DIRECTORIES = {"wandb": "W&B's run files (a copy of the console output, W&B's own logs)"}
#: W&B's copy of a run's console, in its run directory (``wandb/run-20240418_031058-lla7b0pt``, offline runs'
#: ``offline-run-...``; not ``latest-run``, a link to one of them)
WANDB_CONSOLES = ("run-*/files/output.log", "offline-run-*/files/output.log")
TOOL_FILES = {
    "latest_checkpointed_iteration.txt": "Megatron's checkpoint tracker",
    "cmd-args.log": "NeMo exp_manager's copy of the command line",
    "git-info.log": "NeMo exp_manager's git state",
    "merges.txt": "a BPE tokenizer's merges",
    "vocab.txt": "a tokenizer's vocabulary",
}
#: hidden directories that hold job logs, walked like any other: submitit's folder (Hydra's submitit
#: launcher makes ``<sweep>/.submitit/<job id>/<job id>_<task>_log.out``)
LOG_DIRECTORIES = frozenset({".submitit"})


def _hidden(directory: str) -> bool:
    """A directory the walk passes over as hidden (a ``.git``), not one of ``LOG_DIRECTORIES``."""
    return directory.startswith(".") and directory not in LOG_DIRECTORIES


def _walk(root: Path, skipped: SkipReport) -> Iterator[Path]:
    """The log files under ``root``; what is passed over goes to ``skipped``. A hidden directory (a
    ``.git``) or a tool's (``TOOL_DIRECTORIES``) is one report, not one per file in it."""
    from logstat.parsers.reader import is_log_file, is_structured_log, is_unnamed_log
    from logstat.runners.rundir import PLAN_FILE, SWEEP_FILE

    for directory, subdirectories, files in os.walk(root, onerror=lambda error: _unreadable(error, skipped)):
        here = Path(directory)
        # a sweep directory's plan (the table `logstat sweep` printed) is logstat's own output, not a log
        ours = {PLAN_FILE: "logstat sweep's plan"} if SWEEP_FILE in files else {}
        for name in sorted(subdirectories):
            if _hidden(name):
                skipped(here / name, "hidden directory")
            elif (here / name).is_symlink():
                skipped(here / name, "symbolic link to a directory (not followed)")
            elif name == "wandb" and not any(is_log_file(here / file) for file in files):
                # no log beside it: W&B's copies are the only consoles kept (a platform's, a notebook's run)
                yield from _wandb_consoles(here / name, skipped)
            elif name in TOOL_DIRECTORIES:
                skipped(here / name, TOOL_DIRECTORIES[name])
        # sorted in place: os.walk descends in this order, so the reports come in a stable order
        subdirectories[:] = sorted(
            d
            for d in subdirectories
            if not _hidden(d) and d not in TOOL_DIRECTORIES and not (here / d).is_symlink()
        )
        for name in sorted(files):
            path = here / name
            if name.startswith("."):
                skipped(path, "hidden file")
            elif name in TOOL_FILES or name in ours:
                skipped(path, TOOL_FILES.get(name) or ours[name])
            elif not is_log_file(path) and not (
                # what a file holds is read only of a regular file: opening a named pipe waits for a writer
                path.is_file()
                and any(test(path) for test in (is_structured_log, _holds_logs, is_unnamed_log))
            ):
                skipped(path, "not named like a log")
            elif _listable(path):  # the name test first: a stat only for the files named like logs
                yield path
            else:
                skipped(path, "not a regular file")


def _holds_logs(path: Path) -> bool:
    """Whether ``path`` is an archive holding a file named like a log: read, it says it is not read."""
    from logstat.parsers.reader import is_log_file
    from logstat.parsers.source import ARCHIVE_SUFFIXES, archive_members

    if not path.name.endswith(ARCHIVE_SUFFIXES):
        return False
    return any(is_log_file(Path(name)) for name in archive_members(path) or ())


def _wandb_consoles(directory: Path, skipped: SkipReport) -> Iterator[Path]:
    """The consoles W&B copied in ``directory`` (``WANDB_CONSOLES``); its own files are one report."""
    consoles = sorted({path for pattern in WANDB_CONSOLES for path in directory.glob(pattern)})
    yield from (path for path in consoles if _listable(path))
    skipped(directory, "W&B's own files but its runs' consoles (files/output.log)")


#: what ``find_logs`` tells ``skipped`` of a directory it cannot list (its logs are not read)
CANNOT_LIST = "cannot list"


def _unreadable(error: OSError, skipped: SkipReport) -> None:
    """A directory the walk cannot list is reported, not silently missing."""
    skipped(Path(error.filename), f"{CANNOT_LIST}: {error.strerror or error}")


def warn_unlisted(path: Path, reason: str) -> None:
    """A ``skipped`` for a command without --verbose: only a directory it cannot list is said (on
    stderr), as logs in it are missing from the table; the rest the walk passes over by design."""
    if reason.startswith(CANNOT_LIST):
        print(f"warning: {path}: {reason}: the logs in it are not read", file=sys.stderr)


def _ignore(path: Path, reason: str) -> None:
    """The ``skipped`` of a caller that does not ask."""


def _listable(path: Path) -> bool:
    """A regular file, or a symlink whose target is gone (a log on a purged scratch file system):
    that one becomes a row saying it cannot be read, rather than silently missing from the table."""
    return path.is_file() or (path.is_symlink() and not path.exists())


def load_runs(
    paths: Iterable[str | os.PathLike],
    *,
    family: str | None = None,
    warmup: int = 1,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = 1,
) -> ParseResult:
    """Parse the logs under ``paths`` into frames; ``family`` forces one log family (by name),
    ``warmup`` is how many leading steps the steady-state statistics skip. ``progress(done, total)``
    is called after each run. ``workers`` processes read the runs: 1 (default) this process only;
    None one per core when the input is big. Workers are spawned, so with None the calling script
    must guard its top level with ``if __name__ == "__main__":`` (multiprocessing re-imports it; an
    unguarded script would hang), which is why only the CLI asks for them by default.
    Raises LogstatError for a path that does not exist or a wrong family."""
    _check_options(family=family, warmup=warmup)
    return _read(find_logs(paths), family=family, warmup=warmup, progress=progress, workers=workers)


def load_files(
    files: Sequence[Path],
    *,
    family: str | None = None,
    warmup: int = 1,
    progress: Callable[[int, int], None] | None = None,
    workers: int | None = 1,
) -> ParseResult:
    """``load_runs`` over the files ``find_logs`` already listed, so a caller that needs the list
    (e.g. to refuse an empty one) walks the directories once. Options as in ``load_runs``."""
    _check_options(family=family, warmup=warmup)
    return _read(files, family=family, warmup=warmup, progress=progress, workers=workers)


def _check_options(*, family: str | None, warmup: int) -> None:
    """A bad --warmup or family name is an error before any file is read."""
    from logstat.parsers import reader

    if warmup < 0:
        raise LogstatError(f"--warmup={warmup} must be 0 or more")
    reader.active_families(family)


def _read(
    files: Sequence[Path],
    *,
    family: str | None,
    warmup: int,
    progress: Callable[[int, int], None] | None,
    workers: int | None,
) -> ParseResult:
    from logstat.analytics.summary import summarize
    from logstat.parsers import parallel, reader

    groups = reader.group_runs(files)
    runs, iterations, timers = parallel.read_frames(groups, family=family, workers=workers, progress=progress)
    return ParseResult(
        runs=summarize(runs, iterations, warmup=warmup),
        iterations=iterations,
        timers=timers,
        warmup=warmup,
    )

"""`make bench`: `logstat parse` against the seed's perl one-liner and `grep -c` on a >= 1 GB corpus.

Issue 6 asks that logstat, which reads every field of every log family, be no slower than the
one-liner users run today (seed 001, "Maintenance"), which reads one number per file. This script:

1. builds (once; a stamp file says which sources and sizes it was built from) a corpus under
   ``bench-corpus/`` by repeating real logs (``fixtures/``, the real BigScience logs included): one large file,
   and ~1,000 small files of the same total size;
2. times, interleaved run by run so that other load on the machine hits every tool alike, the
   perl one-liner, ``grep -c 'elapsed time per iteration'`` and ``logstat parse --tflops --format
   json`` on both, and prints median wall time, peak RSS and the ratios logstat/perl, logstat/grep;
3. times the start-up paths: ``logstat --help`` (goal < 0.3 s) and ``logstat parse`` of one small
   fixture (goal < 0.6 s).

Not collected by pytest (no ``test_`` prefix) and not part of ``make test``: it takes minutes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "bench-corpus"
STAMP = CORPUS / "stamp.json"
LOGSTAT = ROOT / ".venv" / "bin" / "logstat"
SOURCE_DIRS = (ROOT / "fixtures",)
LOG_SUFFIXES = (".out", ".err", ".log", ".txt")
MIB = 1 << 20

# Verbatim from issue 6 / seed 001: one perl process per file, one number per file.
PERL_ONE_LINER = (
    "find . -type f -exec perl -lne 'm|elapsed time per iteration .ms.: ([\\d\\.]+)| && "
    'do {$x+=$1; $c++}; END { print "$ARGV " . ($c ? int($x/$c/1000) : "fail")}\' {} \\;'
)
# Through a pipe: GNU grep stops at the first match when its stdout is /dev/null (nothing to print).
GREP_COUNT = "grep -rc 'elapsed time per iteration' . | cat"
HELP_GOAL_S = 0.3
SMALL_PARSE_GOAL_S = 0.6
TIME_BIN = Path("/usr/bin/time")
TIME_MARK = "@bench-time"
TREE_SAMPLE_S = 0.2
SMALL_FIXTURE = ROOT / "fixtures" / "megatron" / "meg_gpt2_perf_n16.out"


@dataclass(frozen=True, kw_only=True)
class Timing:
    """One timed command: wall time, peak resident memory, exit code."""

    wall_s: float
    """Elapsed wall-clock seconds, process start to exit."""
    peak_rss_mb: float
    """Largest resident set of the command or any of its waited-for children (ru_maxrss)."""
    tree_rss_mb: float
    """Largest sum of the resident sets of the whole process tree (logstat's workers included),
    sampled every ``TREE_SAMPLE_S`` from /proc; 0 where /proc is missing."""
    returncode: int
    """Exit code; a failed command's time is reported but flagged."""
    stderr_tail: str = ""
    """Last lines of stderr, shown when the command failed."""


def time_command(command: str, cwd: Path, env: dict[str, str] | None = None) -> Timing:
    """Run ``command`` in a fresh shell, stdout to /dev/null: wall time and peak RSS of that process tree.

    GNU time measures from a small process of its own: ``os.wait4`` on a child forked from this
    Python would count the interpreter's pages the child had before its exec (~35 MB) as its peak.
    """
    wrapped = ["bash", "-c", command]
    if TIME_BIN.exists():
        wrapped = [str(TIME_BIN), "-f", f"{TIME_MARK} %e %M", *wrapped]
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(wrapped, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        sampler.done.set()
        sampler.join()
        wall_s = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").splitlines()
    peak_rss_mb = usage.ru_maxrss / 1024
    measured = [line for line in lines if line.startswith(TIME_MARK)]
    if measured:
        # Wall time stays ours (perf_counter; GNU time's %e has 10 ms steps), the peak RSS is time's.
        peak_rss_mb = int(measured[-1].split()[2]) / 1024
        lines = [line for line in lines if not line.startswith(TIME_MARK)]
    tail = "\n".join(line for line in lines[-3:] if not line.startswith("Command exited"))
    return Timing(
        wall_s=wall_s,
        peak_rss_mb=peak_rss_mb,
        tree_rss_mb=sampler.peak_kb / 1024,
        returncode=proc.returncode,
        stderr_tail=tail,
    )


class TreeSampler(threading.Thread):
    """Samples the summed RSS of a process and all its descendants (ru_maxrss sees one process at a
    time, so it misses that logstat's reader workers run beside the parent)."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid = root_pid
        self.peak_kb = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(TREE_SAMPLE_S):
            self.peak_kb = max(self.peak_kb, sum(_rss_kb(pid) for pid in _descendants(self.root_pid)))


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # the command name may hold spaces or parentheses: fields count from the last ")"
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def source_logs() -> list[Path]:
    """Real text logs to repeat: every log file of fixtures/ that holds text."""
    found = []
    for directory in SOURCE_DIRS:
        if directory.is_dir():
            for path in sorted(directory.rglob("*")):
                name = path.name.removesuffix(".gz")
                if path.is_file() and name.endswith(LOG_SUFFIXES):
                    found.append(path)
    return [path for path in found if _text_of(path)]


def _text_of(path: Path) -> bytes:
    """The log's bytes (gunzipped), newline-terminated; empty for binary or empty files."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            return b""
    if not data or b"\x00" in data:
        return b""
    return data if data.endswith(b"\n") else data + b"\n"


def corpus_key(sources: list[Path], size_mb: int, files: int) -> dict:
    """What the corpus is built from; a rebuild happens only when this changes."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(str(path).encode() + b"\0" + _text_of(path))
    return {"size_mb": size_mb, "files": files, "sources": digest.hexdigest(), "layout": 2}


def build_corpus(size_mb: int, files: int) -> tuple[Path, Path, list[Path]]:
    """``(single_dir, many_dir, sources)``; reuses the existing corpus when the stamp matches."""
    sources = source_logs()
    if not sources:
        sys.exit("bench: no source logs found under fixtures/")
    single, many = CORPUS / "single", CORPUS / "many"
    key = corpus_key(sources, size_mb, files)
    if STAMP.is_file() and json.loads(STAMP.read_text()) == key:
        print(f"bench: reusing corpus in {CORPUS} (stamp matches)", file=sys.stderr)
        return single, many, sources
    print(f"bench: building a {size_mb} MiB corpus from {len(sources)} real logs ...", file=sys.stderr)
    STAMP.unlink(missing_ok=True)
    for directory in (single, many):
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
    texts = [_text_of(path) for path in sources]
    _repeat_into(single / "big.out", b"".join(texts), size_mb * MIB)
    # Every small file holds the same mix of logs as the large one (rotated, so each starts with a
    # different log): repeating only one tiny failure fixture would make a file almost all markers.
    per_file = size_mb * MIB // files
    for index in range(files):
        turn = index % len(texts)
        stem = sources[turn].name.removesuffix(".gz").rsplit(".", 1)[0]
        _repeat_into(many / f"r{index:04d}-{stem}.out", b"".join(texts[turn:] + texts[:turn]), per_file)
    STAMP.write_text(json.dumps(key))
    return single, many, sources


def _repeat_into(path: Path, block: bytes, size: int) -> None:
    """Write copies of ``block`` up to about ``size`` bytes, the last one cut at a line end."""
    with open(path, "wb") as out:
        written = 0
        while written < size:
            piece = block[: size - written]
            if len(piece) < len(block):
                piece = piece[: piece.rfind(b"\n") + 1]
                if not piece:
                    return
            out.write(piece)
            written += len(piece)


def warm_page_cache(directory: Path) -> None:
    """Read the corpus once so no tool pays for the disk and the first tool timed is not penalised."""
    for path in directory.iterdir():
        with open(path, "rb") as handle:
            while handle.read(16 * MIB):
                pass


def commands(tools: list[str], target: str) -> dict[str, str]:
    """The shell command of each tool, run from inside the corpus directory ``target``."""
    every = {
        "perl": PERL_ONE_LINER,
        "grep": GREP_COUNT,
        "logstat": f"{shlex.quote(str(LOGSTAT))} parse . --tflops --format json > /dev/null",
    }
    return {tool: every[tool] for tool in tools}


def bench_case(directory: Path, tools: list[str], runs: int) -> dict[str, list[Timing]]:
    """Time every tool ``runs`` times on ``directory``, interleaved (perl, grep, logstat, perl, ...)."""
    warm_page_cache(directory)
    timings: dict[str, list[Timing]] = {tool: [] for tool in tools}
    for run in range(runs):
        for tool, command in commands(tools, str(directory)).items():
            timing = time_command(command, directory)
            timings[tool].append(timing)
            print(
                f"bench: {directory.name:6s} run {run + 1}/{runs} {tool:8s} {timing.wall_s:7.2f} s "
                f"{timing.peak_rss_mb:7.1f} MB (tree {timing.tree_rss_mb:.1f} MB) rc={timing.returncode}",
                file=sys.stderr,
            )
    return timings


def directory_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir())


def median_wall(timings: list[Timing]) -> float:
    return statistics.median(t.wall_s for t in timings)


def print_table(cases: dict[str, tuple[Path, dict[str, list[Timing]]]]) -> None:
    """The side-by-side table: median wall, peak RSS, throughput, and logstat's ratios."""
    header = (
        f"{'corpus':40s} {'tool':8s} {'median s':>9s} {'min s':>7s} {'max s':>7s} "
        f"{'RSS MB':>7s} {'tree MB':>7s} {'MB/s':>6s} {'vs perl':>8s} {'vs grep':>8s}"
    )
    print(header)
    print("-" * len(header))
    for label, (directory, timings) in cases.items():
        size_mb = directory_bytes(directory) / MIB
        files = sum(1 for _ in directory.iterdir())
        name = f"{label}: {files} file{'s' if files > 1 else ''}, {size_mb:,.0f} MiB"
        for tool, runs in timings.items():
            median_s = median_wall(runs)
            ratios = ["", ""]
            if tool == "logstat":
                for slot, other in enumerate(("perl", "grep")):
                    if other in timings:
                        ratios[slot] = f"{median_s / median_wall(timings[other]):.2f}x"
            failed = " FAILED: " + runs[-1].stderr_tail if any(t.returncode for t in runs) else ""
            print(
                f"{name:40s} {tool:8s} {median_s:9.2f} {min(t.wall_s for t in runs):7.2f} "
                f"{max(t.wall_s for t in runs):7.2f} {max(t.peak_rss_mb for t in runs):7.1f} "
                f"{max(t.tree_rss_mb for t in runs):7.1f} {size_mb / median_s:6.0f} "
                f"{ratios[0]:>8s} {ratios[1]:>8s}{failed}"
            )
    print(
        "RSS MB: largest single process (GNU time's %M); tree MB: largest sum over the process tree, "
        f"sampled every {TREE_SAMPLE_S} s."
    )


def startup(runs: int) -> list[tuple[str, float, float, float]]:
    """``(what, median_s, peak_rss_mb, goal_s)`` of the two start-up paths the issue sets goals for."""
    small = SMALL_FIXTURE if SMALL_FIXTURE.is_file() else min(source_logs(), key=lambda p: p.stat().st_size)
    checks = (
        ("logstat --help", f"{shlex.quote(str(LOGSTAT))} --help", HELP_GOAL_S),
        (
            f"logstat parse {small.relative_to(ROOT)} --format json",
            f"{shlex.quote(str(LOGSTAT))} parse {shlex.quote(str(small))} --format json",
            SMALL_PARSE_GOAL_S,
        ),
    )
    # as a user's interpreter starts: with the bytecode the first run cached (an environment that sets
    # PYTHONDONTWRITEBYTECODE, as some CI sandboxes do, compiles every module at every start: ~70 ms here)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        print(
            "bench: start-up timed without PYTHONDONTWRITEBYTECODE (set here), as a user's interpreter caches .pyc"
        )
    results = []
    for what, command, goal in checks:
        time_command(command, ROOT, env)  # the first run pays for cold .pyc and page cache
        timings = [time_command(command, ROOT, env) for _ in range(runs)]
        if any(t.returncode for t in timings):
            print(f"bench: {what} FAILED: {timings[-1].stderr_tail}", file=sys.stderr)
        results.append((what, median_wall(timings), max(t.peak_rss_mb for t in timings), goal))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="corpus size in MiB (default 1024)")
    parser.add_argument("--files", type=int, default=1000, help="number of small files (default 1000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per tool (default 3)")
    parser.add_argument("--cases", default="single,many", help="single, many, or single,many (the default)")
    parser.add_argument("--tools", default="perl,grep,logstat", help="tools to time (default all three)")
    parser.add_argument(
        "--startup-runs", type=int, default=5, help="timed runs of each start-up path (default 5)"
    )
    args = parser.parse_args()
    if not LOGSTAT.exists():
        sys.exit(f"bench: {LOGSTAT} not found: run `make install` first")
    tools = [tool.strip() for tool in args.tools.split(",") if tool.strip()]
    wanted = [case.strip() for case in args.cases.split(",")]
    if not wanted or not set(wanted) <= {"single", "many"}:
        sys.exit(f"bench: --cases {args.cases!r}: a comma-separated list of 'single' and 'many'")
    single, many, sources = build_corpus(args.size_mb, args.files)
    load_before = os.getloadavg()
    cases = {}
    for case in wanted:
        directory = {"single": single, "many": many}[case]
        label = "one large file" if case == "single" else "many small files"
        cases[label] = (directory, bench_case(directory, tools, args.runs))
    startup_results = startup(args.startup_runs)
    load_after = os.getloadavg()
    print(
        f"\nlogstat bench: {len(sources)} real source logs repeated; {args.runs} runs per tool, interleaved; "
        f"{os.cpu_count()} CPUs; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print(f"perl: {PERL_ONE_LINER}\ngrep: {GREP_COUNT}\nlogstat: logstat parse . --tflops --format json\n")
    print_table(cases)
    print()
    for what, median_s, rss_mb, goal_s in startup_results:
        verdict = "ok" if median_s < goal_s else "MISSED"
        print(f"{what:60s} {median_s:6.2f} s  {rss_mb:6.1f} MB  goal < {goal_s} s: {verdict}")


if __name__ == "__main__":
    main()

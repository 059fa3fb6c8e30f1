"""Slurm and launcher context: job id, node/GPU counts, GPU model, and what ended a run.

Facts: ``SLURM_JOB_ID=...`` (the file name's ``%j`` is read by the reader), ``set -x`` echoes such as
``+ NNODES=16`` and ``+ GPUS_PER_NODE=4``, the GPU model from nvidia-smi tables or ``GPU 0: NVIDIA
A100-SXM4-80GB`` lines, and a launch script's ``Model size: 52B`` echo (seed 001).

Failures, each quoted as the run's ``reason``: CUDA out of memory; NCCL timeouts and watchdog
aborts; ``CANCELLED AT ... DUE TO TIME LIMIT`` (failed: time limit); ``CANCELLED AT ...`` otherwise
(cancelled); node failures and ``srun: error``; a Python traceback (its last exception line); a
killed process (OOM killer, ``Killed``, signal 9, the launcher killing its workers).
"""

from __future__ import annotations

import re

from logstat.parsers.base import Family, RunBuilder

NAME = "slurm"
TRACEBACK_MAX_LINES = 400
#: exceptions with which launchers end when a worker failed (the worker's lines say why).
LAUNCHER_EXCEPTIONS = ("ChildFailedError", "CalledProcessError")

_SET_X = re.compile(r"^\+\s*(?:export\s+)?(?P<name>[A-Z_]+)=(?P<value>\S+)")
_ENV = re.compile(r"\b(?P<name>SLURM_JOB_?ID|SLURM_NNODES|SLURM_GPUS_ON_NODE)=(?P<value>\d+)")
_SET_X_FACTS = {
    "NNODES": "nodes",
    "GPUS_PER_NODE": "gpus_per_node",
    "SLURM_NNODES": "nodes",
    "N_NODES": "nodes",
}
_ENV_FACTS = {
    "SLURM_JOB_ID": "job_id",
    "SLURM_JOBID": "job_id",
    "SLURM_NNODES": "nodes",
    "SLURM_GPUS_ON_NODE": "gpus_per_node",
}
_MODEL_SIZE = re.compile(r"Model size: (?P<size>[\d.]+)\s*B\b")

_V100 = re.compile(r"V100[- ]?(?P<form>SXM2|PCIE)(?:[- ](?P<mem>16|32)GB)?", re.IGNORECASE)
_A100 = re.compile(
    r"A100[- ](?:(?P<form>SXM4|PCIE)[- ](?P<mem>40|80)GB|(?P<mem2>40|80)GB (?P<form2>PCIe|SXM4))",
    re.IGNORECASE,
)
_H100 = re.compile(r"H100(?P<rest>[- ]\w+)?", re.IGNORECASE)
# (?<!\d): a search must not restart inside a run of digits (quadratic on a line of 100k digits)
_SMI_MEMORY = re.compile(r"(?<!\d)(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")

_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)\b(?::|$)")
_NCCL_FAILURE = re.compile(r"[Tt]ime(d )?out|timeout|[Ee]rror")
# r"\bKilled\b|oom[-_]kill|..." with every alternative opening on a literal, so that re scans a line for
# the first letters of the alternatives only (a leading \b made it try all of them at every position:
# 2.6 -> 0.4 us on a 90-character line); the look-behind checks the word boundary before "Killed"
_KILLED = re.compile(r"Killed\b(?<=\bKilled)|oom[-_]kill|signal 9\b|SIGKILL|Killing subprocess")


def gpu_model(text: str) -> str | None:
    """Normalised GPU model (the names of logstat.analytics.gpus) named in ``text``, or None."""
    # every model is named with "100": a substring test first, as the patterns ignore case and re has no
    # literal to scan a line for
    if "100" not in text:
        return None
    match = _A100.search(text)
    if match:
        form = (match["form"] or match["form2"]).upper()
        return f"A100-{form}-{match['mem'] or match['mem2']}GB"
    match = _V100.search(text)
    if match:
        form = match["form"].upper()
        return f"V100-{form}-{match['mem']}GB" if match["mem"] else f"V100-{form}"
    match = _H100.search(text)
    if match:
        return "H100-PCIE" if "pcie" in (match["rest"] or "").lower() or "PCIe" in text else "H100-SXM"
    return None


def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one launcher/cluster line into ``run``; never raises."""
    state = run.state.get(NAME)
    if state is None:  # not setdefault, which would build an empty dict for every line
        state = run.state[NAME] = {}
    in_traceback = state.get("in_traceback")
    # DeepSpeed's launcher's line per worker it kills, alone on its line (~250k lines per GiB of a bench):
    # what fullmatch(r"Killing subprocess \d+") finds (\d: str.isdecimal's digits) at a third of its cost,
    # as every other line fails startswith at once. No other test below can match such a line: straight
    # to their branch for killed processes
    if not in_traceback and text.startswith("Killing subprocess ") and text[19:].isdecimal():
        if not state.get("failure_from_launcher"):  # else the launcher killing its other workers: skipped
            _launcher_killed(text, lineno, run, state)
        return
    # An indented line inside a traceback is a frame's source (`    raise torch.OutOfMemoryError(`),
    # not the error: the exception line below it is the evidence.
    oom = ("CUDA out of memory" in text or "OutOfMemoryError" in text) and not (
        in_traceback and text[:1].isspace()
    )
    if in_traceback and not oom and _traceback_line(text, lineno, run, state):
        return
    if oom:
        if in_traceback:
            _end_traceback(run, state)
        _fail(run, state, "failed", f"CUDA out of memory: {text.strip()}", lineno)
    elif "CANCELLED AT" in text:
        if "TIME LIMIT" in text:
            _fail(run, state, "failed", f"time limit: {text.strip()}", lineno)
        elif "NODE FAIL" in text:
            _fail(run, state, "failed", f"node failure: {text.strip()}", lineno)
        else:
            _fail(run, state, "cancelled", text.strip(), lineno)
    elif "Watchdog caught" in text or ("NCCL" in text and _NCCL_FAILURE.search(text)):
        _fail(run, state, "failed", f"NCCL timeout/error: {text.strip()}", lineno)
    elif "srun: error" in text or "NODE_FAIL" in text:
        _fail(run, state, "failed", text.strip(), lineno)
    elif "exits with return code" in text:
        _fail(run, state, "failed", f"worker failed: {text.strip()}", lineno)
    elif _KILLED.search(text):
        _killed(text, lineno, run, state)
    elif "Traceback (most recent call last)" in text:
        state.update(in_traceback=True, traceback_start=lineno)
        run.capture(NAME)
    else:
        _context(text, lineno, run, state)


def _killed(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    """A killed process (OOM killer, ``Killed``, signal 9, the launcher killing its workers)."""
    launcher = "Killing subprocess" in text
    if launcher and state.get("failure_from_launcher"):
        return  # the launcher killing its other workers, one line each: the first one is kept
    _fail(run, state, "failed", f"killed: {text.strip()}", lineno)
    if launcher and run.failure is not None and run.failure[2] == lineno:
        # DeepSpeed's launcher kills the other workers after one failed; a later line says how
        state["failure_from_launcher"] = True


def _launcher_killed(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    """``_killed`` of a bare ``Killing subprocess N`` while no kill of the launcher is on record, without
    its tests that such a line answers already (it is a launcher kill, has no space to strip, and the
    ``failure_from_launcher`` that ``_fail`` resets is not set): a line costs a call less per worker."""
    run.saw(NAME)
    run.fail("failed", "killed: " + text, lineno)
    if run.failure is not None and run.failure[2] == lineno:
        state["failure_from_launcher"] = True


def _fail(run: RunBuilder, state: dict, status: str, reason: str, lineno: int) -> None:
    run.saw(NAME)
    if state.pop("failure_from_launcher", False):
        run.failure = None  # the launcher only said that a worker failed; this line says how
    run.fail(status, reason, lineno)


def _traceback_line(text: str, lineno: int, run: RunBuilder, state: dict) -> bool:
    """Inside a traceback: wait for its exception line. True when the line was consumed."""
    stripped = text.strip()
    if lineno - state.get("traceback_start", lineno) > TRACEBACK_MAX_LINES:
        _end_traceback(run, state)
        return False
    # _EXCEPTION reads a dotted name up to the line's first ':' or its end: a line with a space before
    # that (a frame's `File "x.py", line 3, in f`, most source lines) is none, without running the pattern
    if " " in stripped.partition(":")[0] or not _EXCEPTION.match(stripped):
        return True
    _end_traceback(run, state)
    run.saw(NAME)
    # A chained traceback ends with the exception that ended the run: the last one replaces the
    # earlier ones as long as the failure on record came from a traceback.
    # A launcher's own exception (torchrun's ChildFailedError, DeepSpeed launcher's CalledProcessError)
    # only says that a worker failed: it never replaces the worker's evidence, and later evidence
    # (torchrun's root cause, e.g. "Signal 9 (SIGKILL) received by PID") replaces it.
    launcher = any(name in stripped for name in LAUNCHER_EXCEPTIONS)
    if run.failure is None or (state.get("failure_from_traceback") and not launcher):
        run.failure = None
        run.fail("failed", stripped, lineno)
        state["failure_from_traceback"] = True
        state["failure_from_launcher"] = launcher
    return True


def _end_traceback(run: RunBuilder, state: dict) -> None:
    state["in_traceback"] = False
    run.capture(NAME, False)


def _fact(run: RunBuilder, name: str, value: object, lineno: int) -> None:
    run.saw(NAME)
    run.set_fact(name, value, NAME, lineno)


def _context(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    match = _SET_X.match(text.strip())
    if match and match["name"] in _SET_X_FACTS and match["value"].isdigit():
        _fact(run, _SET_X_FACTS[match["name"]], int(match["value"]), lineno)
        return
    if "SLURM_" in text:  # each name _ENV reads starts so: a substring test is far cheaper than its search
        _read_env(run, text, lineno)
    match = _MODEL_SIZE.search(text)
    if match:
        _fact(run, "logged_model_size", float(match["size"]), lineno)
        return
    memory = "MiB" in text and _SMI_MEMORY.search(text)  # the substring test first, as above
    if memory and state.get("gpu_form"):
        total_gb = int(memory["total"]) / 1024
        size = next((s for s in (16, 32, 40, 80, 94) if total_gb <= s), None)
        if size:
            _fact(run, "gpu_model", f"{state.pop('gpu_form')}-{size}GB", lineno)
        return
    model = gpu_model(text)
    if model is None:
        return
    if model.count("-") == 1 and model.startswith("V100"):
        state["gpu_form"] = model  # nvidia-smi cut the name: the memory column of the next row tells
        return
    _fact(run, "gpu_model", model, lineno)


def _read_env(run: RunBuilder, text: str, lineno: int) -> None:
    for match in _ENV.finditer(text):
        fact = _ENV_FACTS.get(match["name"])
        if fact == "job_id":
            _fact(run, fact, match["value"], lineno)
        elif fact is not None:
            _fact(run, fact, int(match["value"]), lineno)


FAMILY = Family(
    name=NAME,
    markers=(
        "CUDA out of memory",
        "OutOfMemoryError",
        "CANCELLED AT",
        "Watchdog caught",
        # not bare "NCCL": NCCL_DEBUG=INFO prints millions of "NCCL INFO" lines that must stay off the hot path
        "NCCL timeout",
        "NCCL error",
        "NCCL Error",
        "ncclInternalError",
        "ncclSystemError",
        "ncclUnhandledCudaError",
        "NCCL communicator was aborted",
        "srun: error",
        "NODE_FAIL",
        "Killed",
        "oom-kill",
        "oom_kill",
        "signal 9",
        "SIGKILL",
        "Killing subprocess",
        "exits with return code",
        "Traceback (most recent call last)",
        "NNODES=",
        "GPUS_PER_NODE=",
        "SLURM_JOB",
        "SLURM_GPUS_ON_NODE=",
        "Model size:",
        "V100",
        "A100",
        "H100",
        "MiB /",
    ),
    parse_line=parse_line,
    description="Slurm / launcher context: job id, nodes, GPU model, and failures (OOM, NCCL, time limit, ...)",
    context=True,
)

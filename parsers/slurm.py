"""Slurm and launcher context: job id, node/GPU counts, GPU model, and what ended a run.

Facts: ``SLURM_JOB_ID=...`` (the file name's ``%j`` is read by the reader), ``set -x`` echoes such as
``+ NNODES=16`` and ``+ GPUS_PER_NODE=4``, the GPU model from nvidia-smi tables or ``GPU 0: NVIDIA
A100-SXM4-80GB`` lines, and a launch script's ``Model size: 52B`` echo (seed 001).

Failures are events, each either a root cause or one of its consequences (weights in parsers/base.py):

- causes: a worker's exception (a traceback's exception line; the last one of a chained traceback),
  CUDA out of memory, an NCCL watchdog timeout or NCCL error, the cgroup OOM killer's ``oom_kill
  event``, ``CANCELLED AT ... DUE TO TIME LIMIT`` / ``NODE FAILURE`` (failed), a cancel without a
  failure before it (cancelled), srun's node failure or other errors, argparse's ``<prog>: error:``;
- consequences: a kill (``Killed``, signal 9, SIGKILL), a peer's connection reset or aborted NCCL
  communicator, a signal's exception; then reports that a worker failed (a launcher's exit code,
  ChildFailedError, CalledProcessError, ``DUE TO TASK FAILURE``, mpirun's summary, ``srun: error:
  ...: task 3: Exited with exit code 1``); last the launcher killing its other workers.

The run's reason is the first event of the strongest weight in line order, so the first cause when
there is one, whatever follows. A time limit's line comes after the training's last lines and before
what the kill makes the processes print (their tracebacks, torch elastic's SignalException): those come
after it and are its consequences; an exception before it is what the job died (or hung) of.
Tracebacks Python prints and ignores (``Exception ignored in ...``, logging's ``--- Logging error
---``) and warnings that name an error are not failures.

A launcher's word that its workers exited with code 0 (DeepSpeed's ``Process N exits successfully.``,
torch elastic's ``worker group successfully finished``) makes a run ``ok`` when nothing failed; it never
outweighs a failure.
"""

from __future__ import annotations

import re

from logstat.parsers.base import CAUSE, CLEANUP, EFFECT, REPORT, Family, RunBuilder

NAME = "slurm"
#: lines a traceback may go without a frame before it is given up (its exception line was lost)
TRACEBACK_MAX_LINES = 400
#: exceptions with which launchers end when a worker failed (the worker's lines say why).
LAUNCHER_EXCEPTIONS = ("ChildFailedError", "CalledProcessError")
#: an exception raised because the process got a signal (torch elastic's agent under scancel or a time limit)
SIGNAL_EXCEPTIONS = ("SignalException", "got signal:")
#: what a rank prints when a peer died first (gloo/c10d sockets, NCCL's abort of a communicator)
PEER_FAILURES = (
    "Connection reset by peer",
    "Connection closed by peer",
    "NCCL communicator was aborted",
    "ncclRemoteError",
    "remote process exited",
)
#: a launcher's word that a worker exited with code 0: DeepSpeed's launcher (launch.py, ``Process N exits
#: successfully.``) and torch elastic's agent (``[default] worker group successfully finished. Waiting ...``)
CLEAN_EXITS = ("exits successfully", "worker group successfully finished")
#: Open MPI's mpirun after a rank failed (help-mpirun.txt, help-errmgr-base.txt)
MPIRUN_ENDS = ("exited on signal", "exited with non-zero status", "terminated normally, but")
#: lines right before a traceback that Python printed and ignored: the unraisable hook's (``__del__``,
#: atexit callbacks: "Exception ignored in: <...>", "Exception ignored in atexit callback: <...>") and
#: logging's failure to emit a record (Handler.handleError)
HARMLESS_TRACEBACKS = ("Exception ignored in", "--- Logging error ---")
#: the lines of an open traceback that can change what is recorded: a frame (``File "..."``), another
#: header, and an exception line (_EXCEPTION ends its name on one of these words); the reader delivers
#: only these (polars searches them) instead of every line while a traceback is open
TRACEBACK_LINES = 'File "|Traceback|Error|Exception|Interrupt|Exit|Failure'
#: and of those, the ones that inside a traceback only move ``traceback_last`` on (a frame, another rank's
#: header: _traceback_line's test, as Rust's ``\s`` is part of what Python's strip() removes) or end it
#: (a marked frame naming an OOM): of such lines one after another only the last one's line is ever read,
#: so the reader hands over only that one. Most lines of hundreds of ranks' interleaved tracebacks are so
TRACEBACK_CAPTURE = TRACEBACK_LINES
#: the lines between the tracebacks of a chained exception (traceback.py, pythonrun.c)
CHAINED_TRACEBACKS = ("During handling of the above exception", "The above exception was the direct cause")

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
#: srun's ``srun: error: <node>: task 3: Exited with exit code 1`` / ``tasks 0-3: Killed``
_SRUN_TASK = re.compile(r"\btasks? [\d,-]+: (?P<how>.*)")
#: argparse's ``<prog>: error: <message>`` (prog: the script's name), not a scheduler's own errors
_ARGPARSE_ERROR = re.compile(r"(?!(?:srun|slurmstepd|sbatch|salloc):)[\w.-]+: error: ")
#: a warning: Python's ``file.py:12: UserWarning: ...``, logging's ``WARNING:``/`` - WARNING - ``/
#: ``[WARNING]`` and glog's ``W1121 22:02:01.99 ...`` / ``[W1121 ...`` / ``[W ProcessGroupNCCL.cpp:...]``
_WARNING = re.compile(r"^\s*\[?W(?:\d{4} | )|\[WARNING\]|\bWARNING[:\]]| - WARNING - |\w+Warning: ")
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
        if not state.get("launcher_killing"):  # else the launcher killing its other workers: skipped
            _launcher_killed(text, lineno, run, state)
        return
    # An indented line inside a traceback is a frame's source (`    raise torch.OutOfMemoryError(`),
    # not the error: the exception line below it is the evidence.
    oom = ("CUDA out of memory" in text or "OutOfMemoryError" in text) and not (
        in_traceback and text[:1].isspace()
    )
    # a harmless traceback's exception line is consumed there, even an OOM's
    if in_traceback and (not oom or state.get("harmless")) and _traceback_line(text, lineno, run, state):
        return
    if oom:
        if in_traceback:
            _end_traceback(run, state)
        _event(run, text, lineno, "CUDA out of memory: ", CAUSE, "cuda oom")
    elif "CANCELLED AT" in text:
        _cancelled(text, lineno, run)
    elif "Watchdog caught" in text or ("NCCL" in text and _NCCL_FAILURE.search(text)):
        # the first rank's watchdog is the cause; a communicator aborted because a peer failed is not
        peer = any(failure in text for failure in PEER_FAILURES)
        _event(
            run, text, lineno, "NCCL timeout/error: ", EFFECT if peer else CAUSE, "peer" if peer else "nccl"
        )
    elif "srun: error" in text or "NODE_FAIL" in text:
        _srun_error(text, lineno, run)
    elif "exits successfully" in text or "worker group successfully finished" in text:  # CLEAN_EXITS
        run.saw(NAME)
        run.exited_cleanly(text, lineno)
    elif "exits with return code" in text:  # DeepSpeed's launcher, after a worker failed
        _event(run, text, lineno, "worker failed: ", REPORT, "launcher exit")
    elif (
        "exited on signal" in text
        or "exited with non-zero status" in text
        or "terminated normally, but" in text
    ):
        # MPIRUN_ENDS (the tests are written out: a generator over the tuple costs more per line)
        _event(run, text, lineno, "", EFFECT if "exited on signal" in text else REPORT, "mpirun")
    elif _KILLED.search(text):
        _killed(text, lineno, run, state)
    elif "by peer" in text:  # c10d/gloo socket errors of a rank whose peer died
        _event(run, text, lineno, "", EFFECT, "peer")
    elif "Traceback (most recent call last)" in text:
        # a traceback right after Python's "Exception ignored in ..." (or logging's "--- Logging error
        # ---") is printed and ignored; one right after "During handling of the above exception ..."
        # continues the traceback before it
        state.update(
            in_traceback=True,
            traceback_last=lineno,
            harmless=0 <= lineno - state.get("harmless_at", -9) <= 2,
            chained=0 <= lineno - state.get("chained_at", -9) <= 3,
        )
        run.capture(NAME, lines=TRACEBACK_CAPTURE)
    elif "Exception ignored in" in text or "--- Logging error ---" in text:  # HARMLESS_TRACEBACKS
        state["harmless_at"] = lineno
    elif (
        "During handling of the above exception" in text or "The above exception was the direct cause" in text
    ):
        state["chained_at"] = lineno
    elif ": error: " in text:
        if _ARGPARSE_ERROR.match(text.strip()):  # a worker's (or a launcher's) command line was refused
            _event(run, text, lineno, "", CAUSE, "arguments")
    else:
        _context(text, lineno, run, state)


def _event(
    run: RunBuilder, text: str, lineno: int, label: str, weight: int, kind: str, status: str = "failed"
) -> None:
    """A failure event read from one line, quoted after ``label``; a warning (a Python warning or a
    line logged at warning level) that names an error is none."""
    if _WARNING.search(text):
        return
    run.saw(NAME)
    run.fail(status, label + text.strip(), lineno, weight=weight, kind=kind)


def _cancelled(text: str, lineno: int, run: RunBuilder) -> None:
    """slurmstepd's ``*** JOB|STEP <id> ON <node> CANCELLED AT <time> [DUE TO <why>] ***``."""
    if "TIME LIMIT" in text:
        _event(run, text, lineno, "time limit: ", CAUSE, "time limit")
    elif "NODE FAIL" in text:
        _event(run, text, lineno, "node failure: ", CAUSE, "node failure")
    elif "TASK FAILURE" in text or ("*** STEP" in text and "DUE TO" not in text and run.failure is not None):
        # Slurm ending a job (or srun a step, after "srun: Terminating StepId=...") because a task
        # failed: the task's own lines say why
        _event(run, text, lineno, "", REPORT, "slurm cancel")
    elif "PREEMPTION" in text:
        _event(run, text, lineno, "preempted: ", CAUSE, "cancelled", "cancelled")
    else:  # scancel by a user or an admin, a requeue
        _event(run, text, lineno, "", CAUSE, "cancelled", "cancelled")


def _srun_error(text: str, lineno: int, run: RunBuilder) -> None:
    """srun's errors: a node failure is a cause; a task's end (``task 3: Exited with exit code 1``,
    ``task 3: Killed``) follows from what the task printed before; other errors (a step that could not
    start) are causes."""
    if "Node failure" in text or "NODE_FAIL" in text:
        _event(run, text, lineno, "", CAUSE, "node failure")
        return
    task = _SRUN_TASK.search(text)
    if task is None:
        _event(run, text, lineno, "", CAUSE, "srun")
    else:
        _event(run, text, lineno, "", REPORT if task["how"].startswith("Exited") else EFFECT, "srun task")


def _killed(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    """A killed process: the cgroup OOM killer's event is a cause; a kill itself (``Killed``, signal 9,
    SIGKILL) says how a process ended; the launcher killing its workers follows a failure."""
    if "Killing subprocess" in text:
        if state.get("launcher_killing"):
            return  # the launcher killing its other workers, one line each: the first one is kept
        state["launcher_killing"] = True
        _event(run, text, lineno, "killed: ", CLEANUP, "launcher kill")
    elif "oom-kill" in text or "oom_kill" in text:
        _event(run, text, lineno, "killed: ", CAUSE, "oom-kill")
    else:
        _event(run, text, lineno, "killed: ", EFFECT, "killed")


def _launcher_killed(text: str, lineno: int, run: RunBuilder, state: dict) -> None:
    """``_killed`` of a bare ``Killing subprocess N`` while no kill of the launcher is on record, without
    its tests that such a line answers already (it is a launcher kill, no warning, nothing to strip):
    a line costs a call less per worker."""
    state["launcher_killing"] = True
    run.saw(NAME)
    run.fail("failed", "killed: " + text, lineno, weight=CLEANUP, kind="launcher kill")


def _traceback_line(text: str, lineno: int, run: RunBuilder, state: dict) -> bool:
    """Inside a traceback: wait for its exception line. True when the line was consumed."""
    stripped = text.strip()
    if stripped.startswith(('File "', "Traceback (most recent call last)")):
        # another frame, or another rank's traceback: hundreds of ranks' interleaved tracebacks are one
        # long block, given up only after TRACEBACK_MAX_LINES lines without a frame
        state["traceback_last"] = lineno
        return True
    if lineno - state.get("traceback_last", lineno) > TRACEBACK_MAX_LINES:
        _end_traceback(run, state)
        return False
    # _EXCEPTION reads a dotted name up to the line's first ':' or its end: a line with a space before
    # that (most source lines) is none, without running the pattern
    if " " in stripped.partition(":")[0] or not _EXCEPTION.match(stripped):
        return True
    harmless, chained = state.get("harmless"), state.get("chained")
    _end_traceback(run, state)
    if harmless:
        return True
    run.saw(NAME)
    weight, kind = _exception_weight(stripped)
    run.fail("failed", stripped, lineno, weight=weight, kind=kind, exception=True, chained=chained)
    return True


def _exception_weight(line: str) -> tuple[int, str]:
    """``(weight, kind)`` of a traceback's exception line: a launcher's own exception (torchrun's
    ChildFailedError, DeepSpeed's runner's CalledProcessError) only says that a worker failed; a signal
    (torch elastic's SignalException) or a peer's end (connection reset) says how a process ended; any
    other exception is a cause."""
    if any(name in line for name in LAUNCHER_EXCEPTIONS):
        return REPORT, "launcher"
    if any(name in line for name in SIGNAL_EXCEPTIONS):
        return EFFECT, "signal"
    if any(failure in line for failure in PEER_FAILURES):
        return EFFECT, "peer"
    return CAUSE, "exception"


def _end_traceback(run: RunBuilder, state: dict) -> None:
    state["in_traceback"] = state["harmless"] = state["chained"] = False
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
        *CLEAN_EXITS,
        *MPIRUN_ENDS,
        "Connection reset by peer",
        "Connection closed by peer",
        "Traceback (most recent call last)",
        *HARMLESS_TRACEBACKS,
        *CHAINED_TRACEBACKS,
        ": error: ",  # argparse's "<prog>: error: <message>"
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

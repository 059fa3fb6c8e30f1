"""What ended a run: the first root cause is the reason, what followed from it the consequences.

Each line is in the format of the tool that prints it (slurmstepd's and srun's format strings of the
installed Slurm, torch elastic's api.py and errors/__init__.py, DeepSpeed's launch.py, argparse, Open MPI's
help texts, CPython's unraisable hook and logging.Handler.handleError); the files with these formats
end to end are fixtures/failures/ (tests/reliability/test_failures.py).
"""

from __future__ import annotations

import pytest
from logstat.parsers import slurm
from logstat.parsers.base import CAUSE, EFFECT, MAX_CONSEQUENCES, REPORT, RunBuilder

from tests.parsers.feeding import feed_lines, first_run

STEP = "slurmstepd: error: *** STEP 7.0 ON r7i4n1 CANCELLED AT 2021-05-26T12:03:11"
JOB = "slurmstepd: error: *** JOB 7 ON r7i4n1 CANCELLED AT 2021-05-26T12:03:11"
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "pretrain_gpt.py", line 149, in <module>',
    "    main()",
]
WATCHDOG = (
    "[E1121 22:14:31.392847512 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=4097, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds "
    "before timing out."
)


def feed(*lines: str) -> RunBuilder:
    return feed_lines(slurm.FAMILY, lines)


def reason(run: RunBuilder) -> tuple[str, int]:
    assert run.failure is not None
    return run.failure[0], run.failure[2]


# --- Slurm's cancel lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "status", "line"),
    [
        # a task's failure, then Slurm's cancel because of it: failed, at the task's evidence
        ([WATCHDOG, f"{STEP} DUE TO TASK FAILURE ***"], "failed", 1),
        ([*TRACEBACK, "ValueError: bad", f"{JOB} DUE TO TASK FAILURE ***"], "failed", 4),
        # srun (--kill-on-bad-exit) ends a step after a task's exit: its bare STEP cancel follows from it
        (
            [
                "srun: error: r7i4n1: task 3: Exited with exit code 1",
                "srun: Terminating StepId=7.0",
                f"{STEP} ***",
            ],
            "failed",
            1,
        ),
        # only Slurm's line: still failed (a task failed), quoted
        ([f"{STEP} DUE TO TASK FAILURE ***"], "failed", 1),
        # a user's scancel: the job's line first; the steps' lines follow it
        ([f"{JOB} ***", f"{STEP} ***"], "cancelled", 1),
        ([f"{STEP} ***"], "cancelled", 1),
        # a cancel outranks srun's report of a task that ended before it
        (["srun: error: task 3: Exited with exit code 1", f"{JOB} ***"], "cancelled", 2),
        ([f"{JOB} DUE TO PREEMPTION ***"], "cancelled", 1),
        ([f"{JOB} DUE TO TIME LIMIT ***"], "timeout", 1),
    ],
)
def test_slurm_cancels(lines, status, line):
    assert reason(feed(*lines)) == (status, line)


def test_a_bare_step_cancel_after_a_failure_read_column_wise_is_a_report():
    """A traceback's exception and the launcher's kill lines are read column-wise, after the cancel's
    line: the bare STEP cancel after them follows from them all the same (``slurm.finish``)."""
    after_traceback = feed(*TRACEBACK, "ValueError: bad", f"{STEP} ***", f"{JOB} ***")
    assert after_traceback.failure == ("failed", "ValueError: bad", 4)
    # a report: the JOB's cancel is kept as a consequence of its own kind
    assert after_traceback.consequence_lines() == [f"lines.log:5: {STEP} ***", f"lines.log:6: {JOB} ***"]
    launcher = feed(
        *TRACEBACK, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", f"{STEP} ***"
    )
    assert launcher.failure == (
        "failed",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        4,
    )
    after_kill = feed("Killing subprocess 7", f"{STEP} ***")
    assert after_kill.failure == ("failed", f"{STEP} ***", 2)
    assert after_kill.consequence_lines() == ["lines.log:1: killed: Killing subprocess 7"]


def test_a_time_limit_outranks_the_tracebacks_of_its_signal_in_any_order():
    """torch elastic's agent raises SignalException when Slurm's SIGTERM arrives: whether its traceback
    is written before or after slurmstepd's line, the time limit is the reason."""
    signal = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2386 got signal: 15"
    limit = f"{JOB} DUE TO TIME LIMIT ***"
    after = feed(limit, *TRACEBACK, signal)
    before = feed(*TRACEBACK, signal, limit)
    assert reason(after) == ("timeout", 1) and after.failure[1].startswith("time limit: ")
    assert reason(before) == ("timeout", 5) and before.failure[1].startswith("time limit: ")
    assert after.consequence_lines() == [f"lines.log:5: {signal}"]
    assert before.consequence_lines() == [f"lines.log:4: {signal}"]


def test_an_exception_before_a_time_limit_is_what_the_job_died_of():
    run = feed(*TRACEBACK, "ValueError: bad", f"{JOB} DUE TO TIME LIMIT ***")
    assert run.failure == ("failed", "ValueError: bad", 4)
    assert run.consequence_lines() == [f"lines.log:5: time limit: {JOB} DUE TO TIME LIMIT ***"]


# --- launchers and kills ----------------------------------------------------------------------------


def test_the_oom_killer_is_the_cause_of_the_kill_before_or_after_it():
    kill = "/var/spool/slurmd/job1006/slurm_script: line 58: 2186571 Killed   python -u pretrain_gpt.py"
    event = (
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1006.batch. Some of your processes may "
        "have been killed by the cgroup out-of-memory handler."
    )
    for lines, line in (([kill, event], 2), ([event, kill], 1)):
        run = feed(*lines)
        assert run.failure == ("failed", f"host out of memory: {event}", line)
        assert run.consequence_lines() == [f"lines.log:{3 - line}: killed: {kill}"]


@pytest.mark.parametrize(
    "limit",
    [
        # the job accounting's kill and its word after it (libslurmfull: "%ps exceeded memory limit (%lu >
        # %lu), being killed", "Exceeded job memory limit"), slurmstepd's error() prefix
        "slurmstepd: error: StepId=4001.0 exceeded memory limit (257698037 > 251658240), being killed",
        "slurmstepd: error: StepId=4001.0 exceeded virtual memory limit (257698037 > 251658240), being killed",
        "slurmstepd: error: Exceeded job memory limit",
        # srun's word on a task the OOM killer ended (launch_slurm: "%s: %s %s: Out Of Memory")
        "srun: error: r7i4n1: task 0: Out Of Memory",
        # Kubernetes' reason for a container over its limit (kubectl describe pod)
        "Reason:       OOMKilled",
        # Cray ALPS's, before aprun's "exit signals: Killed"
        "[NID 12345] 2019-11-02 14:24:41 Apid 81234567: OOM killer terminated this process.",
    ],
)
def test_a_host_memory_limit_is_the_cause_of_the_kill(limit):
    """A step over its memory limit is killed: the limit is the cause, as the cgroup OOM killer's event."""
    kill = "srun: error: r7i4n1: task 1: Killed"
    for lines, line in (([limit, kill], 1), ([kill, limit], 2)):
        run = feed(*lines)
        assert (run.failure, run.failure_kind) == (
            ("failed", f"host out of memory: {limit}", line),
            "oom-kill",
        )
        assert run.consequence_lines() == [f"lines.log:{3 - line}: {kill}"]


def test_rays_memory_monitor_killing_a_worker_is_the_cause_of_the_dead_actor():
    # the raylet's report (node_manager.cc), then Ray Train's error of the actor it killed, whose detail
    # says so again
    report = (
        "(raylet, ip=10.0.12.7) [2024-09-10 13:41:07,881 E 2201 2201] (raylet) node_manager.cc:3069: 1 Workers "
        "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node "
        "(ID: 8a3f5c8e1bd0c24d91f3, IP: 10.0.12.7) over the last time period."
    )
    died = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    detail = (
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
        "detail: Task was killed due to the node running low on memory."
    )
    run = feed(report, *TRACEBACK, died, detail)
    assert (run.failure, run.failure_kind) == (("failed", f"host out of memory: {report}", 1), "oom-kill")
    assert run.consequence_lines()[0] == f"lines.log:5: {died}"
    alone = feed(*TRACEBACK, died, detail)
    assert (alone.failure, alone.failure_kind) == (("failed", f"host out of memory: {detail}", 5), "oom-kill")


@pytest.mark.parametrize(
    "execve",
    [  # slurmstepd's "execve(): %s: %m" and "execve(): bad interpreter(%s): %m", with its error() prefix
        "slurmstepd: error: execve(): python: No such file or directory",
        "slurmstepd: error: execve(): /scratch/run/convert_checkpoint.sh: Permission denied",
        "slurmstepd: error: execve(): bad interpreter(/opt/venv/bin/python3): No such file or directory",
    ],
)
def test_a_task_slurm_could_not_start_is_the_cause_of_its_exit_code(execve):
    exit_code = "srun: error: r7i4n1: task 0: Exited with exit code 2"
    run = feed(execve, exit_code, "srun: launch/slurm: _step_signal: Terminating StepId=4801.0")
    assert (run.failure, run.failure_kind) == (("failed", execve, 1), "exec")
    assert run.consequence_lines() == [f"lines.log:2: {exit_code}"]


@pytest.mark.parametrize(
    "status",  # the signal's description (strsignal) padded to 24 characters, then "(core dumped) " if it dumped
    [
        "Segmentation fault      (core dumped)",
        "Bus error              ",
        "Aborted                 (core dumped)",
        "Illegal instruction     ",
        "Floating point exception(core dumped)",
    ],
)
def test_bashs_report_of_a_crashed_command_is_a_crash(status):
    """bash 5.2's report (jobs.c, a shell not interactive) of the job script's command that a signal ended,
    as `sh -c 'kill -SEGV $$'` in a script prints it: ``<script>: line N: <pid> <status> <command>``."""
    crash = f"/var/spool/slurmd/job4403/slurm_script: line 42: 81234 {status} python pretrain_gpt.py"
    run = feed("W1121 22:02:07.956000 2386 api.py:1028] Sending process 2459 closing signal SIGTERM", crash)
    assert (run.failure, run.failure_weight, run.failure_kind) == (
        ("failed", f"crashed: {crash}", 2),
        EFFECT,
        "crash",
    )
    # the exception before it is what the command died of; a signal that is no crash, bash's other errors are none
    exception = feed(*TRACEBACK, "ValueError: bad", crash)
    assert exception.failure == ("failed", "ValueError: bad", 4)
    assert exception.consequence_lines() == [f"lines.log:5: crashed: {crash}"]
    terminated = "/var/spool/slurmd/job4403/slurm_script: line 42: 81234 Terminated              python x.py"
    assert (
        feed(terminated, "/var/spool/slurmd/job4403/slurm_script: line 7: conda: command not found").failure
        is None
    )


def test_torchrun_signal_summary_is_the_reason_only_without_a_cause():
    """torchrun's error summary (errors/__init__.py): ChildFailedError says a worker failed, its root
    cause's ``exitcode : -9 ... (SIGKILL)`` how it ended; the worker's own exception outranks both."""
    summary = [
        *TRACEBACK,
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "Root Cause (first observed failure):",
        "  exitcode  : -9 (pid: 2460)  (SIGKILL)",
        "  traceback : Signal 9 (SIGKILL) received by PID 2460",
    ]
    alone = feed(*summary)
    assert alone.failure == ("failed", "killed: exitcode  : -9 (pid: 2460)  (SIGKILL)", 6)
    assert alone.consequence_lines() == [
        "lines.log:4: torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    ]
    worker = feed("usage: train.py [-h] [--attention {flash,sdpa}]", "train.py: error: argument --attention: "
                  "invalid choice: 'xformers' (choose from 'flash', 'sdpa')", *summary)  # fmt: skip
    assert reason(worker) == ("failed", 2)
    assert [line.split(":")[1] for line in worker.consequence_lines()] == ["6", "8"]


def test_torchruns_failure_table_names_the_killed_workers_rank_and_host():
    # the lines before its exit code (errors/__init__.py _FAILURE_FORMAT_TEMPLATE): which node to look at
    table = ["[0]:", "  time      : 2026-11-27_01:40:12", "  host      : gpu-node-07.cluster"]
    table += ["  rank      : 13 (local_rank: 5)", "  exitcode  : -9 (pid: 8233)  (SIGKILL)"]
    run = feed("Root Cause (first observed failure):", *table)
    assert run.failure == (
        "failed",
        "killed: exitcode  : -9 (pid: 8233)  (SIGKILL) [rank 13 (local_rank: 5), host gpu-node-07.cluster]",
        6,
    )
    # an exit code far from a table's lines (another agent's summary, cut) names none
    far = feed("  host      : gpu-node-07", "  rank      : 13 (local_rank: 5)", "x", "y", table[-1])
    assert far.failure[1] == "killed: exitcode  : -9 (pid: 8233)  (SIGKILL)"


def test_a_workers_crash_is_said_by_its_own_report_not_the_launchers_code():
    """DeepSpeed's launcher's ``return code = -4`` (SIGILL) says a worker crashed; bash's report of the job
    script's command names the crash. A code of a signal from outside (-9) stays how the worker ended."""
    launcher = (
        "[2024-02-01 08:00:01,000] [ERROR] [launch.py:322:sigkill_handler] ['/envs/ds/bin/python', '-u', "
        "'pretrain_bert.py', '--local_rank=3'] exits with return code = -4"
    )
    crash = "/var/spool/slurmd/job1188430/slurm_script: line 21: 70988 Illegal instruction     (core dumped) deepspeed"
    run = feed(launcher, crash)
    assert (run.failure, run.failure_kind) == (("failed", f"crashed: {crash}", 2), "crash")
    assert run.consequence_lines() == [f"lines.log:1: worker failed: {launcher[26:]}"]  # its time left out
    killed = feed(launcher.replace("= -4", "= -9"), crash)
    assert killed.failure[2] == 1


def test_pdshs_interrupt_cancelled_the_run_unless_a_cause_is_known():
    # DeepSpeed's multi-node launcher under a user's Ctrl-C: pdsh's word, the workers' launch.py on the
    # SIGTERM pdsh sent, pdsh's report of the remote command's exit
    interrupt = "pdsh@worker-0: interrupt (one more within 1 sec to abort)"
    ends = [
        "worker-1: [2022-02-08 11:03:20,114] [INFO] [launch.py:187:sigkill_handler] Main process received SIGTERM, "
        "exiting",
        "pdsh@worker-0: worker-1: ssh exited with exit code 1",
    ]
    run = feed(interrupt, *ends)
    assert (run.failure, run.failure_kind) == (("cancelled", interrupt, 1), "interrupt")
    # the batch system's time limit, then pdsh's word on the signal it got from it
    limit = f"{JOB} DUE TO TIME LIMIT ***"
    assert reason(feed(limit, interrupt, *ends)) == ("timeout", 1)


def test_a_spawned_processs_error_is_the_cause_not_spawns_exception():
    # torch.multiprocessing.spawn (fairseq's launcher) raises ProcessRaisedException, then prints the
    # process's traceback after "-- Process 2 terminated with the following error:"
    spawned = [
        *TRACEBACK,
        "torch.multiprocessing.spawn.ProcessRaisedException: ",
        "",
        "-- Process 2 terminated with the following error:",
        *TRACEBACK,
        "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.",
    ]
    run = feed(*spawned)
    assert run.failure == ("failed", spawned[-1], 10)


def test_a_notebook_cells_error_is_the_cause_not_nbconverts_exception():
    # jupyter nbconvert --execute (a Kaggle notebook's run): nbclient's exception, then the cell's own
    # traceback as IPython prints it
    cell = [
        *TRACEBACK,
        "nbclient.exceptions.CellExecutionError: An error occurred while executing the following cell:",
        "------------------",
        "trainer.train()",
        "------------------",
        "UsageError                                Traceback (most recent call last)",
        "Cell In[14], line 1",
        "----> 1 trainer.train()",
        "UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])",
    ]
    run = feed(*cell)
    assert run.failure == ("failed", cell[-1], 11)


def test_deepspeed_launcher_exit_outranks_its_cleanup():
    run = feed(
        "[2021-05-26 10:00:00,000] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 4443",
        "[2021-05-26 10:00:00,001] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 4444",
        "[2021-05-26 10:00:00,002] [ERROR] [launch.py:259:sigkill_handler] ['python', 'train.py'] exits with "
        "return code = 1",
    )
    assert reason(run) == ("failed", 3) and run.failure[1].startswith("worker failed: ")
    assert run.consequence_lines() == [
        # DeepSpeed's logger's time, a prefix, is not quoted
        "lines.log:1: killed: [INFO] [launch.py:253:sigkill_handler] Killing subprocess 4443"
    ]


@pytest.mark.parametrize(
    "line",
    [
        "test.c:1:10: fatal error: libaio.h: No such file or directory",  # DeepSpeed's op builder probe
        '/tmp/x/fused.cu(12): error: identifier "half2" is undefined',  # nvcc
        "build.ninja:3: error: expected '=', got eof",
        "x.py:12: UserWarning: retrying after error: connection refused",
    ],
)
def test_compiler_and_tool_errors_are_not_argparse_errors(line):
    assert feed(line).failure is None


def test_mpirun_lines_are_consequences_of_the_ranks_exception():
    mpirun = [
        "Primary job  terminated normally, but 1 process returned",
        "a non-zero exit code. Per user-direction, the job has been aborted.",
        "mpirun detected that one or more processes exited with non-zero status, thus causing",
        "mpirun noticed that process rank 3 with PID 4242 on node r7i4n1 exited on signal 9 (Killed).",
    ]
    alone = feed(*mpirun)
    assert reason(alone) == ("failed", 4)  # the signal says how a rank ended; the summaries only that it did
    run = feed(*TRACEBACK, "RuntimeError: rank 3 diverged", *mpirun)
    assert run.failure == ("failed", "RuntimeError: rank 3 diverged", 4)
    assert run.consequence_lines() == [
        f"lines.log:5: {mpirun[0]}"
    ]  # mpirun's first line; the others repeat its kind


OOM_KILL = (
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.0. Some of your processes may have been killed "
    "by the cgroup out-of-memory handler."
)
DS_KILLED = (
    "[2024-03-02 10:11:14,001] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', "
    "'pretrain_gpt.py', '--local_rank=1'] exits with return code = -9"
)


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        # the cgroup OOM killer killed a rank; the others' watchdogs fired, then the step ended, then slurmstepd
        # said why (task_cgroup_memory_check_oom runs at the step's end)
        ([WATCHDOG, "srun: error: r7i4n2: task 5: Killed", OOM_KILL], 3),
        ([WATCHDOG, WATCHDOG.replace("Rank 3", "Rank 2"), OOM_KILL], 3),
        # a rank killed (DeepSpeed's launcher: its return code is the signal's negative), then the watchdogs
        ([DS_KILLED, WATCHDOG], 1),
        ([f"[default0]:{DS_KILLED}", "srun: error: r7i4n1: tasks 0-3: Aborted (core dumped)", WATCHDOG], 1),
        # the watchdog first, and nothing that killed a rank: it is the cause, its abort an effect
        ([WATCHDOG, "srun: error: r7i4n1: tasks 0-3: Aborted (core dumped)"], 1),
        ([WATCHDOG, DS_KILLED], 1),
    ],
)
def test_a_collective_timeout_is_the_effect_of_a_rank_that_died(lines, line):
    assert reason(feed(*lines)) == ("failed", line)


def test_a_tasks_own_file_is_its_own_time_line(tmp_path):
    # srun --output=%x-%j-%t.out: the job's output (read first) ends with srun's word on the task the
    # watchdog itself took down (SIGABRT after "terminate called"); the task's file says why
    from logstat.api import load_runs

    (tmp_path / "ds-5301.out").write_text(
        "\n".join(["srun: error: gpu21: task 3: Aborted (core dumped)", f"{STEP} ***", ""])
    )
    (tmp_path / "ds-5301-3.out").write_text(
        "\n".join([WATCHDOG, "terminate called after throwing an instance of 'c10::DistBackendError'", ""])
    )
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["status"], row["reason"].startswith("NCCL timeout/error: ")) == ("failed", True)
    assert row["consequences"][0] == "ds-5301.out:1: srun: error: gpu21: task 3: Aborted (core dumped)"
    # in one file the order is time: a rank that crashed before the watchdog fired is the reason
    one = tmp_path / "one"
    one.mkdir()
    (one / "ds-5302.out").write_text(
        "\n".join(["srun: error: gpu21: task 3: Aborted (core dumped)", WATCHDOG, ""])
    )
    assert (
        load_runs([one]).runs.row(0, named=True)["reason"]
        == "srun: error: gpu21: task 3: Aborted (core dumped)"
    )


def test_a_collective_timeout_is_the_effect_of_a_rank_that_failed_in_its_own_tasks_file(tmp_path):
    """srun --output=%x-%j-%t.out: rank 0's watchdog timed out waiting for rank 2, whose file holds its CUDA
    error; which came first no line tells, but a collective times out after a rank stopped taking part."""
    from logstat.api import load_runs

    error = "RuntimeError: CUDA error: an illegal memory access was encountered"
    (tmp_path / "gpt-77123-0.out").write_text(f"{WATCHDOG}\n")
    (tmp_path / "gpt-77123-2.out").write_text("\n".join([*TRACEBACK, error, ""]))
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["status"], row["reason"], row["reason_path"]) == (
        "failed",
        error,
        str(tmp_path / "gpt-77123-2.out"),
    )
    # an NCCL error (not a timeout) in one file, an exception in another: which caused which is not known
    other = tmp_path / "other"
    other.mkdir()
    nccl_error = WATCHDOG.replace(
        "Watchdog caught collective operation timeout", "NCCL error: unhandled system error"
    )
    (other / "gpt-77124-0.out").write_text(f"{nccl_error}\n")
    (other / "gpt-77124-2.out").write_text("\n".join([*TRACEBACK, error, ""]))
    assert load_runs([other]).runs.row(0, named=True)["reason"] != error
    # a rank's native crash (no traceback: CPython's fault handler) is its own failure too; its abort is not
    # (a rank's own watchdog aborts it so)
    for crash, caused in (("Segmentation fault", True), ("Aborted", False)):
        crashed = tmp_path / crash.split()[0]
        crashed.mkdir()
        (crashed / "gpt-77125-0.out").write_text(f"{WATCHDOG}\n")
        (crashed / "gpt-77125-3.out").write_text(f"Fatal Python error: {crash}\n")
        row = load_runs([crashed]).runs.row(0, named=True)
        assert (row["reason"] == f"Fatal Python error: {crash}") is caused


def test_a_ranks_failure_after_the_others_timeouts_in_one_file_is_their_cause():
    # 255 ranks' watchdogs fired (the failing rank's stderr flushed last); the one rank's own OOM or
    # assertion is what they waited for. An NCCL error (not a timeout) before an exception stays the cause.
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity"
    timeouts = [WATCHDOG.replace("Rank 3", f"Rank {rank}") for rank in (164, 7)]
    assert reason(feed(*timeouts, *TRACEBACK, oom)) == ("failed", 6)
    assertion = "517: AssertionError: causal mask is only for self attention"
    exited = "srun: error: nid00065: task 517: Exited with exit code 1"
    assert reason(feed(*timeouts, *(f"517: {line}" for line in TRACEBACK), assertion, exited)) == (
        "failed",
        6,
    )
    nccl_error = WATCHDOG.replace(
        "Watchdog caught collective operation timeout", "NCCL error: unhandled system error"
    )
    assert reason(feed(nccl_error, *TRACEBACK, "ValueError: bad")) == ("failed", 1)


@pytest.mark.parametrize("runtime", ["ORTE", "PRRTE"])
def test_open_mpi_losing_a_nodes_daemon_is_a_node_failure(runtime):
    # help-errmgr-base.txt [node-died] (Open MPI 4's ORTE, 5's PRRTE), then mpirun's summary of the ranks
    run = feed(
        "--------------------------------------------------------------------------",
        f"{runtime} has lost communication with a remote daemon.",
        "  HNP daemon   : [[40321,0],0] on node gpu-node01",
        "  Remote daemon: [[40321,0],3] on node gpu-node04",
        "mpirun noticed that process rank 12 with PID 0 on node gpu-node04 exited on signal 9 (Killed).",
    )
    assert reason(run) == ("failed", 2)
    assert run.failure[1] == f"node failure: {runtime} has lost communication with a remote daemon."


# --- tracebacks ---------------------------------------------------------------------------------------


def test_another_ranks_later_traceback_does_not_replace_the_first():
    run = feed(
        *TRACEBACK,
        "ValueError: rank 0 cannot read its shard",
        *TRACEBACK,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer [10.0.0.2]:1234",
        *TRACEBACK,
        "ValueError: rank 2 cannot read its shard",
    )
    assert run.failure == ("failed", "ValueError: rank 0 cannot read its shard", 4)
    # the peer's error is a consequence; rank 2's identical error repeats the reason's kind
    assert [c.split(":")[1] for c in run.consequence_lines()] == ["8"]


def test_a_connection_reset_before_the_cause_does_not_become_the_reason():
    run = feed(
        "[E socket.cpp:957] [c10d] The client socket has failed: Connection reset by peer",
        *TRACEBACK,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    )
    assert reason(run) == ("failed", 5) and run.failure[1].startswith("CUDA out of memory: ")
    assert run.consequence_lines()[0].startswith("lines.log:1: [E socket.cpp:957]")


def test_a_worker_the_launcher_saw_killed_is_the_reason_not_its_peers_reset():
    # DeepSpeed's launcher (launch.py): a worker that ended with a negative code was killed by that signal
    # (the OOM killer's SIGKILL) before the launcher killed the others; rank 0 then lost its peer
    exit_9 = "['/usr/bin/python', '-u', 'train.py', '--local_rank=1'] exits with return code = -9"
    run = feed(
        *TRACEBACK,
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:14492: Connection reset by peer",
        "[2026-11-26 20:06:50,717] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 15695",
        f"[2026-11-26 20:06:50,783] [ERROR] [launch.py:259:sigkill_handler] {exit_9}",
    )
    assert reason(run) == ("failed", 6) and run.failure[1].endswith(exit_9)
    assert [c.split(":")[1] for c in run.consequence_lines()] == ["4", "5"]


ABORTED = "NCCL communicator was aborted on rank 13.  Original reason for failure was: "
OWN_TIMEOUT = (
    "[Rank 13] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52311, OpType=RECV) ran for "
)
OWN_TIMEOUT += "1800493 milliseconds before timing out."


@pytest.mark.parametrize("traceback", [True, False])
def test_a_communicator_aborted_by_its_ranks_own_watchdog_is_the_cause_not_a_peers_end(traceback):
    # torch <= 2.1: a rank's collective after its watchdog's timeout raises the abort, quoting the timeout
    # (ProcessGroupNCCL.cpp); the launcher's exit code follows from it
    exit_1 = "[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'pretrain_gpt.py'] exits with return code = 1"
    own = f"RuntimeError: {ABORTED}{OWN_TIMEOUT}"
    run = feed(*(TRACEBACK if traceback else ()), own, exit_1)
    assert reason(run) == ("failed", 4 if traceback else 1)
    assert (run.failure[1], run.failure_weight) == (f"NCCL timeout/error: {own}", CAUSE)
    # aborted for another reason (a peer's end): a report, as the launcher's
    remote = "NCCL error: remote process exited or there was a network error"
    peer = feed(*TRACEBACK, f"RuntimeError: {ABORTED}{remote}", exit_1)
    assert (peer.failure[1], peer.failure_weight) == (f"RuntimeError: {ABORTED}{remote}", REPORT)


def test_a_local_run_that_logstat_stopped_on_a_signal_was_cancelled():
    # SIGTERM to `logstat run --backend local`: passed on to torchrun, whose agent raises SignalException
    signalled = "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15"
    stop = "logstat: SIGTERM: stopped the launcher and its workers (launcher exit 1)"
    run = feed(*TRACEBACK, signalled, stop)
    assert run.failure == ("cancelled", stop, 5)
    assert run.consequence_lines() == [f"lines.log:4: {signalled}"]


def test_an_infiniband_completion_error_is_the_cause_of_the_watchdogs_timeouts_after_it():
    # NCCL's net_ib.cc on a failed work request (error 12: retries exceeded): the collectives then hang
    ib = (
        "ip-10-0-11-27:41233:41570 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.0.12.141<38915> with error 12, opcode 32563, len 0, vendor err 129 (Recv)"
    )
    run = feed(ib, WATCHDOG)
    assert run.failure == ("failed", f"network error: {ib}", 1)
    assert [line.split(":")[1] for line in run.consequence_lines()] == ["2"]


def test_a_gpus_fatal_xid_outranks_the_errors_it_made_wherever_the_kernels_line_lands():
    # an epilog prints the kernel's log after the job's own lines; Xid 79: the GPU fell off the bus
    xid = "kernel: [1834123.41] NVRM: Xid (PCI:0000:9d:00): 79, pid=90233, name=pt_main_thread, GPU has fallen off the bus."
    nccl = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error"
    )
    run = feed(*TRACEBACK, nccl, xid)
    assert run.failure == ("failed", f"GPU error: {xid}", 5)
    # an application's Xid (43: the GPU stopped processing, its process killed) is no cause of its own
    app = feed(*TRACEBACK, nccl, xid.replace("): 79,", "): 43,"))
    assert app.failure[2] == 4


def test_interleaved_tracebacks_longer_than_the_window_keep_their_exception():
    """384 ranks' tracebacks interleaved: the first exception line comes thousands of lines after the
    first header, every line between them a frame of some rank."""
    frames = ['  File "pretrain_gpt.py", line 149, in <module>', "    main()"] * 1000
    run = feed("Traceback (most recent call last):", *frames, "FileNotFoundError: [Errno 2] shard_0007.idx")
    assert run.failure == ("failed", "FileNotFoundError: [Errno 2] shard_0007.idx", 2002)
    stale = feed(
        "Traceback (most recent call last):",
        *["some output"] * (slurm.TRACEBACK_MAX_LINES + 1),
        "KeyError: 'x'",
    )
    assert stale.failure is None  # no frame for too long: given up


@pytest.mark.parametrize(
    "opening",
    [
        "Exception ignored in atexit callback: <function close_tensorboard at 0x7f4b66fda2a0>",  # 3.11
        "Exception ignored in atexit callback <function close_tensorboard at 0x7f4b66fda2a0>:",  # 3.13
        "Exception ignored in: <function CheckpointWriter.__del__ at 0x7f4b66e244a0>",
        "--- Logging error ---",
    ],
)
def test_ignored_tracebacks_are_no_failure_and_do_not_replace_one(opening):
    harmless = [opening, *TRACEBACK, "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB"]
    assert feed(*harmless).failure is None
    oom = feed(
        *TRACEBACK, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", *harmless
    )
    assert reason(oom) == ("failed", 4) and oom.consequences == []
    later = feed(*harmless, *TRACEBACK, "ValueError: bad")  # the next traceback is read again
    assert later.failure == ("failed", "ValueError: bad", 9)


def test_a_chain_replaces_only_its_own_first_exception():
    chained = [
        *TRACEBACK,
        "KeyError: 'hidden_size'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        *TRACEBACK,
        "ValueError: config has no hidden_size",
    ]
    # the wrapper's message and its direct cause's, as Python names the link
    quoted = "ValueError: config has no hidden_size (caused by KeyError: 'hidden_size')"
    assert feed(*chained).failure == ("failed", quoted, 11)
    # an OOM is the cause even when handling it raised another exception
    oom = feed(*TRACEBACK, "torch.OutOfMemoryError: CUDA out of memory.", "", *chained[5:])
    assert reason(oom) == ("failed", 4)


@pytest.mark.parametrize(
    "warning",
    [
        # torch elastic's api.py (torch 2.0-2.3 formatted the signals as Signals.SIGKILL), glog format
        "W0526 10:00:00.123000 140 torch/distributed/elastic/multiprocessing/api.py:889] Unable to shutdown "
        "process 2250 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
        "[W ProcessGroupNCCL.cpp:1856] Warning: NCCL Error 2 on a retry; the communicator is reused",
        "[2021-05-26 10:00:00,000] [WARNING] [stage3.py:1850:step] CUDA out of memory on a retry; flushing the cache",
        "/x/torch/cuda/__init__.py:128: UserWarning: CUDA out of memory on the probe, Error 2 (Triggered internally)",
        "06/01/2021 12:00:00 - WARNING - __main__ - process Killed earlier; resuming from checkpoint",
    ],
)
def test_warnings_naming_an_error_are_no_failure(warning):
    assert feed(warning).failure is None


def test_consequences_are_capped_one_per_kind():
    run = feed(
        *TRACEBACK,
        "ValueError: bad",
        "srun: error: r1: task 0: Exited with exit code 1",
        "srun: error: r2: task 4: Exited with exit code 1",
        "srun: error: r1: task 1: Killed",
        "exits with return code = 1",
        "mpirun noticed that process rank 3 with PID 1 on node n exited on signal 9 (Killed).",
        "Connection reset by peer",
        "slurmstepd: error: *** STEP 7.0 ON n CANCELLED AT 2021 DUE TO TASK FAILURE ***",
        "/var/spool/slurmd/job7/slurm_script: line 58: 42 Killed   python",
    )
    kinds = [kind for _, _, kind, _ in run.consequences]
    assert kinds == ["srun task", "launcher exit", "mpirun", "peer", "slurm cancel"][:MAX_CONSEQUENCES]
    assert run.failure == ("failed", "ValueError: bad", 4)


@pytest.mark.parametrize("marker", slurm.MPIRUN_ENDS)
def test_every_mpirun_marker_is_read_as_mpiruns_end(marker):
    assert feed(f"mpirun: the job {marker}").failure_kind == "mpirun"


@pytest.mark.parametrize("marker", slurm.HARMLESS_TRACEBACKS)
def test_every_harmless_marker_makes_the_next_traceback_harmless(marker):
    assert feed(f"{marker}: <function f>", *TRACEBACK, "ValueError: x").failure is None


def test_a_wrapper_raised_from_its_cause_is_the_reason_and_quotes_it():
    run = feed(*TRACEBACK, "KeyError: 'a'", "", f"{slurm.RAISED_FROM}:", "", *TRACEBACK, "ValueError: b")
    assert run.failure == ("failed", "ValueError: b (caused by KeyError: 'a')", 11)


def test_an_exception_raised_while_handling_another_is_its_consequence():
    # the checkpoint's write failed; the zip writer's __exit__ then failed on what was left
    write = (
        "RuntimeError: [enforce fail at inline_container.cc:783] . PytorchStreamWriter failed writing file"
    )
    handling = f"{slurm.RAISED_WHILE_HANDLING}, another exception occurred:"
    exit_ = (
        "RuntimeError: [enforce fail at inline_container.cc:603] . unexpected pos 2421105536 vs 2421105424"
    )
    run = feed(*TRACEBACK, write, "", handling, "", *TRACEBACK, exit_)
    assert run.failure == ("failed", write, 4)
    assert run.consequence_lines() == [f"lines.log:11: {exit_}"]


# torch.utils.checkpoint's _StopRecomputationError is its control flow: a Ctrl-C during a recomputation
# prints it, then the KeyboardInterrupt raised while handling it, which is how the process ended
@pytest.mark.parametrize(
    "cause",
    [
        "_queue.Empty",
        "StopIteration",
        "asyncio.exceptions.CancelledError",
        "torch.utils.checkpoint._StopRecomputationError",
    ],
)
@pytest.mark.parametrize("marker", slurm.CHAINED_TRACEBACKS)
@pytest.mark.parametrize(
    ("last", "status"), [("ValueError: b", "failed"), ("KeyboardInterrupt", "cancelled")]
)
def test_an_exception_without_a_message_is_replaced_by_the_next_in_its_chain(cause, marker, last, status):
    run = feed(*TRACEBACK, cause, "", f"{marker}:", "", *TRACEBACK, last)
    assert run.failure == (status, last, 11)


# --- a launcher's clean exit ---------------------------------------------------------------------

DS_CLEAN = "[2023-04-19 05:22:25,365] [INFO] [launch.py:460:main] Process 1187 exits successfully."
ELASTIC_CLEAN = (
    "I1125 01:33:34.617000 23285 torch/distributed/elastic/agent/server/api.py:932] [default] worker group "
    "successfully finished. Waiting 300 seconds for other agents to finish."
)
# W&B's finish, by the process's exit code (its log of a failed one: "... (failed 1). Press Control-C ...")
WANDB_CLEAN = "wandb: Waiting for W&B process to finish... (success)."


@pytest.mark.parametrize("clean", [DS_CLEAN, ELASTIC_CLEAN, WANDB_CLEAN])
def test_a_launchers_clean_exit_makes_a_run_that_nothing_ended_ok(tmp_path, clean):
    from logstat.api import load_runs

    log = tmp_path / "train-41.out"
    log.write_text(f"step 1\n{clean}\n{clean}\n")
    row = load_runs([log]).runs.row(0, named=True)
    # the first of the launcher's lines is the evidence
    assert (row["status"], row["reason_line"]) == ("ok", 2)
    # quoted without DeepSpeed's logger's time, a prefix
    assert row["reason"] == f"the launcher reported a clean exit: {clean.removeprefix(DS_CLEAN[:26])}"


ELASTIC_RESTART = (
    "[2024-03-11 22:40:20,500] torch.distributed.elastic.agent.server.api: [INFO] [default] Worker group "
    "FAILED. 3/3 attempts left; will restart worker group"
)
ELASTIC_FAILED = (
    "[2024-03-11 23:40:20,110] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)"
    " local_rank: 0 (pid: 30111) of binary: /opt/conda/bin/python"
)
WATCHDOG = (
    "[rank5]:[E1112 03:18:44.131201 88120 ProcessGroupNCCL.cpp:616] [Rank 5] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=2106, OpType=ALLREDUCE, NumelIn=1244, NumelOut=1244, Timeout(ms)=600000) "
    "ran for 600021 milliseconds before timing out."
)


def test_a_failure_that_torch_elastic_restarted_past_is_an_earlier_launchs(tmp_path):
    from logstat.api import load_runs

    log = tmp_path / "agent-51.out"
    log.write_text(f"step 1\n{WATCHDOG}\n{ELASTIC_RESTART}\nstep 2\n{ELASTIC_CLEAN}\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason_line"]) == ("ok", 5)
    # a restart whose workers failed again of a cause of their own: the last attempt's is the run's
    lines = ["step 1", WATCHDOG, ELASTIC_RESTART, *TRACEBACK, "KeyError: 2"]
    log.write_text("\n".join(lines) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason"], row["reason_line"]) == ("failed", "KeyError: 2", len(lines))
    assert row["consequences"][0].startswith("agent-51.out:2: NCCL timeout/error: ")
    # only the launcher's report of them after it: the earlier attempt's cause says more
    lines = ["step 1", WATCHDOG, ELASTIC_RESTART, "step 2", ELASTIC_FAILED]
    log.write_text("\n".join(lines) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason_line"]) == ("failed", 2)


@pytest.mark.parametrize("order", ["exit first", "failure first"])
def test_a_clean_exit_of_one_worker_never_outweighs_another_workers_failure(tmp_path, order):
    from logstat.api import load_runs

    failure = [*TRACEBACK, "ValueError: bad"]
    lines = [DS_CLEAN, *failure] if order == "exit first" else [*failure, DS_CLEAN]
    log = tmp_path / "train-42.out"
    log.write_text("\n".join(lines) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason"]) == ("failed", "ValueError: bad")


# torch's DataLoader: a worker's signal handler (torch/csrc/DataLoader.cpp) prints its line and dies by the
# signal; the main process's SIGCHLD handler raises how it died, and _try_get_data chains "exited
# unexpectedly" to it (torch/utils/data/dataloader.py)
SHM_BUS_ERROR = "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
WORKER_KILLED = (
    "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Bus error. It is possible that "
    "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."
)
WORKER_GONE = [
    "",
    "The above exception was the direct cause of the following exception:",
    "",
    *TRACEBACK,
    '  File "/opt/torch/utils/data/dataloader.py", line 1305, in _try_get_data',
    "    raise RuntimeError(f'DataLoader worker (pid(s) {pids_str}) exited unexpectedly') from e",
    "RuntimeError: DataLoader worker (pid(s) 48213) exited unexpectedly",
]


def test_a_dataloader_workers_death_is_how_it_died_not_that_it_exited():
    # the worker's own line says why: the cause, before or after the main process's chain
    for lines, line in (
        ([SHM_BUS_ERROR, *TRACEBACK, WORKER_KILLED, *WORKER_GONE], 1),
        ([*TRACEBACK, WORKER_KILLED, *WORKER_GONE, SHM_BUS_ERROR], 14),
    ):
        run = feed(*lines)
        assert run.failure == ("failed", SHM_BUS_ERROR, line)
    # without it, the signal the worker died of; "exited unexpectedly" is a consequence
    run = feed(*TRACEBACK, WORKER_KILLED, *WORKER_GONE)
    assert run.failure == ("failed", WORKER_KILLED, 4)
    assert [kind for _, _, kind, _ in run.consequences] == ["launcher"]
    # a worker killed (the host's OOM killer): the kernel's kill is the cause, the worker's end its effect
    killed = WORKER_KILLED.replace("Bus error. It is possible", "Killed. It is possible").split(" It is")[0]
    run = feed(
        *TRACEBACK, killed, *WORKER_GONE, "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0."
    )
    assert run.failure == (
        "failed",
        "host out of memory: slurmstepd: error: Detected 1 oom_kill event in StepId=7.0.",
        14,
    )


def test_the_nccl_heartbeat_monitor_is_a_watchdogs_timeout():
    # torch 2.2+ ProcessGroupNCCL: the heartbeat monitor when the watchdog itself hangs
    heartbeat = (
        "[rank5]:[E0821 03:07:59.763029681 ProcessGroupNCCL.cpp:1316] [PG 0 (default_pg) Rank 5] Heartbeat monitor "
        "timed out! Process will be terminated after dumping debug info. workMetaList_.size()=2"
    )
    stuck = (
        "[rank5]:[F0821 03:08:07.963029355 ProcessGroupNCCL.cpp:1153] [PG 0 (default_pg) Rank 5] ProcessGroupNCCL's "
        "watchdog got stuck for 480 seconds without making progress in monitoring enqueued collectives."
    )
    launcher = "[ERROR] [launch.py:322:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py'] exits with return code = -6"
    run = feed(heartbeat, stuck, launcher)
    assert reason(run) == ("failed", 1)
    assert run.failure[1].startswith(
        "NCCL timeout/error: [E0821 03:07:59.763029681 ProcessGroupNCCL.cpp:1316]"
    )


AGENT_SIGNALLED = (
    "[2024-02-11 02:23:24,321] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGTERM "
    "death signal, shutting down workers"
)
SIGNAL_EXCEPTION = (
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4398 got signal: 15"
)


def test_torch_elastics_agent_stopped_from_outside_cancelled_the_run():
    # a spot instance's preemption notice, then the agent's word (agent/server/api.py) and its SignalException
    run = feed(" iteration       10/    1000 |", AGENT_SIGNALLED, *TRACEBACK, SIGNAL_EXCEPTION)
    assert (run.failure[0], run.failure[1], run.failure[2]) == ("cancelled", AGENT_SIGNALLED[26:], 2)
    assert any(SIGNAL_EXCEPTION in line for line in run.consequence_lines())


def test_deepspeeds_launcher_stopped_from_outside_cancelled_the_run_it_killed():
    # launch.py's sigkill_handler on SIGTERM (a condor_rm, a kill): each worker's kill, then its word
    kills = [f"[INFO] [launch.py:316:sigkill_handler] Killing subprocess {pid}" for pid in (2211, 2212)]
    received = "[INFO] [launch.py:327:sigkill_handler] Main process received SIGTERM, exiting"
    run = feed(" iteration       10/    1000 |", *kills, received)
    assert (run.failure[0], run.failure[1], run.failure[2]) == ("cancelled", received, 4)


def test_a_schedulers_word_on_why_it_signalled_the_job_outranks_the_agents():
    limit = f"{JOB} DUE TO TIME LIMIT ***"
    for lines in ([AGENT_SIGNALLED, limit], [limit, AGENT_SIGNALLED]):
        run = feed(" iteration       10/    1000 |", *lines, *TRACEBACK, SIGNAL_EXCEPTION)
        slurm.finish(run)
        assert run.failure[0] == "timeout" and run.failure[1] == "time limit: " + limit


def _loop_steps(steps: range) -> list[str]:
    return [f"step {step} | loss {10 - step / 1000:.4f} | dt: 450.00ms" for step in steps]


def test_a_preempted_job_whose_steps_went_back_after_it_ended_as_its_next_attempt(tmp_path):
    # --requeue appends the next attempt to the job's file; it resumes from its checkpoint at step 50
    preempted = (
        "slurmstepd: error: *** JOB 881100 ON gpu-q-33 CANCELLED AT 2025-01-05T05:31:36 DUE TO PREEMPTION ***"
    )
    failed = [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 88, in <module>',
        "RuntimeError: File /scratch/ckpt/step_200/model.pt cannot be opened.",
        "srun: error: gpu-q-33: task 0: Exited with exit code 1",
    ]
    log = tmp_path / "fsdp-881100.out"
    log.write_text(
        "\n".join([*_loop_steps(range(10, 101, 10)), preempted, *_loop_steps(range(60, 201, 10)), *failed])
    )
    row, iterations = first_run(log)
    assert (row["status"], row["reason"]) == ("failed", failed[2])
    assert row["consequences"] == [
        f"fsdp-881100.out:11: preempted: {preempted}",
        f"fsdp-881100.out:30: {failed[3]}",
    ]
    assert iterations["iteration"].to_list() == list(range(10, 201, 10))
    # the stopped process's buffered lines after the scheduler's word go on: the preemption ended it
    log.write_text(
        "\n".join([*_loop_steps(range(10, 101, 10)), preempted, *_loop_steps(range(110, 131, 10))])
    )
    row, _ = first_run(log)
    assert (row["status"], row["reason"]) == ("cancelled", f"preempted: {preempted}")


def test_a_job_script_that_trains_again_after_a_crash_ends_as_its_last_training(tmp_path):
    # a bash loop over model sizes: the second size runs out of memory, the third starts at step 10 again
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.07 GiB. GPU 0 has a total capacity"
    crashed = ["Traceback (most recent call last):", '  File "/work/train.py", line 61, in <module>', oom]
    limit = (
        "slurmstepd: error: *** JOB 4455667 ON gpu-p03 CANCELLED AT 2025-02-01T06:00:02 DUE TO TIME LIMIT ***"
    )
    third = _loop_steps(range(10, 351, 10))
    log = tmp_path / "sizes-4455667.out"
    log.write_text("\n".join([*_loop_steps(range(10, 1001, 10)), *_loop_steps(range(10, 41, 10)), *crashed]))
    log.write_text(log.read_text() + "\n" + "\n".join(["+ python train.py --size 760m", *third, limit]))
    row, iterations = first_run(log)
    assert (row["status"], row["reason"]) == ("timeout", f"time limit: {limit}")
    assert row["consequences"] == [f"sizes-4455667.out:107: CUDA out of memory: {oom}"]
    assert iterations["iteration"].to_list() == list(range(10, 351, 10))
    # ranks' lines after a crash go on from where they were: the crash ended the run
    log.write_text("\n".join([*_loop_steps(range(10, 401, 10)), *crashed, *_loop_steps(range(400, 421, 10))]))
    row, _ = first_run(log)
    assert (row["status"], row["reason"]) == ("failed", f"CUDA out of memory: {oom}")

"""Slurm and launcher context: job id, node/GPU counts, GPU model, and what ended a run.

Facts: ``SLURM_JOB_ID=...`` (the file name's ``%j`` is read by the reader), ``set -x`` echoes such as
``+ NNODES=16`` and ``+ GPUS_PER_NODE=4``, the GPU model from nvidia-smi tables or ``GPU 0: NVIDIA
A100-SXM4-80GB`` lines, and a launch script's ``Model size: 52B`` echo (seed 001).

Failures are events, each either a root cause or one of its consequences (weights in parsers/base.py):

- causes: a worker's exception (a traceback's exception line with NCCL's ``Last error:`` after it; of a
  chained traceback, a ``raise ... from`` wrapper quoting its cause, and the exception handled, not the one
  raised while handling it), CUDA out of memory, an NCCL watchdog timeout or NCCL error (or the CUDA error the watchdog ended on), a
  native abort (a C++ exception's ``what():``, ``Fatal Python error:``), Hydra's config errors printed
  without a traceback (``Could not override '...'``), a toolchain's error above the traceback of an
  exception saying a build failed (``/usr/bin/ld: cannot find -lcuda``), torch elastic's agent signalled from
  outside (``Received Signals.SIGTERM death signal``: cancelled, unless the scheduler said why it
  signalled), the cgroup OOM killer's
  ``oom_kill event`` or another memory limit's kill (srun's ``Out Of Memory``, ``exceeded memory
  limit``), ``CANCELLED AT ... DUE TO TIME LIMIT`` (timeout, as LSF's and PBS's run limits), ``NODE
  FAILURE`` (failed), a cancel without a
  failure before it or a ``KeyboardInterrupt`` (cancelled), srun's node failure or other errors,
  slurmstepd's ``execve()`` of a task's program that failed, argparse's ``<prog>: error:``;
- consequences: a kill (``Killed``, signal 9, SIGKILL) or a crash (SIGSEGV, SIGABRT, ..., bash's ``Bus
  error``), a signal's exception; then reports that a process failed: a peer's connection reset or
  aborted NCCL communicator (another failed first: a worker killed by the OOM killer is the launcher's
  ``exits with return code = -9``), a launcher's exit code, ChildFailedError, CalledProcessError, ``DUE TO TASK FAILURE``, mpirun's
  summary, ``srun: error: ...: task 3: Exited with exit code 1``); last the launcher killing its other
  workers.

The run's reason is the first event of the strongest weight in line order, so the first cause when
there is one, whatever follows. A time limit's line comes after the training's last lines and before
what the kill makes the processes print (their tracebacks, torch elastic's SignalException): those come
after it and are its consequences; an exception before it is what the job died (or hung) of.
Tracebacks Python prints and ignores (``Exception ignored in ...``, logging's ``--- Logging error
---``) and warnings that name an error are not failures.

A launcher's word that its workers exited with code 0 (DeepSpeed's ``Process N exits successfully.``,
torch elastic's ``worker group successfully finished``) makes a run ``ok`` when nothing failed; it never
outweighs a failure.

Tracebacks (hundreds of ranks print one each, interleaved) are the ``TRACEBACK`` block and the
launcher's ``Killing subprocess N`` (one line per worker it kills) is ``LAUNCHER_KILL``, both read
column-wise; the rest, a handful of lines per run, is read in Python (``parse_line``).
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime

import polars as pl
from logstat.parsers.base import (
    BUILD_FAILED,
    CAUSE,
    CLEANUP,
    EFFECT,
    HARDWARE,
    REASON_CHARS,
    REPORT,
    Family,
    RunBuilder,
)
from logstat.parsers.kinds import (
    CLOSER,
    FAILURE_EVENT_SCHEMA,
    FILE_SHIFT,
    OPENER,
    PYTHON_EVENTS,
    PYTHON_SPACE,
    RECORD_SHIFT,
    SEEN,
    Block,
    Events,
    RecordKind,
    RecordTest,
    line_of_order,
    literals,
    marks_of,
)

NAME = "slurm"
#: lines a traceback may go without a frame before it is given up (its exception line was lost)
TRACEBACK_MAX_LINES = 400
#: exceptions with which launchers end when a worker failed (the worker's lines say why); a DataLoader's
#: when one of its worker processes died (``DataLoader worker (pid(s) 48213) exited unexpectedly``, chained to
#: how it died; or ``... exited unexpectedly with exit code 1. Details are lost due to multiprocessing.``);
#: Ray's when the worker process of an actor died (``ActorDiedError: The actor died unexpectedly ...``);
#: torch.multiprocessing.spawn's (fairseq's launcher), before ``-- Process 2 terminated with the following
#: error:`` and that process's traceback
LAUNCHER_EXCEPTIONS = ("ChildFailedError", "CalledProcessError", "exited unexpectedly", "ActorDiedError")
LAUNCHER_EXCEPTIONS += ("ProcessRaisedException",)
#: nbconvert's (a Kaggle notebook's run, ``jupyter nbconvert --execute``) on a cell that raised, before the cell's
#: own traceback as IPython prints it: ``nbclient.exceptions.CellExecutionError: An error occurred while executing
#: the following cell:``
LAUNCHER_EXCEPTIONS += ("CellExecutionError",)
#: Ray Train's wrapper of a worker's failure (``ray.train.base_trainer.TrainingFailedError: The Ray Train run
#: failed. Please inspect the previous error messages for a cause.``)
LAUNCHER_EXCEPTIONS += ("TrainingFailedError",)
#: an exception raised because the process got a signal (torch elastic's agent under scancel or a time limit),
#: or because a DataLoader's worker did (``DataLoader worker (pid 48213) is killed by signal: Killed.``)
SIGNAL_EXCEPTIONS = ("SignalException", "got signal:", "killed by signal:")
#: an exception saying a peer never came (torch elastic's rendezvous, c10d's TCPStore: ``RendezvousTimeoutError``,
#: ``DistNetworkError: The client socket has timed out after 1800s while trying to connect to (node-17,
#: 29500)``, the store's ``Timed out after 901 seconds waiting for clients. 56/64 clients joined.``): what
#: kept it away (a node whose python could not start, a name that does not resolve) is the cause
RENDEZVOUS_TIMEOUTS = ("RendezvousTimeoutError", "client socket has timed out", "waiting for clients")
#: what a rank prints when a peer died first (gloo/c10d sockets, NCCL's abort of a communicator)
PEER_RESETS = ("Connection reset by peer", "Connection closed by peer")
PEER_FAILURES = (*PEER_RESETS, "NCCL communicator was aborted", "ncclRemoteError", "remote process exited")
#: `logstat run --backend local`'s last line in its log when a signal to logstat (Ctrl-C, SIGTERM) stopped
#: the run: ``logstat: SIGTERM: stopped the launcher and its workers (launcher exit 1)``
RUNNER_STOP = "stopped the launcher and its workers"
#: NCCL's errors; not bare "NCCL": NCCL_DEBUG=INFO prints millions of "NCCL INFO" lines
NCCL_ERRORS = ("NCCL timeout", "NCCL error", "NCCL Error", "ncclInternalError", "ncclSystemError")
#: ProcessGroupNCCL's watchdog ending its process: on a collective's timeout, or on any exception (a CUDA
#: error, an NCCL error), torch 2.2+'s ``[PG 0 Rank 3] Process group watchdog thread terminated with
#: exception: CUDA error: ...``
WATCHDOG_ENDS = ("Watchdog caught", "watchdog thread terminated with exception")
#: ProcessGroupNCCL's heartbeat monitor (torch 2.2 on) when the watchdog itself hangs (a collective or a CUDA
#: call that never returns): ``[PG 0 (default_pg) Rank 5] Heartbeat monitor timed out! Process will be
#: terminated after dumping debug info.``, then ``ProcessGroupNCCL's watchdog got stuck for 480 seconds``
WATCHDOG_ENDS += ("Heartbeat monitor timed out", "watchdog got stuck for")
#: NCCL's InfiniBand transport on a work request that failed (net_ib.cc: ``NCCL WARN NET/IB : Got completion
#: from peer 10.0.12.141<38915> with error 12, opcode 0, len 0, vendor err 129 (Recv)``; 12: the transport's
#: retries exceeded, a link or a peer gone): the collectives then time out, so the watchdogs follow from it
IB_COMPLETION_ERROR = "Got completion from peer"
#: the NVIDIA driver's Xid (``NVRM: Xid (PCI:0000:9d:00): 79, pid=..., GPU has fallen off the bus.``), in a
#: job's output when its epilog or the user prints the kernel's log
XID = "NVRM: Xid"
_XID = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
#: Xids of a hardware fault (NVIDIA's Xid catalog): double-bit ECC (48), internal micro-controller halt (62),
#: row-remapping failure (64), NVLink (74), fallen off the bus (79), high single-bit ECC rate (92),
#: contained / uncontained ECC (94, 95), GSP (119, 120), unrecovered ECC (140); the others (13, 31, 43,
#: 45...) are the GPU's note of what the application did or of its processes' end
FATAL_XIDS = frozenset({48, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140})
#: the rank's own watchdog's timeout, also as the reason an aborted communicator quotes (torch <= 2.1's
#: ``RuntimeError: NCCL communicator was aborted on rank 13.  Original reason for failure was: [Rank 13]
#: Watchdog caught collective operation timeout: ...``): a cause, not a peer's end
OWN_WATCHDOG = WATCHDOG_ENDS[0]
#: the labels a failure's reason starts with when its line names a cause of its kind (the table's Notes
#: name the run's cause by them)
OOM_LABEL, NCCL_LABEL, NETWORK_LABEL = "CUDA out of memory: ", "NCCL timeout/error: ", "network error: "
GPU_LABEL, TIME_LIMIT_LABEL, NODE_FAILURE_LABEL = "GPU error: ", "time limit: ", "node failure: "
#: the job's container could not start (pyxis/enroot)
CONTAINER_LABEL = "container: "
#: the status of a run its scheduler's clock ended, Slurm's job state TIMEOUT (sacct): not a failure of the
#: run (a job of a chain of time-limited jobs ends so, the next resumes from its checkpoint) nor a cancel
TIMEOUT = "timeout"
PREEMPTED_LABEL, KILLED_LABEL = "preempted: ", "killed: "
#: the host's OOM killer or a memory limit of the job (cgroup, LSF's TERM_MEMLIMIT): not the GPU's
HOST_OOM_LABEL = "host out of memory: "
CAUSE_LABELS = (
    HOST_OOM_LABEL,
    OOM_LABEL,
    NCCL_LABEL,
    NETWORK_LABEL,
    GPU_LABEL,
    TIME_LIMIT_LABEL,
    NODE_FAILURE_LABEL,
    CONTAINER_LABEL,
    PREEMPTED_LABEL,
    KILLED_LABEL,
)
#: a process ended by native code, where no Python traceback is printed: an uncaught C++ exception
#: (libstdc++'s terminate handler quotes it on the line after its ``terminate called after throwing``:
#: ``  what():  <message>``), CPython's fatal errors (``Fatal Python error: Segmentation fault``) and a
#: DataLoader worker's signal handler (torch/csrc/DataLoader.cpp: ``ERROR: Unexpected bus error encountered
#: in worker. This might be caused by insufficient shared memory (shm).``), before the worker dies of it
#: ROCm's HIP runtime aborting a process whose GPU its kernels were not built for (``"hipErrorNoBinaryForGpu:
#: Unable to find code object for all current devices!"``, then ``Aborted``)
NATIVE_ABORTS = ("what():  ", "Fatal Python error: ", "encountered in worker.", "hipErrorNoBinaryForGpu: ")
#: llm.c's cudaCheck before it exits (``[CUDA ERROR] at file train_gpt2.cu:1068:``, the error's string on the
#: line after)
NATIVE_ABORTS += ("[CUDA ERROR] at file ",)
#: libc++'s terminate handler (clang builds, macOS: ``libc++abi: terminating due to uncaught exception of type
#: std::runtime_error: [METAL] Command buffer execution failed: Insufficient Memory``); a glog / absl CHECK's
#: fatal line (XLA, TensorFlow: ``F0607 10:11:12.000000 1234 tpu_compilation_cache_interface.cc:546] Check
#: failed: ...``) and JAX's coordination client's (``F... client.h:77] Terminating process because the JAX
#: distributed service detected fatal errors``), each before the abort's ``Fatal Python error: Aborted``
NATIVE_ABORTS += ("libc++abi: terminating due to uncaught exception", "] Check failed: ")
NATIVE_ABORTS += ("] Terminating process because the JAX distributed service detected fatal errors",)
#: ROCm's HSA runtime on a GPU's page fault (an illegal address, CUDA's "illegal memory access"), before the abort:
#: ``Memory access fault by GPU node-6 (Agent handle: 0x55d4d9a3c0a0) on address 0x7f1c2a000000. Reason: Page
#: not present or supervisor privilege.``
NATIVE_ABORTS += ("Memory access fault by GPU node-",)
#: Hydra's report of an error composing the config (hydra/_internal/utils.py ``run_and_report``: a
#: CompactHydraException's message, its OmegaConf cause, then "Set the environment variable
#: HYDRA_FULL_ERROR=1 for a complete stack trace.", no traceback): the first line of config_loader_impl.py's
#: and the override parser's messages, a line's start (NeMo's ``model.optim.sched.warmup_step=200``
#: not in its config: ``Could not override 'model.optim.sched.warmup_step'.``)
HYDRA_ERRORS = (
    "Could not override '",
    "Could not append to config.",
    "Could not delete from config.",
    "Error merging override ",
    "Error parsing override '",
)
#: NVIDIA's pyxis (Slurm's SPANK plugin starting a task in an enroot container) reports through slurmstepd:
#: ``slurmstepd: error: pyxis: failed to import docker image``, ``... pyxis: couldn't start container``, then
#: ``pyxis: printing enroot log file:`` and enroot's log a line each, indented (``pyxis:     [INFO] ...``,
#: mksquashfs's ``Write failed because No space left on device``, ``nvidia-container-cli: initialization
#: error: nvml error: driver not loaded``): the log's first line that is no [INFO] is why; its summary lines
#: only say that the container did not start
#: nvidia-resiliency-ext's rank monitor (ft_launcher's fault tolerance) on a rank that stopped sending its
#: heartbeats: ``[ERROR] [RankMonitorServer@node:pid] Did not get subsequent heartbeat. Waited 900.00 seconds.``;
#: it then terminates the rank (``... Terminating rank 3 (pid 118243) with signal SIGKILL``: how it ended)
HEARTBEAT_TIMEOUTS = ("Did not get subsequent heartbeat.", "Did not get initial heartbeat.")
PYXIS = "pyxis: "
#: Apptainer's (Singularity's) fatal error, its level padded to nine columns (``FATAL:   container creation
#: failed: mount hook function failure: mount /pfs/...->/pfs/... doesn't exist``): the container did not run
APPTAINER_FATAL = "FATAL:   "
PYXIS_FAILURES = ("failed to import docker image", "couldn't start container", "failed to create container")
#: a toolchain's error in a build that a Python program ran (Triton's and inductor's gcc build of their CUDA
#: helper, a C++/CUDA extension's ninja build), printed unprefixed above the traceback of the exception that
#: reports the build failed (``BUILD_FAILURES``): GNU ld's ``/usr/bin/ld: cannot find -lcuda: No such file or
#: directory``, gcc's ``/tmp/tmpab/main.c:5:10: fatal error: Python.h: No such file or directory``, nvcc's
#: ``nvcc fatal   : Unsupported gpu architecture 'compute_90'``
BUILD_ERRORS = ("ld: cannot find -l", ": fatal error: ", "nvcc fatal")
_BUILD_ERROR = re.compile(r"^\S*\bld(?:\.\w+)?: cannot find -l|^\S+:\d+:\d+: fatal error: |^nvcc fatal\s*: ")
#: an exception saying a build failed: subprocess's ``CalledProcessError: Command '[...]' returned non-zero exit
#: status 1.``, Dynamo's ``BackendCompilerFailed`` wrapping it, torch.utils.cpp_extension's ``RuntimeError: Error
#: building extension 'fused_adam'``
BUILD_FAILURES = ("CalledProcessError", "returned non-zero exit status", "Error building extension")
BUILD_FAILURES += ("BackendCompilerFailed",)
#: a program's report that a filesystem is full, strerror(3) of ENOSPC and EDQUOT after what it wrote
#: (coreutils' ``tee: /home/u/out/train_log.txt: Disk quota exceeded``, ``cp: error writing 'x': No space left
#: on device``), before the failed write of a program that does not say why (torch's zip writer,
#: ``WRITE_FAILURES``): its cause. Python's own OSError says it in its message
FULL_FILESYSTEM = ("Disk quota exceeded", "No space left on device")
_FULL_FILESYSTEM = re.compile(rf"^[a-z][\w.+-]*: .*(?:{'|'.join(FULL_FILESYSTEM)})\s*$")
#: submitit's word that its job ran out of time (core/job_environment.py, on the signal Slurm sends ahead of
#: the limit: ``Job has timed out. Ran 119 minutes out of requested 120 minutes.``): the time limit. submitit
#: then requeues the job into the same files (``Requeued job 5520331 (2 remaining timeouts)``: it ran again if
#: its steps went back) or raises ``UncompletedJobError: Job not requeued because: timed-out too many times.``
SUBMITIT_TIMED_OUT = "Job has timed out. Ran "
#: a script stopping itself on its loss, before the exit the launcher then reports (MAE's and DeiT's ``Loss is
#: nan, stopping training`` before ``sys.exit(1)``, a divergence guard's ``loss diverged at iter 4213 (loss
#: 9.8712 > 3x running mean 3.1804), stopping``, a Hydra app's ``[ERROR] - Non-finite loss (nan) at step 110;
#: aborting``): why the run ended. Not an early stop's patience (a planned end)
SELF_STOPS = ("stopping", "Stopping", "diverged", "exiting", "aborting")
_SELF_STOP = re.compile(
    r"(?i)^(?!.*\b(?:early|patience)\b).*(?:\b(?:loss|nan|inf)\b|diverg).*\b(?:stopping|exiting|aborting)\b"
)
#: torch's PytorchStreamWriter (caffe2/serialize/inline_container.cc): ``PytorchStreamWriter failed writing
#: file data/41: file write failed``, and its ``unexpected pos 1468012160 vs 1468012048`` on closing
WRITE_FAILURES = ("failed writing file", "file write failed", "unexpected pos")
#: torch elastic's agent on a signal it got from outside (agent/server/api.py: ``Received Signals.SIGTERM
#: death signal, shutting down workers``; SIGTERM, SIGINT, SIGHUP, SIGQUIT): the run was stopped, cancelled (a
#: spot instance's preemption, a kill); the SignalException it then raises is how it ended. Where the
#: scheduler said why (a time limit, a cancel, a node failure), that is the cause (``finish``)
DEATH_SIGNAL, DEATH_SIGNAL_KIND = "death signal, shutting down workers", "death signal"
#: DeepSpeed's launcher on the same (launch.py's sigkill_handler, after ``Killing subprocess N`` of each worker):
#: ``Main process received SIGTERM, exiting`` (SIGINT)
DEEPSPEED_DEATH_SIGNAL = "Main process received SIG"
SCHEDULER_STOPS = ("time limit", "cancelled", "node failure")
#: a process's own crash, as torch elastic names the signal that ended a worker (``exitcode  : -11 (pid: 9)
#: (SIGSEGV)``, ``Signal 11 (SIGSEGV) received by PID 9``): how it ended, never the launcher's doing (its
#: SIGTERM, SIGKILL of the other workers); each with its description (glibc's strsignal), as bash names it
CRASH_SIGNAL_DESCRIPTIONS = {
    "SIGSEGV": "Segmentation fault",
    "SIGABRT": "Aborted",
    "SIGBUS": "Bus error",
    "SIGFPE": "Floating point exception",
    "SIGILL": "Illegal instruction",
}
CRASH_SIGNALS = tuple(f"({signal})" for signal in CRASH_SIGNAL_DESCRIPTIONS)
#: a subprocess's return code of a worker one of them ended (-SIGILL, -SIGABRT, -SIGBUS, -SIGFPE, -SIGSEGV)
CRASH_RETURN_CODES = ("4", "6", "7", "8", "11")
_RETURN_CODE = re.compile(r"return code = -(\d+)")
#: a launcher's word that a worker exited with code 0: DeepSpeed's launcher (launch.py), torch elastic's
#: agent; LSF's job summary (appended to the job's output) of a job that exited with 0; W&B's at its run's
#: finish, by the process's exit code (``wandb: Waiting for W&B process to finish... (success).``, where
#: one that failed says ``(failed 1).``)
CLEAN_EXITS = (
    "exits successfully",
    "worker group successfully finished",
    "Successfully completed.",
    "W&B process to finish... (success)",
    "Job finished (status: SUCCEEDED)",  # SkyPilot's ``sky launch`` / ``sky logs``, at its job's end
)
#: other batch systems' word on how they ended a job -> (status, label, kind), the first named wins: LSF's
#: job summary (``TERM_RUNLIMIT: job killed after reaching LSF run time limit.``), PBS's note in the job's
#: error file (``=>> PBS: job killed: walltime 7210 exceeded limit 7200``; any other limit it names),
#: Flux's job exception (``flux-job: job.exception type=timeout severity=0 resource allocation expired``),
#: Ray's job CLI on a job stopped (``ray job stop``: ``Job 'raysubmit_W3xYq7' was stopped``); their exit code
#: after it is a report
RAY_JOB_STOPPED = "' was stopped"
#: a scheduler's stop of a job at its time limit: its status, label and kind, whichever scheduler said so
TIME_LIMIT = (TIMEOUT, TIME_LIMIT_LABEL, "time limit")
SCHEDULER_ENDS = dict.fromkeys(
    ("TERM_RUNLIMIT", "job killed: walltime", "job.exception type=timeout"), TIME_LIMIT
)
SCHEDULER_ENDS |= dict.fromkeys(
    ("TERM_MEMLIMIT", "job killed: mem", "job killed: vmem"), ("failed", HOST_OOM_LABEL, "oom-kill")
)
SCHEDULER_ENDS["TERM_PREEMPT"] = ("cancelled", PREEMPTED_LABEL, "cancelled")
#: SkyPilot's word at its job's end (``✓ Job finished (status: CANCELLED).``; its failures are the job's own
#: lines); Modal's on a function past its timeout (``modal.exception.FunctionTimeoutError: Task's current input
#: in-01JA... hit its timeout of 3600s``)
SCHEDULER_ENDS["Job finished (status: CANCELLED)"] = ("cancelled", "", "cancelled")
SCHEDULER_ENDS["FunctionTimeoutError: "] = TIME_LIMIT
#: SkyPilot's managed job that no cloud could provision again (jobs/utils.py: ``Job finished (status:
#: FAILED_NO_RESOURCE).``, ``Managed job finished: 12 (status: FAILED_NO_RESOURCE).``); the kubelet's eviction of
#: a pod its node ran short of something for (eviction/helpers.go: ``The node was low on resource:
#: ephemeral-storage. Threshold quantity: ...``, the pod's event or status message)
SCHEDULER_ENDS["(status: FAILED_NO_RESOURCE)"] = ("failed", "", "no resources")
SCHEDULER_ENDS["The node was low on resource: "] = ("failed", "", "evicted")
#: dstack's run past its ``max_duration`` (JobTerminationReason.MAX_DURATION_EXCEEDED: ``dstack apply``'s end
#: ``Terminated (Max duration exceeded)``, ``dstack ps``' error column, the API's value); a Kubernetes Job's or a
#: Kubeflow job's past its ``activeDeadlineSeconds`` (its condition's message: ``Job was active longer than
#: specified deadline``, reason DeadlineExceeded): the platform's time limit, the SIGTERM before it its doing
SCHEDULER_ENDS |= dict.fromkeys(
    (
        "Max duration exceeded",
        "max duration exceeded",
        "max_duration_exceeded",
        "active longer than specified deadline",
    ),
    TIME_LIMIT,
)
SCHEDULER_ENDS |= dict.fromkeys(
    (
        "TERM_OWNER",
        "TERM_ADMIN",
        "TERM_FORCE_",
        "TERM_REQUEUE_",
        "job.exception type=cancel",
        RAY_JOB_STOPPED,
    ),
    ("cancelled", "", "cancelled"),
)
SCHEDULER_ENDS["=>> PBS: job killed"] = ("failed", "", "scheduler")  # another limit: after the named ones
#: slurmstepd's kill of a step over its memory limit, from the job accounting's polling (not the cgroup's OOM
#: killer): ``slurmstepd: error: StepId=4001.0 exceeded memory limit (257698037 > 251658240), being killed``
#: (or ``virtual memory``), then ``slurmstepd: error: Exceeded job memory limit`` (libslurmfull's strings)
MEMORY_LIMIT_KILLS = ("exceeded memory limit", "exceeded virtual memory limit", "Exceeded job memory limit")
#: Ray's memory monitor, which kills a worker when its node's memory use passes a threshold: the raylet's
#: report (node_manager.cc ``1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed
#: ...``) and the dead actor's (``Worker exit detail: Task was killed due to the node running low on
#: memory.``), before the ActorDiedError the trainer raises of it
MEMORY_LIMIT_KILLS += ("killed due to memory pressure (OOM)", "killed due to the node running low on memory")
#: Kubernetes' reason for a container its memory limit ended (``kubectl describe pod``: ``Reason:       OOMKilled``,
#: then ``Exit Code:    137``; ``kubectl get pods``' STATUS column)
MEMORY_LIMIT_KILLS += ("OOMKilled",)
#: Cray ALPS's word on a process its node's OOM killer ended (``[NID 12345] 2019-11-02 14:24:41 Apid 81234567:
#: OOM killer terminated this process.``), before aprun's ``exit signals: Killed``
MEMORY_LIMIT_KILLS += ("OOM killer terminated this process",)
#: srun's word on a task the step's OOM killer ended (launch_slurm's ``%s: %s %s: Out Of Memory``):
#: ``srun: error: r7i4n1: task 0: Out Of Memory``
SRUN_OOM = "Out Of Memory"
#: LSF's line after a job summary's TERM_ reason, or of a job whose command failed
LSF_EXIT = "Exited with exit code"
#: Slurm's accounting of a job's end as a site's epilog or the job script prints it: seff's ``State: TIMEOUT
#: (exit code 0)``, jobstats' ``State: CANCELLED``, a ``sacct -j $SLURM_JOB_ID`` row's State column of a step
#: its memory limit ended (``8812345.0  OUT_OF_MEMORY  0:125``): a summary, the run's word only where it printed
#: none of its own (a log cut before Slurm's own line reached it). Not ``FAILED``: a non-zero exit code, which a
#: job script's last command makes too, after a training that ended
ACCOUNTED_STATES = {
    "TIMEOUT": TIME_LIMIT,
    "CANCELLED": ("cancelled", "", "cancelled"),
    "PREEMPTED": ("cancelled", PREEMPTED_LABEL, "cancelled"),
    "OUT_OF_MEMORY": ("failed", HOST_OOM_LABEL, "oom-kill"),
}
_ACCOUNTED_STATE = re.compile(
    rf"^\s*State: ({'|'.join(ACCOUNTED_STATES)})\b|^\s*\d+(?:_\d+)?(?:\.\w+)?\s+(OUT_OF_MEMORY)\b"
)
_ACCOUNTING_MARKERS = (*(f"State: {state}" for state in ACCOUNTED_STATES), " OUT_OF_MEMORY")
#: Open MPI's mpirun after a rank failed (help-mpirun.txt, help-errmgr-base.txt)
MPIRUN_ENDS = ("exited on signal", "exited with non-zero status", "terminated normally, but")
#: Open MPI's runtime losing a node's daemon (help-errmgr-base.txt [node-died]: ORTE in Open MPI 4, PRRTE in
#: 5): a node or its network failed, the cause of the ranks' end there
LOST_DAEMON = "has lost communication with a remote daemon"
#: pdsh's ssh module on a remote command's end (DeepSpeed's multi-node launcher runs it): ``pdsh@node0: node3:
#: ssh exited with exit code 255``; 255 is ssh's own failure (the node or its network lost: a cause), any other
#: code the remote command's (a report of what its lines say)
PDSH_SSH_EXIT = "ssh exited with exit code"
#: pdsh's word on the SIGINT it got (pdsh.c: ``pdsh@node0: interrupt (one more within 1 sec to abort)``): a
#: user's Ctrl-C, or the batch system's signal on a cancel; how the run ended, its sender's line the cause
PDSH_INTERRUPT = "interrupt (one more within 1 sec to abort)"
#: the ssh client's own error when it cannot reach a node (ssh.c, forwarded by pdsh with the node's prefix
#: before its exit 255): ``node-03: ssh: connect to host node-03 port 22: No route to host``, ``ssh: Could not
#: resolve hostname node-9: Name or service not known``: why the node was lost
SSH_FAILURES = ("ssh: connect to host ", "ssh: Could not resolve hostname ")
#: the ssh client refused by a node that is up (sshconnect2.c: ``Permission denied (publickey).``, ``Host key
#: verification failed.``), before pdsh's exit 255: the launch's cause, no node failure
SSH_REFUSALS = ("Permission denied (publickey", "Host key verification failed")
#: Open MPI's launch failing before any rank ran (help-plm-base.txt, help-rmaps-base.txt): a node's shell
#: without ``orted`` (``bash: orted: command not found``, then ``ORTE was unable to reliably start one or
#: more daemons.``), fewer slots than ranks (``There are not enough slots available in the system to satisfy
#: the 64``)
MPI_LAUNCH_FAILURES = (
    "orted: command not found",
    "was unable to reliably start one or more daemons",
    "There are not enough slots available in the system",
)
#: the interpreter's own word that ``python -m <module>`` could not start (runpy: ``/opt/conda/bin/python:
#: Error while finding module specification for 'torch.distributed.run' (ModuleNotFoundError: No module named
#: 'torch')``, ``python: No module named deepspeed``), or its script (``python3: can't open file
#: '/home/u/llm/trian.py': [Errno 2] No such file or directory``); ``python3: `` read as a host's prefix (pdsh's
#: ``node3: ``) leaves the message alone
INTERPRETER_FAILURES = (
    "Error while finding module specification for ",
    "No module named ",
    "can't open file ",
)
_INTERPRETER_FAILURE = re.compile(
    r"^(?:\S*python[\d.]*: )?(?:Error while finding module specification for |No module named |can't open file )"
)
#: the shell's word that a job script's launcher is not there (bash: ``/var/spool/slurmd/job700001/slurm_script:
#: line 23: torchrun: command not found``, ``bash: deepspeed: command not found``; its exit status 127): the
#: training never started (a module not loaded, an environment not activated)
LAUNCHERS_NOT_FOUND = tuple(
    f"{launcher}: command not found"
    for launcher in (
        "torchrun",
        "deepspeed",
        "python",
        "python3",
        "accelerate",
        "srun",
        "mpirun",
        "horovodrun",
    )
)
#: c10d's warning that a host's name does not resolve (socket.cpp: ``The IPv4 network addresses of
#: (gpu-node-17.cluster.internal, 29500) cannot be retrieved (gai error: -2 - Name or service not known).``),
#: before its connection times out: why it did
NAME_RESOLUTION, NAME_RESOLUTION_KIND = "cannot be retrieved (gai error", "name resolution"
#: the failure kinds their programs log as warnings (a warning naming an error is otherwise none): torch
#: elastic's agent's death signal, c10d's name that does not resolve
_WARNED_FAILURES = (DEATH_SIGNAL_KIND, NAME_RESOLUTION_KIND)
#: torch elastic's agent restarting its workers (agent/server/api.py: ``[default] Worker group FAILED. 3/3
#: attempts left; will restart worker group``, or on new nodes): where the workers then ended well, what
#: failed before is an earlier launch's (where they did not, one node's restart may follow a peer's failure
#: that the later one repeats: the earlier failure stays the cause)
ELASTIC_RESTART = "will restart worker group"
#: what the CUDA caching allocator's error says (``RuntimeError: CUDA out of memory.``, torch 2's
#: ``torch.OutOfMemoryError``)
CUDA_OOM = ("CUDA out of memory", "OutOfMemoryError")
TRACEBACK_HEADER = "Traceback (most recent call last)"
#: lines right before a traceback that Python printed and ignored: the unraisable hook's (``__del__``,
#: atexit callbacks: "Exception ignored in: <...>", "Exception ignored in atexit callback: <...>") and
#: logging's failure to emit a record (Handler.handleError)
HARMLESS_TRACEBACKS = ("Exception ignored in", "--- Logging error ---")
#: the lines between the tracebacks of a chained exception (traceback.py, pythonrun.c): ``raise X from Y``
#: (Y is X's direct cause: a wrapper's message says what failed, its cause's how: RendezvousError's "could
#: not be instantiated" from DistNetworkError's "client socket has timed out ... (gpu-b01, 29500)"), and an
#: exception raised while handling another (which failed first)
RAISED_FROM = "The above exception was the direct cause"
RAISED_WHILE_HANDLING = "During handling of the above exception"
CHAINED_TRACEBACKS = (RAISED_FROM, RAISED_WHILE_HANDLING)
#: the kind of an exception raised while handling another: that one's consequence
HANDLING = "raised while handling"
#: an exception line with a message: only such a one says more as the cause of the next (``_queue.Empty``
#: alone, which a DataLoader's "worker exited unexpectedly" is raised from, says nothing)
_WITH_MESSAGE = rf"^{PYTHON_SPACE}*[\w.]+: {PYTHON_SPACE}*\S"
#: NCCL's error message (torch's getNcclErrorDetailStr, after ``NCCL error in: <file>:<line>, <result>,
#: NCCL version <v>`` and the result's description) ends ``\nLast error:\n<NCCL's last error>``: the line
#: after ``Last error:`` says what failed (``socketStartConnect: Connect to 10.10.1.7<46631> failed :
#: Connection refused``), past the exception line a traceback ends on
NCCL_LAST_ERROR = "Last error:"
#: lines from an exception line to its NCCL last error's: the result's description, ``Last error:``, the error
LAST_ERROR_WITHIN = 3
#: the header of a traceback that an exception's message wraps, each rank's cause of it: torch.distributed.
#: checkpoint's ``CheckpointException ranks:dict_keys([0, 3])`` prints every failed rank's traceback under
#: ``Traceback (most recent call last): (RANK 0)`` (api.py ``__str__``): its exception is the cause
WRAPPED_TRACEBACK = f"{TRACEBACK_HEADER}: (RANK "
#: torch's ExceptionWrapper (torch/_utils.py ``reraise``) re-raises a DataLoader worker's or a DataParallel
#: replica's exception as ``OSError: Caught OSError in DataLoader worker process 0.`` with the original
#: traceback in its message, under ``Original Traceback (most recent call last):``: its exception (``OSError:
#: [Errno 116] Stale file handle``) is the cause
ORIGINAL_TRACEBACK = f"Original {TRACEBACK_HEADER}"
#: how many lines before its header a harmless (chained) traceback's line may come
HARMLESS_WITHIN, CHAINED_WITHIN = 2, 3
#: what opens a traceback's block (a harmless or chained traceback's line heralds one)
TRACEBACK_OPENERS = (TRACEBACK_HEADER, *HARMLESS_TRACEBACKS, *CHAINED_TRACEBACKS)

_SET_X = re.compile(r"^\+\s*(?:export\s+)?(?P<name>[A-Z_]+)=(?P<value>\S+)")
_SET_X_FACTS = dict(NNODES="nodes", N_NODES="nodes", SLURM_NNODES="nodes", GPUS_PER_NODE="gpus_per_node")
_ENV = re.compile(r"\bSLURM_(?P<name>JOB_?ID|NNODES|GPUS_ON_NODE)=(?P<value>\d+)")
_ENV_FACTS = dict(JOB_ID="job_id", JOBID="job_id", NNODES="nodes", GPUS_ON_NODE="gpus_per_node")
_MODEL_SIZE = re.compile(r"Model size: (?P<size>[\d.]+)\s*B\b")
#: what ``_context`` reads: ``set -x`` echoes, Slurm's environment, a model size, nvidia-smi's table and
#: the GPU models ``gpu_model`` knows
#: torch elastic's failure table (errors/__init__.py ``_FAILURE_FORMAT_TEMPLATE``): the failed worker's host
#: and rank on the two lines before its ``exitcode  : -9 (pid: 8233) SIGKILL``
ELASTIC_WORKER = ("host      : ", "rank      : ")
ELASTIC_EXITCODE = "exitcode  : "
CONTEXT = (
    "NNODES=",
    "GPUS_PER_NODE=",
    "SLURM_JOB",
    "SLURM_GPUS_ON_NODE=",
    "Model size:",
    "MiB /",
    *ELASTIC_WORKER,
)
GPUS = ("V100", "A100", "H100")

_V100 = re.compile(r"V100[- ]?(?P<form>SXM2|PCIE)(?:[- ](?P<mem>16|32)GB)?", re.IGNORECASE)
_A100 = re.compile(
    r"A100[- ](?:(?P<form>SXM4|PCIE)[- ](?P<mem>40|80)GB|(?P<mem2>40|80)GB (?P<form2>PCIe|SXM4))",
    re.IGNORECASE,
)
_H100 = re.compile(r"H100(?P<rest>[- ]\w+)?", re.IGNORECASE)
# (?<!\d): a search must not restart inside a run of digits (quadratic on a line of 100k digits)
_SMI_MEMORY = re.compile(r"(?<!\d)(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")

_NCCL_FAILURE = re.compile(r"[Tt]ime(d )?out|[Ee]rror")
#: srun's ``srun: error: <node>: task 3: Exited with exit code 1`` / ``tasks 0-3: Killed``
_SRUN_TASK = re.compile(r"\btasks? [\d,-]+: (?P<how>.*)")
#: when slurmstepd cancelled a job or step: ``*** JOB 77001 ON node1 CANCELLED AT 2024-03-01T10:00:00 ...``
_CANCEL_TIME = re.compile(r"CANCELLED AT (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")
#: a cancel this long after the last one ends a later attempt of the job (requeued, its output appended);
#: a job's and its steps' cancels of one attempt are seconds apart at most
REQUEUE_GAP_S = 60
#: slurmstepd's word that it could not start a task's program (``execve(): %s: %m``, ``execve(): bad
#: interpreter(%s): %m``): ``slurmstepd: error: execve(): python: No such file or directory``
EXEC_FAILURE = "execve(): "
#: bash's report of a job script's command that a crash signal ended (jobs.c, a shell not interactive: the
#: script, its line, the pid, the signal's description padded to 24 characters, ``(core dumped)`` if it
#: dumped one, the command): ``/var/spool/slurmd/job7/slurm_script: line 42: 81234 Segmentation fault
#: (core dumped) python train.py``; its report of a kill (``81234 Killed``) is read as any kill
_BASH_CRASH = re.compile(rf": line \d+: \d+ (?:{'|'.join(CRASH_SIGNAL_DESCRIPTIONS.values())})")
#: argparse's ``<prog>: error: <message>`` (prog: the script's name), not a scheduler's own errors (a job's
#: ``scontrol requeue`` refused, Lightning's auto-requeue: a side errand, not why the job ended)
_ARGPARSE_ERROR = re.compile(
    r"(?!(?:srun|slurmstepd|sbatch|salloc|scontrol|squeue|scancel|sacct|sinfo|sstat):)[\w.-]+: error: "
)
#: a warning: Python's ``file.py:12: UserWarning: ...``, logging's ``WARNING:``/`` - WARNING - ``/`` | WARNING
#: | `` (fairseq's format: its trainer's ``OOM: Ran out of memory`` it recovers from) / ``[WARNING]`` and glog's
#: ``W1121 22:02:01.99 ...`` / ``[W1121 ...`` / ``[W ProcessGroupNCCL.cpp:...]``; one pattern for Python's re
#: and polars (Python's ``\s``: PYTHON_SPACE; ``\wWarning``, not ``\w+Warning``: the same search without re's
#: quadratic retries on a long word)
WARNING = rf"^{PYTHON_SPACE}*\[?W(?:\d{{4}} | )|\[WARNING\]|\bWARNING[:\]]|[-|] WARNING [-|] |\wWarning: "
_WARNING = re.compile(WARNING)
# r"\bKilled\b|oom[-_]kill|..." with every alternative opening on a literal, so that re scans a line for
# the first letters of the alternatives only (a leading \b made it try all of them at every position:
# 2.6 -> 0.4 us on a 90-character line); the look-behind checks the word boundary before "Killed"
#: (a Signals member's repr in a printed config, ``rank_termination_signal=<Signals.SIGKILL: 9>``, is no kill)
_KILLED = re.compile(r"Killed\b(?<=\bKilled)|oom[-_]kill|signal 9\b|SIGKILL(?<!Signals\.SIGKILL)")


def gpu_model(text: str) -> str | None:
    """Normalised GPU model (the names of logstat.analytics.gpus) named in ``text``, or None."""
    # every model is named with "100": a substring test first, as the patterns ignore case and re has no
    # literal to scan a line for
    return named_gpu(text) if "100" in text else None


def named_gpu(text: str) -> str | None:
    """``gpu_model`` without its substring test: H100 NVL, PCIe or SXM (nvidia-smi's ``NVIDIA H100 80GB
    HBM3``), A100 and V100 by form and memory."""
    if match := _A100.search(text):
        form = (match["form"] or match["form2"]).upper()
        return f"A100-{form}-{match['mem'] or match['mem2']}GB"
    if match := _V100.search(text):
        form = match["form"].upper()
        return f"V100-{form}-{match['mem']}GB" if match["mem"] else f"V100-{form}"
    if match := _H100.search(text):
        rest = (match["rest"] or "").lower()
        if rest.endswith("nvl"):
            return "H100-NVL"
        return "H100-PCIE" if "pcie" in rest or "PCIe" in text else "H100-SXM"
    return None


def _start_attempt_after_earlier_cancel(text: str, run: RunBuilder) -> None:
    """A cancel long after the run's last one: the job was requeued (``--requeue``, its output appended to
    the same files), so the failures up to the earlier cancel ended an earlier attempt; the run's last
    launch starts after that cancel."""
    at = _cancel_time(text)
    if at is None:
        return
    earlier = run.state.get("slurm_cancel")
    if earlier is not None and _attempts_apart(earlier[0], at):
        run.launch_start = max(run.launch_start, earlier[1] + (1 << RECORD_SHIFT))  # from the next record
    run.state["slurm_cancel"] = (at, run.position)


def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one of the family's rare records into ``run`` (never raises): a failure event, quoted after its
    label (none for a warning that names an error), or facts. The tests come in the order in which a record
    that says several things is read."""
    status, label, weight, kind, bare_cancel = "failed", "", CAUSE, "", False
    if "CUDA out of memory" in text or "OutOfMemoryError" in text:  # CUDA_OOM
        label, kind = OOM_LABEL, "cuda oom"
    elif "CANCELLED AT" in text:  # slurmstepd's ``*** JOB|STEP <id> ON <node> CANCELLED AT <time> ...``
        _start_attempt_after_earlier_cancel(text, run)
        bare_step = "*** STEP" in text and "DUE TO" not in text
        if "TIME LIMIT" in text:
            status, label, kind = TIME_LIMIT
        elif "NODE FAIL" in text:  # Slurm's verdict on a node: what its ranks' peers printed follows from it
            label, weight, kind = NODE_FAILURE_LABEL, HARDWARE, "node failure"
        elif "TASK FAILURE" in text or (bare_step and run.failure is not None):
            # Slurm ending a job (or srun a step, after "srun: Terminating StepId=...") because a task
            # failed: the task's own lines say why
            weight, kind = REPORT, "slurm cancel"
        else:  # preemption, scancel by a user or an admin, a requeue
            status = kind = "cancelled"
            label, bare_cancel = PREEMPTED_LABEL if "PREEMPTION" in text else "", bare_step
            if label:
                run.requeued()  # a preempted job is requeued (--requeue), its output appended
    elif SUBMITIT_TIMED_OUT in text:
        status, label, kind = TIME_LIMIT
        run.requeued()
    elif RUNNER_STOP in text and text.startswith("logstat: "):  # the run's cause, after what it made
        status = kind = "cancelled"
    elif ended := next((end for end in SCHEDULER_ENDS if end in text), None):
        status, label, kind = SCHEDULER_ENDS[ended]
    elif PYXIS in text and ": error: " in text:
        relayed = text.split(PYXIS, 1)[1]
        if relayed.startswith("    ") and not relayed.lstrip().startswith(("[INFO]", "[WARN]")):
            label, kind = CONTAINER_LABEL, "container"  # enroot's own word
        elif any(failure in relayed for failure in PYXIS_FAILURES):
            label, weight, kind = CONTAINER_LABEL, REPORT, "container"
        else:
            return
    elif text.startswith(APPTAINER_FATAL):
        label, kind = CONTAINER_LABEL, "container"
    elif any(kill in text for kill in MEMORY_LIMIT_KILLS):  # a host memory limit, as the OOM killer's event
        label, kind = HOST_OOM_LABEL, "oom-kill"
    elif text.startswith(LSF_EXIT):
        weight, kind = REPORT, "scheduler exit"
    elif any(state in text for state in _ACCOUNTING_MARKERS) and (accounted := _ACCOUNTED_STATE.search(text)):
        (status, label, kind), weight = ACCOUNTED_STATES[accounted[1] or accounted[2]], REPORT
    elif IB_COMPLETION_ERROR in text:
        label, kind = NETWORK_LABEL, "network"
    elif XID in text and (xid := _XID.search(text)):
        fatal = int(xid[1]) in FATAL_XIDS
        label, weight, kind = GPU_LABEL, HARDWARE if fatal else EFFECT, "gpu hardware" if fatal else "xid"
    elif any(end in text for end in WATCHDOG_ENDS) or ("NCCL" in text and _NCCL_FAILURE.search(text)):
        # the first rank's watchdog is the cause; a communicator aborted because a peer failed is not
        label, kind = ("", "cuda error") if "CUDA error" in text else (NCCL_LABEL, "nccl")
        if OWN_WATCHDOG not in text and any(failure in text for failure in PEER_FAILURES):
            weight, kind = REPORT, "peer"
    elif any(abort in text for abort in NATIVE_ABORTS):
        kind = "native abort"
    elif text.lstrip().startswith(HYDRA_ERRORS):
        kind = "config"
    elif DEEPSPEED_DEATH_SIGNAL in text:  # below a word on who signalled it (pdsh's interrupt, a scheduler)
        status, weight, kind = "cancelled", REPORT, DEATH_SIGNAL_KIND
    elif DEATH_SIGNAL in text:
        # stopped from outside (a spot preemption, a kill, Ctrl-C): a scheduler's word tells more (finish)
        status, kind = "cancelled", DEATH_SIGNAL_KIND
    elif any(error in text for error in BUILD_ERRORS):
        if _BUILD_ERROR.search(text.strip()):  # a cause only of a build's failure (``finish``)
            _printed_cause(run, "build", text)
        return None
    elif any(refusal in text for refusal in SSH_REFUSALS):
        kind = "ssh"
    elif any(failure in text for failure in MPI_LAUNCH_FAILURES):
        kind = "mpirun launch"
    elif any(failure in text for failure in INTERPRETER_FAILURES) and _INTERPRETER_FAILURE.search(
        text.strip()
    ):
        kind = "exec"
    elif any(missing in text for missing in LAUNCHERS_NOT_FOUND):
        kind = "exec"
    elif NAME_RESOLUTION in text:  # a warning: c10d retries, so a peer's failure outweighs it
        label, weight, kind = NETWORK_LABEL, EFFECT, NAME_RESOLUTION_KIND
    elif ELASTIC_RESTART in text:
        run.state.setdefault(NAME, {})["elastic_restart"] = run.position  # weighed at ``finish``
        return None
    elif (
        LOST_DAEMON in text
        or (PDSH_SSH_EXIT in text and text.rstrip().endswith(f"{PDSH_SSH_EXIT} 255"))
        or any(failure in text for failure in SSH_FAILURES)
    ):
        label, kind = NODE_FAILURE_LABEL, "node failure"
    elif PDSH_SSH_EXIT in text:
        weight, kind = REPORT, "pdsh"
    elif PDSH_INTERRUPT in text:
        status, weight, kind = "cancelled", EFFECT, "interrupt"
    elif "srun: error" in text or "NODE_FAIL" in text:
        # a node failure is a cause, so is an error of a step that could not start; a task's end (``task 3:
        # Exited with exit code 1``, ``task 3: Killed``) follows from what the task printed before
        task = _SRUN_TASK.search(text)
        if "Node failure" in text or "NODE_FAIL" in text:
            label, weight, kind = NODE_FAILURE_LABEL, HARDWARE, "node failure"
        elif task is None:
            kind = "srun"
        elif task["how"].startswith(SRUN_OOM):  # the step's OOM killer, as its own event
            label, kind = HOST_OOM_LABEL, "oom-kill"
        else:
            weight, kind = REPORT if task["how"].startswith("Exited") else EFFECT, "srun task"
    elif any(end in text for end in CLEAN_EXITS):
        run.saw(NAME)
        return run.exited_cleanly(text, lineno)
    elif "exits with return code" in text:  # DeepSpeed's launcher, after a worker failed
        # a negative code is the signal that ended the worker (subprocess's returncode): how it ended, unless
        # the worker crashed by itself (SIGSEGV, SIGILL...): the crash's own report says more
        code = _RETURN_CODE.search(text)
        signalled = code is not None and code[1] not in CRASH_RETURN_CODES
        label, weight, kind = "worker failed: ", EFFECT if signalled else REPORT, "launcher exit"
    elif any(end in text for end in MPIRUN_ENDS):
        weight, kind = EFFECT if "exited on signal" in text else REPORT, "mpirun"
    elif any(crash in text for crash in CRASH_SIGNALS) or (": line " in text and _BASH_CRASH.search(text)):
        label, weight, kind = "crashed: ", EFFECT, "crash"
    elif any(timeout in text for timeout in HEARTBEAT_TIMEOUTS):  # a hung rank, before the monitor kills it
        kind = "hang"
    elif _KILLED.search(text):  # the cgroup OOM killer's event is a cause, a kill says how a process ended
        oom_kill = "oom-kill" in text or "oom_kill" in text
        label, weight, kind = (
            HOST_OOM_LABEL if oom_kill else KILLED_LABEL,
            CAUSE if oom_kill else EFFECT,
            "oom-kill" if oom_kill else "killed",
        )
    elif "by peer" in text:  # c10d/gloo socket errors of a rank whose peer died
        weight, kind = REPORT, "peer"
    elif any(stop in text for stop in SELF_STOPS) and _SELF_STOP.search(text):
        kind = "self stop"
    elif any(full in text for full in FULL_FILESYSTEM):
        if _FULL_FILESYSTEM.search(text.strip()):  # a cause only of a failed write (``finish``)
            _printed_cause(run, "storage", text)
        return None
    elif any(marker in text for marker in TRACEBACK_OPENERS):
        return  # a traceback's line that no block took (a herald right after another): it says nothing more
    elif ": error: " not in text:
        return _context(text, lineno, run)
    elif EXEC_FAILURE in text:  # nothing of the task ran: its exit code (srun's report) follows from it
        kind = "exec"
    elif _ARGPARSE_ERROR.match(text.strip()):  # a worker's (or a launcher's) command line was refused
        kind = "arguments"
    else:
        return
    if _WARNING.search(text) and kind not in _WARNED_FAILURES:
        return
    run.saw(NAME)
    if text.lstrip().startswith(ELASTIC_EXITCODE):
        text = text.strip() + _failed_worker(run, lineno)
    run.fail(status, label + text.strip(), lineno, weight=weight, kind=kind)
    if bare_cancel:  # no failure before it that Python read: ``finish`` weighs it with the column-wise ones
        run.state.setdefault(NAME, {}).setdefault("bare_step_cancel", (run.failure_events[-1][0], text))


def finish(run: RunBuilder) -> None:
    """A bare STEP cancel that ``parse_line`` read as the first failure, a cancel, is a report if a
    failure read column-wise (a traceback's, the launcher's kill) came before it; a collective's failure
    may be a dead peer's effect (``_peers_died``); torch elastic's restart that ended well starts the last
    launch: refold the run's failure events so."""
    order, text = run.state.get(NAME, {}).get("bare_step_cancel", (None, ""))
    events = list(run.failure_events)
    index = next((index for index, event in enumerate(events) if event[0] == order), 0)
    if index:
        events[index] = (order, "failed", text.strip(), REPORT, "slurm cancel", False, False)
    _several_jobs(run)
    restarted = _restarted_and_ended_again(run, events)
    restart = run.state.get(NAME, {}).get("elastic_restart")
    events = _peers_died(_with_printed_cause(_signalled_by_scheduler(events), run), run.launch_start, restart)
    if restarted or events != run.failure_events or _preempted_before_the_last_launch(run, events):
        run.refold(events)


def _restarted_and_ended_again(run: RunBuilder, events: list[tuple]) -> bool:
    """A run whose workers torch elastic restarted, then exited cleanly, completed, or failed of a cause of
    their own (not only a launcher's report) after the last restart: its last launch starts after that
    restart, the failures before it were the earlier attempts'. Whether it did so."""
    restart = run.state.get(NAME, {}).get("elastic_restart")
    ends = [end[3] for end in (run.clean_exit, run.completion) if end is not None]
    ends += [event[0] for event in events if event[3] >= CAUSE]
    if restart is None or not any(end > restart for end in ends):
        return False
    run.launch_start = max(run.launch_start, restart + (1 << RECORD_SHIFT))  # from the next record
    return True


def _signalled_by_scheduler(events: list[tuple]) -> list[tuple]:
    """``events`` with torch elastic's death signal an effect where the scheduler said why it stopped the job."""
    if not any(event[4] in SCHEDULER_STOPS for event in events):
        return events
    return [(*event[:3], EFFECT, *event[4:]) if event[4] == DEATH_SIGNAL_KIND else event for event in events]


def _printed_cause(run: RunBuilder, kind: str, text: str) -> None:
    """Keep a line that says why a later failure of ``kind`` (``_EXPLAINED``) failed, where that says not."""
    causes = run.state.setdefault(NAME, {}).setdefault("printed_causes", [])
    causes.append((run.position + PYTHON_EVENTS, kind, text.strip()))


def _reports_a_failed_build(event: tuple) -> bool:
    return (event[5] and any(failure in event[2] for failure in BUILD_FAILURES)) or event[4] == BUILD_FAILED


def _reports_a_failed_write(event: tuple) -> bool:
    return event[5] and any(failure in event[2] for failure in WRITE_FAILURES)


#: which failure events a kind of printed cause explains
_EXPLAINED = {"build": _reports_a_failed_build, "storage": _reports_a_failed_write}


def _with_printed_cause(events: list[tuple], run: RunBuilder) -> list[tuple]:
    """``events`` with, as a cause, the last line printed in its file before the first failure it explains
    (``_EXPLAINED``): a toolchain's error (``BUILD_ERRORS``: a missing library, a missing header) before an
    exception saying a build failed (or a family's ``BUILD_FAILED`` line); a full filesystem's
    (``FULL_FILESYSTEM``) before a failed write."""
    causes = run.state.get(NAME, {}).get("printed_causes", [])
    for event in events if causes else ():
        before = [
            cause
            for cause in causes
            if cause[0] < event[0]
            and cause[0] >> FILE_SHIFT == event[0] >> FILE_SHIFT
            and _EXPLAINED[cause[1]](event)
        ]
        if before:
            order, kind, text = before[-1]
            return sorted([*events, (order, "failed", text, CAUSE, kind, False, False)], key=lambda e: e[0])
    return events


def _preempted_before_the_last_launch(run: RunBuilder, events: list[tuple]) -> bool:
    """Preemptions read after the run's last launch started (its requeue's word is the job's cancel line, the
    step's comes after it; a job's .err, read after its .out) ended earlier launches when the run logged more
    launches than it was preempted (a preempted job is requeued and runs again): its last launch starts after
    them. Not one that came after a step of the last launch in its file: that ended the last. Whether it did
    so."""
    preempted = [
        event for event in events if event[4] == "cancelled" and event[2].startswith(PREEMPTED_LABEL)
    ]
    if not preempted or preempted[-1][0] < run.launch_start or _trained_before(run, preempted[-1][0]):
        return False
    frame = run.iteration_frame
    launches = 1 + (frame.get_column("launch").max() or 0) if frame is not None and frame.height else 1
    times = [when for event in preempted if (when := _cancel_time(event[2])) is not None]
    attempts = 1 + sum(_attempts_apart(earlier, later) for earlier, later in itertools.pairwise(times))
    if launches <= attempts:
        return False
    run.launch_start = preempted[-1][0] + (1 << RECORD_SHIFT)
    return True


def _trained_before(run: RunBuilder, order: int) -> bool:
    """Whether the run's last launch logged a step before ``order`` in its file."""
    frame = run.iteration_frame
    if frame is None or frame.is_empty():
        return False
    path, line = str(run.files[order >> FILE_SHIFT]), line_of_order(order)
    last = frame.filter(pl.col("launch") == pl.col("launch").max())
    here = pl.col("source_path").fill_null(str(run.files[0])) == path
    return not last.filter(here, pl.col("line") < line).is_empty()


def _cancel_time(text: str) -> datetime | None:
    when = _CANCEL_TIME.search(text)
    return None if when is None else datetime.fromisoformat(when[1])


def _attempts_apart(earlier: datetime, later: datetime) -> bool:
    """Whether two cancels end two attempts of a job (``REQUEUE_GAP_S``), not one (a job's and its step's)."""
    return (later - earlier).total_seconds() > REQUEUE_GAP_S


def _several_jobs(run: RunBuilder) -> None:
    """A note at each job id after the first that the log's Slurm environment names: several jobs' output
    in one file (a chain of jobs appending to one --output, or files concatenated) is one row."""
    jobs = run.state.get(NAME, {}).get("job_ids", {})
    first = next(iter(jobs), None)
    for job, lineno in jobs.items():
        if job != first:
            message = (
                f"job {job} after job {first}: several jobs' output in one file (appended or concatenated)"
            )
            run.note(NAME, lineno, f"{message}, one row of their steps")


#: the watchdog's word on a collective that timed out (ProcessGroupNCCL: ``Watchdog caught collective operation
#: timeout: WorkNCCL(...) ran for 600310 milliseconds before timing out``), and the failures of a rank itself
_COLLECTIVE_TIMEOUT = "collective operation timeout"
_RANKS_OWN_FAILURES = ("exception", "cuda oom")
#: a native crash's own words (CPython's ``Fatal Python error: Segmentation fault``): a rank's own failure too;
#: not ``Aborted``, which a watchdog's own abort of its rank prints
_CRASHES = tuple(text for signal, text in CRASH_SIGNAL_DESCRIPTIONS.items() if signal != "SIGABRT")


def _peers_died(events: list[tuple], launch_start: int, restart: int | None) -> list[tuple]:
    """An NCCL watchdog's timeout or error is what the other ranks see of a rank that died: an effect, not
    the cause, where the cgroup OOM killer killed one (slurmstepd reports it when the step ends, after the
    watchdogs fired) or a rank was killed or crashed before it in its file (the first such effect is then
    the reason), in the same launch (from ``launch_start``: an earlier launch's failure is over when the
    relaunch hangs). Only line order within a file is time: a job's own output, read before its tasks'
    files (``%x-%j-%t.out``), ends with srun's word on the task the watchdog itself aborted. A collective's
    timeout is also an effect where the launch holds a rank's own failure (an exception, a CUDA OOM) in
    another file (a task's file of ``%t``, whose order against this one's no line tells) or after it in
    its file: the rank stopped taking part, the others waited for it (minutes, the watchdog's timeout;
    their lines come first where the failing rank's stderr was flushed last), unless torch elastic
    restarted the workers between them (``restart``: its last restart's order)."""
    collective = [index for index, event in enumerate(events) if event[4] == "nccl" and event[3] == CAUSE]
    if not collective:
        return events
    first = events[collective[0]][0]
    launch = [event for event in events if event[0] >= launch_start]
    killed = any(event[4] == "oom-kill" for event in launch)
    same_file = [event for event in launch if event[0] >> FILE_SHIFT == first >> FILE_SHIFT]
    died = any(event[0] < first and event[3] >= EFFECT for event in same_file)  # a peer's reset is a report
    timed_out = all(_COLLECTIVE_TIMEOUT in events[index][2] for index in collective)
    failed_elsewhere = timed_out and any(
        (
            event[4] in _RANKS_OWN_FAILURES
            or (event[4] == "native abort" and any(c in event[2] for c in _CRASHES))
        )
        and event[3] == CAUSE
        and (event[0] >> FILE_SHIFT != first >> FILE_SHIFT or _after_in_launch(first, event[0], restart))
        for event in launch
    )
    if not (killed or died or failed_elsewhere):
        return events
    return [
        (*event[:3], EFFECT, *event[4:]) if index in collective else event
        for index, event in enumerate(events)
    ]


def _after_in_launch(first: int, order: int, restart: int | None) -> bool:
    """Whether ``order`` comes after ``first`` with no restart of torch elastic's between them."""
    return first < order and not (restart is not None and first < restart < order)


def _fact(run: RunBuilder, name: str, value: object, lineno: int) -> None:
    run.saw(NAME)
    run.set_fact(name, value, NAME, lineno)


def _failed_worker(run: RunBuilder, lineno: int) -> str:
    """`` [rank 3 (local_rank: 3), host node07]`` from the failure table's lines just before line ``lineno``
    (an exit code of a worker the launcher saw end), else nothing."""
    worker = run.state.get(NAME, {}).get("elastic_worker", {})
    fields = {field: value for field, (value, line) in worker.items() if lineno - line <= 2}
    said = [f"rank {fields['rank']}"] if "rank" in fields else []
    said += [f"host {fields['host']}"] if "host" in fields else []
    return f" [{', '.join(said)}]" if said else ""


def _context(text: str, lineno: int, run: RunBuilder) -> None:
    """The facts of a ``set -x`` echo, Slurm's environment, a model size's echo or nvidia-smi's table;
    the failed worker's rank and host in torch elastic's failure table."""
    if (stripped := text.strip()).startswith(ELASTIC_WORKER):
        field, value = stripped.split(":", 1)
        run.state.setdefault(NAME, {}).setdefault("elastic_worker", {})[field.strip()] = (
            value.strip(),
            lineno,
        )
        return
    match = _SET_X.match(text.strip())
    if match and match["name"] in _SET_X_FACTS and match["value"].isdigit():
        return _fact(run, _SET_X_FACTS[match["name"]], int(match["value"]), lineno)
    for env in _ENV.finditer(text) if "SLURM_" in text else ():  # a substring test is far cheaper than _ENV
        fact = _ENV_FACTS[env["name"]]
        _fact(run, fact, env["value"] if fact == "job_id" else int(env["value"]), lineno)
        if fact == "job_id":
            run.state.setdefault(NAME, {}).setdefault("job_ids", {}).setdefault(env["value"], lineno)
    gpu_form = run.state.get(NAME, {}).get("gpu_form")
    if match := _MODEL_SIZE.search(text):
        _fact(run, "logged_model_size", float(match["size"]), lineno)
    elif (memory := "MiB" in text and _SMI_MEMORY.search(text)) and gpu_form:
        # nvidia-smi cut a V100's name in the row before: the memory column tells its size
        total_gb = int(memory["total"]) / 1024
        if size := next((size for size in (16, 32, 40, 80, 94) if total_gb <= size), None):
            _fact(run, "gpu_model", f"{run.state[NAME].pop('gpu_form')}-{size}GB", lineno)
    elif (model := gpu_model(text)) and model.count("-") == 1 and model.startswith("V100"):
        run.state.setdefault(NAME, {})["gpu_form"] = model
    elif model:
        _fact(run, "gpu_model", model, lineno)


# --- tracebacks and the launcher's kills, read column-wise ---------------------------------------------

#: what Python's ``str.strip()`` leaves out at a record's start
_LEADING_SPACE = f"^{PYTHON_SPACE}*"
#: an exception's class as Python names one: in CapWords (PEP 8; ``_ArrayMemoryError``), which tells it from
#: a tool's word before its colon (``srun: error:``, logging's ``INFO: ``); qualified by its module unless
#: a builtin or ``__main__``'s
_EXCEPTION_CLASS = r"_?[A-Z]\w*?[a-z]\w*"
_MODULE = r"(?:[A-Za-z_]\w*\.)+"
#: a class alone, with no module and no message, named as Python's builtins are: a lone capitalized word is
#: also how bash tells that a command was killed (``Killed``, ``Terminated``); a bare ``Exception``
#: (DeepSpeed's loss scaler at its minimum raises one) and ``StopIteration`` (a data iterator run dry)
_BUILTIN_LIKE = r"[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure)|Exception|Stop(?:Async)?Iteration"
#: a traceback's exception line (traceback.format_exception_only): the first record after its frames (each
#: indented) that is none of theirs, the exception's class then ``: <message>`` or nothing
#: (``filelock._core._errors.Timeout: The file lock ...``, ``KeyboardInterrupt``), whatever the class is
#: called; the end of the (stripped) record after a class alone
EXCEPTION_LINE = (
    rf"{_LEADING_SPACE}(?:(?:{_MODULE})?{_EXCEPTION_CLASS}:(?:{PYTHON_SPACE}|$)"
    rf"|(?:{_MODULE}{_EXCEPTION_CLASS}|{_BUILTIN_LIKE}){PYTHON_SPACE}*$)"
)
#: the end of the exception line of a compiler backend's failure (torch/_dynamo/exc.py's BackendCompilerFailed:
#: ``backend='inductor' raised:``), whose next line is the exception the backend raised: the traceback ends
#: there, the reason quotes both
BACKEND_RAISED = "' raised:"
#: a record naming a CUDA OOM that is not indented (an indented one, inside a traceback, is a frame's
#: source: ``    raise torch.OutOfMemoryError(``; the exception line below it is the evidence)
OOM_LINE = rf"^[^\s\x1c-\x1f].*(?:{literals(CUDA_OOM)})"
#: a frame or another rank's header: inside a traceback, such a record keeps it open
FRAME_OR_HEADER = rf'{_LEADING_SPACE}(?:File "|{re.escape(TRACEBACK_HEADER)})'
#: the raw lines that can hold a record a traceback reads: a frame, a header, an exception or OOM line (an
#: exception's message after ``: ``, or a name as builtins are named, alone; its heralds are openers, found as
#: every family's records). Literals only: a pattern for any class name alone scans each line of a
#: traceback's window (+10% CPU on a log of 124k tracebacks), so a class of a module's alone (an exception
#: with an empty message, not named as builtins are) is missed
TRACEBACK_LINES = r'File "|Traceback|Error|Exception|Interrupt|Exit|Failure|Iteration|CUDA out of memory|: '
#: the literal tests of parse_line's branches before its test for a kill: a record that passes one is read
#: there (its NCCL test is not literal: a record naming an NCCL error and the launcher's kill is a kill)
_READ_BEFORE_KILLS = (
    *CUDA_OOM,
    "CANCELLED AT",
    RUNNER_STOP,
    IB_COMPLETION_ERROR,
    XID,
    *SCHEDULER_ENDS,
    LSF_EXIT,
    *WATCHDOG_ENDS,
    *NATIVE_ABORTS,
    *HYDRA_ERRORS,
    *BUILD_ERRORS,
    DEATH_SIGNAL,
    DEEPSPEED_DEATH_SIGNAL,
    *SSH_FAILURES,
)
_READ_BEFORE_KILLS += (*MEMORY_LIMIT_KILLS, LOST_DAEMON, "srun: error", "NODE_FAIL")
_READ_BEFORE_KILLS += (*CLEAN_EXITS, "exits with return code", *MPIRUN_ENDS, *CRASH_SIGNALS)
#: the reports of launchers and Slurm that come once every worker is gone (DeepSpeed's launcher's exit code,
#: mpirun's summary, Slurm's cancel, LSF's job summary, PBS's kill): no worker's line follows them but what a signal makes it print. Not
#: srun's per task nor the launcher's kills: the other workers' output interleaves with them
LAUNCHER_REPORTS = ("exits with return code", *MPIRUN_ENDS, "CANCELLED AT", *SCHEDULER_ENDS)
#: parse_line's literal tests for a kill, and the launcher's kill
_KILLS = ("Killing subprocess", "oom-kill", "oom_kill", "SIGKILL")
#: and before a traceback's: a record that passes one is read there, not as a traceback's start (one naming
#: ``Killed``, ``signal 9`` or an NCCL error opens a traceback: those tests are not literal)
_READ_BEFORE_TRACEBACKS = (*_READ_BEFORE_KILLS, *_KILLS, "by peer")
#: a traceback's exception line's kind (``RunBuilder.fail``) by what it names: a launcher's own exception
#: (torchrun's ChildFailedError, DeepSpeed's runner's CalledProcessError) only says that a worker failed;
#: a signal (torch elastic's SignalException) or a peer's end (connection reset) says how a process ended;
#: KeyboardInterrupt (SIGINT: a user's Ctrl-C, forwarded by srun) cancelled the run
_EXCEPTION_KINDS = {
    "nccl": (OWN_WATCHDOG,),
    "launcher": LAUNCHER_EXCEPTIONS,
    "signal": SIGNAL_EXCEPTIONS,
    "peer": PEER_FAILURES,
    "interrupt": ("KeyboardInterrupt",),
    "rendezvous": RENDEZVOUS_TIMEOUTS,
}
_WEIGHTS = {
    "nccl": CAUSE,
    "cuda oom": CAUSE,
    "launcher": REPORT,
    "signal": EFFECT,
    "peer": REPORT,
    "interrupt": CAUSE,
    "rendezvous": EFFECT,
    "network": CAUSE,
    "exception": CAUSE,
    HANDLING: REPORT,
}


def read_tracebacks(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """A failure event per traceback that ended on its exception line or on an OOM line, but those Python
    printed and ignored (its header within 2 lines of a harmless traceback's herald). A chained one's
    exception (its header within 3 lines of a chained exception's line, a ``WRAPPED_TRACEBACK``'s or an
    ``ORIGINAL_TRACEBACK``'s) is
    ``chained``: it replaces the failure when that is the exception before it (``_with_chains``). An
    exception line followed by NCCL's last error quotes that too (a peer's failure whose last error is
    InfiniBand's failed work request is the network's, a cause), one after a compiler backend's failure
    quotes that first. Only the events that can change a run's
    failure are kept: the first and the last of each kind (a relaunch's repeats an earlier launch's, which
    settle makes a consequence: the last is the last launch's), each chained exception and the one before
    it."""
    records, text = blocks.collect(), pl.col("text")
    last_errors = records.filter(pl.col("source") == NCCL_LAST_ERRORS.name, pl.col("role") != OPENER)
    messages = records.filter(pl.col("source") == EMPTY_MESSAGES.name, pl.col("role") != OPENER)
    records = records.filter(pl.col("source") == TRACEBACK.name)
    header = text.str.contains(TRACEBACK_HEADER, literal=True)
    headers = (
        records.filter(header)
        .group_by("block")
        .agg(
            header_line=pl.col("line").min(),
            wrapped=text.str.contains(literals((WRAPPED_TRACEBACK, ORIGINAL_TRACEBACK))).any(),
        )
    )
    after = pl.col("header_line") - pl.col("line")
    heralds = records.filter(pl.col("role") == OPENER, ~header).join(headers, on="block")
    link = pl.lit(None, pl.String)
    for words in CHAINED_TRACEBACKS:
        link = pl.when(text.str.contains(words, literal=True)).then(pl.lit(words)).otherwise(link)
    heralds = heralds.select(
        "block",
        ignored=text.str.contains(literals(HARMLESS_TRACEBACKS)) & (after <= HARMLESS_WITHIN),
        link=pl.when(after <= CHAINED_WITHIN).then(link),
    )
    oom = pl.col("oom")
    kind = pl.when(oom).then(pl.lit("cuda oom"))
    for name, words in _EXCEPTION_KINDS.items():
        kind = kind.when(text.str.contains(literals(words))).then(pl.lit(name))
    closers = (
        records.filter(pl.col("role") == CLOSER)
        .join(heralds, on="block", how="left")
        .join(headers.select("block", "wrapped"), on="block", how="left")
        .with_columns(pl.col("ignored", "wrapped").fill_null(False), oom=text.str.contains(OOM_LINE))
        .filter(~pl.col("ignored"), ~(oom & text.str.contains(WARNING)))
        .sort("run", "order")
        .with_columns(kind=kind.otherwise(pl.lit("exception")))
    )
    # a peer's failure whose last error is InfiniBand's failed work request: the network, not the peer
    network = (pl.col("kind") == "peer") & text.str.contains(IB_COMPLETION_ERROR, literal=True)
    # a compiler backend's failure on the line before a closer (BACKEND_RAISED) is quoted first; a message-less
    # closer (EMPTY_MESSAGES) quotes the line after it, where that says something
    backends = records.filter(text.str.contains(BACKEND_RAISED, literal=True))
    quoting = _quoting_neighbours(closers, backends, on=["block"], after=False)
    said = messages.filter(text.str.contains(r"[A-Za-z]"))
    quoting = _quoting_neighbours(quoting, said, on=["run", "file"], after=True)
    chained = _with_chains(_with_last_errors(quoting, last_errors))
    events = chained.with_columns(kind=pl.when(network).then(pl.lit("network")).otherwise("kind")).select(
        "run",
        "order",
        "in_chain",
        reason=pl.when(oom)
        .then(pl.lit(OOM_LABEL) + text)
        .when(text.str.contains(OWN_WATCHDOG, literal=True))
        .then(pl.lit(NCCL_LABEL) + text)
        .otherwise(text),
        kind="kind",
        exception=~oom,
        chained=pl.col("chained") & ~oom,
    )
    index = pl.int_range(pl.len()).over("run", "kind")
    first_or_last = (index == 0) | (index == pl.len().over("run", "kind") - 1)
    next_chained = pl.when("exception").then("chained").shift(-1).backward_fill().over("run").fill_null(False)
    kept = events.filter(
        first_or_last | pl.col("in_chain") | (pl.col("exception") & (pl.col("chained") | next_chained))
    )
    status = pl.when(pl.col("kind") == "interrupt").then(pl.lit("cancelled")).otherwise(pl.lit("failed"))
    return _failures(kept.lazy(), weight=pl.col("kind").replace_strict(_WEIGHTS), status=status)


def _quoting_neighbours(
    closers: pl.DataFrame, neighbours: pl.DataFrame, on: list[str], after: bool
) -> pl.DataFrame:
    """``closers`` that quote the record of ``neighbours`` on the line next to them (matched ``on`` these keys
    and the line): the line ``after`` a closer is quoted after its text, the line before it first."""
    if neighbours.is_empty():
        return closers
    offset = -1 if after else 1
    quotes = neighbours.select(*on, line=pl.col("line") + offset, quote=pl.col("text").str.strip_chars())
    joined = closers.join(quotes, on=[*on, "line"], how="left", maintain_order="left")
    text = pl.col("text").str.strip_chars()
    quoted = text + " " + pl.col("quote") if after else pl.col("quote") + " " + text
    return joined.with_columns(
        text=pl.when(pl.col("quote").is_not_null()).then(quoted).otherwise("text")
    ).drop("quote")


def _with_last_errors(closers: pl.DataFrame, last_errors: pl.DataFrame) -> pl.DataFrame:
    """``closers`` whose ``text`` quotes the NCCL last error within LAST_ERROR_WITHIN lines after it (in
    its file), the exception line cut so that the reason holds both."""
    if last_errors.is_empty():
        return closers
    found = closers.join_asof(
        last_errors.select("run", "order", error_line="line", error_file="file", error="text"),
        on="order",
        by="run",
        strategy="forward",
        check_sortedness=False,
    )
    near = (pl.col("error_file") == pl.col("file")) & (
        pl.col("error_line") - pl.col("line") <= LAST_ERROR_WITHIN
    )
    quote = f"; {NCCL_LAST_ERROR} " + pl.col("error").str.strip_chars()
    kept = REASON_CHARS - quote.str.len_chars()
    return found.with_columns(
        text=pl.when(near).then(pl.col("text").str.strip_chars().str.slice(0, kept) + quote).otherwise("text")
    )


#: the ends of an exception line with no message (its class's name and a colon)
_EMPTY_MESSAGE_MARKERS = ("Error:", "Exception:")


#: the kinds of exception a chain's next one may quote as its cause (a rendezvous error's timed-out store)
_QUOTABLE_KINDS = ("exception", "rendezvous")


def _with_chains(closers: pl.DataFrame) -> pl.DataFrame:
    """``closers`` (sorted by run and order) with what their chains make of them, where the exception before
    one has a message (``_queue.Empty`` alone says nothing: the next replaces it, ``chained``): a ``raise
    ... from`` wrapper replaces its cause and quotes it, ``(caused by <its cause>)``; an exception raised
    while handling another is that one's consequence (kind ``HANDLING``: a checkpoint's write failed, then
    its writer's ``__exit__`` did, "unexpected pos"). ``in_chain``: kept for the chain."""
    text, link, is_exception = pl.col("text"), pl.col("link"), pl.col("kind") == "exception"
    before_quotable = pl.col("kind").shift(1).over("run").is_in(_QUOTABLE_KINDS) & text.shift(1).over(
        "run"
    ).str.contains(_WITH_MESSAGE)
    handling = is_exception & before_quotable & (link == RAISED_WHILE_HANDLING)
    caused = is_exception & before_quotable & (link == RAISED_FROM)
    closers = closers.with_columns(
        chained=pl.col("wrapped") | (link.is_not_null() & ~handling),
        handling=handling,
        caused=caused,
        before=text.shift(1).over("run").str.strip_chars(),
    )
    handled = pl.col("handling").shift(-1).over("run").fill_null(False)
    return closers.with_columns(
        in_chain=pl.col("caused") | pl.col("handling") | handled,
        kind=pl.when("handling").then(pl.lit(HANDLING)).otherwise("kind"),
        text=pl.when("caused")
        .then(text.str.strip_chars() + " (caused by " + pl.col("before") + ")")
        .otherwise(text),
    )


def read_launcher_kills(records: pl.LazyFrame) -> Events:
    """The first of a run's ``Killing subprocess N`` lines, DeepSpeed's launcher's line per worker it kills
    after one failed: a cleanup, the failure's evidence is elsewhere; the others repeat it. A first one
    logged as a warning is no event, nor is any after it."""
    first = records.sort("order").group_by("run").agg(pl.col("order", "text").first())
    return _failures(
        first.filter(~pl.col("text").str.contains(WARNING)),
        reason=pl.lit(KILLED_LABEL) + pl.col("text").str.replace(_LEADING_SPACE, ""),
        weight=pl.lit(CLEANUP),
        kind=pl.lit("launcher kill"),
        exception=pl.lit(False),
        chained=pl.lit(False),
    )


def _failures(records: pl.LazyFrame, **columns: pl.Expr) -> Events:
    """Failure events of ``records`` (``FAILURE_EVENT_SCHEMA``: a column of ``columns`` or of ``records``,
    ``status`` failed), each a mark that the family was seen."""
    columns = {"status": pl.lit("failed"), **columns}
    failures = records.select(columns.get(name, pl.col(name)).alias(name) for name in FAILURE_EVENT_SCHEMA)
    failures = failures.cast(FAILURE_EVENT_SCHEMA)
    return Events(failures=[failures.collect()], marks=[marks_of(failures, NAME, SEEN)])


LAUNCHER_KILL = RecordKind(
    family=NAME,
    name="launcher kill",
    test=RecordTest(markers=("Killing subprocess",), unless=_READ_BEFORE_KILLS),
    read=read_launcher_kills,
)

TRACEBACK = Block(
    family=NAME,
    name="traceback",
    opens=RecordTest(markers=TRACEBACK_OPENERS, unless=_READ_BEFORE_TRACEBACKS),
    body=RecordTest(markers=(TRACEBACK_HEADER, BACKEND_RAISED)),
    closes=RecordTest(pattern=f"{EXCEPTION_LINE}|{OOM_LINE}", unless=(BACKEND_RAISED,)),
    renews=RecordTest(pattern=FRAME_OR_HEADER),
    # a traceback whose exception line was none (a custom exception's name, output cut) ends at such a
    # report, which is read
    ends=RecordTest(markers=LAUNCHER_REPORTS),
    max_lines=TRACEBACK_MAX_LINES,
    heralds=RecordTest(markers=(*HARMLESS_TRACEBACKS, *CHAINED_TRACEBACKS), unless=(TRACEBACK_HEADER,)),
    herald_lines=max(HARMLESS_WITHIN, CHAINED_WITHIN),
    hint=TRACEBACK_LINES,
    swallows=True,
    read=read_tracebacks,
)

#: the line after NCCL's ``Last error:`` (NCCL_LAST_ERROR), read with the tracebacks
NCCL_LAST_ERRORS = Block(
    family=NAME,
    name="nccl last error",
    opens=RecordTest(
        markers=(NCCL_LAST_ERROR,), pattern=rf"^{PYTHON_SPACE}*{NCCL_LAST_ERROR}{PYTHON_SPACE}*$"
    ),
    max_lines=1,
    read=read_tracebacks,
)

#: the line after an exception line with no message: a message that starts with a newline (safetensors'
#: ``RuntimeError(f"""\n            Some tensors share memory, ...``) is printed on the lines after the class,
#: read with the tracebacks
EMPTY_MESSAGES = Block(
    family=NAME,
    name="empty message",
    opens=RecordTest(
        markers=_EMPTY_MESSAGE_MARKERS,
        pattern=rf"{_LEADING_SPACE}(?:{_MODULE})?{_EXCEPTION_CLASS}:{PYTHON_SPACE}*$",
        unless=LAUNCHER_EXCEPTIONS,  # torchrun's ChildFailedError: its message a ruler, then the report
    ),
    max_lines=1,
    read=read_tracebacks,
)

FAMILY = Family(
    name=NAME,
    markers=(
        *_READ_BEFORE_KILLS,
        *NCCL_ERRORS,
        "ncclUnhandledCudaError",
        "NCCL communicator was aborted",
        "Killed",
        "signal 9",
        PDSH_SSH_EXIT,
        PDSH_INTERRUPT,
        *CRASH_SIGNAL_DESCRIPTIONS.values(),  # bash's report of a crash
        *_KILLS,
        *PEER_RESETS,
        *TRACEBACK_OPENERS,
        NCCL_LAST_ERROR,
        ": error: ",  # argparse's "<prog>: error: <message>"
        *CONTEXT,
        *GPUS,
        *FULL_FILESYSTEM,
        *SELF_STOPS,
        SUBMITIT_TIMED_OUT,
        *_ACCOUNTING_MARKERS,
        *SSH_REFUSALS,
        *MPI_LAUNCH_FAILURES,
        *INTERPRETER_FAILURES,
        *LAUNCHERS_NOT_FOUND,
        NAME_RESOLUTION,
        ELASTIC_RESTART,
        APPTAINER_FATAL,
        *HEARTBEAT_TIMEOUTS,
    ),
    parse_line=parse_line,
    finish=finish,
    kinds=(LAUNCHER_KILL,),
    blocks=(TRACEBACK, NCCL_LAST_ERRORS, EMPTY_MESSAGES),
    description="Slurm / launcher context: job id, nodes, GPU model, "
    "and failures (OOM, NCCL, time limit, ...)",
    context=True,
)

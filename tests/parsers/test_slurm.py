"""The Slurm/launcher family: context facts and each failure kind, on real message texts."""

import pytest
from logstat.parsers import base, slurm
from logstat.parsers.base import RunBuilder

from tests.parsers.feeding import feed_lines


def feed(*lines: str) -> RunBuilder:
    return feed_lines(slurm.FAMILY, lines)


def test_set_x_echoes_and_slurm_variables():
    run = feed("+ NNODES=16", "+ GPUS_PER_NODE=4", "SLURM_JOB_ID=123456", "+ MICRO_BATCH_SIZE=4")
    assert run.facts == {"nodes": 16, "gpus_per_node": 4, "job_id": "123456"}


def test_a_log_naming_several_jobs_says_so_at_each_later_one():
    # `cat a.out b.out > all.out`, or a chain of jobs appending to one --output; a requeued job keeps its id
    jobs = ["SLURM_JOB_ID=5109", "step", "SLURM_JOB_ID=5109", "SLURM_JOB_ID=5110", "SLURM_JOBID=5111"]
    notes = feed(*jobs).state["parse_errors"]
    said = "several jobs' output in one file (appended or concatenated), one row of their steps"
    assert notes == [f"slurm:4: job 5110 after job 5109: {said}", f"slurm:5: job 5111 after job 5109: {said}"]
    assert "parse_errors" not in feed(*jobs[:3]).state


@pytest.mark.parametrize(
    ("line", "model"),
    [
        (
            "|   0  Tesla V100-SXM2-32GB           On  | 00000000:1A:00.0 Off |                    0 |",
            "V100-SXM2-32GB",
        ),
        ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)", "A100-SXM4-80GB"),
        ("|   0  NVIDIA A100 80GB PCIe          On  |", "A100-PCIE-80GB"),
        ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2)", "H100-SXM"),
        ("|   0  NVIDIA H100 PCIe               On  |", "H100-PCIE"),
        ("GPU 0: NVIDIA H100 NVL (UUID: GPU-3)", "H100-NVL"),
    ],
)
def test_gpu_model_is_normalised(line, model):
    assert feed(line).facts["gpu_model"] == model


def test_truncated_nvidia_smi_name_takes_the_memory_column():
    run = feed(
        "|   0  Tesla V100-SXM2...  On   | 00000000:1A:00.0 Off |                    0 |",
        "| N/A   38C    P0    41W / 300W |      0MiB / 32510MiB |      0%      Default |",
    )
    assert run.facts["gpu_model"] == "V100-SXM2-32GB"


def test_model_size_echo_of_the_seed_script():
    assert feed("Model size: 48B").facts["logged_model_size"] == 48.0


@pytest.mark.parametrize(
    ("lines", "status", "reason_start"),
    [
        (
            [
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity)"
            ],
            "failed",
            "CUDA out of memory: RuntimeError",
        ),
        (
            [
                "[E ProcessGroupNCCL.cpp:828] [Rank 5] Watchdog caught collective operation timeout: "
                "WorkNCCL(SeqNum=4097, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800310 milliseconds"
            ],
            "failed",
            "NCCL timeout/error",
        ),
        (
            [
                "slurmstepd: error: *** JOB 1003 ON r7i4n1 CANCELLED AT 2021-05-26T10:00:03 DUE TO TIME LIMIT ***"
            ],
            "timeout",
            "time limit",
        ),
        (
            ["slurmstepd: error: *** JOB 1004 ON r7i4n1 CANCELLED AT 2021-05-26T09:12:44 ***"],
            "cancelled",
            "slurmstepd",
        ),
        (["srun: error: Node failure on r7i4n2"], "failed", "node failure: srun: error: Node failure"),
        (
            ["/var/spool/slurmd/job1006/slurm_script: line 58: 2186571 Killed   python -u x.py"],
            "failed",
            "killed",
        ),
        (
            ["slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1006.batch."],
            "failed",
            "host out of memory",
        ),
        (["Killing subprocess 22920"], "failed", "killed"),
        # torch elastic's root cause of a worker that crashed without a word of its own
        (["  exitcode  : -11 (pid: 9593)  (SIGSEGV)"], "failed", "crashed: exitcode  : -11"),
        (["  traceback : Signal 6 (SIGABRT) received by PID 9593"], "failed", "crashed: traceback"),
    ],
)
def test_failure_kinds(lines, status, reason_start):
    run = feed(*lines)
    assert run.failure[0] == status
    assert run.failure[1].startswith(reason_start)


@pytest.mark.parametrize(
    ("lines", "reason", "line", "consequence"),
    [
        (  # torch 2.2+'s watchdog ending on a CUDA error (no NCCL error), then libstdc++'s terminate
            [
                "[rank1]:[E1121 22:02:06.412538901 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) "
                "Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illegal memory "
                "access was encountered",
                "terminate called after throwing an instance of 'c10::DistBackendError'",
                "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with "
                "exception: CUDA error: an illegal memory access was encountered",
                "srun: error: r7i4n1: task 1: Aborted (core dumped)",
            ],
            "[E1121 22:02:06.412538901 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
            "Process group watchdog thread terminated with exception: CUDA error",
            1,
            "srun: error: r7i4n1: task 1: Aborted (core dumped)",
        ),
        (  # an uncaught C++ exception outside the watchdog: the cause is what() quotes
            [
                "terminate called after throwing an instance of 'c10::Error'",
                "  what():  CUDA error: device-side assert triggered",
                "srun: error: r7i4n1: task 1: Aborted (core dumped)",
            ],
            "what():  CUDA error: device-side assert triggered",
            2,
            "srun: error: r7i4n1: task 1: Aborted (core dumped)",
        ),
        (  # ROCm's HIP runtime on a GPU the kernels were not built for, before torchrun's SIGABRT report
            [
                '[rank0]:"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"',
                "  traceback : Signal 6 (SIGABRT) received by PID 2840",
            ],
            '"hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"',
            1,
            "crashed: traceback : Signal 6 (SIGABRT) received by PID 2840",
        ),
        (  # llm.c's cudaCheck, its error's string on the next line, before it exits
            [
                "[CUDA ERROR] at file train_gpt2.cu:1068:",
                "out of memory",
                "srun: error: r7i4n1: task 0: Exited with exit code 1",
            ],
            "[CUDA ERROR] at file train_gpt2.cu:1068:",
            1,
            "srun: error: r7i4n1: task 0: Exited with exit code 1",
        ),
        (  # CPython's faulthandler
            ["Fatal Python error: Segmentation fault", "srun: error: r7i4n1: task 5: Segmentation fault"],
            "Fatal Python error: Segmentation fault",
            1,
            "srun: error: r7i4n1: task 5: Segmentation fault",
        ),
        (  # libc++'s terminate handler (macOS, MLX), the message on its line; then the shell's report
            [
                "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] Command "
                "buffer execution failed: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
                "srun: error: mac-01: task 0: Aborted",
            ],
            "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL]",
            1,
            "srun: error: mac-01: task 0: Aborted",
        ),
        (  # an XLA CHECK's fatal line before the abort it causes: the abort is no other cause
            [
                "F0607 10:11:12.123456   48211 tpu_compilation_cache_interface.cc:546] Check failed: "
                "entry->compiled_program != nullptr",
                "Fatal Python error: Aborted",
                "srun: error: t1v-n-0: task 0: Aborted (core dumped)",
            ],
            "F0607 10:11:12.123456   48211 tpu_compilation_cache_interface.cc:546] Check failed: ",
            1,
            "srun: error: t1v-n-0: task 0: Aborted (core dumped)",
        ),
        (  # ROCm's page fault (HSA runtime), then the abort's core dump
            [
                "Memory access fault by GPU node-6 (Agent handle: 0x55d4d9a3c0a0) on address 0x7f1c2a000000. "
                "Reason: Page not present or supervisor privilege.",
                "srun: error: frontier08812: task 27: Aborted (core dumped)",
            ],
            "Memory access fault by GPU node-6 (Agent handle: 0x55d4d9a3c0a0) on address 0x7f1c2a000000.",
            1,
            "srun: error: frontier08812: task 27: Aborted (core dumped)",
        ),
    ],
)
def test_native_ends_are_causes_ahead_of_srun(lines, reason, line, consequence):
    run = feed(*lines)
    assert (run.failure[0], run.failure[1][: len(reason)], run.failure[2]) == ("failed", reason, line)
    assert [text for *_, text in run.consequences] == [consequence]


@pytest.mark.parametrize(
    ("summary", "status", "reason"),
    [
        ("State: TIMEOUT (exit code 0)", "timeout", "time limit: State: TIMEOUT (exit code 0)"),  # seff
        ("          State: CANCELLED", "cancelled", "State: CANCELLED"),  # jobstats
        ("State: PREEMPTED (exit code 0)", "cancelled", "preempted: State: PREEMPTED (exit code 0)"),
        # a job script's sacct of its own steps: a step its memory limit ended
        ("       8812345.0        OUT_OF_MEMORY      0:125 00:28:22", "failed", "host out of memory: "),
        ("State: FAILED (exit code 1)", None, None),  # a non-zero exit code: no word of why
        ("State: COMPLETED (exit code 0)", None, None),
    ],
)
def test_slurms_accounting_of_a_jobs_end_is_its_word_where_the_log_has_none(summary, status, reason):
    run = feed("step 10 | loss 9.1", "Job ID: 8812345", summary)
    if status is None:
        assert run.failure is None
        return
    assert (run.failure[0], run.failure[1][: len(reason)], run.failure[2]) == (status, reason, 3)
    # the run's own cause outweighs the summary
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert feed(oom, summary).failure[1] == f"CUDA out of memory: {oom}"


def test_cloud_launchers_words_on_how_a_job_ended():
    # SkyPilot's at its job's end; Modal's on a function past its timeout
    assert feed("step 10 | loss 9.1", "✓ Job finished (status: CANCELLED).").failure[:2] == (
        "cancelled",
        "✓ Job finished (status: CANCELLED).",
    )
    timeout = "modal.exception.FunctionTimeoutError: Task's current input in-01JA hit its timeout of 3600s"
    assert feed("step 10 | loss 9.1", timeout).failure[:2] == ("timeout", f"time limit: {timeout}")
    assert feed("step 10 | loss 9.1", "✓ Job finished (status: SUCCEEDED).").failure is None
    # SkyPilot's managed job that found no resources again; a pod the kubelet evicted
    for end in (
        "Managed job finished: 12 (status: FAILED_NO_RESOURCE).",
        "6m12s  Warning  Evicted  pod/llama-ft-master-0  The node was low on resource: ephemeral-storage. "
        "Threshold quantity: 19236596271, available: 18113904Ki.",
    ):
        assert feed("step 10 | loss 9.1", end).failure[:2] == ("failed", end)
    # dstack's and Kubernetes' time limits: the SIGTERM torch's agent got before them is their doing
    sigterm = "W0320 06:06:48.018000 512 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal"
    for limit in (
        "Terminated (Max duration exceeded)",
        "  Warning  DeadlineExceeded  2m  job-controller  Job was active longer than specified deadline",
    ):
        assert feed("step 10 | loss 9.1", sigterm, limit).failure[:2] == (
            "timeout",
            f"time limit: {limit.strip()}",
        )
    # Ray Train's wrapper of a worker's failure is a report: the worker's own error is the cause
    watchdog = (
        "[Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211) ran for 1800095 ms"
    )
    wrapper = "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed."
    run = feed(watchdog, "Traceback (most recent call last):", '  File "driver.py", line 3', wrapper)
    assert run.failure[1].endswith(watchdog)


def test_pdsh_losing_a_node_is_the_cause_and_a_remote_commands_exit_a_report():
    # DeepSpeed's multi-node launcher over pdsh: ssh's own failure (255) lost worker-3; the other ranks'
    # NCCL errors follow from it. Another code is the remote command's exit, which its lines explain.
    lost = "pdsh@worker-0: worker-3: ssh exited with exit code 255"
    peer = (
        "worker-1: [rank14]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 14] NCCL watchdog thread terminated with "
        "exception: NCCL error: remote process exited or there was a network error, NCCL version 2.20.5"
    )
    run = feed(peer, lost)
    assert run.failure == ("failed", f"node failure: {lost}", 2)
    exited = feed("torch.OutOfMemoryError: CUDA out of memory.", lost.replace("255", "1"))
    assert exited.failure[1].startswith("CUDA out of memory: ")
    assert [text for *_, text in exited.consequences] == [
        "pdsh@worker-0: worker-3: ssh exited with exit code 1"
    ]


@pytest.mark.parametrize(
    "why",
    [
        "worker-3: ssh: connect to host worker-3 port 22: No route to host",
        "ssh: Could not resolve hostname worker-3: Name or service not known",
    ],
)
def test_ssh_saying_why_it_lost_a_node_is_the_cause_before_pdshs_exit_code(why):
    lost = "pdsh@worker-0: worker-3: ssh exited with exit code 255"
    timeout = "worker-0: torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients."
    run = feed(why, lost, timeout)
    assert run.failure == (
        "failed",
        f"node failure: {why.removeprefix('worker-3: ')}",
        1,
    )  # pdsh prefix stripped


def test_traceback_reason_is_the_exception_that_another_was_raised_while_handling():
    run = feed(
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "KeyError: 'a'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "    raise ValueError('hidden_size must be divisible by heads')",
        "ValueError: hidden_size must be divisible by heads",
    )
    assert run.failure == ("failed", "KeyError: 'a'", 3)
    assert run.consequence_lines() == ["lines.log:10: ValueError: hidden_size must be divisible by heads"]


def test_cancel_outranks_an_earlier_failure():
    run = feed(
        "srun: error: task 3: Exited with exit code 1",
        "slurmstepd: error: *** JOB 1 ON n CANCELLED AT 2021 ***",
    )
    assert run.failure[0] == "cancelled"


def test_the_launcher_stopping_the_other_workers_is_no_crash():
    run = feed(
        "  exitcode  : -15 (pid: 2459)  (SIGTERM)", "  traceback : Signal 15 (SIGTERM) received by PID 2459"
    )
    assert run.failure is None


def test_ordinary_nccl_info_is_not_a_failure():
    assert feed("r7i4n1:1234:1234 [0] NCCL INFO Using network IB").failure is None


def test_the_launchers_first_kill_line_is_the_one_read():
    """DeepSpeed's launcher prints a line per worker it kills (bare, or logged at INFO): the first counts."""
    run = feed("Killing subprocess 22920", "Killing subprocess 22921", "Killing subprocess 22922")
    assert run.failure == ("failed", "killed: Killing subprocess 22920", 1)
    assert run.families_seen["slurm"] == 1
    later = feed("Killing subprocess 1", "Killing subprocess 2", "RuntimeError: CUDA out of memory. Tried")
    assert later.failure[1].startswith("CUDA out of memory")  # a later line says how the worker failed
    earlier = feed(
        "srun: error: task 3: Exited with exit code 1",
        "[2021-05-26 10:00:00,000] [INFO] [launch.py:253:sigkill_handler] Killing subprocess 1",
        "Killing subprocess 2",
    )
    # srun's report outranks the launcher's cleanup, which is kept once as a consequence
    assert earlier.failure == ("failed", "srun: error: task 3: Exited with exit code 1", 1)
    assert earlier.families_seen["slurm"] == 2
    assert earlier.consequence_lines() == [
        "lines.log:2: killed: [INFO] [launch.py:253:sigkill_handler] Killing subprocess 1"
    ]


def test_a_first_kill_line_logged_as_a_warning_is_no_failure_nor_the_kills_after_it():
    assert feed("[WARNING] Killing subprocess 1", "Killing subprocess 2").failure is None


def test_a_kill_line_with_other_evidence_or_inside_a_traceback_is_read_in_full():
    oom = feed("Killing subprocess 1 after CUDA out of memory")
    assert oom.failure[1].startswith("CUDA out of memory")
    in_traceback = feed("Traceback (most recent call last):", "Killing subprocess 7", "ValueError: bad")
    assert in_traceback.failure == ("failed", "ValueError: bad", 3)
    assert in_traceback.consequences == []


def test_traceback_frames_are_skipped_and_the_exception_line_read():
    run = feed(
        "Traceback (most recent call last):",
        '  File "/x/run.py", line 1019, in run',
        "    elastic_launch(",
        "           ^^^^^^^",
        "ValueError",
    )
    assert run.failure == ("failed", "ValueError", 5)


#: LSF's job summary, appended to the job's output file (bsub -o), of a job its run limit ended
LSF_SUMMARY = [
    "------------------------------------------------------------",
    "Sender: LSF System <lsfadmin@batch3>",
    "Subject: Job 123456: <gpt> in cluster <summit> Exited",
    "",
    "The output (if any) is above this job summary.",
    "",
    "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
    "Exited with exit code 140.",
    "",
    "Resource usage summary:",
]


@pytest.mark.parametrize(
    ("term", "status", "reason"),
    [
        (
            "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
            "timeout",
            "time limit: TERM_RUNLIMIT",
        ),
        (
            "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
            "failed",
            "host out of memory: TERM_MEMLIMIT",
        ),
        ("TERM_OWNER: job killed by owner.", "cancelled", "TERM_OWNER"),
        ("TERM_PREEMPT: job killed after preemption.", "cancelled", "preempted: TERM_PREEMPT"),
    ],
)
def test_lsf_job_summary_says_why_the_job_ended(term, status, reason):
    run = feed(*[term if line.startswith("TERM_") else line for line in LSF_SUMMARY])
    assert (run.failure[0], run.failure[1][: len(reason)], run.failure[2]) == (status, reason, 7)
    assert run.consequence_lines() == ["lines.log:8: Exited with exit code 140."]


def test_a_ray_job_stopped_by_request_was_cancelled():
    # ray job submit's CLI ends with the job's end: succeeded, failed, or stopped by `ray job stop`
    stopped = "Job 'raysubmit_W3xYq7LkRnP2ZbV5' was stopped"
    run = feed("{'loss': 1.2, 'learning_rate': 2e-05, 'epoch': 0.4}", "-" * 43, stopped, "-" * 43)
    assert run.failure == ("cancelled", stopped, 3)


def test_lsf_exit_code_alone_is_a_report_and_success_a_clean_exit():
    run = feed(
        "Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: bad", LSF_SUMMARY[7]
    )
    assert run.failure[1] == "ValueError: bad" and run.consequence_lines() == [
        "lines.log:4: Exited with exit code 140."
    ]
    run = feed(*LSF_SUMMARY[:6], "Successfully completed.")
    assert run.failure is None and run.clean_exit[:2] == ("Successfully completed.", 7)


@pytest.mark.parametrize(
    ("line", "status", "label"),
    [
        # PBS's note in the job's error file
        ("=>> PBS: job killed: walltime 7210 exceeded limit 7200", "timeout", "time limit: "),
        ("=>> PBS: job killed: mem 52428800kb exceeded limit 41943040kb", "failed", "host out of memory: "),
        ("=>> PBS: job killed: ncpus 37.12 exceeded limit 36 (sum)", "failed", ""),
        # Flux's job exception
        (
            "flux-job: job.exception type=timeout severity=0 resource allocation expired",
            "timeout",
            "time limit: ",
        ),
        ("flux-job: job.exception type=cancel severity=0 ", "cancelled", ""),
    ],
)
def test_a_batch_systems_end_of_a_job_says_why_it_ended(line, status, label):
    run = feed(" iteration       10/    1000 | elapsed time per iteration (ms): 1234.5 |", line)
    assert run.failure == (status, label + line.strip(), 2)


@pytest.mark.parametrize(
    "error",
    [
        "Could not override 'model.optim.sched.warmup_step'.",
        "Could not append to config. An item is already at 'trainer.max_steps'.",
        "Could not delete from config. 'model.foo' does not exist.",
        "Error merging override model.tokenizer=gpt2",
    ],
)
def test_hydras_config_error_without_a_traceback_is_the_cause(error):
    # hydra's run_and_report: the exception's message, its OmegaConf cause, the hint; then srun's report
    run = feed(
        error,
        "Key 'warmup_step' is not in struct",
        "    full_key: model.optim.sched.warmup_step",
        "",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
        "srun: error: gpu-a041: tasks 0-7: Exited with exit code 1",
    )
    assert run.failure == ("failed", error, 1)
    # only at a line's start: a log quoting the words is no failure
    assert feed(f"INFO retrying: {error}").failure is None


#: the command Triton's build (triton/runtime/build.py ``_build``) ran, as subprocess reports it
GCC_COMMAND = "['/usr/bin/gcc', '/tmp/tmpw1/main.c', '-O3', '-shared', '-fPIC', '-o', '/tmp/tmpw1/cuda_utils.so', '-lcuda']"
BUILD_TRACEBACK = [
    "[rank2]: Traceback (most recent call last):",
    '[rank2]:   File "/usr/lib/python3.11/subprocess.py", line 413, in check_call',
    "[rank2]:     raise CalledProcessError(retcode, cmd)",
    "[rank2]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
    f"[rank2]: CalledProcessError: Command '{GCC_COMMAND}' returned non-zero exit status 1.",
]


@pytest.mark.parametrize(
    ("error", "exception"),
    [
        # inductor's Triton build on a node without libcuda.so's development link
        ("/usr/bin/ld: cannot find -lcuda: No such file or directory", BUILD_TRACEBACK),
        # a C++ extension's ninja build (torch.utils.cpp_extension) on a node without Python's headers
        (
            "/tmp/build/fused_adam/multi_tensor_adam.cpp:3:10: fatal error: Python.h: No such file or directory",
            [*BUILD_TRACEBACK[:3], "[rank2]: RuntimeError: Error building extension 'fused_adam'"],
        ),
        ("nvcc fatal   : Unsupported gpu architecture 'compute_90'", BUILD_TRACEBACK),
    ],
)
def test_a_toolchains_error_above_a_failed_builds_traceback_is_its_cause(error, exception):
    run = feed(
        error,
        "collect2: error: ld returned 1 exit status",
        *exception,
        "srun: error: gpu-a17: task 2: Exited with exit code 1",
    )
    assert run.failure == ("failed", error, 1)
    assert any(exception[3].removeprefix("[rank2]: ") in line for line in run.consequence_lines())


def test_a_toolchains_error_no_failed_build_followed_is_no_failure():
    # DeepSpeed's libaio probe before 0.6 let the linker print; the run went on
    probe = "/usr/bin/ld: cannot find -laio: No such file or directory"
    assert (
        feed(probe, " iteration       10/    1000 | elapsed time per iteration (ms): 1234.5 |").failure
        is None
    )
    # an exception that is no build's failure has its own cause
    run = feed(probe, *BUILD_TRACEBACK[:3], "[rank2]: KeyError: 'input_ids'")
    assert run.failure == ("failed", "KeyError: 'input_ids'", 5)


#: torch.save of a checkpoint on a full filesystem: the zip writer fails without saying why, then its close
SAVE_TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/home/u/nanoGPT/train.py", line 296, in <module>',
    "    torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))",
    "RuntimeError: [enforce fail at inline_container.cc:764] . PytorchStreamWriter failed writing file data/41: file write failed",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/home/u/nanoGPT/train.py", line 296, in <module>',
    "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1468012160 vs 1468012048",
]


@pytest.mark.parametrize(
    "full",
    [
        "tee: /home/u/nanoGPT/out-owt/train_log.txt: Disk quota exceeded",
        "cp: error writing '/scratch/u/ckpt/latest.pt': No space left on device",
    ],
)
def test_a_full_filesystems_report_above_a_failed_write_is_its_cause(full):
    run = feed("iter 1240: loss 3.1421, time 3950.12ms", full, *SAVE_TRACEBACK)
    assert run.failure == ("failed", full, 2)
    assert any("file write failed" in line for line in run.consequence_lines())


def test_a_full_filesystems_report_explains_no_other_failure():
    full = "tee: /home/u/train_log.txt: Disk quota exceeded"
    assert feed(full, "iter 10: loss 3.1421, time 3950.12ms").failure is None
    run = feed(full, *SAVE_TRACEBACK[:3], "KeyError: 'input_ids'")
    assert run.failure == ("failed", "KeyError: 'input_ids'", 5)
    # Python's OSError says it itself; a quoted message in a log line is no program's report
    oserror = "OSError: [Errno 122] Disk quota exceeded"
    assert feed(*SAVE_TRACEBACK[:3], oserror).failure == ("failed", oserror, 4)
    assert (
        feed("INFO: retrying after: No space left on device", *SAVE_TRACEBACK)
        .failure[1]
        .startswith("RuntimeError")
    )


CHILD_FAILED = [
    "[2024-05-02 01:44:13,110] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1)"
    " local_rank: 0 (pid: 30111) of binary: /opt/conda/bin/python",
    "Traceback (most recent call last):",
    '  File "/opt/conda/bin/torchrun", line 33, in <module>',
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
]
PEERS_TIMED_OUT = (
    "[rank1]:[E1112 03:18:44.131201 88120 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=210681, OpType=ALLREDUCE, NumelIn=124475904, NumelOut=124475904, "
    "Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
)


@pytest.mark.parametrize(
    "stop",
    [
        "Loss is nan, stopping training",  # MAE's, DeiT's engine before sys.exit(1)
        "loss diverged at iter 4213 (loss 9.8712 > 3x running mean 3.1804), stopping",
        "loss diverged (loss=nan at step 820), stopping",
        # a Hydra app's logger
        "[2024-05-03 11:31:01,756][__main__][ERROR] - Non-finite loss (nan) at step 110, lr=0.01; aborting",
        "loss is inf at step 3000, exiting",
    ],
)
def test_a_script_stopping_itself_on_its_loss_is_the_cause_of_what_follows(stop):
    run = feed("iter 4210: loss 9.1, time 310.2ms, mfu 31.5%", stop, PEERS_TIMED_OUT, *CHILD_FAILED)
    assert run.failure == ("failed", stop, 2)


@pytest.mark.parametrize(
    "line",
    [
        "Validation loss did not improve for 3 evaluations (patience 3): stopping training",  # a planned end
        '    "tuner_early_stopping": 5,',
        "Stopping workers after the loss spike at step 100 was skipped",  # no stop of its own
    ],
)
def test_an_early_stop_or_a_word_is_no_stop_on_the_loss(line):
    failure = feed(line).failure
    assert failure is None or failure[1] != line


def test_a_slurm_commands_error_in_a_job_is_no_refused_command_line():
    # Lightning's auto-requeue runs scontrol requeue on SIGUSR1; refused, the job then meets its limit
    refused = "scontrol: error: Requested operation is presently disabled for job 881300"
    limit = (
        "slurmstepd: error: *** JOB 881300 ON gpu-a-07 CANCELLED AT 2024-05-06T10:00:02 DUE TO TIME LIMIT ***"
    )
    run = feed(
        " iteration       10/    1000 |",
        refused,
        "Requeuing SLURM job 881300 failed with error code 1",
        limit,
    )
    assert run.failure == ("timeout", f"time limit: {limit}", 4)
    usage = "pretrain_gpt.py: error: unrecognized arguments: --use-flash-attn-v2"
    assert feed(usage).failure == ("failed", usage, 1)


def test_submitits_word_that_its_job_timed_out_is_the_time_limit():
    # submitit/core/job_environment.py, on Slurm's signal ahead of the limit; out of requeues, it raises
    timed_out = "submitit INFO (2024-05-06 09:09:25,693) - Job has timed out. Ran 119 minutes out of requested 120 minutes."
    uncompleted = (
        "submitit.core.utils.UncompletedJobError: Job not requeued because: timed-out too many times."
    )
    frame = '  File "/opt/conda/lib/python3.10/site-packages/submitit/core/submission.py", line 72, in process_job'
    run = feed(
        " iteration       10/    1000 |", timed_out, "Traceback (most recent call last):", frame, uncompleted
    )
    assert run.failure == ("timeout", f"time limit: {timed_out}", 2)


RENDEZVOUS_TIMEOUT = [
    "0: Traceback (most recent call last):",
    '0:   File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/api.py", line 180',
    "0: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
]
STORE_TIMEOUT = [
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store',
    "torch.distributed.DistNetworkError: The client socket has timed out after 1800s while trying to connect to "
    "(gpu-node-17.cluster.internal, 29500).",
]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        # the script's name mistyped: CPython's "%ls: can't open file %R: [Errno %d] %s"; its "python3: " is
        # read as a host's prefix, as pdsh's "node3: "
        (
            "python3: can't open file '/home/u/llm/trian.py': [Errno 2] No such file or directory",
            "can't open file",
        ),
        (
            "/usr/bin/python3.11: can't open file '/w/x.py': [Errno 13] Permission denied",
            "/usr/bin/python3.11: ",
        ),
        ("python: No module named deepspeed", "No module named deepspeed"),
        # the launcher itself not found by the job script's shell (exit status 127)
        (
            "/var/spool/slurmd/job700001/slurm_script: line 23: torchrun: command not found",
            "torchrun: command not found",
        ),
    ],
)
def test_an_interpreter_that_could_not_start_its_program_is_the_cause(line, message):
    run = feed("Loading python3/3.11.7", line, "Exit Status: 2")
    assert run.failure[0] == "failed" and message in run.failure[1] and run.failure[2] == 2


@pytest.mark.parametrize(
    ("cause", "then"),
    [
        # a node whose python could not start: the others wait at the rendezvous until it times out
        (
            "3: /opt/conda/bin/python: Error while finding module specification for 'torch.distributed.run' "
            "(ModuleNotFoundError: No module named 'torch')",
            RENDEZVOUS_TIMEOUT,
        ),
        # c10d's warning of a name that does not resolve, before its connection times out
        (
            "[W socket.cpp:663] [c10d] The IPv4 network addresses of (gpu-node-17.cluster.internal, 29500) cannot "
            "be retrieved (gai error: -2 - Name or service not known).",
            STORE_TIMEOUT,
        ),
    ],
)
def test_what_kept_a_peer_away_is_the_cause_of_the_rendezvous_timeout(cause, then):
    assert cause.removeprefix("3: ") in feed(cause, *then).failure[1]
    if "gai error" not in cause:  # another node's file may come first; c10d warns before its own timeout
        assert cause.removeprefix("3: ") in feed(*then, cause).failure[1]
    # alone, the timeout is the reason
    assert feed(*then).failure[1] == then[-1].removeprefix("0: ")


def test_a_rendezvous_error_raised_from_its_stores_timeout_quotes_it():
    wrapper = (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
        "has failed. See inner exception for details."
    )
    run = feed(
        *STORE_TIMEOUT,
        "",
        f"{slurm.RAISED_FROM} of the following exception:",
        "",
        *STORE_TIMEOUT[:2],
        wrapper,
    )
    assert run.failure[1] == f"{wrapper} (caused by {STORE_TIMEOUT[-1]})"[: base.REASON_CHARS]


@pytest.mark.parametrize(
    ("cause", "then"),
    [
        # a node up, whose sshd refuses the launcher's key: pdsh's exit 255 follows
        (
            "trn-d: ml@trn-d: Permission denied (publickey).",
            "pdsh@trn-a: trn-d: ssh exited with exit code 255",
        ),
        # Open MPI: a node's shell without orted; fewer slots than ranks
        (
            "bash: orted: command not found",
            "ORTE does not know how to route a message to the specified daemon",
        ),
        ("There are not enough slots available in the system to satisfy the 64", "slots that were requested"),
    ],
)
def test_a_launch_that_could_not_start_its_ranks_failed_of_it(cause, then):
    run = feed("+ deepspeed --hostfile hosts pretrain_gpt.py --deepspeed", cause, then)
    assert run.failure == ("failed", cause, 2)


def test_a_node_slurm_found_failed_explains_its_peers_network_errors():
    # the ranks talking to the dead node print their transport's errors before Slurm's verdict comes
    ib = (
        "node-14:81204:81904 [4] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "10.20.0.24<35617> with error 12, opcode 0, len 0, vendor err 129 (Send)"
    )
    run = feed(ib, "srun: error: Node failure on node-17")
    assert run.failure == ("failed", "node failure: srun: error: Node failure on node-17", 2)
    assert run.consequence_lines()[0].endswith(ib)


def test_the_rank_monitors_missed_heartbeat_is_the_cause_of_its_kill_and_its_config_no_kill():
    monitor = "[2025-02-11 05:32:32,778] [ERROR] [RankMonitorServer@nid002341:2254]"
    config = (
        "[2025-02-11 02:47:30,916] [INFO] [ft_launcher@nid002341:2251] Using fault tolerance config: "
        "FaultToleranceConfig(rank_heartbeat_timeout=900.0, rank_termination_signal=<Signals.SIGKILL: 9>)"
    )
    hung = f"{monitor} Did not get subsequent heartbeat. Waited 900.00 seconds."
    kill = f"{monitor} Terminating rank 3 (pid 118243) with signal SIGKILL"
    assert feed(config).failure is None
    run = feed(config, hung, kill)
    assert run.failure == ("failed", hung.split("] ", 1)[1], 2)  # its timestamp dropped
    assert [text for *_, text in run.consequences] == [f"killed: {kill.split('] ', 1)[1]}"]


def test_apptainers_fatal_error_is_why_the_container_did_not_run():
    fatal = (
        "FATAL:   container creation failed: mount hook function failure: mount /pfs/lustrep4/projappl/"
        "project_462000777->/pfs/lustrep4/projappl/project_462000777 error: while mounting: doesn't exist"
    )
    run = feed(fatal, "srun: error: nid005210: tasks 0-7: Exited with exit code 255")
    assert run.failure == ("failed", f"container: {fatal}", 1)
    # a server's "FATAL:  " (two spaces) or a word inside a line is not Apptainer's
    assert feed("FATAL:  password authentication failed for user").failure is None


def test_the_enroot_log_pyxis_relays_says_why_the_container_did_not_start():
    lines = [
        "slurmstepd: error: pyxis: child 2417763 failed with error code: 1",
        "slurmstepd: error: pyxis: failed to import docker image",
        "slurmstepd: error: pyxis: printing enroot log file:",
        "slurmstepd: error: pyxis:     [INFO] Creating squashfs filesystem...",
        "slurmstepd: error: pyxis:     Write failed because No space left on device",
        "slurmstepd: error: pyxis:     FATAL ERROR: Failed to write to output filesystem",
        "slurmstepd: error: pyxis: couldn't start container",
        "srun: error: dgx-031: tasks 0-7: Exited with exit code 1",
    ]
    run = feed(*lines)
    assert run.failure == ("failed", f"container: {lines[4]}", 5)
    # without enroot's log, pyxis's own word that the container did not start
    assert feed(lines[1], lines[-1]).failure == ("failed", f"container: {lines[1]}", 1)

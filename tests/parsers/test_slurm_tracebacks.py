"""Tracebacks are the Slurm family's ``TRACEBACK`` block, read column-wise: a header opens one (Python's
``Exception ignored in`` or a chained exception's line heralds it), frames and other ranks' headers keep
it open, its exception or OOM line ends it, and the family's other records inside are not read. Hundreds
of ranks' interleaved tracebacks never reach Python; the results are the same whatever the batches."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from logstat.parsers import slurm, source
from logstat.parsers.base import CAUSE, EFFECT, REPORT, RunBuilder
from logstat.parsers.reader import RunFiles, read_settled

from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_file, feed_lines

MPIRUN_384_RANKS = FIXTURES / "failures" / "mpirun-384-ranks-3016.out.gz"
HEADER = "Traceback (most recent call last):"
FRAME = '  File "pretrain_gpt.py", line 149, in <module>'


def feed(*lines: str) -> RunBuilder:
    return feed_lines(slurm.FAMILY, lines)


def test_the_384_ranks_tracebacks_never_reach_python():
    """384 ranks' interleaved tracebacks (384 headers, 1920 frames, their exception lines): Python reads
    only mpirun's two summary lines; the reason is the first rank's exception."""
    handed = []

    def counting(text: str, lineno: int, run: RunBuilder) -> None:
        handed.append(lineno)
        slurm.parse_line(text, lineno, run)

    run = feed_file(replace(slurm.FAMILY, parse_line=counting), MPIRUN_384_RANKS)
    assert handed == [4995, 4999]
    assert run.failure == (
        "failed",
        "FileNotFoundError: [Errno 2] No such file or directory: '/gpfs/oscar-en/shard_0263_text_document.idx'",
        22,
    )
    assert run.consequence_lines() == [
        "mpirun-384-ranks-3016.out.gz:4995: Primary job  terminated normally, but 1 process returned"
    ]


@pytest.mark.parametrize(
    ("line", "weight", "kind"),
    [
        ("ValueError: bad value", CAUSE, "exception"),
        # DeepSpeed's loss scaler at its minimum; a data iterator run dry
        ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.", CAUSE, "exception"),
        ("StopIteration", CAUSE, "exception"),
        ("  torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970 ", CAUSE, "exception"),
        ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", REPORT, "launcher"),
        ("subprocess.CalledProcessError: Command '['python']' returned non-zero exit status 1.", REPORT, "launcher"),
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 1 got signal: 15", EFFECT, "signal"),
        ("RuntimeError: [pair.cc:534] Connection reset by peer [10.0.0.2]:1234", REPORT, "peer"),
    ],
)  # fmt: skip
def test_an_exception_line_ends_a_traceback_weighed_by_what_it_says(line, weight, kind):
    run = feed(HEADER, FRAME, "    main()", line)
    assert run.failure == ("failed", line.strip(), 4)
    assert (run.failure_weight, run.failure_kind) == (weight, kind)


@pytest.mark.parametrize(
    "line",
    [
        # filelock's Timeout (its __str__; as the installed filelock prints it on a held lock), torch._dynamo's
        # exc.Unsupported, triton's runtime/errors.py OutOfResources, numpy's _ArrayMemoryError
        "filelock._core._errors.Timeout: The file lock '/root/.cache/huggingface/x.lock' could not be acquired.",
        "torch._dynamo.exc.Unsupported: call_function BuiltinVariable(setattr) [TensorVariable()] {}",
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware "
        "limit: 101376. Reducing block sizes or `num_stages` may help.",
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8.00 GiB for an array with shape (1024,)",
        "StallDetected: no step for 600 s",  # a class of the script itself (__main__'s: no module)
    ],
)
def test_an_exception_line_ends_a_traceback_whatever_its_class_is_called(line):
    """Python's structure, not the class's name: the first record after the indented frames, a class
    (qualified by its module) and its message, ends the traceback; srun's report after it is read."""
    exit_code = "srun: error: r7i4n1: task 3: Exited with exit code 1"
    run = feed(*(f"[rank3]: {text}" for text in (HEADER, FRAME, "    main()", line)), exit_code)
    assert (run.failure, run.failure_kind) == (("failed", line, 4), "exception")
    assert run.consequence_lines() == [f"lines.log:5: {exit_code}"]


def test_open_mpi_output_tags_are_prefixes():
    tag = "[1,5]<stderr>:"
    run = feed(tag + HEADER, tag + FRAME, tag + "ValueError: corrupt shard /data/shard_00417.bin")
    assert run.failure == ("failed", "ValueError: corrupt shard /data/shard_00417.bin", 3)


@pytest.mark.parametrize(
    "prefix",
    [
        "2024-03-02T10:11:12.123456789Z ",  # docker logs -t, kubectl logs --timestamps (RFC 3339, UTC)
        "[2024-03-02 10:11:12] ",  # a bracketed time (moreutils' ts '[%Y-%m-%d %H:%M:%S]')
        "[13] ",  # MPICH's / Intel MPI's mpiexec -prepend-rank
        "[rank 13] ",  # a wrapper's: sed "s/^/[rank $RANK] /"
        "2024-03-02T10:11:12.123456789Z [13] ",  # stacked
    ],
)
def test_a_traceback_under_a_time_or_rank_prefix_is_read(prefix):
    exception = "ValueError: sequence length 4097 exceeds max_position_embeddings 4096"
    exit_code = "srun: error: gpu-node03: task 13: Exited with exit code 1"
    run = feed(*(prefix + text for text in (HEADER, FRAME, "    main()", exception)), exit_code)
    assert run.failure == ("failed", exception, 4)
    assert run.consequence_lines() == [f"lines.log:5: {exit_code}"]


def test_a_keyboard_interrupt_cancelled_the_run_unless_a_failure_came_first():
    interrupted = feed(HEADER, FRAME, "    main()", "KeyboardInterrupt")
    assert interrupted.failure == ("cancelled", "KeyboardInterrupt", 4)
    assert (interrupted.failure_weight, interrupted.failure_kind) == (CAUSE, "interrupt")
    failed_first = feed(HEADER, FRAME, "ValueError: bad value", HEADER, FRAME, "KeyboardInterrupt")
    assert failed_first.failure == ("failed", "ValueError: bad value", 3)


@pytest.mark.parametrize(
    "line",
    [
        "socket.timeout: timed out",
        "ValueError bad value",  # no colon after the name
        "raise ValueError: no",  # a space before the first colon
        "error: lower case",
        # a tool's word before its colon, logging's level, bash's word on a killed command
        "slurmstepd: error: couldn't chdir to `/scratch/x': No such file or directory: going to /tmp instead",
        "INFO:root:saving checkpoint",
        "WARNING: the lock is held",
        "Terminated",
    ],
)
def test_other_lines_do_not_end_a_traceback(line):
    assert feed(HEADER, FRAME, line).failure is None
    # the traceback is still open: the family's lines inside are not read, but the launcher's last report
    # (every worker gone) ends it
    assert feed(HEADER, FRAME, line, "srun: error: r1: task 0: Exited with exit code 1").failure is None
    report = "[ERROR] [launch.py:322:sigkill_handler] ['python', 'train.py'] exits with return code = 1"
    assert feed(HEADER, FRAME, line, report).failure == ("failed", f"worker failed: {report}", 4)


def test_an_oom_line_ends_a_traceback_as_an_oom_and_a_frames_source_does_not():
    run = feed(HEADER, FRAME, "    raise torch.OutOfMemoryError(", "RuntimeError: CUDA out of memory. Tried")
    assert run.failure == ("failed", "CUDA out of memory: RuntimeError: CUDA out of memory. Tried", 4)
    assert run.failure_kind == "cuda oom"
    # a warning that names an OOM ends the traceback without a failure; what follows is read again
    warned = feed(HEADER, FRAME, "[W stage3.py] CUDA out of memory on a retry", "Killed")
    assert warned.failure == ("failed", "killed: Killed", 4)


def test_a_compiler_backends_failure_quotes_the_exception_the_backend_raised():
    # torch/_dynamo/exc.py: BackendCompilerFailed's message is the backend's name, then the exception
    backend = "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"
    inner = (
        "RuntimeError: Found Tesla P100-PCIE-16GB which is too old to be supported by the triton GPU compiler"
    )
    run = feed(HEADER, FRAME, backend, inner, "", 'Set TORCH_LOGS="+dynamo" and TORCHDYNAMO_VERBOSE=1')
    assert run.failure == ("failed", f"{backend} {inner}", 4)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert feed(HEADER, FRAME, backend, oom).failure == ("failed", f"CUDA out of memory: {backend} {oom}", 4)


def test_an_exception_whose_message_starts_on_its_next_line_quotes_that_line():
    # safetensors: RuntimeError(f"""\n            Some tensors share memory, ...""") prints the class alone first
    message = "Some tensors share memory, this will lead to duplicate memory on disk: [{'lm_head.weight'}]."
    run = feed(HEADER, FRAME, "RuntimeError: ", f"            {message}", "            A potential way")
    assert run.failure == ("failed", f"RuntimeError: {message}", 3)
    # a message on its own line stays the line's; an empty line after the class adds nothing
    said = feed(HEADER, FRAME, "ValueError: bad shard", "next")
    assert said.failure == ("failed", "ValueError: bad shard", 3)
    assert feed(HEADER, FRAME, "mylib.FailedError:", "").failure == ("failed", "mylib.FailedError:", 3)


def test_frames_keep_a_traceback_open_each_within_the_window_of_the_one_before():
    gap = ["output"] * (slurm.TRACEBACK_MAX_LINES - 1)
    run = feed(HEADER, *gap, FRAME, *gap, "[rank3]: " + HEADER, *gap, "KeyError: 'x'")
    assert run.failure == ("failed", "KeyError: 'x'", 3 * slurm.TRACEBACK_MAX_LINES + 1)
    given_up = feed(HEADER, *gap, "output", FRAME, "KeyError: 'x'", "srun: error: r1: task 0: Killed")
    assert given_up.failure == ("failed", "srun: error: r1: task 0: Killed", slurm.TRACEBACK_MAX_LINES + 4)


def test_a_traceback_ends_with_its_file(tmp_path):
    """A job's .out and .err are one run: a traceback the .out leaves open does not hide the .err's lines."""
    out, err = tmp_path / "job-5.out", tmp_path / "job-5.err"
    out.write_text(f"{HEADER}\n{FRAME}\n")
    err.write_text("srun: error: r1: task 0: Killed\nValueError: x\n")
    (result,) = read_settled([RunFiles(key=str(out), files=(out, err))], [slurm.FAMILY])
    assert result.run.failure == ("failed", "srun: error: r1: task 0: Killed", 1)
    assert result.run.failure_path == str(err)


def test_the_launchers_kills_inside_a_traceback_are_not_read():
    run = feed(HEADER, FRAME, "Killing subprocess 7", "ValueError: bad", "Killing subprocess 8")
    assert run.failure == ("failed", "ValueError: bad", 4)
    assert run.consequence_lines() == ["lines.log:5: killed: Killing subprocess 8"]


@pytest.mark.parametrize(("gap", "ignored"), [(0, True), (1, True), (2, False)])
def test_a_traceback_right_after_exception_ignored_in_is_no_failure(gap, ignored):
    run = feed("Exception ignored in: <function f>", *[""] * gap, HEADER, FRAME, "ValueError: x")
    assert run.failure == (None if ignored else ("failed", "ValueError: x", gap + 4))


def test_of_harmless_lines_one_after_another_the_last_one_counts():
    harmless = "Exception ignored in: <function f>"
    assert feed(harmless, harmless, "", HEADER, FRAME, "ValueError: x").failure is None


def test_lines_after_a_harmless_line_that_no_traceback_follows_are_read():
    run = feed("Exception ignored in: <function f>", "Process 1 exits successfully.", "BrokenPipeError: x")
    assert run.failure is None
    assert run.clean_exit[:2] == ("Process 1 exits successfully.", 2)
    # nor are those between it and the traceback it heralds
    heralded = feed("--- Logging error ---", "srun: error: r1: task 0: Killed", HEADER, FRAME, "OSError: x")
    assert heralded.failure == ("failed", "srun: error: r1: task 0: Killed", 2)
    assert heralded.consequences == []


@pytest.mark.parametrize(("gap", "chained"), [(1, True), (2, True), (3, False)])
def test_a_traceback_chained_to_the_one_before_replaces_its_exception(gap, chained):
    chain = "The above exception was the direct cause of the following exception:"
    run = feed(HEADER, FRAME, "KeyError: 'a'", chain, *[""] * gap, HEADER, FRAME, "ValueError: b")
    line = 7 + gap
    replaced = ("failed", "ValueError: b (caused by KeyError: 'a')", line)
    assert run.failure == (replaced if chained else ("failed", "KeyError: 'a'", 3))


def test_a_checkpoint_exceptions_ranks_tracebacks_are_its_cause():
    # torch.distributed.checkpoint's CheckpointException.__str__ (api.py): the ranks, then each rank's
    # traceback under "Traceback (most recent call last): (RANK n)" and its exception
    run = feed(
        HEADER,
        '  File "/workspace/megatron-lm/megatron/core/dist_checkpointing/strategies/state_dict_saver.py", '
        "line 143, in save_state_dict_async_finalize",
        '    raise CheckpointException("write", node_failures)',
        "torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([0, 3])",
        f"{HEADER} (RANK 0)",
        '  File "/usr/lib/python3/dist-packages/torch/distributed/checkpoint/filesystem.py", line 221, in _write_item',
        "    torch.save(data, stream)",
        "OSError: [Errno 122] Disk quota exceeded",
    )
    assert run.failure == ("failed", "OSError: [Errno 122] Disk quota exceeded", 8)


@pytest.mark.parametrize(
    "wrapper",
    [
        # torch/_utils.py ExceptionWrapper.reraise: "Caught {type} {where}.\nOriginal {traceback}"
        "OSError: Caught OSError in DataLoader worker process 0.",
        "OSError: Caught OSError in replica 1 on device 1.",  # DataParallel's parallel_apply
    ],
)
def test_an_exception_a_worker_reraised_is_of_its_original_traceback(wrapper):
    run = feed(
        HEADER,
        '  File "/opt/torch/utils/data/dataloader.py", line 1480, in _process_data',
        "    data.reraise()",
        wrapper,
        f"Original {HEADER}",
        '  File "/opt/torch/utils/data/_utils/worker.py", line 349, in _worker_loop',
        "    data = fetcher.fetch(index)",
        "OSError: [Errno 116] Stale file handle",
        "",
        "srun: error: gpu-a17: task 0: Exited with exit code 1",
    )
    assert run.failure == ("failed", "OSError: [Errno 116] Stale file handle", 8)


# --- the same whatever the batches -------------------------------------------------------------------

_LINES = [
    HEADER,
    "[rank3]: " + HEADER,
    "    ^^^^^^" + HEADER,
    FRAME,
    '[rank3]:   File "/x/train.py", line 7, in main',
    '  File "/x/OutOfMemoryError.py", line 3, in g',
    "    raise torch.OutOfMemoryError(",
    "ValueError: bad value",
    "Exception: bare",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "During handling of the above exception, another exception occurred:",
    HEADER + " (RANK 2)",
    "Exception ignored in atexit callback: <function f at 0x1>",
    "srun: error: r7i4n2: task 3: Exited with exit code 1",
    "slurmstepd: error: *** STEP 7.0 ON n CANCELLED AT 2021 ***",
    "Killing subprocess 4443",
    "[INFO] [launch.py:253:sigkill_handler] Killing subprocess 4445",
    "Connection reset by peer",
    "+ NNODES=4",
    "noise",
    "",
]


def _result(path: Path) -> tuple:
    run = feed_file(slurm.FAMILY, path)
    return run.failure, run.consequence_lines(), run.facts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(_LINES), st.integers(0, 4)), min_size=1, max_size=30))
@example(
    [
        (_LINES[11], 0),
        (_LINES[0], 0),
        (FRAME, 0),
        ("Killing subprocess 4443", 3),
        ("ValueError: bad value", 0),
    ]
)
def test_tracebacks_read_the_same_whatever_the_batches(tmp_path_factory, monkeypatch, lines):
    """Lines of tracebacks and around them, each followed by a few lines no family reads, with a window of
    4 lines (so that it ends, or does not, between any two of them), read in batches of a few bytes."""
    monkeypatch.setattr(slurm, "TRACEBACK", replace(slurm.TRACEBACK, max_lines=4))
    family = replace(slurm.FAMILY, blocks=(slurm.TRACEBACK,))
    monkeypatch.setattr(slurm, "FAMILY", family)
    path = tmp_path_factory.mktemp("tb") / "job-1.out"
    path.write_text("".join(line + "\n" + "gap\n" * gap for line, gap in lines))
    whole = _result(path)
    for batch_bytes in (5, 60):
        with monkeypatch.context() as patch:
            patch.setattr(source, "CHUNK_BYTES", batch_bytes)
            patch.setattr(source, "batches", partial(source.batches, batch_bytes=batch_bytes))
            assert _result(path) == whole


# torch's C10D_NCCL_CHECK: "NCCL error in: <file>:<line>, <result>, NCCL version <v>", then getNcclErrorDetailStr:
# the result's description and "\nLast error:\n" with NCCL's own last error (torch 2.2+, NCCLUtils.cpp)
NCCL_FAILURE = [
    HEADER,
    '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2140, in broadcast',
    "    work = group.broadcast([tensor], opts)",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
    "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
    "Last error:",
    "socketStartConnect: Connect to 10.10.1.7<46631> failed : Connection refused",
]


def test_nccls_last_error_after_the_exception_line_is_quoted_with_it():
    run = feed(*NCCL_FAILURE)
    assert run.failure == ("failed", f"{NCCL_FAILURE[3]}; Last error: {NCCL_FAILURE[6]}", 4)


def test_nccls_last_error_is_kept_when_the_exception_line_is_long():
    long_path = "/opt/conda/conda-bld/pytorch_1699449201336/work/" * 4
    exception = NCCL_FAILURE[3].replace("../", long_path)
    run = feed(*NCCL_FAILURE[:3], exception, *NCCL_FAILURE[4:])
    assert len(run.failure[1]) <= 300
    assert run.failure[1].startswith(exception[:100])
    assert run.failure[1].endswith(f"; Last error: {NCCL_FAILURE[6]}")


def test_a_last_error_far_from_the_exception_line_or_unknown_is_not_quoted():
    unrelated = feed(*NCCL_FAILURE[:5], *["iteration 10"] * 3, *NCCL_FAILURE[5:])
    assert unrelated.failure == ("failed", NCCL_FAILURE[3], 4)
    # NCCL without a last error: torch writes "Last error: Unknown NCCL Error" on one line
    unknown = feed(*NCCL_FAILURE[:5], "Last error: Unknown NCCL Error")
    assert unknown.failure == ("failed", NCCL_FAILURE[3], 4)


def test_a_peers_failure_whose_last_error_is_infinibands_is_the_networks():
    """ncclRemoteError says a peer exited or the network failed: InfiniBand's failed work request as its last
    error (net_ib.cc, retries exceeded) says which, a cause before the step's end; without it, a report."""
    remote = [
        *NCCL_FAILURE[:3],
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
        "remote process exited or there was a network error, NCCL version 2.19.3",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    ]
    completion = (
        "NET/IB : Got completion from peer 10.12.4.21<48122> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 "
        "vendor err 129 (Send)"
    )
    terminated = "srun: error: gpu-h100-21: tasks 0-7: Terminated"
    run = feed(*remote, "Last error:", completion, terminated)
    assert (run.failure[0], run.failure[2], run.failure_kind) == ("failed", 4, "network")
    assert run.failure[1].startswith(remote[3][:120]) and run.failure[1].endswith(
        f"; Last error: {completion}"
    )
    peer = feed(*remote, terminated)
    assert peer.failure == ("failed", terminated, 6)


def test_nccls_last_error_is_read_under_a_launchers_prefix(tmp_path):
    from logstat.api import load_runs

    log = tmp_path / "job-77120.log"
    log.write_text("".join(f"gpu-c02: {line}\n" for line in NCCL_FAILURE))
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason_line"]) == ("failed", 4)
    assert row["reason"].endswith(
        "; Last error: socketStartConnect: Connect to 10.10.1.7<46631> failed : Connection refused"
    )

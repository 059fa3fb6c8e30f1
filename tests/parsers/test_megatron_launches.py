"""Megatron logs that are not one clean training launch: evaluation progress lines, a zero-shot
evaluation run, and several launches appended to one file (last launch wins per step). Fixtures in
fixtures/megatron_launches/ (README names their formats)."""

import tempfile
from pathlib import Path

import polars as pl
import pytest
from logstat.parsers import megatron
from logstat.parsers.base import RunBuilder
from logstat.parsers.kinds import Events
from logstat.parsers.settle import settle_runs

from logstat.api import load_runs
from tests.conftest import FIXTURES
from tests.parsers.feeding import feed_lines

MEGATRON = FIXTURES / "megatron_launches"


def test_relaunch_after_a_new_arguments_dump_replaces_the_steps_it_logs_again():
    """Launch 1 logs steps 10, 20, 30 and is preempted; launch 2 resumes from the step-20 checkpoint and
    logs 30 and 40. Evaluating iter 1/2, 2/2 after steps 20 and 40 are no training steps."""
    result = load_runs([MEGATRON / "megatron_lm_relaunch-2002.out"])
    its = result.iterations
    assert its["iteration"].to_list() == [10, 20, 30, 40]
    assert its["elapsed_ms"].to_list() == [
        4712.4,
        4688.1,
        4701.5,
        4695.2,
    ]  # step 30 of relaunch 1, not 5198.7
    assert its["loss"].to_list() == [10.42137, 9.314206, 8.698834, 8.21557]
    assert its["logged_tflops_per_gpu"].to_list() == [397.0, 399.1, 397.9, 398.5]
    assert its["line"].to_list() == [34, 35, 79, 80]
    assert its["launch"].to_list() == [0, 0, 1, 1]
    row = result.runs.row(0, named=True)
    assert (row["iterations"], row["train_iters"], row["family"]) == (4, 40, "megatron")
    # the steps of the last launch after its first (its start-up): 4695.2 ms
    assert row["sec_per_iter"] == 4.6952
    assert row["sec_per_iter_source"] == "median of 1 logged step times after the first 1 of relaunch 1"


def test_a_relaunch_in_the_2021_format_replaces_the_steps_and_their_timers():
    """Steps 1, 2, 3 with their timers, a killed task, then a relaunch (its own arguments dump) that
    logs steps 2 and 3 again."""
    result = load_runs([MEGATRON / "meg_gpt2_relaunch-2003.out"])
    its = result.iterations
    assert its["iteration"].to_list() == [1, 2, 3]
    assert its["elapsed_ms"].to_list() == [155483.8, 131774.2, 130412.9]
    assert its["loss_scale"].to_list() == [4294967296.0, 4294967296.0, 2147483648.0]
    assert its["line"].to_list() == [143, 292, 294]
    assert its["launch"].to_list() == [0, 1, 1]
    assert result.runs["sec_per_iter"].to_list() == [130.4129]  # the relaunch's step 3: its step 2 started it
    timers = result.timers
    assert timers.group_by("iteration").agg(pl.len(), pl.col("line").unique()).sort("iteration").rows() == [
        (1, 11, [144]),
        (2, 11, [293]),
        (3, 11, [295]),
    ]
    forward = timers.filter(pl.col("timer") == "forward-compute").sort("iteration")["ms"].to_list()
    assert forward == [32054.16, 33001.50, 32950.25]


def test_a_run_ends_as_its_last_launch_did_the_earlier_launches_failures_are_consequences():
    """The first launch's end (a killed task, a preemption) is no end of a job relaunched after it: the
    relaunch of 2003 stops after step 3 with nothing said (incomplete), 2002's finishes (ok, after the
    earlier failure); each names the earlier launch's end among its consequences."""
    result = load_runs([MEGATRON / "meg_gpt2_relaunch-2003.out", MEGATRON / "megatron_lm_relaunch-2002.out"])
    rows = {row["path"].rsplit("/", 1)[1]: row for row in result.runs.iter_rows(named=True)}
    killed, preempted = rows["meg_gpt2_relaunch-2003.out"], rows["megatron_lm_relaunch-2002.out"]
    assert (killed["status"], killed["reason"]) == (
        "incomplete",
        "log stops after iteration 3 of 1000, with no failure or end message",
    )
    assert killed["consequences"] == ["meg_gpt2_relaunch-2003.out:149: srun: error: r7i4n2: task 12: Killed"]
    assert (preempted["status"], preempted["reason"]) == (
        "ok",
        "[after training is done] datetime: 2024-03-11 01:33:05 (after an earlier failure at line 45: preempted: "
        "slurmstepd: error: *** JOB 2002 ON gpu-node-03 CANCELLED AT 2024-03-11T01:12:40 DUE TO PREEMPTION ***)",
    )
    assert preempted["consequences"] == [
        "megatron_lm_relaunch-2002.out:45: preempted: slurmstepd: error: *** JOB 2002 ON gpu-node-03 CANCELLED AT "
        "2024-03-11T01:12:40 DUE TO PREEMPTION ***"
    ]


def test_a_relaunch_that_fails_fails_by_its_own_cause():
    # launch 1 preempted (a cause), launch 2 (its own arguments dump) out of CUDA memory: the run's reason
    dump = [
        "------------------------ arguments ------------------------",
        "-------------------- end of arguments ---------------------",
    ]
    step = " iteration        {}/    1000 | consumed samples: 16 | elapsed time per iteration (ms): 1000.0 |"
    preempted = (
        "slurmstepd: error: *** JOB 7 ON r7i4n1 CANCELLED AT 2024-03-02T10:11:12 DUE TO PREEMPTION ***"
    )
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    lines = [*dump, step.format(1), step.format(2), preempted, *dump, step.format(2), step.format(3), oom]
    with tempfile.TemporaryDirectory() as directory:
        log = Path(directory) / "requeued-7.out"
        log.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason_line"]) == ("failed", 10)
    assert row["reason"].startswith("CUDA out of memory: torch.OutOfMemoryError")
    assert [line.split(": ", 1)[0] for line in row["consequences"]] == ["requeued-7.out:5"]


#: a Megatron arguments dump (its first and last lines: a launch), a step of 1000 and a traceback's frames
DUMP = [
    "------------------------ arguments ------------------------",
    "-------------------- end of arguments ---------------------",
]
STEP = " iteration        {}/    1000 | consumed samples: 16 | elapsed time per iteration (ms): 1000.0 |"
FRAMES = [
    "Traceback (most recent call last):",
    '  File "pretrain_gpt.py", line 10, in <module>',
    "    main()",
]


def _written(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_a_relaunch_failing_as_every_launch_did_fails_by_its_own_exception(tmp_path):
    # torchrun --max-restarts: each attempt (its own arguments dump) dies of a ValueError, then the agent's
    # ChildFailedError; the run's reason is the last attempt's exception, not the launcher's
    lines = []
    for attempt in range(3):
        lines += [*DUMP, STEP.format(attempt + 1), *FRAMES, f"ValueError: bad shard {attempt}"]
    lines += [*FRAMES, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "]
    row = load_runs([_written(tmp_path / "restarts-9002.out", lines)]).runs.row(0, named=True)
    assert (row["status"], row["reason"], row["reason_line"]) == ("failed", "ValueError: bad shard 2", 21)


@pytest.mark.parametrize("relaunched", [True, False])
def test_a_failure_in_the_err_ended_an_earlier_launch_when_the_out_relaunched_and_completed(
    tmp_path, relaunched
):
    # torchrun --max-restarts with Slurm's .err apart: the failed attempt's traceback is in the .err, the
    # attempt that finished in the .out. Without a relaunch the failure came after the completion
    out = [*DUMP, STEP.format(1), *(DUMP if relaunched else []), STEP.format(2), STEP.format(3)]
    out.append("[after training is done] datetime: 2026-11-26 08:07:23 ")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB."
    err = [*FRAMES, oom]
    _written(tmp_path / "restart-9001.out", out)
    _written(tmp_path / "restart-9001.err", err)
    row = load_runs([tmp_path]).runs.row(0, named=True)
    if relaunched:
        assert (row["status"], row["reason_path"]) == ("ok", str(tmp_path / "restart-9001.out"))
        assert row["reason"] == (
            "[after training is done] datetime: 2026-11-26 08:07:23 (after an earlier failure at "
            f"restart-9001.err:4: CUDA out of memory: {oom})"
        )
    else:
        assert (row["status"], row["reason"]) == ("failed", f"CUDA out of memory: {oom}")


def test_a_relaunchs_collective_timeout_is_its_cause_whatever_an_earlier_launch_died_of(tmp_path):
    # an earlier launch's exception is over when the relaunch hangs: its watchdog's timeout is no effect of it
    watchdog = (
        "[rank0]:[E1126 10:17:16.000101101 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=38417, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600012 milliseconds before timing out."
    )
    limit = "slurmstepd: error: *** JOB 9003 ON gpu030 CANCELLED AT 2026-11-26T12:00:08 DUE TO TIME LIMIT ***"
    lines = [
        *DUMP,
        STEP.format(1),
        *FRAMES,
        "ValueError: bad shard 1",
        *DUMP,
        STEP.format(2),
        watchdog,
        limit,
    ]
    row = load_runs([_written(tmp_path / "hang-9003.out", lines)]).runs.row(0, named=True)
    assert (row["status"], row["reason_line"]) == ("failed", 11)
    assert row["reason"] == f"NCCL timeout/error: {watchdog.removeprefix('[rank0]:')}"


def test_a_requeued_jobs_appended_err_ends_as_its_last_cancel_says(tmp_path):
    """``--requeue --open-mode=append``: the steps of both attempts in the .out, read first; the .err holds
    the first attempt's preemption and, hours later, the second's time limit. The time limit is the run's
    end, the preemption a consequence; the two cancels of one attempt (job and step, seconds apart) are not
    two attempts."""
    step = " iteration {:8d}/    1000 | consumed samples: 16 | elapsed time per iteration (ms): 1000.0 |"
    dump = ["-------------------- end of arguments ---------------------"]
    (tmp_path / "gpt-77001.out").write_text(
        "\n".join([*dump, *map(step.format, range(1, 31)), *dump, *map(step.format, range(20, 46))]) + "\n"
    )
    cancel = "slurmstepd: error: *** {} ON {} CANCELLED AT {} DUE TO {} ***"
    preempted = cancel.format("JOB 77001", "node1", "2024-03-01T10:00:00", "PREEMPTION")
    step_limit = cancel.format("STEP 77001.0", "node7", "2024-03-01T22:00:06", "TIME LIMIT")
    job_limit = cancel.format("JOB 77001", "node7", "2024-03-01T22:00:07", "TIME LIMIT")
    (tmp_path / "gpt-77001.err").write_text("\n".join([preempted, step_limit, job_limit]) + "\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["status"], row["reason"], row["iterations"]) == ("timeout", f"time limit: {step_limit}", 45)
    assert row["consequences"] == [f"gpt-77001.err:1: preempted: {preempted}"]


def test_a_preempted_job_that_ran_again_ends_as_its_last_launch_did(tmp_path):
    """The .out: two launches (two arguments dumps), the second finishing; the .err, read after it: the
    first launch's preemption. More launches than preemptions: the job ran again after the preemption,
    so the run is ok. Preempted as often as it launched, the last preemption ended the last launch."""
    dump = [
        "------------------------ arguments ------------------------",
        "  num_layers ...................................... 24",
        "-------------------- end of arguments ---------------------",
    ]
    step = " iteration {:8d}/      45 | consumed samples: 16 | elapsed time per iteration (ms): 1000.0 |"
    done = "[after training is done] datetime: 2024-03-02 01:00:00"
    cancel = "slurmstepd: error: *** JOB {} ON node1 CANCELLED AT {} DUE TO PREEMPTION ***"
    for job, preemptions in (
        (77003, ["2024-03-01T10:00:00"]),
        (77004, ["2024-03-01T10:00:00", "2024-03-02T00:59:00"]),
    ):
        out = [*dump, *map(step.format, range(1, 31)), *dump, *map(step.format, range(20, 46)), done]
        (tmp_path / f"gpt-{job}.out").write_text("\n".join(out) + "\n")
        (tmp_path / f"gpt-{job}.err").write_text(
            "\n".join(cancel.format(job, at) for at in preemptions) + "\n"
        )
    rows = {row["job_id"]: row for row in load_runs([tmp_path]).runs.iter_rows(named=True)}
    ran_again, preempted_again = rows["77003"], rows["77004"]
    first = cancel.format(77003, "2024-03-01T10:00:00")
    assert (ran_again["status"], ran_again["reason"]) == (
        "ok",
        f"{done} (after an earlier failure at gpt-77003.err:1: preempted: {first})",
    )
    assert ran_again["consequences"] == [f"gpt-77003.err:1: preempted: {first}"]
    assert (preempted_again["status"], preempted_again["reason_line"]) == ("cancelled", 2)


def test_a_lower_step_without_a_new_dump_merges_into_the_rows_read():
    """Only a new arguments dump starts a launch: a stray (garbled, late) line of an earlier step keeps
    the values already read (tests/reliability/test_hostile_files.py feeds such lines)."""
    run = feed_lines(
        megatron.FAMILY,
        [
            " iteration        1/    1000 | elapsed time per iteration (ms): 10.0 |",
            " iteration        2/    1000 | elapsed time per iteration (ms): 20.0 |",
            " iteration        1/    1000 | elapsed time per iteration (ms): nan | lm loss: 2.5 |",
        ],
    )
    assert {step: row["elapsed_ms"] for step, row in run.iterations.items()} == {1: 10.0, 2: 20.0}


def test_zero_shot_evaluation_logs_no_training_step():
    """tasks/zeroshot_gpt prints ``> working on iteration: N`` every log interval: 65 lines, no step."""
    text = (MEGATRON / "megatron_zeroshot_lambada-2004.out").read_text()
    assert text.count("> working on iteration:") == 65
    result = load_runs([MEGATRON / "megatron_zeroshot_lambada-2004.out"])
    assert result.iterations.height == 0
    row = result.runs.row(0, named=True)
    assert (row["family"], row["num_layers"], row["iterations"]) == ("megatron", 24, 0)
    # tasks/main.py's last line: the evaluation ended as planned
    assert (row["status"], row["reason"], row["reason_line"]) == ("ok", "done :-)", text.count("\n"))


def test_a_finished_run_relaunched_into_its_log_ends_with_the_relaunch(tmp_path):
    """A job that trained to its end, then ran again appending to the same file (a requeue of a finished
    job, a rerun with more iterations) and stopped after a step: its end is not the first launch's."""
    lines = (FIXTURES / "megatron" / "megatron_lm_h100-2001.out").read_text().splitlines()
    done = next(number for number, line in enumerate(lines, 1) if "after training is done" in line)
    log = tmp_path / "rerun.out"
    log.write_text(
        "\n".join([*lines[:done], *lines[:26]]) + "\n"
    )  # the run again, up to its step 2 (line 26)
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason_line"]) == ("incomplete", done + 26)
    assert row["reason"] == "log stops after iteration 2 of 5, with no failure or end message"


def settled(run: RunBuilder) -> RunBuilder:
    """The run's Python events merged into its rows, as the reader settles a run."""
    settle_runs([run], Events())
    return run


def test_ranks_printing_one_step_still_merge_first_print_wins():
    run = RunBuilder(path="x")
    run.add_iteration(5, "megatron", 1, elapsed_ms=10.0)
    run.add_iteration(5, "megatron", 2, elapsed_ms=99.0, loss=2.0)
    assert settled(run).iterations[5] == {
        "iteration": 5, "launch": 0, "family": "megatron", "line": 1, "elapsed_ms": 10.0, "loss": 2.0,
    }  # fmt: skip
    run = RunBuilder(path="x")
    run.add_iteration(5, "megatron", 1, elapsed_ms=10.0)
    run.position += 1 << 16
    run.new_launch("megatron")
    run.position += 1 << 16
    run.add_iteration(5, "megatron", 3, elapsed_ms=11.0)
    run.add_iteration(5, "megatron", 4, elapsed_ms=98.0)
    assert settled(run).iterations[5] == {
        "iteration": 5, "launch": 1, "family": "megatron", "line": 3, "elapsed_ms": 11.0,
    }  # fmt: skip


def test_without_a_relaunch_the_timers_are_left_as_they_are():
    run = feed_lines(
        megatron.FAMILY,
        [
            " iteration        1/    1000 | elapsed time per iteration (ms): 10.0 |",
            "time (ms) | a: 1.0",
            "------------------------ arguments ------------------------",
            "-------------------- end of arguments ---------------------",
            "time (ms) | setup: 3.0",  # before the new launch's first step: kept
            " iteration        2/    1000 | elapsed time per iteration (ms): 20.0 |",
            "time (ms) | a: 2.0",
        ],
    )
    assert [(row["iteration"], row["timer"]) for row in run.timers] == [(1, "a"), (1, "setup"), (2, "a")]

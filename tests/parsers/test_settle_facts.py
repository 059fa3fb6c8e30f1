"""A read's fact events are reduced to each statement's first and last (``settle.fact_ends``), so that facts
restated on every step do not grow with the log, and settling them gives what settling all of them gives."""

from __future__ import annotations

import random

import polars as pl
from logstat.parsers import reader, settle
from logstat.parsers.base import RunBuilder
from logstat.parsers.kinds import LINE_SHIFT
from logstat.parsers.reader import RunFiles, read_settled
from logstat.parsers.registry import families

FACTS = {"run": pl.Int64, "order": pl.Int64, "fact": pl.String, "value": pl.Int64, "family": pl.String}


def _facts(rows: list[tuple], **extra: pl.DataType) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={**FACTS, **extra}, orient="row")


def test_each_statement_keeps_its_first_and_last_in_line_order():
    facts = _facts(
        [
            (0, 30, "gbs", 3, "megatron"),
            (0, 10, "gbs", 1, "megatron"),
            (0, 20, "gbs", 2, "megatron"),
            (0, 20, "gbs", 9, "megatron"),  # a tie in order: reading order decides, so it is the middle
            (1, 5, "gbs", 7, "megatron"),
            (0, 15, "gbs", 4, "deepspeed"),
            (0, 25, "gbs", 5, "deepspeed"),
            (0, 26, "gbs", 6, "deepspeed"),
        ]
    )
    assert settle.fact_ends(facts).rows() == [
        (0, 10, "gbs", 1, "megatron"),
        (0, 15, "gbs", 4, "deepspeed"),
        (0, 26, "gbs", 6, "deepspeed"),
        (0, 30, "gbs", 3, "megatron"),
        (1, 5, "gbs", 7, "megatron"),
    ]


def test_a_statement_a_family_may_cancel_is_always_kept():
    facts = _facts(
        [
            (0, 1, "gpus", 8, "deepspeed", "megatron"),
            (0, 2, "gpus", 8, "deepspeed", "megatron"),
            (0, 3, "gpus", 8, "deepspeed", "megatron"),
            (0, 4, "gpus", 8, "deepspeed", None),
            (0, 5, "gpus", 8, "deepspeed", None),
            (0, 6, "gpus", 8, "deepspeed", None),
        ],
        unless_seen=pl.String,
    )
    assert settle.fact_ends(facts).get_column("order").to_list() == [1, 2, 3, 4, 6]


def _settled(frames: list[pl.DataFrame], seen_at: int) -> list[tuple]:
    runs = [RunBuilder(path=f"run{index}", files=["a.log"]) for index in range(3)]
    for run in runs:
        run.first_seen["megatron"] = seen_at
    settle._settle_facts(runs, frames)
    return [(run.facts, run.provenance) for run in runs]


def test_settling_the_reduced_facts_gives_what_settling_them_all_gives():
    generator = random.Random(16)
    for _ in range(200):
        reads = []
        for _ in range(generator.randint(1, 4)):
            rows = [
                (
                    generator.randint(0, 2),
                    generator.randint(1, 40) << LINE_SHIFT,
                    generator.choice(("gbs", "gpus")),
                    generator.randint(0, 9),
                    generator.choice(("megatron", "deepspeed")),
                    generator.choice((None, "megatron")),
                )
                for _ in range(generator.randint(1, 30))
            ]
            reads.append(_facts(rows, unless_seen=pl.String))
        seen_at = generator.randint(1, 40) << LINE_SHIFT
        reduced = [settle.fact_ends(frame) for frame in reads]
        assert _settled(reduced, seen_at) == _settled(reads, seen_at)


def _iteration(step: int, batch: int) -> str:
    return (
        f" iteration {step:8d}/     400 | consumed samples: {step * batch:12d} | elapsed time per iteration (ms):"
        f" 1000.0 | learning rate: 1.000E-04 | global batch size: {batch:5d} | lm loss: 5.000000E+00 |"
        " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )


def test_a_fact_restated_on_every_step_is_kept_twice_per_read(tmp_path, monkeypatch):
    # a batch-size ramp-up: 32 for the first 150 steps, then 64 (the run's fact is the last statement)
    log = tmp_path / "ramp.log"
    log.write_text("".join(_iteration(step, 32 if step <= 150 else 64) for step in range(1, 401)))
    read_facts = []

    def settle_runs(runs, events):
        read_facts.extend(events.facts)
        return settle.settle_runs(runs, events)

    monkeypatch.setattr(reader, "settle_runs", settle_runs)
    [result] = read_settled([RunFiles(key=str(log), files=(log,))], list(families()))
    statements = pl.concat(read_facts, how="diagonal_relaxed").filter(pl.col("fact") == "global_batch_size")
    assert statements.height == 2
    assert result.run.facts["global_batch_size"] == 64
    assert result.run.provenance["global_batch_size"] == "megatron:400"
    assert result.run.iteration_frame.height == 400

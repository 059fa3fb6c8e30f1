"""minGPT/Lightning benchmark family (seed 004, ``benchmark.py`` of the minGPT DeepSpeed repository).

Its output, as the seed's README quotes it::

    python benchmark.py --n_layer 21 --n_head 16 --n_embd 8192 --gpus 8 --precision 16 --limit_train_batches 120 --batch_size 1

    Average Epoch time: 45.65 seconds
    Average Peak CUDA memory: 36086.14MiB
    CPU Virtual Memory:  used = 867.61 GB, percent = 91.8%

The command line gives the run's shape (``--n_layer``, ``--n_head``, ``--n_embd``, ``--block_size``,
``--vocab_size``), GPUs per node (``--gpus``, Lightning's devices per node; ``--num_nodes``), the
micro batch (``--batch_size``), precision (``--precision 16``/``bf16``/``32``) and the strategy
(``deepspeed_stage_3``, ``--cpu_offload``).
"""

from __future__ import annotations

import re
from typing import Any

import pyparsing as pp
from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises

NAME = "mingpt"

epoch_time = (
    pp.Suppress("Average Epoch time:") + grammar.number("seconds") + pp.Suppress(pp.Literal("seconds"))
).set_name("epoch_time")
peak_memory = (
    pp.Suppress("Average Peak CUDA memory:") + grammar.number("mib") + pp.Suppress(pp.Literal("MiB"))
).set_name("peak_memory")

_SCRIPT = re.compile(r"\b(?:benchmark|train)\.py\b")
_SHAPE_FLAGS = {
    "n_layer": "num_layers",
    "n_head": "num_heads",
    "n_embd": "hidden_size",
    "block_size": "seq_len",
    "vocab_size": "vocab_size",
    "batch_size": "micro_batch_size",
}
_PRECISION = {
    "16": "fp16",
    "16-mixed": "fp16",
    "bf16": "bf16",
    "bf16-mixed": "bf16",
    "32": "fp32",
    "32-true": "fp32",
}


def _read_command_line(run: RunBuilder, text: str, lineno: int) -> None:
    flags = grammar.command_line_flags(text[_SCRIPT.search(text).start() :])
    for flag, fact in _SHAPE_FLAGS.items():
        value = grammar.positive_int(flags.get(flag, ""))
        if value is not None:
            run.set_fact(fact, value, NAME, lineno)
    _read_devices(run, flags, lineno)
    precision = _PRECISION.get(flags.get("precision", ""))
    if precision:
        run.set_fact("precision", precision, NAME, lineno)
    strategy = re.search(r"deepspeed_stage_(\d)", flags.get("strategy", ""))
    if strategy:
        run.set_fact("zero_stage", int(strategy.group(1)), NAME, lineno)
    if "cpu_offload" in flags:
        run.set_fact("offload_optimizer", True, NAME, lineno)
    run.saw(NAME)


def _read_devices(run: RunBuilder, flags: dict[str, Any], lineno: int) -> None:
    """``--gpus 8`` is Lightning's devices per node; with ``--num_nodes`` the world size is their product."""
    per_node = grammar.positive_int(flags.get("gpus", flags.get("devices", "")))
    if per_node is None:
        return
    nodes = grammar.positive_int(flags.get("num_nodes", "")) or 1
    run.set_fact("gpus_per_node", per_node, NAME, lineno)
    run.set_fact("nodes", nodes, NAME, lineno)
    run.set_fact("gpus", per_node * nodes, NAME, lineno)


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one line of minGPT/Lightning benchmark output into ``run``; never raises."""
    # scan_string tries every character (~0.5 ms a line); each grammar starts with its literal, which
    # must then be in the line (or appear by scan_string's tab expansion)
    tabs = "\t" in text
    for tokens, _, _ in epoch_time.scan_string(text) if tabs or "Average Epoch time:" in text else ():
        run.set_fact("avg_epoch_time_s", tokens["seconds"], NAME, lineno)
        run.complete(f"Average Epoch time: {tokens['seconds']} seconds", lineno)
        run.saw(NAME)
    for tokens, _, _ in peak_memory.scan_string(text) if tabs or "Average Peak CUDA memory:" in text else ():
        run.set_fact("peak_memory_mib", tokens["mib"], NAME, lineno)
        run.saw(NAME)
    if _SCRIPT.search(text) and "--n_layer" in text:
        _read_command_line(run, text, lineno)


def evidence(run: RunBuilder) -> int:
    """The benchmark's own result lines and its command line."""
    return run.families_seen.get(NAME, 0)


FAMILY = Family(
    name=NAME,
    markers=("Average Epoch time:", "Average Peak CUDA memory:", "--n_layer"),
    parse_line=parse_line,
    evidence=evidence,
    description="minGPT/Lightning benchmark: average epoch time, peak CUDA memory, benchmark.py command line",
)

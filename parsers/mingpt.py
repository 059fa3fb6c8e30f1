"""minGPT/Lightning benchmark family (seed 004, ``benchmark.py`` of the minGPT DeepSpeed repository).

Its output, as the seed's README quotes it::

    python benchmark.py --n_layer 21 --n_head 16 --n_embd 8192 --gpus 8 --precision 16 --batch_size 1
    Average Epoch time: 45.65 seconds
    Average Peak CUDA memory: 36086.14MiB

The command line gives the run's shape, GPUs per node (``--gpus``; ``--num_nodes``), the micro batch,
precision and the strategy (``deepspeed_stage_3``, ``--cpu_offload``).
"""

from __future__ import annotations

import re

from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises

NAME = "mingpt"

# the benchmark's result lines: the literal, a number (``grammar.number``'s first alternative that
# matches: an integer stays one) and its unit, whitespace allowed between them
_EPOCH_TIME = re.compile(rf"Average Epoch time:[ \t\r\n]*+{grammar.NUMBER_FIRST_MATCH}[ \t\r\n]*+seconds")
_PEAK_MEMORY = re.compile(rf"Average Peak CUDA memory:[ \t\r\n]*+{grammar.NUMBER_FIRST_MATCH}[ \t\r\n]*+MiB")

_SCRIPT = re.compile(r"\b(?:benchmark|train)\.py\b")
_ZERO_STAGE = re.compile(r"deepspeed_stage_(\d)")  # compiled once, not looked up in re's cache per line
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


def _read_command_line(run: RunBuilder, command: str, lineno: int) -> None:
    """``command``: the line from the script's name on."""
    flags = grammar.command_line_flags(command)
    for flag, fact in _SHAPE_FLAGS.items():
        value = grammar.positive_int(flags.get(flag, ""))  # None for a flag left out, as for ""
        if value is not None:
            run.set_fact(fact, value, NAME, lineno)
    # ``--gpus 8`` is Lightning's devices per node; with ``--num_nodes`` the world size is their product
    per_node = grammar.positive_int(flags.get("gpus", flags.get("devices", "")))
    if per_node is not None:
        nodes = grammar.positive_int(flags.get("num_nodes", "")) or 1
        run.set_fact("gpus_per_node", per_node, NAME, lineno)
        run.set_fact("nodes", nodes, NAME, lineno)
        run.set_fact("gpus", per_node * nodes, NAME, lineno)
    precision = _PRECISION.get(flags.get("precision", ""))
    if precision:
        run.set_fact("precision", precision, NAME, lineno)
    strategy = _ZERO_STAGE.search(flags.get("strategy", ""))
    if strategy:
        run.set_fact("zero_stage", int(strategy.group(1)), NAME, lineno)
    if "cpu_offload" in flags:
        run.set_fact("offload_optimizer", True, NAME, lineno)
    run.saw(NAME)


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one line of minGPT/Lightning benchmark output into ``run``; never raises."""
    for seconds in epoch_times(text):
        run.set_fact("avg_epoch_time_s", seconds, NAME, lineno)
        run.complete(f"Average Epoch time: {seconds} seconds", lineno)
        run.saw(NAME)
    for mib in peak_memories(text):
        run.set_fact("peak_memory_mib", mib, NAME, lineno)
        run.saw(NAME)
    script = "--n_layer" in text and _SCRIPT.search(text)
    if script:
        _read_command_line(run, text[script.start() :], lineno)


def epoch_times(text: str) -> list[int | float]:
    """The seconds of each ``Average Epoch time: N seconds`` of ``text``, in order."""
    return _scan(_EPOCH_TIME, "Average Epoch time:", text)


def peak_memories(text: str) -> list[int | float]:
    """The MiB of each ``Average Peak CUDA memory: N MiB`` of ``text``, in order."""
    return _scan(_PEAK_MEMORY, "Average Peak CUDA memory:", text)


def _scan(pattern: re.Pattern[str], literal: str, text: str) -> list[int | float]:
    # tabs are expanded first (a tab inside the literal makes it no literal); without a tab the literal
    # must be in the line as it is
    if "\t" in text:
        text = text.expandtabs()
    elif literal not in text:
        return []
    return [grammar.number_of(match) for match in pattern.finditer(text)]


FAMILY = Family(
    name=NAME,
    markers=("Average Epoch time:", "Average Peak CUDA memory:", "--n_layer"),
    parse_line=parse_line,
    description="minGPT/Lightning benchmark: average epoch time, peak CUDA memory, benchmark.py command line",
)

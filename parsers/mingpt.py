"""minGPT family: the minGPT/Lightning benchmark (seed 004, ``benchmark.py`` of the minGPT DeepSpeed
repository) and minGPT's own projects.

The benchmark's output, as the seed's README quotes it::

    python benchmark.py --n_layer 21 --n_head 16 --n_embd 8192 --gpus 8 --precision 16 --batch_size 1
    Average Epoch time: 45.65 seconds
    Average Peak CUDA memory: 36086.14MiB

The command line gives the run's shape, GPUs per node (``--gpus``; ``--num_nodes``), the micro batch,
precision and the strategy (``deepspeed_stage_3``, ``--cpu_offload``).

minGPT's projects (chargpt.py, adder.py) print from their batch-end callback every 10 iterations
``iter_dt 41.90ms; iter 10: train loss 3.28933`` (the iteration's time, its 0-based number, its loss): a
step each (read column-wise); their config's ``command line overwriting config attribute
trainer.max_iters with 5000`` (CfgNode.merge_from_args) states the planned steps, the batch, the block
size and the model's shape; its Trainer's ``running on device cuda``, one GPU.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises
from logstat.parsers.kinds import NUMBER, Events, RecordKind, RecordTest, as_count, as_real, step_lines

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


#: a minGPT project's step line (projects/chargpt/chargpt.py ``batch_end_callback``)
STEP_LINE = rf"^iter_dt ([\d.]+)ms; iter (\d+): train loss ({NUMBER})"
_STEP_MARKER = "ms; iter "


def read_steps(records: pl.LazyFrame) -> Events:
    """A step event per step line of a minGPT project."""
    fields = pl.col("text").str.extract_groups(STEP_LINE)
    step, loss, milliseconds = (fields.struct[group] for group in "231")
    return step_lines(
        records, NAME, step=as_count(step), loss=as_real(loss), elapsed_ms=as_real(milliseconds)
    )


#: minGPT's Trainer on the device it trains on (mingpt/trainer.py ``print("running on device", self.device)``)
_DEVICE = "running on device "
#: CfgNode.merge_from_args' word on a ``--key=value`` of a minGPT project's command line (``trainer.batch_size``,
#: ``model.n_layer``: the benchmark's flag names, and the planned steps)
_OVERRIDE = re.compile(r"command line overwriting config attribute (?:\w+\.)*(\w+) with (\d+)\s*$")
_OVERRIDE_FACTS = {**_SHAPE_FLAGS, "max_iters": "train_iters"}


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
    if script and not _config_file_first(text[script.end() :]):
        _read_command_line(run, text[script.start() :], lineno)
    if text.startswith(_DEVICE) and text.rstrip().endswith("cuda"):  # its Trainer drives one device
        run.set_fact("gpus", 1, NAME, lineno)
    if (override := _OVERRIDE.search(text)) and (fact := _OVERRIDE_FACTS.get(override[1])):
        run.set_fact(fact, int(override[2]), NAME, lineno)
        run.saw(NAME)


def _config_file_first(arguments: str) -> bool:
    """Whether a ``train.py`` command's first argument is a config file: nanoGPT's configurator
    (``train.py config/train_gpt2.py --n_layer=24``), not the benchmark's flags."""
    first = arguments.split(maxsplit=1)[:1]
    return bool(first) and first[0].endswith(".py")


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
    markers=(
        "Average Epoch time:",
        "Average Peak CUDA memory:",
        "--n_layer",
        "command line overwriting config attribute ",
        _DEVICE,
        _STEP_MARKER,
    ),
    parse_line=parse_line,
    kinds=(
        RecordKind(
            family=NAME,
            name="step",
            test=RecordTest(markers=(_STEP_MARKER,), pattern=STEP_LINE),
            read=read_steps,
        ),
    ),
    description="minGPT: the Lightning benchmark's average epoch time, peak CUDA memory and command line; "
    "minGPT projects' iteration lines and config overrides",
)

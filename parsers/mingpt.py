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
size and the model's shape; its Trainer's ``running on device cuda``, one GPU (a batch a step, no activation checkpointing);
chargpt's ``data has 1115394 characters, 65 unique.`` the vocabulary. Their ``print(config)``
(CfgNode's ``system:`` / ``    work_dir: ./out/chargpt`` / ``data:`` / ``    block_size: 128`` / ...
``trainer:`` / ``    batch_size: 64``) states the same keys, and ``model_type: gpt-mini`` the shape of
minGPT's preset.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises
from logstat.parsers.kinds import (
    BODY,
    NUMBER,
    SEEN,
    Block,
    Events,
    RecordKind,
    RecordTest,
    as_count,
    as_real,
    facts_of,
    marks_of,
    step_lines,
)
from logstat.parsers.nanogpt import GPT2_SHAPES

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


#: the original minGPT's trainer (2020, mingpt/trainer.py): its tqdm bar's description, updated every iteration,
#: ``epoch 2 iter 10: train loss 0.69632. lr 6.000000e-05: 1%|...| 11/2179 [...]``: the epoch (from 1), the
#: iteration in it (from 0) of the bar's total a epoch
EPOCH_BAR = rf"^epoch (\d+) iter (\d+): train loss ({NUMBER})\. lr ({NUMBER}): *\d+%\|[^|]*\| *\d+/(\d+) \["
_EPOCH_BAR_MARKER = ": train loss "


def read_epoch_bars(records: pl.LazyFrame) -> Events:
    """A step event per update of the original trainer's bar: the epochs before it in steps, and its own."""
    fields = pl.col("text").str.extract_groups(EPOCH_BAR)
    epoch, iteration, per_epoch = (as_count(fields.struct[group]) for group in "125")
    step = (epoch - 1) * per_epoch + iteration + 1
    return step_lines(
        records, NAME, step=step, loss=as_real(fields.struct["3"]), lr=as_real(fields.struct["4"])
    )


#: the original minGPT's model on its size (mingpt/model.py ``logger.info("number of parameters: %e", ...)``,
#: its logging format ``%(asctime)s - %(levelname)s - %(name)s -   %(message)s``)
PARAMETERS = rf" - mingpt\.model - +number of parameters: ({NUMBER})\s*$"
_PARAMETERS_MARKER = "mingpt.model"


def read_parameters(records: pl.LazyFrame) -> Events:
    """The model's size, in billions."""
    count = as_real(pl.col("text").str.extract(PARAMETERS, 1))
    facts = facts_of(records, NAME, logged_model_size=count / 1e9).filter(pl.col("value") > 0)
    return Events(facts=[facts.collect()], marks=[marks_of(records, NAME, SEEN)])


#: minGPT's Trainer on the device it trains on (mingpt/trainer.py ``print("running on device", self.device)``)
_DEVICE = "running on device "
#: chargpt's CharDataset: ``data has 1115394 characters, 65 unique.``, its vocabulary
_CHARACTERS = re.compile(r"^data has \d+ characters, (\d+) unique\.$")
#: CfgNode.merge_from_args' word on a ``--key=value`` of a minGPT project's command line (``trainer.batch_size``,
#: ``model.n_layer``: the benchmark's flag names, and the planned steps)
_OVERRIDE = re.compile(r"command line overwriting config attribute (?:\w+\.)*(\w+) with (\d+)\s*$")
_OVERRIDE_FACTS = {**_SHAPE_FLAGS, "max_iters": "train_iters"}


#: minGPT's model presets (mingpt/model.py ``GPT.__init__``: ``model_type`` -> n_layer, n_head, n_embd); its
#: GPT-2 sizes are those nanoGPT's from_pretrained builds
MODEL_TYPES = {
    "openai-gpt": (12, 12, 768),
    **GPT2_SHAPES,
    "gopher-44m": (8, 16, 512),
    "gpt-mini": (6, 6, 192),
    "gpt-micro": (4, 4, 128),
    "gpt-nano": (3, 3, 48),
}
#: a project's ``print(config)`` (CfgNode ``_str_helper``: ``section:`` then its ``    key: value`` lines),
#: opened by its first section's ``    work_dir: ./out/chargpt`` (chargpt's and adder's ``C.system``)
_CONFIG_OPENER, _CONFIG_OPENER_MARKER = r"^    work_dir: \S+$", "work_dir: "
_CONFIG_LINE = r"^    (?P<key>\w+): (?P<value>\S.*?)\s*$"
_CONFIG_KEYS = (*_OVERRIDE_FACTS, "model_type")


def read_config(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """A project's printed config: each numeric key's fact (``None`` is no value: the data's block size, not
    the model's), the model's shape from its ``model_type`` preset."""
    lines = (
        blocks.filter(pl.col("role") == BODY)
        .select("order", line=pl.col("text").str.extract_groups(_CONFIG_LINE))
        .unnest("line")
        .filter(pl.col("key").is_in(_CONFIG_KEYS))
    )
    count = pl.col("value").cast(pl.Int64, strict=False)
    counts = lines.filter(count > 0, pl.col("key") != "model_type").select(
        "order",
        fact=pl.col("key").replace_strict(_OVERRIDE_FACTS, default=None, return_dtype=pl.String),
        value=count,
        family=pl.lit(NAME),
    )
    presets = lines.filter(pl.col("key") == "model_type", pl.col("value").is_in(list(MODEL_TYPES)))
    shape = [
        presets.select(
            "order",
            fact=pl.lit(fact),
            value=pl.col("value").replace_strict(
                {name: dims[axis] for name, dims in MODEL_TYPES.items()}, return_dtype=pl.Int64
            ),
            family=pl.lit(NAME),
        )
        for axis, fact in enumerate(("num_layers", "num_heads", "hidden_size"))
    ]
    openers = blocks.filter(pl.col("role") != BODY)
    facts = pl.concat([counts, *shape]).collect()
    return Events(facts=[facts], marks=[marks_of(openers, NAME, SEEN)])


CONFIG = Block(
    family=NAME,
    name="config",
    opens=RecordTest(markers=(_CONFIG_OPENER_MARKER,), pattern=_CONFIG_OPENER),
    body=RecordTest(pattern=_CONFIG_LINE),
    markers=tuple(f"{key}: " for key in _CONFIG_KEYS),
    # the project's data and model print right after it
    ends=RecordTest(markers=(_DEVICE,)),
    max_lines=40,
    read=read_config,
    facts=(*dict.fromkeys(_OVERRIDE_FACTS.values()), "num_layers", "num_heads", "hidden_size"),
)


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
    if text.startswith(_DEVICE) and text.rstrip().endswith("cuda"):
        # its Trainer drives one device, a batch a step (no accumulation); its GPT recomputes nothing
        for fact in ("gpus", "dp", "gas"):
            run.set_fact(fact, 1, NAME, lineno)
        run.set_fact("activation_checkpointing", False, NAME, lineno)
    if characters := _CHARACTERS.match(text):
        run.set_fact("vocab_size", int(characters[1]), NAME, lineno)
    if (override := _OVERRIDE.search(text)) and (fact := _OVERRIDE_FACTS.get(override[1])):
        run.set_fact(fact, int(override[2]), NAME, lineno)
        run.saw(NAME)


def finish(run: RunBuilder) -> None:
    """A minGPT project's Trainer stops at ``max_iters`` without a word, its callback having printed every
    ``interval`` iterations by their 0-based number: a run whose last print is the last its plan makes
    (``last < max_iters <= last + interval``: iter 4990 of 5000, every 10) ran to its end. One killed
    within its last interval reads the same."""
    planned, frame = run.facts.get("train_iters"), run.iteration_frame
    if not isinstance(planned, int) or frame is None:
        return
    printed = frame.filter(pl.col("family") == NAME).sort("iteration").tail(2)
    if printed.height < 2:
        return
    before, last = printed.rows(named=True)
    interval = last["iteration"] - before["iteration"]
    if interval > 0 and last["iteration"] < planned <= last["iteration"] + interval:
        evidence = (
            f"the last iteration its planned {planned} print (0-based, every {interval}): {last['iteration']}"
        )
        run.completion = (evidence, last["line"], last["source_path"] or run.current_file, run.position)


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
        _EPOCH_BAR_MARKER,
        _PARAMETERS_MARKER,
        _CONFIG_OPENER_MARKER,
        " characters, ",
    ),
    parse_line=parse_line,
    finish=finish,
    kinds=(
        RecordKind(
            family=NAME,
            name="step",
            test=RecordTest(markers=(_STEP_MARKER,), pattern=STEP_LINE),
            read=read_steps,
        ),
        RecordKind(
            family=NAME,
            name="epoch bar",
            test=RecordTest(markers=(_EPOCH_BAR_MARKER,), pattern=EPOCH_BAR),
            read=read_epoch_bars,
        ),
        RecordKind(
            family=NAME,
            name="parameters",
            test=RecordTest(markers=(_PARAMETERS_MARKER,), pattern=PARAMETERS),
            read=read_parameters,
            facts=("logged_model_size",),
        ),
    ),
    blocks=(CONFIG,),
    description="minGPT: the Lightning benchmark's average epoch time, peak CUDA memory and command line; "
    "minGPT projects' iteration lines and config overrides",
)

"""torchtune log family (PyTorch's fine-tuning library, github.com/pytorch/torchtune, 0.2-0.6): its recipes
(``tune run lora_finetune_single_device --config ...``, ``tune run --nproc_per_node 8
full_finetune_distributed ...``) log through Python's logging (``INFO:torchtune.utils._logging:...``) and a
tqdm bar on rank 0.

Lines read, each fact with its source:

- the training bar, one update per optimizer step: the recipe calls ``pbar.update(1)`` then
  ``pbar.set_description(f"{curr_epoch + 1}|{self.global_step}|Loss: {loss_to_log}")``, so each step
  prints ``1|412|Loss: 0.9501211643218994:  13%|█▎        | 412/3235 [40:13<4:36:43,  5.88s/it]`` (the
  description's step, its loss; the bar's count within the epoch, its total ``steps_per_epoch``, tqdm's
  rate). The step's row is that record: the one whose count is the step's within its epoch, ``(epoch - 1)
  x total + count = step`` (the update before it shows the step before's description); its time is tqdm's
  rate there, an exponential moving average of the steps' times (``smoothing`` 0.3), so each row's is a
  smoothed one and their mean the run's. A record whose bar is cut off is still its step's.
- the metric logger's ``StdoutLogger`` line every ``log_every_n_steps``: ``Step 10 | loss:1.5234
  lr:2.9e-05 tokens_per_second_per_gpu:1520.44 ...`` (``DiskLogger`` writes the same lines to a file of its
  own): the step's loss and learning rate.
- ``Running LoRAFinetuneRecipeSingleDevice with resolved config:`` then the config as sorted YAML
  (``OmegaConf.to_yaml``; a ``Block``): ``batch_size`` -> ``micro_batch_size``,
  ``gradient_accumulation_steps`` -> ``gas``, ``tensor_parallel_dim`` (0.6) -> ``tp``, an integer ``max_seq_len`` (the tokenizer's or dataset's) ->
  ``seq_len``, ``enable_activation_checkpointing``, ``dtype`` -> ``precision``. A single-device recipe
  (its class's name) is one GPU; a distributed one's GPUs are ``tune run``'s ``--nproc_per_node`` (the
  torch launcher's flags, read with the other launchers'). The recipes parallelize data alone (FSDP or
  one device) but for 0.6's tensor parallel: TP (unless stated) and PP are 1, so DP is the GPUs.
- a resumed run (``resume_from_checkpoint: true``, from an epoch's checkpoint): its first step, past an
  epoch's end, of a log that holds its config; the step before it is the one resumed from.
- the final checkpoint (``Saving final epoch checkpoint.``, the checkpointer's after the last epoch, 0.3
  on): the run's end. A run whose log stops without it is incomplete.

Failures (tracebacks, CUDA OOM, the launcher's errors) are the Slurm family's, read from any log.
"""

from __future__ import annotations

import polars as pl
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
    code_frames,
    facts_of,
    last_per_run,
    literals,
    marks_of,
    step_lines,
)

NAME = "torchtune"

# --- the steps, read column-wise ---------------------------------------------------------------------

#: the bar's description (epoch, step, loss), then, where not cut off, the bar's count and total and tqdm's
#: rate (``{1/rate:5.2f}s/it`` at over a second a step, else ``{rate:5.2f}it/s``; ``?it/s`` at first)
BAR_LINE = (
    rf"^(\d+)\|(\d+)\|Loss: ({NUMBER})"
    rf"(?::\s+\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^\],]*,\s*(?:({NUMBER})(s/it|it/s))?)?"
)
_BAR_MARKER = "|Loss: "
#: StdoutLogger's ``log_dict``: ``Step {step} | `` then ``{name}:{data} `` a metric
METRICS_LINE = rf"^Step (\d+) \| loss:({NUMBER}) lr:({NUMBER})"
_METRICS_MARKER = " | loss:"


def read_bar(records: pl.LazyFrame) -> Events:
    """A step event per bar update showing its own step's count (see the module's docstring), and the
    bar's total, an epoch's steps."""
    fields = pl.col("text").str.extract_groups(BAR_LINE)
    epoch, step = as_count(fields.struct["1"]), as_count(fields.struct["2"])
    count, total = as_count(fields.struct["4"]), as_count(fields.struct["5"])
    rate = as_real(fields.struct["6"])
    seconds = pl.when(fields.struct["7"] == "s/it").then(rate).when(rate > 0).then(1 / rate)
    its_own = count.is_null() | ((epoch - 1) * total + count == step)
    events = step_lines(
        records,
        NAME,
        step=pl.when(its_own & (step > 0)).then(step),
        loss=as_real(fields.struct["3"]),
        elapsed_ms=seconds * 1000,
    )
    last = last_per_run(records, its_own & (total > 0))
    events.facts.append(facts_of(last, NAME, steps_per_epoch=total).collect())
    return events


def read_metrics(records: pl.LazyFrame) -> Events:
    """A step event per metric logger line: its loss and learning rate."""
    fields = pl.col("text").str.extract_groups(METRICS_LINE)
    step = as_count(fields.struct["1"])
    return step_lines(
        records,
        NAME,
        step=pl.when(step > 0).then(step),
        loss=as_real(fields.struct["2"]),
        lr=as_real(fields.struct["3"]),
    )


# --- the resolved config, read column-wise ------------------------------------------------------------

_OPENER = " with resolved config:"
#: ``config.log_config``'s ``Running {recipe_name} with resolved config:``, the recipe's class name
OPENER_LINE = rf"Running (\w+){_OPENER}\s*$"
_COUNTS = {
    "batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
    "tensor_parallel_dim": "tp",
    "epochs": "train_epochs",
}
_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}
#: a top-level key's line (sorted keys, no indentation), or ``max_seq_len`` at any depth (the tokenizer's
#: or, before 0.3, the dataset's)
CONFIG_LINE = (
    rf"^(?P<key>{'|'.join(_COUNTS)}|enable_activation_checkpointing|dtype): (?P<value>\S+)$"
    r"|^\s+(?P<length>max_seq_len): (?P<tokens>\d+)$"
)
_CONFIG_MARKERS = (
    *(f"{key}: " for key in _COUNTS),
    "enable_activation_checkpointing: ",
    "dtype: ",
    "max_seq_len: ",
)


def read_config(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The facts of the resolved config's lines, and a single-device recipe's one GPU."""
    body = blocks.filter(pl.col("role") == BODY)
    openers = blocks.filter(pl.col("role") != BODY)
    found = body.select("order", parts=pl.col("text").str.extract_groups(CONFIG_LINE)).unnest("parts")
    key, value = pl.col("key"), pl.col("value")
    counts = found.filter(key.is_in(list(_COUNTS))).select(
        "order",
        fact=key.replace_strict(_COUNTS, return_dtype=pl.String),
        value=as_count(value),
        family=pl.lit(NAME),
    )
    lengths = facts_of(found.filter(pl.col("length").is_not_null()), NAME, seq_len=as_count(pl.col("tokens")))
    checkpointing = facts_of(
        found.filter(key == "enable_activation_checkpointing"),
        NAME,
        activation_checkpointing=value.replace_strict({"true": True, "false": False}, default=None),
    )
    precision = facts_of(
        found.filter(key == "dtype"),
        NAME,
        precision=value.replace_strict(_PRECISION, default=None, return_dtype=pl.String),
    )
    recipe = pl.col("text").str.extract(OPENER_LINE)
    one_device = facts_of(openers, NAME, gpus=pl.when(recipe.str.ends_with("SingleDevice")).then(1))
    frames = (counts.filter(pl.col("value") > 0), lengths.filter(pl.col("value") > 0), checkpointing)
    return Events(
        facts=[frame.drop_nulls("value").collect() for frame in (*frames, precision, one_device)],
        marks=[marks_of(openers, NAME, SEEN)],
    )


CONFIG = Block(
    family=NAME,
    name="config",
    opens=RecordTest(markers=(_OPENER,), pattern=OPENER_LINE),
    body=RecordTest(pattern=CONFIG_LINE),
    # no markers: other programs' YAML (NeMo's micro_batch_size:, max_epochs:) holds these keys thousands of
    # times a log; the config is once a run, so its lines are searched after its opener only
    hint=literals(_CONFIG_MARKERS),
    max_lines=300,
    read=read_config,
    facts=(*_COUNTS.values(), "seq_len", "activation_checkpointing", "precision", "gpus"),
)

# --- the rare lines, read in Python ---------------------------------------------------------------

_FINAL_CHECKPOINT = "Saving final epoch checkpoint."


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """The final checkpoint: the run's end."""
    line = text.strip()
    if line.endswith(_FINAL_CHECKPOINT):
        run.saw(NAME)
        run.complete(line, lineno)


def finish(run: RunBuilder) -> None:
    """Of a torchtune run, TP 1 where the config states none and PP 1 (the module's docstring), and its
    planned steps: the config's epochs of the bar's steps (the reader's completion, where the last step
    reached them)."""
    if not run.families_seen.get(NAME):
        return
    run.data_parallel_only()  # a config's tensor_parallel_dim is stated, so kept
    epochs, per_epoch = run.facts.get("train_epochs"), run.facts.get("steps_per_epoch")
    if "train_iters" not in run.facts and isinstance(epochs, int) and isinstance(per_epoch, int):
        run.set_fact("train_iters", epochs * per_epoch, "derived", 0)
    _resumed(run, per_epoch)


def _resumed(run: RunBuilder, per_epoch: object) -> None:
    """A run whose log holds its config and whose first step starts a later epoch resumed there: a recipe
    resumes from an epoch's checkpoint (``resume_from_checkpoint: true``), its global step the epochs run
    times an epoch's steps."""
    frame = run.iteration_frame
    if frame is None or "resumed_step" in run.facts or not isinstance(per_epoch, int) or per_epoch <= 0:
        return
    mine = frame.filter(pl.col("family") == NAME).sort("iteration")
    if "train_epochs" in run.facts and mine.height and (first := mine.row(0, named=True))["iteration"] > 1:
        if (first["iteration"] - 1) % per_epoch == 0:
            run.set_fact("resumed_step", first["iteration"] - 1, NAME, first["line"] or 0)


#: torchtune's code in a traceback's frames
CODE = ("/torchtune/",)

FAMILY = Family(
    name=NAME,
    markers=(_BAR_MARKER, _METRICS_MARKER, _OPENER, _FINAL_CHECKPOINT, *CODE),
    parse_line=parse_line,
    finish=finish,
    kinds=(
        RecordKind(
            family=NAME,
            name="bar",
            test=RecordTest(markers=(_BAR_MARKER,), pattern=BAR_LINE),
            read=read_bar,
            facts=("steps_per_epoch",),
        ),
        RecordKind(
            family=NAME,
            name="metrics",
            test=RecordTest(markers=(_METRICS_MARKER,), pattern=METRICS_LINE),
            read=read_metrics,
        ),
        code_frames(NAME, CODE),
    ),
    blocks=(CONFIG,),
    description="torchtune: the training bar (epoch, step, loss, tqdm's rate), the metric logger's lines, "
    "the resolved config, the final checkpoint",
)

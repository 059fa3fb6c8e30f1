"""LitGPT log family (Lightning AI's LitGPT, github.com/Lightning-AI/litgpt, and lit-gpt before it): its
pretraining and fine-tuning scripts on Lightning Fabric, which print with ``fabric.print`` (rank 0).

Lines read, each fact with its source (LitGPT 0.4-0.5; lit-gpt 2023):

- the step line, every ``train.log_interval`` iterations (micro-batches), a step each by its optimizer step
  count: 2024's litgpt/pretrain.py and finetune/*.py ``Epoch 1 | iter 3200 step 200 | loss train: 1.098, val:
  1.137 | iter time: 463.91 ms (step)`` (pretrain adds ``remaining time: 0:12:34``), 2023's ``iter 100 step
  25: loss 2.1234, iter time: 456.78ms (optimizer.step)``. ``iter time`` is one micro-batch's (the last
  of the step on a ``(step)`` line); a step is ``iter / step`` of them (the gradient accumulation: both
  counters are restored on a resume), so it took that many times the iteration's time, the micro-batches
  of a step being alike. An accumulating iteration's line (no ``(step)``; with ``log_interval`` 1, all but
  one of a step's) is not read: it repeats the last step's count, with no time of a step. lit-llama's and
  mid-2023 lit-gpt's ``iter 212: loss 1.4321, time: 1381.20ms`` prints no step count: its iteration is the
  row.
- the arguments ``pprint`` prints at the start (``'devices': 4,``, ``'num_nodes': 1,``, then finetuning's
  ``'train': TrainArgs(save_interval=1000, log_interval=1, global_batch_size=16, ...)``, one field a line on
  Python 3.10 and later, or pretraining's ``capture_hparams`` dict, ``'train': {'epochs': None,`` then
  ``'global_batch_size': 512,`` a line): GPUs (devices x nodes, stated once the training's arguments follow
  them), the global and micro batch, ``max_steps`` (the planned steps) and ``max_seq_length``, where they are
  numbers.
- lit-gpt 2023's pretraining scripts' ``Loading model with {..., 'block_size': 2048, ...}``: the sequence
  length (their batches are ``block_size`` tokens; finetuning's ``Loading model '<path>' with`` is not read).
- lit-gpt 2023's hyperparameters dict (``{'eval_interval': 600, ..., 'devices': 4, ..., 'micro_batch_size': 1,
  'gradient_accumulation_iters': 16.0, ...}``): GPUs (one node), micro batch and accumulation.
- ``Total parameters: 1,100,048,384`` (pretrain), ``Number of trainable parameters: 3,407,872`` then
  ``Number of non-trainable parameters: 8,030,261,248`` (LoRA), or the trainable count alone (full
  finetuning; after the arguments): the logged size, the whole model's.
- ``Resuming training from out/pretrain/step-00010000/lit_model.pth`` (checkpoints are saved as
  ``step-{step_count:08d}``): the resumed step.
- the end of training: ``Training time: 1543.27s`` (2023-2024) or the performance report's ``| - Training
  Time : 1543.27 s``, and ``Memory used: 22.31 GB`` / ``| - Memory Used : 22.31 GB``
  (``torch.cuda.max_memory_allocated() / 1e9``): the run's end and its peak memory.

Lightning Fabric's ``Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4`` (the world size) is read by the
NeMo family, which reads Lightning's lines; failures are the Slurm family's, read from any log, but
``check_valid_checkpoint_dir``'s refusal of a checkpoint directory (``checkpoint_dir '...' is missing the files:
['lit_model.pth'].``), printed before a ``SystemExit(1)`` with no traceback: the run's cause.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers.base import Family, RunBuilder, never_raises
from logstat.parsers.kinds import (
    NUMBER,
    Events,
    RecordKind,
    RecordTest,
    as_count,
    as_real,
    code_frames,
    step_lines,
)
from logstat.parsers.schema import MIB

NAME = "litgpt"

#: both generations' step line, of an iteration that ran the optimizer (``(step)`` / ``(optimizer.step)``):
#: the iteration, the optimizer step, the training loss, the iteration's time. An accumulating iteration's
#: line (with ``log_interval`` 1, all but one of a step's) is not read: its step's is
STEP_LINE = (
    rf"\biter (\d+) \|? ?step (\d+):? \|? ?loss (?:train: )?({NUMBER}),"
    rf".*?\biter time: ?({NUMBER}) ?ms \((?:optimizer\.)?step\)"
)
_STEP_MARKERS = ("ms (step)", "ms (optimizer.step)")
#: lit-llama's and mid-2023 lit-gpt's line (finetune/adapter.py, lora.py: ``iter {iter_num}: loss {loss:.4f},
#: time: {dt*1000:.2f}ms``): the iteration (a micro-batch; the optimizer's steps are not printed), its loss and
#: time. Not nanoGPT's ``iter N: loss X, time Tms`` (no colon after ``time``)
ITERATION_LINE = rf"\biter (\d+): loss ({NUMBER}), time: ({NUMBER}) ?ms"
_ITERATION_MARKERS = (", time: ",)


def read_iterations(records: pl.LazyFrame) -> Events:
    """A step event per ITERATION_LINE, the iteration its step."""
    fields = pl.col("text").str.extract_groups(ITERATION_LINE)
    loss, milliseconds = as_real(fields.struct["2"]), as_real(fields.struct["3"])
    return step_lines(records, NAME, step=as_count(fields.struct["1"]), loss=loss, elapsed_ms=milliseconds)


def read_steps(records: pl.LazyFrame) -> Events:
    """A step event per step line; the step's time where its iterations are a whole number of steps (see
    the module's docstring)."""
    fields = pl.col("text").str.extract_groups(STEP_LINE)
    iteration, step = as_count(fields.struct["1"]), as_count(fields.struct["2"])
    loss, milliseconds = as_real(fields.struct["3"]), as_real(fields.struct["4"])
    stepped = (step > 0) & (iteration % step == 0)
    return step_lines(
        records,
        NAME,
        step=pl.when(step > 0).then(step),
        loss=loss,
        elapsed_ms=pl.when(stepped).then(milliseconds * (iteration // step)),
    )


# --- the rare lines, read in Python ---------------------------------------------------------------

#: a ``pprint`` line of the arguments' dict: ``'devices': 4,`` (the first key's line opens with ``{``)
_LAUNCH_ARGUMENT = re.compile(r"^[{ ]'(devices|num_nodes)': (\d+),$")
#: the training's arguments: finetuning prints the TrainArgs dataclass (``pprint(locals())``), pretraining
#: them as a dict (``capture_hparams``: ``'train': {'epochs': None,``, then ``'global_batch_size': 64,``)
_TRAIN_ARGS = ("TrainArgs(", "'train': {")
#: the TrainArgs' fields read, each a fact
_TRAIN_FACTS = {
    "global_batch_size": "global_batch_size",
    "micro_batch_size": "micro_batch_size",
    "max_steps": "train_iters",
    "max_seq_length": "seq_len",
}
#: a field read, on the TrainArgs' opener's line or one of its own after it, where it is a number
_TRAIN_FIELD = re.compile(rf"\b({'|'.join(_TRAIN_FACTS)})(?:=|': )(\d+)\b")
#: how far the TrainArgs' fields (one a line) and the launch arguments before them (sorted keys between)
#: reach from the TrainArgs' opener
_TRAIN_ARGS_LINES, _LAUNCH_ARGUMENT_LINES = 20, 200
#: lit-gpt 2023's scripts print their module-level hyperparameters as one dict (``fabric.print(hparams)``):
#: ``{'eval_interval': 600, ..., 'devices': 4, ..., 'batch_size': 16.0, 'micro_batch_size': 1,
#: 'gradient_accumulation_iters': 16.0, 'max_iters': 150000, ...}`` (``batch_size`` is a device's; ``max_iters``
#: counts micro-batches); one node
_HPARAMS = "'gradient_accumulation_iters': "
_HPARAM = re.compile(r"'(devices|micro_batch_size|gradient_accumulation_iters)': (\d+)(?:\.0)?[,}]")
_HPARAM_FACTS = {
    "devices": "gpus",
    "micro_batch_size": "micro_batch_size",
    "gradient_accumulation_iters": "gas",
}
_TOTAL = re.compile(r"^Total parameters: (\d{1,3}(?:,\d{3})+|\d{1,3})$")
_SPLIT_COUNT = re.compile(r"^Number of (non-)?trainable parameters: (\d{1,3}(?:,\d{3})*)$")
_RESUMING = re.compile(r"^Resuming training from \S*\bstep-0*(\d+)\b")
_TRAINING_TIME = re.compile(r"^(?:\| - )?Training [Tt]ime\s*:\s*[\d.]+\s*s$")
#: lit-gpt 2023's pretraining scripts' model config (pretrain/redpajama.py, tinyllama.py: ``Loading model with
#: {'name': 'tiny-llama-1.1b', ..., 'block_size': 2048, ...}``), whose batches are ``block_size`` tokens: the
#: length trained on. Not finetuning's ``Loading model '<checkpoint>' with {...}``: its data's length is its own
_PRETRAINING_MODEL_OPENER = "Loading model with {"
_PRETRAINING_BLOCK = re.compile(r"^Loading model with \{.*?'block_size': (\d+)[,}]")
#: litgpt/utils.py's check_valid_checkpoint_dir, printed to stderr before ``raise SystemExit(1)`` (no
#: traceback: the scheduler's exit code comes next): ``checkpoint_dir '/ckpt/Meta-Llama-3-8B' is missing the
#: files: ['lit_model.pth'].`` or ``... is not a checkpoint directory.``
_INVALID_CHECKPOINT_DIR = "checkpoint_dir '"
_INVALID_CHECKPOINT = re.compile(
    r"^checkpoint_dir '.*'(?: is missing the files: .*| is not a checkpoint directory)\.$"
)
_MEMORY_USED = re.compile(r"^(?:\| - )?Memory [Uu]sed\s*:\s*(\d+(?:\.\d+)?)\s*GB$")
_END_MARKERS = ("Training time", "Training Time", "Memory used", "Memory Used")


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """LitGPT's arguments, parameter counts, resume and end (see the module's docstring); never raises."""
    line = text.strip()
    state = run.state.setdefault(NAME, {})
    in_train_args = lineno - state.get("train_args", -_TRAIN_ARGS_LINES) < _TRAIN_ARGS_LINES
    if _HPARAMS in text and line.startswith("{"):
        state["train_args"] = lineno
        run.saw(NAME)
        for name, value in _HPARAM.findall(line):
            if int(value) > 0:
                run.set_fact(_HPARAM_FACTS[name], int(value), NAME, lineno)
    elif argument := _LAUNCH_ARGUMENT.match(text):
        state[argument[1]] = (int(argument[2]), lineno)
    elif any(opener in text for opener in _TRAIN_ARGS):
        _open_train_args(lineno, run, state)
        _read_train_fields(text, lineno, run)
    elif in_train_args and _TRAIN_FIELD.search(text):
        _read_train_fields(text, lineno, run)
    elif total := _TOTAL.match(line):
        run.set_fact("logged_model_size", int(total[1].replace(",", "")) / 1e9, NAME, lineno)
    elif count := _SPLIT_COUNT.match(line):
        _read_split_count(count[1] is None, int(count[2].replace(",", "")), lineno, run, state)
    elif resuming := _RESUMING.match(line):
        run.set_fact("resumed_step", int(resuming[1]), NAME, lineno)
    elif _TRAINING_TIME.match(line):
        run.complete(line, lineno)
    elif memory := _MEMORY_USED.match(line):
        run.set_fact("peak_memory_mib", round(float(memory[1]) * 1e9 / MIB, 2), NAME, lineno)
    elif block := _PRETRAINING_BLOCK.match(line):
        run.saw(NAME)
        run.set_fact("seq_len", int(block[1]), NAME, lineno)
    elif _INVALID_CHECKPOINT.match(line):
        run.saw(NAME)
        run.fail("failed", line, lineno, kind="checkpoint")


def _open_train_args(lineno: int, run: RunBuilder, state: dict) -> None:
    """The TrainArgs' opener: LitGPT's, and the launch arguments printed just before it its GPUs."""
    state["train_args"] = lineno
    run.saw(NAME)
    devices, nodes = (state.get(name, (0, -_LAUNCH_ARGUMENT_LINES)) for name in ("devices", "num_nodes"))
    if devices[0] and lineno - devices[1] < _LAUNCH_ARGUMENT_LINES:
        near_nodes = nodes[0] if nodes[0] and lineno - nodes[1] < _LAUNCH_ARGUMENT_LINES else 1
        run.set_fact("gpus", devices[0] * near_nodes, NAME, lineno)


def _read_train_fields(text: str, lineno: int, run: RunBuilder) -> None:
    for name, value in _TRAIN_FIELD.findall(text):
        if int(value) > 0:
            run.set_fact(_TRAIN_FACTS[name], int(value), NAME, lineno)


def _read_split_count(trainable: bool, count: int, lineno: int, run: RunBuilder, state: dict) -> None:
    """Finetuning's counts: trainable, then (LoRA's, an adapter's) non-trainable; their sum is the model's
    size, the trainable count alone (full finetuning's one line) of a LitGPT run too."""
    if trainable:
        state["trainable"] = count
        if "train_args" in state:
            run.set_fact("logged_model_size", count / 1e9, NAME, lineno)
    elif "trainable" in state:
        run.set_fact("logged_model_size", (state.pop("trainable") + count) / 1e9, NAME, lineno)


def finish(run: RunBuilder) -> None:
    """Of a LitGPT run, TP and PP 1 where nothing states them: its training scripts shard data and states
    (Fabric's FSDP or DDP), never the layers' matrices or their stack, so its DP is its GPUs."""
    if run.families_seen.get(NAME):
        run.data_parallel_only()


#: LitGPT's code in a traceback's frames
CODE = ("/litgpt/",)

FAMILY = Family(
    name=NAME,
    markers=(
        *_STEP_MARKERS,
        *_ITERATION_MARKERS,
        "'devices': ",
        "'num_nodes': ",
        *_TRAIN_ARGS,
        *(f"{field}=" for field in _TRAIN_FACTS),
        *(f"'{field}': " for field in _TRAIN_FACTS),
        "Total parameters: ",
        "trainable parameters: ",
        "Resuming training from ",
        _INVALID_CHECKPOINT_DIR,
        _PRETRAINING_MODEL_OPENER,
        _HPARAMS,
        *_END_MARKERS,
        *CODE,
    ),
    parse_line=parse_line,
    finish=finish,
    kinds=(
        RecordKind(
            family=NAME,
            name="step",
            test=RecordTest(markers=_STEP_MARKERS, pattern=STEP_LINE),
            read=read_steps,
        ),
        RecordKind(
            family=NAME,
            name="iteration",
            test=RecordTest(markers=_ITERATION_MARKERS, pattern=ITERATION_LINE),
            read=read_iterations,
        ),
        code_frames(NAME, CODE),
    ),
    description="LitGPT: step lines (iter, optimizer step, loss, iteration time), TrainArgs, parameter "
    "counts, resume and end",
)

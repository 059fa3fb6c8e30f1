"""HF Trainer log family: logged dicts, final train metrics, the TrainingArguments dump, the model shape.

Formats read from transformers' own source (``trainer_callback.py``, ``trainer_pt_utils.py``,
``training_args.py``, ``trainer.py``) and from the 2021 real log:

- ``PrinterCallback``/``ProgressCallback`` print each log as a Python dict:
  ``{'loss': 2.3, 'learning_rate': 5e-05, 'epoch': 0.1}`` (2021: raw floats; today: ``'4.705'``
  strings formatted with ``.4g``, plus ``'grad_norm'``); the final one holds ``train_runtime``,
  ``train_samples_per_second``, ``train_steps_per_second``, ``train_loss``. Every node's local rank 0
  prints, so a 16-node job prints each dict 16 times: identical dicts are one logging step.
- ``log_metrics``: ``***** train metrics *****`` then ``  train_runtime            = 0:01:23.45`` lines.
- ``TrainingArguments.__str__``: ``TrainingArguments(`` then one ``name=value,`` per line, then ``)``
  (older versions: the dataclass repr on one line).
- ``***** Running training *****``: ``Instantaneous batch size per device = 8`` and friends.
- The model shape: ``--config_overrides n_embd=...,n_layer=...`` on the echoed command line or
  ``Overriding config: ...`` (run_clm), and the printed ``GPT2Config {...}`` JSON; an overridden key is
  never replaced by a config printed later (2021's run_clm printed the tokenizer's base gpt2 config next).
- tqdm's progress bar (``ProgressCallback``): `` 45%|████▌     | 450/1000 [1:02:30<1:16:23,  8.33s/it]``;
  the last update of the training bar gives the step time.
- Launch context, for the GPU count (a Trainer prints none): ``--nproc_per_node 4 --nnodes 16``,
  ``WORLD_SIZE=64``, DeepSpeed's launcher ``dist_world_size=64``, ``world_size=64``, torch elastic's
  ``global_world_sizes=[...]``; these are no evidence of the HF Trainer.

Dicts carry no step number: the n-th distinct training dict is step ``n * logging_steps``
(``logging_steps`` from the TrainingArguments dump or the command line known before it; step 1 first
when ``logging_first_step``); without ``logging_steps`` the step is the dict's position ``n``.

How it is read. The family's records weigh each other: a dump's ``logging_steps`` numbers the dicts
logged after it, an override keeps a later printed config's key, the metrics block and the final dicts
weigh their digits, the training bar is the one updated last before a dict. So every record of the
family is read in one place, ``read_trainer``, column-wise: the four blocks below share it and the
engine reads them together. ``ARGUMENTS``, ``CONFIG`` and ``METRICS`` are the multi-line blocks, each
ended where the Trainer's printing ends it (and, as one block at a time was read before, by another
block's opening line); ``TRAINER`` takes every record of the family, from its first to the end of its
file. The records that are few per run (command lines, launcher lines, the metrics block's lines, final
dicts and dicts that are not plain literals) are read by the Python functions at the end of this
module, once per distinct text.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
from logstat.parsers import grammar
from logstat.parsers.base import INT64_MAX, INT64_MIN, Family, RunBuilder
from logstat.parsers.kinds import (
    BODY,
    CLOSER,
    OPENER,
    PYTHON_SPACE,
    RECORD,
    SEEN,
    Block,
    Events,
    RecordKind,
    RecordTest,
    literals,
)
from pyparsing import pyparsing_common as ppc

NAME = "hf-trainer"

# --- records ---------------------------------------------------------------------------------------

#: keys of the dicts the Trainer logs; other dicts (DeepSpeed's config values) are not ours.
_TRAINER_KEYS = ("'loss'", "'learning_rate'", "'train_runtime'", "'train_samples_per_second'", "'epoch'")
#: the keys of the final dict (the run's metrics): such a dict is no training step
_FINAL_KEYS = ("'train_runtime'", "'train_samples_per_second'")
#: a tqdm update's rate (``4.22it/s]``, ``1.44s/it]``)
_RATES = ("it/s]", "s/it]")
_METRICS_BANNER = "***** train metrics *****"
_ARGS_MARKER = "TrainingArguments("

#: a multi-line block (TrainingArguments, model config, metrics) is read at most this many lines.
BLOCK_MAX_LINES = 400

_SPACE = PYTHON_SPACE
#: a line of the multi-line TrainingArguments dump: ``per_device_train_batch_size=8,`` (any ``name=``)
_ARGS_FIELD = rf"^{_SPACE}*(\w+)=(.*)$"
#: the dump's last line
_ARGS_CLOSER = rf"^{_SPACE}*\){_SPACE}*$"
#: the dump's first line (``Training/evaluation parameters TrainingArguments(``); with fields after the
#: parenthesis on the same line, it is the one-line dump of older versions
_ARGS_OPENER = rf"TrainingArguments\({_SPACE}*$"
#: ``Model config GPT2Config {``: a printed model config, ``json.dumps(indent=2)`` up to its ``}``
_CONFIG_OPENER = rf"Config \{{{_SPACE}*$"
#: one ``"key": value,`` line of a printed config (a nested object's lines are skipped)
_CONFIG_JSON = rf'^{_SPACE}*"(\w+)"{_SPACE}*:{_SPACE}*([^,]*?){_SPACE}*,?{_SPACE}*$'
#: a ``name = value`` line of the train metrics block (``log_metrics``)
_METRIC = rf"^{_SPACE}*[A-Za-z_][A-Za-z0-9_]*[ \t]*="
#: a tqdm update at the start of a line, e.g. `` 83%|████████▎ | 5/6 [00:01<00:00,  4.55it/s]``
_BAR_START = rf"^{_SPACE}*\d{{1,3}}%\|"
#: a logged dict, cut short or not
_DICT = r"\{'[^{}]*\}?"
#: an update of a tqdm bar without description (the Trainer's ``tqdm(total=max_steps)``):
#: ``' 45%|████▌     | 450/1000 [1:02:30<1:16:23,  8.33s/it]'``. tqdm's ``format_meter`` writes
#: ``| {n}/{total} [{elapsed}<{remaining}, {rate_fmt}{postfix}]``, the rate ``{rate:5.2f}it/s``, or
#: ``{1/rate:5.2f}s/it`` when a step takes over a second; ``?it/s`` before the first step is no rate.
_TRAINING_BAR = rf"^{_SPACE}*\d{{1,3}}%\|[^|]*\| *(\d+)/(\d+) \[[^\],]*, *(\d+\.\d+)(s/it|it/s)\]"
_TRAIN_BANNER = (
    r"(Instantaneous batch size per device|Total train batch size \(w\. parallel, distributed & accumulation\)"
    r"|Gradient Accumulation steps|Total optimization steps|Number of trainable parameters) = ([\d,]+)"
)
_TRAIN_OUTPUT = r"TrainOutput\(global_step=(\d+),"
#: the world size as launchers and DeepSpeed print it: ``dist_world_size=64`` (DeepSpeed's launcher),
#: ``world_size=64`` (DeepSpeed's MPI discovery, torch elastic's workers), ``WORLD_SIZE=64`` (the
#: environment, a ``set -x`` echo), torch elastic's ``global_world_sizes=[64, 64, ...]``; not after a word
#: character, which keeps out a node's (``LOCAL_WORLD_SIZE``), a role's, the node count
#: (``group_world_size``) and DeepSpeed's data-parallel ``dp_world_size``.
_WORLD_SIZE = r"(?:^|[^\w])(?:dist_world_size|world_size|WORLD_SIZE)=(\d+)\b|global_world_sizes=\[(\d+)"
#: launchers whose ``--nnodes`` defaults to one node (torch.distributed.launch, torch.distributed.run).
_TORCH_LAUNCHERS = ("torch.distributed.launch", "torch.distributed.run", "torchrun")

_BANNER_FACTS = {
    "Instantaneous batch size per device": "micro_batch_size",
    "Total train batch size (w. parallel, distributed & accumulation)": "global_batch_size",
    "Gradient Accumulation steps": "gas",
    "Total optimization steps": "train_iters",
}
#: TrainingArguments fields that are run facts (integers).
_ARGS_INT_FACTS = {
    "per_device_train_batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
}
#: the TrainingArguments fields read: facts and what later records need (a logged dict's step, full
#: precision when the dump ends, the GPU count of one process); the others are skipped.
_ARGS_READ = frozenset(
    [
        *_ARGS_INT_FACTS,
        "fp16",
        "bf16",
        "gradient_checkpointing",
        "activation_checkpointing",
        "max_steps",
        "local_rank",
        "_n_gpu",
        "logging_steps",
        "logging_first_step",
        "deepspeed",
    ]
)
#: model-config keys (GPT-2 names and the generic ones) -> fact.
_SHAPE_KEYS = {
    "n_embd": "hidden_size",
    "hidden_size": "hidden_size",
    "n_layer": "num_layers",
    "num_hidden_layers": "num_layers",
    "n_head": "num_heads",
    "num_attention_heads": "num_heads",
    "n_inner": "ffn_hidden_size",
    "intermediate_size": "ffn_hidden_size",
    "vocab_size": "vocab_size",
    "n_positions": "seq_len",
    "max_position_embeddings": "seq_len",
    "num_key_value_heads": "num_query_groups",  # grouped-query attention (Llama 2 70B, Llama 3, Mistral)
}
#: ``hidden_act`` values of the models whose MLP is gated (``down(act(gate(x)) * up(x))``, three matrices
#: of ``intermediate_size``): transformers' Llama, Mistral, Mixtral, Qwen2, Phi-3, OLMo, DeepSeek, Granite
#: and the other Llama-style models use SiLU there; GPT-2, GPT-NeoX, OPT and BLOOM have two matrices and
#: another activation (Gemma's gated GELU is not told apart: counted as two matrices)
_GATED_ACTIVATIONS = ("silu", "swish", "swiglu")
#: the model-config keys read: the shape, the activation that tells a gated MLP, and 2021's
#: ``gradient_checkpointing`` attribute.
_CONFIG_KEYS = (*_SHAPE_KEYS, "hidden_act", "gradient_checkpointing")
#: final metrics (dict keys and train-metrics block keys) -> fact, in the order a dict's are read.
_FINAL_FACTS = {
    "train_runtime": "final_train_runtime_s",
    "train_samples_per_second": "final_samples_per_sec",
    "train_steps_per_second": "final_steps_per_sec",
}

#: the raw lines (polars searches them before launcher prefixes are cut and glued ranks split) that
#: can hold a record the TrainingArguments block reads: a read field's ``name=`` where a stripped
#: record can start (line start, after a CR, a launcher prefix's ':', whitespace), or a ``)`` with only
#: whitespace between it and where a record can start and end (line end, a CR, the '[' of another
#: rank's tag). A bare ``\)`` matched a line in six of a log (every "(ms)", every call), 30 times as
#: many. The family's own records are among the lines too: a marked ``name=value`` record is the dump's.
_ARGS_LINES = (
    rf"(?:^|:|{_SPACE})(?:"
    + "|".join(re.escape(f"{name}=") for name in sorted(_ARGS_READ))
    + rf")|(?:^|[\r:]){_SPACE}*\){_SPACE}*(?:$|[\r\[])"
)
#: the raw lines that can change what the model config block records: a key it reads, or a ``}`` that
#: starts a record (only that one closes the block: a nested object's is indented), where a record can
#: start (the line's start, a CR, the ':' or ': ' ending a launcher prefix or a rank's tag). A bare "}"
#: matched every nested object's closing line as well (2021's task_specific_params, in every node's copy).
_CONFIG_LINES = "|".join([r"(?:^|[\r:] ?)\}", *(re.escape(f'"{key}"') for key in sorted(_CONFIG_KEYS))])


# --- what records are: polars predicates on a record's text ---------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Records(RecordTest):
    """A record test that is any polars predicate of the record's text: the blocks end at "a line that is
    not a metric", "a progress bar without a dict", which literals and one regex cannot say."""

    predicate: Callable[[pl.Expr], pl.Expr]

    def expr(self, record: pl.Expr) -> pl.Expr:
        return self.predicate(record)


def _holds(text: pl.Expr, *words: str) -> pl.Expr:
    return text.str.contains(literals(words))


def _bar_only(text: pl.Expr) -> pl.Expr:
    """A tqdm update and nothing else of the family (no dict glued to it): only its rate is read."""
    return _holds(text, *_RATES) & _holds(text, "%|") & ~_holds(text, "{'")


def _opens_arguments(text: pl.Expr) -> pl.Expr:
    return text.str.contains(_ARGS_OPENER) & ~_bar_only(text)


def _opens_metrics(text: pl.Expr) -> pl.Expr:
    return _holds(text, _METRICS_BANNER) & ~_holds(text, _ARGS_MARKER) & ~_bar_only(text)


def _opens_config(text: pl.Expr) -> pl.Expr:
    return text.str.contains(_CONFIG_OPENER) & ~_holds(text, _ARGS_MARKER, _METRICS_BANNER) & ~_bar_only(text)


def _opens_block(text: pl.Expr) -> pl.Expr:
    """A record that opens a block: it ends the block open before it (one block at a time), unless that
    block reads it as one of its lines."""
    return _opens_arguments(text) | _opens_metrics(text) | _opens_config(text)


def _argument_line(text: pl.Expr) -> pl.Expr:
    return text.str.contains(_ARGS_FIELD) & ~_bar_only(text)


def _argument_ends(text: pl.Expr) -> pl.Expr:
    return _opens_block(text) & ~text.str.contains(_ARGS_FIELD)


def _config_line(text: pl.Expr) -> pl.Expr:
    return text.str.contains(_CONFIG_JSON) & ~_bar_only(text)


def _config_closes(text: pl.Expr) -> pl.Expr:
    return text.str.starts_with("}") & ~_bar_only(text)


def _config_ends(text: pl.Expr) -> pl.Expr:
    return _opens_block(text) & ~text.str.contains(_CONFIG_JSON) & ~text.str.starts_with("}")


def _metrics_line(text: pl.Expr) -> pl.Expr:
    """A metric, or a tqdm update between them (tqdm writes to stderr, merged into the same file)."""
    return (text.str.contains(_METRIC) | text.str.contains(_BAR_START)) & ~_bar_only(text)


def _metrics_closes(text: pl.Expr) -> pl.Expr:
    """The first other line ends the metrics block (and is read as usual)."""
    return ~text.str.contains(_METRIC) & ~text.str.contains(_BAR_START) & ~_bar_only(text)


# --- the blocks ------------------------------------------------------------------------------------

MARKERS = (
    # not bare "{'": a dict is read only if it holds one of these keys, and DeepSpeed's config
    # printer writes twice as many other dicts (optimizer_params, aio_config, ...) to a log
    *_TRAINER_KEYS,
    _ARGS_MARKER,
    _METRICS_BANNER,
    "Config {",
    "Overriding config:",
    "--config_overrides",
    "--per_device_train_batch_size",
    "Instantaneous batch size per device",
    "Total train batch size",
    "Gradient Accumulation steps",
    "Total optimization steps",
    "Number of trainable parameters",
    "TrainOutput(global_step=",
    # launch context: the GPU count (HF Trainer prints none; the banner's total batch gives DP only)
    "--nproc_per_node",
    "--nproc-per-node",
    "world_size=",
    "WORLD_SIZE=",
    "global_world_sizes=",
    # tqdm's training bar: its rate is the step time of a run whose final metrics are missing
    *_RATES,
)
_MARKED = literals(MARKERS)
_TRAINER, _ARGUMENTS, _CONFIG, _METRICS = "trainer", "arguments", "config", "metrics"
FACTS = (
    "micro_batch_size",
    "gas",
    "global_batch_size",
    "dp",
    "train_iters",
    "precision",
    "activation_checkpointing",
    "gpus",
    "gpus_per_node",
    "nodes",
    "logged_model_size",
    "final_steps",
    *_FINAL_FACTS.values(),
    "progress_sec_per_iter",
    *dict.fromkeys(_SHAPE_KEYS.values()),
    "swiglu",
)


def read_trainer(records: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The family's records (``TRAINER``) and its blocks' lines, read together (see the module's
    docstring): a record that a block reads as one of its lines is nothing else."""
    frame = records.collect()
    blocks = _opened(frame.filter(pl.col("source") != _TRAINER))
    taken = blocks.filter(pl.col("role").is_in([BODY, CLOSER]))
    marked = pl.concat(
        [frame.filter(pl.col("source") == _TRAINER), frame.filter(pl.col("text").str.contains(_MARKED))]
    )
    marked = marked.unique("order", keep="first").select("run", "order", "text").sort("order")
    own = _classified(marked.join(taken.select("order").unique(), on="order", how="anti"))
    reading = _Reading()
    commands = _commands(own)
    arguments = _arguments(reading, own, taken, commands)
    _dicts(reading, own, arguments)
    _train_output(reading, own)
    _banner(reading, own)
    _shape(reading, own, taken, commands)
    _command_facts(reading, commands)
    _launch(reading, own)
    _metrics(reading, taken)
    _final(reading)
    _progress(reading, marked)
    return reading.events()


def _opened(blocks: pl.DataFrame) -> pl.DataFrame:
    """The blocks' rows as one block at a time was read: a record that another block read as one of its
    lines (``args = TrainingArguments(`` in the metrics block is a metric) opened nothing, so its block
    opens at its first line that opens one of its kind (a dump printed after), if any."""
    openers = blocks.filter(pl.col("role") == OPENER).select("source", "block", "order")
    lines = blocks.filter(pl.col("role").is_in([BODY, CLOSER])).select("order", reader="source")
    void = (
        openers.join(lines, on="order").filter(pl.col("reader") != pl.col("source")).select("source", "block")
    )
    if void.is_empty():
        return blocks
    text, source = pl.col("text"), pl.col("source")
    opens = (
        pl.when(source == _ARGUMENTS)
        .then(_opens_arguments(text))
        .when(source == _CONFIG)
        .then(_opens_config(text))
        .otherwise(_opens_metrics(text))
    )
    rows = blocks.join(void, on=["source", "block"])
    read_elsewhere = rows.join(lines, on="order").filter(pl.col("reader") != source).select("order")
    starts = (
        rows.filter(pl.col("role") == BODY, opens)
        .join(read_elsewhere.unique(), on="order", how="anti")
        .group_by("source", "block")
        .agg(start=pl.col("order").min())
    )
    reopened = (
        rows.join(starts, on=["source", "block"])
        .filter(pl.col("order") >= pl.col("start"))
        .with_columns(
            role=pl.when(pl.col("order") == pl.col("start")).then(OPENER).otherwise("role").cast(pl.Int8)
        )
        .drop("start")
    )
    kept = blocks.join(void, on=["source", "block"], how="anti")
    return pl.concat([kept, reopened.select(kept.columns)])


# --- what a read keeps -----------------------------------------------------------------------------

# Where a record's events fall among the record's (its ``order`` plus this item), in the order the old
# reader read a record: its dicts (``_DICT_STRIDE`` items each, from ``_DICT_STRIDE * the dict's index``),
# the TrainOutput, the banner, the overrides (one item each), the command line's flags, launch context;
# a one-line TrainingArguments dump's fields, then its end.
_DICT_STRIDE, _DICTS_PER_RECORD = 4, 12
_OUTPUT_ITEM = 50
_BANNER_ITEM = 56
_OVERRIDE_ITEM = 64
_COMMAND_ITEM = 96
_LAUNCH_ITEM = 112
_FINISH_ITEM = 127
#: a literal value as ``grammar.literal`` reads it: ``kind`` none, bool, int, bigint (beyond int64: its
#: ``text``, and ``real`` its sign), float or str
_TYPED = pl.Struct({"kind": pl.String, "integer": pl.Int64, "real": pl.Float64, "text": pl.String})
#: a final metric one copy states (``value``, or ``integer`` for Python's int; neither when it is noted
#: instead), with its significant digits
_CANDIDATE = {
    "run": pl.Int64,
    "order": pl.Int64,
    "fact": pl.String,
    "value": pl.Float64,
    "integer": pl.Int64,
    "digits": pl.Int64,
    "note": pl.String,
}


class _Reading:
    """The statements a read makes: facts (``run``, ``order``, ``fact``, ``value``; a frame per value
    type), steps, notes, the family's records (``saw``) and the copies of the final metrics."""

    def __init__(self) -> None:
        self.facts: list[pl.DataFrame] = []
        self.steps: list[pl.DataFrame] = []
        self.notes: list[pl.DataFrame] = []
        self.seen: list[pl.DataFrame] = []
        self.finals: list[pl.DataFrame] = []
        self.dict_points = pl.DataFrame(schema={"run": pl.Int64, "order": pl.Int64})

    def fact(self, frame: pl.DataFrame, fact: str | pl.Expr, value: pl.Expr) -> None:
        """A fact statement per row of ``frame`` (``run``, ``order``) whose ``value`` is not null."""
        name = pl.lit(fact) if isinstance(fact, str) else fact
        self.facts.append(frame.select("run", "order", fact=name, value=value).drop_nulls("value"))

    def integer(self, frame: pl.DataFrame, fact: str | pl.Expr, typed: str) -> None:
        """A fact per row whose ``typed`` value is an integer (a bool stays one, as Python's ``True`` is an
        int); one beyond int64 is noted, not stated."""
        kind, integer = _kind(typed), pl.col(typed).struct.field("integer")
        self.fact(frame.filter(kind == "int"), fact, integer)
        self.fact(frame.filter(kind == "bool"), fact, integer == 1)
        name = pl.lit(fact) if isinstance(fact, str) else fact
        self.note(frame.filter(kind == "bigint"), _too_long(name, pl.col(typed).struct.field("text")))

    def note(self, frame: pl.DataFrame, message: pl.Expr) -> None:
        self.notes.append(frame.select("run", "order", message=message).drop_nulls("message"))

    def saw(self, frame: pl.DataFrame) -> None:
        """Each row is a record of the family (evidence that the run is one)."""
        self.seen.append(frame.select("run", "order"))

    def stated(self, fact: str) -> pl.DataFrame:
        """The statements of ``fact`` so far (``run``, ``order``, ``value``: Python's ``str`` of it)."""
        frames = []
        for frame in self.facts:
            frame = frame.filter(pl.col("fact") == fact)
            if frame.height:
                value = pl.col("value")
                text = (
                    pl.when(value).then(pl.lit("True")).otherwise(pl.lit("False"))
                    if frame.schema["value"] == pl.Boolean
                    else value.cast(pl.String)
                )
                frames.append(frame.select("run", "order", value=text))
        return (
            pl.concat(frames)
            if frames
            else pl.DataFrame(schema={"run": pl.Int64, "order": pl.Int64, "value": pl.String})
        )

    def events(self) -> Events:
        family = pl.lit(NAME)
        by_type: dict[pl.DataType, list[pl.DataFrame]] = {}
        for frame in self.facts:
            if frame.height:
                by_type.setdefault(frame.schema["value"], []).append(frame)
        facts = [
            pl.concat(frames).sort("order").select("order", "fact", "value", family=family)
            for frames in by_type.values()
        ]
        steps = [frame.drop("run").with_columns(family=family) for frame in self.steps if frame.height]
        notes = pl.concat([_NO_NOTES, *(frame for frame in self.notes if frame.height)]).sort("order")
        seen = pl.concat([_NO_RECORDS, *self.seen]).select(
            "order", mark=pl.lit(SEEN), family=family, text=pl.lit(None, pl.String)
        )
        return Events(
            steps=steps,
            facts=facts,
            notes=[notes.select("order", family=family, message="message")],
            marks=[seen],
        )


_NO_RECORDS = pl.DataFrame(schema={"run": pl.Int64, "order": pl.Int64})
_NO_NOTES = pl.DataFrame(schema={"run": pl.Int64, "order": pl.Int64, "message": pl.String})


def _too_long(name: pl.Expr, value: pl.Expr) -> pl.Expr:
    """``RunBuilder.fits``' note of an integer beyond int64."""
    return pl.format("{}={} does not fit a 64-bit integer; not recorded", name, value)


def _classified(records: pl.DataFrame) -> pl.DataFrame:
    """The family's records that no block reads as its lines, with what the old reader did first:
    ``bar_only`` (only its rate is kept), ``dump`` (a TrainingArguments record: nothing else is read of
    it), ``opens`` (a metrics or config block), ``plain`` (all the rest is read of it)."""
    text = pl.col("text")
    return records.with_columns(
        bar_only=_bar_only(text),
        dump=_holds(text, _ARGS_MARKER) & ~_bar_only(text),
        opens=_opens_metrics(text) | _opens_config(text),
    ).with_columns(plain=~pl.col("bar_only") & ~pl.col("dump") & ~pl.col("opens"))


def _mapped(
    frame: pl.DataFrame, column: str, read: Callable[[str], Any], dtype: pl.DataType, name: str
) -> pl.DataFrame:
    """``frame`` with ``name``: ``read`` of its ``column``, called once per distinct text (the reading of
    the few records, or values, that polars does not read as Python does)."""
    texts = frame.get_column(column).drop_nulls().unique(maintain_order=True).to_list()
    table = pl.DataFrame(
        {column: texts, name: [read(text) for text in texts]},
        schema={column: frame.schema[column], name: dtype},
    )
    return frame.join(table, on=column, how="left", maintain_order="left")


def _typed(value: Any) -> dict[str, Any]:
    """A Python value as a ``_TYPED`` struct."""
    if value is None:
        return {"kind": "none"}
    if isinstance(value, bool):
        return {"kind": "bool", "integer": int(value), "real": float(value)}
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return {"kind": "int", "integer": value, "real": float(value)}
        return {"kind": "bigint", "real": math.copysign(math.inf, value), "text": str(value)}
    if isinstance(value, float):
        return {"kind": "float", "real": value}
    return {"kind": "str", "text": str(value)}


def _literal(raw: str) -> dict[str, Any]:
    return _typed(grammar.literal(raw))


def _kind(typed: str) -> pl.Expr:
    return pl.col(typed).struct.field("kind")


def _real(typed: str) -> pl.Expr:
    return pl.col(typed).struct.field("real")


def _is_integer(typed: str) -> pl.Expr:
    """Python's ``isinstance(value, int)`` (a bool is one)."""
    return _kind(typed).is_in(["int", "bool", "bigint"])


def _is_number(typed: str) -> pl.Expr:
    """``isinstance(value, int | float)``."""
    return _kind(typed).is_in(["int", "bool", "bigint", "float"])


def _positive(typed: str) -> pl.Expr:
    """``grammar.positive_int``: an integer, not a bool, above 0."""
    return _kind(typed).is_in(["int", "bigint"]) & (_real(typed) > 0)


def _truthy(typed: str) -> pl.Expr:
    kind = _kind(typed)
    return (
        pl.when(kind.is_in(["int", "bool", "float"]))
        .then(_real(typed) != 0)
        .when(kind == "bigint")
        .then(True)
        .when(kind == "str")
        .then(pl.col(typed).struct.field("text") != "")
        .otherwise(False)
        .fill_null(False)
    )


def _stripped(text: pl.Expr) -> pl.Expr:
    """Python's ``str.strip()``."""
    return text.str.replace_all(rf"^{_SPACE}+|{_SPACE}+$", "")


def _state_at(
    points: pl.DataFrame, events: pl.DataFrame, name: str, alias: str, *, strictly: bool
) -> pl.DataFrame:
    """``points`` (``run``, ``order``) with ``alias``: the value of the last of ``events`` (``run``,
    ``order``, ``name``, ``value``) named ``name`` before each point (``strictly``, or at it too)."""
    named = events.filter(pl.col("name") == name).select("run", at="order", **{alias: "value"}).sort("at")
    return (
        points.sort("order")
        .join_asof(
            named,
            left_on="order",
            right_on="at",
            by="run",
            strategy="backward",
            allow_exact_matches=not strictly,
            check_sortedness=False,
        )
        .drop("at")
    )


# --- TrainingArguments ------------------------------------------------------------------------------


def _arguments(
    reading: _Reading, own: pl.DataFrame, taken: pl.DataFrame, commands: pl.DataFrame
) -> pl.DataFrame:
    """The TrainingArguments fields of the multi-line dumps, the one-line dumps and the command lines
    (``logging_steps``, set only when no field set it before): each dump field's facts where it is read,
    full precision where a dump ends; returns the fields in order (``run``, ``order``, ``name``,
    ``value``: ``_TYPED``), which a logged dict's step reads."""
    dump = taken.filter(pl.col("source") == _ARGUMENTS)
    lines = (
        dump.filter(pl.col("role") == BODY)
        .select("run", "order", field=pl.col("text").str.extract_groups(_ARGS_FIELD))
        .unnest("field")
        .rename({"1": "name", "2": "raw"})
        .with_columns(raw=_field_value(pl.col("raw")))
    )
    one_line = _one_line_fields(own.filter(pl.col("dump"), ~pl.col("text").str.contains(_ARGS_OPENER)))
    fields = pl.concat([lines, one_line.select("run", "order", "name", "raw")]).filter(
        pl.col("name").is_in(list(_ARGS_READ))
    )
    fields = _mapped(fields, "raw", _literal, _TYPED, "value").drop("raw")
    defaults = commands.select(
        "run",
        order=pl.col("order") + _COMMAND_ITEM,
        logging_steps=pl.col("command").struct.field("logging_steps"),
        logging_first_step=pl.col("command").struct.field("logging_first_step"),
    ).filter(_kind("logging_steps").is_in(["int", "bigint", "float"]))
    defaults = defaults.unpivot(index=["run", "order"], variable_name="name", value_name="value")
    events = pl.concat(
        [fields.with_columns(default=pl.lit(False)), defaults.with_columns(default=pl.lit(True))]
    )
    first = events.group_by("run", "name").agg(first=pl.col("order").min())
    events = (
        events.join(first, on=["run", "name"])
        .filter(~pl.col("default") | (pl.col("order") == pl.col("first")))
        .select("run", "order", "name", "value")
        .sort("order")
    )
    _argument_facts(reading, fields)
    ends = pl.concat(
        [
            dump.filter(pl.col("role") == CLOSER).select("run", "order"),
            own.filter(pl.col("dump"), ~pl.col("text").str.contains(_ARGS_OPENER)).select(
                "run", order=pl.col("order") + _FINISH_ITEM
            ),
        ]
    )
    _full_precision(reading, ends, events)
    reading.saw(own.filter(pl.col("dump")))
    return events


def _field_value(raw: pl.Expr) -> pl.Expr:
    """A dump field's value text: without the record's trailing whitespace, then its trailing comma."""
    value = raw.str.replace(rf"{_SPACE}+$", "")
    return (
        pl.when(value.str.ends_with(",")).then(value.str.slice(0, value.str.len_chars() - 1)).otherwise(value)
    )


def _one_line_fields(dumps: pl.DataFrame) -> pl.DataFrame:
    """``TrainingArguments(output_dir=out, per_device_train_batch_size=8, ...)`` (older transformers):
    each ``name=value`` whose value holds no comma nor parenthesis, before ``, name=`` or the closing
    parenthesis (``run``, ``order``: the record's plus the field's index, ``name``, ``raw``). The record
    is cut before each ``, name=`` (at a character it does not hold) and each piece read alone."""
    texts = dumps.get_column("text").to_list()
    cut = next(c for c in map(chr, range(0xE000, 0xF900)) if not any(c in text for text in texts))
    pieces = (
        dumps.select(
            "run",
            "order",
            piece=pl.col("text")
            .str.splitn(_ARGS_MARKER, 2)
            .struct.field("field_1")
            .str.replace_all(r", (\w+=)", cut + "${1}")
            .str.split(cut),
        )
        .with_columns(index=pl.int_ranges(pl.col("piece").list.len()), count=pl.col("piece").list.len())
        .explode("piece", "index")
    )
    field = (
        pl.when(pl.col("index") == pl.col("count") - 1)
        .then(pl.col("piece").str.extract_groups(rf"(\w+)=([^,()]*?)\){_SPACE}*$"))
        .otherwise(pl.col("piece").str.extract_groups(r"(\w+)=([^,()]*)$"))
    )
    return (
        pieces.select("run", "order", "index", field=field)
        .unnest("field")
        .rename({"1": "name", "2": "raw"})
        .drop_nulls("name")
        .with_columns(order=pl.col("order") + pl.col("index").clip(upper_bound=_FINISH_ITEM - 1))
    )


def _argument_facts(reading: _Reading, fields: pl.DataFrame) -> None:
    """The facts of the dumps' fields, each where it is read."""
    name = pl.col("name")
    for field, fact in _ARGS_INT_FACTS.items():
        reading.integer(fields.filter(name == field, _is_integer("value")), fact, "value")
    reading.fact(
        fields.filter(name.is_in(["fp16", "bf16"]), _kind("value") == "bool", _real("value") == 1),
        "precision",
        name,
    )
    reading.fact(
        fields.filter(
            name.is_in(["gradient_checkpointing", "activation_checkpointing"]), _kind("value") == "bool"
        ),
        "activation_checkpointing",
        _real("value") == 1,
    )
    reading.integer(
        fields.filter(name == "max_steps", _is_integer("value"), _real("value") > 0), "train_iters", "value"
    )
    # one process: _n_gpu is the number of GPUs it drives (DataParallel); distributed runs print 1 per process
    ranks = _state_at(
        fields.filter(name == "local_rank", _is_number("value"), _real("value") == -1).select("run", "order"),
        fields,
        "_n_gpu",
        "gpus",
        strictly=True,
    )
    reading.integer(ranks.filter(_is_integer("gpus"), _real("gpus") > 0), "gpus", "gpus")


def _full_precision(reading: _Reading, ends: pl.DataFrame, events: pl.DataFrame) -> None:
    """fp32 where a dump ends with fp16 and bf16 False and no DeepSpeed config (which could enable either)."""
    state = ends
    for name in ("fp16", "bf16", "deepspeed"):
        state = _state_at(state, events, name, name, strictly=False)
    off = [(_kind(name) == "bool") & (_real(name) == 0) for name in ("fp16", "bf16")]
    no_deepspeed = pl.col("deepspeed").is_null() | (_kind("deepspeed") == "none")
    reading.fact(state.filter(off[0] & off[1] & no_deepspeed), "precision", pl.lit("fp32"))


# --- logged dicts ----------------------------------------------------------------------------------

_PLAIN_TEXT = r"[\x20-\x26\x28-\x5b\x5d-\x7e]*"
_PLAIN_FLOAT = r"-?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+)"
_PLAIN_INT = r"-?(?:0|[1-9][0-9]{0,17})"
_PLAIN_ITEM = rf"'{_PLAIN_TEXT}': (?:{_PLAIN_FLOAT}|{_PLAIN_INT}|'{_PLAIN_TEXT}'|True|False|None)"
#: a dict whose items are all plain: keys and string values printable ASCII without quote or backslash
#: (no escapes), numbers plain decimal literals (no underscores, no leading zeros, at most 18 digits an
#: integer): read here; any other dict, and the final one, are read by ``ast.literal_eval`` (``_logged``)
_PLAIN_DICT = rf"^\{{{_PLAIN_ITEM}(?:, {_PLAIN_ITEM})*\}}$"
#: a number's text that polars and Python's ``float()`` read alike
_SIMPLE_FLOAT = r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"
#: dict key -> step metric
_DICT_METRICS = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm"}
#: a dict as ``_logged`` reads it
_LOGGED = pl.Struct(
    {
        "note": pl.String,
        "has_loss": pl.Boolean,
        "has_runtime": pl.Boolean,
        "final": pl.Boolean,
        **{column: pl.Float64 for column in _DICT_METRICS.values()},
        "step": _TYPED,
        "finals": pl.List(pl.Struct({"fact": pl.String, "value": pl.Float64, "digits": pl.Int64})),
    }
)


def _dicts(reading: _Reading, own: pl.DataFrame, arguments: pl.DataFrame) -> None:
    """The logged dicts: a training dict (``loss``) is a step, a final dict's metrics are copies of the
    final metrics (``_final``), a dict cut short or that is no literal is noted; an evaluation dict is
    nothing. Each dict read counts as a record of the family."""
    found = (
        own.filter(pl.col("plain"), pl.col("text").str.contains("{'", literal=True))
        .select("run", "order", body=pl.col("text").str.extract_all(_DICT))
        .with_columns(index=pl.int_ranges(pl.col("body").list.len()))
        .explode("body", "index")
        .filter(pl.col("body").str.contains(literals(_TRAINER_KEYS)))
        .with_columns(
            order=pl.col("order") + _DICT_STRIDE * pl.col("index").clip(upper_bound=_DICTS_PER_RECORD - 1)
        )
        .drop("index")
    )
    whole = pl.col("body").str.ends_with("}")
    cut = _mapped(
        found.filter(~whole),
        "body",
        lambda body: f"dict cut short, not read: {body[:80]!r}",
        pl.String,
        "note",
    )
    reading.note(cut, pl.col("note"))
    bodies = found.filter(whole).select("body").unique()
    bodies = bodies.with_columns(
        key=_dict_key(pl.col("body")),
        plain=pl.col("body").str.contains(_PLAIN_DICT) & ~pl.col("body").str.contains(literals(_FINAL_KEYS)),
    )
    found = found.join(bodies, on="body")
    dicts = pl.concat(
        [
            _plain_dicts(found.filter("plain"), bodies.filter("plain")),
            _literal_dicts(reading, found.filter(~pl.col("plain"))),
        ]
    )
    reading.dict_points = dicts.filter(pl.col("has_loss") | pl.col("has_runtime")).select("run", "order")
    reading.saw(dicts.filter(pl.col("final") | pl.col("has_loss")))
    training = dicts.filter(pl.col("has_loss"), ~pl.col("final"))
    _steps(reading, training, arguments)


def _plain_dicts(found: pl.DataFrame, bodies: pl.DataFrame) -> pl.DataFrame:
    """The plain training and evaluation dicts (``found``: ``run``, ``order``, ``body``, ``key``), read
    here, each distinct text (``bodies``) once: several nodes print each dict. Columns: ``run``,
    ``order``, ``key``, ``has_loss``, ``has_runtime`` and ``final`` (False: a final dict is no plain one
    here), the step metrics (Python's ``float`` of a number or of a string), ``step`` (the dict's own: an
    integer or a bool)."""
    read = bodies.select(
        "body",
        has_loss=pl.col("body").str.contains("'loss': ", literal=True),
        step=_plain_step(_plain_value("step")),
        **{column: _plain_value(key) for key, column in _DICT_METRICS.items()},
    )
    for column in _DICT_METRICS.values():
        read = _plain_number(read, column)
    return found.join(read, on="body", how="left").select(
        "run",
        "order",
        "key",
        "has_loss",
        has_runtime=pl.lit(False),
        final=pl.lit(False),
        **{column: column for column in _DICT_METRICS.values()},
        step="step",
    )


def _plain_value(key: str) -> pl.Expr:
    """The printed value of ``key`` in a plain dict (the last, as a dict keeps), or null. A plain string
    holds no quote, so ``'key': `` is always a key."""
    prefix = f"'{key}': "
    found = pl.col("body").str.extract_all(rf"{re.escape(prefix)}(?:'{_PLAIN_TEXT}'|[^,}}]*)")
    return found.list.last().str.slice(len(prefix))


def _plain_step(value: pl.Expr) -> pl.Expr:
    """A dict's own ``step`` when Python's ``isinstance(step, int)``: an integer, True (1) or False (0)."""
    integer = value.cast(pl.Int64, strict=False)
    number = (
        pl.when(value == "True")
        .then(1)
        .when(value == "False")
        .then(0)
        .when(value.str.contains(rf"^{_PLAIN_INT}$"))
        .then(integer)
    )
    return pl.when(number.is_not_null()).then(
        pl.struct(
            kind=pl.lit("int"),
            integer=number,
            real=number.cast(pl.Float64),
            text=pl.lit(None, pl.String),
        )
    )


def _plain_number(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """``frame``'s printed ``column`` as ``_number`` reads the value: a number's float, a string's
    ``float`` without its commas (polars reads the plain ones, Python the others), else null."""
    value = pl.col(column)
    quoted = value.str.starts_with("'")
    text = pl.when(quoted).then(
        value.str.slice(1, value.str.len_chars() - 2).str.replace_all(",", "", literal=True)
    )
    frame = frame.with_columns(text=text)
    simple = pl.col("text").str.contains(_SIMPLE_FLOAT)
    odd = frame.filter(pl.col("text").is_not_null(), ~simple).select("text").unique()
    frame = frame.join(_mapped(odd, "text", _python_float, pl.Float64, "odd"), on="text", how="left")
    number = (
        pl.when(quoted)
        .then(pl.when(simple).then(pl.col("text").cast(pl.Float64, strict=False)).otherwise("odd"))
        .when(value.is_in(["True", "False", "None"]))
        .then(None)
        .when(value.str.contains("[.eE]"))
        .then(value.cast(pl.Float64, strict=False))
        .otherwise(value.cast(pl.Int64, strict=False).cast(pl.Float64))
    )
    return frame.with_columns(number.alias(column)).drop("text", "odd")


def _dict_key(body: pl.Expr) -> pl.Expr:
    """``" ".join(body.split())``: a dict's text, its whitespace runs as one space."""
    return _stripped(body).str.replace_all(rf"{_SPACE}+", " ")


def _literal_dicts(reading: _Reading, found: pl.DataFrame) -> pl.DataFrame:
    """The final dicts and the dicts that are not plain, read by ``_logged`` (``_plain_dicts``' columns);
    a final dict's metrics go to ``reading.finals``."""
    read = _mapped(found, "body", _logged, _LOGGED, "read").unnest("read")
    reading.note(read, pl.col("note"))
    finals = (
        read.filter(pl.col("final"))
        .select("run", "order", "finals")
        .with_columns(index=pl.int_ranges(pl.col("finals").list.len()))
        .explode("finals", "index")
        .drop_nulls("finals")
        .unnest("finals")
        .select(
            "run",
            order=pl.col("order") + pl.col("index"),
            fact="fact",
            value="value",
            integer=pl.lit(None, pl.Int64),
            digits="digits",
            note=pl.lit(None, pl.String),
        )
    )
    reading.finals.append(finals.cast(_CANDIDATE))
    return read.filter(pl.col("note").is_null()).select(
        "run",
        "order",
        "key",
        has_loss="has_loss",
        has_runtime="has_runtime",
        final="final",
        **{column: column for column in _DICT_METRICS.values()},
        step=pl.when(_is_integer("step")).then("step"),
    )


def _steps(reading: _Reading, training: pl.DataFrame, arguments: pl.DataFrame) -> None:
    """A step per training dict: its own ``step``, else its place among the run's distinct training
    dicts (a dict printed by several nodes is one step) with the TrainingArguments known before it."""
    own_step = training.filter(pl.col("step").is_not_null())
    reading.note(
        own_step.filter(_kind("step") == "bigint"),
        _too_long(pl.lit("iteration"), pl.col("step").struct.field("text")),
    )
    positional = training.filter(pl.col("step").is_null())
    firsts = (
        positional.sort("order")
        .unique(["run", "key"], keep="first", maintain_order=True)
        .with_columns(position=pl.col("order").rank("ordinal").over("run").cast(pl.Int64))
        .select("run", "order", "key", "position")
    )
    for name in ("logging_steps", "logging_first_step", "max_steps"):
        firsts = _state_at(firsts, arguments, name, name, strictly=True)
    numbered = firsts.select("run", "key", step=_position_to_step())
    steps = pl.concat(
        [
            own_step.filter(_kind("step") != "bigint").with_columns(
                step=pl.col("step").struct.field("integer")
            ),
            positional.drop("step").join(numbered, on=["run", "key"], how="left"),
        ]
    )
    reading.steps.append(
        steps.select(
            "run",
            "order",
            pl.col("step").cast(pl.Int64),
            mode=pl.lit(RECORD, dtype=pl.Int8),
            **{column: column for column in _DICT_METRICS.values()},
        )
    )


def _position_to_step() -> pl.Expr:
    """The n-th distinct training dict's step (``position``), from ``logging_steps`` (a ratio of
    ``max_steps`` when below 1) and ``logging_first_step``."""
    position = pl.col("position")
    interval = _real("logging_steps")
    max_steps = pl.when(_is_number("max_steps")).then(_real("max_steps")).otherwise(0.0)
    ratio = (_kind("logging_steps") == "float") & (interval > 0) & (interval < 1) & (max_steps > 0)
    interval = pl.when(ratio).then((max_steps * interval).ceil()).otherwise(interval)
    valid = _is_number("logging_steps") & (interval >= 1)
    return (
        pl.when(~valid.fill_null(False))
        .then(position)
        .when(_truthy("logging_first_step") & (position == 1))
        .then(1)
        .when(_truthy("logging_first_step"))
        .then(((position - 1) * interval).floor().cast(pl.Int64))
        .otherwise((position * interval).floor().cast(pl.Int64))
    )


def _python_float(text: str) -> float | None:
    """Python's ``float`` of a string, or None."""
    try:
        return float(text)
    except ValueError:
        return None


def _number(value: Any) -> float | None:
    """A dict value as a float: 2021 logs print floats, today's print ``'4.705'`` strings."""
    if isinstance(value, str):
        return _python_float(value.replace(",", ""))
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def _logged(body: str) -> dict[str, Any]:
    """A final dict, or one that is not plain, read as Python reads a literal (``_LOGGED``)."""
    try:
        logged = ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {"note": f"not a Python dict literal: {body[:80]!r}"}
    except Exception as error:  # noqa: BLE001 - a bad record is noted, as the reader notes a family's error
        return {"note": f"{type(error).__name__}: {error}"}
    if not isinstance(logged, dict):
        return {"has_loss": False, "has_runtime": False, "final": False}
    final = "train_runtime" in logged or "train_samples_per_second" in logged
    out: dict[str, Any] = {
        "has_loss": "loss" in logged,
        "has_runtime": "train_runtime" in logged,
        "final": final,
    }
    try:
        if final:
            out["finals"] = [
                {"fact": fact, "value": value, "digits": _significant_digits(str(logged[key]))}
                for key, fact in _FINAL_FACTS.items()
                if key in logged and (value := _number(logged[key])) is not None
            ]
            return out
        out.update({column: _number(logged.get(key)) for key, column in _DICT_METRICS.items()})
    except OverflowError as error:
        return {"note": f"{type(error).__name__}: {error}"}
    step = logged.get("step")
    out["step"] = _typed(step) if isinstance(step, int) else None
    return out


_NOT_DIGIT = re.compile(r"[^\d]")


def _significant_digits(text: str) -> int:
    """The digits of ``text``'s mantissa without leading zeros (every digit a regex calls a digit): of
    the copies of a final metric, the one with the most wins (the dict prints ``.4g`` today, the
    metrics block rounds to 4 decimals), the first among equals (the lowest node)."""
    mantissa = text.partition("e")[0].partition("E")[0]
    return len(_NOT_DIGIT.sub("", mantissa).lstrip("0"))


# --- final metrics ---------------------------------------------------------------------------------


def _metrics(reading: _Reading, taken: pl.DataFrame) -> None:
    """The train metrics block's lines (``metric_line``): each metric is a record of the family, and
    ``train_runtime`` (a duration), the samples and steps per second are copies of the final metrics."""
    lines = taken.filter(pl.col("source") == _METRICS, pl.col("role") == BODY).select("run", "order", "text")
    read = _mapped(lines, "text", _metric, _METRIC_READ, "metric").unnest("metric")
    reading.saw(read.filter(pl.col("metric")))
    reading.note(read, pl.col("duration_note"))
    reading.finals.append(read.filter(pl.col("fact").is_not_null()).select(*_CANDIDATE).cast(_CANDIDATE))


_METRIC_READ = pl.Struct(
    {
        "metric": pl.Boolean,
        "duration_note": pl.String,
        "fact": pl.String,
        "value": pl.Float64,
        "integer": pl.Int64,
        "digits": pl.Int64,
        "note": pl.String,
    }
)


def _metric(text: str) -> dict[str, Any]:
    """A line of the metrics block (``_METRIC_READ``): whether it is a metric, and the copy of a final
    metric it is (with the note of a runtime that is no duration, or of an integer beyond int64)."""
    parsed = metric_line(text.strip())
    if parsed is None:
        return {"metric": False}
    name, value = parsed[0], parsed[1].strip()
    out: dict[str, Any] = {"metric": True}
    if name == "train_runtime":
        number = _runtime_seconds(value)
        if number is None:
            out["duration_note"] = f"train_runtime not a duration: {value!r}"
    elif name in _FINAL_FACTS:
        number = _number(value)
    else:
        return out
    if number is None:
        return out
    out.update(fact=_FINAL_FACTS[name], digits=_significant_digits(value))
    if not isinstance(number, int):
        out["value"] = number
    elif INT64_MIN <= number <= INT64_MAX:
        out["integer"] = number  # a duration of whole seconds: an int, as Python adds them
    else:
        out["note"] = f"{_FINAL_FACTS[name]}={number} does not fit a 64-bit integer; not recorded"
    return out


def _final(reading: _Reading) -> None:
    """The final metrics: of the copies in reading order (the final dicts', the metrics block's), each
    that has more significant digits than all before it is stated: the last, the run's, is the first
    copy with the most."""
    candidates = pl.concat(reading.finals).sort("order")
    before = pl.col("digits").cum_max().shift(1).over("run", "fact")
    stated = candidates.filter(before.is_null() | (pl.col("digits") > before))
    reading.fact(stated, pl.col("fact"), pl.col("value"))
    reading.fact(stated, pl.col("fact"), pl.col("integer"))
    reading.note(stated, pl.col("note"))


#: a ``name = value`` line of the train metrics block (``log_metrics``), stripped, tabs expanded
_SKIP = r"[ \t\r\n]*+"
_METRIC_LINE = re.compile(
    _SKIP + r"(?P<name>[A-Za-z_][A-Za-z0-9_]*+)" + _SKIP + "=" + _SKIP + r"(?P<value>.*+)" + _SKIP + r"\Z"
)
NUMBER_FIRST_MATCH = (
    rf"(?>(?P<sci_real>{ppc.sci_real.re.pattern})|(?P<real>{ppc.real.re.pattern})"
    rf"|(?P<signed_integer>{ppc.signed_integer.re.pattern})|(?P<nan_inf>(?i:{grammar.nan_inf.re.pattern})))"
)
"""``grammar.number`` as a regex; the named group that matched says how the grammar converts it."""
#: datetime.timedelta's str(): "0:01:23", "1 day, 2:03:04"; log_metrics appends ".45" (hundredths).
_RUNTIME = re.compile(
    rf"{_SKIP}(?>(?:(?P<days>[0-9]++){_SKIP}days?,)?){_SKIP}(?P<hours>[0-9]++){_SKIP}:{_SKIP}"
    rf"(?P<minutes>[0-9]++){_SKIP}:{_SKIP}{NUMBER_FIRST_MATCH}{_SKIP}\Z"
)


def metric_line(text: str) -> tuple[str, str] | None:
    """``(name, value)`` of a ``name = value`` line of the train metrics block, or None (tabs expanded
    first)."""
    match = _METRIC_LINE.match(text.expandtabs() if "\t" in text else text)
    return None if match is None else match.group("name", "value")


def _runtime_seconds(text: str) -> float | None:
    """``0:01:23.45`` / ``1 day, 2:03:04.50`` -> seconds; a bare number is seconds already."""
    parsed = runtime_parts(text.strip())
    if parsed is None:
        return _number(text)
    return parsed.get("days", 0) * 86400 + parsed["hours"] * 3600 + parsed["minutes"] * 60 + parsed["seconds"]


def runtime_parts(text: str) -> dict[str, int | float] | None:
    """``days`` (when printed), ``hours``, ``minutes`` and ``seconds`` of a ``_RUNTIME`` duration (tabs
    expanded first), or None when ``text`` is none."""
    match = _RUNTIME.match(text.expandtabs() if "\t" in text else text)
    if match is None:
        return None
    parts: dict[str, int | float] = {} if match["days"] is None else {"days": int(match["days"])}
    parts.update(hours=int(match["hours"]), minutes=int(match["minutes"]), seconds=number_of(match))
    return parts


def number_of(match: re.Match[str]) -> int | float:
    """The value ``grammar.number`` gives the text a ``NUMBER_FIRST_MATCH`` matched: an integer for
    its ``signed_integer`` alternative, else a float (its other alternatives' parse actions)."""
    if match["signed_integer"] is not None:
        return int(match["signed_integer"])
    return float(match["sci_real"] or match["real"] or match["nan_inf"])


# --- TrainOutput and the training banner -----------------------------------------------------------


def _python_int(digits: str) -> dict[str, Any]:
    """``int(digits)`` as a ``_TYPED`` struct, or the note of the error it raises."""
    try:
        return {"value": _typed(int(digits)), "note": None}
    except ValueError as error:
        return {"value": None, "note": f"ValueError: {error}"}


_INT_READ = pl.Struct({"value": _TYPED, "note": pl.String})
_BILLIONS = pl.Struct({"billions": pl.Float64, "error": pl.String})


def _billions(digits: str) -> dict[str, Any]:
    """A parameter count in billions (a count beyond a float's range is noted)."""
    try:
        return {"billions": int(digits) / 1e9}
    except OverflowError as error:
        return {"error": f"OverflowError: {error}"}


def _train_output(reading: _Reading, own: pl.DataFrame) -> None:
    """``TrainOutput(global_step=6, ...)``: the value ``Trainer.train()`` returns, when a script prints it."""
    outputs = (
        own.filter(pl.col("plain"))
        .select(
            "run", order=pl.col("order") + _OUTPUT_ITEM, digits=pl.col("text").str.extract(_TRAIN_OUTPUT, 1)
        )
        .drop_nulls("digits")
    )
    outputs = _mapped(outputs, "digits", _python_int, _INT_READ, "read").unnest("read")
    reading.integer(outputs, "final_steps", "value")
    reading.saw(outputs)


def _banner(reading: _Reading, own: pl.DataFrame) -> None:
    """``***** Running training *****`` lines (printed at INFO level by ``Trainer.train``): the batch
    sizes, accumulation, planned steps and parameter count (ZeRO-3 partitions parameters: some versions
    count 0 there, no count), and DP from the three batch numbers (``get_total_train_batch_size``: total
    = micro batch x accumulation x DP; not the GPU count: tensor or sequence parallel ranks are not in it)."""
    lines = (
        own.filter(pl.col("plain"), pl.col("text").str.contains(" = ", literal=True))
        .select("run", "order", field=pl.col("text").str.extract_groups(_TRAIN_BANNER))
        .unnest("field")
        .rename({"1": "label", "2": "digits"})
        .drop_nulls("label")
        .with_columns(
            order=pl.col("order") + _BANNER_ITEM,
            digits=pl.col("digits").str.replace_all(",", "", literal=True),
        )
    )
    lines = _mapped(lines, "digits", _python_int, _INT_READ, "read").unnest("read")
    reading.note(lines, pl.col("note"))
    lines = lines.filter(pl.col("note").is_null())
    reading.saw(lines)
    parameters = lines.filter(pl.col("label") == "Number of trainable parameters", _real("value") > 0)
    parameters = _mapped(parameters, "digits", _billions, _BILLIONS, "billions").unnest("billions")
    reading.fact(parameters, "logged_model_size", pl.col("billions"))
    reading.note(parameters, pl.col("error"))
    counts = lines.filter(
        pl.col("label") != "Number of trainable parameters", _real("value") > 0
    ).with_columns(fact=pl.col("label").replace_strict(_BANNER_FACTS))
    reading.integer(counts, pl.col("fact"), "value")
    trio = counts.filter(pl.col("fact").is_in(["micro_batch_size", "gas", "global_batch_size"]))
    events = counts.select("run", "order", name="fact", value=pl.col("value").struct.field("integer"))
    state = trio.select("run", "order")
    for name in ("micro_batch_size", "gas", "global_batch_size"):
        state = _state_at(state, events, name, name, strictly=False)
    per_step = pl.col("micro_batch_size") * pl.col("gas")
    reading.fact(
        state.filter((pl.col("global_batch_size") % per_step) == 0).with_columns(order=pl.col("order") + 1),
        "dp",
        pl.col("global_batch_size") // per_step,
    )


# --- model shape -----------------------------------------------------------------------------------


def _shape(reading: _Reading, own: pl.DataFrame, taken: pl.DataFrame, commands: pl.DataFrame) -> None:
    """The model shape, from printed configs' keys and overrides (``Overriding config:``,
    ``--config_overrides``). An overridden fact is not replaced by a config printed later: run_clm builds
    the model from the model type's default config plus the overrides, and the config printed after the
    override line is the base one (the tokenizer loads the hub's ``gpt2`` config: n_embd 768, n_layer 12),
    while the keys not overridden (vocab_size, n_positions) are the same in both. A ``--block_size``
    before is the length trained on: no later n_positions (only the longest possible) replaces it."""
    printed = (
        taken.filter(pl.col("source") == _CONFIG, pl.col("role") == BODY)
        .select("run", "order", field=pl.col("text").str.extract_groups(_CONFIG_JSON))
        .unnest("field")
        .rename({"1": "key", "2": "raw"})
        .with_columns(override=pl.lit(False))
    )
    overriding = own.filter(
        pl.col("plain"), pl.col("text").str.contains("Overriding config:", literal=True)
    ).select(
        "run", "order", overrides=pl.col("text").str.splitn("Overriding config:", 2).struct.field("field_1")
    )
    commanded = commands.select(
        "run", "order", overrides=pl.col("command").struct.field("overrides")
    ).drop_nulls()
    statements = pl.concat([printed, _override_items(pl.concat([overriding, commanded]))])
    statements = statements.with_columns(
        fact=pl.col("key").replace_strict(
            {**_SHAPE_KEYS, "hidden_act": "swiglu", "gradient_checkpointing": "activation_checkpointing"},
            default=None,
        ),
        raw=_stripped(pl.col("raw")).str.strip_chars("\"'"),
    ).drop_nulls("fact")
    statements = _mapped(statements, "raw", _literal, _TYPED, "value")
    valid = (
        pl.when(pl.col("key") == "gradient_checkpointing")
        .then(_kind("value") == "bool")
        .when(pl.col("key") == "hidden_act")
        .then(True)
        .otherwise(_positive("value"))
    )
    statements = statements.filter(valid)
    sizes = commands.filter(_positive_field("block_size")).select(
        "run", order=pl.col("order") + _COMMAND_ITEM
    )
    first_size = sizes.group_by("run").agg(sized=pl.col("order").min())
    statements = statements.join(first_size, on="run", how="left").filter(
        (pl.col("fact") != "seq_len") | pl.col("sized").is_null() | (pl.col("order") < pl.col("sized"))
    )
    first_override = (
        statements.filter(pl.col("override")).group_by("run", "fact").agg(overridden=pl.col("order").min())
    )
    statements = statements.join(first_override, on=["run", "fact"], how="left").filter(
        pl.col("override") | pl.col("overridden").is_null() | (pl.col("order") < pl.col("overridden"))
    )
    reading.saw(statements)
    flags = statements.filter(pl.col("key").is_in(["hidden_act", "gradient_checkpointing"]))
    reading.fact(
        flags,
        pl.col("fact"),
        pl.when(pl.col("key") == "hidden_act")
        .then(pl.col("raw").str.to_lowercase().is_in(list(_GATED_ACTIVATIONS)))
        .otherwise(_real("value") == 1),
    )
    reading.integer(
        statements.filter(~pl.col("key").is_in(["hidden_act", "gradient_checkpointing"])),
        pl.col("fact"),
        "value",
    )


def _override_items(frame: pl.DataFrame) -> pl.DataFrame:
    """``n_embd=8192,n_layer=64,n_head=32`` (``PretrainedConfig.update_from_string`` syntax) of each
    ``overrides`` text: its items with a value (``key``, ``raw``, ``override``), each one item later."""
    items = (
        frame.select(
            "run", "order", item=_stripped(pl.col("overrides")).str.strip_chars("\"'").str.split(",")
        )
        .with_columns(index=pl.int_ranges(pl.col("item").list.len()))
        .explode("item", "index")
        .with_columns(pair=pl.col("item").str.splitn("=", 2))
    )
    return items.select(
        "run",
        order=pl.col("order")
        + _OVERRIDE_ITEM
        + pl.col("index").clip(upper_bound=_COMMAND_ITEM - _OVERRIDE_ITEM - 1),
        key=_stripped(pl.col("pair").struct.field("field_0")),
        raw=pl.col("pair").struct.field("field_1"),
        override=pl.lit(True),
    ).filter(pl.col("raw").str.len_chars() > 0)


# --- command lines and launch context ---------------------------------------------------------------

#: command-line flags that are run facts (integers).
_FLAG_INT_FACTS = {
    "per_device_train_batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
    "max_steps": "train_iters",
}
_COMMAND = pl.Struct(
    {
        "overrides": pl.String,
        "block_size": _TYPED,
        **{fact: _TYPED for fact in _FLAG_INT_FACTS.values()},
        "fp16": pl.Boolean,
        "bf16": pl.Boolean,
        "checkpointing": pl.Boolean,
        "logging_steps": _TYPED,
        "logging_first_step": _TYPED,
    }
)


def _commands(own: pl.DataFrame) -> pl.DataFrame:
    """The echoed launch commands (``set -x``) of the run (``run``, ``order``, ``command``: ``_COMMAND``)."""
    text = pl.col("text")
    lines = own.filter(
        pl.col("plain"),
        ~text.str.contains("Overriding config:", literal=True),
        _holds(text, "--config_overrides", "--per_device_train_batch_size"),
    ).select("run", "order", "text")
    return _mapped(lines, "text", _command_line, _COMMAND, "command").drop("text")


def _command_line(text: str) -> dict[str, Any]:
    """``--config_overrides``, ``--block_size``, the batch flags, ``--fp16``/``--bf16``,
    ``--gradient_checkpointing``, ``--max_steps``, ``--logging_steps`` of a command line (``_COMMAND``)."""
    flags = grammar.command_line_flags(text)
    logging_steps = grammar.literal(flags.get("logging_steps", ""))
    numeric = isinstance(logging_steps, int | float) and not isinstance(logging_steps, bool)
    return {
        "overrides": flags.get("config_overrides") or None,
        "block_size": _typed(grammar.positive_int(flags.get("block_size", ""))),
        **{fact: _typed(grammar.positive_int(flags.get(flag, ""))) for flag, fact in _FLAG_INT_FACTS.items()},
        "fp16": _switch_on(flags, "fp16"),
        "bf16": _switch_on(flags, "bf16"),
        "checkpointing": _switch_on(flags, "gradient_checkpointing"),
        "logging_steps": _typed(logging_steps) if numeric else None,
        "logging_first_step": _typed(_switch_on(flags, "logging_first_step")) if numeric else None,
    }


def _switch_on(flags: dict[str, str], name: str) -> bool:
    """HfArgumentParser booleans: a bare ``--fp16`` or ``--fp16 true``."""
    return name in flags and flags[name].lower() in ("", "true", "1", "yes")


def _positive_field(name: str) -> pl.Expr:
    typed = pl.col("command").struct.field(name)
    return typed.struct.field("kind").is_in(["int", "bigint"]) & (typed.struct.field("real") > 0)


def _command_facts(reading: _Reading, commands: pl.DataFrame) -> None:
    """A command line's facts, after its overrides: the block size, the batch flags, the precision and
    activation checkpointing switches; each command line is a record of the family."""
    command = pl.col("command")
    item = _COMMAND_ITEM
    for name, fact in (("block_size", "seq_len"), *((fact, fact) for fact in _FLAG_INT_FACTS.values())):
        frame = commands.filter(_positive_field(name)).select(
            "run", order=pl.col("order") + item, value=command.struct.field(name)
        )
        reading.integer(frame, fact, "value")
        item += 1
    for switch in ("fp16", "bf16"):
        reading.fact(
            commands.filter(command.struct.field(switch)).with_columns(order=pl.col("order") + item),
            "precision",
            pl.lit(switch),
        )
        item += 1
    reading.fact(
        commands.filter(command.struct.field("checkpointing")).with_columns(order=pl.col("order") + item),
        "activation_checkpointing",
        pl.lit(True),
    )
    reading.saw(commands)


_LAUNCHER = pl.Struct({fact: _TYPED for fact in ("gpus_per_node", "nodes", "gpus")})


def _launch(reading: _Reading, own: pl.DataFrame) -> None:
    """The GPU count from a launcher's command line, else from a world size (a job's context, not HF
    evidence)."""
    text = pl.col("text")
    plain = own.filter(pl.col("plain")).with_columns(order=pl.col("order") + _LAUNCH_ITEM)
    launchers = _mapped(plain.filter(_holds(text, "--nproc")), "text", _launcher, _LAUNCHER, "launch")
    for item, fact in enumerate(("gpus_per_node", "nodes", "gpus")):
        frame = launchers.select(
            "run", order=pl.col("order") + item, value=pl.col("launch").struct.field(fact)
        )
        reading.integer(frame, fact, "value")
    worlds = (
        plain.filter(~_holds(text, "--nproc"), _holds(text, "orld_size", "WORLD_SIZE="))
        .select("run", "order", field=text.str.extract_groups(_WORLD_SIZE))
        .select(
            "run",
            "order",
            digits=pl.coalesce(pl.col("field").struct.field("1"), pl.col("field").struct.field("2")),
        )
        .drop_nulls("digits")
    )
    worlds = _mapped(worlds, "digits", _python_int, _INT_READ, "read").unnest("read")
    reading.integer(worlds.filter(_real("value") > 0), "gpus", "value")


def _launcher(text: str) -> dict[str, Any]:
    """``--nproc_per_node 4 --nnodes 16``: GPUs per node and nodes, and their product the GPU count. A
    torch launcher's command line without ``--nnodes`` runs on one node (its default); a range
    (``--nnodes 1:4``, elastic) or ``--nproc_per_node gpu`` is no count."""
    flags = grammar.command_line_flags(text)
    per_node = grammar.positive_int(flags.get("nproc_per_node") or flags.get("nproc-per-node") or "")
    nodes = grammar.positive_int(flags.get("nnodes", ""))
    if nodes is None and "nnodes" not in flags and any(name in text for name in _TORCH_LAUNCHERS):
        nodes = 1
    gpus = per_node * nodes if per_node is not None and nodes is not None else None
    return {"gpus_per_node": _typed(per_node), "nodes": _typed(nodes), "gpus": _typed(gpus)}


# --- progress bar ----------------------------------------------------------------------------------


def _progress(reading: _Reading, records: pl.DataFrame) -> None:
    """tqdm's rate of the training bar's last update (its closing update shows the whole bar's average).
    The training bar is the one of the planned optimization steps the Trainer stated (its banner's
    ``Total optimization steps``, ``max_steps``: the bar is ``tqdm(total=max_steps)``), else the bar
    updated last before a logged training or final dict (``ProgressCallback`` writes its dicts through
    that bar); a bar with a description is not the Trainer's. The Trainer's own statement counts, even
    where another family stated the run's ``train_iters`` first: Megatron's planned iterations are no
    total of the Trainer's bar (the bar before the last dict can be the evaluation's)."""
    bars = records.filter(_holds(pl.col("text"), *_RATES)).select(
        "run", "order", "text", total=pl.col("text").str.split(" [").list.first().str.split("/").list.last()
    )
    if bars.is_empty():
        return
    by_dict = (
        reading.dict_points.sort("order")
        .join_asof(
            bars.select("run", "order", "total"),
            on="order",
            by="run",
            strategy="backward",
            check_sortedness=False,
        )
        .drop_nulls("total")
        .group_by("run")
        .agg(pl.col("total").last())
    )
    planned = reading.stated("train_iters").sort("order").group_by("run").agg(planned=pl.col("value").last())
    chosen = (
        by_dict.join(planned, on="run", how="full", coalesce=True)
        .select("run", total=pl.coalesce("planned", "total"))
        .drop_nulls("total")
    )
    last = bars.join(chosen, on=["run", "total"]).sort("order").group_by("run").agg(pl.all().last())
    bar = (
        last.with_columns(field=pl.col("text").str.extract_groups(_TRAINING_BAR))
        .unnest("field")
        .rename({"1": "done", "2": "of", "3": "rate", "4": "unit"})
    )
    bar = _mapped(
        bar.filter(pl.col("of") == pl.col("total")), "rate", _python_float, pl.Float64, "per"
    ).filter(pl.col("per") > 0)
    reading.fact(
        bar,
        "progress_sec_per_iter",
        pl.when(pl.col("unit") == "s/it").then("per").otherwise(1 / pl.col("per")),
    )


def evidence(run: RunBuilder) -> int:
    """Records only HF Trainer prints (dicts, metrics, TrainingArguments, its banner)."""
    return run.families_seen.get(NAME, 0)


ARGUMENTS = Block(
    family=NAME,
    name=_ARGUMENTS,
    opens=_Records(predicate=_opens_arguments),
    body=_Records(predicate=_argument_line),
    closes=_Records(predicate=lambda text: text.str.contains(_ARGS_CLOSER)),
    ends=_Records(predicate=_argument_ends),
    max_lines=BLOCK_MAX_LINES,
    hint=f"{_ARGS_LINES}|{_MARKED}",
    read=read_trainer,
)
CONFIG = Block(
    family=NAME,
    name=_CONFIG,
    opens=_Records(predicate=_opens_config),
    body=_Records(predicate=_config_line),
    closes=_Records(predicate=_config_closes),
    ends=_Records(predicate=_config_ends),
    max_lines=BLOCK_MAX_LINES,
    hint=f"{_CONFIG_LINES}|{_MARKED}",
    read=read_trainer,
)
METRICS = Block(
    family=NAME,
    name=_METRICS,
    opens=_Records(predicate=_opens_metrics),
    body=_Records(predicate=_metrics_line),
    closes=_Records(predicate=_metrics_closes),
    ends=_Records(predicate=_metrics_closes),
    max_lines=BLOCK_MAX_LINES,
    read=read_trainer,
)
TRAINER = RecordKind(
    family=NAME,
    name=_TRAINER,
    test=RecordTest(markers=MARKERS),
    read=read_trainer,
    facts=FACTS,
    whole_run=True,
)

FAMILY = Family(
    name=NAME,
    markers=MARKERS,
    evidence=evidence,
    kinds=(TRAINER,),
    blocks=(ARGUMENTS, CONFIG, METRICS),
    description="HF Trainer: logged dicts, train metrics, TrainingArguments dump, --config_overrides shape",
)

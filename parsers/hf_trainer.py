"""HF Trainer log family: logged dicts, final train metrics, the TrainingArguments dump, the model shape.

Python dicts (``{'loss': 2.3}``; today ``'4.705'`` strings) from every node's rank 0 (a node's copies of one
are one step: every ``copies`` prints of a text where their count is known, else all; the last has
``train_runtime``), ``train metrics`` lines, ``TrainingArguments(`` a field a line
(older versions: one line; a subclass's, TRL's ``SFTConfig(``..., from its first field), the ``Running
training`` banner, the model shape (overrides, a printed config), tqdm's bar, the launch's GPU count. A dict has no step: the n-th distinct training dict is step
``n * logging_steps`` (1 first with ``logging_first_step``; after a resume from a checkpoint at step s, the
k-th dict after it is the k-th multiple of ``logging_steps`` after s; after a training banner that no resume
follows, the dicts count from its first), else n. Records and the blocks'
lines are read a segment at a time: each distinct text once in Python into effects, then polars rules,
with a carry.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
import polars.selectors as cs
from logstat.parsers import fairseq, grammar, kinds, registry
from logstat.parsers.base import INT64_MAX, INT64_MIN, Family, RunBuilder
from logstat.parsers.deepspeed import NAME as DEEPSPEED
from logstat.parsers.kinds import BODY, CLOSER, OPENER, Block, Events, RecordKind, RecordTest, literals

NAME = "hf-trainer"

#: accelerate launch's flag (``fp16``, ``bf16`` or ``no``), in its config file otherwise
_MIXED_PRECISION = "--mixed_precision"
#: accelerate's ``AcceleratorState`` as scripts log it (state.py ``__repr__``): its processes, the world
_ACCELERATE_PROCESSES = "Num processes: "
_NOT_DISTRIBUTED = "distributed training: False"  # the example scripts' one process (_ONE_PROCESS)
#: accelerate launch's warning of the defaults it used (commands/launch.py): ``\t`--num_processes` was set to
#: a value of `4``` (the local GPUs), ``\t`--num_machines` was set to a value of `1```
_ACCELERATE_DEFAULT = re.compile(r"`--(num_processes|num_machines)` was set to a value of `(\d+)`")
_ACCELERATE_MACHINES = "`--num_machines`"
#: keys of the dicts the Trainer logs; other dicts (DeepSpeed's config values) are not ours. transformers
#: 2.9-3.0 logged them as JSON (``json.dumps({**logs, "step": global_step})``): double-quoted
_TRAINER_KEYS = tuple(
    f"{quote}{key}{quote}"
    for quote in "'\""
    for key in ("loss", "learning_rate", "train_runtime", "train_samples_per_second", "epoch")
)
_RATES = ("it/s]", "s/it]")  # a tqdm update's rate
#: PEFT's ``print_trainable_parameters`` (``trainable params: 6,553,600 || all params: 13,022,417,920 ||
#: trainable%: 0.0503``; no separators in older peft): the whole model's count, where the Trainer's banner
#: counts an adapter's alone
_PEFT_COUNTS = "|| all params: "
#: Unsloth's banner (its patched Trainer's ``inner_training_loop``), two counts a line after its ASCII art:
#: 2024's ``Num GPUs = 1``, ``Batch size per device = 2 | Gradient Accumulation steps = 4``, ``Total batch
#: size = 8 | Total steps = 60``; 2025's ``Num GPUs used = 1``, ``Data Parallel GPUs = 1 | Total batch size (2
#: x 4 x 1) = 8``, ``Trainable parameters = 41,943,040/8,072,204,288 (0.52% trained)``; not the model
#: loader's ``Num GPUs = 8. Max memory: ...`` (the devices it sees)
_UNSLOTH_COUNTS = {
    "Num GPUs": "gpus",
    "Num GPUs used": "gpus",
    "Batch size per device": "micro_batch_size",
    "Gradient accumulation steps": "gas",
    "Total batch size": "global_batch_size",
    "Total steps": "train_iters",
    "Data Parallel GPUs": "dp",
}
_UNSLOTH = re.compile(
    rf"\b({'|'.join(sorted(_UNSLOTH_COUNTS, key=len, reverse=True))})(?: \([\d x]+\))? = ([\d,]+)(?![\d,.])"
)
_UNSLOTH_SIZE = re.compile(r"Trainable parameters = [\d,]+ ?(?:of|/) ?([\d,]+) \(")
_UNSLOTH_MARKERS = (
    "Num GPUs",
    "Batch size per device = ",
    "Total batch size",
    "Total steps = ",
    "Trainable parameters = ",
)
_METRICS_BANNER, _ARGS_MARKER = "***** train metrics *****", "TrainingArguments("
#: the first field of a multi-line dump (``TrainingArguments.__str__`` prints ``{class name}(`` then the fields
#: sorted): transformers 4's ``_n_gpu``, 5's ``accelerator_config`` (``_n_gpu`` no longer a field). It opens
#: the dump of any subclass (TRL's ``SFTConfig(``, ``DPOConfig(``...), whatever its name
_FIRST_FIELDS = ("_n_gpu=", "accelerator_config=")
#: ``Trainer.log_metrics`` of an evaluation or a prediction (the example scripts' ``--do_eval``,
#: ``--do_predict``: ``***** {split} metrics *****``): the end of a run that trained nothing, or of one whose
#: training ended before it
_EVAL_BANNERS = tuple(f"***** {split} metrics *****" for split in ("eval", "predict", "test"))
#: ``Trainer.train()``'s banner: after logged steps, a new launch (a requeued job appending to its log)
_TRAIN_BANNER_LINE = "***** Running training *****"
#: run_clm's warning that it trains on a block shorter than the tokenizer's ``model_max_length`` (no
#: ``--block_size``): 4.1x ``... Picking 1024 instead.``, 4.2x ``... longer than the default `block_size` value
#: of 1024. ...``, 4.3x on ``... Using block_size=1024 instead.``: the sequence length trained on
_BLOCK_SIZE_CHOSEN = "`model_max_length`"
_CHOSEN_BLOCK = re.compile(
    r"Picking (\d+) instead|Using block_size=(\d+) instead|default `block_size` value of (\d+)\b"
)
#: Trainer.train()'s last word (transformers 2.9 on, at INFO: ``\n\nTraining completed. Do not forget to share
#: your model on huggingface.co/models =)\n\n``): the training loop ended
_COMPLETED = "Training completed. Do not forget to share your model"
#: the banner's line of a run resumed from a checkpoint (transformers 4's, 5's): its dicts count from that step
_RESUMED_AT = ("Continuing training from global step", "Resuming training from checkpoint with epoch")
_ARGS_INT_FACTS = {"per_device_train_batch_size": "micro_batch_size", "gradient_accumulation_steps": "gas"}
_FLAG_INT_FACTS = {**_ARGS_INT_FACTS, "max_steps": "train_iters"}  # the arguments', flags' integer facts
#: the sequence length trained on, a dump's field or a flag, over the model's ``max_position_embeddings``:
#: run_clm's ``block_size``, TRL's ``max_seq_length`` (SFTConfig; ``max_length`` in later TRL and its DPO,
#: KTO, reward configs), ``model_max_length`` (Alpaca/FastChat's TrainingArguments subclass)
_TRAINED_LENGTHS = ("block_size", "max_seq_length", "max_length", "model_max_length")
#: an echoed launch command's flags that ``_command_line`` reads: any of them makes the line one to read
_COMMAND_FLAGS = tuple(
    f"--{flag}" for flag in ("config_overrides", *_FLAG_INT_FACTS, *_TRAINED_LENGTHS, "logging_steps")
)
MARKERS = (
    # not bare "{'": DeepSpeed's config printer writes twice as many other dicts (optimizer_params...)
    *(*_TRAINER_KEYS, _ARGS_MARKER, _METRICS_BANNER, "Config {", "Overriding config:", *_COMMAND_FLAGS),
    *_FIRST_FIELDS,
    *_EVAL_BANNERS,
    _TRAIN_BANNER_LINE,
    *("Instantaneous batch size per device", "Instantaneous batch size per GPU", "Total train batch size"),
    *("Gradient Accumulation steps", "Total optimization steps", "Number of trainable parameters"),
    *("Num Epochs", "Num update steps per epoch", "Num examples"),
    "TrainOutput(global_step=",
    _COMPLETED,
    _BLOCK_SIZE_CHOSEN,
    _PEFT_COUNTS,
    *_UNSLOTH_MARKERS,
    *_RESUMED_AT,
    # launch context: the GPU count (the banner's total batch gives DP only)
    *(
        "--nproc_per_node",
        "--nproc-per-node",
        "--num_processes",
        _ACCELERATE_MACHINES,
        _MIXED_PRECISION,
        "--num_gpus",
        "world_size=",
        _NOT_DISTRIBUTED,
        "WORLD_SIZE=",
        "global_world_sizes=",
        _ACCELERATE_PROCESSES,
    ),
    *_RATES,  # tqdm's training bar: the step time of a run whose final metrics are missing
)
BLOCK_MAX_LINES = 400  # a multi-line block (TrainingArguments, model config, metrics) is read at most

_SPACE = kinds.PYTHON_SPACE
#: a line of the multi-line TrainingArguments dump: ``per_device_train_batch_size=8,``, and its last
_ARGS_FIELD, _ARGS_CLOSER = rf"^{_SPACE}*(\w+)=(.*)$", rf"^{_SPACE}*\){_SPACE}*$"
_FIRST_FIELD = rf"^{_SPACE}*(?:{literals(_FIRST_FIELDS)})"
_ONE_LINE_FIELD = re.compile(r"(\w+)=([^,()]*?)(?=, \w+=|\)\s*$)")  # a field of a one-line dump
#: ``Model config GPT2Config {``: a printed model config (``json.dumps(indent=2)``), and its lines
_CONFIG_OPENER = rf"Config \{{{_SPACE}*$"
_CONFIG_JSON = rf'^{_SPACE}*"(\w+)"{_SPACE}*:{_SPACE}*([^,]*?){_SPACE}*,?{_SPACE}*$'
#: a line of the train metrics block: ``name = value``, or a tqdm update between them (tqdm writes to
#: stderr, merged into the same file)
_METRIC = rf"^{_SPACE}*(?:[A-Za-z_][A-Za-z0-9_]*[ \t]*=|\d{{1,3}}%\|)"
_DICT = r"\{['\"][^{}]*\}?"  # a logged dict (a JSON object too), cut short or not
#: an update of the Trainer's bar (``tqdm(total=max_steps)``, no description): tqdm writes ``| {n}/{total}
#: [{elapsed}<{remaining}, {rate:5.2f}it/s]``, or ``{1/rate:5.2f}s/it`` at over a second a step
_TRAINING_BAR = rf"^{_SPACE}*\d{{1,3}}%\|[^|]*\| *(\d+)/(\d+) \[[^\],]*, *(\d+\.\d+)(s/it|it/s)\]"
_BANNER_FACTS = {
    "Instantaneous batch size per device": "micro_batch_size",
    "Instantaneous batch size per GPU": "micro_batch_size",  # transformers 2.x's example scripts
    "Total train batch size (w. parallel, distributed & accumulation)": "global_batch_size",
    "Gradient Accumulation steps": "gas",
    "Total optimization steps": "train_iters",
    "Number of trainable parameters": "logged_model_size",
}
#: the banner's counts that number the dicts of ``logging_strategy`` epoch, or by their epochs (transformers 5
#: prints the steps an epoch takes; 4 only the examples and the epochs, of the optimization steps)
_BANNER_COUNTS = {"Num Epochs": "num_train_epochs", "Num update steps per epoch": "steps_per_epoch"}
_BANNER_COUNTS["Num examples"] = "num_examples"
_TRAIN_BANNER = re.compile(rf"({literals((*_BANNER_FACTS, *_BANNER_COUNTS))}) = ([\d,]+)")
_TRAIN_OUTPUT = re.compile(r"TrainOutput\(global_step=(\d+),")
_PEFT_ALL = re.compile(r"trainable params: [\d,]+ \|\| all params: ([\d,]+) \|\|")
_RESUMED_STEP = re.compile(r"(?:Continuing training from|checkpoint with epoch \d+ and) global step (\d+)\b")
#: the example scripts' first warning (run_clm.py...): ``Process rank: 0, device: cuda:0, n_gpu: 2, distributed
#: training: False, 16-bits training: True``; not distributed, the one process drives ``n_gpu`` GPUs. Some
#: transformers 4 releases join its two f-strings without the ", " (``n_gpu: 1distributed training: False``).
_ONE_PROCESS = re.compile(rf"n_gpu: (\d+)(?:, )?{_NOT_DISTRIBUTED}")
_PROCESSES = re.compile(rf"^{kinds.PYTHON_SPACE}*{_ACCELERATE_PROCESSES}(\d+){kinds.PYTHON_SPACE}*$")
#: the world size (DeepSpeed's launcher, MPI, torch elastic, env); not LOCAL_WORLD_SIZE, a role's or DP's
_WORLD_SIZE = re.compile(r"(?<!\w)(?:(?:dist_)?world_size|WORLD_SIZE)=(\d+)\b|global_world_sizes=\[(\d+)")
#: torch's launchers (and torchtune's ``tune run``, which hands its flags to torchrun): --nnodes 1 by default
_TORCH_LAUNCHERS = ("torch.distributed.launch", "torch.distributed.run", "torchrun", "tune run")
#: the fields read: facts, and what later records need (a dict's step, fp32, one process's GPU count)
_ARGS_READ = frozenset(
    [*_FLAG_INT_FACTS, *_TRAINED_LENGTHS, "fp16", "bf16", "gradient_checkpointing", "local_rank"]
    + ["activation_checkpointing", "_n_gpu", "logging_steps", "logging_first_step", "logging_strategy"]
    + ["deepspeed", "disable_tqdm"]
)
_SHAPE_KEYS = {  # model-config keys (GPT-2's, the generic ones) -> fact; num_key_value_heads: GQA
    **dict(n_embd="hidden_size", hidden_size="hidden_size", n_layer="num_layers", n_head="num_heads"),
    **dict(num_hidden_layers="num_layers", num_attention_heads="num_heads", vocab_size="vocab_size"),
    **dict(n_inner="ffn_hidden_size", intermediate_size="ffn_hidden_size", n_positions="seq_len"),
    **dict(max_position_embeddings="seq_len", num_key_value_heads="num_query_groups"),
    # MoE (Mixtral's, Qwen2-MoE's configs): the experts of a layer, those a token is routed to, an expert's
    # and the shared experts' width (Mixtral's experts are intermediate_size wide)
    **dict(num_local_experts="moe_experts", num_experts="moe_experts"),
    **dict(num_experts_per_tok="moe_topk", moe_intermediate_size="moe_ffn_hidden_size"),
    **dict(shared_expert_intermediate_size="moe_shared_ffn_hidden_size"),
}
_GATED_ACTIVATIONS = ("silu", "swish", "swiglu")  # ``hidden_act`` of gated MLPs (Llama...; not GPT-2, OPT)
#: ``model_type`` of the architectures whose MLP is gated (gate, up and down projections), whatever their
#: ``hidden_act`` (Gemma's is GELU); printed after it (``to_json_string`` sorts the keys), it decides
_GATED_MODEL_TYPES = frozenset(
    ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2")
    + ("gemma3", "gemma3_text", "phi3", "olmo", "olmo2", "cohere", "granite", "stablelm", "deepseek_v3")
)
#: the model-config keys read; ``tie_word_embeddings`` false is an output layer of its own (``untied_embeddings``)
_CONFIG_KEYS = (*_SHAPE_KEYS, "hidden_act", "model_type", "gradient_checkpointing", "tie_word_embeddings")
_FINAL_FACTS = {"train_runtime": "final_train_runtime_s", "train_samples_per_second": "final_samples_per_sec"}
_FINAL_FACTS["train_steps_per_second"] = "final_steps_per_sec"  # final metrics -> fact, in reading order
#: TRL's PPOTrainer and RLOOTrainer (0.11 on) log an update's metrics without ``loss``: its policy loss, and
#: ``lr`` (``'objective/kl': 0.5, ..., 'loss/policy_avg': -0.013, ..., 'lr': 2.9e-06, 'episode': 512``)
_POLICY_LOSS = "loss/policy_avg"
_DICT_METRICS = {"loss": "loss", "learning_rate": "lr", "grad_norm": "grad_norm"}  # dict key -> step metric
#: the keys every training dict of the Trainer holds one of (``Trainer.log`` adds the epoch; the rate is logged
#: with the loss)
_TRAINING_KEYS = frozenset(("epoch", "learning_rate"))
#: ms-swift's Trainer (its ProgressCallback's logs): the dict's step of the planned steps, ``'global_step/max_steps':
#: '30/1250'``, beside ``'percentage': '2.40%'``
_STEP_OF_PLAN_KEY, _STEP_OF_PLAN = "global_step/max_steps", re.compile(r"(\d+)/(\d+)")
FACTS = (
    *("micro_batch_size", "gas", "global_batch_size", "dp", "train_iters", "precision", "gpus", "nodes"),
    *("activation_checkpointing", "gpus_per_node", "logged_model_size", "final_steps", "swiglu"),
    *("deepspeed_config", "untied_embeddings"),
    *(*_FINAL_FACTS.values(), "progress_sec_per_iter", "progress_steps", "resumed_step"),
    *dict.fromkeys(_SHAPE_KEYS.values()),
)
#: raw lines that can hold a dump's record: a read field's ``name=``, a ``)``; and a ``}`` or a key the config
#: block reads. Literals only, a superset of what the tests take: polars' regex finds an alternation of
#: literals by a prefilter, while one that starts with an anchor or a class is tried at every position
#: (20x slower on the block windows than testing the few lines more it lets through)
_ARGS_LINES = "|".join([*(re.escape(f"{name}=") for name in sorted(_ARGS_READ)), r"\)"])
_CONFIG_LINES = "|".join([r"\}", *(re.escape(f'"{key}"') for key in sorted(_CONFIG_KEYS))])


@dataclass(frozen=True, kw_only=True)
class _Records(RecordTest):
    """A record test by any polars predicate of the text (not just literals); a lone tqdm update fails it."""

    predicate: Callable[[pl.Expr], pl.Expr]

    def expr(self, record: pl.Expr) -> pl.Expr:
        return self.predicate(record) & ~_bar_only(record)


def _holds(text: pl.Expr, *words: str) -> pl.Expr:
    return text.str.contains(literals(words))


def _bar_only(text: pl.Expr) -> pl.Expr:
    """A tqdm update and nothing else of the family (no dict glued to it): only its rate is read."""
    return _holds(text, *_RATES) & _holds(text, "%|") & ~_holds(text, "{'")


#: what opens each block; one ends the block open before it (the Trainer prints one at a time)
_OPENS = {
    "arguments": lambda text: text.str.contains(rf"TrainingArguments\({_SPACE}*$|{_FIRST_FIELD}"),
    "metrics": lambda text: _holds(text, _METRICS_BANNER) & ~_holds(text, _ARGS_MARKER),
    "config": lambda text: text.str.contains(_CONFIG_OPENER) & ~_holds(text, _ARGS_MARKER, _METRICS_BANNER),
}


def _opens_block(text: pl.Expr) -> pl.Expr:
    return _OPENS["arguments"](text) | _OPENS["metrics"](text) | _OPENS["config"](text)


#: a ``grammar.literal`` value: ``kind`` none, bool, int, bigint (beyond int64), float, str; ``text``: str
_TYPED = pl.Struct({"kind": pl.String, "integer": pl.Int64, "real": pl.Float64, "text": pl.String})
#: what a record does: a ``fact`` (``name`` = ``value``), ``note``, ``seen``; an ``arg``, ``default``,
#: ``banner``; asks for ``dp``, ``gpus``, ``fp32``; a ``shape``, ``override``, ``sized``; a ``final`` copy
#: (``digits``); a ``step`` (``name``: its dict's text if no ``value``); a ``point`` (a dict on the bar); a
#: ``resume`` (its step); an ``evaluation`` (its run time, of the step before it)
_EFFECT = pl.Struct(
    {"what": pl.String, "name": pl.String, "value": _TYPED, "digits": pl.Int64}
    | dict.fromkeys([*_DICT_METRICS.values(), "epoch"], pl.Float64)
)
_SEEN = {"what": "seen"}


def _typed(value: Any) -> dict[str, Any]:
    if value is None:
        return {"kind": "none"}
    kind = {bool: "bool", int: "int", float: "float"}.get(type(value), "str")
    if kind == "int" and not INT64_MIN <= value <= INT64_MAX:  # copysign would float() it
        return {"kind": "bigint", "real": math.inf if value > 0 else -math.inf, "text": str(value)}
    integer = int(value) if kind in ("bool", "int") else None
    real = None if kind == "str" else float(value)
    return {"kind": kind, "integer": integer, "real": real, "text": str(value)}


def _fact(name: str, value: Any) -> dict[str, Any]:
    return {"what": "fact", "name": name, "value": _typed(value)}


def _note(message: str) -> dict[str, Any]:
    return {"what": "note", "name": message}


def _argument(name: str, raw: str, out: list) -> None:
    """A TrainingArguments field that is read (``_ARGS_READ``)."""
    if name not in _ARGS_READ:
        return
    value = grammar.literal(raw)
    out.append({"what": "arg", "name": name, "value": _typed(value)})
    if name in _ARGS_INT_FACTS and isinstance(value, int):
        out.append(_fact(_ARGS_INT_FACTS[name], value))
    elif name in ("fp16", "bf16") and value is True:
        out.append(_fact("precision", name))
    elif name in ("gradient_checkpointing", "activation_checkpointing") and isinstance(value, bool):
        out.append(_fact("activation_checkpointing", value))
    elif name == "deepspeed" and isinstance(value, str) and value not in ("", "None"):
        out.append(_fact("deepspeed_config", value))  # DeepSpeed may print nothing at the default level
    elif name == "max_steps" and isinstance(value, int) and value > 0:
        out.append(_fact("train_iters", value))
    elif name == "local_rank" and value == -1:  # one process: _n_gpu is the GPUs it drives (DataParallel)
        out.append({"what": "gpus"})
    elif name in _TRAINED_LENGTHS and isinstance(value, int) and value > 0:
        out += [_fact("seq_len", value), {"what": "sized"}]


def _shape(key: str, raw: str, out: list, *, override: bool = False) -> None:
    """A model-config key, printed or from ``--config_overrides``/``Overriding config:`` (``override``)."""
    raw = raw.strip().strip("\"'")
    if key == "gradient_checkpointing":  # a config attribute in transformers < 4.11 (2021's GPT2Config)
        fact, value = "activation_checkpointing", grammar.literal(raw)
        if not isinstance(value, bool):
            return
    elif key == "hidden_act":
        fact, value = "swiglu", raw.lower() in _GATED_ACTIVATIONS
    elif key == "model_type":
        if raw not in _GATED_MODEL_TYPES:  # the activation tells
            return
        fact, value = "swiglu", True
    elif key == "tie_word_embeddings":
        fact, tied = "untied_embeddings", grammar.literal(raw)  # JSON's false, an override's False
        if not isinstance(tied, bool):
            return
        value = not tied
    elif (fact := _SHAPE_KEYS.get(key)) is None or (value := grammar.positive_int(raw)) is None:
        return
    out.append({"what": "override" if override else "shape", "name": fact, "value": _typed(value)})


def _overrides(overrides: str, out: list) -> None:
    """``n_embd=8192,n_layer=64,n_head=32`` (``PretrainedConfig.update_from_string`` syntax)."""
    for item in overrides.strip().strip("\"'").split(","):
        key, _, value = item.partition("=")
        if value:
            _shape(key.strip(), value, out, override=True)


def _plain(text: str, out: list) -> None:
    """A record of the family that no block reads and that is no dump, bar or block opener."""
    if "{'" in text or '{"' in text:
        _dicts(text, out)
    if _COMPLETED in text:
        out += [{"what": "completed", "value": _typed(text.strip())}, _SEEN]
    if _BLOCK_SIZE_CHOSEN in text and (chosen := _CHOSEN_BLOCK.search(text)):
        out += [_fact("seq_len", int(next(filter(None, chosen.groups())))), {"what": "sized"}]
    if any(banner in text for banner in _EVAL_BANNERS):
        out += [{"what": "evaluated"}, _SEEN]
    if _TRAIN_BANNER_LINE in text:  # no record of the family's alone: DeepSpeed-Chat prints it too
        # a training from step 0, unless a resume's line follows: its dicts count from its first
        out += [{"what": "launch"}, {"what": "resume", "value": _typed(0)}]
    if _PEFT_COUNTS in text and (counts := _PEFT_ALL.search(text)):
        _whole_model(counts[1], out)
    if any(marker in text for marker in _UNSLOTH_MARKERS):
        _unsloth(text, out)
    if "TrainOutput(global_step=" in text and (output := _TRAIN_OUTPUT.search(text)):
        out += [_fact("final_steps", int(output[1])), _SEEN]  # what Trainer.train() returns, printed
    if "training from" in text and (resumed := _RESUMED_STEP.search(text)) and int(resumed[1]) <= INT64_MAX:
        step = int(resumed[1])
        out += [{"what": "resume", "value": _typed(step)}, _fact("resumed_step", step), _SEEN]
    if " = " in text and (banner := _TRAIN_BANNER.search(text)) and _of_training(banner[1], banner[2]):
        _banner(banner[1], int(banner[2].replace(",", "")), out)
    # a comment's command (a config file echoed: nanoGPT's "# $ torchrun --nproc_per_node=8 ...") is
    # one to copy, not the run's
    command = not text.lstrip().startswith("#")
    if "Overriding config:" in text:
        _overrides(text.split("Overriding config:", 1)[1], out)
    elif command and any(flag in text for flag in _COMMAND_FLAGS):
        _command_line(text, out)
    if command and any(
        flag in text
        for flag in ("--nproc", "--num_processes", "--num_gpus", _MIXED_PRECISION, _ACCELERATE_MACHINES)
    ):
        _launcher(text, out)
    elif _ACCELERATE_PROCESSES in text and (processes := _PROCESSES.search(text)) and int(processes[1]) > 0:
        out.append(_fact("gpus", int(processes[1])))
    elif _NOT_DISTRIBUTED in text and (one := _ONE_PROCESS.search(text)) and int(one[1]) > 0:
        out.append(_fact("gpus", int(one[1])))
    elif ("orld_size" in text or "WORLD_SIZE=" in text) and (world := _WORLD_SIZE.search(text)):
        if (size := int(world[1] or world[2])) > 0:
            out.append(_fact("gpus", size))


def _unsloth(text: str, out: list) -> None:
    """Unsloth's banner counts (``_UNSLOTH_COUNTS``); its trainable parameters' ``of`` count, the whole
    model's (as PEFT's: the Trainer banner's trainable count is then no size)."""
    for label, count in _UNSLOTH.findall(text):
        if (value := int(count.replace(",", ""))) > 0:
            out += [_fact(_UNSLOTH_COUNTS[label], value), _SEEN]
        if value > 0 and label == "Total steps":  # the Trainer's max_steps, as its own banner's
            out.append({"what": "banner", "name": "max_steps", "value": _typed(value)})
    if whole := _UNSLOTH_SIZE.search(text):
        _whole_model(whole[1], out)


def _whole_model(count: str, out: list) -> None:
    """An adapter's trainer's count of the whole model (PEFT's ``all params``, Unsloth's ``of``): the logged
    size, where the Trainer banner's trainable count is the adapter's alone (``_trainable``)."""
    if (whole := int(count.replace(",", ""))) <= INT64_MAX:
        out += [_fact("logged_model_size", whole / 1e9), {"what": "peft"}, _SEEN]


def _of_training(label: str, count: str) -> bool:
    """Whether a banner's count is the training's: an evaluation's banner prints ``Num examples`` too, bare
    (``{self.num_examples(dataloader)}``), where the training's has thousands separators (``{num_examples:,}``;
    one under 1,000 is not told apart, so not read)."""
    return label != "Num examples" or "," in count


def _banner(label: str, value: int, out: list) -> None:
    """``Running training``'s counts (ZeRO-3 partitions parameters: some versions count 0), and DP from the
    batch numbers (total = micro batch x accumulation x DP; no GPU count: TP ranks are not in it)."""
    if label in _BANNER_COUNTS:
        out += [{"what": "banner", "name": _BANNER_COUNTS[label], "value": _typed(value)}, _SEEN]
        return
    fact = _BANNER_FACTS[label]
    size = fact == "logged_model_size" and value <= INT64_MAX  # beyond: noted, never divided (OverflowError)
    if value > 0 and fact == "logged_model_size":  # a fact unless PEFT said the whole model's (_trainable)
        out.append({"what": "trainable", "name": fact, "value": _typed(value / 1e9 if size else value)})
    elif value > 0:
        out.append(_fact(fact, value))
    if value > 0 and fact not in ("train_iters", "logged_model_size"):
        out += [{"what": "banner", "name": fact, "value": _typed(value)}, {"what": "dp"}]
    elif value > 0 and fact == "train_iters":  # the steps a ratio of logging_steps is of (max_steps -1)
        out.append({"what": "banner", "name": "max_steps", "value": _typed(value)})
    out.append(_SEEN)


def _command_line(text: str, out: list) -> None:
    """An echoed launch command (``set -x``): facts, ``sized`` by a trained length, ``--logging_steps``. The
    flags are no sign of the Trainer: scripts of their own take the same (DeepSpeed-Chat's, Accelerate's
    ``*_no_trainer.py``)."""
    flags = grammar.command_line_flags(text)
    if flags.get("config_overrides"):
        _overrides(flags["config_overrides"], out)
    for flag in _TRAINED_LENGTHS:
        if (length := grammar.positive_int(flags.get(flag, ""))) is not None:
            out += [_fact("seq_len", length), {"what": "sized"}]
    numbers = {fact: grammar.positive_int(flags.get(flag, "")) for flag, fact in _FLAG_INT_FACTS.items()}
    out += [_fact(fact, value) for fact, value in numbers.items() if value is not None]
    out += [_fact("precision", flag) for flag in ("fp16", "bf16") if _switch_on(flags, flag)]
    if _switch_on(flags, "gradient_checkpointing"):
        out.append(_fact("activation_checkpointing", True))
    logging_steps = grammar.literal(flags.get("logging_steps", ""))
    if isinstance(logging_steps, int | float) and not isinstance(logging_steps, bool):
        first = _switch_on(flags, "logging_first_step")
        defaults = (("logging_steps", logging_steps), ("logging_first_step", first))
        out += [{"what": "default", "name": name, "value": _typed(value)} for name, value in defaults]


def _switch_on(flags: dict[str, str], name: str) -> bool:
    """HfArgumentParser booleans: a bare ``--fp16`` or ``--fp16 true``."""
    return name in flags and flags[name].lower() in ("", "true", "1", "yes")


def _launcher(text: str, out: list) -> None:
    """``--nproc_per_node 4 --nnodes 16`` (a torch launcher's default: one node; ``1:4``, ``gpu``: none);
    ``accelerate launch --num_processes 8 --num_machines 2`` (the processes of every machine; its
    ``--mixed_precision bf16`` the run's precision), or its warning that it took the defaults (``\t`--num_processes`
    was set to a value of `4```: a machine's GPUs); the
    ``deepspeed`` launcher's ``--num_gpus 8 --num_nodes 2`` (launcher/runner.py; each -1 by default: all
    of a node's, all the hostfile's)."""
    if default := _ACCELERATE_DEFAULT.search(text):  # the world accelerate launched, as it warns
        out.append(_fact("gpus" if default[1] == "num_processes" else "nodes", int(default[2])))
        return
    flags = grammar.command_line_flags(text)
    if (precision := flags.get("mixed_precision", "")) in ("fp16", "bf16"):  # "no": the arguments say
        out.append(_fact("precision", precision))
    if (per_node := grammar.positive_int(flags.get("num_gpus", ""))) is not None:
        nodes = grammar.positive_int(flags.get("num_nodes", ""))
        out += [_fact("gpus_per_node", per_node)]
        out += [_fact("nodes", nodes), _fact("gpus", per_node * nodes)] if nodes else []
        return
    if (processes := grammar.positive_int(flags.get("num_processes", ""))) is not None:
        machines = grammar.positive_int(flags.get("num_machines", "1"))
        out += [_fact("gpus", processes)] + ([_fact("nodes", machines)] if machines else [])
        if machines and processes % machines == 0:
            out.append(_fact("gpus_per_node", processes // machines))
        return
    per_node = grammar.positive_int(flags.get("nproc_per_node") or flags.get("nproc-per-node") or "")
    nodes = grammar.positive_int(flags.get("nnodes", ""))
    if nodes is None and "nnodes" not in flags and any(name in text for name in _TORCH_LAUNCHERS):
        nodes = 1
    out += [_fact(fact, value) for fact, value in (("gpus_per_node", per_node), ("nodes", nodes)) if value]
    if per_node is not None and nodes is not None:
        out.append(_fact("gpus", per_node * nodes))


def _dicts(text: str, out: list) -> None:
    """Logged dicts: a training dict (``loss``) a step, a final dict's metrics copies; eval dicts nothing."""
    for body in re.findall(_DICT, text):
        if not any(key in body for key in _TRAINER_KEYS):
            continue
        try:
            logged = _printed_literal(body) if body.endswith("}") else "dict cut short, not read"
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            logged = "not a Python dict literal"
        if isinstance(logged, str):
            out.append(_note(f"{logged}: {body[:80]!r}"))
        if not isinstance(logged, dict):
            continue
        if "loss" not in logged and _POLICY_LOSS in logged:
            logged = {**logged, "loss": logged[_POLICY_LOSS], "learning_rate": logged.get("lr")}
        if "loss" in logged and not _TRAINING_KEYS.intersection(logged):
            continue  # a script's own print ({'step': 10, 'loss': 2.94}): the Trainer's name the epoch or rate
        if "loss" in logged or "train_runtime" in logged:
            out.append({"what": "point"})
        # the final metrics have the run's train_loss; a step's dict its loss, and with
        # include_num_input_tokens_seen (Trainer.log's speed_metrics) the run's train_runtime so far
        if ("train_runtime" in logged or "train_samples_per_second" in logged) and "loss" not in logged:
            for key, fact in _FINAL_FACTS.items():
                if key in logged and (value := _number(logged[key])) is not None:
                    out.append(_final(fact, value, str(logged[key])))
        elif "loss" not in logged:
            if (seconds := _number(logged.get("eval_runtime"))) is not None:  # an evaluation inside training
                out.append({"what": "evaluation", "value": _typed(seconds)})
            continue
        elif isinstance(step := logged.get("step"), int) and not INT64_MIN <= step <= INT64_MAX:
            out.append(_note(f"iteration={step} {kinds.TOO_LONG}"))
        else:
            if isinstance(progress := logged.get(_STEP_OF_PLAN_KEY), str) and (
                of_plan := _STEP_OF_PLAN.fullmatch(progress)
            ):
                step = int(of_plan[1])
                out.append(_fact("train_iters", int(of_plan[2])))
            step = {"value": _typed(step)} if isinstance(step, int) else {"name": " ".join(body.split())}
            metrics = {column: _number(logged.get(key)) for key, column in _DICT_METRICS.items()}
            out.append({"what": "step", **step, **metrics, "epoch": _number(logged.get("epoch"))})
        out.append(_SEEN)


def _printed_literal(body: str) -> Any:
    """``ast.literal_eval`` of a dict as Python prints it: transformers 4 prints the floats, and a
    non-finite one (``'grad_norm': inf`` when fp16 overflows, ``'loss': nan``) is a name, no literal; a
    tensor's repr is its number (no literal either, and ``grad_fn=<...>`` no Python at all)."""
    try:
        return ast.literal_eval(body)
    except (ValueError, SyntaxError):
        numbers = _TENSOR.sub(r"\1", body) if "tensor(" in body else body
        return ast.literal_eval(_NonFinite().visit(ast.parse(numbers, mode="eval")))


#: a 0-d tensor's repr, ``tensor(1.2910, device='cuda:0')`` (also ``dtype=``, ``grad_fn=<...>``): transformers
#: 4.38.0-4.38.1 logged DeepSpeed's ``get_global_grad_norm()`` as it came (a tensor under ZeRO-3); later
#: releases log its ``.item()``
_TENSOR = re.compile(r"\btensor\(([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))(?:,[^()]*)?\)")


class _NonFinite(ast.NodeTransformer):
    """The names ``nan`` and ``inf`` as the floats Python prints so."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Constant(float(node.id)), node) if node.id in ("nan", "inf") else node


def _number(value: Any) -> float | None:
    """A dict value as a float: 2021 logs print floats, today's print ``'4.705'`` strings."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return float(value.replace(",", "") if isinstance(value, str) else value)
    except ValueError:
        return None
    except OverflowError:  # an integer beyond any float: infinite, as the text "1e400" reads
        return math.inf if value > 0 else -math.inf


def _final(fact: str, value: float | int, text: str) -> dict[str, Any]:
    """A final metric's copy: most significant digits win (dicts print ``.4g``, the block 4 decimals)."""
    return {"what": "final", "name": fact, "value": _typed(value), "digits": _significant_digits(text)}


def _significant_digits(text: str) -> int:
    """The digits of ``text``'s mantissa without leading zeros (every digit a regex calls a digit)."""
    return len(re.sub(r"[^\d]", "", text.partition("e")[0].partition("E")[0]).lstrip("0"))


def _metric(text: str, out: list) -> None:
    """A metrics block line: a final metric's copy (``train_runtime``: ``1 day, 2:03:04.50`` or seconds)."""
    if (parsed := metric_line(text.strip())) is None:
        return
    name, value = parsed[0], parsed[1].strip()
    number = _number(value)
    if name == "train_runtime" and (span := runtime_parts(value)) is not None:
        number = span.get("days", 0) * 86400 + span["hours"] * 3600 + span["minutes"] * 60 + span["seconds"]
    if name == "train_runtime" and number is None:
        out.append(_note(f"train_runtime not a duration: {value!r}"))
    elif name in _FINAL_FACTS and number is not None:
        out.append(_final(_FINAL_FACTS[name], number, value))
    out.append(_SEEN)


#: a ``name = value`` line of the train metrics block, stripped, tabs expanded
_SKIP = r"[ \t\r\n]*+"
_METRIC_LINE = re.compile(rf"{_SKIP}(?P<name>[A-Za-z_][A-Za-z0-9_]*+){_SKIP}={_SKIP}(?P<value>.*+){_SKIP}\Z")
#: datetime.timedelta's str(): "0:01:23", "1 day, 2:03:04"; log_metrics appends ".45" (hundredths).
_RUNTIME = re.compile(
    rf"{_SKIP}(?>(?:(?P<days>[0-9]++){_SKIP}days?,)?){_SKIP}(?P<hours>[0-9]++){_SKIP}:{_SKIP}"
    rf"(?P<minutes>[0-9]++){_SKIP}:{_SKIP}{grammar.NUMBER_FIRST_MATCH}{_SKIP}\Z"
)


def metric_line(text: str) -> tuple[str, str] | None:
    """``(name, value)`` of a ``name = value`` line of the train metrics block, or None (tabs expanded)."""
    match = _METRIC_LINE.match(text.expandtabs())
    return None if match is None else match.group("name", "value")


def runtime_parts(text: str) -> dict[str, int | float] | None:
    """``days`` (when printed), ``hours``, ``minutes``, ``seconds`` of a ``_RUNTIME`` duration, or None."""
    if (match := _RUNTIME.match(text.expandtabs())) is None:
        return None
    parts = {name: int(match[name]) for name in ("days", "hours", "minutes") if match[name] is not None}
    return parts | {"seconds": grammar.number_of(match)}


def _effects_of(use: str, text: str) -> list[dict[str, Any]]:
    """What a record does, by its use (its own: a dump or another; a block's line); an error is noted."""
    out: list[dict[str, Any]] = []
    try:
        if use == "dump":  # a dump's opener, or a one-line dump (older versions)
            if not text.rstrip().endswith(_ARGS_MARKER):
                for field in _ONE_LINE_FIELD.finditer(text.split(_ARGS_MARKER, 1)[1]):
                    _argument(field[1], field[2], out)
                out.append({"what": "fp32"})
            out.append(_SEEN)
        elif use == "plain":
            _plain(text, out)
        elif use in ("first field", f"arguments{BODY}") and (field := re.match(_ARGS_FIELD, text)):
            _argument(field[1], field[2].rstrip().removesuffix(","), out)
            if use == "first field":  # a record of its own: a dump's, whatever the class name heading it
                out.append(_SEEN)
        elif use == f"arguments{CLOSER}":
            out.append({"what": "fp32"})
        elif use == f"config{BODY}" and (item := re.match(_CONFIG_JSON, text)):
            _shape(item[1], item[2], out)
        elif use == f"metrics{BODY}":
            _metric(text, out)
    except Exception as error:  # noqa: BLE001 - a bad record is noted, never fatal
        out.append(_note(f"{type(error).__name__}: {error}"))
    return out


#: what a segment's read leaves the next (``Events.carry``): per run, the last effect of each sort and
#: name later records need (arguments, sizes, overrides, finals, numbered dicts, bars; a bar's line, file)
_CARRY = {"run": pl.Int64, "what": pl.String, "name": pl.String, "value": _TYPED, "digits": pl.Int64}
_CARRY |= {"line": pl.Int64, "file": pl.Int64, "base": pl.Int64}  # base: a resume's dicts before it


def read_trainer(records: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The family's records and blocks' lines after what earlier segments carry; at the end, the bar."""
    frame = records.collect()
    if frame.is_empty():
        return _progress(carry)
    carried = [] if carry is None else [carry.with_columns(order=pl.lit(-1, pl.Int64))]
    effects = pl.concat([*carried, _effects(frame)], how="diagonal_relaxed")
    what, order = pl.col("what"), pl.col("order")
    args = effects.filter(what.is_in(["arg", "default", "banner"]))  # a default only where none came before
    args = args.filter((what != "default") | pl.struct("run", "name").is_first_distinct())
    shapes, before = _shapes(effects), pl.col("digits").cum_max().shift(1).over("run", "name")
    # a final's copy with more digits than all before it is stated: the last, the run's, has the most
    finals = effects.filter(what == "final").filter(before.is_null() | (pl.col("digits") > before))
    facts = pl.concat(
        [
            effects.filter(what == "fact"),
            _trainable(effects),
            _asked(effects, args),
            finals,
            shapes.filter(what != "sized"),
        ],
        how="diagonal_relaxed",
    ).filter(order >= 0)
    copies = _copies(effects, args)
    steps, printed = _copied(effects.filter(what == "step"), effects, copies)
    bar_records = frame.filter(_holds(pl.col("text"), *_RATES))
    steps, dicts, resumes = _steps(steps, effects, args, _bar_steps(bar_records))
    planned = facts.filter(pl.col("name") == "train_iters").with_columns(what=pl.lit("planned"))
    kept = [effects.filter(order < 0), args.with_columns(what=pl.lit("arg")), shapes.filter(what != "shape")]
    copies = copies.select(
        "run", what=pl.lit("copies"), order=pl.lit(0, pl.Int64), value=_int_typed("copies")
    )
    carry = [*kept, finals, dicts, resumes, _bars(bar_records, effects), planned, printed, copies]
    carry.append(effects.filter(what == "peft"))
    carry = pl.concat(carry, how="diagonal_relaxed")
    carry = carry.group_by("run", "what", "name").agg(pl.all().get(pl.col("order").arg_max()))
    carry = carry.select(*_CARRY).cast(_CARRY)
    return _events(facts, steps, effects, carry)


def _trainable(effects: pl.DataFrame) -> pl.DataFrame:
    """The banner's trainable parameters as the logged size, of the runs where PEFT printed no count of the
    whole model (in this read or one before)."""
    peft = effects.filter(pl.col("what") == "peft").select("run").unique()
    trainable = effects.filter(pl.col("what") == "trainable").join(peft, on="run", how="anti")
    return trainable.with_columns(what=pl.lit("fact"))


def _effects(frame: pl.DataFrame) -> pl.DataFrame:
    """Effects of the records (a block's line its line's, else its own; a bar's, an opener's none)."""
    text, source, role = pl.col("text"), pl.col("source"), pl.col("role")
    line = (source != "trainer") & role.is_in([BODY, CLOSER])
    taken = frame.filter(line)["order"].implode()
    own = ((source == "trainer") | (role == OPENER)) & ~pl.col("order").is_in(taken)
    opener = _holds(text, _METRICS_BANNER) | text.str.contains(_CONFIG_OPENER)
    mine = (
        pl.when(_holds(text, _ARGS_MARKER))
        .then(pl.lit("dump"))
        .when(text.str.contains(_FIRST_FIELD))
        .then(pl.lit("first field"))
        .when(~opener)
        .then(pl.lit("plain"))
    )
    block_line = pl.concat_str(source, role.cast(pl.String))
    use = pl.when(own & ~_bar_only(text)).then(mine).when(line).then(block_line)
    rows = frame.select("run", "order", "file", "text", use=use).drop_nulls("use")
    table = rows.select("use", "text").unique()
    read = pl.Series([_effects_of(use, text) for use, text in table.iter_rows()], dtype=pl.List(_EFFECT))
    table = table.with_columns(effect=read).with_columns(item=pl.int_ranges(pl.col("effect").list.len()))
    table = table.explode("effect", "item").drop_nulls("effect").unnest("effect")
    joined = rows.lazy().join(table.lazy(), on=["use", "text"], maintain_order="left_right")
    order = pl.col("order") + pl.col("item").clip(upper_bound=127)
    return joined.select("run", order, "file", *_EFFECT.to_schema()).collect()


def _int_typed(column: str | pl.Expr) -> pl.Expr:
    """An integer column as a ``_TYPED`` value."""
    integer = (pl.col(column) if isinstance(column, str) else column).cast(pl.Int64)
    real, text = integer.cast(pl.Float64), integer.cast(pl.String)
    return pl.struct(kind=pl.lit("int"), integer=integer, real=real, text=text)


def _field(name: str, column: str = "value") -> pl.Expr:
    return pl.col(column).struct.field(name)


def _state_at(at: pl.DataFrame, args: pl.DataFrame, *names: str) -> pl.DataFrame:
    """``at`` with a column per name: the last argument so named before each row."""
    for name in names:
        named = args.filter(pl.col("name") == name).select("run", "order", **{name: "value"})
        at = at.join_asof(named, on="order", by="run", allow_exact_matches=False, check_sortedness=False)
    return at


def _state_of_other_streams(at: pl.DataFrame, args: pl.DataFrame, *names: str) -> pl.DataFrame:
    """``at``'s nulls of ``names`` filled with the first argument so named after the row in another of the
    run's files: a job's two streams are written at once, HF's banner to stderr (``logger.info``) and its
    dicts to stdout (``tqdm.write``), so the .err's banner, read after the .out, was printed before the
    .out's dicts (a banner after them in their own file is a later launch's)."""
    for name in names:
        named = args.filter(pl.col("name") == name).select("run", "order", _file="file", _later="value")
        at = at.join_asof(named, on="order", by="run", strategy="forward", check_sortedness=False)
        elsewhere = pl.col(name).is_null() & (pl.col("_file") != pl.col("file"))
        at = at.with_columns(pl.when(elsewhere).then("_later").otherwise(name).alias(name))
        at = at.drop("_file", "_later")
    return at


def _asked(effects: pl.DataFrame, args: pl.DataFrame) -> pl.DataFrame:
    """What records ask of the arguments before them: DP from the banner's batch numbers; where a dump ends
    (a few a segment: in Python) one process's ``_n_gpu``, fp32 if no fp16, bf16 or DeepSpeed config."""
    what = pl.col("what")
    banner = _state_at(effects.filter(what == "dp"), args, "micro_batch_size", "gas", "global_batch_size")
    total = _field("integer", "global_batch_size")
    per_step = _field("integer", "micro_batch_size") * _field("integer", "gas")
    dp = pl.struct(kind=pl.lit("int"), integer=total // per_step)
    names, rows = ("_n_gpu", "fp16", "bf16", "deepspeed"), []
    asks = _state_at(effects.filter(what.is_in(["gpus", "fp32"])), args, *names)
    for run, order, asked, *state in asks.select("run", "order", "what", *names).rows():
        n_gpu, fp16, bf16, deepspeed = map(_untyped, state)
        if asked == "gpus" and isinstance(n_gpu, int) and n_gpu > 0:
            rows.append((run, order, "gpus", _typed(n_gpu)))
        elif asked == "fp32" and fp16 is False and bf16 is False and deepspeed is None:
            rows.append((run, order, "precision", _typed("fp32")))
    schema = {"run": pl.Int64, "order": pl.Int64, "name": pl.String, "value": _TYPED}
    dp = banner.filter(total % per_step == 0).select("run", "order", name=pl.lit("dp"), value=dp)
    return pl.concat([dp, pl.DataFrame(rows, schema=schema, orient="row")], how="diagonal_relaxed")


def _shapes(effects: pl.DataFrame) -> pl.DataFrame:
    """Shape statements and block sizes: a config printed later (run_clm's base one: n_embd 768, n_layer 12)
    replaces no override, nor n_positions the length trained on (``_TRAINED_LENGTHS``: ``--block_size``...)."""
    what, order = pl.col("what"), pl.col("order")
    sized, overridden = (order.filter(what == key).min() for key in ("sized", "override"))
    shapes = effects.filter(what.is_in(["shape", "override", "sized"]))
    shapes = shapes.filter(pl.col("name").ne_missing("seq_len") | (order < sized.over("run")).fill_null(True))
    return shapes.filter((what != "shape") | (order < overridden.over("run", "name")).fill_null(True))


def _copies(effects: pl.DataFrame, args: pl.DataFrame) -> pl.DataFrame:
    """Per run, how many times the Trainer prints each training dict (``copies``), where it is known: once
    where one node runs it (``--nnodes 1``, or one process: ``local_rank=-1``), once per node with
    ``disable_tqdm`` (PrinterCallback prints on each node's local rank 0). Else identical dicts are one step
    (the copies of several nodes: older ProgressCallbacks printed on each node too). The carried count wins."""
    what, name = pl.col("what"), pl.col("name")
    carried = effects.filter(what == "copies").select("run", copies=_field("integer"))
    nodes = effects.filter(what == "fact", name == "nodes").select("run", nodes=_field("integer"))
    nodes = nodes.group_by("run").agg(pl.col("nodes").last())
    single = args.filter(name == "local_rank", _field("integer") == -1).select(
        "run", nodes=pl.lit(1, pl.Int64)
    )
    printer = args.filter(name == "disable_tqdm", _field("integer") == 1).select("run", printer=pl.lit(True))
    known = (
        pl.concat([single, nodes])
        .unique("run", keep="first")
        .join(printer.unique("run"), on="run", how="left")
    )
    copies = pl.when(pl.col("nodes") == 1).then(1).when(pl.col("printer")).then("nodes")
    known = known.select("run", copies=copies.cast(pl.Int64)).filter(pl.col("copies") > 0)
    return pl.concat([carried, known]).unique("run", keep="first")


def _copied(
    steps: pl.DataFrame, effects: pl.DataFrame, copies: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The step effects, a dict's text named after its copy (``text#n``: its n-th ``copies`` prints, the
    n-th step that printed that text: a NaN loss at a constant learning rate), where the copies are known.
    And each text's prints so far (``printed``, carried)."""
    name = pl.col("name")
    before = effects.filter(pl.col("what") == "printed").select("run", "name", before=_field("integer"))
    prints = pl.col("before").fill_null(0) + pl.int_range(pl.len()).over("run", "name")
    texts = (
        steps.drop_nulls("name")
        .join(copies, on="run", how="left", maintain_order="left")
        .join(before, on=["run", "name"], how="left", maintain_order="left")
        .with_columns(prints=prints)
        .with_columns(copy=pl.col("prints") // pl.col("copies"))
    )
    printed = texts.group_by("run", "name").agg(pl.col("order").max(), value=pl.col("prints").max() + 1)
    printed = printed.select("run", "order", "name", what=pl.lit("printed"), value=_int_typed("value"))
    keyed = pl.when(pl.col("copy") > 0).then(name + "#" + pl.col("copy").cast(pl.String)).otherwise(name)
    texts = texts.with_columns(name=keyed).drop("copies", "before", "prints", "copy")
    steps = pl.concat([steps.filter(name.is_null()), texts], how="diagonal_relaxed")
    return steps.sort("run", "order", maintain_order=True), printed


def _bar_steps(bar_records: pl.DataFrame) -> pl.DataFrame:
    """The training bar's updates: ``run``, ``order``, the steps done (``bar_step``) of its ``bar_total``."""
    bar = pl.col("text").str.extract_groups(_TRAINING_BAR)
    updates = bar_records.select("run", "order", bar=bar)
    step, total = (pl.col("bar").struct[index].cast(pl.Int64, strict=False) for index in (0, 1))
    return updates.select("run", "order", bar_step=step, bar_total=total)


def _steps(
    steps: pl.DataFrame, effects: pl.DataFrame, args: pl.DataFrame, bars: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The dicts' steps (own, else by place among the run's distinct dicts, after the last resume), the
    ``dict``s numbered and the resumes with their ``base``. Where neither logging_steps nor the epochs
    number them, a dict's step is the training bar's count just before it (the Trainer updates the bar
    at each step's end, then logs; at over 0.1 s a step tqdm prints every update), if that bar counts to
    the run's max_steps (printed nowhere: the total of the bars most of the run's dicts follow)."""
    known = effects.filter(pl.col("what") == "dict")
    known_count = known.group_by("run").agg(known=pl.len())
    new = (
        steps.drop_nulls("name")
        .unique(["run", "name"], keep="first", maintain_order=True)
        .join(known, on=["run", "name"], how="anti", maintain_order="left")
        .join(known_count, on="run", how="left")
        .with_columns(position=pl.col("known").fill_null(0) + pl.int_range(1, pl.len() + 1).over("run"))
    )
    resumes = _resumes(effects, new, known_count)
    new = _state_at(new, args, "logging_steps", "logging_first_step", "max_steps", *_EPOCH_STATE)
    new = _state_of_other_streams(
        new, args, "logging_steps", "logging_first_step", "max_steps", *_EPOCH_STATE
    )
    # each a column before the next reads it: inlined, the nested expressions take polars ~0.2 s a batch
    new = new.with_columns(per_epoch=_banner_steps_per_epoch())
    new = new.with_columns(logging_steps=pl.coalesce(_steps_per_epoch(), "logging_steps"))
    by_resume = resumes.select("run", "order", resumed=_field("integer"), resume_base="base")
    new = new.join_asof(by_resume, on="order", by="run", allow_exact_matches=False, check_sortedness=False)
    new = _resume_of_other_stream(new, effects)
    # no logging_steps printed: the interval the dicts' epochs show, after a step-1 dict if they show one
    new = _with_intervals_of_epochs(new)
    plain, after_first = pl.col("plain"), pl.col("after_first")
    first = pl.col("logging_steps").is_null() & plain.is_null() & after_first.is_not_null()
    new = new.with_columns(
        logging_steps=pl.coalesce("logging_steps", plain, after_first),
        logging_first_step=pl.when(first).then(pl.lit(_typed(True), _TYPED)).otherwise("logging_first_step"),
    )
    bars = bars.sort("run", "order").drop_nulls()
    new = new.sort("run", "order").join_asof(bars, on="order", by="run", check_sortedness=False)
    # where no max_steps is printed, the training bar is the one most of the run's dicts follow
    training_total = pl.coalesce(
        _field("integer", "max_steps"), pl.col("bar_total").mode().first().over("run")
    )
    by_bar = pl.when(pl.col("bar_total") == training_total).then("bar_step")
    state = new.select(
        "position",
        "logging_steps",
        "logging_first_step",
        "max_steps",
        "resumed",
        "resume_base",
        by_bar=by_bar,
    )
    numbered = [
        _typed(_position_to_step(position, *map(_untyped, values), resumed=resumed, base=base, by_bar=by_bar))
        for position, *values, resumed, base, by_bar in state.rows()
    ]
    new = new.select("run", "order", "name", what=pl.lit("dict"), value=pl.Series(numbered, dtype=_TYPED))
    dicts = pl.concat([known, new], how="diagonal_relaxed")
    steps = steps.join(dicts.select("run", "name", number=_field("integer")), on=["run", "name"], how="left")
    step, mode = pl.coalesce(_field("integer"), "number"), pl.lit(kinds.RECORD, pl.Int8)
    return steps.select("order", *_DICT_METRICS.values(), step=step, mode=mode), dicts, resumes


#: what numbers the dicts of ``logging_strategy`` epoch, or by their epochs: the strategy, the banner's counts
_EPOCH_STATE = ("logging_strategy", "steps_per_epoch", "num_train_epochs", "num_examples")
_EPOCH_STATE += ("micro_batch_size", "gas", "global_batch_size")


def _banner_steps_per_epoch() -> pl.Expr:
    """The update steps an epoch takes: the banner's (transformers 5), else its optimization steps over its
    epochs where that is within a step of what its examples give, else the latter. The optimization steps
    are ``max_steps`` where one is set, and the epochs the ones it begins (a run of 300 steps of 322 an
    epoch counts 1 epoch): only the examples give the steps of such an epoch, the Trainer's
    ``len(dataloader) // gas``: accelerate's sharded loader of ``ceil(ceil(examples / micro) / processes)``
    batches a process (processes = total batch / micro / gas)."""
    epochs, total = _field("integer", "num_train_epochs"), _field("integer", "max_steps")
    micro, gas = _field("integer", "micro_batch_size"), _field("integer", "gas")
    processes = _field("integer", "global_batch_size") // (micro * gas)
    batches = _ceil_div(_ceil_div(_field("integer", "num_examples"), micro), processes)
    by_examples = pl.when(processes > 0).then(batches // gas)
    by_epochs = pl.when(total % epochs == 0).then(total // epochs)
    agree = by_examples.is_null() | ((by_epochs - by_examples).abs() <= 1)
    return pl.coalesce(_field("integer", "steps_per_epoch"), pl.when(agree).then(by_epochs), by_examples)


def _ceil_div(numerator: pl.Expr, denominator: pl.Expr) -> pl.Expr:
    return (numerator + denominator - 1) // denominator


def _steps_per_epoch() -> pl.Expr:
    """The steps an epoch takes (column ``per_epoch``) where ``logging_strategy`` is epoch (the Trainer logs
    at each epoch's end); else null."""
    per_epoch = pl.col("per_epoch")
    by_epoch = _field("text", "logging_strategy").str.to_lowercase().str.ends_with("epoch")
    return pl.when(by_epoch & (per_epoch > 0)).then(_int_typed(per_epoch))


def _with_intervals_of_epochs(new: pl.DataFrame) -> pl.DataFrame:
    """``new`` with ``plain`` and ``after_first``: where ``logging_steps`` is printed nowhere, the interval
    the dicts' epochs show, per launch (a run's dicts after each resume apart); ``after_first`` where
    ``logging_first_step`` made a fresh launch's first dict step 1 and the n-th after it the n-th multiple.
    The Trainer's epoch is the micro-steps done over an epoch's, so a dict's step is its epoch times the
    banner's update steps per epoch (column ``per_epoch``; to the digits printed: transformers 4.x rounds
    the epoch to 2, 5.x prints 4 significant ones). From scratch the n-th dict comes at n times the
    interval: the interval is the least-squares slope of those steps over the dicts' places. After a
    resume at step r the Trainer logs at the multiples past it, the n-th at ``(r // interval + n) *
    interval``: the slope with an intercept, of two dicts or more. The interval is taken if it is near a
    whole number and every dict is within the epoch's rounding of its step; else null (the dicts' order).
    Each stage is a column the next reads: nested in one expression, polars evaluates its windows again
    inside each other (0.1 s for a few hundred dicts)."""
    resumed, base = pl.col("launch_resumed"), pl.col("launch_base")

    def place(first: int) -> pl.Expr:
        """A dict's place in its launch: past the dicts before a resume; fresh, past ``first`` (a step-1 dict)."""
        return pl.col("position") - pl.when((resumed > 0) | (base > 0)).then(base).otherwise(first)

    staged = new.with_columns(
        launch_resumed=pl.col("resumed").fill_null(0),
        launch_base=pl.col("resume_base").fill_null(0),
        at=pl.col("epoch") * pl.col("per_epoch"),
    ).with_columns(place_plain=place(0), place_after_first=place(1))
    for name in ("plain", "after_first"):
        staged = _with_interval(staged, name)
    return staged.drop(cs.starts_with("launch_", "place_", "sum_", "slope_", "interval_"), "at")


#: the columns that set a run's dicts apart by launch (``_with_intervals_of_epochs``)
_LAUNCH = ("run", "launch_resumed", "launch_base")


def _with_interval(staged: pl.DataFrame, name: str) -> pl.DataFrame:
    """``staged`` with column ``name``: the interval of the dicts' epochs placed by ``place_<name>``."""
    place, at = pl.col(f"place_{name}"), pl.col("at")
    on_interval = place >= 1
    terms = {"place_at": place * at, "place_place": place * place, "place": place, "at": at}
    sums = {f"sum_{term}": value.filter(on_interval).sum().over(_LAUNCH) for term, value in terms.items()}
    staged = staged.with_columns(**sums, sum_count=on_interval.sum().over(_LAUNCH))
    place_at, place_place, places, ats, count = (
        pl.col(f"sum_{term}") for term in ("place_at", "place_place", "place", "at", "count")
    )
    with_intercept = (count * place_at - places * ats) / (count * place_place - places * places)
    slope = pl.when(pl.col("launch_resumed") > 0).then(with_intercept).otherwise(place_at / place_place)
    staged = staged.with_columns(slope_=slope).with_columns(
        interval_=pl.when(pl.col("slope_").is_finite()).then(pl.col("slope_").round())  # none on it: 0 / 0
    )
    interval, rounding = pl.col("interval_"), pl.col("per_epoch") * 0.005 + 1
    expected = (pl.col("launch_resumed") // interval + place) * interval
    fits = pl.when(on_interval).then((at - expected).abs() <= rounding).otherwise((at - 1).abs() <= rounding)
    known = at.is_not_null() & pl.col("logging_steps").is_null()
    whole = ((pl.col("slope_") - interval).abs() <= 0.25) & (interval >= 1)
    usable = fits.all().over(_LAUNCH) & known.all().over(_LAUNCH) & whole
    return staged.with_columns(pl.when(usable).then(_int_typed(interval)).alias(name))


def _resume_of_other_stream(new: pl.DataFrame, effects: pl.DataFrame) -> pl.DataFrame:
    """``new``'s dicts with no resume before them take the run's resume from its other file: a job's two
    streams are written at once, the Trainer's resume notice to stderr with its banner and the dicts to
    stdout (``_state_of_other_streams``), so the .err's resume, read after the .out, came before the .out's
    dicts. Only where the run's resumes are all in one file, with at most one training banner: one launch,
    whose dicts they are (its ``resume_base``: the distinct dicts before the first of them)."""
    what, order = pl.col("what"), pl.col("order")
    # a banner states a resume at 0 (a start), a resume notice after it the step it goes on from
    resumes = effects.filter(what == "resume", order >= 0).sort("order").group_by("run")
    resumes = resumes.agg(
        other=_field("integer").last(), other_file=pl.col("file").first(), files=pl.col("file").n_unique()
    )
    banners = effects.filter(what == "launch", order >= 0).group_by("run")
    banners = banners.agg(banners=pl.len(), banner_file=pl.col("file").first())
    single = resumes.join(banners, on="run", how="left").filter(
        pl.col("files") == 1,
        pl.col("other") > 0,
        pl.col("banners").fill_null(0) <= 1,
        pl.col("banner_file").is_null() | (pl.col("banner_file") == pl.col("other_file")),
    )
    if single.is_empty():
        return new
    joined = new.join(
        single.select("run", "other", "other_file"), on="run", how="left", maintain_order="left"
    )
    takes = (
        pl.col("resumed").is_null() & pl.col("other").is_not_null() & (pl.col("file") != pl.col("other_file"))
    )
    base = (pl.col("position").filter(takes).min() - 1).over("run")
    return joined.with_columns(
        resumed=pl.when(takes).then("other").otherwise("resumed"),
        resume_base=pl.when(takes).then(base).otherwise("resume_base"),
    ).drop("other", "other_file")


def _resumes(effects: pl.DataFrame, new: pl.DataFrame, known_count: pl.DataFrame) -> pl.DataFrame:
    """The run's resumes (a carried one keeps its ``base``), each with ``base``: the distinct dicts before it."""
    resumes = effects.filter(pl.col("what") == "resume")
    if "base" not in resumes.columns:  # nothing carried
        resumes = resumes.with_columns(base=pl.lit(None, pl.Int64))
    fresh = resumes.filter(pl.col("order") >= 0).drop("base")
    fresh = fresh.join_asof(
        new.select("run", "order", "position"), on="order", by="run", check_sortedness=False
    )
    fresh = fresh.join(known_count, on="run", how="left")
    fresh = fresh.with_columns(base=pl.coalesce("position", "known", pl.lit(0, pl.Int64)))
    carried = resumes.filter(pl.col("order") < 0)
    columns = ["run", "order", "what", "name", "value", "base"]
    return pl.concat([carried.select(columns), fresh.select(columns)], how="vertical_relaxed")


def _untyped(typed: dict[str, Any] | None) -> Any:
    """A ``_TYPED`` value as Python's (``grammar.literal`` reads its text back)."""
    return None if typed is None else grammar.literal(typed["text"] or "")


def _position_to_step(
    position: int,
    interval: Any,
    first_step: Any,
    max_steps: Any,
    *,
    resumed: int | None,
    base: int | None,
    by_bar: int | None = None,
) -> int:
    """The n-th distinct training dict's step, from ``logging_steps`` (a ratio of ``max_steps`` below 1)
    and ``logging_first_step``, or after a resume at step ``resumed`` with ``base`` dicts before it (a
    training started again from step 0 counts its own dicts); without an interval the bar's count before
    it (``by_bar``), else its position; a step beyond int64 is none (the dict's position instead)."""
    if resumed == 0 and base:
        position -= base
    if isinstance(interval, float) and 0 < interval < 1 and isinstance(max_steps, int | float):
        interval = math.ceil(max_steps * interval) if max_steps > 0 else interval
    if not isinstance(interval, int | float) or not 1 <= interval < math.inf:
        return by_bar if by_bar is not None and by_bar > 0 else position
    if resumed and base is not None:  # the Trainer logs when the step is a multiple of it
        step = (resumed // int(interval) + position - base) * int(interval)
    else:
        step = 1 if first_step and position == 1 else int((position - bool(first_step)) * interval)
    return step if step <= INT64_MAX else position


def _bars(bar_records: pl.DataFrame, effects: pl.DataFrame) -> pl.DataFrame:
    """Bar updates (``bar``), the last's total (``last_bar``), the one before a dict's (``dict_bar``)."""
    text, what = pl.col("text"), pl.col("what")
    bars = bar_records.unique("order").sort("order")
    total = text.str.split(" [").list.first().str.split("/").list.last()  # after the last / before " ["
    bars = bars.select("run", "order", "line", "file", what=pl.lit("bar"), name=total, value=pl.struct(text))
    totals = bars.select("run", "order", value=pl.struct(text="name"))
    carried = effects.filter(what == "last_bar").select(*totals.columns)
    totals = pl.concat([carried, totals], how="vertical_relaxed").sort("order")
    points = effects.filter(what == "point").select("run", "order", what=pl.lit("dict_bar"))
    dict_bars = points.join_asof(totals, on="order", by="run", check_sortedness=False).drop_nulls("value")
    last_bar = totals.with_columns(what=pl.lit("last_bar"))
    # a bar still counting (n < total) when a dict was logged: the Trainer's, whose total is max_steps
    update = _field("text").str.extract_groups(_TRAINING_BAR)
    short = kinds.as_count(update.struct["1"]) < kinds.as_count(update.struct["2"])
    counts = bars.select("run", "order", short=short.fill_null(False), total="name")
    counting = (
        points.join_asof(counts, on="order", by="run", check_sortedness=False)
        .filter("short")
        .select("run", "order", what=pl.lit("counting_bar"), name="total")
        .unique(["run", "name"], keep="last")
    )
    return pl.concat([bars, last_bar, dict_bars, counting], how="diagonal_relaxed")


def _progress(carry: pl.DataFrame | None) -> Events:
    """tqdm's rate of the training bar's last update: the bar of the Trainer's last planned ``max_steps`` (not
    Megatron's), else the last before a dict (ProgressCallback writes through it); none with a description.
    The planned bar's count there is the steps done (``progress_steps``: ProgressCallback updates it to the
    global step at each step's end, a resumed run's first update jumping to it); where no plan is printed,
    that bar's total is, if it was still counting when a dict was logged (ProgressCallback's
    ``tqdm(total=max_steps)``; an evaluation's bar before a dict has ended)."""
    if carry is None:
        return Events()
    chosen = carry.filter(pl.col("what").is_in(["planned", "dict_bar"])).sort("what", descending=True)
    chosen = chosen.group_by("run").agg(
        name=_field("text").first(), planned=(pl.col("what") == "planned").first()
    )
    bars = carry.filter(pl.col("what") == "bar").join(chosen, on=["run", "name"])
    counting = set(carry.filter(pl.col("what") == "counting_bar").select("run", "name").iter_rows())
    rates, counts, plans = [], [], []
    for run, total, text, line, file, planned in bars.select(
        "run", "name", _field("text"), "line", "file", "planned"
    ).rows():
        bar = re.match(_TRAINING_BAR, text)
        if bar is not None and bar[2] == total and (rate := float(bar[3])) > 0:
            rates.append((run, line, file, rate if bar[4] == "s/it" else 1 / rate))
        if bar is not None and bar[2] == total and planned:
            counts.append((run, line, file, int(bar[1])))
        elif bar is not None and bar[2] == total and (run, total) in counting:
            plans.append((run, line, file, int(total)))
    schema = {"run": pl.Int64, "line": pl.Int64, "file": pl.Int64, "value": pl.Float64}
    frame = pl.DataFrame(rates, schema=schema, orient="row")
    steps = pl.DataFrame(counts, schema=schema | {"value": pl.Int64}, orient="row")
    planned = pl.DataFrame(plans, schema=schema | {"value": pl.Int64}, orient="row")
    return Events(
        facts=[
            frame.with_columns(fact=pl.lit("progress_sec_per_iter"), family=pl.lit(NAME)),
            steps.with_columns(fact=pl.lit("progress_steps"), family=pl.lit(NAME)),
            planned.with_columns(fact=pl.lit("train_iters"), family=pl.lit(NAME)),
        ]
    )


def _events(facts: pl.DataFrame, steps: pl.DataFrame, effects: pl.DataFrame, carry: pl.DataFrame) -> Events:
    """The read's events: facts a frame per type (a bigint noted), steps, notes, records (and shapes)."""
    family, kind, what = pl.lit(NAME), _field("kind"), pl.col("what")
    types = dict(int=_field("integer"), bool=_field("integer") == 1, float=_field("real"), str=_field("text"))
    too_long = kinds.too_long_note(pl.col("name"), _field("text"))
    notes = [effects.filter(what == "note").select("order", "name"), facts.filter(kind == "bigint")]
    notes = pl.concat([notes[0], notes[1].select("order", name=too_long)]).sort("order")
    seen = pl.concat([effects.filter(what == "seen"), facts.filter(what.is_in(["shape", "override"]))])
    statement = pl.struct("run", "name", kind)  # of a fact's statements, only the first and last count
    facts = facts.sort("order").filter(statement.is_first_distinct() | statement.is_last_distinct())
    typed = [facts.filter(kind == key).select("order", "name", value=value) for key, value in types.items()]
    evaluations = _evaluations_in_training(effects)
    return Events(
        steps=[steps.with_columns(family=family), evaluations.with_columns(family=family)],
        facts=[frame.select("order", fact="name", value="value", family=family) for frame in typed],
        notes=[notes.select("order", family=family, message="name")],
        marks=[
            kinds.marks_of(seen.lazy(), NAME, kinds.SEEN),
            _evaluated(effects),
            _completed(effects),
            _launches(effects),
        ],
        carry=carry,
    )


def _evaluations_in_training(effects: pl.DataFrame) -> pl.DataFrame:
    """An evaluation's time as a metric of the step logged before it (``settle``: a step event without a
    step), but not of one after the final train metrics (``--do_eval``'s, after training) in this read
    until a training banner: ``train_runtime`` counts the evaluations inside the training loop only."""
    what, order = pl.col("what"), pl.col("order")
    ends = effects.filter(what.is_in(["final", "launch"]), order >= 0).select(
        "run", "order", after=what == "final"
    )
    evaluations = effects.filter(what == "evaluation", order >= 0).sort("run", "order")
    inside = evaluations.join_asof(ends.sort("run", "order"), on="order", by="run", check_sortedness=False)
    return inside.filter(~pl.col("after").fill_null(False)).select(
        "order", eval_runtime_s=_field("real"), mode=pl.lit(kinds.STEP_METRICS, pl.Int8)
    )


#: the completion an evaluation's metrics give a run that trained nothing
EVALUATED = (
    f"evaluation or prediction metrics logged ({_EVAL_BANNERS[0]} or predict's, test's), no training step"
)


def _evaluated(effects: pl.DataFrame) -> pl.DataFrame:
    """A completion mark per evaluation's metrics (``finish`` voids it where the run trained)."""
    evaluated = effects.lazy().filter(pl.col("what") == "evaluated", pl.col("order") >= 0)
    return kinds.marks_of(evaluated, NAME, kinds.COMPLETE, pl.lit(EVALUATED))


def _completed(effects: pl.DataFrame) -> pl.DataFrame:
    """A completion mark per ``Training completed`` line (``_COMPLETED``)."""
    completed = effects.lazy().filter(pl.col("what") == "completed", pl.col("order") >= 0)
    return kinds.marks_of(completed, NAME, kinds.COMPLETE, _field("text"))


def _launches(effects: pl.DataFrame) -> pl.DataFrame:
    """A launch mark per training banner (``settle`` counts one after the family's logged steps only)."""
    banners = effects.lazy().filter(pl.col("what") == "launch", pl.col("order") >= 0)
    return kinds.marks_of(banners, NAME, kinds.LAUNCH)


def _stated_a_fact(run: RunBuilder) -> bool:
    """Whether the Trainer was seen and stated a fact (a launcher's flags, read here too, are no evidence)."""
    seen = run.families_seen.get(NAME)
    return bool(seen) and any(source.startswith(f"{NAME}:") for source in run.provenance.values())


def _other_frameworks_seen(run: RunBuilder) -> bool:
    """Whether a family was seen that is none of the Trainer, the DeepSpeed engine it drives (ZeRO: data
    parallel; a pipeline's topology is a mark of its own) and a job's context."""
    along = {NAME, DEEPSPEED, *(family.name for family in registry.families() if family.context)}
    return any(count and name not in along for name, count in run.families_seen.items())


def finish(run: RunBuilder) -> None:
    """An evaluation's metrics end a run that trained nothing; a run that logged training steps or final
    train metrics ends (or not) by those, whether it evaluated before or after training; its final metrics
    say it ended better than ``Training completed`` before them. The Trainer
    parallelizes data alone (DDP, FSDP, DeepSpeed's ZeRO): of a run whose steps are its dicts, or that logged
    no step but a fact of the Trainer's and showed no other framework, TP and PP are 1 where nothing states
    them, so its DP is its GPUs."""
    trained = run.last_iteration is not None or "final_train_runtime_s" in run.facts
    if trained and run.completion is not None and run.completion[0] == EVALUATED:
        run.completion = None
    # the final metrics after "Training completed" are the better evidence (the reader's, from the facts)
    if (
        run.completion is not None
        and _COMPLETED in run.completion[0]
        and "final_train_runtime_s" in run.facts
    ):
        run.completion = None
    frame = run.iteration_frame
    if frame is not None and frame.height:
        if frame.get_column("family").eq(NAME).all():
            run.data_parallel_only()
    elif _stated_a_fact(run) and not _other_frameworks_seen(run):
        run.data_parallel_only()  # it ended before its first step, or logged none


def _block(name: str, hint: str | None, *tests: Callable[[pl.Expr], pl.Expr]) -> Block:
    """A block of the family, by the predicates of its body, closer and end."""
    opens, body, closes, ends = (_Records(predicate=test) for test in (_OPENS[name], *tests))
    block = dict(opens=opens, body=body, closes=closes, ends=ends, max_lines=BLOCK_MAX_LINES, hint=hint)
    return Block(family=NAME, name=name, read=read_trainer, **block)


ARGUMENTS = _block(
    "arguments",
    f"{_ARGS_LINES}|{literals(MARKERS)}",
    lambda text: text.str.contains(_ARGS_FIELD),
    lambda text: text.str.contains(_ARGS_CLOSER),
    lambda text: _opens_block(text) & ~text.str.contains(_ARGS_FIELD),
)
CONFIG = _block(
    "config",
    f"{_CONFIG_LINES}|{literals(MARKERS)}",
    lambda text: text.str.contains(_CONFIG_JSON),
    lambda text: text.str.starts_with("}"),
    lambda text: _opens_block(text) & ~text.str.contains(_CONFIG_JSON) & ~text.str.starts_with("}"),
)
#: the first line that is no metric ends the metrics block (and is read as usual)
_NOT_METRIC = lambda text: ~text.str.contains(_METRIC)  # noqa: E731
METRICS = _block("metrics", None, lambda text: text.str.contains(_METRIC), _NOT_METRIC, _NOT_METRIC)
TRAINER = kinds.RecordKind(
    family=NAME,
    name="trainer",
    # fairseq's JSON progress records hold "loss" and "epoch" too: its family's
    test=RecordTest(markers=MARKERS, unless=(fairseq.JSON_STEP,)),
    read=read_trainer,
    facts=FACTS,
)
#: the Trainer's code in a traceback's frames (TRL's trainers are its subclasses), or its arguments' (their
#: checks in ``TrainingArguments.__post_init__``): its run, failed before it logged
CODE = ("/transformers/trainer.py", "/transformers/training_args.py", "/trl/trainer/")
#: a line the Trainer's module logged in transformers' explicit format (utils/logging.py
#: ``enable_explicit_format``: ``[INFO|trainer.py:593] 2024-05-15 10:00:00,000 >> Using auto half precision
#: backend``): its run, though it logged nothing else before it failed
EXPLICIT_FORMAT = r"^\[[A-Z]+\|trainer\.py:\d+\] "
_EXPLICIT_MARKER = "|trainer.py:"
TRAINER_LOGGED = RecordKind(
    family=NAME,
    name="trainer's log line",
    test=RecordTest(markers=(_EXPLICIT_MARKER,), pattern=EXPLICIT_FORMAT),
    read=lambda records: kinds.seen_once(records, NAME),
)
#: the fine-tuning tools that run the Trainer, by their own loggers: Axolotl's format (``[2024-06-03
#: 01:06:06,020] [DEBUG] [axolotl.calculate_total_num_steps:416] [PID:20311] [RANK:0] total_num_steps: 2210``:
#: the steps it gives the Trainer as max_steps) and LLaMA-Factory's (``[INFO|2025-02-11 14:02:29]
#: llamafactory.hparams.parser:383 >> Process rank: 0, world size: 8, ...``; before 0.9.1 ``12/09/2024 04:11:17
#: - INFO - llamafactory.hparams.parser - ...``); Unsloth's banners, its model loader's (``==((====))==  Unsloth
#: 2024.8: Fast Qwen2 patching. Transformers = 4.44.0.``) and its patched Trainer's (``==((====))==  Unsloth - 2x
#: faster free finetuning | Num GPUs = 1``): their run, though it failed before training
TOOL_LINE = (
    r"\[axolotl\.[\w.]+:\d+\] \[PID:\d+\]|\bllamafactory\.[\w.]+(?::\d+ >> | - )|^==\(\(====\)\)==  Unsloth\b"
)
_TOOL_MARKERS = ("[axolotl.", "llamafactory.", "==((====))==  Unsloth")
_TOOL_FACTS = {
    "train_iters": r"\[axolotl\.calculate_total_num_steps:\d+\] .*\btotal_num_steps: (\d+)",
    "gpus": r"\bllamafactory\.hparams\.parser\b.* world size: (\d+),",
}


def read_tool_lines(records: pl.LazyFrame) -> Events:
    """A mark per tool's line; the steps Axolotl planned, LLaMA-Factory's world size."""
    counts = {
        fact: kinds.as_count(pl.col("text").str.extract(pattern, 1)) for fact, pattern in _TOOL_FACTS.items()
    }
    facts = kinds.facts_of(records, NAME, **counts).filter(pl.col("value") > 0)
    return Events(facts=[facts.collect()], marks=kinds.seen_once(records, NAME).marks)


TOOL_LOGGED = RecordKind(
    family=NAME,
    name="fine-tuning tool's log line",
    test=RecordTest(markers=_TOOL_MARKERS, pattern=TOOL_LINE),
    read=read_tool_lines,
    facts=tuple(_TOOL_FACTS),
)

#: Axolotl's key of the length it trains on, in its YAML config (a job's ``cat`` of it: ``sequence_len: 4096``)
#: or the config it logs as JSON (``"sequence_len": 8192,``)
AXOLOTL_LENGTH = r'^\s*"?sequence_len"?: (\d+),?\s*$'
_AXOLOTL_LENGTH_MARKER = "sequence_len"


def read_axolotl_length(records: pl.LazyFrame) -> Events:
    """The sequence length Axolotl's config states."""
    length = kinds.as_count(pl.col("text").str.extract(AXOLOTL_LENGTH, 1))
    return Events(facts=[kinds.facts_of(records, NAME, seq_len=length).filter(pl.col("value") > 0).collect()])


AXOLOTL_CONFIG = RecordKind(
    family=NAME,
    name="Axolotl's config",
    test=RecordTest(markers=(_AXOLOTL_LENGTH_MARKER,), pattern=AXOLOTL_LENGTH),
    read=read_axolotl_length,
    facts=("seq_len",),
)

#: a notebook's Trainer (NotebookProgressCallback, transformers/utils/notebook.py), its output as text (a
#: notebook's export, Colab's copy): the bar's label (``[60/60 07:48, Epoch 0/1]``: the steps done of max_steps,
#: the time since training began) and the table of the logged steps (``Step<tab>Training Loss[<tab>Validation
#: Loss...]``, then a row a logged step, ``10<tab>1.488276``; ``No log`` where none was), rows without a marker
NOTEBOOK_BAR = r"^\s*\[(\d+)/(\d+) (?:(\d+):)?(\d+):(\d+)(?: < [\d:]+)?, Epoch [\d.]+/\d+\]\s*$"
_NOTEBOOK_BAR_MARKER = ", Epoch "
NOTEBOOK_TABLE = r"^Step\tTraining Loss(?:\t|\s*$)"
_NOTEBOOK_ROW = rf"^(\d+)\t(?:({kinds.NUMBER})|No log)(?:\t|\s*$)"


def read_notebook_bars(records: pl.LazyFrame) -> Events:
    """The plan of a notebook's bar, the steps done and the mean step's time since training began."""
    bar = pl.col("text").str.extract_groups(NOTEBOOK_BAR)
    done, planned = kinds.as_count(bar.struct["1"]), kinds.as_count(bar.struct["2"])
    hours, minutes, seconds = (kinds.as_count(bar.struct[group]) for group in "345")
    elapsed = hours.fill_null(0) * 3600 + minutes * 60 + seconds
    mean = pl.when(done > 0).then(elapsed / done)
    facts = (
        kinds.facts_of(records, NAME, train_iters=planned, progress_steps=done),
        kinds.facts_of(records, NAME, progress_sec_per_iter=mean),
    )
    return Events(
        facts=[frame.filter(pl.col("value") > 0).collect() for frame in facts],
        marks=kinds.seen_once(records, NAME).marks,
    )


def read_notebook_tables(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """A step a table's row: its step and training loss (none where it says ``No log``)."""
    row = pl.col("text").str.extract_groups(_NOTEBOOK_ROW)
    rows = blocks.filter(pl.col("role") == BODY)
    return kinds.step_lines(
        rows, NAME, step=kinds.as_count(row.struct["1"]), loss=kinds.as_real(row.struct["2"])
    )


NOTEBOOK_BARS = RecordKind(
    family=NAME,
    name="notebook's bar",
    test=RecordTest(markers=(_NOTEBOOK_BAR_MARKER,), pattern=NOTEBOOK_BAR),
    read=read_notebook_bars,
    facts=("train_iters", "progress_steps", "progress_sec_per_iter"),
)
NOTEBOOK_TABLES = Block(
    family=NAME,
    name="notebook's table",
    opens=RecordTest(markers=("Step\tTraining Loss",), pattern=NOTEBOOK_TABLE),
    body=RecordTest(pattern=_NOTEBOOK_ROW),
    hint=r"^\d+\t",
    read=read_notebook_tables,
)

FAMILY = Family(
    name=NAME,
    markers=(
        *MARKERS,
        *CODE,
        _EXPLICIT_MARKER,
        *_TOOL_MARKERS,
        _AXOLOTL_LENGTH_MARKER,
        _NOTEBOOK_BAR_MARKER,
        "Step\tTraining Loss",
    ),
    kinds=(
        TRAINER,
        kinds.code_frames(NAME, CODE),
        TRAINER_LOGGED,
        TOOL_LOGGED,
        AXOLOTL_CONFIG,
        NOTEBOOK_BARS,
    ),
    blocks=(ARGUMENTS, CONFIG, METRICS, NOTEBOOK_TABLES),
    finish=finish,
    description="HF Trainer: logged dicts, train metrics, TrainingArguments dump, --config_overrides shape",
)

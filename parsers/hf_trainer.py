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
  ``Overriding config: ...`` (run_clm), and the printed ``GPT2Config {...}`` JSON.

Dicts carry no step number: the n-th distinct training dict is step ``n * logging_steps``
(``logging_steps`` from the TrainingArguments dump; step 1 first when ``logging_first_step``);
without ``logging_steps`` the step is the dict's position ``n`` and ``state["step_basis"]`` says so.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

import pyparsing as pp
from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises
from pyparsing import pyparsing_common as ppc

NAME = "hf-trainer"

# --- grammar -------------------------------------------------------------------------------------

metric_name = pp.Word(pp.alphas + "_", pp.alphanums + "_").set_name("metric_name")
metric_record = (metric_name("name") + pp.Suppress("=") + pp.Regex(r".*")("value") + pp.StringEnd()).set_name(
    "metric_record"
)

# datetime.timedelta's str(): "0:01:23", "1 day, 2:03:04"; log_metrics appends ".45" (hundredths).
runtime_days = ppc.integer("days") + pp.Suppress(pp.Regex(r"days?,"))
runtime_value = (
    pp.Optional(runtime_days)
    + ppc.integer("hours")
    + pp.Suppress(":")
    + ppc.integer("minutes")
    + pp.Suppress(":")
    + grammar.number("seconds")
    + pp.StringEnd()
).set_name("runtime_value")

# one line of the multi-line TrainingArguments dump: ``per_device_train_batch_size=8,``
args_field = pp.Regex(r"(?P<name>\w+)=(?P<value>.*?),?$").set_name("args_field")

_DICT = re.compile(r"\{'[^{}]*\}?")
#: keys of the dicts the Trainer logs; other dicts (DeepSpeed's config values) are not ours.
_TRAINER_KEYS = ("'loss'", "'learning_rate'", "'train_runtime'", "'train_samples_per_second'", "'epoch'")
_TRAIN_BANNER = re.compile(
    r"(Instantaneous batch size per device|Total train batch size \(w\. parallel, distributed & accumulation\)"
    r"|Gradient Accumulation steps|Total optimization steps|Number of trainable parameters) = ([\d,]+)"
)
_TRAIN_OUTPUT = re.compile(r"TrainOutput\(global_step=(\d+),")
_CONFIG_JSON = re.compile(r'^\s*"(\w+)"\s*:\s*([^,]*?)\s*,?\s*$')

#: a multi-line block (TrainingArguments, model config, metrics) is read at most this many lines.
BLOCK_MAX_LINES = 400
#: a tqdm progress update, e.g. `` 83%|████████▎ | 5/6 [00:01<00:00,  4.55it/s]``.
_PROGRESS_BAR = re.compile(r"\d{1,3}%\|")

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
#: command-line flags that are run facts (integers).
_FLAG_INT_FACTS = {
    "per_device_train_batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "gas",
    "max_steps": "train_iters",
}
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
}
#: final metrics (dict keys and train-metrics block keys) -> fact.
_FINAL_FACTS = {"train_runtime": "final_train_runtime_s", "train_samples_per_second": "final_samples_per_sec"}


def _state(run: RunBuilder) -> dict[str, Any]:
    return run.state.setdefault(
        NAME, {"block": None, "block_line": 0, "dicts": {}, "logged": 0, "args": {}, "final_digits": {}}
    )


def _number(value: Any) -> float | None:
    """A dict value as a float: 2021 logs print floats, today's print ``'4.705'`` strings."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    return None


def _significant_digits(text: str) -> int:
    return len(re.sub(r"[^\d]", "", text.split("e")[0].split("E")[0]).lstrip("0"))


def _set_final(run: RunBuilder, key: str, value: float | None, text: str, lineno: int) -> None:
    """A final metric: the copy with the most significant digits wins (the dict prints ``.4g``
    today, the metrics block rounds to 4 decimals); among equals the first copy (the lowest node) wins."""
    if value is None:
        return
    fact = _FINAL_FACTS[key]
    digits = _significant_digits(text)
    known = _state(run)["final_digits"]
    if fact in known and digits <= known[fact]:
        return
    known[fact] = digits
    run.set_fact(fact, value, NAME, lineno)


# --- logged dicts --------------------------------------------------------------------------------


def _read_dicts(run: RunBuilder, text: str, lineno: int) -> None:
    for match in _DICT.finditer(text):
        body = match.group(0)
        if not any(key in body for key in _TRAINER_KEYS):
            continue
        if not body.endswith("}"):
            run.note(NAME, lineno, f"dict cut short, not read: {body[:80]!r}")
            continue
        try:
            logged = ast.literal_eval(body)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            run.note(NAME, lineno, f"not a Python dict literal: {body[:80]!r}")
            continue
        if isinstance(logged, dict):
            _read_logged(run, logged, body, lineno)


def _read_logged(run: RunBuilder, logged: dict[str, Any], body: str, lineno: int) -> None:
    if "train_runtime" in logged or "train_samples_per_second" in logged:
        for key in _FINAL_FACTS:
            if key in logged:
                _set_final(run, key, _number(logged[key]), str(logged[key]), lineno)
        run.saw(NAME)
        return
    if "loss" not in logged:
        return  # eval/predict dicts are not training steps
    step = _step_of(run, logged, body)
    run.add_iteration(
        step,
        NAME,
        lineno,
        loss=_number(logged.get("loss")),
        lr=_number(logged.get("learning_rate")),
        grad_norm=_number(logged.get("grad_norm")),
    )
    run.saw(NAME)


def _step_of(run: RunBuilder, logged: dict[str, Any], body: str) -> int:
    """The training step of a logged dict: its own ``step``, else its position among distinct dicts."""
    state = _state(run)
    if isinstance(logged.get("step"), int):
        return logged["step"]
    key = " ".join(body.split())
    if key in state["dicts"]:
        return state["dicts"][key]  # the same dict printed by another node
    state["logged"] += 1
    step = _position_to_step(state["logged"], state["args"])
    state["dicts"][key] = step
    return step


def _position_to_step(position: int, args: dict[str, Any]) -> int:
    """The n-th logged training dict's step, from ``logging_steps`` (a ratio of max_steps when < 1)."""
    interval = args.get("logging_steps")
    if isinstance(interval, float) and 0 < interval < 1 and args.get("max_steps", 0) > 0:
        interval = math.ceil(args["max_steps"] * interval)
    if not isinstance(interval, int | float) or interval < 1:
        return position
    if args.get("logging_first_step"):
        return 1 if position == 1 else int((position - 1) * interval)
    return int(position * interval)


# --- TrainingArguments ---------------------------------------------------------------------------


def _read_args_field(run: RunBuilder, name: str, raw: str, lineno: int) -> None:
    state = _state(run)
    value = grammar.literal(raw)
    state["args"][name] = value
    if name in _ARGS_INT_FACTS and isinstance(value, int):
        run.set_fact(_ARGS_INT_FACTS[name], value, NAME, lineno)
    elif name in ("fp16", "bf16") and value is True:
        run.set_fact("precision", name, NAME, lineno)
    elif name in ("gradient_checkpointing", "activation_checkpointing") and isinstance(value, bool):
        run.set_fact("activation_checkpointing", value, NAME, lineno)
    elif name == "max_steps" and isinstance(value, int) and value > 0:
        run.set_fact("train_iters", value, NAME, lineno)
    elif name == "local_rank" and value == -1 and isinstance(state["args"].get("_n_gpu"), int):
        # one process: _n_gpu is the number of GPUs it drives (DataParallel); distributed runs print 1 per process
        if state["args"]["_n_gpu"] > 0:
            run.set_fact("gpus", state["args"]["_n_gpu"], NAME, lineno)


def _finish_args(run: RunBuilder, lineno: int) -> None:
    """Neither fp16 nor bf16 and no DeepSpeed config (which could enable either): full precision."""
    args = _state(run)["args"]
    if args.get("fp16") is False and args.get("bf16") is False and args.get("deepspeed") is None:
        run.set_fact("precision", "fp32", NAME, lineno)


def _read_args_one_line(run: RunBuilder, text: str, lineno: int) -> None:
    """``TrainingArguments(output_dir=out, per_device_train_batch_size=8, ...)`` (older transformers)."""
    inner = text.split("TrainingArguments(", 1)[1]
    for match in re.finditer(r"(\w+)=([^,()]*?)(?=, \w+=|\)\s*$)", inner):
        _read_args_field(run, match.group(1), match.group(2), lineno)
    _finish_args(run, lineno)


# --- blocks --------------------------------------------------------------------------------------


def _open_block(run: RunBuilder, block: str, lineno: int) -> None:
    state = _state(run)
    state["block"], state["block_line"] = block, lineno
    run.capture(NAME)


def _close_block(run: RunBuilder) -> None:
    _state(run)["block"] = None
    run.capture(NAME, on=False)


def _read_block_line(run: RunBuilder, text: str, lineno: int) -> bool:
    """A line while a block is open; False when it is not part of the block (read it normally).

    Other ranks' lines may be interleaved with a dump: they do not close the TrainingArguments or
    config block (only ``)`` / ``}`` or ``BLOCK_MAX_LINES`` do); the metrics block ends at its first
    line that is not ``name = value``."""
    state = _state(run)
    block = state["block"]
    if lineno - state["block_line"] > BLOCK_MAX_LINES:
        _close_block(run)
        return False
    stripped = text.strip()
    if block == "args":
        if stripped == ")":
            _finish_args(run, lineno)
            _close_block(run)
            return True
        field = args_record(stripped)
        if field is None:
            return False
        _read_args_field(run, field[0], field[1], lineno)
        return True
    if block == "config":
        if stripped.startswith("}"):
            _close_block(run)
            return True
        item = _CONFIG_JSON.match(text)
        if item:
            _read_shape(run, item.group(1), item.group(2), lineno)
            return True
        return False
    try:
        parsed = metric_record.parse_string(stripped)
    except pp.ParseBaseException:
        # a tqdm update (stderr, merged into the same file) does not end the block: it is skipped
        if stripped and not _PROGRESS_BAR.match(stripped):
            _close_block(run)
        return not stripped or bool(_PROGRESS_BAR.match(stripped))
    _read_metric(run, parsed["name"], parsed["value"].strip(), lineno)
    return True


def args_record(text: str) -> tuple[str, str] | None:
    """``(name, value)`` of a TrainingArguments dump line (``text`` stripped), or None.

    ``args_field`` is one regex token: its compiled pattern gives what ``parse_string(text,
    parse_all=True)`` gives (tabs expanded alike, the pattern is anchored at the end) without
    pyparsing building an end-of-string check per call, ~150 us a line of a dump.
    """
    text = text.expandtabs() if "\t" in text else text
    match = args_field.re.match(text.lstrip(" \n\r"))  # pyparsing's default whitespace, skipped first
    return None if match is None else (match["name"], match["value"])


def _read_metric(run: RunBuilder, name: str, value: str, lineno: int) -> None:
    if name == "train_runtime":
        seconds = _runtime_seconds(value)
        if seconds is None:
            run.note(NAME, lineno, f"train_runtime not a duration: {value!r}")
        _set_final(run, name, seconds, value, lineno)
    elif name == "train_samples_per_second":
        _set_final(run, name, _number(value), value, lineno)
    run.saw(NAME)


def _runtime_seconds(text: str) -> float | None:
    """``0:01:23.45`` / ``1 day, 2:03:04.50`` -> seconds; a bare number is seconds already."""
    try:
        parsed = runtime_value.parse_string(text.strip())
    except pp.ParseBaseException:
        return _number(text)
    return parsed.get("days", 0) * 86400 + parsed["hours"] * 3600 + parsed["minutes"] * 60 + parsed["seconds"]


# --- model shape ---------------------------------------------------------------------------------


def _read_shape(run: RunBuilder, key: str, raw: str, lineno: int) -> None:
    fact = _SHAPE_KEYS.get(key)
    value = grammar.positive_int(raw.strip().strip("\"'"))
    if fact is None or value is None:
        return
    if fact == "seq_len" and _state(run).get("block_size_line"):
        return  # --block_size is the length trained on; n_positions only the longest possible
    run.set_fact(fact, value, NAME, lineno)
    run.saw(NAME)


def _read_overrides(run: RunBuilder, overrides: str, lineno: int) -> None:
    """``n_embd=8192,n_layer=64,n_head=32`` (``PretrainedConfig.update_from_string`` syntax)."""
    for item in overrides.strip().strip("\"'").split(","):
        key, _, value = item.partition("=")
        if value:
            _read_shape(run, key.strip(), value, lineno)


def _read_command_line(run: RunBuilder, text: str, lineno: int) -> None:
    """The echoed launch command (``set -x``): ``--config_overrides``, ``--block_size``, the batch flags,
    ``--fp16``/``--bf16``, ``--gradient_checkpointing``, ``--max_steps``, ``--logging_steps``."""
    flags = grammar.command_line_flags(text)
    if flags.get("config_overrides"):
        _read_overrides(run, flags["config_overrides"], lineno)
    block_size = grammar.positive_int(flags.get("block_size", ""))
    if block_size is not None:
        run.set_fact("seq_len", block_size, NAME, lineno)
        _state(run)["block_size_line"] = lineno
    for flag, fact in _FLAG_INT_FACTS.items():
        value = grammar.positive_int(flags.get(flag, ""))
        if value is not None:
            run.set_fact(fact, value, NAME, lineno)
    for flag in ("fp16", "bf16"):
        if _switch_on(flags, flag):
            run.set_fact("precision", flag, NAME, lineno)
    if _switch_on(flags, "gradient_checkpointing"):
        run.set_fact("activation_checkpointing", True, NAME, lineno)
    args = _state(run)["args"]
    logging_steps = grammar.literal(flags.get("logging_steps", ""))
    if isinstance(logging_steps, int | float) and not isinstance(logging_steps, bool):
        args.setdefault(
            "logging_steps", logging_steps
        )  # a TrainingArguments dump, when printed, says the same
        args.setdefault("logging_first_step", _switch_on(flags, "logging_first_step"))
    run.saw(NAME)


def _switch_on(flags: dict[str, str], name: str) -> bool:
    """HfArgumentParser booleans: a bare ``--fp16`` or ``--fp16 true``."""
    return name in flags and flags[name].lower() in ("", "true", "1", "yes")


# --- entry point ---------------------------------------------------------------------------------


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one line of HF Trainer output into ``run``; never raises."""
    if _state(run)["block"] is not None and _read_block_line(run, text, lineno):
        return
    if "TrainingArguments(" in text:
        if text.rstrip().endswith("TrainingArguments("):
            _open_block(run, "args", lineno)
        else:
            _read_args_one_line(run, text, lineno)
        run.saw(NAME)
        return
    if "***** train metrics *****" in text:
        _open_block(run, "metrics", lineno)
        return
    if re.search(r"Config \{\s*$", text):
        _open_block(run, "config", lineno)
        return
    if "{'" in text:
        _read_dicts(run, text, lineno)
    train_output = _TRAIN_OUTPUT.search(text)
    if train_output:  # the value Trainer.train() returns, when a script prints it
        run.set_fact("final_steps", int(train_output.group(1)), NAME, lineno)
        run.saw(NAME)
    banner = _TRAIN_BANNER.search(text)
    if banner:
        _read_banner(run, banner.group(1), int(banner.group(2).replace(",", "")), lineno)
    if "Overriding config:" in text:
        _read_overrides(run, text.split("Overriding config:", 1)[1], lineno)
    elif "--config_overrides" in text or "--per_device_train_batch_size" in text:
        _read_command_line(run, text, lineno)


def _read_banner(run: RunBuilder, label: str, value: int, lineno: int) -> None:
    """``***** Running training *****`` lines (printed at INFO level by ``Trainer.train``)."""
    if label == "Number of trainable parameters":
        if value > 0:  # ZeRO-3 partitions parameters: some versions count 0 here
            run.set_fact("logged_model_size", value / 1e9, NAME, lineno)
    elif value > 0:
        run.set_fact(_BANNER_FACTS[label], value, NAME, lineno)
        banner = _state(run).setdefault("banner", {})
        banner[_BANNER_FACTS[label]] = value
        if _BANNER_FACTS[label] in ("micro_batch_size", "gas", "global_batch_size"):
            _banner_dp(run, banner, lineno)
    run.saw(NAME)


def _banner_dp(run: RunBuilder, banner: dict[str, int], lineno: int) -> None:
    """``Trainer.get_total_train_batch_size``: total = micro batch x accumulation x dp world size, so the
    banner's three numbers give DP (not the GPU count: tensor/context/sequence parallel ranks are not in it)."""
    micro, gas, total = banner.get("micro_batch_size"), banner.get("gas"), banner.get("global_batch_size")
    if micro and gas and total and total % (micro * gas) == 0:
        run.set_fact("dp", total // (micro * gas), NAME, lineno)


def evidence(run: RunBuilder) -> int:
    """Records only HF Trainer prints (dicts, metrics, TrainingArguments, its banner)."""
    return run.families_seen.get(NAME, 0)


FAMILY = Family(
    name=NAME,
    markers=(
        "{'",
        "TrainingArguments(",
        "***** train metrics *****",
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
    ),
    parse_line=parse_line,
    evidence=evidence,
    description="HF Trainer: logged dicts, train metrics, TrainingArguments dump, --config_overrides shape",
)

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
  the last update of the training bar is read once the run's files are read (``finish``).
- Launch context, for the GPU count (a Trainer prints none): ``--nproc_per_node 4 --nnodes 16``,
  ``WORLD_SIZE=64``, DeepSpeed's launcher ``dist_world_size=64``, ``world_size=64``, torch elastic's
  ``global_world_sizes=[...]``; these are no evidence of the HF Trainer.

Dicts carry no step number: the n-th distinct training dict is step ``n * logging_steps``
(``logging_steps`` from the TrainingArguments dump; step 1 first when ``logging_first_step``);
without ``logging_steps`` the step is the dict's position ``n`` and ``state["step_basis"]`` says so.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

from logstat.parsers import grammar
from logstat.parsers.base import Family, RunBuilder, never_raises
from pyparsing import pyparsing_common as ppc

NAME = "hf-trainer"

# --- records ---------------------------------------------------------------------------------------

# One compiled pattern per record, no grammar: each is a name and a value, or a duration, which a
# regex says as plainly, and pyparsing cost ~70 us a metrics line, ~300 us a runtime, ~150 us a
# TrainingArguments line. ``_SKIP`` is the whitespace skipped around the tokens.
_SKIP = r"[ \t\r\n]*+"
#: a ``name = value`` line of the train metrics block (``log_metrics``).
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
#: one line of the multi-line TrainingArguments dump: ``per_device_train_batch_size=8,``
_ARGS_FIELD = re.compile(r"(?P<name>\w+)=(?P<value>.*?),?$")

_DICT = re.compile(r"\{'[^{}]*\}?")
#: keys of the dicts the Trainer logs; other dicts (DeepSpeed's config values) are not ours.
_TRAINER_KEYS = ("'loss'", "'learning_rate'", "'train_runtime'", "'train_samples_per_second'", "'epoch'")
# whether a dict holds one of the keys: one compiled alternation, one call instead of five substring tests
_HOLDS_TRAINER_KEY = re.compile("|".join(re.escape(key) for key in _TRAINER_KEYS)).search
_TRAIN_BANNER = re.compile(
    r"(Instantaneous batch size per device|Total train batch size \(w\. parallel, distributed & accumulation\)"
    r"|Gradient Accumulation steps|Total optimization steps|Number of trainable parameters) = ([\d,]+)"
)
_TRAIN_OUTPUT = re.compile(r"TrainOutput\(global_step=(\d+),")
_CONFIG_OPENS = re.compile(r"Config \{\s*$")
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
#: the TrainingArguments fields read: facts (``_read_args_field``) and what later lines need (a logged
#: dict's step, full precision when the dump ends, the GPU count of one process); the others are skipped.
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
    "num_key_value_heads": "num_query_groups",  # grouped-query attention (Llama 2 70B, Llama 3, Mistral)
}
#: ``hidden_act`` values of the models whose MLP is gated (``down(act(gate(x)) * up(x))``, three matrices
#: of ``intermediate_size``): transformers' Llama, Mistral, Mixtral, Qwen2, Phi-3, OLMo, DeepSeek, Granite
#: and the other Llama-style models use SiLU there; GPT-2, GPT-NeoX, OPT and BLOOM have two matrices and
#: another activation (Gemma's gated GELU is not told apart: counted as two matrices)
_GATED_ACTIVATIONS = frozenset({"silu", "swish", "swiglu"})
#: the model-config keys read (``_read_shape``): the shape, the activation that tells a gated MLP, and
#: 2021's ``gradient_checkpointing`` attribute.
_CONFIG_KEYS = (*_SHAPE_KEYS, "hidden_act", "gradient_checkpointing")
#: final metrics (dict keys and train-metrics block keys) -> fact.
_FINAL_FACTS = {
    "train_runtime": "final_train_runtime_s",
    "train_samples_per_second": "final_samples_per_sec",
    "train_steps_per_second": "final_steps_per_sec",
}


def _state(run: RunBuilder) -> dict[str, Any]:
    state = run.state.get(NAME)
    if state is None:  # not setdefault: that would build the default dicts again for every line
        state = run.state[NAME] = {
            "block": None,
            "block_line": 0,
            "dicts": {},
            "logged": 0,
            "args": {},
            "final_digits": {},
            "overridden": set(),
            "bars": {},
            "bar_last": None,
        }
    return state


def _number(value: Any) -> float | None:
    """A dict value as a float: 2021 logs print floats, today's print ``'4.705'`` strings."""
    # the common cases first: float() of a float is that float; a str (today's '4.705') is neither a bool
    # nor a number, so its test goes before theirs (the union's isinstance is the slowest of them)
    if value.__class__ is float:
        return value
    if isinstance(value, str):
        try:
            return float(value.replace(",", ""))
        except ValueError:
            return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


_NOT_DIGIT = re.compile(r"[^\d]")


def _significant_digits(text: str) -> int:
    """The digits of ``text``'s mantissa without leading zeros (every digit a regex calls a digit)."""
    mantissa = text.partition("e")[0].partition("E")[0]
    digits = mantissa.replace(".", "").replace("-", "")
    if digits.isascii() and digits.isdigit():  # a printed number: no regex substitution needed
        return len(digits.lstrip("0"))
    return len(_NOT_DIGIT.sub("", mantissa).lstrip("0"))


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
    for body in _DICT.findall(text):  # the dicts' texts, without building a match object for each
        if not _HOLDS_TRAINER_KEY(body):
            continue
        if not body.endswith("}"):
            run.note(NAME, lineno, f"dict cut short, not read: {body[:80]!r}")
            continue
        logged = plain_dict(body)
        if logged is None:
            try:
                logged = ast.literal_eval(body)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                run.note(NAME, lineno, f"not a Python dict literal: {body[:80]!r}")
                continue
        if isinstance(logged, dict):
            _read_logged(run, logged, body, lineno)


# One ``'key': value`` item of a dict as Python prints it: keys and string values are printable ASCII
# without quote or backslash (no escapes), numbers are plain decimal literals (no underscores, no
# leading zeros, at most 18 digits an integer), then ``, `` and the next key or the closing brace.
_PLAIN_TEXT = r"[\x20-\x26\x28-\x5b\x5d-\x7e]*"
_PLAIN_ITEM = re.compile(
    rf"'(?P<key>{_PLAIN_TEXT})': (?:"
    r"(?P<float>-?(?:(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+))"
    r"|(?P<int>-?(?:0|[1-9][0-9]{0,17}))"
    rf"|'(?P<text>{_PLAIN_TEXT})'"
    r"|(?P<name>True|False|None))"
    r"(?:, (?=')|(?P<last>\}\Z))"
)
_PLAIN_NAMES = {"True": True, "False": False, "None": None}


def plain_dict(body: str) -> dict[str, Any] | None:
    """``ast.literal_eval(body)`` of a logged dict whose items are all plain (``_PLAIN_ITEM``), at a
    fraction of its cost (~30 us a dict, and a 16-node job prints each dict 16 times); None for any
    other text, which then goes to ``literal_eval``. tests/parsers/test_family_shortcuts.py checks
    both give the same dicts on every dict of the real logs and on random ones."""
    out: dict[str, Any] = {}
    pos = 1  # after the opening brace
    while True:
        item = _PLAIN_ITEM.match(body, pos)
        if item is None:
            return None
        key, number, integer, text, name, last = item.groups()  # one call, not one per group
        if number is not None:
            out[key] = float(number)
        elif integer is not None:
            out[key] = int(integer)
        elif text is not None:
            out[key] = text
        else:
            out[key] = _PLAIN_NAMES[name]
        if last is not None:
            return out
        pos = item.end()


def _read_logged(run: RunBuilder, logged: dict[str, Any], body: str, lineno: int) -> None:
    state = _state(run)
    if state["bar_last"] is not None and ("loss" in logged or "train_runtime" in logged):
        state["dict_bar"] = state["bar_last"]
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


def _read_args_field(run: RunBuilder, state: dict[str, Any], name: str, raw: str, lineno: int) -> None:
    if name not in _ARGS_READ:
        return  # most of the ~120 fields of a dump: nothing reads them, so their values are not converted
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
    state = _state(run)
    for match in re.finditer(r"(\w+)=([^,()]*?)(?=, \w+=|\)\s*$)", inner):
        _read_args_field(run, state, match.group(1), match.group(2), lineno)
    _finish_args(run, lineno)


# --- blocks --------------------------------------------------------------------------------------


#: what Python's ``\s`` and ``str.strip()`` take for whitespace, in polars' (Rust) regex syntax: Rust's
#: ``\s`` (Unicode White_Space) lacks the separators \x1c-\x1f that Python counts as whitespace.
PYTHON_SPACE = r"[\s\x1c-\x1f]"
#: the raw lines (polars searches them before launcher prefixes are cut and glued ranks split) that
#: can hold a record the TrainingArguments block reads: a read field's ``name=`` where a stripped
#: record can start (line start, after a CR, a launcher prefix's ':', whitespace), or a ``)`` with only
#: whitespace between it and where a record can start and end (line end, a CR, the '[' of another
#: rank's tag). A bare ``\)`` matched a line in six of a log (every "(ms)", every call), 30 times as
#: many. tests/parsers/test_capture_patterns.py holds it to ``args_record`` on generated raw lines.
_ARGS_LINES = (
    rf"(?:^|:|{PYTHON_SPACE})(?:"
    + "|".join(re.escape(f"{name}=") for name in sorted(_ARGS_READ))
    + rf")|(?:^|[\r:]){PYTHON_SPACE}*\){PYTHON_SPACE}*(?:$|[\r\[])"
)
#: per block, the lines that can change what it records (a regex of literals for the reader); the
#: others are skipped by the block reader and carry no marker. None: every line (the metrics block ends
#: at its first line that is not a metric). A field is read from ``name=value``: its name with the ``=``
#: leaves out the fields it begins (``fp16_full_eval=``, ``activation_checkpointing_kwargs=``, ...).
#: the raw lines that can change what the model config block records: a key it reads, or a ``}`` that
#: starts a record (only that one closes the block: a nested object's is indented), where a record can
#: start (the line's start, a CR, the ':' or ': ' ending a launcher prefix or a rank's tag). A bare "}"
#: matched every nested object's closing line as well (2021's task_specific_params, in every node's copy).
_CONFIG_LINES = "|".join([r"(?:^|[\r:] ?)\}", *(re.escape(f'"{key}"') for key in sorted(_CONFIG_KEYS))])
_BLOCK_LINES: dict[str, str | None] = {
    "args": _ARGS_LINES,
    "config": _CONFIG_LINES,
    "metrics": None,
}


def _open_block(run: RunBuilder, block: str, lineno: int) -> None:
    state = _state(run)
    state["block"], state["block_line"] = block, lineno
    run.capture(NAME, lines=_BLOCK_LINES[block])


def _close_block(run: RunBuilder) -> None:
    _state(run)["block"] = None
    run.capture(NAME, on=False)


def _read_block_line(run: RunBuilder, state: dict[str, Any], text: str, lineno: int) -> bool:
    """A line while a block is open; False when it is not part of the block (read it normally).

    Other ranks' lines may be interleaved with a dump: they do not close the TrainingArguments or
    config block (only ``)`` / ``}`` or ``BLOCK_MAX_LINES`` do); the metrics block ends at its first
    line that is not ``name = value``."""
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
        _read_args_field(run, state, field[0], field[1], lineno)
        return True
    if block == "config":
        # json.dumps(indent=2): only the closing brace of the config itself is not indented; a nested
        # object's (2021's gpt2 task_specific_params) is, and keys after it are the config's own
        if text[:1] == "}":
            _close_block(run)
            return True
        item = _CONFIG_JSON.match(text)
        if item:
            _read_shape(run, item.group(1), item.group(2), lineno)
            return True
        return False
    parsed = metric_line(stripped)
    if parsed is None:
        # a tqdm update (stderr, merged into the same file) does not end the block: it is skipped
        if stripped and not _PROGRESS_BAR.match(stripped):
            _close_block(run)
        return not stripped or bool(_PROGRESS_BAR.match(stripped))
    _read_metric(run, parsed[0], parsed[1].strip(), lineno)
    return True


def metric_line(text: str) -> tuple[str, str] | None:
    """``(name, value)`` of a ``name = value`` line of the train metrics block, or None (tabs expanded
    first)."""
    match = _METRIC_LINE.match(text.expandtabs() if "\t" in text else text)
    return None if match is None else match.group("name", "value")  # one call for both


def args_record(text: str) -> tuple[str, str] | None:
    """``(name, value)`` of a TrainingArguments dump line (``text`` stripped), or None (tabs expanded
    first, then spaces and line ends skipped)."""
    text = text.expandtabs() if "\t" in text else text
    match = _ARGS_FIELD.match(text.lstrip(" \n\r"))
    return None if match is None else match.group("name", "value")  # one call for both


def _read_metric(run: RunBuilder, name: str, value: str, lineno: int) -> None:
    if name == "train_runtime":
        seconds = _runtime_seconds(value)
        if seconds is None:
            run.note(NAME, lineno, f"train_runtime not a duration: {value!r}")
        _set_final(run, name, seconds, value, lineno)
    elif name in ("train_samples_per_second", "train_steps_per_second"):
        _set_final(run, name, _number(value), value, lineno)
    run.saw(NAME)


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


# --- model shape ---------------------------------------------------------------------------------


def _read_shape(run: RunBuilder, key: str, raw: str, lineno: int, *, override: bool = False) -> None:
    """One model-config key, from ``--config_overrides``/``Overriding config:`` (``override``) or from a
    printed config. An overridden fact is not replaced by a printed config: run_clm builds the model from
    the model type's default config plus the overrides, and the config printed after the override line is
    the base one (the tokenizer loads the hub's ``gpt2`` config: n_embd 768, n_layer 12), while the keys
    not overridden (vocab_size, n_positions) are the same in both."""
    if key == "gradient_checkpointing":  # a config attribute in transformers < 4.11 (2021's GPT2Config)
        fact, value = "activation_checkpointing", grammar.literal(raw.strip().strip("\"'"))
        if not isinstance(value, bool):
            return
    elif key == "hidden_act":
        fact, value = "swiglu", raw.strip().strip("\"'").lower() in _GATED_ACTIVATIONS
    else:
        fact = _SHAPE_KEYS.get(key)
        if fact is None:
            return  # most keys of a model config are not shape facts: their values need no reading
        value = grammar.positive_int(raw.strip().strip("\"'"))
        if value is None:
            return
    state = _state(run)
    if fact == "seq_len" and state.get("block_size_line"):
        return  # --block_size is the length trained on; n_positions only the longest possible
    if override:
        state["overridden"].add(fact)
    elif fact in state["overridden"]:
        return
    run.set_fact(fact, value, NAME, lineno)
    run.saw(NAME)


def _read_overrides(run: RunBuilder, overrides: str, lineno: int) -> None:
    """``n_embd=8192,n_layer=64,n_head=32`` (``PretrainedConfig.update_from_string`` syntax)."""
    for item in overrides.strip().strip("\"'").split(","):
        key, _, value = item.partition("=")
        if value:
            _read_shape(run, key.strip(), value, lineno, override=True)


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


# --- progress bar and world size ----------------------------------------------------------------

#: an update of a tqdm bar without description (the Trainer's ``tqdm(total=max_steps)``):
#: ``' 45%|████▌     | 450/1000 [1:02:30<1:16:23,  8.33s/it]'``. tqdm's ``format_meter`` writes
#: ``| {n}/{total} [{elapsed}<{remaining}, {rate_fmt}{postfix}]``, the rate ``{rate:5.2f}it/s``, or
#: ``{1/rate:5.2f}s/it`` when a step takes over a second; ``?it/s`` before the first step is no rate.
_TRAINING_BAR = re.compile(r"\s*\d{1,3}%\|[^|]*\| *(\d+)/(\d+) \[[^\],]*, *(\d+\.\d+)(s/it|it/s)\]")
#: the world size as launchers and DeepSpeed print it: ``dist_world_size=64`` (DeepSpeed's launcher),
#: ``world_size=64`` (DeepSpeed's MPI discovery, torch elastic's workers), ``WORLD_SIZE=64`` (the
#: environment, a ``set -x`` echo), torch elastic's ``global_world_sizes=[64, 64, ...]``; the look-behind
#: keeps out a node's (``LOCAL_WORLD_SIZE``), a role's, the node count (``group_world_size``) and
#: DeepSpeed's data-parallel ``dp_world_size``.
_WORLD_SIZE = re.compile(
    r"(?<!\w)(?:dist_world_size|world_size|WORLD_SIZE)=(\d+)\b|global_world_sizes=\[(\d+)"
)
#: launchers whose ``--nnodes`` defaults to one node (torch.distributed.launch, torch.distributed.run).
_TORCH_LAUNCHERS = ("torch.distributed.launch", "torch.distributed.run", "torchrun")


def _keep_progress(state: dict[str, Any], text: str, lineno: int) -> None:
    """Keep the last update of each bar (by its total) for ``finish``: a bar prints an update per step or
    tenth of a second, and only the last one is read (a few string operations each, no pattern)."""
    head = text.partition(" [")[0]
    total = state["bar_last"] = head[head.rfind("/") + 1 :]
    state["bars"][total] = (text, lineno)


def _training_bar_total(run: RunBuilder, state: dict[str, Any]) -> str | None:
    """The total of the Trainer's bar: the planned optimization steps the Trainer stated (its banner's
    ``Total optimization steps``, ``max_steps``: the bar is ``tqdm(total=max_steps)``), else the bar
    updated last before a logged training dict (``ProgressCallback`` writes its dicts through that bar)."""
    if run.provenance.get("train_iters", "").startswith(NAME + ":"):
        return str(run.facts["train_iters"])
    return state.get("dict_bar")


def finish(run: RunBuilder) -> None:
    """tqdm's rate of the training bar's last update (its closing update shows the whole bar's average);
    a bar with a description is not the Trainer's."""
    state = run.state.get(NAME)
    if state is None:
        return  # no line of this family: nothing kept
    total = _training_bar_total(run, state)
    if total is None or total not in state["bars"]:
        return
    text, lineno = state["bars"][total]
    bar = _TRAINING_BAR.match(text)
    if bar is not None and bar[2] == total and float(bar[3]) > 0:
        rate = float(bar[3])
        run.set_fact("progress_sec_per_iter", rate if bar[4] == "s/it" else 1 / rate, NAME, lineno)


def _read_world_size(run: RunBuilder, text: str, lineno: int) -> None:
    """The GPU count from a launcher's or DeepSpeed's world size (a job's context, not HF evidence)."""
    match = _WORLD_SIZE.search(text)
    if match:
        world = int(match[1] or match[2])
        if world > 0:
            run.set_fact("gpus", world, NAME, lineno)


def _read_launcher(run: RunBuilder, text: str, lineno: int) -> None:
    """``--nproc_per_node 4 --nnodes 16``: GPUs per node and nodes, and their product the GPU count. A
    torch launcher's command line without ``--nnodes`` runs on one node (its default); a range
    (``--nnodes 1:4``, elastic) or ``--nproc_per_node gpu`` is no count."""
    flags = grammar.command_line_flags(text)
    per_node = grammar.positive_int(flags.get("nproc_per_node") or flags.get("nproc-per-node") or "")
    nodes = grammar.positive_int(flags.get("nnodes", ""))
    if nodes is None and "nnodes" not in flags and any(name in text for name in _TORCH_LAUNCHERS):
        nodes = 1
    if per_node is not None:
        run.set_fact("gpus_per_node", per_node, NAME, lineno)
    if nodes is not None:
        run.set_fact("nodes", nodes, NAME, lineno)
    if per_node is not None and nodes is not None:
        run.set_fact("gpus", per_node * nodes, NAME, lineno)


# --- entry point ---------------------------------------------------------------------------------


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Read one line of HF Trainer output into ``run``; never raises."""
    state = _state(run)
    if "it/s]" in text or "s/it]" in text:
        _keep_progress(state, text, lineno)
        if "%|" in text and "{'" not in text:
            return  # a progress bar's update, nothing else
    # a block is read only while its capture is on: the reader ends every capture with its file, so a
    # block left open at the end of a job's .out does not read its .err (whose line numbers start again)
    if state["block"] is not None and NAME in run.capturing and _read_block_line(run, state, text, lineno):
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
    # each regex below needs a literal that a substring test finds far more cheaply
    if "Config {" in text and _CONFIG_OPENS.search(text):
        _open_block(run, "config", lineno)
        return
    if "{'" in text:
        _read_dicts(run, text, lineno)
    train_output = "TrainOutput(global_step=" in text and _TRAIN_OUTPUT.search(text)
    if train_output:  # the value Trainer.train() returns, when a script prints it
        run.set_fact("final_steps", int(train_output.group(1)), NAME, lineno)
        run.saw(NAME)
    banner = " = " in text and _TRAIN_BANNER.search(text)
    if banner:
        _read_banner(run, banner.group(1), int(banner.group(2).replace(",", "")), lineno)
    if "Overriding config:" in text:
        _read_overrides(run, text.split("Overriding config:", 1)[1], lineno)
    elif "--config_overrides" in text or "--per_device_train_batch_size" in text:
        _read_command_line(run, text, lineno)
    if "--nproc" in text:
        _read_launcher(run, text, lineno)
    elif "orld_size" in text or "WORLD_SIZE=" in text:
        _read_world_size(run, text, lineno)


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
        # not bare "{'": a dict is read only if it holds one of these keys, and DeepSpeed's config
        # printer writes twice as many other dicts (optimizer_params, aio_config, ...) to a log
        *_TRAINER_KEYS,
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
        # launch context: the GPU count (HF Trainer prints none; the banner's total batch gives DP only)
        "--nproc_per_node",
        "--nproc-per-node",
        "world_size=",
        "WORLD_SIZE=",
        "global_world_sizes=",
        # tqdm's training bar: its rate is the step time of a run whose final metrics are missing
        "it/s]",
        "s/it]",
    ),
    parse_line=parse_line,
    evidence=evidence,
    finish=finish,
    description="HF Trainer: logged dicts, train metrics, TrainingArguments dump, --config_overrides shape",
)

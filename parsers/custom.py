"""Custom training loops: the step lines hand-written loops print, on plain PyTorch or on DeepSpeed's engine
(whose own ``step=N`` record comes every ``steps_per_print`` steps only, and carries no loss).

No library prints these; scripts copy one another's shape. Read is a line naming ``step N`` (``step N/M``) as
a word, then a separator (``|``, ``]``, ``,``) or none and a space, and later on the line its loss:

- ``step N | loss X | ...`` and ``step N/M | train loss X | ...``, fields between ``|`` (Karpathy's
  build-nanogpt ``train_gpt2.py``: ``step    5 | loss 10.937056 | lr 6.0000e-05 | norm: 15.4052 | dt:
  1262.81ms | tok/sec: 12975.84``), after a logger's or a rank's fields (``2024-07-09 21:05:47 | rank 0 |
  step 50 | loss 9.38 | 950.0 ms/step``, ``[rank0] step 1510/3000 | ...``, ``INFO step 20/5000 loss 10.2
  ... step_time 0.710s``);
- ``[step N] loss=X ...`` and ``[step N/M] loss: X``, the step in brackets;
- ``Step N | Loss: X | ...``, both words capitalized (``print(f"Step {step} | Loss: {loss:.4f}")``).

Each is its step's row: ``loss``, ``lr`` (``lr X``, ``lr=X``, ``lr: X``), ``grad_norm`` (``norm: X``,
``grad_norm=X``) and the step's time as ``elapsed_ms``, where the line gives it as a step's: ``dt:
1262.81ms``, ``step_time=2.03s``, ``time 812ms``, ``time/step: 0.27s``, ``806.2 ms/step``, ``8.83 s/it``, or a field of its own
between ``|`` (``| 1431.6 ms |``, llm.c's ``| (45.08 ms | 90864 tok/s)``). ``N/M``'s ``M`` is the planned steps, ``train_iters`` (the reader's
completion: a run whose last step reached them ended). A loop counting from 0 (``for step in
range(max_steps)``) prints step 0 after its first update: it is a step, as every other.

Where no other family states them (the family's facts yield, ``fallback``), and with no mark that the
family was seen: the sequence length of a command line's flag (``--seq_len 2048``, ``--max-seq-len``,
``--seq-length``), the counts of a loop's header as ``key=value`` (``seq_len=2048``, ``seq_length=``; not a
model's ``max_seq_len=``, the most it takes; ``micro_batch=``, ``global_batch=`` and their ``_size``,
``max_steps=`` the plan; MaxText's ``Config param steps: 5000`` and ``max_target_length``), Megatron's flags on an echoed command line (``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--micro-batch-size``, ``--global-batch-size``, ``--train-iters``: a
run that failed before Megatron's arguments dump), and the parameters a script counted, comma-grouped (``Model has 1,414,647,808
parameters``, ``Loaded meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters``, torchinfo's and Keras's
``Total params: 6,050,882,784``): ``logged_model_size`` in billions.

A capitalized ``Step`` before a lowercase ``loss`` and its value with no space (torchtune's metric logger:
``Step 10 | loss:1.52``), ``step:`` (torchtitan), ``step N:`` (nanoGPT's
evaluations, LitGPT's ``iter N step M:``), ``iter N step M | loss train:`` (LitGPT's, no number after
``loss``) and ``step=N,`` (DeepSpeed) are other families' records and do not match. Failures are the Slurm
family's.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers.base import Family
from logstat.parsers.kinds import (
    NUMBER,
    Events,
    RecordKind,
    RecordTest,
    as_count,
    as_real,
    facts_of,
    last_per_run,
    literals,
    run_ends,
    stated_counts,
    step_lines,
)

NAME = "custom"

_OF_TOTAL = r"(?:\s*/\s*(\d+))?"
#: a step line's forms, each with pairs of groups (the step, the plan's total): ``step N`` (``N/M``) as a word,
#: or ``step=N``, then a separator (``|``, ``]``, ``,``) or none, a space and, later on the line, the loss
#: (``loss X``, ``loss=X``, ``loss: X``, ``train loss X``); ``iter N |``, ``iter=N`` or ``iter N/M`` and a loss;
#: ``it N: loss``; a line's ``step N: loss X`` (nanoGPT's step line, its ``iter`` renamed; or a logging
#: format's message: ``... - __main__ - step 1: loss=2.88``, absl's after its source line, ``train.py:88]
#: step 100: loss = 4.1``; ``train step 200: loss=``) or ``Step N: loss X``; the same capitalized (``Step N |
#: Loss: X``, ``Step [N/M] Loss: X``, ``Step: 1/200, Loss: X``, not DeepSpeed-Chat's ``Step: 0 | PPO Epoch: 1
#: | Actor Loss``; picotron's ``Step: 200   | Loss: 2.10``; ``Iter N | loss X``), or with the loss right
#: after it (``Step 12 - loss: 3.41``, ``Step 100/1500 | train_loss 3.4``, ``Step 0000050 loss 2.48``; its
#: value after a space, ``=`` or ``: ``, where torchtune's ``Step N | loss:X`` has none); MLX's ``Iter N:
#: Train loss X`` (mlx_lm.lora; ``Iter N: Val loss`` is its evaluation); MaxText's ``completed step: N, seconds: S, ...,
#: loss: X``; verl's console (its metrics joined by `` - ``: ``step:12 - actor/pg_loss:0.013 - ...
#: timing_s/step:58.1``, the SFT trainer's ``train/loss``; a validation's ``step:0 - val/...`` has none); t5x's
#: (clu's LoggingWriter: ``logging_writer.py:48] [1000100] collection=train accuracy=0.55, ..., loss=3.31, ...,
#: timing/steps_per_second=1.72``; its evaluations' collections are not the training's); neuronx-distributed's
#: examples' (AWS Trainium: ``LOG Thu Mar 14 02:15:45 2024 - (0, 1) step_loss : 10.7868 learning_rate : ...``,
#: the epoch and the step); nanotron's (``[INFO|DP=0|PP=0|TP=0|host]: iteration: 137 / 50000 |
#: consumed_tokens: ... | elapsed_time_per_iteration_ms: 1.19K | ... | lm_loss: 2.6 |``, its numbers in
#: human_format: ``K`` a thousand). ``step N: train loss`` and ``iter N:`` are no step's line (nanoGPT's
#: evaluations and steps are its family's), nor LitGPT's ``iter N step M:``, nor ``Step N | loss:X``
#: (torchtune's), nor ``step=N,`` (DeepSpeed's)
_STEP_FORMS = (
    rf"step(?:\s+(\d+){_OF_TOTAL}\s*[\]|,]?|\s*=\s*(\d+){_OF_TOTAL})\s.*?\b(?:train[\s_])?loss",
    rf"[Ii]ter(?:\s+(\d+){_OF_TOTAL}\s*\||\s*=\s*(\d+){_OF_TOTAL}[\s,]|\s+(\d+)\s*/\s*(\d+)[\s,])\s*.*?\b[Ll]oss",
    rf"it\s+(\d+){_OF_TOTAL}:\s+loss",
    rf"(?:^|- |\S+:\d+\] |[Tt]rain )[Ss]tep\s+(\d+){_OF_TOTAL}:\s+loss",
    rf"Step\s+\[?\s*(\d+){_OF_TOTAL}\s*\]?\s*[|,]?\s.*?\b(?:[Tt]rain[\s_])?Loss",
    rf"Step:\s+(\d+){_OF_TOTAL}\s*[,|]\s+Loss",
    r"iteration: (\d+) / (\d+) \|.*?\blm_loss",
    rf"Step\s+\[?\s*(\d+){_OF_TOTAL}\s*\]?\s*(?:[|,]|\s-)?\s+(?:train[\s_])?loss(?::\s|\s*=|\s)",
    rf"^Iter\s+(\d+){_OF_TOTAL}:\s+Train loss",
    r"completed step: (\d+)(),.*?\bloss",
    r"step:(\d+)() - .*?\b(?:actor/pg_loss|train/loss)",
    r"logging_writer\.py:\d+\] \[(\d+)()\](?: collection=train)? (?:(?:[^c]|c[^o]).*?\b)?loss",
    r"\(\d+, (\d+)()\) step_loss",
)
STEP_LINE = rf"(?:^|[\s|\[])(?:{'|'.join(_STEP_FORMS)})\b\s*[:=]?\s*({NUMBER})"
#: the groups of the step and the total in STEP_LINE (pairs: a form may hold several), and of the loss (the
#: last)
_LOSS_GROUP = re.compile(STEP_LINE).groups
_STEP_GROUPS, _TOTAL_GROUPS = range(1, _LOSS_GROUP, 2), range(2, _LOSS_GROUP, 2)
_MARKERS = ("step ", "Step ", "Step:", "step=", "iter ", "Iter ", "iter=", ": loss", "completed step: ")
_MARKERS += ("step:", "logging_writer.py:", ") step_loss", "iteration: ")
_LEARNING_RATE = rf"\blr\s*[:=]?\s*({NUMBER})"
_GRAD_NORM = rf"\b(?:grad_)?norm\s*[:=]?\s*({NUMBER})"
#: a step's time: after its name, per step or iteration, or a field of its own between ``|`` (or opening a
#: bracketed pair of fields); each form with two groups, the value's and the unit's, in the order given
_TIME_FORMS = (
    (rf"(?:\bdt|\bstep_time|\b[Tt]ime(?:/step|/iter)?)\s*[:=]?\s*({NUMBER})\s*(ms|s)\b", "value unit"),
    (rf"({NUMBER})\s*(ms|s)/(?:step|it)\b", "value unit"),
    (rf"\|\s*\(?({NUMBER})\s*(ms|s)\s*(?:\||$)", "value unit"),
    (rf", (s)econds: ({NUMBER}),", "unit value"),  # MaxText's
    (rf", (It/sec) ({NUMBER})", "unit value"),  # mlx_lm's rate: a step takes its inverse
    (rf"\btiming_(s)/step:({NUMBER})", "unit value"),  # verl's
    (rf"\btiming/(steps_per_second)=({NUMBER})", "unit value"),  # t5x's: a step takes its inverse
    (rf"\belapsed_time_per_iteration_ms: ({NUMBER})(K?)\b", "value unit"),  # nanotron's: ms, or thousands
)
STEP_TIME = "|".join(form for form, _ in _TIME_FORMS)
#: STEP_TIME's (value, unit) groups
_TIME_GROUPS = tuple(
    (first, first + 1) if order == "value unit" else (first + 1, first)
    for first, (_, order) in zip(range(1, 2 * len(_TIME_FORMS), 2), _TIME_FORMS, strict=True)
)
#: STEP_TIME's units that are a rate of steps
_RATES = ("It/sec", "steps_per_second")


#: a sequence length: a command line's flag
SEQ_LEN = r"--(?:max[_-])?seq(?:uence)?[_-]len(?:gth)?(?:=|\s+)(\d+)\b"
_SEQ_MARKERS = ("--seq", "--max_seq", "--max-seq")
#: a count a loop's header states as a ``key=value`` (``world_size=16 micro_batch=16 global_batch=256
#: seq_len=1024 max_steps=3000``) or, but the world's, as fields of ``key value`` (``seq_len 4096 | micro_bs 2
#: | global_bs 64``), by the fact each key states (a model's ``max_seq_len=`` is the most it takes; a bare
#: ``batch_size=``, a device's or all of them', says not which; ``block_size`` and ``max_iters`` are other
#: things' too: DeepSpeed's aio config's bytes, LitGPT's evaluation's iterations)
_SPACED_COUNTS = {
    "seq_len": "seq_len",
    "seq_length": "seq_len",
    "micro_batch": "micro_batch_size",
    "micro_batch_size": "micro_batch_size",
    "micro_bs": "micro_batch_size",
    "local_batch": "micro_batch_size",
    "local_batch_size": "micro_batch_size",
    "per_gpu_batch": "micro_batch_size",
    "mbs": "micro_batch_size",
    "global_batch": "global_batch_size",
    "global_batch_size": "global_batch_size",
    "global_bs": "global_batch_size",
    "gbs": "global_batch_size",
    "max_steps": "train_iters",
    "total_steps": "train_iters",
    "num_train_steps": "train_iters",  # t5x's and Flax examples' config
    "per_device_batch_size": "micro_batch_size",  # MaxText's
}
#: Megatron's names of its parallel sizes, as a repr's keywords (NeMo 2's ``Config(MegatronStrategy,
#: tensor_model_parallel_size=4, pipeline_model_parallel_size=2)``, a Namespace)
_PARALLEL_COUNTS = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp", "dp": "dp"}
#: nanotron's parallel sizes (its config's repr: ``ParallelismArgs(dp=8, pp=1, tp=1, ...)``)
_PARALLEL_COUNTS |= {"tp": "tp", "pp": "pp"}
#: other configs' keys, as a repr's keywords or JSON's: nanotron's ``TokensArgs(sequence_length=2048,
#: train_steps=300, ...)``, picotron's config.json (``"total_train_steps": 200``; not its ``"tp_size"``:
#: DeepSpeed's config printer names its AutoTP's ``tp_size=1`` under Megatron's own tensor parallelism)
_KEYWORD_COUNTS = {
    "sequence_length": "seq_len",
    "train_steps": "train_iters",
    "total_train_steps": "train_iters",
}
_COUNTS = _SPACED_COUNTS | _PARALLEL_COUNTS | _KEYWORD_COUNTS | {"world_size": "gpus", "world": "gpus"}
#: the world a loop's line names in words (``rank 0 / world size 8``, ``DDP: world_size 8``, ``world size: 8``)
_WORLD_IN_WORDS = "world[ _]size:? "
_COUNT_MARKERS = (
    *(f"{key}=" for key in _COUNTS),
    *(f"{key}': " for key in _COUNTS),
    "world size",
    "world_size ",
)
_COUNT_MARKERS += tuple(f'{key}": ' for key in _COUNTS) + tuple(f"{key} " for key in _SPACED_COUNTS)
_COUNT_MARKERS += ("Config param ", "Total training steps: ", "Starting training..., iters: ")
_COUNT_MARKERS += (" parallel size: ", " parallel with size ")
#: flags on an echoed command line (a launcher's ``cmd = ...``, ``set -x``), by the fact each states:
#: Megatron's (a run that failed before Megatron's arguments dump, or a script of its own taking them), and
#: a loop's planned optimizer steps (``python -u train_ddp.py --steps 50000``; not ``--warmup-steps``: a
#: flag starts after a space)
_FLAGS = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--micro-batch-size": "micro_batch_size",
    "--global-batch-size": "global_batch_size",
    "--train-iters": "train_iters",
    **dict.fromkeys(("--steps", "--max-steps", "--max_steps", "--num-steps", "--num_steps"), "train_iters"),
    **dict.fromkeys(("--total-steps", "--total_steps", "--train-steps", "--train_steps"), "train_iters"),
    "--training.steps": "train_iters",  # torchtitan's, overriding its config file
    # HF's no_trainer examples' and accelerate loops' (run_clm_no_trainer.py: --max_train_steps)
    **dict.fromkeys(("--max_train_steps", "--max-train-steps"), "train_iters"),
}
#: a count stated any of these ways: the key and its ``=``, or quoted as a printed dict's or JSON's key
#: (``config: {'seq_len': 2048, 'max_steps': 50000}``), the key and a space, the flag and its ``=`` or space;
#: the world in words
_KEYS = "|".join(_COUNTS)
#: MaxText's configuration, a line a key (pyconfig: ``Config param steps: 5000``, ``Config param
#: max_target_length: 4096``)
_CONFIG_PARAMS = {"Config param steps": "train_iters", "Config param max_target_length": "seq_len"}
#: verl's trainer's plan (ray_trainer.py: ``Total training steps: 105``), mlx_lm's (``Starting training...,
#: iters: 600``)
_CONFIG_PARAMS["Total training steps"] = "train_iters"
_CONFIG_PARAMS["Starting training..., iters"] = "train_iters"
#: nanotron's trainer as it starts (``[Start training] datetime: ... | mbs: 8 | grad_accum: 4 | global_batch_size:
#: 256 | sequence_length: 2048 | train_steps: 300 | ...``)
_NANOTRON_START = {"| mbs": "micro_batch_size", "| global_batch_size": "global_batch_size"}
_NANOTRON_START |= {"| sequence_length": "seq_len", "| train_steps": "train_iters"}
_CONFIG_PARAMS |= _NANOTRON_START
_COUNT_MARKERS += tuple(f"{key}: " for key in _NANOTRON_START)
#: InternLM / InternEvo's launch (initialize/launch.py: ``Distributed environment is initialized, data parallel
#: size: 16, pipeline parallel size: 1, tensor parallel size: 1``)
_CONFIG_PARAMS |= {
    f"{name} parallel size": fact for name, fact in (("data", "dp"), ("pipeline", "pp"), ("tensor", "tp"))
}
#: Megatron's parallel state as neuronx-distributed (and Megatron before its arguments dump) prints it:
#: ``> initializing tensor model parallel with size 8``, ``... pipeline model ...``, ``> initializing data
#: parallel with size 4``, and Megatron-LM's initialize.py as done: ``> initialized tensor model parallel with
#: size 1``
_INITIALIZING = {"tensor model": "tp", "pipeline model": "pp", "data": "dp"}
_CONFIG_PARAMS |= {
    f"> initializ{tense} {name} parallel with size": fact
    for name, fact in _INITIALIZING.items()
    for tense in ("ing", "ed")
}
COUNT = (
    rf"(?:^|[\s,({{|])(?P<key>(?:{_KEYS})=|['\"](?:{_KEYS})['\"]: |(?:{'|'.join(_SPACED_COUNTS)}) "
    rf"|(?:{literals(tuple(_FLAGS))})[= ]|{_WORLD_IN_WORDS}|(?:{literals(tuple(_CONFIG_PARAMS))}):? )(?P<count>\d+)\b"
)
_COUNT_FACTS = _COUNTS | {flag.strip("-"): fact for flag, fact in _FLAGS.items()} | {"world size": "gpus"}
_COUNT_FACTS |= _CONFIG_PARAMS
#: a count of parameters, comma-grouped: what a model ``has`` or a name's ``:`` is, or a summary's total (not
#: a part's: build-nanogpt's ``num decayed parameter tensors: 50, with 124,354,560 parameters``)
PARAMETERS = r"(?:\bhas|:) (\d{1,3}(?:,\d{3}){2,}) parameters\b|^Total params: (\d{1,3}(?:,\d{3})+)\s*$"
_PARAMETER_MARKERS = (" parameters", "Total params: ")


def _milliseconds(text: pl.Expr) -> pl.Expr:
    """The step's time, ms, of the first of ``STEP_TIME``'s forms in ``text``."""
    found = text.str.extract_groups(STEP_TIME)
    value = pl.coalesce(*(as_real(found.struct[str(group)]) for group, _ in _TIME_GROUPS))
    unit = pl.coalesce(*(found.struct[str(group)] for _, group in _TIME_GROUPS))
    rate = pl.when(value > 0).then(1000 / value)
    seconds = (unit == "s") | (unit == "K")  # nanotron's thousands of ms
    return pl.when(seconds).then(value * 1000).when(unit.is_in(_RATES)).then(rate).otherwise(value)


def read_steps(records: pl.LazyFrame) -> Events:
    """A step event per step line, and the planned steps of a run's last line that states them."""
    text = pl.col("text")
    fields = text.str.extract_groups(STEP_LINE)
    step = as_count(pl.coalesce(fields.struct[str(group)] for group in _STEP_GROUPS))
    total = as_count(pl.coalesce(fields.struct[str(group)] for group in _TOTAL_GROUPS))
    events = step_lines(
        records,
        NAME,
        step=step,
        loss=as_real(fields.struct[str(_LOSS_GROUP)]),
        lr=as_real(text.str.extract(_LEARNING_RATE, 1)),
        grad_norm=as_real(text.str.extract(_GRAD_NORM, 1)),
        elapsed_ms=_milliseconds(text),
    )
    planned = last_per_run(records, total > 0)
    events.facts.append(facts_of(planned, NAME, train_iters=total).collect())
    return events


def read_stated(records: pl.LazyFrame) -> Events:
    """The counts a record states, the sequence length of a flag, a parameter count."""
    text = pl.col("text")
    count = text.str.extract_groups(PARAMETERS)
    parameters = pl.coalesce(count.struct["1"], count.struct["2"]).str.replace_all(",", "", literal=True)
    stated = (
        facts_of(records, NAME, seq_len=as_count(text.str.extract(SEQ_LEN, 1))),
        facts_of(records, NAME, logged_model_size=as_real(parameters) / 1e9),
    )
    counts = stated_counts(records, NAME, COUNT, _COUNT_FACTS)
    return Events(facts=[frame.filter(pl.col("value") > 0).collect() for frame in (*stated, counts)])


#: a loop's own word that its training ended (``training done``, ``Training complete: 1000 steps``, ``Training
#: finished at step 4000``, ``Done training``, ``done: 120 steps in 66.0s``; mlx_lm's ``Saved final weights to
#: adapters.safetensors.``): the run's end, unless a failure follows it (a rank's, at teardown); no mark of the
#: family (a Trainer's run says so too)
ENDED = (
    r"(?:^|[\s|:\]>-])(?:[Tt]raining (?:is )?(?:completed?|done|finished)|[Dd]one [Tt]raining|[Ff]inished [Tt]raining"
    r"|[Dd]one: \d+ steps|^Saved final weights to)(?:[\s.,:!;]|$)"
)
_ENDED_MARKERS = (
    "raining complete",
    "raining done",
    "raining finished",
    "raining is ",
    "one training",
    "one Training",
    "inished Training",
    "inished training",
    "Saved final weights to ",
    "done: ",
    "Done: ",
)


FAMILY = Family(
    name=NAME,
    markers=(
        *_MARKERS,
        *_SEQ_MARKERS,
        *_COUNT_MARKERS,
        *_FLAGS,
        *_PARAMETER_MARKERS,
        *_ENDED_MARKERS,
    ),
    kinds=(
        RecordKind(
            family=NAME,
            name="step",
            test=RecordTest(markers=_MARKERS, pattern=STEP_LINE),
            read=read_steps,
            facts=("train_iters",),
        ),
        RecordKind(
            family=NAME,
            name="end",
            test=RecordTest(markers=_ENDED_MARKERS, pattern=ENDED),
            read=lambda records: run_ends(records, NAME, seen=False),
        ),
        RecordKind(
            family=NAME,
            name="stated",
            test=RecordTest(
                markers=(*_SEQ_MARKERS, *_COUNT_MARKERS, *_FLAGS, *_PARAMETER_MARKERS),
                pattern=f"{SEQ_LEN}|{COUNT}|{PARAMETERS}",
            ),
            read=read_stated,
            facts=(
                "seq_len",
                "micro_batch_size",
                "global_batch_size",
                "train_iters",
                "tp",
                "pp",
                "dp",
                "gpus",
                "logged_model_size",
            ),
        ),
    ),
    fallback=True,
    description="custom training loops: 'step N | loss X | ... ms/step' and '[step N] loss=X' lines; "
    "where no other family states them, a command line's sequence length and a script's parameter count",
)

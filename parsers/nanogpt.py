"""Karpathy's nanoGPT log family (github.com/karpathy/nanoGPT, ``train.py``, 2023-2024).

nanoGPT writes with plain ``print()``; each process prints its start-up (the configurator and the model's
set-up run on every rank under torchrun's DDP), rank 0 (``master_process``) alone the training lines.
Every pattern is anchored at the record's start (launcher prefixes are stripped before).

Lines read, each fact with its source:

- the step line every ``log_interval`` steps, train.py: ``iter 10: loss 9.2155, time 312.45ms, mfu
  31.52%`` (``iter 10: loss 9.2155, time 312.45ms`` before February 2023). ``loss``; ``time`` as ``elapsed_ms``: the wall time since the previous step's end (one
  optimizer step, its gradient accumulation included; the evaluation and checkpoint of an
  ``eval_interval`` step, and iter 0's compile, fall in it). ``mfu`` is ``estimate_mfu`` (6N + 12LHQT
  FLOPs a token, N without the position embedding) of one rank's micro-batches against the A100's bf16
  peak of 312 TFLOP/s, a running average (0.9 x old + 0.1 x new, updated at logged steps only):
  recorded as ``logged_tflops_per_gpu`` = mfu x 312 / 100, that smoothed estimate. ``-100.00%`` is the
  sentinel (``running_mfu = -1.0``) of the first five steps of a process (``local_iter_num < 5``): null.
- the configuration: the configurator's ``Overriding config with config/train_gpt2.py:`` and the file's
  text after it (a ``Block``; its Python assignments at the line's start), and its ``Overriding: key =
  value`` lines for ``--key=value`` (printed after ``literal_eval``: ``dtype = float16`` unquoted). Read
  there only: a bare ``batch_size = 12`` elsewhere is no nanoGPT's. ``batch_size`` -> ``micro_batch_size``,
  ``block_size`` -> ``seq_len``, ``n_layer`` / ``n_head`` / ``n_embd`` -> ``num_layers`` / ``num_heads``
  / ``hidden_size``, ``max_iters`` -> ``train_iters``, ``dtype`` -> ``precision``; an integer may be a
  product (``gradient_accumulation_steps = 5 * 8``). A later statement replaces an earlier one, as the
  configurator's ``exec`` and overrides do. train.py's defaults are not printed: not known. On a resume
  (``init_from = 'resume'``) the checkpoint's model arguments replace the shape's; not read.
- ``tokens per iteration will be: 491,520``: gradient_accumulation_steps x world x batch_size x
  block_size, the accumulation counted before train.py divides it by the world (``//= ddp_world_size``),
  so the world is not in it: ``global_batch_size`` (sequences) = tokens / ``seq_len`` (``finish``); ``gas``
  and the GPUs are not printed (a launcher's line may state the GPUs: then ``gas`` is derived).
- ``defaulting to vocab_size of GPT-2 to 50304 (50257 rounded up for efficiency)``: ``vocab_size`` 50257,
  ``padded_vocab_size`` 50304; ``found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)``:
  ``vocab_size`` (used as it is). ``Initializing from OpenAI GPT-2 weights: gpt2-xl``: GPT-2's shape
  (model.py ``from_pretrained``: its layers, heads, width and 50257 tokens, unpadded), and its ``forcing
  vocab_size=50257, block_size=1024, bias=True``: ``seq_len`` where no config stated one (train.py crops
  the model to a smaller ``block_size``, a stated one).
- ``number of parameters: 123.59M`` (model.py ``get_num_params``: without the position embedding, the
  token embedding counted once, tied to the head): ``logged_model_size`` in billions.
- ``step 1000: train loss 2.9012, val loss 2.9123`` (the evaluation) and ``Initializing a new model from
  scratch``: evidence of the family. After ``Resuming training from out``, the first evaluation's step is
  ``resumed_step``: the loop starts at the checkpoint's ``iter_num``, saved at an evaluation, and evaluates
  there first.
- a shell's echo of train.py started by a bare interpreter (``$ python train.py config/train_shakespeare_char.py``,
  ``+ python3 train.py``): no launcher, so no DDP: one GPU, where no launcher's line states the GPUs.

The run's end is not printed (the loop breaks at ``iter_num > max_iters``): a run whose last logged step
reached ``train_iters`` is complete (reader's ``_completion_from_facts``). Failures (tracebacks, CUDA OOM)
are the Slurm family's, read from any log.
"""

from __future__ import annotations

import re

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
    marks_of,
    step_lines,
)

NAME = "nanogpt"

#: estimate_mfu's ``flops_promised``: A100 bf16 dense peak, TFLOP/s
A100_PEAK_TFLOPS = 312.0

# --- the step line, read column-wise --------------------------------------------------------------

#: ``iter N: loss X, time Tms, mfu M%``; no other family's line has them in this order. Before estimate_mfu
#: (February 2023) the line ended at the time: ``iter N: loss X, time Tms``. Anywhere on a line: ranks with
#: no prefix glue one's unfinished write before another's line (``... cache_size_limit (8iter 10: loss``)
STEP_LINE = rf"iter (\d+): loss ({NUMBER}), time ([\d.]+)ms(?:, mfu (-?[\d.]+)%|\s*$)"
_STEP_MARKERS = ("ms, mfu ", ", time ")


def read_steps(records: pl.LazyFrame) -> Events:
    """A step event per step line (see the module's docstring)."""
    fields = pl.col("text").str.extract_groups(STEP_LINE)
    mfu = as_real(fields.struct["4"])
    return step_lines(
        records,
        NAME,
        step=as_count(fields.struct["1"]),
        loss=as_real(fields.struct["2"]),
        elapsed_ms=as_real(fields.struct["3"]),
        logged_tflops_per_gpu=pl.when(mfu >= 0).then(mfu * A100_PEAK_TFLOPS / 100),
    )


# --- the configuration: the config file's text and the overrides ------------------------------------

_CONFIG_FACTS = {
    "batch_size": "micro_batch_size",
    "block_size": "seq_len",
    "n_layer": "num_layers",
    "n_head": "num_heads",
    "n_embd": "hidden_size",
    "max_iters": "train_iters",
}
_PRECISION = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_KEYS = (*_CONFIG_FACTS, "dtype")
#: ``key = value  # comment`` at the line's start: an integer (or a product of integers) or a dtype
ASSIGNMENT = (
    rf"^(?P<key>{'|'.join(_KEYS)})\s*=\s*"
    r"(?P<value>\d+(?:\s*\*\s*\d+)*|'\w+'|\"\w+\"|\w+)\s*(?:#.*)?$"
)
_OPENER = "Overriding config with "
_OVERRIDE = "Overriding: "


def _assignment_facts(records: pl.LazyFrame, text: pl.Expr) -> list[pl.DataFrame]:
    """Fact events of the ``ASSIGNMENT``s in ``text`` of ``records``: integers, and the precision."""
    found = records.select("order", parts=text.str.extract_groups(ASSIGNMENT)).unnest("parts")
    value = pl.col("value")
    factors = value.str.split("*").list.eval(pl.element().str.strip_chars().cast(pl.Int64, strict=False))
    product = factors.list.eval(pl.element().product()).list.first()
    counts = found.filter(pl.col("key").is_in(list(_CONFIG_FACTS))).select(
        "order",
        fact=pl.col("key").replace_strict(_CONFIG_FACTS, return_dtype=pl.String),
        value=pl.when(value.str.contains(r"^\d") & (product > 0)).then(product),
        family=pl.lit(NAME),
    )
    precision = found.filter(pl.col("key") == "dtype").select(
        "order",
        fact=pl.lit("precision"),
        value=value.str.strip_chars("'\"").replace_strict(_PRECISION, default=None, return_dtype=pl.String),
        family=pl.lit(NAME),
    )
    return [frame.drop_nulls("value").collect() for frame in (counts, precision)]


def read_config(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """The facts of a printed config file's assignments (``CONFIG``'s body)."""
    body = blocks.filter(pl.col("role") == BODY)
    openers = blocks.filter(pl.col("role") != BODY)
    return Events(facts=_assignment_facts(body, pl.col("text")), marks=[marks_of(openers, NAME, SEEN)])


def read_overrides(records: pl.LazyFrame) -> Events:
    """The facts of ``Overriding: key = value`` lines."""
    text = pl.col("text").str.strip_prefix(_OVERRIDE)
    return Events(facts=_assignment_facts(records, text), marks=[marks_of(records, NAME, SEEN)])


CONFIG = Block(
    family=NAME,
    name="config",
    opens=RecordTest(markers=(_OPENER,), pattern=rf"^{_OPENER}\S.*:\s*$"),
    body=RecordTest(pattern=ASSIGNMENT),
    markers=_KEYS,
    # the configurator's overrides, or train.py's first line, follow the file's text
    ends=RecordTest(markers=(_OVERRIDE, "tokens per iteration will be: ")),
    max_lines=300,
    read=read_config,
    facts=(*_CONFIG_FACTS.values(), "precision"),
)
OVERRIDES = RecordKind(
    family=NAME,
    name="overrides",
    test=RecordTest(markers=(_OVERRIDE,), pattern=rf"^{_OVERRIDE}\w+ = "),
    read=read_overrides,
    facts=(*_CONFIG_FACTS.values(), "precision"),
)

# --- the rare lines, read in Python ---------------------------------------------------------------

_TOKENS = re.compile(r"tokens per iteration will be: (\d[\d,]*)")
_DEFAULT_VOCAB = re.compile(r"defaulting to vocab_size of GPT-2 to (\d+) \((\d+) rounded up for efficiency\)")
_FOUND_VOCAB = re.compile(r"found vocab_size = (\d+) \(inside .+\)")
_PRETRAINED = re.compile(r"Initializing from OpenAI GPT-2 weights: (gpt2(?:-medium|-large|-xl)?)")
#: model.py ``from_pretrained``'s ``config_args``: n_layer, n_head, n_embd
GPT2_SHAPES = {
    "gpt2": (12, 12, 768),
    "gpt2-medium": (24, 16, 1024),
    "gpt2-large": (36, 20, 1280),
    "gpt2-xl": (48, 25, 1600),
}
GPT2_VOCAB = 50257
_FORCED_BLOCK = re.compile(r"forcing vocab_size=\d+, block_size=(\d+), bias=True")
_PARAMETERS = re.compile(r"number of parameters: (\d+\.\d+)M")
_EVALUATION = re.compile(r"step (\d+): train loss \S+, val loss \S+")
_RESUMING = re.compile(r"Resuming training from \S.*")
_EVIDENCE = re.compile("Initializing a new model from scratch")
#: train.py started by a bare interpreter, as a shell echoes it (``$ python train.py config/...``, a prompt's
#: ``user@host:~/nanoGPT$ python train.py``, bash -x's ``+ python3 train.py``): no launcher, no RANK in its
#: environment, so no DDP: one process on one device
_PLAIN_COMMANDS = ("python train.py", "python3 train.py", " -u train.py")
_PLAIN_COMMAND = re.compile(r"(?:\S*[$#+] )?(?:\S*/)?python3? (?:-u )?train\.py(?: .*)?")
_PLAIN_STATE = f"{NAME}:plain command"


#: a resume seen, its first evaluation not yet; the pretrained model's block and its line
_RESUMING_STATE, _FORCED_STATE = f"{NAME}:resuming", f"{NAME}:forced block"


@never_raises(NAME)
def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """nanoGPT's start-up and evaluation lines (see the module's docstring)."""
    text = text.strip()
    if tokens := _TOKENS.fullmatch(text):
        run.saw(NAME)
        run.state[NAME] = (int(tokens[1].replace(",", "")), lineno)
        run.new_launch(NAME)  # train.py's first words: a run appended to its log (tee -a) starts here
    elif vocab := _DEFAULT_VOCAB.fullmatch(text):
        run.saw(NAME)
        run.set_fact("padded_vocab_size", int(vocab[1]), NAME, lineno)
        run.set_fact("vocab_size", int(vocab[2]), NAME, lineno)
    elif vocab := _FOUND_VOCAB.fullmatch(text):
        run.saw(NAME)
        run.set_fact("vocab_size", int(vocab[1]), NAME, lineno)
    elif pretrained := _PRETRAINED.fullmatch(text):
        run.saw(NAME)
        layers, heads, width = GPT2_SHAPES[pretrained[1]]
        for fact, value in (("num_layers", layers), ("num_heads", heads), ("hidden_size", width)):
            run.set_fact(fact, value, NAME, lineno)
        run.set_fact("vocab_size", GPT2_VOCAB, NAME, lineno)
        run.set_fact("padded_vocab_size", GPT2_VOCAB, NAME, lineno)
    elif forced := _FORCED_BLOCK.fullmatch(text):
        run.saw(NAME)
        run.state[_FORCED_STATE] = (int(forced[1]), lineno)  # the config's, read column-wise, may state one
    elif parameters := _PARAMETERS.fullmatch(text):
        run.saw(NAME)
        run.set_fact("logged_model_size", float(parameters[1]) / 1000, NAME, lineno)
    elif evaluation := _EVALUATION.fullmatch(text):
        run.saw(NAME)
        if run.state.pop(_RESUMING_STATE, False):
            run.set_fact("resumed_step", int(evaluation[1]), NAME, lineno)
    elif _RESUMING.fullmatch(text):
        run.saw(NAME)
        run.state[_RESUMING_STATE] = True
    elif _EVIDENCE.fullmatch(text):
        run.saw(NAME)
    elif _PLAIN_COMMAND.fullmatch(text):
        run.state.setdefault(_PLAIN_STATE, lineno)


def finish(run: RunBuilder) -> None:
    """The pretrained model's block as the sequence length where the config states none, the global batch
    in sequences: the tokens an iteration over the sequence length (module docstring), and, of a nanoGPT
    run, TP and PP 1: train.py is data parallel only (DDP), so its DP is its GPUs where a launcher says."""
    if run.families_seen.get(NAME):
        run.data_parallel_only()
        if "gpus" not in run.facts and _PLAIN_STATE in run.state:  # no launcher's line said otherwise
            run.set_fact("gpus", 1, NAME, run.state[_PLAIN_STATE])
    if "seq_len" not in run.facts and _FORCED_STATE in run.state:
        block, line = run.state[_FORCED_STATE]
        run.set_fact("seq_len", block, NAME, line)
    tokens, lineno = run.state.get(NAME, (None, 0))
    seq_len = run.facts.get("seq_len")
    if tokens and isinstance(seq_len, int) and seq_len > 0 and tokens % seq_len == 0:
        run.set_fact("global_batch_size", tokens // seq_len, NAME, lineno)


FAMILY = Family(
    name=NAME,
    markers=(
        *_STEP_MARKERS,
        _OPENER,
        _OVERRIDE,
        "tokens per iteration will be: ",
        "vocab_size of GPT-2 to ",
        "found vocab_size = ",
        "OpenAI GPT-2 weights: ",
        "number of parameters: ",
        "forcing vocab_size=",
        ", val loss ",
        "Initializing a new model from scratch",
        "Resuming training from ",
        *_PLAIN_COMMANDS,
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
        OVERRIDES,
    ),
    blocks=(CONFIG,),
    description="Karpathy's nanoGPT: iter lines (loss, time, mfu), the printed config and overrides, "
    "tokens per iteration, vocabulary, parameters",
)

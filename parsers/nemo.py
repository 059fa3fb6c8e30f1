"""NVIDIA NeMo log family, 2.0 and 1.x (Megatron-core under PyTorch Lightning).

Lines read:
- NeMo 2.0's ``ProgressPrinter`` (nemo/lightning/pytorch/callbacks/progress_printer.py): ``Training epoch 0,
  iteration 21/99 | lr: 3.3e-06 | global_batch_size: 128 | global_step: 21 | reduced_train_loss: 9.98 |
  train_step_timing in s: 5.817 | consumed_samples: 2816``, a metric a field (``.4`` significant digits, an
  integral float as an integer): a step each, numbered by its ``global_step`` (else the iteration) plus one,
  both 0-based (Lightning's ``trainer.global_step`` before the step's own update; the printer's ``n - 1``:
  ``max_steps=20`` ends at ``iteration 19/19 | global_step: 19``), as every family's first update ends step 1, timed
  by ``train_step_timing in s`` (NeMo's TimingCallback), its global batch a fact;
- Lightning's ```Trainer.fit` stopped: `max_steps=100` reached.`` (or ``max_epochs``), or its Timer's ``Time
  limit reached. ... Signaling Trainer to stop.`` (``max_time``): the run's planned end;
  its world size and mixed precision (``Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/16``, ``Using
  bfloat16 Automatic Mixed Precision (AMP)``);
- NeMo's megatron_init, per rank: ``Rank 0 has tensor model parallel group: [0, 1]`` (pipeline, context and
  data parallel groups too): each group's size is its parallel size;
- NeMo 1.x's metrics, on Lightning's training bar only (an update per step, carriage returns between
  them): tqdm's postfix ``, reduced_train_loss=9.630, global_step=32.00, consumed_samples=33792.0,
  train_step_timing in s=3.330]`` (tqdm's ``format_num``, 3 significant digits, padded by Lightning's
  ``Tqdm.format_num`` to 5 characters). A step each, numbered by its ``global_step`` plus one (0-based, as
  2.0's); one past 99,999 prints in tqdm's exponent form (``1.2e+5``), so it is the bar's counter when that
  counts global steps done (NeMo's ``MegatronProgressBar``: no rate in the bar), else not recorded;
- NeMo 1.x's experiment configuration (hydra's YAML, printed by the training script after ``**************
  Experiment configuration ***********``): the trainer's GPUs, nodes, precision and steps, the model's
  shape, batch sizes and parallelism, the length trained on (``encoder_seq_length``; a fine-tuning's
  ``data.train_ds.max_seq_length``, which comes after it), each key the first time it has a value of its own (not an
  interpolation like ``${model.encoder_seq_length}``); megatron_base_model's ``Padded vocab_size: 50432,
  original vocab_size: 50257, dummy tokens: 175.``; megatron_gpt_model's ``Pipeline model parallel rank: 0,
  ... Total number of model parameters: 6.74e+09.``, or Lightning's summary ``355 M     Total params``: the
  logged size;
- NeMo's exp_manager ``Resuming training from checkpoint: <path>`` or Lightning's ``Restored all states from the
  checkpoint at <path>``: the resumed step, the ``step=6000`` of the checkpoint's name (ModelCheckpoint's
  ``{step}``);
- NeMo's logger's warnings and errors (``[NeMo W 2024-05-12 10:11:12 nemo_logging:349] ...``) the family's evidence alone: a
  run that failed before any record above (an import warning, then Hydra refusing an override) is NeMo's.
"""

from __future__ import annotations

import re

import polars as pl
from logstat.parsers import megatron
from logstat.parsers.base import Family, RunBuilder
from logstat.parsers.kinds import (
    BODY,
    NUMBER,
    OPENER,
    PYTHON_SPACE,
    RECORD,
    SEEN,
    Block,
    Events,
    RecordKind,
    RecordTest,
    as_count,
    as_real,
    code_frames,
    facts_of,
    marks_of,
    named_field,
    too_long,
    too_long_note,
)

NAME = "nemo"
#: a record's header; its fields follow it, ``|``-separated (the last one has no ``|`` after it)
HEADER = r"Training epoch (?P<epoch>\d+), iteration (?P<iteration>\d+)/(?P<total>\d+)"
#: step metric -> the field that gives it (a time in seconds); ``TFLOPS_per_GPU``: NeMo 2.0's
#: FLOPsMeasurementCallback (model FLOPs of its recipe's formula over the steps' mean time since its last log)
FIELDS = {"loss": "reduced_train_loss", "lr": "lr", "elapsed_ms": "train_step_timing in s"}
FIELDS["logged_tflops_per_gpu"] = "TFLOPS_per_GPU"
COUNTS = {"step": "global_step", "global_batch_size": "global_batch_size"}
_RECORD_MARKER = "Training epoch "
#: Lightning's word that training reached its planned steps or epochs
PLANNED_END = "`Trainer.fit` stopped: `max_"
#: the steps it names (fit_loop.py: ``max_steps={max_steps}` reached.``): the plan, where nothing printed it
_PLANNED_STEPS = re.compile(r"`max_steps=(\d+)` reached")
#: Lightning's Timer callback (NeMo's exp_manager ``max_time_per_run``) ending a run whose time budget is
#: spent (callbacks/timer.py: ``Time limit reached. Elapsed time is 3:50:00. Signaling Trainer to stop.``):
#: a timeout, as Megatron's ``--exit-duration-in-mins``, its steps not done; the next run resumes from its
#: checkpoint
TIME_BUDGET_END = "Signaling Trainer to stop."
#: Lightning's word on a Ctrl-C it caught (trainer/call.py: ``Detected KeyboardInterrupt, attempting graceful
#: shutdown ...``, 1.x's ``...shutdown...``), after which it exits with no traceback: the run was cancelled
INTERRUPTED = "Detected KeyboardInterrupt, attempting graceful shutdown"
#: Lightning's world size (fabric's ``_init_dist_connection``): every rank's ``Initializing distributed:
#: GLOBAL_RANK: 3, MEMBER: 4/16``, rank 0's ``All distributed processes registered. Starting with 16 processes``
_WORLD = re.compile(r"GLOBAL_RANK: \d+, MEMBER: \d+/(\d+)|Starting with (\d+) processes")
#: Lightning's mixed precision (the accelerator connector's ``16-mixed`` / ``bf16-mixed``)
_AMP = re.compile(r"Using (16bit|bfloat16) Automatic Mixed Precision")
_AMP_PRECISION = {"16bit": "fp16", "bfloat16": "bf16"}
#: NeMo's megatron_init: ``Rank 0 has tensor model parallel group: [0, 1]``, the ranks of each of its groups
_GROUP = re.compile(
    r"Rank \d+ has (tensor model|pipeline model|context|data) parallel group ?: \[([\d, ]*)\]"
)
_GROUP_FACTS = {"tensor model": "tp", "pipeline model": "pp", "context": "cp", "data": "dp"}
#: NeMo 1.x's bar: ``| {n}/{total} [{elapsed}<{remaining}`` then Lightning's rate (``0.29it/s``, ``3.42s/it``;
#: not in NeMo's MegatronProgressBar, whose ``n`` is the global steps done) and the postfix
BAR = r"\| *(?P<n>\d+)/\d+ \[[^,\]]*(?P<rate>, [\d.]+(?:it/s|s/it))?(?P<postfix>,[^\]]*)"
#: step metric -> the postfix field that gives it, a pattern (``train_step_timing`` before NeMo 1.18 or so)
BAR_FIELDS = {
    "loss": "reduced_train_loss",
    "elapsed_ms": "train_step_timing(?: in s)?",
    "step": "global_step",
}
_BAR_MARKERS = (" reduced_train_loss=", " train_step_timing")
#: NeMo 1.x's experiment configuration: its opener, and the keys read (their first plain value in it)
CONFIG_OPENER = "Experiment configuration"
_CONFIG_COUNTS = {
    **dict(devices="gpus_per_node", num_nodes="nodes", max_steps="train_iters"),
    **dict(micro_batch_size="micro_batch_size", global_batch_size="global_batch_size"),
    **dict(tensor_model_parallel_size="tp", pipeline_model_parallel_size="pp", context_parallel_size="cp"),
    **dict(encoder_seq_length="seq_len", max_seq_length="seq_len"),
    **dict(num_layers="num_layers", hidden_size="hidden_size"),
    **dict(
        ffn_hidden_size="ffn_hidden_size",
        num_attention_heads="num_heads",
        num_query_groups="num_query_groups",
    ),
}
_CONFIG_WORDS = ("precision", "activation", "activations_checkpoint_granularity")
#: the keys of MoE routing and block recomputation, read together (Megatron-LM's meaning: NeMo passes them on)
_CONFIG_SHAPE = (
    *("num_moe_experts", "moe_router_topk", "activations_checkpoint_method"),
    *("activations_checkpoint_num_layers", "virtual_pipeline_model_parallel_size"),
)
#: a YAML line ``  key: value`` (a scalar, not a list's ``- item``, a comment, nor a section's ``key:``)
_CONFIG_LINE = rf"^{PYTHON_SPACE}*(?P<name>[a-z_]+): (?P<value>[^\s#]+){PYTHON_SPACE}*$"
#: Lightning's trainer precision (``bf16``, ``bf16-mixed``, ``16``, ``16-mixed``, ``32``...)
_TRAINER_PRECISION = {"bf16": "bf16", "16": "fp16", "32": "fp32"}
_SWIGLU = ("swiglu", "fast-swiglu")
#: megatron_base_model's padded vocabulary
_PADDED_VOCAB = re.compile(r"Padded vocab_size: (\d+), original vocab_size: (\d+)")
#: megatron_gpt_model's count after the model is built (``{:.2e}``: three significant digits)
_TOTAL_PARAMETERS = "Total number of model parameters: "
_PARAMETERS = re.compile(rf"{_TOTAL_PARAMETERS}({NUMBER})")
#: Lightning's model summary (``get_human_readable_count``: ``355 M     Total params``, ``5.0 B``): rank 0's
#: module, the model's only without tensor or pipeline parallelism (else its shard: 4.0 B of an 8B at TP 2)
_SUMMARY_TOTAL = "Total params"
_SUMMARY_PARAMETERS = re.compile(
    rf"^{PYTHON_SPACE}*([\d,]+(?:\.\d+)?) ?([KMBT]?){PYTHON_SPACE}+{_SUMMARY_TOTAL}{PYTHON_SPACE}*$"
)
_SUMMARY_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_LAYOUT_MARKERS = ("MEMBER: ", "Starting with ", "Automatic Mixed Precision", " parallel group")


def read_iterations(records: pl.LazyFrame) -> Events:
    """A step event per ``Training epoch E, iteration N/M | ...`` record, and its global batch as a fact."""
    body = pl.col("text").str.replace(HEADER, "|") + "|"
    fields = {column: body.str.extract(named_field(name), 1) for column, name in {**FIELDS, **COUNTS}.items()}
    parsed = (
        records.select("order", pl.col("text").str.extract(HEADER, 2).alias("iteration"), **fields)
        .with_columns(
            step=pl.coalesce("step", "iteration"), global_batch_size=as_count(pl.col("global_batch_size"))
        )
        .collect()
    )
    fits = ~too_long(pl.col("step"))
    steps = parsed.filter(fits).select(
        "order",
        "global_batch_size",
        step=as_count(pl.col("step")) + 1,  # 0-based: the step logged is the global steps done before it
        loss=as_real(pl.col("loss")),
        lr=as_real(pl.col("lr")),
        elapsed_ms=as_real(pl.col("elapsed_ms")) * 1000.0,
        logged_tflops_per_gpu=as_real(pl.col("logged_tflops_per_gpu")),
        mode=pl.lit(RECORD, pl.Int8),
        family=pl.lit(NAME),
    )
    notes = parsed.filter(~fits).select(
        "order", family=pl.lit(NAME), message=too_long_note("iteration", pl.col("step"))
    )
    facts = facts_of(parsed.lazy(), NAME, global_batch_size=pl.col("global_batch_size"))
    seen = marks_of(records, NAME, SEEN)
    return Events(steps=[steps.drop_nulls("step")], facts=[facts.collect()], notes=[notes], marks=[seen])


def _postfix_field(name: str) -> str:
    return rf"[ ,]{name}=({NUMBER})"


def read_bar_updates(records: pl.LazyFrame) -> Events:
    """A step event per update of NeMo 1.x's training bar that shows its step's metrics. Lightning draws
    the bar twice a step: its new counter with the last step's postfix, then the step's own postfix; a
    step numbered by the counter is its last draw."""
    bar = pl.col("text").str.extract_groups(BAR)
    fields = {
        column: bar.struct["postfix"].str.extract(_postfix_field(name), 1)
        for column, name in BAR_FIELDS.items()
    }
    counted = bar.struct["rate"].is_null()  # MegatronProgressBar: the counter is the global steps done
    exact = ~pl.col("step").str.contains("e", literal=True)
    parsed = records.select(
        "run", "order", bar.struct["n"].alias("n"), counted.alias("counted"), **fields
    ).with_columns(exact=exact)
    steps = parsed.select(
        "run",
        "order",
        "exact",
        step=pl.when("exact").then(as_count(pl.col("step")) + 1).when("counted").then(as_count(pl.col("n"))),
        loss=as_real(pl.col("loss")),
        elapsed_ms=as_real(pl.col("elapsed_ms")) * 1000.0,
        mode=pl.lit(RECORD, pl.Int8),
        family=pl.lit(NAME),
    ).collect()
    by_counter = steps.filter(~pl.col("exact")).sort("order", maintain_order=True)
    by_counter = by_counter.unique(["run", "step"], keep="last", maintain_order=True)
    # a step's second draw repeats its first (a redraw after validation too): one event each
    exact = steps.filter("exact").sort("run", "order", maintain_order=True)
    redrawn = (pl.col("step") == pl.col("step").shift(1)) & (pl.col("run") == pl.col("run").shift(1))
    steps = pl.concat([exact.filter(~redrawn.fill_null(False)), by_counter]).drop("run", "exact")
    return Events(steps=[steps.drop_nulls("step")], marks=[marks_of(records, NAME, SEEN)])


def read_configuration(blocks: pl.LazyFrame, carry: pl.DataFrame | None = None) -> Events:
    """Facts of NeMo 1.x's experiment configurations, each from its key's line: the first statement of a
    key in its dump; GPUs as the trainer's devices x nodes."""
    lines = (
        blocks.filter(pl.col("role") == BODY)
        .select("block", "order", line=pl.col("text").str.extract_groups(_CONFIG_LINE))
        .unnest("line")
        .filter(
            pl.col("name").is_in([*_CONFIG_COUNTS, *_CONFIG_WORDS, *_CONFIG_SHAPE]),
            ~pl.col("value").str.starts_with("$"),
        )
        .sort("block", "order")
        .unique(["block", "name"], keep="first", maintain_order=True)
    )
    count = pl.col("value").cast(pl.Int64, strict=False)
    counts = lines.filter(pl.col("name").is_in(list(_CONFIG_COUNTS)), count > 0).select(
        "block", "order", fact=pl.col("name").replace_strict(_CONFIG_COUNTS), value=count, family=pl.lit(NAME)
    )
    devices = counts.filter(pl.col("fact") == "gpus_per_node").select("block", "order", per_node="value")
    nodes = counts.filter(pl.col("fact") == "nodes").select("block", nodes="value")
    gpus = devices.join(nodes, on="block").select(
        "block", "order", fact=pl.lit("gpus"), value=pl.col("per_node") * pl.col("nodes"), family=pl.lit(NAME)
    )
    word, name = pl.col("value").str.to_lowercase(), pl.col("name")
    precision = word.str.replace("-.*", "").replace_strict(_TRAINER_PRECISION, default=None)
    flags = lines.select(
        "order",
        precision=pl.when(name == "precision").then(precision),
        swiglu=pl.when(name == "activation").then(word.is_in(_SWIGLU)),
        activation_checkpointing=pl.when(name == "activations_checkpoint_granularity").then(word == "full"),
    )
    facts = [pl.concat([counts, gpus]).drop("block").collect()]
    facts += [
        flags.select("order", fact=pl.lit(fact), value=fact, family=pl.lit(NAME))
        .drop_nulls("value")
        .collect()
        for fact in ("precision", "swiglu", "activation_checkpointing")
    ]
    facts += _shape_facts(lines)
    openers = blocks.filter(pl.col("role") == OPENER)
    return Events(facts=facts, marks=[marks_of(openers, NAME, SEEN)])


def _shape_facts(lines: pl.LazyFrame) -> list[pl.DataFrame]:
    """``moe_topk`` (the router's top k when ``num_moe_experts`` is a number: null is a dense model), its
    ``moe_experts``, and
    ``recomputed_layers`` (full recomputation's block method: ``megatron.block_recomputed_layers``) of each
    configuration, at its ``moe_router_topk`` and ``activations_checkpoint_num_layers`` lines."""
    value = lambda name: pl.col("value").filter(pl.col("name") == name).first()  # noqa: E731
    number = lambda name: value(name).cast(pl.Int64, strict=False)  # noqa: E731
    positive = lambda name: pl.when(number(name) > 0).then(number(name))  # noqa: E731
    at = lambda name: pl.col("order").filter(pl.col("name") == name).first()  # noqa: E731
    recomputed = megatron.block_recomputed_layers(
        per_chunk=positive("activations_checkpoint_num_layers"),
        layers=positive("num_layers"),
        stages=positive("pipeline_model_parallel_size"),
        virtual_stages=positive("virtual_pipeline_model_parallel_size"),
        virtual_stage_layers=pl.lit(None, pl.Int64),
    )
    block = (value("activations_checkpoint_granularity") == "full") & (
        value("activations_checkpoint_method") == "block"
    )
    per_block = lines.group_by("block").agg(
        moe_topk=pl.when(positive("num_moe_experts").is_not_null()).then(positive("moe_router_topk")),
        moe_at=at("moe_router_topk"),
        moe_experts=positive("num_moe_experts"),
        experts_at=at("num_moe_experts"),
        recomputed_layers=pl.when(block).then(recomputed),
        recomputed_at=at("activations_checkpoint_num_layers"),
    )
    return [
        per_block.select(order=f"{where}_at", fact=pl.lit(fact), value=fact, family=pl.lit(NAME))
        .drop_nulls("value")
        .collect()
        for fact, where in (
            ("moe_topk", "moe"),
            ("moe_experts", "experts"),
            ("recomputed_layers", "recomputed"),
        )
    ]


CONFIGURATION = Block(
    family=NAME,
    name="configuration",
    opens=RecordTest(markers=(CONFIG_OPENER,)),
    body=RecordTest(pattern=_CONFIG_LINE),
    markers=tuple(f"{key}: " for key in (*_CONFIG_COUNTS, *_CONFIG_WORDS, *_CONFIG_SHAPE)),
    # the trainer's and the model's set-up print right after it; a configuration is a few hundred lines
    ends=RecordTest(markers=(" parallel group", "Padded vocab_size: ")),
    max_lines=1500,
    read=read_configuration,
    facts=(
        *_CONFIG_COUNTS.values(),
        *("gpus", "precision", "swiglu", "activation_checkpointing", "moe_topk", "moe_experts"),
        "recomputed_layers",
    ),
)


def parse_line(text: str, lineno: int, run: RunBuilder) -> None:
    """Lightning's planned end of training, its caught Ctrl-C, world size and precision (not NeMo's alone: they say nothing of
    the family); NeMo's parallel groups and padded vocabulary."""
    if PLANNED_END in text:  # any Lightning run's
        run.complete(text.strip(), lineno)
        if planned := _PLANNED_STEPS.search(text):
            run.set_fact("train_iters", int(planned[1]), NAME, lineno)
    elif TIME_BUDGET_END in text and "Time limit reached" in text:
        run.spent_time_budget(text, lineno)
    elif INTERRUPTED in text:
        run.fail("cancelled", text.strip(), lineno, kind="interrupt")
    elif world := _WORLD.search(text):
        run.set_fact("gpus", int(world[1] or world[2]), NAME, lineno)
    elif amp := _AMP.search(text):
        run.set_fact("precision", _AMP_PRECISION[amp[1]], NAME, lineno)
    elif vocabulary := _PADDED_VOCAB.search(text):
        run.set_fact("padded_vocab_size", int(vocabulary[1]), NAME, lineno)
        run.set_fact("vocab_size", int(vocabulary[2]), NAME, lineno)
    elif parameters := _PARAMETERS.search(text):
        run.set_fact("logged_model_size", float(parameters[1]) / 1e9, NAME, lineno)
    elif _SUMMARY_TOTAL in text and (summary := _SUMMARY_PARAMETERS.search(text)):
        facts = run.facts
        if "logged_model_size" in facts or facts.get("tp", 1) * facts.get("pp", 1) > 1:
            return  # megatron_gpt_model's count has more digits; a model-parallel rank's is a shard
        count = float(summary[1].replace(",", "")) * _SUMMARY_SCALE[summary[2]]
        run.set_fact("logged_model_size", count / 1e9, NAME, lineno)
    elif resumed := _RESUMED.search(text):
        run.set_fact("resumed_step", int(resumed[1]), NAME, lineno)
    elif group := _GROUP.search(text):
        run.saw(NAME)
        run.set_fact(_GROUP_FACTS[group[1]], len(group[2].split(",")), NAME, lineno)


#: a resume from a Lightning checkpoint: NeMo's exp_manager ``Resuming training from checkpoint: <path>``,
#: Lightning's ``Restored all states from the checkpoint at <path>``; ModelCheckpoint names a file by its
#: ``{step}`` (NeMo's ``megatron_gpt--val_loss=1.92-step=6000-consumed_samples=1536000.0-last.ckpt``): the
#: step the run resumed at
_RESUMES = ("Resuming training from checkpoint: ", "Restored all states from the checkpoint at ")
_RESUMED = re.compile(rf"(?:{'|'.join(_RESUMES)})\S*?\bstep=(\d+)\b")
#: NeMo's logger's warnings and errors (nemo/utils/nemo_logging.py's formatter: ``[NeMo W 2024-05-12 10:11:12
#: nemo_logging:349] ...``): a NeMo program's lines whatever they say, the only NeMo lines of a run that failed
#: early (its import warnings, then Hydra's refusal of an override). Not its info lines: a NeMo log has ten
#: times as many, each a record to keep
LOGGER_MARKERS = ("[NeMo W ", "[NeMo E ")
_LOGGER_LINE = r"^\[NeMo [WE] \d{4}-\d\d-\d\d "


def read_logger_lines(records: pl.LazyFrame) -> Events:
    """A mark that NeMo was seen, at each run's first logger line of the frame (one is evidence enough)."""
    first = records.group_by("run").agg(pl.col("order").min()).select("order")
    return Events(marks=[marks_of(first, NAME, SEEN)])


#: the markers of the lines the family reads
OWN_MARKERS = (
    _RECORD_MARKER,
    *_BAR_MARKERS,
    PLANNED_END,
    TIME_BUDGET_END,
    INTERRUPTED,
    *_LAYOUT_MARKERS,
    CONFIG_OPENER,
    "Padded vocab_size: ",
    _TOTAL_PARAMETERS,
    _SUMMARY_TOTAL,
    *_RESUMES,
)

#: NeMo's code in a traceback's frames (its collections, its Lightning strategy, its core)
CODE = ("/nemo/collections/", "/nemo/lightning/", "/nemo/core/")

FAMILY = Family(
    name=NAME,
    markers=(*OWN_MARKERS, *LOGGER_MARKERS, *CODE),
    parse_line=parse_line,
    kinds=(
        RecordKind(
            family=NAME,
            name="iteration",
            test=RecordTest(markers=(_RECORD_MARKER,), pattern=HEADER),
            read=read_iterations,
            facts=("global_batch_size",),
        ),
        RecordKind(
            family=NAME,
            name="bar",
            test=RecordTest(markers=_BAR_MARKERS, pattern=BAR),
            read=read_bar_updates,
        ),
        # the logger's other lines: those with one of the family's own markers are read in Python
        RecordKind(
            family=NAME,
            name="logger",
            test=RecordTest(markers=LOGGER_MARKERS, pattern=_LOGGER_LINE, unless=OWN_MARKERS),
            read=read_logger_lines,
        ),
        code_frames(NAME, CODE),
    ),
    blocks=(CONFIGURATION,),
    description="NVIDIA NeMo: 2.0's ProgressPrinter lines, 1.x's training bar and configuration, Lightning's "
    "planned end, the parallel groups",
)

"""Experiment specs: frozen, typed, keyword-only dataclasses; TOML is only their serialization.

A spec says what to train (model), how to split it (parallel), how big a step is (batch), how to
train (train), with which stack and where (cluster). ``load_spec`` reads a TOML file, applies
``--set section.field=value`` overrides typed by the field, fills what is derived (the preset's
shape, the global batch, the job name) and returns a :class:`Spec`. Whether the numbers fit
together is :mod:`logstat.runners.validate`'s business.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logstat.analytics import formulas
from logstat.runners.presets import GPT2_NUM_HEADS, GPT2_PRESETS, GPT2_SEQ_LEN, GPT2_VOCAB_SIZE

from logstat.errors import LogstatError

#: The spec TOML's table of sweep settings (grid, thresholds), read by logstat.runners.sweep.
SWEEP_SECTION = "sweep"
#: Where the shipped specs live; ``logstat run NAME`` looks here when NAME is not a path.
SPECS_DIR = Path(__file__).resolve().parent / "specs"


class SpecError(LogstatError):
    """A spec that cannot be read or does not hold together; the message names field, value and rule."""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The GPT-2 shape: a preset of the MSIZE table or an explicit shape."""

    preset: int | None = None
    """MSIZE of runners/presets.py (billions, e.g. 52); fills hidden_size and num_layers."""
    hidden_size: int | None = None
    """Hidden dimension h; required when no preset is given."""
    num_layers: int | None = None
    """Transformer layers l; required when no preset is given."""
    num_heads: int = GPT2_NUM_HEADS
    """Attention heads."""
    seq_len: int = GPT2_SEQ_LEN
    """Sequence length in tokens (also the number of position embeddings)."""
    vocab_size: int = GPT2_VOCAB_SIZE
    """Vocabulary size before any padding the stack does."""


@dataclass(frozen=True, kw_only=True)
class ParallelSpec:
    """Model parallelism; data parallelism is derived: DP = world / (TP * PP)."""

    tp: int = 1
    """Tensor-parallel degree (Megatron's --tensor-model-parallel-size)."""
    pp: int = 1
    """Pipeline-parallel degree (Megatron's --pipeline-model-parallel-size)."""


@dataclass(frozen=True, kw_only=True)
class BatchSpec:
    """Batch sizes in samples (sequences); global = micro * gas * DP."""

    micro: int
    """Micro batch per GPU (per model replica) and per forward pass."""
    gas: int = 1
    """Gradient accumulation steps; with pipeline parallelism the number of PP chunks."""
    global_batch: int | None = None
    """Samples per optimizer step; derived when omitted, checked when given."""


@dataclass(frozen=True, kw_only=True)
class TrainSpec:
    """How to train."""

    precision: str = "fp16"
    """fp32, fp16 or bf16."""
    activation_checkpointing: bool = False
    """Recompute activations in the backward pass (seed TFLOPs factor 4 instead of 3)."""
    optimizer: str = "adam"
    """adam or sgd (Megatron-DeepSpeed); adamw (HF); adafactor or adamw (DDP)."""
    lr: float = 1.5e-4
    """Peak learning rate."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage 0-3; 2 and 3 are refused with pipeline parallelism (seed 002)."""
    offload_optimizer: bool = False
    """ZeRO: keep optimizer states on the CPU."""
    offload_param: bool = False
    """ZeRO-3: keep parameters on the CPU."""
    seed: int = 1234
    """Random seed of the model initialisation and of the synthetic data."""
    log_interval: int = 1
    """Log one line every this many steps."""


@dataclass(frozen=True, kw_only=True)
class ClusterSpec:
    """Where it runs: rendered into the sbatch header and the launcher's node counts."""

    nodes: int = 1
    """Nodes: both ``#SBATCH --nodes`` and the launcher's ``--nnodes`` come from this one field."""
    gpus_per_node: int = 1
    """GPUs per node (processes per node: the launcher's --nproc_per_node)."""
    use_gpus: bool = True
    """Request GPUs (``--gres=gpu:N``) and train on CUDA; false: CPU processes with gloo (tiny variants)."""
    partition: str | None = None
    """Slurm partition (``#SBATCH --partition``), omitted when unset."""
    constraint: str | None = None
    """Slurm node feature, e.g. ``v100-32g`` (``#SBATCH --constraint``)."""
    account: str | None = None
    """Slurm account to charge (``#SBATCH --account``)."""
    time_limit: str = "01:00:00"
    """Slurm wall-clock limit, [D-]HH:MM:SS."""
    job_name: str | None = None
    """Slurm job name; the spec's name when omitted."""
    cpus_per_task: int | None = None
    """CPUs for the one task per node (``#SBATCH --cpus-per-task``)."""
    gpu_model: str | None = None
    """GPU model as in logstat.analytics.gpus (e.g. V100-SXM2-32GB), for the memory check."""
    master_port: int = 6000
    """TCP port of the rendezvous on the first node."""


@dataclass(frozen=True, kw_only=True)
class MegatronSpec:
    """Megatron-DeepSpeed: a repository checkout, not a package, and its data files."""

    dir: str | None = None
    """Checkout holding pretrain_gpt.py; MEGATRON_DEEPSPEED_DIR when omitted."""
    data_path: str | None = None
    """Prefix of the preprocessed .bin/.idx dataset (--data-path)."""
    vocab_file: str | None = None
    """GPT-2 BPE vocabulary (--vocab-file)."""
    merge_file: str | None = None
    """GPT-2 BPE merges (--merge-file)."""
    data_impl: str = "mmap"
    """--data-impl: lazy, cached, mmap or infer."""
    split: str = "949,50,1"
    """--split of the dataset into train, validation, test."""


@dataclass(frozen=True, kw_only=True)
class DdpSpec:
    """DDP + PowerSGD (seed 000): the gradient compression's settings."""

    powersgd_rank: int = 4
    """Rank of PowerSGD's low-rank approximation of each gradient matrix."""
    powersgd_start_iter: int = 2
    """Steps of plain all-reduce before compression starts (PowerSGD needs >= 2 for warm start)."""


@dataclass(frozen=True, kw_only=True)
class EstimateSpec:
    """Assumptions of the printed estimate (nothing here changes what runs)."""

    tflops_per_gpu: float | None = None
    """Achieved TFLOPs/GPU to assume for the days estimate (e.g. the seed's measured 52.8)."""
    sec_per_iter: float | None = None
    """Or the measured/assumed seconds per iteration (one global batch); give one of the two."""
    tokens: float = 100e9
    """Tokens the days estimate is for (seed 000 reports days for 100B tokens)."""


@dataclass(frozen=True, kw_only=True)
class Spec:
    """One experiment."""

    name: str
    """Spec name; runs go to runs/<name>/."""
    stack: str
    """megatron-deepspeed, hf-zero3 or ddp-powersgd (logstat.runners.stacks)."""
    steps: int
    """Optimizer steps to train."""
    batch: BatchSpec
    """Batch sizes."""
    description: str = ""
    """One line for humans."""
    tiny_variant: str | None = None
    """Name of the scaled-down spec that fits 2 CPU processes (pointed to when this one does not fit)."""
    model: ModelSpec = field(default_factory=ModelSpec)
    """Model shape."""
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    """TP and PP."""
    train: TrainSpec = field(default_factory=TrainSpec)
    """Precision, checkpointing, optimizer, ZeRO."""
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    """Nodes, GPUs and Slurm settings."""
    megatron: MegatronSpec = field(default_factory=MegatronSpec)
    """Megatron-DeepSpeed checkout and data."""
    ddp: DdpSpec = field(default_factory=DdpSpec)
    """PowerSGD settings."""
    estimate: EstimateSpec = field(default_factory=EstimateSpec)
    """Assumptions of the printed estimate."""

    @property
    def world_size(self) -> int:
        """Processes (GPUs) in the job: nodes * gpus_per_node."""
        return self.cluster.nodes * self.cluster.gpus_per_node

    @property
    def dp(self) -> int | None:
        """Data-parallel degree world / (TP * PP); None when it does not divide."""
        model_parallel = self.parallel.tp * self.parallel.pp
        if model_parallel < 1 or self.world_size % model_parallel:
            return None
        return formulas.data_parallel_size(world=self.world_size, tp=self.parallel.tp, pp=self.parallel.pp)


SECTIONS: dict[str, type] = {
    "model": ModelSpec,
    "parallel": ParallelSpec,
    "batch": BatchSpec,
    "train": TrainSpec,
    "cluster": ClusterSpec,
    "megatron": MegatronSpec,
    "ddp": DdpSpec,
    "estimate": EstimateSpec,
}
_TOP_LEVEL = {f.name for f in dataclasses.fields(Spec)} - set(SECTIONS)


def find_spec(name_or_path: str | Path) -> Path:
    """A spec file from a path, or from a shipped spec's name (``gpt2-52b-megatron-ds``)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SPECS_DIR / f"{path.name.removesuffix('.toml')}.toml"
    if path.parent == Path(".") and shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in SPECS_DIR.glob("*.toml")))
    raise SpecError(f"spec {str(name_or_path)!r} is neither a file nor a shipped spec (shipped: {names})")


def load_spec(name_or_path: str | Path, overrides: Iterable[str] = ()) -> Spec:
    """Read a spec TOML, apply ``section.field=value`` overrides, fill what is derived."""
    path = find_spec(name_or_path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read spec {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"spec {path} is not valid TOML: {exc}") from exc
    raw.setdefault("name", path.stem)
    return build_spec(raw, overrides, source=str(path))


def build_spec(raw: dict[str, Any], overrides: Iterable[str] = (), *, source: str = "spec") -> Spec:
    """A resolved spec from a TOML-shaped dict and ``section.field=value`` overrides; every bad
    override is reported at once, then every bad key of the result."""
    # A spec's [sweep] table is read by `logstat sweep` (logstat.runners.sweep); the spec itself,
    # as `logstat run` launches it, is the sweep's base point.
    raw.pop(SWEEP_SECTION, None)
    overrides = list(overrides)
    errors = []
    for override in overrides:
        try:
            apply_override(raw, override)
        except SpecError as exc:
            errors.append(str(exc))
    if errors:  # with what the file itself gets wrong: every problem at once
        try:
            spec_from_dict(raw, source=source)
        except SpecError as exc:
            errors.append(str(exc))
        raise SpecError("; ".join(errors))
    _note_overrides(raw, overrides)
    return resolve(spec_from_dict(raw, source=source))


def _note_overrides(raw: dict[str, Any], overrides: list[str]) -> None:
    """The spec's description was written for its own values ("TP 4, PP 16, DP 1"); after ``--set``
    the plan, spec.toml and manifest would contradict it, so it says which values were changed."""
    described = raw.get("description")
    touched = {override.partition("=")[0].strip() for override in overrides}
    if overrides and isinstance(described, str) and described and "description" not in touched:
        changes = ", ".join(" ".join(override.split()) for override in overrides)
        if changes.isprintable():  # a control character is refused in its own field; said once
            raw["description"] = f"{described} (then --set {changes})"


def apply_override(raw: dict[str, Any], override: str, *, option: str = "--set") -> None:
    """Set ``section.field=value`` (or ``field=value``) in a raw spec dict, typed by the field;
    errors name ``option``, the command-line option the override came from."""
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep:
        raise SpecError(f"{option} {override!r} must look like section.field=value")
    section, _, name = key.rpartition(".")
    owner = SECTIONS.get(section) if section else Spec
    if owner is None:
        raise SpecError(f"{option} {key}: unknown section {section!r} (sections: {', '.join(SECTIONS)})")
    hints = typing.get_type_hints(owner)
    if name not in hints or (owner is Spec and name in SECTIONS):
        valid = ", ".join(sorted(set(hints) - (set(SECTIONS) if owner is Spec else set())))
        raise SpecError(f"{option} {key}: unknown field {name!r} (fields: {valid})")
    value = _parse_text(text.strip(), hints[name], key, option)
    target = raw.setdefault(section, {}) if section else raw
    if value is None:  # TOML has no null: an absent key is the field's default (None)
        target.pop(name, None)
    else:
        target[name] = value


def spec_from_dict(raw: Mapping[str, Any], *, source: str = "spec") -> Spec:
    """Build a :class:`Spec` from a TOML-shaped dict; unknown keys, wrong types and missing fields
    are refused all at once (a user fixes them in one go), each naming its key."""
    problems: list[str] = []
    unknown = sorted(set(raw) - _TOP_LEVEL - set(SECTIONS))
    if unknown:
        keys = ", ".join(sorted(_TOP_LEVEL | set(SECTIONS)))
        problems.append(f"unknown key{'s' if len(unknown) > 1 else ''} {_quoted(unknown)} (keys: {keys})")
    sections = {}
    for name, cls in SECTIONS.items():
        value = raw.get(name, {})
        if not isinstance(value, Mapping):
            problems.append(f"[{name}] must be a table, not {value!r}")
            continue
        sections[name] = _build(cls, value, prefix=f"{name}.", problems=problems)
    top = {k: v for k, v in raw.items() if k in _TOP_LEVEL}
    hints = typing.get_type_hints(Spec)
    problems += [f"{key} is required" for key in ("name", "stack", "steps") if key not in top]
    for key, value in top.items():
        _check_type(value, hints[key], key, problems)
    if problems:
        raise SpecError(f"{source}: " + "; ".join(problems))
    return Spec(**top, **sections)


def _quoted(keys: list[str]) -> str:
    return ", ".join(repr(key) for key in keys)


#: Fields a saved spec holds resolved, and the fields they were derived from (:func:`resolve`): a rerun
#: (runners.rerun) that changes one of the latter derives the former again, as `logstat run` would, unless
#: it sets it too.
DERIVED_FROM = {
    "batch.global_batch": (
        "batch.micro", "batch.gas", "parallel.tp", "parallel.pp", "cluster.nodes", "cluster.gpus_per_node"
    ),
    "model.hidden_size": ("model.preset",),
    "model.num_layers": ("model.preset",),
    "cluster.job_name": ("name",),
}  # fmt: skip


def resolve(spec: Spec) -> Spec:
    """Fill the derived fields: the preset's shape, the global batch, the job name."""
    model = spec.model
    if model.preset is not None:
        preset = GPT2_PRESETS.get(model.preset)
        if preset is None:
            valid = ", ".join(str(m) for m in GPT2_PRESETS)
            raise SpecError(f"model.preset={model.preset} is not a GPT-2 preset (presets: {valid})")
        for name in ("hidden_size", "num_layers"):
            given, wanted = getattr(model, name), getattr(preset, name)
            if given is not None and given != wanted:
                raise SpecError(
                    f"model.{name}={given} contradicts model.preset={model.preset} ({name}={wanted}); "
                    "give a preset or an explicit shape"
                )
        model = dataclasses.replace(model, hidden_size=preset.hidden_size, num_layers=preset.num_layers)
    elif model.hidden_size is None or model.num_layers is None:
        raise SpecError("model: give model.preset or both model.hidden_size and model.num_layers")
    spec = dataclasses.replace(spec, model=model)
    if spec.batch.global_batch is None and spec.dp is not None:
        derived = formulas.global_batch(micro_batch=spec.batch.micro, gas=spec.batch.gas, dp=spec.dp)
        spec = dataclasses.replace(spec, batch=dataclasses.replace(spec.batch, global_batch=derived))
    if spec.cluster.job_name is None:
        spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, job_name=spec.name))
    return spec


def spec_to_dict(spec: Spec) -> dict[str, Any]:
    """The spec as a TOML-shaped dict (None values left out: TOML has no null)."""
    raw = dataclasses.asdict(spec)
    return {
        key: ({k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value)
        for key, value in raw.items()
        if value is not None
    }


def dotted_items(table: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """``(section.field, value)`` of a TOML-shaped dict, nested tables flattened to dotted keys."""
    for key, value in table.items():
        if isinstance(value, Mapping):
            yield from dotted_items(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def spec_to_toml(spec: Spec) -> str:
    """Serialize a spec to TOML text that :func:`load_spec` reads back to an equal spec."""
    raw = spec_to_dict(spec)
    lines = [f"{key} = {_toml_value(value)}" for key, value in raw.items() if not isinstance(value, dict)]
    for key, value in raw.items():
        if isinstance(value, dict):
            lines.append(f"\n[{key}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in value.items())
    return "\n".join(lines) + "\n"


def _build(cls: type, values: Mapping[str, Any], *, prefix: str, problems: list[str]) -> Any:
    """An instance of section ``cls``, or None with what is wrong added to ``problems``."""
    hints = typing.get_type_hints(cls)
    before = len(problems)
    unknown = sorted(set(values) - set(hints))
    if unknown:
        keys = [prefix + key for key in unknown]
        problems.append(
            f"unknown key{'s' if len(keys) > 1 else ''} {', '.join(keys)} (fields: {', '.join(sorted(hints))})"
        )
    for key, value in values.items():
        if key in hints:
            _check_type(value, hints[key], prefix + key, problems)
    required = [f.name for f in dataclasses.fields(cls) if _is_required(f)]
    problems += [f"{prefix}{name} is required" for name in required if name not in values]
    return cls(**values) if len(problems) == before else None


def _is_required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _base_types(hint: Any) -> tuple[type, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return tuple(t for t in typing.get_args(hint) if t is not type(None))
    return (hint,)


def _check_type(value: Any, hint: Any, key: str, problems: list[str]) -> None:
    kinds = _base_types(hint)
    if bool in kinds and isinstance(value, bool):
        return
    if int in kinds and isinstance(value, int) and not isinstance(value, bool):
        return
    if float in kinds and isinstance(value, int | float) and not isinstance(value, bool):
        return
    if str in kinds and isinstance(value, str):
        return
    wanted = " or ".join(_KIND_NAMES[k] for k in kinds)
    problems.append(f"{key}={value!r} must be {wanted}")


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _parse_text(text: str, hint: Any, key: str, option: str = "--set") -> Any:
    kinds = _base_types(hint)
    optional = len(kinds) != len(typing.get_args(hint) or (hint,))
    if optional and text.lower() in {"none", "null"}:
        return None
    kind = kinds[0]
    try:
        if kind is bool:
            if text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise SpecError(f"{option} {key}={text!r}: {key} must be {_KIND_NAMES[kind]}") from None
    return text


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return _toml_string(str(value))


def _toml_string(text: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'

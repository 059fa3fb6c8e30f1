"""Sweeps: a grid of spec configurations, pruned before anything runs, launched as one unit.

Every table of the seed's gpt2.md is a sweep done by hand (micro batch 4/6/8, PP chunks
128/256/512, TP 1/2/4 at a fixed GPU count). A sweep is a base spec, ``--set`` overrides and
grid axes (``--grid batch.micro=4,6,8``, or the spec's ``[sweep.grid]`` table), each axis a spec
field typed as ``--set`` types it. :func:`plan_sweep` expands the product and checks every point
as ``logstat run`` would (:func:`logstat.runners.validate.check` and ``estimate``), pruning
points that the checks refuse, whose model states do not fit the GPU by the estimate, or whose
pipeline efficiency gas/(gas+PP-1) is under a threshold; every pruned point keeps its rule.

A launched sweep is a directory ``runs/<spec>/sweep-<UTC time>-<id>/`` holding ``sweep.json``
(the plan, the pruned points with their rule, the Slurm array ids), ``plan.txt`` and one run
directory per kept point, named by its array task id (``00``, ``01`` ...), each an ordinary
``logstat run`` directory (spec.toml, run.sbatch, manifest.json, the log). The Slurm backend
submits one job array whose task N runs point N's own run.sbatch; the local backend runs the
points one after another.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import secrets
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from logstat.analytics.gpus import GPUS
from logstat.runners.rundir import PLAN_FILE, SWEEP_FILE, atomic_write_text, create_run_dir, make_parents
from logstat.runners.spec import (
    SWEEP_SECTION,
    Spec,
    SpecError,
    apply_override,
    dotted_items,
    find_spec,
    load_spec,
)
from logstat.runners.validate import Estimate, check, estimate

from logstat.errors import LogstatError

ARRAY_SCRIPT = "sweep.sbatch"
SWEEP_VERSION = 1
#: Default floor of the pipeline efficiency gas/(gas+PP-1): seed 002 recommends gas = 8*PP (~89%);
#: the seed's own performance runs went down to 82% (PP 8, 32 chunks), its max-size runs (gas 4) far lower.
DEFAULT_MIN_PIPELINE_EFFICIENCY = 0.8

#: Grids beyond this are refused before any point is built (Slurm's default MaxArraySize is 1001).
MAX_POINTS = 4096

#: Why a point was pruned (the plan, sweep.json and the table name these).
RULE_REFUSED = "refused"
RULE_MEMORY = "memory"
RULE_PIPELINE = "pipeline"
RULE_BACKEND = "backend"


@dataclass(frozen=True)
class Axis:
    """One grid dimension: a spec field and the values it takes, as typed on the command line."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Point:
    """One configuration of the grid."""

    index: int
    """Position in the grid's product (the plan's order)."""
    settings: tuple[tuple[str, str], ...]
    """(field, value text) for every axis."""
    spec: Spec | None = None
    """The resolved spec; None when the settings do not make a spec at all."""
    plan: Estimate | None = None
    """The estimate of a spec the checks accept."""
    rule: str | None = None
    """Why it was pruned (RULE_*), None when kept."""
    reason: str | None = None
    """The pruning rule's words, naming fields, values and limits."""
    warnings: tuple[str, ...] = ()
    """The spec checks' warnings of a kept point."""
    task: int | None = None
    """Array task id (and run directory name) of a kept point."""

    @property
    def kept(self) -> bool:
        return self.rule is None

    @property
    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.settings]


@dataclass(frozen=True, kw_only=True)
class SweepPlan:
    """A grid expanded and checked: what `logstat sweep --dry-run` prints and a launch records."""

    spec_path: Path
    spec_name: str
    stack: str
    overrides: tuple[str, ...]
    axes: tuple[Axis, ...]
    min_pipeline_efficiency: float
    points: tuple[Point, ...]
    recipe: str | None = None

    @property
    def kept(self) -> list[Point]:
        return [point for point in self.points if point.kept]

    @property
    def pruned(self) -> list[Point]:
        return [point for point in self.points if not point.kept]


# --- the grid --------------------------------------------------------------------------------


def parse_axis(text: str, *, option: str = "--grid") -> Axis:
    """``section.field=v1,v2,...`` -> an :class:`Axis`; every value is typed by the field now, so
    that a misspelt field or a bad value is refused before any point is built."""
    key, sep, values_text = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SpecError(f"{option} {text!r} must look like section.field=value1,value2,...")
    values = tuple(value.strip() for value in values_text.split(","))
    return make_axis(key, values, option=option)


def make_axis(key: str, values: Sequence[str], *, option: str = "--grid") -> Axis:
    """An axis of ``key`` over ``values`` (texts as ``--set`` reads them), checked."""
    if not values or any(value == "" for value in values):
        raise SpecError(f"{option} {key}: empty value in {','.join(values)!r}")
    typed: dict[Any, str] = {}  # value as --set types it ("01" is 1, "yes" is true) -> its text
    for value in values:
        raw: dict[str, Any] = {}
        apply_override(raw, f"{key}={value}", option=option)
        meaning = dict(dotted_items(raw)).get(key)
        if meaning in typed:
            same = "" if typed[meaning] == value else f" (as {typed[meaning]!r})"
            raise SpecError(f"{option} {key}: value {value!r} is listed twice{same}")
        typed[meaning] = value
    return Axis(key, tuple(values))


def sweep_section(spec_path: Path) -> dict[str, Any]:
    """The spec file's ``[sweep]`` table (empty when it has none)."""
    try:
        raw = tomllib.loads(Path(spec_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"cannot read spec {spec_path}: {exc}") from exc
    section = raw.get(SWEEP_SECTION, {})
    if not isinstance(section, dict):
        raise SpecError(f"{spec_path}: [{SWEEP_SECTION}] must be a table")
    unknown = set(section) - {"grid", "min_pipeline_efficiency", "max_parallel"}
    if unknown:
        raise SpecError(
            f"{spec_path}: unknown key {SWEEP_SECTION}.{sorted(unknown)[0]} "
            "(keys: grid, min_pipeline_efficiency, max_parallel)"
        )
    return section


def section_axes(section: Mapping[str, Any], source: str) -> list[Axis]:
    """Axes of a ``[sweep.grid]`` table: ``batch.micro = [4, 6, 8]`` (dotted or quoted keys)."""
    grid = section.get("grid", {})
    if not isinstance(grid, Mapping):
        raise SpecError(f"{source}: {SWEEP_SECTION}.grid must be a table of field = [values]")
    axes = []
    for key, values in dotted_items(grid):
        if not isinstance(values, list) or not values:
            raise SpecError(f"{source}: {SWEEP_SECTION}.grid.{key} must be a non-empty list of values")
        axes.append(make_axis(key, [_text_of(value) for value in values], option=f"{source}: [sweep.grid]"))
    return axes


def _text_of(value: Any) -> str:
    """A TOML value as ``--set`` text (TOML has already typed it; the field types it again)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def refuse_repeated(axes: Sequence[Axis], option: str = "--grid") -> None:
    """One source of axes (the command line, a recipe) names each field once."""
    keys = [axis.key for axis in axes]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise LogstatError(f"{option} {repeated[0]} is given twice")


def merge_axes(first: Sequence[Axis], then: Sequence[Axis]) -> list[Axis]:
    """``first`` (the spec's grid) with ``then`` (the command line's) replacing axes of the same field."""
    merged = {axis.key: axis for axis in first}
    for axis in then:
        merged[axis.key] = axis
    return list(merged.values())


# --- recipes ---------------------------------------------------------------------------------

#: name -> one line saying what the recipe does (for --help and the plan).
RECIPES = {
    "shaden": "seed 002, Shaden's approach: TP = GPUs per node, PP = nodes, PP chunks 8*PP and 16*PP "
    "(~90% and ~94% pipeline efficiency), micro batch 1 then 2; global batch derived",
}


def recipe_settings(
    name: str, spec_ref: str | Path, overrides: Sequence[str]
) -> tuple[list[str], list[Axis]]:
    """(``--set`` overrides, axes) of a tuning recipe applied to a spec; the user's own --set and
    --grid come after them and win."""
    if name not in RECIPES:
        raise LogstatError(f"--recipe {name!r} is unknown (recipes: {', '.join(RECIPES)})")
    base = load_spec(spec_ref, overrides)
    pp = base.cluster.nodes
    sets = [
        f"parallel.tp={base.cluster.gpus_per_node}",
        f"parallel.pp={pp}",
        "batch.global_batch=none",
    ]
    axes = [make_axis("batch.micro", ("1", "2")), make_axis("batch.gas", (str(8 * pp), str(16 * pp)))]
    return sets, axes


def assemble_grid(
    spec_path: Path,
    section: Mapping[str, Any],
    command_axes: Sequence[Axis],
    *,
    overrides: Sequence[str] = (),
    recipe: str | None = None,
) -> tuple[list[str], list[Axis]]:
    """The sweep's (recipe ``--set`` overrides, axes) from its three sources.

    For one field, later wins: the spec's ``[sweep.grid]``, the recipe, then ``--grid``. A user's
    ``--set`` fixes a field that the spec's grid or the recipe would vary (a ``--set`` and a
    ``--grid`` of one field is refused by :func:`plan_sweep`); a recipe's ``--set`` gives way to
    the user's and to any axis of its field.
    """
    refuse_repeated(command_axes)
    recipe_sets, recipe_axes = recipe_settings(recipe, spec_path, overrides) if recipe else ([], [])
    axes = merge_axes(merge_axes(section_axes(section, str(spec_path)), recipe_axes), command_axes)
    user_keys = {override.partition("=")[0].strip() for override in overrides}
    command_keys = {axis.key for axis in command_axes}
    axes = [axis for axis in axes if axis.key not in user_keys or axis.key in command_keys]
    axis_keys = {axis.key for axis in axes}
    sets = [text for text in recipe_sets if text.partition("=")[0] not in user_keys | axis_keys]
    return sets, axes


# --- planning --------------------------------------------------------------------------------


def plan_sweep(
    spec_ref: str | Path,
    axes: Sequence[Axis],
    *,
    overrides: Sequence[str] = (),
    min_pipeline_efficiency: float = DEFAULT_MIN_PIPELINE_EFFICIENCY,
    backend_check: Callable[[Spec], None] | None = None,
    recipe: str | None = None,
) -> SweepPlan:
    """Expand the grid over the base spec (with ``overrides``) and check every point.

    ``backend_check(spec)`` raises LogstatError when the chosen backend cannot run a point (the
    local backend's host limits); such points are pruned with rule ``backend``.
    """
    if not axes:
        raise LogstatError("a sweep needs at least one --grid section.field=v1,v2 (or a [sweep.grid] table)")
    refuse_repeated(axes)
    keys = [axis.key for axis in axes]
    set_keys = {override.partition("=")[0].strip() for override in overrides}
    both = sorted(set_keys & set(keys))
    if both:
        raise LogstatError(f"{both[0]} is both a --set and a --grid field: give it in one place")
    if not 0 <= min_pipeline_efficiency <= 1:
        raise LogstatError(f"--min-pipeline-efficiency {min_pipeline_efficiency} must be between 0 and 1")
    size = math.prod(len(axis.values) for axis in axes)
    if size > MAX_POINTS:
        raise LogstatError(
            f"the grid has {size:,} points ({' x '.join(str(len(a.values)) for a in axes)}), more than "
            f"{MAX_POINTS:,}: split the sweep"
        )
    spec_path = find_spec(spec_ref)
    base = load_spec(spec_path, overrides)
    points = []
    task = 0
    for index, values in enumerate(itertools.product(*(axis.values for axis in axes))):
        settings = tuple(zip(keys, values, strict=True))
        point = check_point(
            index,
            settings,
            spec_path,
            overrides,
            min_pipeline_efficiency=min_pipeline_efficiency,
            backend_check=backend_check,
        )
        if point.kept:
            point = dataclasses.replace(point, task=task)
            task += 1
        points.append(point)
    return SweepPlan(
        spec_path=spec_path,
        spec_name=base.name,
        stack=base.stack,
        overrides=tuple(overrides),
        axes=tuple(axes),
        min_pipeline_efficiency=min_pipeline_efficiency,
        points=tuple(points),
        recipe=recipe,
    )


def check_point(
    index: int,
    settings: tuple[tuple[str, str], ...],
    spec_path: Path,
    overrides: Sequence[str],
    *,
    min_pipeline_efficiency: float,
    backend_check: Callable[[Spec], None] | None = None,
) -> Point:
    """One grid point, kept or pruned with the first rule it breaks."""
    point = Point(index=index, settings=settings)
    try:
        spec = load_spec(spec_path, [*overrides, *point.overrides])
    except SpecError as exc:
        return dataclasses.replace(point, rule=RULE_REFUSED, reason=str(exc))
    point = dataclasses.replace(point, spec=spec)
    report = check(spec)
    if report.problems:
        return dataclasses.replace(point, rule=RULE_REFUSED, reason="; ".join(map(str, report.problems)))
    plan = estimate(spec)
    point = dataclasses.replace(point, plan=plan, warnings=tuple(report.warnings))
    too_big = memory_rule(spec, plan)
    if too_big:
        return dataclasses.replace(point, rule=RULE_MEMORY, reason=too_big)
    if spec.parallel.pp > 1 and plan.pipeline_efficiency < min_pipeline_efficiency:
        reason = (
            f"pipeline efficiency gas/(gas+PP-1) = {spec.batch.gas}/({spec.batch.gas}+{spec.parallel.pp}-1) "
            f"= {plan.pipeline_efficiency:.1%} < {min_pipeline_efficiency:.0%} (--min-pipeline-efficiency)"
        )
        return dataclasses.replace(point, rule=RULE_PIPELINE, reason=reason)
    if backend_check is not None:
        try:
            backend_check(spec)
        except LogstatError as exc:
            return dataclasses.replace(point, rule=RULE_BACKEND, reason=str(exc))
    return point


def memory_rule(spec: Spec, plan: Estimate) -> str | None:
    """Why the point does not fit in its GPU's memory by the estimate, or None (also when the spec
    names no GPU model: nothing to compare with)."""
    gpu = GPUS.get(spec.cluster.gpu_model or "")
    if gpu is None or not spec.cluster.use_gpus:
        return None
    if plan.model_state_gib_per_gpu <= gpu.memory_gib:
        return None
    return (
        f"model states {plan.model_state_gib_per_gpu:.1f} GiB per GPU by the estimate "
        f"(ZeRO {spec.train.zero_stage}, TP*PP {spec.parallel.tp * spec.parallel.pp}, DP {spec.dp}) "
        f"> the {gpu.name}'s {gpu.memory_gib:g} GiB"
    )


# --- the plan as text ------------------------------------------------------------------------


def format_plan(plan: SweepPlan) -> str:
    """The plan: a few ``#`` lines, one row per point (kept ones with their task id), the
    pruned points' rules and the kept points' warnings."""
    kept, pruned = plan.kept, plan.pruned
    sizes = " x ".join(str(len(axis.values)) for axis in plan.axes)
    lines = [
        f"# sweep {plan.spec_name} ({plan.stack}): {sizes} = {len(plan.points)} points, "
        f"{len(kept)} kept, {len(pruned)} pruned",
        f"# base: {_shown_path(plan.spec_path)}" + "".join(f" --set {o}" for o in plan.overrides),
    ]
    if plan.recipe:
        lines.append(f"# recipe {plan.recipe}: {RECIPES[plan.recipe]}")
    lines += [f"# grid: {axis.key} = {', '.join(axis.values)}" for axis in plan.axes]
    lines.append(
        "# pruned when: the spec checks of `logstat run` refuse it; its model states exceed the GPU's "
        "memory (estimate, before activations); pipeline efficiency gas/(gas+PP-1) < "
        f"{plan.min_pipeline_efficiency:.0%}"
    )
    lines += ["", *_plan_table(plan)]
    notes = [f"# point {p.index}: warning: {w}" for p in kept for w in p.warnings]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _plan_table(plan: SweepPlan) -> list[str]:
    assumed = any(p.plan is not None and p.plan.sec_per_iter is not None for p in plan.points)
    headers = ["point", "task", *[axis.key for axis in plan.axes], "GPUs", "TP", "PP", "DP", "Glob-BS"]
    headers += ["mem/GPU", "pipe eff"] + (["est s/iter"] if assumed else []) + ["plan"]
    rows = []
    for point in plan.points:
        spec, est = point.spec, point.plan
        row = [str(point.index), "-" if point.task is None else str(point.task)]
        row += [value for _, value in point.settings]
        if spec is not None:
            row += [str(spec.world_size), str(spec.parallel.tp), str(spec.parallel.pp)]
            row += [_text(spec.dp), _text(spec.batch.global_batch)]
        else:
            row += ["-"] * 5
        row += [_memory(est.model_state_gib_per_gpu), f"{est.pipeline_efficiency:.1%}"] if est else ["-", "-"]
        if assumed:
            row.append(f"{est.sec_per_iter:.0f}" if est and est.sec_per_iter is not None else "-")
        row.append("kept" if point.kept else f"pruned ({point.rule}): {point.reason}")
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:-1])]

    def line(cells: list[str]) -> str:
        return (
            "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=False)) + "  " + cells[-1]
        ).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _shown_path(path: Path) -> str:
    """A path relative to the working directory when it is under it (shorter, and the same on
    every checkout), else absolute."""
    try:
        return str(Path(path).absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _memory(gib: float) -> str:
    return f"{gib:.1f} GiB" if gib >= 1 else f"{gib * 1024:.1f} MiB"


def _text(value: object) -> str:
    return "-" if value is None else str(value)


# --- the sweep directory ---------------------------------------------------------------------


def sweep_dir_path(runs_root: Path, spec_name: str, *, now: datetime | None = None) -> Path:
    """``<root>/<spec-name>/sweep-<YYYYmmddTHHMMSSZ>-<6 hex>`` (absolute)."""
    stamp = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(runs_root).absolute() / spec_name / f"sweep-{stamp}-{secrets.token_hex(3)}"


def task_width(plan: SweepPlan) -> int:
    """Digits of the run directory names (``00``...): Slurm pads ``%Na`` to this width too."""
    return max(2, len(str(max(len(plan.kept) - 1, 0))))


def point_dir_name(task: int, width: int) -> str:
    return f"{task:0{width}d}"


def plan_record(plan: SweepPlan, *, backend: str) -> dict[str, Any]:
    """sweep.json: the plan, every point (pruned ones with their rule), filled in at launch."""
    from logstat.runners.manifest import utc_now

    width = task_width(plan)
    return {
        "sweep_version": SWEEP_VERSION,
        "created_utc": utc_now(),
        "backend": backend,
        "spec_path": str(plan.spec_path),
        "spec_name": plan.spec_name,
        "stack": plan.stack,
        "overrides": list(plan.overrides),
        "recipe": plan.recipe,
        "grid": {axis.key: list(axis.values) for axis in plan.axes},
        "min_pipeline_efficiency": plan.min_pipeline_efficiency,
        "points": [
            {
                "index": point.index,
                "settings": dict(point.settings),
                "values": point_values(point),
                "task": point.task,
                "dir": None if point.task is None else point_dir_name(point.task, width),
                "rule": point.rule,
                "reason": point.reason,
                "warnings": list(point.warnings),
                "world_size": point.spec.world_size if point.spec else None,
                "dp": point.spec.dp if point.spec else None,
                "global_batch": point.spec.batch.global_batch if point.spec else None,
                "params": point.plan.params if point.plan else None,
            }
            for point in plan.points
        ],
        "arrays": [],
    }


def point_values(point: Point) -> dict[str, Any]:
    """The resolved value of every swept field (typed), e.g. a ``none`` global batch as derived."""
    values: dict[str, Any] = {}
    for key, text in point.settings:
        section, _, name = key.rpartition(".")
        if point.spec is not None:
            values[key] = getattr(getattr(point.spec, section) if section else point.spec, name)
        else:  # typed as the field types it, without a spec
            scratch: dict[str, Any] = {}
            apply_override(scratch, f"{key}={text}")
            values[key] = (scratch.get(section, {}) if section else scratch).get(name)
    return values


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    """sweep.json of a sweep directory, checked enough that status, cancel and table can trust it."""
    path = Path(sweep_dir) / SWEEP_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LogstatError(f"cannot read {path}: {exc}") from exc
    if not isinstance(record, dict) or not isinstance(record.get("points"), list):
        raise LogstatError(f"{path} is not a sweep record (no list of points)")
    for point in record["points"]:
        if not isinstance(point, dict) or not isinstance(point.get("settings"), dict):
            raise LogstatError(f"{path}: a point is not an object with settings")
        name = point.get("dir")
        if name is not None and (not isinstance(name, str) or not name.isdigit()):
            raise LogstatError(f"{path}: point dir {name!r} is not a task number")
    return record


def find_sweep_dirs(root: Path) -> list[Path]:
    """Sweep directories under ``root`` (``runs/<spec>/sweep-*/``) that submitted a job array or ran locally
    (a sweep.json is written at launch only)."""
    found = []
    for path in sorted(Path(root).glob(f"*/*/{SWEEP_FILE}")):
        try:
            record = read_sweep(path.parent)
            if record.get("arrays") or record.get("backend") == "local":
                found.append(path.parent)
        except LogstatError:
            continue  # an unreadable sweep.json is reported when named explicitly, not when scanning
    return found


def is_sweep_dir(path: Path) -> bool:
    return (Path(path) / SWEEP_FILE).is_file()


def write_record(sweep_dir: Path, record: dict[str, Any], *, replace: bool) -> None:
    text = json.dumps(record, indent=2, default=str) + "\n"
    atomic_write_text(Path(sweep_dir) / SWEEP_FILE, text, replace=replace)


# --- launching -------------------------------------------------------------------------------


def backend_check_for(backend: str) -> Callable[[Spec], None] | None:
    """What the backend refuses per point before anything is created (its preflight, the stack's
    launch check); None for a dry run."""
    if backend == "dry-run":
        return None
    from logstat.runners.backends import preflight
    from logstat.runners.render import render
    from logstat.runners.stacks import get_stack

    def refuse(spec: Spec) -> None:
        preflight(backend, render(spec, Path("preflight")))
        get_stack(spec.stack).launch_check(spec)

    return refuse


def nothing_kept_message(plan: SweepPlan) -> str:
    """Why a sweep has nothing to launch: how many points each rule pruned, and the first reason."""
    counts: dict[str, int] = {}
    for point in plan.pruned:
        counts[point.rule or ""] = counts.get(point.rule or "", 0) + 1
    rules = ", ".join(f"{n} {rule}" for rule, n in counts.items())
    first = plan.pruned[0] if plan.pruned else None
    example = f"; point {first.index}: {first.reason}" if first else ""
    return f"every point of the sweep is pruned ({rules}): nothing to launch (--dry-run shows each rule){example}"


def create_sweep(plan: SweepPlan, *, backend: str, runs_root: Path, python: str | None = None):
    """Create the sweep directory: sweep.json, plan.txt and a run directory per kept point.

    Under Slurm every point gets its own rendezvous port (cluster.master_port + task id): array
    tasks may share a node. Returns (sweep directory, the rendered runs in task order).
    """
    from logstat.runners.backends import planned_command
    from logstat.runners.manifest import build_manifest
    from logstat.runners.render import render

    kept = plan.kept
    if not kept:
        raise LogstatError(nothing_kept_message(plan))
    ports = {point.task: _point_port(point, backend) for point in kept}
    _refuse_ports(ports)
    sweep_dir = sweep_dir_path(runs_root, plan.spec_name)
    make_parents(sweep_dir)
    try:
        sweep_dir.mkdir()
    except FileExistsError:
        raise LogstatError(f"sweep directory {sweep_dir} exists: sweeps are never overwritten") from None
    write_record(sweep_dir, plan_record(plan, backend=backend), replace=False)
    atomic_write_text(sweep_dir / PLAN_FILE, format_plan(plan))
    width = task_width(plan)
    runs = []
    for point in kept:
        assert point.spec is not None and point.task is not None
        spec = point.spec
        port = ports[point.task]
        spec = dataclasses.replace(spec, cluster=dataclasses.replace(spec.cluster, master_port=port))
        run = render(
            spec, sweep_dir / point_dir_name(point.task, width), python=python, warnings=point.warnings
        )
        manifest = build_manifest(run, backend=backend, command=planned_command(backend, run))
        manifest["sweep"] = {"dir": str(sweep_dir), "task": point.task, "settings": dict(point.settings)}
        create_run_dir(run, manifest)
        runs.append(run)
    return sweep_dir, runs


def _point_port(point: Point, backend: str) -> int:
    """The point's rendezvous port: under Slurm its spec's plus its task id (array tasks may share a node),
    unless the grid sets the port itself."""
    assert point.spec is not None and point.task is not None
    port = point.spec.cluster.master_port
    if backend == "slurm" and "cluster.master_port" not in dict(point.settings):
        port += point.task
    return port


def _refuse_ports(ports: Mapping[int, int]) -> None:
    """Refuse, before anything is created, a sweep whose task offsets push a port past 65535."""
    for task, port in ports.items():
        if port > 65535:
            raise LogstatError(
                f"cluster.master_port={port - task} + task {task} = {port} is not a TCP port (1-65535): under "
                f"Slurm each point of a sweep listens on cluster.master_port + its task id; set "
                f"cluster.master_port to at most {65535 - max(ports)}"
            )


def launch_local(runs: Sequence[Any], *, echo: Callable[[str], None]) -> list[int]:
    """Run the points one after another (the local backend); their exit codes. A failed point
    does not stop the sweep: the next one runs, and the table shows it as failed."""
    from logstat.runners.backends import local

    codes = []
    for number, run in enumerate(runs, start=1):
        echo(f"point {number}/{len(runs)}: {run.run_dir}")
        result = local.launch(run, echo=lambda line: None)
        echo(f"point {number}/{len(runs)}: {result.message}")
        codes.append(result.exit_code if result.exit_code is not None else 1)
    return codes


def array_ranges(tasks: Sequence[int]) -> str:
    """Slurm's ``--array`` index list: ``0-3`` or ``0-1,4-5`` (sorted, runs of consecutive ids joined)."""
    parts = []
    ordered = sorted(tasks)
    for _, group in itertools.groupby(enumerate(ordered), key=lambda pair: pair[1] - pair[0]):
        ids = [task for _, task in group]
        parts.append(str(ids[0]) if len(ids) == 1 else f"{ids[0]}-{ids[-1]}")
    return ",".join(parts)


def array_scripts(
    sweep_dir: Path, runs: Sequence[Any], *, width: int, max_parallel: int | None
) -> list[tuple[str, list[int]]]:
    """The job array scripts: one per distinct resource request (a job array asks the same nodes,
    GPUs and time of every task), usually one. Task N runs point N's own run.sbatch; its output
    goes to ``<sweep>/<N>/slurm-<array job>_<N>.out`` (sbatch's ``%A``, ``%a``)."""
    import shlex

    from logstat.runners.render import sbatch_header

    groups: dict[tuple[str, ...], list[Any]] = {}
    for run in runs:
        header = tuple(line for line in sbatch_header(run) if not line.startswith("#SBATCH --output="))
        groups.setdefault(header, []).append(run)
    output = str(sweep_dir).replace("%", "%%") + f"/%{width}a/slurm-%A_%a.out"
    scripts = []
    for header, members in groups.items():
        tasks = [int(run.run_dir.name) for run in members]
        throttle = f"%{max_parallel}" if max_parallel else ""
        lines = ["#!/bin/bash", *header]
        lines += [
            f"#SBATCH --array={array_ranges(tasks)}{throttle}",
            f"#SBATCH --output={shlex.quote(output)}",
        ]
        lines += [
            "",
            "# Rendered by logstat sweep: array task N runs the sweep's point N, the run directory N/",
            "# beside this script (its own run.sbatch, spec.toml and manifest.json).",
            "set -euo pipefail",
            'case "$SLURM_ARRAY_TASK_ID" in',
        ]
        lines += [
            f"  {int(run.run_dir.name)}) exec bash {shlex.quote(str(run.script_path))} ;;" for run in members
        ]
        lines += [
            '  *) echo "logstat sweep: no point for array task $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
            "esac",
        ]
        scripts.append(("\n".join(lines) + "\n", tasks))
    return scripts


def submit_arrays(
    sweep_dir: Path, runs: Sequence[Any], *, width: int, max_parallel: int | None
) -> list[dict[str, Any]]:
    """Write and ``sbatch --parsable`` the array script(s); record the array job id in sweep.json
    and ``<array id>_<task>`` as every point's ``slurm_job_id``."""
    from logstat.runners.backends.slurm import sbatch_command, submit_script
    from logstat.runners.manifest import update_manifest, utc_now

    scripts = array_scripts(sweep_dir, runs, width=width, max_parallel=max_parallel)
    record = read_sweep(sweep_dir)
    by_task = {int(run.run_dir.name): run for run in runs}
    for number, (script, tasks) in enumerate(scripts):
        name = ARRAY_SCRIPT if len(scripts) == 1 else f"sweep-{number}.sbatch"
        path = sweep_dir / name
        atomic_write_text(path, script, mode=0o755)
        job_id = submit_script(path, cwd=sweep_dir)
        for task in tasks:
            update_manifest(
                by_task[task].run_dir,
                slurm_job_id=f"{job_id}_{task}",
                slurm_array_job_id=job_id,
                slurm_submitted_utc=utc_now(),
                command=sbatch_command(path),
            )
        record["arrays"].append({"job_id": job_id, "script": name, "tasks": tasks})
        write_record(sweep_dir, record, replace=True)
    return record["arrays"]


# --- status ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PointStatus:
    """One point of a sweep as ``logstat status SWEEP_DIR`` shows it."""

    point: int
    task: int | None
    settings: dict[str, Any]
    state: str
    job_id: str | None = None
    exit_code: int | None = None
    run_time: str | None = None
    reason: str | None = None
    source: str = "sweep.json"
    run_dir: Path | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "point": self.point,
            "task": self.task,
            "settings": " ".join(f"{k}={v}" for k, v in self.settings.items()),
            "state": self.state,
            "job_id": self.job_id,
            "exit_code": self.exit_code,
            "run_time": self.run_time,
            "reason": self.reason,
            "source": self.source,
            "run_dir": str(self.run_dir) if self.run_dir else None,
        }


def sweep_status(sweep_dir: Path) -> list[PointStatus]:
    """Every point's state: PRUNED (with its rule), then for a launched point Slurm's view (live,
    else as recorded) or, for a local sweep, what its manifest says."""
    from logstat.runners.backends.slurm import run_status
    from logstat.runners.manifest import read_manifest

    sweep_dir = Path(sweep_dir)
    record = read_sweep(sweep_dir)
    out = []
    for point in record["points"]:
        common = {"point": point.get("index"), "task": point.get("task"), "settings": point["settings"]}
        if point.get("dir") is None:
            out.append(
                PointStatus(**common, state="PRUNED", reason=f"{point.get('rule')}: {point.get('reason')}")
            )
            continue
        run_dir = sweep_dir / point["dir"]
        try:
            manifest = read_manifest(run_dir)
        except LogstatError as exc:
            out.append(PointStatus(**common, state="UNKNOWN", reason=str(exc), run_dir=run_dir))
            continue
        if manifest.get("slurm_job_id"):
            status = run_status(run_dir)
            out.append(
                PointStatus(
                    **common,
                    state=status.state,
                    job_id=status.job_id,
                    exit_code=status.exit_code,
                    run_time=status.run_time,
                    reason=status.reason,
                    source=status.source,
                    run_dir=run_dir,
                )
            )
        else:
            state, reason = _jobless_point_state(run_dir, manifest)
            out.append(
                PointStatus(
                    **common,
                    state=state,
                    exit_code=manifest.get("exit_code"),
                    reason=reason,
                    source="manifest",
                    run_dir=run_dir,
                )
            )
    return out


def _jobless_point_state(run_dir: Path, manifest: Mapping[str, Any]) -> tuple[str, str | None]:
    """A point without a Slurm job: a Slurm point whose submission failed, else a local point, whose
    state the local backend reads from its manifest as `logstat status RUN_DIR` does."""
    from logstat.runners.backends.local import recorded_state

    if manifest.get("exit_code") is None and manifest.get("slurm_submit_error"):
        return "NOT_SUBMITTED", None
    return recorded_state(run_dir, manifest)


def wait_sweep(
    sweep_dir: Path,
    *,
    echo: Callable[[str], None],
    poll_interval_s: float = 2.0,
    timeout_s: float | None = None,
) -> list[PointStatus]:
    """Follow a Slurm sweep until every launched point has ended; record each final state in the
    point's manifest (Slurm forgets ended jobs after MinJobAge)."""
    import time

    from logstat.runners.backends.slurm import FINAL_STATES
    from logstat.runners.manifest import update_manifest, utc_now

    start = time.monotonic()
    last = ""
    while True:
        statuses = [s for s in sweep_status(sweep_dir) if s.state != "PRUNED"]
        counts: dict[str, int] = {}
        for status in statuses:
            counts[status.state] = counts.get(status.state, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        if summary != last:
            echo(f"sweep {sweep_dir.name}: {summary}")
            last = summary
        if all(s.state in FINAL_STATES or s.source in ("manifest", "none") for s in statuses):
            for status in statuses:
                if status.source in ("scontrol", "squeue") and status.run_dir is not None:
                    update_manifest(
                        status.run_dir,
                        slurm_state=status.state,
                        slurm_reason=status.reason,
                        exit_code=status.exit_code,
                        slurm_ended_utc=utc_now(),
                    )
            return statuses
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            raise LogstatError(f"sweep {sweep_dir}: not ended after {timeout_s:.0f} s ({summary})")
        time.sleep(poll_interval_s)


def cancel_sweep(sweep_dir: Path) -> list[str]:
    """``scancel`` every job array of the sweep; the array job ids."""
    from logstat.runners.backends.slurm import cancel_job

    sweep_dir = Path(sweep_dir)
    record = read_sweep(sweep_dir)
    arrays = record.get("arrays") or []
    if not arrays:
        raise LogstatError(
            f"{sweep_dir}: no Slurm job array in sweep.json (backend {record.get('backend')!r}; a local "
            "sweep runs in the foreground: interrupt it with Ctrl-C)"
        )
    cancelled = []
    for array in arrays:
        job_id = str(array.get("job_id", ""))
        if not job_id.isdigit():
            raise LogstatError(f"{sweep_dir}/sweep.json: array job id {job_id!r} is not a Slurm job id")
        cancel_job(job_id)
        cancelled.append(job_id)
    return cancelled

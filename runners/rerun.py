"""Rerun a run: from its run directory (or text naming it, as a table row's Notes do) back to a
launch of the same resolved spec, with ``--set`` overrides validated as ``logstat run`` validates
them, into a new run directory whose manifest says which run it reruns.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from logstat.runners.backends import LaunchResult, launch_spec, stderr_echo
from logstat.runners.manifest import read_manifest
from logstat.runners.render import SPEC_NAME
from logstat.runners.rundir import RUNS_ROOT
from logstat.runners.spec import DERIVED_FROM, build_spec, dotted_items

from logstat.errors import LogstatError

#: Words of a reference: spec names and run ids are plain names (runners.validate's rule).
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def find_run(reference: str, runs_root: Path = RUNS_ROOT) -> Path:
    """The run directory ``reference`` names: its path (or a file in it), or text holding the spec name
    and the run id (``<UTC time>-<short id>`` or the short id), e.g. a table row whose Notes name the
    run; a run id alone is enough when only one run has it. LogstatError when none or several match."""
    path = Path(reference)
    for directory in (path, path.parent):
        if directory.is_dir() and (directory / SPEC_NAME).is_file() and (path.is_dir() or path.is_file()):
            return directory.absolute()
    if path.is_dir():
        raise LogstatError(f"{reference}: not a run directory (no {SPEC_NAME})")
    root = Path(runs_root)
    if not root.is_dir():
        raise LogstatError(
            f"{reference!r} is not a run directory, and there is no runs root {root}/ to look in"
        )
    words = set(_WORD.findall(reference))
    named, by_id = [], []
    for run_dir in sorted(root.glob(f"*/*/{SPEC_NAME}")):
        run_dir = run_dir.parent
        spec_name, run_id = run_dir.parent.name, run_dir.name
        ids = {run_id, run_id.rsplit("-", 1)[-1]}
        if (spec_name in words and ids & words) or {f"{spec_name}-{i}" for i in ids} & words:
            named.append(run_dir)
        elif ids & words:
            by_id.append(run_dir)
    # a spec name in the reference restricts the runs to that spec's, even when none matches
    spec_named = any(p.name in words for p in root.iterdir() if p.is_dir())
    found = named if spec_named or named else by_id
    if not found:
        raise LogstatError(
            f"no run under {root}/ matches {reference!r} (give a run directory, or the spec name and run id)"
        )
    if len(found) > 1:
        listed = ", ".join(str(p.relative_to(root)) for p in found[:5])
        raise LogstatError(f"{reference!r} matches {len(found)} runs under {root}/: {listed}; name one")
    return found[0].absolute()


def rerun(
    reference: str,
    *,
    backend: str | None = None,
    overrides: tuple[str, ...] | list[str] = (),
    wait: bool = False,
    runs_root: Path | None = None,
    echo: Callable[[str], None] = stderr_echo,
) -> LaunchResult:
    """Launch again the resolved spec saved in the run ``reference`` names (:func:`find_run`), on
    ``backend`` (default: the backend that ran it), with ``overrides``; a new run directory."""
    root = runs_root or RUNS_ROOT
    original = find_run(reference, root)
    if backend is None:
        recorded = read_manifest(original).get("backend")
        if not isinstance(recorded, str):
            raise LogstatError(f"{original}: its manifest names no backend; give --backend")
        backend = recorded
    echo(f"rerun of {original}")
    raw = saved_spec(original)
    for derived in rederived(raw, overrides):
        echo(f"{derived} is derived again: the --set changes what it was derived from")
    spec = build_spec(raw, overrides, source=str(original / SPEC_NAME))
    return launch_spec(
        spec,
        backend=backend,
        wait=wait,
        runs_root=root,
        echo=echo,
        reruns=original,
    )


def saved_spec(run_dir: Path) -> dict[str, Any]:
    """The run's spec.toml as a raw spec; LogstatError when it was edited since the run (it then differs
    from the spec its manifest says ran): a rerun launches what ran, and says so in its manifest."""
    path = run_dir / SPEC_NAME
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LogstatError(f"cannot read {path}: {exc}") from exc
    ran = read_manifest(run_dir).get("spec")
    if isinstance(ran, dict):
        now, then = dict(dotted_items(raw)), dict(dotted_items(ran))
        edits = [
            f"{key} {then.get(key)!r} -> {now.get(key)!r}"
            for key in sorted(now.keys() | then.keys())
            if now.get(key) != then.get(key)
        ]
        if edits:
            raise LogstatError(
                f"{path} was edited since the run ({'; '.join(edits)}): a rerun launches what ran "
                f"(manifest.json's spec); give the change as --set, or launch the edited file with "
                f"`logstat run {path}`"
            )
    return raw


def rederived(raw: dict[str, Any], overrides: Iterable[str]) -> list[str]:
    """Drop from ``raw`` the derived fields ``overrides`` change the inputs of (and do not set
    themselves), so that resolving derives them again; their names."""
    touched = {override.partition("=")[0].strip() for override in overrides}
    dropped = []
    for derived, inputs in DERIVED_FROM.items():
        section, _, name = derived.rpartition(".")
        if derived in touched or not touched & set(inputs) or name not in raw.get(section, {}):
            continue
        if (
            derived.startswith("model.")
            and "preset" not in raw.get("model", {})
            and "model.preset" not in touched
        ):
            continue
        del raw[section][name]
        dropped.append(derived)
    return dropped

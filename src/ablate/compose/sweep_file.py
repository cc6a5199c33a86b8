"""Sweep files as written: a sweep file (or a recipe, as a one-arm sweep) read, checked and folded together with the
command line's overrides into a `SweepSpec`, before anything is composed (the format: recipes/loss.yaml; the
expansion into runs: ablate.compose.sweep).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.compose import destinations as choice
from ablate.compose.overrides import check_runs, override_key, parse_overrides, sweep_size
from ablate.compose.safe_yaml import load_yaml
from ablate.config.sections import SEED_MAX
from ablate.config.validation import closest
from ablate.errors import ErrorKind, UserError

SWEEP_KEYS = ("base", "baseline", "seeds", "grid", "runs", "overrides")


_PLAIN = re.compile(r"[\w./:+-]+")


def _yaml_value_text(v: Any) -> str:
    """A value read from a sweep file's YAML as Hydra override text (strings quoted unless plain)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, list):
        return "[" + ",".join(_yaml_value_text(x) for x in v) + "]"
    if isinstance(v, str) and _PLAIN.fullmatch(v):
        return v
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise UserError(
        f"grid value {v!r}: use a number, a string, a boolean, null or a list of those", kind=ErrorKind.RECIPE
    )


def _grid_strings(grid: Any, where: str) -> list[str]:
    """A sweep file's `grid` as Hydra sweep strings: {key: [values]} or ["key=a,b", ...]."""
    if grid is None:
        return []
    if isinstance(grid, dict):
        out = []
        for k, given in grid.items():
            vals = given if isinstance(given, list) else [given]
            if not vals:
                raise UserError(f"{where}: grid axis {k!r} has no values", kind=ErrorKind.RECIPE)
            out.append(f"{k}={','.join(_yaml_value_text(v) for v in vals)}")
        return out
    if isinstance(grid, list) and all(isinstance(g, str) for g in grid):
        return list(grid)
    raise UserError(
        f"{where}: `grid` must be a mapping {{key: [values]}} or a list of 'key=a,b' strings", kind=ErrorKind.RECIPE
    )


def _runs(runs: Any, where: str) -> list[tuple[str | None, list[str]]]:
    """A sweep file's `runs` as (label or None, overrides)."""
    if runs is None or runs == []:
        return []
    if not isinstance(runs, list):
        raise UserError(
            f"{where}: `runs` must be a list of override lists or {{label, overrides}} mappings", kind=ErrorKind.RECIPE
        )
    out: list[tuple[str | None, list[str]]] = []
    for i, r in enumerate(runs):
        if isinstance(r, list) and all(isinstance(x, str) for x in r):
            out.append((None, list(r)))
        elif isinstance(r, dict) and set(r) <= {"label", "overrides"} and isinstance(r.get("overrides", []), list):
            label = r.get("label")
            if label is not None and (not isinstance(label, str) or not re.fullmatch(r"[\w.=:+-]+", label)):
                raise UserError(
                    f"{where}: runs[{i}].label {label!r}: use letters, digits and . _ - = : + (no commas)",
                    kind=ErrorKind.RECIPE,
                )
            out.append((label, [str(x) for x in r.get("overrides", [])]))
        else:
            raise UserError(
                f"{where}: runs[{i}] must be a list of overrides or {{label: name, overrides: [...]}}, got {r!r}",
                kind=ErrorKind.RECIPE,
            )
    return out


def _seeds(values: Any, where: str) -> list[int]:
    vals = values if isinstance(values, list) else [values]
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= SEED_MAX]
    if bad or not vals:
        raise UserError(
            f"{where}: seeds must be integers in [0, {SEED_MAX}], got {values!r}; e.g. seeds: [0, 1] or seed=0,1,2",
            kind=ErrorKind.RECIPE,
        )
    if len(set(vals)) != len(vals):
        raise UserError(f"{where}: repeated seed in {values!r}", kind=ErrorKind.RECIPE)
    return list(vals)


@dataclass
class SweepSpec:
    """A sweep file with the command line folded in, before composition."""

    recipes_dir: Path
    base: str
    seeds: list[int]
    baseline: str | None
    axes: dict[str, Any]  # grid key -> Hydra Override (a sweep or a single value)
    runs: list[tuple[str | None, list[str]]]  # explicit arms: (label, overrides)
    const_file: list[tuple[str, str]]  # (override, key) from the file's `overrides`
    const_cli: list[tuple[str, str]]  # (override, key) from the command line
    cli: bool  # the command line changed anything


def _single_values(data: dict[str, Any], where: str) -> tuple[list[str], list[Any], list[tuple[str | None, list[str]]]]:
    """The file's `overrides` (as written, and parsed) and its explicit `runs`: single values only (a sweep of
    values belongs under `grid`)."""
    const_file = data.get("overrides") or []
    if not isinstance(const_file, list):
        raise UserError(f"{where}: `overrides` must be a list of 'key=value' strings", kind=ErrorKind.RECIPE)
    const_file = [str(x) for x in const_file]
    parsed = parse_overrides(const_file, f"{where} overrides")
    for o in parsed:
        if o.is_sweep_override():
            raise UserError(
                f"{where}: overrides: {o.input_line!r} is a sweep; put it under `grid`", kind=ErrorKind.RECIPE
            )
    runs = _runs(data.get("runs"), where) or [(None, [])]
    for _, ovs in runs:
        for o in parse_overrides(ovs, f"{where} runs"):
            if o.is_sweep_override():
                raise UserError(
                    f"{where}: runs: {o.input_line!r} is a sweep; an explicit run takes single values",
                    kind=ErrorKind.RECIPE,
                )
    return const_file, parsed, runs


def read_sweep(path: Path, overrides: Sequence[str]) -> SweepSpec:
    """Parse a sweep file (or a recipe, as a one-arm sweep) and fold the command-line overrides into it."""
    data = load_yaml(path)
    where = str(path)
    if "defaults" in data:  # a recipe: one arm, its own seed
        data = {"base": path.stem, "seeds": [data.get("seed", 0)]}
    elif not data:
        raise UserError(
            f"{where}: an empty sweep file; name its base recipe and the axes to vary "
            "(e.g. `base: base` and `grid: {{loss: [grpo, dapo]}}`; see recipes/loss.yaml)",
            kind=ErrorKind.RECIPE,
        )
    unknown = [k for k in data if k not in SWEEP_KEYS]
    if unknown:
        k = unknown[0]
        raise UserError(
            f"{where}: unknown sweep key {k!r}{closest(str(k), SWEEP_KEYS)}; sweep keys: {', '.join(SWEEP_KEYS)}",
            kind=ErrorKind.RECIPE,
        )
    base = data.get("base", "base")
    # `base: base` names a recipe beside the sweep file; `base: ../recipes/base.yaml` a recipe elsewhere
    base_path = path.parent / (base if str(base).endswith(".yaml") else f"{base}.yaml")
    if not isinstance(base, str) or not base_path.is_file():
        raise UserError(f"{where}: base recipe {base!r} not found as {base_path}", kind=ErrorKind.RECIPE)
    seeds = _seeds(data.get("seeds", [0]), where)
    const_file, parsed, runs = _single_values(data, where)

    # grid axes: the file's, then the command line's sweep values replace or extend them
    axes: dict[str, Any] = {}
    for o in parse_overrides(_grid_strings(data.get("grid"), where), f"{where} grid"):
        if override_key(o) == "seed":
            raise UserError(
                f"{where}: grid axis 'seed': seeds are their own axis; use `seeds: [...]`", kind=ErrorKind.RECIPE
            )
        if o.is_sweep_override():
            sweep_size(o)  # an interval or glob, an empty range: one line naming the axis
        axes[override_key(o)] = o
    file_overrides = [*parsed, *(o for _, ovs in runs for o in parse_overrides(ovs, where)), *axes.values()]
    problem = choice.file_problem(file_overrides, where)
    if problem:  # trackers are the command line's choice (ablate.compose.destinations)
        raise UserError(problem, kind=ErrorKind.RECIPE)
    const_cli: list[tuple[str, str]] = []
    for o in parse_overrides(list(overrides), "command line"):
        k = override_key(o)
        if o.is_sweep_override():  # only sweeps that expand to a list of runs (a,b / range / choice), counted
            check_runs(sweep_size(o), o.input_line)
        if k == "seed":
            seeds = _seeds(
                list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()], f"command line {o.input_line!r}"
            )
        elif o.is_sweep_override() or k in axes:
            axes[k] = o
        else:
            const_cli.append((o.input_line, k))
    return SweepSpec(
        recipes_dir=base_path.parent,
        base=base_path.stem,
        seeds=seeds,
        baseline=data.get("baseline"),
        axes=axes,
        runs=runs,
        const_file=[(c, override_key(o)) for c, o in zip(const_file, parsed)],
        const_cli=const_cli,
        cli=bool(overrides),
    )

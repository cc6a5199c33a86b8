"""Sweeps: expand a sweep file into validated RunSpecs; nothing is launched here.

    load_sweep(sweep_file, overrides) -> Sweep   every run of a sweep, validated as a whole
    plan_table(sweep) -> rich Table              what `ablate sweep --dry-run` prints

A sweep file (see recipes/loss.yaml for the commented format) names a base recipe, grid axes, explicit runs
(leave-one-out), seeds, constant overrides and a baseline arm. Arms = runs x grid product; runs = arms x seeds.
Values use Hydra's override grammar, expanded with Hydra's own parser (`a,b,c`, `range(...)`, `choice(...)`),
so the command line works like `--multirun`:

    ablate sweep recipes/loss.yaml seed=0,1,2 loss.eps_max=4

- `seed=...` replaces the file's seeds (seeds are their own axis, so that an arm is "every seed of one config");
- another sweep-valued override adds a grid axis, or replaces the file's axis of the same key; a single value
  for a grid key narrows that axis to it (`ablate show recipes/loss.yaml loss=dapo`);
- the other overrides apply to every run, after the arm's own. A constant override of a parameter that only
  some arms' options have (`loss.eps_max` exists for cispo, not dapo) applies to the arms that have it, and the
  plan says which; one that no arm has is an error. Overrides that an arm names itself (grid, runs) must apply.

Every expanded config is validated (`config.validate`) before the sweep is returned; all problems of all runs
are collected and raised as one `ConfigErrors`, one line each. Run and arm ids come from ablate.identity.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ablate import config as schema
from ablate.compose import (ComposeError, Composer, check_runs, hydra_context, load_yaml, override_key,
                            parse_overrides, sweep_size, sweep_values, value_text)
from ablate.config import ConfigErrors, RunConfig, closest
from ablate.errors import UserError
from ablate.identity import arm_id, canonical_value, check_name, run_id
from ablate.spec import RunSpec
from ablate.text import safe

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
"""The shipped recipes (a source checkout / editable install)."""

SWEEP_KEYS = ("base", "baseline", "seeds", "grid", "runs", "overrides")


@dataclass
class Sweep:
    """A sweep file expanded into validated runs. `runs` are ordered arm by arm, seeds innermost."""

    name: str
    path: Path
    baseline: str | None
    """The baseline arm's label (`RunSpec.arm_label`), or None when the sweep has none (or it was overridden away)."""
    seeds: list[int]
    runs: list[RunSpec]
    base: str = "base"
    constants: list[str] = field(default_factory=list)
    """Overrides applied to every run (the file's `overrides` then the command line's non-sweep ones)."""
    notes: list[str] = field(default_factory=list)
    """What the user should know about the expansion (constants that apply to some arms only, ...)."""
    diffs: dict[str, list[str]] = field(default_factory=dict)
    """run_id -> the run's overrides whose target differs from the base recipe (the plan's last column)."""

    @property
    def arms(self) -> list[str]:
        """Arm labels in order, each once."""
        return list(dict.fromkeys(r.arm_label for r in self.runs))


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
    raise UserError(f"grid value {v!r}: use a number, a string, a boolean, null or a list of those")


def _grid_strings(grid: Any, where: str) -> list[str]:
    """A sweep file's `grid` as Hydra sweep strings: {key: [values]} or ["key=a,b", ...]."""
    if grid is None:
        return []
    if isinstance(grid, dict):
        out = []
        for k, vals in grid.items():
            vals = vals if isinstance(vals, list) else [vals]
            if not vals:
                raise UserError(f"{where}: grid axis {k!r} has no values")
            out.append(f"{k}={','.join(_yaml_value_text(v) for v in vals)}")
        return out
    if isinstance(grid, list) and all(isinstance(g, str) for g in grid):
        return list(grid)
    raise UserError(f"{where}: `grid` must be a mapping {{key: [values]}} or a list of 'key=a,b' strings")


def _runs(runs: Any, where: str) -> list[tuple[str | None, list[str]]]:
    """A sweep file's `runs` as (label or None, overrides)."""
    if runs is None or runs == []:
        return []
    if not isinstance(runs, list):
        raise UserError(f"{where}: `runs` must be a list of override lists or {{label, overrides}} mappings")
    out: list[tuple[str | None, list[str]]] = []
    for i, r in enumerate(runs):
        if isinstance(r, list) and all(isinstance(x, str) for x in r):
            out.append((None, list(r)))
        elif isinstance(r, dict) and set(r) <= {"label", "overrides"} and isinstance(r.get("overrides", []), list):
            label = r.get("label")
            if label is not None and (not isinstance(label, str) or not re.fullmatch(r"[\w.=:+-]+", label)):
                raise UserError(f"{where}: runs[{i}].label {label!r}: use letters, digits and . _ - = : + (no commas)")
            out.append((label, [str(x) for x in r.get("overrides", [])]))
        else:
            raise UserError(f"{where}: runs[{i}] must be a list of overrides or {{label: name, overrides: [...]}}, got {r!r}")
    return out


def _seeds(values: Any, where: str) -> list[int]:
    vals = values if isinstance(values, list) else [values]
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= schema.SEED_MAX]
    if bad or not vals:
        raise UserError(f"{where}: seeds must be integers in [0, {schema.SEED_MAX}], got {values!r}; "
                        "e.g. seeds: [0, 1] or seed=0,1,2")
    if len(set(vals)) != len(vals):
        raise UserError(f"{where}: repeated seed in {values!r}")
    return list(vals)


def _differs(cfg: dict[str, Any], base: dict[str, Any], key: str) -> bool:
    """Whether the run's value at `key` differs from the base's (a group choice: whether the option does)."""
    if key in schema.sections() and "name" in base.get(key, {}):
        key += ".name"
    a, b = cfg, base
    for part in key.split("."):
        a = a.get(part) if isinstance(a, dict) else None
        b = b.get(part) if isinstance(b, dict) else None
    return canonical_value(a) != canonical_value(b)


@dataclass
class _Spec:
    """A sweep file with the command line folded in, before composition."""

    recipes_dir: Path
    base: str
    seeds: list[int]
    baseline: str | None
    axes: dict[str, Any]                       # grid key -> Hydra Override (a sweep or a single value)
    runs: list[tuple[str | None, list[str]]]   # explicit arms: (label, overrides)
    const_file: list[tuple[str, str]]          # (override, key) from the file's `overrides`
    const_cli: list[tuple[str, str]]           # (override, key) from the command line
    cli: bool                                  # the command line changed anything


def _read_sweep(path: Path, overrides: Sequence[str]) -> _Spec:
    """Parse a sweep file (or a recipe, as a one-arm sweep) and fold the command-line overrides into it."""
    data = load_yaml(path)
    where = str(path)
    if "defaults" in data:  # a recipe: one arm, its own seed
        data = {"base": path.stem, "seeds": [data.get("seed", 0)]}
    elif not data:
        raise UserError(f"{where}: an empty sweep file; name its base recipe and the axes to vary "
                        "(e.g. `base: base` and `grid: {{loss: [grpo, dapo]}}`; see recipes/loss.yaml)")
    unknown = [k for k in data if k not in SWEEP_KEYS]
    if unknown:
        k = unknown[0]
        raise UserError(f"{where}: unknown sweep key {k!r}{closest(str(k), SWEEP_KEYS)}; sweep keys: {', '.join(SWEEP_KEYS)}")
    base = data.get("base", "base")
    # `base: base` names a recipe beside the sweep file; `base: ../recipes/base.yaml` a recipe elsewhere
    base_path = path.parent / (base if str(base).endswith(".yaml") else f"{base}.yaml")
    if not isinstance(base, str) or not base_path.is_file():
        raise UserError(f"{where}: base recipe {base!r} not found as {base_path}")
    seeds = _seeds(data.get("seeds", [0]), where)
    const_file = data.get("overrides") or []
    if not isinstance(const_file, list):
        raise UserError(f"{where}: `overrides` must be a list of 'key=value' strings")
    const_file = [str(x) for x in const_file]
    parsed = parse_overrides(const_file, f"{where} overrides")
    for o in parsed:
        if o.is_sweep_override():
            raise UserError(f"{where}: overrides: {o.input_line!r} is a sweep; put it under `grid`")
    runs = _runs(data.get("runs"), where) or [(None, [])]
    for _, ovs in runs:
        for o in parse_overrides(ovs, f"{where} runs"):
            if o.is_sweep_override():
                raise UserError(f"{where}: runs: {o.input_line!r} is a sweep; an explicit run takes single values")

    # grid axes: the file's, then the command line's sweep values replace or extend them
    axes: dict[str, Any] = {}
    for o in parse_overrides(_grid_strings(data.get("grid"), where), f"{where} grid"):
        if override_key(o) == "seed":
            raise UserError(f"{where}: grid axis 'seed': seeds are their own axis; use `seeds: [...]`")
        if o.is_sweep_override():
            sweep_size(o)  # an interval or glob, an empty range: one line naming the axis
        axes[override_key(o)] = o
    const_cli: list[tuple[str, str]] = []
    for o in parse_overrides(list(overrides), "command line"):
        k = override_key(o)
        if o.is_sweep_override():  # only sweeps that expand to a list of runs (a,b / range / choice), counted
            check_runs(sweep_size(o), o.input_line)
        if k == "seed":
            seeds = _seeds(list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()],
                           f"command line {o.input_line!r}")
        elif o.is_sweep_override() or k in axes:
            axes[k] = o
        else:
            const_cli.append((o.input_line, k))
    return _Spec(recipes_dir=base_path.parent, base=base_path.stem, seeds=seeds, baseline=data.get("baseline"),
                 axes=axes, runs=runs, const_file=[(c, override_key(o)) for c, o in zip(const_file, parsed)],
                 const_cli=const_cli, cli=bool(overrides))


def _compose_arms(spec: _Spec, hc: Composer) -> tuple[list[tuple[str, list[str], RunConfig]], list[tuple[str, str]], list[str]]:
    """Compose and validate every arm: ([(label, overrides, config)], [(arm, error)], notes)."""
    axes = [[f"{o.get_key_element()}={v}" for v in (sweep_values(o) if o.is_sweep_override() else [value_text(o)])]
            for o in spec.axes.values()]
    combos = [list(c) for c in itertools.product(*axes)]
    const_keys = {k: c for c, k in spec.const_file + spec.const_cli}
    arms: list[tuple[str, list[str], dict]] = []
    errors: list[tuple[str, str]] = []
    skipped: dict[str, list[str]] = {}  # constant key -> arms whose options lack it
    applied: dict[str, list[str]] = {}
    for (label, run_ovs), combo in itertools.product(spec.runs, combos):
        arm = ",".join(([label] if label else list(run_ovs)) + combo) or "base"
        clash = {override_key(o) for o in parse_overrides(run_ovs, "runs")} & {c.split("=", 1)[0] for c in combo}
        if clash:
            errors.append((arm, f"{sorted(clash)[0]}: set by both the run list and a grid axis; keep one"))
            continue
        drop: set[str] = set()
        while True:
            # order: the file's constants, the arm's own overrides, the command line's (the last one wins)
            ovs = ([c for c, k in spec.const_file if k not in drop] + list(run_ovs) + combo
                   + [c for c, k in spec.const_cli if k not in drop])
            try:
                raw = hc.compose(spec.base, ovs)
                break
            except ComposeError as e:
                if e.key and e.key in const_keys and e.key not in drop and e.key in schema.all_keys():
                    drop.add(e.key)  # a parameter this arm's option lacks: skip it for this arm, and say so
                    skipped.setdefault(e.key, []).append(arm)
                    continue
                errors.append((arm, hc.explain_missing_key(spec.base, ovs, e.key) if e.key else str(e)))
                raw = None
                break
        if raw is None:
            continue
        for k in const_keys:
            if k not in drop:
                applied.setdefault(k, []).append(arm)
        try:
            arms.append((arm, ovs, schema.validate(raw)))
        except ConfigErrors as e:
            errors.extend((arm, m) for m in e.errors)
    notes = []
    for k, arms_skipped in skipped.items():
        if applied.get(k):
            notes.append(f"{const_keys[k]} applies to {', '.join(applied[k])} only "
                         f"(not a parameter of {', '.join(arms_skipped)})")
        else:
            errors.append(("", f"{const_keys[k]}: {k} is a parameter of no arm of this sweep "
                               f"({', '.join(arms_skipped)}); drop it or add an arm whose option has it"))
    return arms, _collate(errors, n_arms=len(spec.runs) * len(combos)), notes


def load_sweep(path: Path | str, overrides: Sequence[str] = ()) -> Sweep:
    """Expand and validate every run of a sweep file (or of a recipe, as a one-arm sweep); launches nothing.

    Raises UserError for a malformed file or override, ConfigErrors listing every invalid run (one line each).
    """
    path = Path(path)
    where = str(path)
    name = check_name(path.stem, f"{where}: sweep name", "results go to <root>/<sweep name>/; rename the file")
    spec = _read_sweep(path, overrides)
    n_arms = len(spec.runs)
    for o in spec.axes.values():
        n_arms *= sweep_size(o) if o.is_sweep_override() else 1
    check_runs(n_arms * len(spec.seeds), f"{where} ({_n(n_arms, 'arm')} x {_n(len(spec.seeds), 'seed')})")
    with hydra_context(spec.recipes_dir) as hc:
        try:
            base_cfg = schema.validate(hc.compose(spec.base, []))
        except ComposeError as e:
            raise UserError(f"{where}: base recipe {spec.base!r}: {e}") from None
        except ConfigErrors as e:
            raise ConfigErrors([f"base recipe {spec.base!r}: {m}" for m in e.errors]) from None
        arms, errors, notes = _compose_arms(spec, hc)
    if errors:
        raise ConfigErrors(errors)

    labels = [a for a, _, _ in arms]
    dup = next((lab for lab in labels if labels.count(lab) > 1), None)
    if dup:
        raise UserError(f"{where}: two arms are labelled {dup!r}; give the runs distinct labels")
    ids: dict[str, str] = {}
    for arm, _, cfg in arms:
        aid = arm_id(cfg)
        if aid in ids:
            raise UserError(f"{where}: arms {ids[aid]!r} and {arm!r} resolve to the same config (arm_id {aid}); drop one")
        ids[aid] = arm

    baseline = spec.baseline
    if baseline is not None:  # matched as a set of key=value parts, so their order does not matter
        match = [a for a in labels if set(a.split(",")) == set(str(baseline).split(","))]
        if match:
            baseline = match[0]
        elif spec.cli:
            notes.append(f"baseline {baseline!r} is not an arm of this expansion; give `ablate rank --baseline`")
            baseline = None
        else:
            raise UserError(f"{where}: baseline {baseline!r} is not an arm; arms: {', '.join(labels)}")

    runs: list[RunSpec] = []
    diffs: dict[str, list[str]] = {}
    base_d = base_cfg.to_dict()
    for arm, ovs, cfg in arms:
        cfg_d = cfg.to_dict()
        diff = [o for o in ovs if _differs(cfg_d, base_d, override_key(parse_overrides([o], "override")[0]))]
        for s in spec.seeds:
            c = cfg.replace(seed=s)
            run = RunSpec(sweep=name, label=f"{arm},seed={s}", run_id=run_id(c), arm_id=arm_id(c),
                          overrides=tuple(ovs) + (f"seed={s}",), config=c, baseline=arm == baseline)
            runs.append(run)
            diffs[run.run_id] = diff
    return Sweep(name=name, path=path, baseline=baseline, seeds=spec.seeds, runs=runs, base=spec.base,
                 constants=[c for c, _ in spec.const_file + spec.const_cli], notes=notes, diffs=diffs)


def _collate(errors: list[tuple[str, str]], n_arms: int) -> list[str]:
    """One line per distinct message; a message every arm shares is printed once, others name their arms."""
    by_msg: dict[str, list[str]] = {}
    for arm, msg in errors:
        by_msg.setdefault(msg, [])
        if arm and arm not in by_msg[msg]:
            by_msg[msg].append(arm)
    out = []
    for msg, arms in by_msg.items():
        if not arms or len(arms) == n_arms:
            out.append(msg)
        else:
            out.append(f"arm {', '.join(arms)}: {msg}")
    return out


# ---- the plan (`ablate sweep --dry-run`) ----


def plan_rows(sweep: Sweep) -> list[dict[str, str]]:
    """One row per run: label, run id, arm id, overrides that differ from the base recipe."""
    return [{"label": r.label + (" *" if r.baseline else ""), "run_id": r.run_id, "arm_id": r.arm_id,
             "overrides": " ".join(sweep.diffs.get(r.run_id, [])) or "(base)"} for r in sweep.runs]


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}" + ("" if k == 1 else "s")


def plan_table(sweep: Sweep):
    """The dry-run plan as a rich Table (title: sweep, arms x seeds; caption: baseline, constants, notes). Labels
    and overrides are shown literally: `[x]` in a value is text, not rich markup, and control characters are
    escaped (ablate.text.safe)."""
    from rich.table import Table
    from rich.text import Text

    n_arms = len(sweep.arms)
    caption = [f"* baseline: {safe(sweep.baseline or 'none')}"]
    if sweep.constants:
        caption.append("every run: " + " ".join(map(safe, sweep.constants)))
    caption += [f"note: {safe(n)}" for n in sweep.notes]
    table = Table(title=Text(f"sweep {sweep.name}: {_n(n_arms, 'arm')} x {_n(len(sweep.seeds), 'seed')} = {_n(len(sweep.runs), 'run')} "
                             f"(base recipe: {sweep.base})"),
                  caption=Text("\n".join(caption)), caption_justify="left")
    table.add_column("label", no_wrap=True)
    table.add_column("run id", no_wrap=True)
    table.add_column("arm id", no_wrap=True)
    table.add_column("overrides vs base", overflow="fold")
    for row in plan_rows(sweep):
        table.add_row(*(Text(safe(row[k])) for k in ("label", "run_id", "arm_id", "overrides")))
    return table


def config_yaml(config: RunConfig) -> str:
    """A resolved config as YAML, headed by its ids (what `ablate show` prints)."""
    from omegaconf import OmegaConf

    head = f"# run_id: {run_id(config)}  arm_id: {arm_id(config)}\n"
    return head + OmegaConf.to_yaml(OmegaConf.create(config.to_dict()))

"""Sweeps: expand a sweep file into validated RunSpecs; nothing is launched here.

    load_sweep(sweep_file, overrides) -> Sweep   every run of a sweep, validated as a whole
    ablate.render.runs.runs_table(sweep)         what `ablate sweep --dry-run` prints

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
are collected and raised as one `ConfigErrors`, one line each. Run and arm ids come from ablate.config.identity.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.compose.hydra import ComposeError, Composer, hydra_context
from ablate.compose.overrides import check_runs, override_key, parse_overrides, sweep_size, sweep_values, value_text
from ablate.compose.resources import find_recipe
from ablate.compose.spec import RunSpec
from ablate.compose.sweep_file import SweepSpec, read_sweep
from ablate.config import schema
from ablate.config.identity import arm_id, canonical_value, check_name, run_id
from ablate.config.schema import ConfigErrors, RunConfig
from ablate.errors import ErrorKind, UserError
from ablate.text import counted


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
    """run_id -> the run's overrides whose target differs from the base recipe (the dry run's last column)."""

    @property
    def arms(self) -> list[str]:
        """Arm labels in order, each once."""
        return list(dict.fromkeys(r.arm_label for r in self.runs))


def _differs(cfg: dict[str, Any], base: dict[str, Any], key: str) -> bool:
    """Whether the run's value at `key` differs from the base's (a group choice: whether any of the option's values
    does, so that an option file of the same `name` with other values, `loss=cispo_wide`, counts)."""
    a: Any = cfg
    b: Any = base
    for part in key.split("."):
        a = a.get(part) if isinstance(a, dict) else None
        b = b.get(part) if isinstance(b, dict) else None
    return canonical_value(a) != canonical_value(b)


def _compose_arms(spec: SweepSpec, hc: Composer) -> tuple[list[tuple[str, list[str], RunConfig]], list[str], list[str]]:
    """Compose and validate every arm: ([(label, overrides, config)], [(arm, error)], notes)."""
    axes = [
        [f"{o.get_key_element()}={v}" for v in (sweep_values(o) if o.is_sweep_override() else [value_text(o)])]
        for o in spec.axes.values()
    ]
    combos = [list(c) for c in itertools.product(*axes)]
    const_keys = {k: c for c, k in spec.const_file + spec.const_cli}
    arms: list[tuple[str, list[str], RunConfig]] = []
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
            ovs = (
                [c for c, k in spec.const_file if k not in drop]
                + list(run_ovs)
                + combo
                + [c for c, k in spec.const_cli if k not in drop]
            )
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
            notes.append(
                f"{const_keys[k]} applies to {', '.join(applied[k])} only "
                f"(not a parameter of {', '.join(arms_skipped)})"
            )
        else:
            errors.append(
                (
                    "",
                    f"{const_keys[k]}: {k} is a parameter of no arm of this sweep "
                    f"({', '.join(arms_skipped)}); drop it or add an arm whose option has it",
                )
            )
    return arms, _collate(errors, n_arms=len(spec.runs) * len(combos)), notes


def named_arm(text: str, labels: Sequence[str], where: str) -> str | None:
    """The arm label `text` names (a sweep file's baseline, `rank --baseline`, `extrapolate --arm`), or None: its
    `key=value` parts in any order, spaces around them dropped, each value as written or spelled otherwise
    (`optim.lr=3e-4` names the arm `optim.lr=0.0003`, `optim.lr=1` the arm `optim.lr=1.0`). None too
    when it names several arms (free-text labels `lr=1e-4` and `lr=0.0001`): the caller refuses, never guesses."""
    match = [a for a in labels if _split(a) == _split(text)]
    if not match:  # spelled otherwise: parsed only then, as parsing every label costs
        want = _label_parts(text, where)
        match = [a for a in labels if _label_parts(a, where) == want]
    return match[0] if len(set(match)) == 1 else None


def _split(label: str) -> frozenset[str]:
    """A label's comma-separated parts, spaces around each dropped (`a=1, b=2` is `a=1,b=2`)."""
    return frozenset(p.strip() for p in label.split(","))


def _label_parts(label: str, where: str) -> frozenset[str]:
    """An arm label (or a sweep file's baseline) as its set of parts, each `key=value` part in the form arm labels
    are written (`optim.lr=3e-4` is `optim.lr=0.0003`), a whole number as the float it equals (`optim.lr=1` is
    `optim.lr=1.0`), with no `+` or `++` before a key (`+x=1` is `x=1`: the arm's config has x=1 either way), so a
    baseline matches its arm by value, not by spelling."""
    parts = []
    for part in _split(label):
        try:
            o = parse_overrides([part], where)[0] if "=" in part else None
        except UserError:  # a free-text label of the file's `runs:` that only looks like an override
            o = None
        if o is None or o.is_sweep_override():
            parts.append(part)
            continue
        parts.append(f"{o.get_key_element().lstrip('+')}={_number_text(o)}")  # `+k=v` sets k to v as `k=v` does
    return frozenset(parts)


def _number_text(o: Any) -> str:
    """An element override's value as `value_text` writes it, a whole number as the float it equals."""
    v = o.value()
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**53:  # (exactly a float: 1 is 1.0)
        return repr(float(v))
    return value_text(o)


def _distinct(where: str, arms: list[tuple[str, list[str], RunConfig]]) -> list[str]:
    """The arms' labels, once no two arms share a label or resolve to the same config."""
    labels = [a for a, _, _ in arms]
    dup = next((lab for lab in labels if labels.count(lab) > 1), None)
    if dup:
        raise UserError(f"{where}: two arms are labelled {dup!r}; give the runs distinct labels", kind=ErrorKind.RECIPE)
    ids: dict[str, str] = {}
    for arm, _, cfg in arms:
        aid = arm_id(cfg)
        if aid in ids:
            raise UserError(
                f"{where}: arms {ids[aid]!r} and {arm!r} resolve to the same config (arm_id {aid}); drop one",
                kind=ErrorKind.RECIPE,
            )
        ids[aid] = arm
    return labels


def load_sweep(path: Path | str, overrides: Sequence[str] = ()) -> Sweep:
    """Expand and validate every run of a sweep file (or of a recipe, as a one-arm sweep); launches nothing.

    Raises UserError for a malformed file or override, ConfigErrors listing every invalid run (one line each).
    The path resolves in the user's folder first, then among ablate's packaged recipes (ablate.compose.resources).
    """
    path, _ = find_recipe(path)
    where = str(path)
    name = check_name(path.stem, f"{where}: sweep name", "results go to <root>/<sweep name>/; rename the file")
    spec = read_sweep(path, overrides)
    n_arms = len(spec.runs)
    for o in spec.axes.values():
        n_arms *= sweep_size(o) if o.is_sweep_override() else 1
    check_runs(n_arms * len(spec.seeds), f"{where} ({counted(n_arms, 'arm')} x {counted(len(spec.seeds), 'seed')})")
    with hydra_context(spec.recipes_dir) as hc:
        try:
            base_cfg = schema.validate(hc.compose(spec.base, []))
        except ComposeError as e:
            raise UserError(f"{where}: base recipe {spec.base!r}: {e}", kind=ErrorKind.RECIPE) from None
        except ConfigErrors as e:
            raise ConfigErrors([f"base recipe {spec.base!r}: {m}" for m in e.errors]) from None
        arms, errors, notes = _compose_arms(spec, hc)
    if errors:
        raise ConfigErrors(_in_file(errors, where, {override_key(o) for o in parse_overrides(overrides, "overrides")}))

    labels = _distinct(where, arms)
    baseline = spec.baseline
    if baseline is not None:
        match = named_arm(str(baseline), labels, where)
        if match is not None:
            baseline = match
        elif spec.cli:
            notes.append(f"baseline {baseline!r} is not an arm of this expansion; give `ablate rank --baseline`")
            baseline = None
        else:
            raise UserError(
                f"{where}: baseline {baseline!r} is not an arm; arms: {', '.join(labels)}", kind=ErrorKind.RECIPE
            )

    runs: list[RunSpec] = []
    diffs: dict[str, list[str]] = {}
    base_d = base_cfg.to_dict()
    for arm, ovs, cfg in arms:
        cfg_d = cfg.to_dict()
        diff = [o for o in ovs if _differs(cfg_d, base_d, override_key(parse_overrides([o], "override")[0]))]
        for s in spec.seeds:
            c = cfg.replace(seed=s)
            run = RunSpec(
                sweep=name,
                label=f"{arm},seed={s}",
                run_id=run_id(c),
                arm_id=arm_id(c),
                overrides=tuple(ovs) + (f"seed={s}",),
                config=c,
                baseline=arm == baseline,
            )
            runs.append(run)
            diffs[run.run_id] = diff
    return Sweep(
        name=name,
        path=path,
        baseline=baseline,
        seeds=spec.seeds,
        runs=runs,
        base=spec.base,
        constants=[c for c, _ in spec.const_file + spec.const_cli],
        notes=notes,
        diffs=diffs,
    )


def _in_file(errors: list[str], where: str, cli_keys: set[str]) -> list[str]:
    """The sweep file named before each error that is not about a key the command line set (those name their
    key, which the user just typed)."""
    out = []
    for e in errors:
        key = e.removeprefix("arm ").split(": ")[1 if e.startswith("arm ") else 0].split("=")[0]
        out.append(e if key in cli_keys else f"{where}: {e}")
    return out


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


def config_yaml(config: RunConfig) -> str:
    """A resolved config as YAML, headed by its ids (what `ablate show` prints)."""
    from omegaconf import OmegaConf

    head = f"# run_id: {run_id(config)}  arm_id: {arm_id(config)}\n"
    return head + OmegaConf.to_yaml(OmegaConf.create(config.to_dict()))

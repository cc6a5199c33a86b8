"""Recipes and sweeps: compose a recipe with Hydra's compose API, expand a sweep file into validated RunSpecs.

    compose_run(recipe, overrides)  -> dict     one resolved, validated run config (`ablate show`, `ablate train`)
    load_sweep(sweep_file, overrides) -> Sweep  every run of a sweep, validated as a whole; nothing is launched
    run_id(config) / arm_id(config) -> str      12-hex hash of the canonical config (arm: without the seed)
    plan_table(sweep) -> rich Table             what `ablate sweep --dry-run` prints

A sweep file (see recipes/loss.yaml for the commented format) names a base recipe, grid axes, explicit runs
(leave-one-out), seeds, constant overrides and a baseline arm. Arms = runs x grid product; runs = arms x seeds.
Values use Hydra's override grammar and Hydra's own parser/`BasicSweeper` expand the sweep syntax
(`a,b,c`, `range(...)`, `choice(...)`), so the command line works like `--multirun`:

    ablate sweep recipes/loss.yaml seed=0,1,2 loss.eps_max=4

- `seed=...` replaces the file's seeds (seeds are their own axis, so that an arm is "every seed of one config");
- another sweep-valued override adds a grid axis, or replaces the file's axis of the same key; a single value
  for a grid key narrows that axis to it (`ablate show recipes/loss.yaml loss=dapo`);
- the other overrides apply to every run, after the arm's own. A constant override of a parameter that only
  some arms' options have (`loss.eps_max` exists for cispo, not dapo) applies to the arms that have it, and the
  plan says which; one that no arm has is an error. Overrides that an arm names itself (grid, runs) must apply.

Every expanded config is validated (`config.validate`) before the sweep is returned; all problems of all runs
are collected and raised as one `ConfigErrors`, one line each. Ids hash the canonical resolved config: sorted
keys, numbers as floats (5 == 5.0, 1e-3 == 0.001), nulls dropped (so a new optional field keeps old ids), the
launcher and `hash=False` fields left out; the arm id also leaves out the seed.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from omegaconf import OmegaConf

from ablate import config as schema
from ablate import store
from ablate.config import ConfigErrors, closest
from ablate.errors import UserError
from ablate.spec import RunSpec

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
"""The shipped recipes (a source checkout / editable install)."""

SWEEP_KEYS = ("base", "baseline", "seeds", "grid", "runs", "overrides")
ID_LEN = 12


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


# ---- ids ----


def _canon(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in x.items() if v is not None}
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, (int, float)):
        return float(x)  # 5 == 5.0 == 5.00 and 1e-3 == 0.001: json writes repr(float)
    return str(x)


def canonical(config: dict[str, Any], *, seed: bool = True) -> str:
    """The canonical JSON text of a config that ids hash: launcher, `hash=False` fields (and the seed) left out."""
    cfg = copy.deepcopy(dict(config))
    for dotted in [*schema.unhashed_keys(), *([] if seed else ["seed"])]:
        parts = dotted.split(".")
        node = cfg
        for p in parts[:-1]:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(parts[-1], None)
    return json.dumps(_canon(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def run_id(config: dict[str, Any]) -> str:
    """Short sha256 of the canonical resolved config: the same config gives the same id on any machine."""
    return hashlib.sha256(canonical(config).encode()).hexdigest()[:ID_LEN]


def arm_id(config: dict[str, Any]) -> str:
    """`run_id` without the seed: runs that share it are seeds of one arm."""
    return hashlib.sha256(canonical(config, seed=False).encode()).hexdigest()[:ID_LEN]


# ---- Hydra composition ----


def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _parse(overrides: Sequence[str], where: str) -> list[Any]:
    """Hydra Override objects; a grammar error becomes a one-line UserError naming the override."""
    from hydra.errors import HydraException

    out = []
    for o in overrides:
        if not isinstance(o, str):
            raise UserError(f"{where}: override {o!r} is not a 'key=value' string")
        try:
            out.extend(_parser().parse_overrides([o]))
        except HydraException as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"{where}: cannot parse override {o!r} ({first}); the grammar is Hydra's: key=value, "
                            "key=a,b,c, key=range(1,4), key=choice(a,b)") from None
    return out


def _element_str(value: Any) -> str:
    """One override value as Hydra text (lower-case booleans, so labels read like the YAML)."""
    from hydra.core.override_parser.types import Override

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return Override._get_value_element_as_str(value)


def _key(o: Any) -> str:
    return o.get_key_element().lstrip("+~")


def _groups(recipes_dir: Path) -> dict[str, list[str]]:
    """Config groups of a recipes folder: group -> its option names (the YAML file stems)."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(recipes_dir.iterdir()) if d.is_dir()}


class _ComposeError(Exception):
    def __init__(self, message: str, key: str | None = None, missing_key: bool = False) -> None:
        super().__init__(message)
        self.key, self.missing_key = key, missing_key


class _Composer:
    """Composes configs of one recipes folder inside one Hydra context (GlobalHydra is cleared around it)."""

    # Hydra's compose takes ~0.1 s; sweeps share arms (every sweep composes the base), so results are cached
    # per process, keyed by the recipe files' names, sizes and mtimes: an edited recipe is composed afresh.
    _cache: dict[tuple, dict] = {}

    def __init__(self, recipes_dir: Path) -> None:
        self.dir = recipes_dir
        self.groups = _groups(recipes_dir)
        stats = sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in recipes_dir.rglob("*.yaml"))
        self.fingerprint = hashlib.sha256(repr(stats).encode()).hexdigest()

    def compose(self, name: str, overrides: Sequence[str]) -> dict[str, Any]:
        """The raw composed config (not yet validated) as plain containers; _ComposeError explains a failure."""
        from hydra import compose
        from hydra.errors import ConfigCompositionException, MissingConfigException

        key = (self.fingerprint, name, tuple(overrides))
        if key in self._cache:
            return copy.deepcopy(self._cache[key])
        # ... and on disk, so that re-running `ablate sweep` (a no-op when all is done) skips Hydra altogether
        disk = store.cache_dir() / "compose" / (hashlib.sha256(repr(key).encode()).hexdigest()[:32] + ".json")
        if disk.exists():
            try:
                cfg = store.read_json(disk)
                self._cache[key] = cfg
                return copy.deepcopy(cfg)
            except (OSError, json.JSONDecodeError):
                pass  # a torn or unreadable entry: compose again and rewrite it
        try:
            cfg = OmegaConf.to_container(compose(config_name=name, overrides=list(overrides)), resolve=True)
        except MissingConfigException as e:
            raise _ComposeError(self._explain_missing(str(e), name)) from None
        except ConfigCompositionException as e:
            m = re.match(r"Could not override '([^']+)'", str(e))
            if m:
                raise _ComposeError(f"{m.group(1)}: unknown key", key=m.group(1), missing_key=True) from None
            raise _ComposeError(" ".join(str(e).split("\n")[:1]) or type(e).__name__) from None
        except Exception as e:  # HydraException, and plain TypeErrors Hydra raises on some bad values
            raise _ComposeError(f"cannot compose with {list(overrides)}: {type(e).__name__}: {e}".splitlines()[0]) from None
        self._cache[key] = cfg
        try:
            store.atomic_write_text(disk, json.dumps(cfg))
        except OSError:
            pass  # a read-only cache only costs speed
        return copy.deepcopy(cfg)

    def _explain_missing(self, text: str, name: str) -> str:
        m = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
        if m and m.group(1) in self.groups:
            group, option = m.group(1), m.group(2)
            opts = self.groups[group]
            return f"{group}={option}: no such option{closest(option, opts)}; options: {', '.join(opts)} (recipes/{group}/)"
        if m:
            return f"{m.group(1)}: no such config group{closest(m.group(1), list(self.groups))}"
        m = re.search(r"Could not find '([^']+)'", text)
        if m:
            recipes = sorted(p.stem for p in self.dir.glob("*.yaml"))
            return f"recipe {m.group(1)!r} not found in {self.dir}{closest(m.group(1), recipes)}"
        return text.splitlines()[0]

    def explain_missing_key(self, name: str, overrides: Sequence[str], key: str) -> str:
        """Why `key` cannot be overridden: not a parameter of the arm's option, or unknown (with a suggestion)."""
        head, _, param = key.partition(".")
        if param and key in schema.all_keys() and head in self.groups:
            try:
                cfg = self.compose(name, [o for o in overrides if _key(_parse([o], "override")[0]) != key])
                option = cfg.get(head, {}).get("name", "?")
            except _ComposeError:
                option = "?"
            having = [o for o in self.groups[head] if param in (OmegaConf.load(self.dir / head / f"{o}.yaml") or {})]
            own = [k for k in (OmegaConf.load(self.dir / head / f"{option}.yaml") if option in self.groups[head] else {})
                   if k != "name"]
            fix = f"use it with {head}={'|'.join(having)}" if having else "drop it"
            return (f"{key}: not a parameter of {head}={option} (its parameters: {', '.join(own) or 'none'}); {fix}")
        return f"{key}: unknown key{closest(key, schema.all_keys())}"


@contextmanager
def _hydra(recipes_dir: Path) -> Iterator[_Composer]:
    """A Hydra compose context on `recipes_dir`; the GlobalHydra singleton is cleared before and after."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(recipes_dir.resolve()), version_base=None):
        yield _Composer(recipes_dir.resolve())


# ---- one run ----


def is_sweep_file(path: Path | str) -> bool:
    """A sweep file has no Hydra `defaults:` list (a recipe such as base.yaml has one)."""
    data = _load_yaml(Path(path))
    return "defaults" not in data


def compose_run(recipe_path: Path | str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved, validated config of one run, as plain containers.

    `recipe_path` is a recipe (e.g. recipes/base.yaml) or a sweep file; a sweep file must narrow to exactly one
    run with the overrides (e.g. `recipes/loss.yaml loss=dapo`). Raises UserError / ConfigErrors.
    """
    path = Path(recipe_path)
    if is_sweep_file(path):
        sweep = load_sweep(path, overrides)
        if len(sweep.runs) != 1:
            labels = ", ".join(r.label for r in sweep.runs[:6]) + (", ..." if len(sweep.runs) > 6 else "")
            raise UserError(f"{path} expands to {len(sweep.runs)} runs ({labels}); pick one with overrides, "
                            f"e.g. {sweep.runs[0].label.replace(',', ' ')}")
        return sweep.runs[0].config
    parsed = _parse(overrides, str(path))
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    if sweeps:
        raise UserError(f"{sweeps[0]}: a sweep value; one run takes one value per key (sweeps go to `ablate sweep`)")
    with _hydra(path.parent) as hc:
        try:
            raw = hc.compose(path.stem, list(overrides))
        except _ComposeError as e:
            msg = hc.explain_missing_key(path.stem, overrides, e.key) if e.missing_key else str(e)
            raise ConfigErrors([msg]) from None
    return schema.validate(raw)


# ---- sweeps ----


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as e:  # yaml.YAMLError, omegaconf errors
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level")
    return data


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
            out.append(f"{k}={','.join(_element_str(v) for v in vals)}")
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
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad or not vals:
        raise UserError(f"{where}: seeds must be non-negative integers, got {values!r}; e.g. seeds: [0, 1] or seed=0,1,2")
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
    return _canon(a) != _canon(b)


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
    data = _load_yaml(path)
    where = str(path)
    if "defaults" in data:  # a recipe: one arm, its own seed
        data = {"base": path.stem, "seeds": [data.get("seed", 0)]}
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
    parsed = _parse(const_file, f"{where} overrides")
    for o in parsed:
        if o.is_sweep_override():
            raise UserError(f"{where}: overrides: {o.input_line!r} is a sweep; put it under `grid`")
    runs = _runs(data.get("runs"), where) or [(None, [])]
    for _, ovs in runs:
        for o in _parse(ovs, f"{where} runs"):
            if o.is_sweep_override():
                raise UserError(f"{where}: runs: {o.input_line!r} is a sweep; an explicit run takes single values")

    # grid axes: the file's, then the command line's sweep values replace or extend them
    axes: dict[str, Any] = {}
    for o in _parse(_grid_strings(data.get("grid"), where), f"{where} grid"):
        if _key(o) == "seed":
            raise UserError(f"{where}: grid axis 'seed': seeds are their own axis; use `seeds: [...]`")
        axes[_key(o)] = o
    const_cli: list[tuple[str, str]] = []
    for o in _parse(list(overrides), "command line"):
        k = _key(o)
        if o.is_sweep_override() and not o.is_discrete_sweep():
            raise UserError(f"{o.input_line}: only discrete sweeps (a,b / range / choice) expand to runs")
        if k == "seed":
            seeds = _seeds(list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()],
                           f"command line {o.input_line!r}")
        elif o.is_sweep_override() or k in axes:
            axes[k] = o
        else:
            const_cli.append((o.input_line, k))
    return _Spec(recipes_dir=base_path.parent, base=base_path.stem, seeds=seeds, baseline=data.get("baseline"),
                 axes=axes, runs=runs, const_file=[(c, _key(o)) for c, o in zip(const_file, parsed)],
                 const_cli=const_cli, cli=bool(overrides))


def _compose_arms(spec: _Spec, hc: _Composer) -> tuple[list[tuple[str, list[str], dict]], list[tuple[str, str]], list[str]]:
    """Compose and validate every arm: ([(label, overrides, config)], [(arm, error)], notes)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    combos = BasicSweeper.split_arguments(list(spec.axes.values()), None)[0] if spec.axes else [[]]
    combos = [[_norm_override(c) for c in combo] for combo in combos]
    const_keys = {k: c for c, k in spec.const_file + spec.const_cli}
    arms: list[tuple[str, list[str], dict]] = []
    errors: list[tuple[str, str]] = []
    skipped: dict[str, list[str]] = {}  # constant key -> arms whose options lack it
    applied: dict[str, list[str]] = {}
    for (label, run_ovs), combo in itertools.product(spec.runs, combos):
        arm = ",".join(([label] if label else list(run_ovs)) + combo) or "base"
        clash = {_key(o) for o in _parse(run_ovs, "runs")} & {c.split("=", 1)[0] for c in combo}
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
            except _ComposeError as e:
                if e.missing_key and e.key in const_keys and e.key not in drop and e.key in schema.all_keys():
                    drop.add(e.key)  # a parameter this arm's option lacks: skip it for this arm, and say so
                    skipped.setdefault(e.key, []).append(arm)
                    continue
                errors.append((arm, hc.explain_missing_key(spec.base, ovs, e.key) if e.missing_key else str(e)))
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
    spec = _read_sweep(path, overrides)
    with _hydra(spec.recipes_dir) as hc:
        try:
            base_cfg = schema.validate(hc.compose(spec.base, []))
        except _ComposeError as e:
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
    for arm, ovs, cfg in arms:
        diff = [o for o in ovs if _differs(cfg, base_cfg, _key(_parse([o], "override")[0]))]
        for s in spec.seeds:
            c = copy.deepcopy(cfg)
            c["seed"] = s
            run = RunSpec(sweep=path.stem, label=f"{arm},seed={s}", run_id=run_id(c), arm_id=arm_id(c),
                          overrides=tuple(ovs) + (f"seed={s}",), config=c, baseline=arm == baseline)
            runs.append(run)
            diffs[run.run_id] = diff
    return Sweep(name=path.stem, path=path, baseline=baseline, seeds=spec.seeds, runs=runs, base=spec.base,
                 constants=[c for c, _ in spec.const_file + spec.const_cli], notes=notes, diffs=diffs)


def _norm_override(line: str) -> str:
    """`key=value` with the value re-printed canonically (True -> true), for labels."""
    o = _parse([line], "grid")[0]
    return f"{o.get_key_element()}={_element_str(o.value())}"


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


def plan_table(sweep: Sweep):
    """The dry-run plan as a rich Table (title: sweep, arms x seeds; caption: baseline, constants, notes)."""
    from rich.table import Table

    n_arms = len(sweep.arms)
    caption = [f"* baseline: {sweep.baseline or 'none'}"]
    if sweep.constants:
        caption.append("every run: " + " ".join(sweep.constants))
    caption += [f"note: {n}" for n in sweep.notes]
    table = Table(title=f"sweep {sweep.name}: {n_arms} arms x {len(sweep.seeds)} seeds = {len(sweep.runs)} runs "
                        f"(base recipe: {sweep.base})",
                  caption="\n".join(caption), caption_justify="left")
    table.add_column("label", no_wrap=True)
    table.add_column("run id", no_wrap=True)
    table.add_column("arm id", no_wrap=True)
    table.add_column("overrides vs base", overflow="fold")
    for row in plan_rows(sweep):
        table.add_row(row["label"], row["run_id"], row["arm_id"], row["overrides"])
    return table


def config_yaml(config: dict[str, Any]) -> str:
    """A resolved config as YAML, headed by its ids (what `ablate show` prints)."""
    head = f"# run_id: {run_id(config)}  arm_id: {arm_id(config)}\n"
    return head + OmegaConf.to_yaml(OmegaConf.create(config))

"""Recipes: compose one run's config with Hydra's compose API, on top of the schema's defaults.

    compose_run(recipe, overrides) -> RunConfig    one resolved, validated run (`ablate show`, `ablate train`)
    Composer(recipes_dir).compose(name, overrides) the raw composed dict (sweep.py expands sweeps with it)

The schema's defaults (config.defaults_tree) are registered in Hydra's ConfigStore as the config `ablate_schema`,
and a recipe's defaults list starts with it (recipes/base.yaml does), so a recipe states only what differs from
the schema and `key=value` works for every schema key. Hydra's public APIs do the work (the compose API, the
ConfigStore and the override parser); two safety checks reach into OmegaConf's internals, as no public API offers
them: its interpolation grammar (`omegaconf.grammar_parser`, the check every value goes through) and its resolver
registry (`_no_resolvers`, a second fence, skipped where a later OmegaConf keeps resolvers elsewhere). The tests
exercise both on the installed versions.

Recipes are data. What a recipe may interpolate: other keys of the same config by a literal name (`${batch.prompts}`,
`${..x}`), resolved when the config is composed, so config.yaml holds plain values. Anything else is refused, read
with OmegaConf's own grammar rather than a pattern: resolvers (`${oc.env:HOME}`, `${oc.decode:...}`, any
`${name:...}`, however the name is built: `${${x}:HOME}`), keys built from other interpolations (`${a.${b}}`) and
escaped interpolations (`\\${...}`, which would leave `${` in config.yaml for a later reader to resolve). Every
recipe file of the folder is checked before Hydra reads any (a resolver in a defaults list or an unused option
too), sweep files when they are read, and the composed config -- command-line overrides included -- before it is
resolved, with every resolver unregistered while it is; a resolved value that still holds `${` is refused. A
stored config must not carry the environment of the machine that composed it.

YAML files are parsed without expanding anchors first (`check_yaml`): aliases that would expand a file past
MAX_YAML_NODES nodes (a "billion laughs" alias bomb) are refused before OmegaConf, Hydra or PyYAML builds them.

Composition costs ~0.1 s and a no-op `ablate sweep` re-run composes every arm again, so composed configs are
cached, in memory and on disk, keyed by the recipe files' contents, the schema's defaults and the overrides. The
disk cache is private to its user: an entry is used only if this user owns it and nobody else can write it.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import os
import re
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator, Sequence

from omegaconf import OmegaConf

from ablate import config as schema
from ablate import store
from ablate.config import ConfigErrors, RunConfig, closest
from ablate.errors import UserError

SCHEMA_CONFIG = "ablate_schema"
_CACHE_VERSION = b"2"
"""Salts the compose cache key: entries composed by an older, laxer check are not reused."""

MAX_RUNS = 10_000
"""The most runs a sweep may expand to. A run costs a config composition (~0.1 s uncached), a run directory and a
ledger line; the shipped sweeps have at most a few dozen. `seed=range(0,100000000)` is refused before expanding."""

MAX_YAML_NODES = 10_000
"""The most nodes a YAML file that uses aliases may expand to. The shipped files use none and hold a few hundred
nodes; OmegaConf builds ~10k nodes in well under a second and a few tens of MB, while nine levels of ten aliases
(a billion laughs) would be 10^9 nodes. A file without aliases is as large as it is written and is not limited."""


# ---- the override grammar (Hydra's parser) ----


def parse_overrides(overrides: Sequence[str], where: str) -> list[Any]:
    """Hydra `Override` objects; a grammar error becomes a one-line UserError naming the override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for o in overrides:
        if not isinstance(o, str):
            raise UserError(f"{where}: override {o!r} is not a 'key=value' string")
        try:
            parsed = parser.parse_overrides([o])
        except HydraException as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"{where}: cannot parse override {o!r} ({first}); the grammar is Hydra's: key=value, "
                            "key=a,b,c, key=range(1,4), key=choice(a,b)") from None
        for p in parsed:
            if p.is_hydra_override():  # hydra.searchpath would compose files from anywhere, unchecked
                raise UserError(f"{where}: {o!r} sets Hydra's own config; ablate composes recipes from the "
                                "recipe's folder only: drop it")
        out.extend(parsed)
    return out


def override_key(o: Any) -> str:
    """The dotted key an override sets, without Hydra's +/++/~ prefix."""
    return o.get_key_element().lstrip("+~")


def value_text(o: Any) -> str:
    """An element override's value as override text, canonical: lower-case booleans, floats by repr."""
    v = o.value()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return o.get_value_element_as_str()


SUPPORTED_SWEEPS = ("a,b,c, choice(a,b), range(start,stop[,step]) with a nonzero step, "
                    "each optionally in sort(...), shuffle(...) or tag(...)")


def sweep_size(o: Any) -> int:
    """How many values a sweep override expands to, counted without expanding it; a UserError naming the override
    for a sweep that does not expand to a finite list of runs (interval, glob) or a range that is empty or steps 0."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep, Sweep

    v = o.value()
    if isinstance(v, ChoiceSweep):
        if not v.list:
            raise UserError(f"{o.input_line}: a sweep of no values; supported: {SUPPORTED_SWEEPS}")
        if any(isinstance(x, Sweep) for x in v.list):
            raise UserError(f"{o.input_line}: a sweep inside a sweep; list the values in one: {SUPPORTED_SWEEPS}")
        return len(v.list)
    if isinstance(v, RangeSweep) and v.start is not None and v.stop is not None:
        try:  # exact values, as Hydra's own float range steps through them
            start, stop, step = Decimal(v.start), Decimal(v.stop), Decimal(v.step)
        except (ArithmeticError, TypeError, ValueError):
            start = stop = step = Decimal(0)
        if step.is_finite() and step != 0 and start.is_finite() and stop.is_finite():
            n = max(0, math.ceil((stop - start) / step))
            if n == 0:
                raise UserError(f"{o.input_line}: an empty range (no value from {v.start} to {v.stop} by {v.step}); "
                                "e.g. range(0,3) is 0,1,2")
            return n
        raise UserError(f"{o.input_line}: a range needs finite bounds and a nonzero step; e.g. range(0,3) is 0,1,2")
    what = type(v).__name__.replace("Sweep", "").lower() if v is not None else "this"
    raise UserError(f"{o.input_line}: {'an' if what[0] in 'aeiou' else 'a'} {what} sweep does not expand to a list "
                    f"of runs; supported: {SUPPORTED_SWEEPS}")


def check_runs(n: int, what: str) -> None:
    """Refuse a sweep of more than MAX_RUNS runs before anything is expanded."""
    if n > MAX_RUNS:
        count = f"{n:,}" if n < 10**12 else f"about {n:.1e}"
        raise UserError(f"{what} expands to {count} runs, more than the {MAX_RUNS:,} a sweep may have; "
                        "narrow its axes or seeds (or split it into several sweeps)")


def sweep_values(o: Any) -> list[str]:
    """A sweep override (`a,b`, `range(..)`, `choice(..)`) as its values, each as canonical override text.
    Counted first (`sweep_size`): an unsupported or oversized sweep is one UserError, not a traceback or a hang."""
    from hydra.errors import HydraException

    check_runs(sweep_size(o), o.input_line)
    key = o.get_key_element()
    try:
        texts = list(o.sweep_string_iterator())
    except (HydraException, ValueError, TypeError, ArithmeticError) as e:
        raise UserError(f"{o.input_line}: cannot expand ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                        f"supported: {SUPPORTED_SWEEPS}") from None
    return [value_text(parse_overrides([f"{key}={v}"], "sweep")[0]) for v in texts]


# ---- composition ----


def recipe_groups(recipes_dir: Path) -> dict[str, list[str]]:
    """Config groups of a recipes folder: group -> its option names (the YAML file stems)."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(recipes_dir.iterdir()) if d.is_dir()}


class ComposeError(Exception):
    """Composition failed; `key` is set when the failure is an override of a key the config does not have."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class Composer:
    """Composes the configs of one recipes folder inside one Hydra context (see `hydra_context`)."""

    _memory: dict[tuple, dict] = {}

    _checked: set[bytes] = set()  # digests of recipe files that passed `_check_recipe_file` in this process

    def __init__(self, recipes_dir: Path) -> None:
        self.dir = recipes_dir
        self.groups = recipe_groups(recipes_dir)
        h = hashlib.sha256(_CACHE_VERSION + json.dumps(schema.defaults_tree(), sort_keys=True).encode())
        for p in sorted(recipes_dir.rglob("*.yaml")):
            data = p.read_bytes()
            _check_recipe_file(p, data)  # before Hydra reads any of them
            h.update(str(p.relative_to(recipes_dir)).encode() + b"\0" + data + b"\0")
        self.fingerprint = h.hexdigest()

    def compose(self, name: str, overrides: Sequence[str]) -> dict[str, Any]:
        """The raw composed config (not yet validated) as plain containers; ComposeError explains a failure."""
        key = (self.fingerprint, name, tuple(overrides))
        if key in self._memory:
            return copy.deepcopy(self._memory[key])
        disk = _cache_dir() / (hashlib.sha256(repr(key).encode()).hexdigest()[:32] + ".json")
        cfg = _read_private(disk)
        if cfg is None:
            cfg = self._compose(name, overrides)
            try:
                store.atomic_write_text(disk, json.dumps(cfg))
                os.chmod(disk, 0o600)
            except OSError:
                pass  # a read-only cache only costs speed
        self._memory[key] = cfg
        return copy.deepcopy(cfg)

    def _compose(self, name: str, overrides: Sequence[str]) -> dict[str, Any]:
        from hydra import compose
        from hydra.errors import ConfigCompositionException, MissingConfigException

        try:
            raw = compose(config_name=name, overrides=list(overrides))
        except MissingConfigException as e:
            raise ComposeError(self._explain_missing(str(e))) from None
        except ConfigCompositionException as e:
            m = re.match(r"Could not override '([^']+)'", str(e))
            if m:
                raise ComposeError(f"{m.group(1)}: unknown key", key=m.group(1)) from None
            raise ComposeError(" ".join(str(e).split("\n")[:1]) or type(e).__name__) from None
        except Exception as e:  # HydraException, and plain TypeErrors Hydra raises on some bad values
            raise ComposeError(f"cannot compose with {list(overrides)}: {type(e).__name__}: {e}".splitlines()[0]) from None
        problem = _interpolation_problems(OmegaConf.to_container(raw, resolve=False))
        if problem:
            raise ComposeError(problem)
        try:
            with _no_resolvers():
                cfg = OmegaConf.to_container(raw, resolve=True)
        except Exception as e:  # an interpolation of a key that does not exist
            raise ComposeError(f"cannot resolve an interpolation: {str(e).splitlines()[0]}") from None
        left = next(((w, v) for w, v in _strings(cfg, "") if "${" in v), None)
        if left:  # text pieced together across keys into `${...}`: a later reader would resolve it
            raise ComposeError(f"{left[0]}: resolves to {left[1]!r}, which holds '${{'; {_ONLY_KEYS}")
        return cfg

    def _explain_missing(self, text: str) -> str:
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

    def option_of(self, name: str, overrides: Sequence[str], group: str) -> str:
        """Which option of `group` the config composed from these overrides picks ('?' if it cannot compose)."""
        try:
            return str(self.compose(name, overrides).get(group, {}).get("name", "?"))
        except ComposeError:
            return "?"

    def options_with(self, group: str, param: str) -> list[str]:
        """The options of `group` whose file sets `param`."""
        return [o for o in self.groups.get(group, [])
                if param in (OmegaConf.load(self.dir / group / f"{o}.yaml") or {})]

    def explain_missing_key(self, name: str, overrides: Sequence[str], key: str) -> str:
        """Why `key` cannot be overridden: not a parameter of the arm's option, or unknown (with a suggestion)."""
        head, _, param = key.partition(".")
        if param and key in schema.all_keys() and head in self.groups:
            others = [o for o in overrides if override_key(parse_overrides([o], "override")[0]) != key]
            option = self.option_of(name, others, head)
            own = ([k for k in (OmegaConf.load(self.dir / head / f"{option}.yaml") or {}) if k != "name"]
                   if option in self.groups[head] else [])
            having = self.options_with(head, param)
            fix = f"use it with {head}={'|'.join(having)}" if having else "drop it"
            return f"{key}: not a parameter of {head}={option} (its parameters: {', '.join(own) or 'none'}); {fix}"
        return f"{key}: unknown key{closest(key, schema.all_keys())}"


# ---- what a recipe may interpolate (OmegaConf's grammar) and how large a YAML file may expand ----

_ONLY_KEYS = ("recipes may interpolate other keys by name (${batch.prompts}) but not call resolvers such as "
              "${oc.env:...}: write the value itself")


def interpolation_problem(text: str) -> str | None:
    """What is wrong with a string's interpolations, read with OmegaConf's own grammar (None: nothing).

    Allowed: text and `${key.path}` / `${..key}` whose key parts are literal names or indices. Refused: a resolver
    call (`${name:...}`, whatever builds the name), a key built from another interpolation, an escaped `\\${`, and
    a string OmegaConf cannot parse. A string without `${` is never interpolated by OmegaConf."""
    if "${" not in text:
        return None
    from antlr4 import TerminalNode
    from omegaconf import grammar_parser
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser as G

    try:
        tree = grammar_parser.parse(text, parser_rule="configValue")
    except GrammarParseError:
        return "is not a plain interpolation of a key"
    allowed = (G.ConfigValueContext, G.TextContext, G.InterpolationContext, G.InterpolationNodeContext,
               G.ConfigKeyContext)
    todo = [tree]
    while todo:
        t = todo.pop()
        if isinstance(t, TerminalNode):
            if t.symbol.type == G.ESC_INTER:
                return "escapes an interpolation ('\\${'), which would leave '${' in the stored config"
            continue
        if isinstance(t, G.InterpolationResolverContext):
            return "calls a resolver"
        if not isinstance(t, allowed):
            return "is not a plain interpolation of a key"
        children = list(t.getChildren())
        if isinstance(t, G.ConfigKeyContext) and not all(isinstance(c, TerminalNode) for c in children):
            return "builds a key from another interpolation"
        todo.extend(children)
    return None


def _strings(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """(dotted place, value) of every string in plain containers."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{where}.{k}" if where else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, f"{where}[{i}]")
    elif isinstance(node, str):
        yield where, node


def _interpolation_problems(node: Any, where: str = "") -> str | None:
    """The first string of plain containers whose interpolations are refused, as a message; None when all pass."""
    for w, v in _strings(node, where):
        problem = interpolation_problem(v)
        if problem:
            return f"{w}: {v!r} {problem}; {_ONLY_KEYS}"
    return None


@contextmanager
def _no_resolvers() -> Iterator[None]:
    """Resolve with no resolver registered (OmegaConf's, Hydra's or anyone's): a resolver call that got past the
    grammar check still fails instead of running. OmegaConf keeps them in one class attribute; where a later
    version does not, the grammar check stands alone."""
    from omegaconf.basecontainer import BaseContainer

    saved = getattr(BaseContainer, "_resolvers", None)
    if not isinstance(saved, dict):
        yield
        return
    BaseContainer._resolvers = {}
    try:
        yield
    finally:
        BaseContainer._resolvers = saved


def check_yaml(text: str, where: str) -> Any:
    """Parse YAML text without expanding aliases and refuse it when its aliases would expand it past
    MAX_YAML_NODES nodes, or refer to themselves; returns the composed node graph (None for an empty document).
    Every YAML file ablate reads passes here first: recipes, option files, sweep files and SLURM profiles.
    Raises yaml.YAMLError for text that is not YAML (the callers say so in their own words)."""
    import yaml

    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise UserError(f"{where}: YAML nested too deeply to read") from None
    if root is None:
        return None
    distinct: set[int] = set()
    todo = [root]
    while todo:  # the nodes as written
        n = todo.pop()
        if id(n) in distinct:
            continue
        distinct.add(id(n))
        todo.extend(_children(n))
    cap = len(distinct) + MAX_YAML_NODES
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(n: Any) -> int:  # nodes after expansion, memoised per alias target, counted no further than cap
        k = id(n)
        if k in memo:
            return memo[k]
        if k in active:
            raise UserError(f"{where}: a YAML alias refers to the node that holds it; write the value out")
        active.add(k)
        total = 1
        for c in _children(n):
            total += size(c)
            if total > cap:
                break
        active.discard(k)
        memo[k] = min(total, cap + 1)
        return memo[k]

    try:
        expanded = size(root)
    except RecursionError:
        raise UserError(f"{where}: YAML nested too deeply to read") from None
    if expanded > cap:
        raise UserError(f"{where}: its YAML aliases (*name) expand it past {MAX_YAML_NODES:,} more nodes than it "
                        "holds; write the values out instead of repeating anchors")
    return root


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def _check_recipe_file(path: Path, data: bytes) -> None:
    """A recipe file of the folder Hydra composes from: no alias bomb, no `hydra:` settings, and no string anywhere
    in it (a defaults list, an option no arm uses) whose interpolations are refused. A file that is not YAML is left
    to Hydra, which says so if it reads it."""
    import yaml

    digest = hashlib.sha256(str(path).encode() + b"\0" + data).digest()
    if digest in Composer._checked:
        return
    try:
        root = check_yaml(data.decode("utf-8"), str(path))
    except (yaml.YAMLError, UnicodeDecodeError):
        return
    hydra_node = isinstance(root, yaml.MappingNode) and any(k.value == "hydra" for k, _ in root.value)
    if hydra_node or re.search(r"^#\s*@package\s+.*\bhydra\b", data.decode("utf-8"), re.M):
        raise UserError(f"{path}: sets Hydra's own config (`hydra:`, e.g. a searchpath that would compose files from "
                        "anywhere); ablate composes recipes from this folder only: drop it")
    todo = [root] if root is not None else []
    seen: set[int] = set()
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.ScalarNode) and isinstance(n.value, str):
            problem = interpolation_problem(n.value)
            if problem:
                raise UserError(f"{path}:{n.start_mark.line + 1}: {n.value!r} {problem}; {_ONLY_KEYS}")
        todo.extend(_children(n))
    Composer._checked.add(digest)


def _cache_dir() -> Path:
    d = store.cache_dir() / "compose"
    try:
        store.make_dirs(store.cache_dir(), store.DIR_MODE)  # owner-only whatever the umask, the cache too
        store.make_dirs(d, store.DIR_MODE)
    except OSError:
        pass
    return d


def _read_private(path: Path) -> dict[str, Any] | None:
    """A cache entry, only if this user owns it and no one else can write it or its folder (`store.private_ok`);
    else None."""
    if not store.private_ok(path):
        return None
    try:
        data = store.read_json(path)
    except (OSError, ValueError, RecursionError):  # a torn or damaged entry is a cache miss
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def hydra_context(recipes_dir: Path) -> Iterator[Composer]:
    """A Hydra compose context on `recipes_dir`, with the schema's defaults registered as `ablate_schema`."""
    from hydra import initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    ConfigStore.instance().store(name=SCHEMA_CONFIG, node=schema.defaults_tree())
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(recipes_dir.resolve()), version_base=None):
            yield Composer(recipes_dir.resolve())
    finally:
        GlobalHydra.instance().clear()


def load_yaml(path: Path) -> dict[str, Any]:
    """A recipe or sweep file as plain containers; UserError when it is missing, not YAML or not a mapping."""
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
        check_yaml(text, str(path))  # before OmegaConf expands any alias
        data = OmegaConf.to_container(OmegaConf.load(io.StringIO(text)), resolve=False)
    except UserError:
        raise
    except Exception as e:  # yaml.YAMLError, omegaconf errors, UnicodeDecodeError
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level")
    problem = _interpolation_problems(data)  # a sweep file's grid, runs and overrides are recipes too
    if problem:
        raise UserError(f"{path}: {problem}")
    return data


def is_recipe(path: Path | str) -> bool:
    """A recipe has a Hydra `defaults:` list (base.yaml); a sweep file does not."""
    return "defaults" in load_yaml(Path(path))


def compose_run(recipe_path: Path | str, overrides: Sequence[str] = ()) -> RunConfig:
    """The resolved, validated config of one run.

    `recipe_path` is a recipe (e.g. recipes/base.yaml) or a sweep file; a sweep file must narrow to exactly one
    run with the overrides (e.g. `recipes/loss.yaml loss=dapo`). Raises UserError / ConfigErrors.
    """
    path = Path(recipe_path)
    if not is_recipe(path):
        from ablate.sweep import load_sweep

        sweep = load_sweep(path, overrides)
        if len(sweep.runs) != 1:
            labels = ", ".join(r.label for r in sweep.runs[:6]) + (", ..." if len(sweep.runs) > 6 else "")
            raise UserError(f"{path} expands to {len(sweep.runs)} runs ({labels}); pick one with overrides, "
                            f"e.g. {sweep.runs[0].label.replace(',', ' ')}")
        return sweep.runs[0].config
    parsed = parse_overrides(overrides, str(path))
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    if sweeps:
        raise UserError(f"{sweeps[0]}: a sweep value; one run takes one value per key (sweeps go to `ablate sweep`)")
    with hydra_context(path.parent) as hc:
        try:
            raw = hc.compose(path.stem, list(overrides))
        except ComposeError as e:
            msg = hc.explain_missing_key(path.stem, overrides, e.key) if e.key else str(e)
            raise ConfigErrors([msg]) from None
    return schema.validate(raw)

"""Recipes: compose one run's config with Hydra's compose API, on top of the schema's defaults.

    compose_run(recipe, overrides) -> RunConfig    one resolved, validated run (`ablate show`, `ablate train`)
    Composer(recipes_dir).compose(name, overrides) the raw composed dict (sweep.py expands sweeps with it)

The schema's defaults (config.defaults_tree) are registered in Hydra's ConfigStore as the config `ablate_schema`,
and a recipe's defaults list starts with it (recipes/base.yaml does), so a recipe states only what differs from
the schema and `key=value` works for every schema key. Only public Hydra APIs are used: the compose API, the
ConfigStore and the override parser.

What a recipe may interpolate: other keys of the same config (`${batch.prompts}`), resolved when the config is
composed, so config.yaml holds plain values. Resolvers (`${oc.env:HOME}`, `${oc.decode:...}`, any `${name:...}`)
are refused: a stored config must not carry the environment of the machine that composed it.

Composition costs ~0.1 s and a no-op `ablate sweep` re-run composes every arm again, so composed configs are
cached, in memory and on disk, keyed by the recipe files' contents, the schema's defaults and the overrides. The
disk cache is private to its user: an entry is used only if this user owns it and nobody else can write it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from omegaconf import OmegaConf

from ablate import config as schema
from ablate import store
from ablate.config import ConfigErrors, RunConfig, closest
from ablate.errors import UserError

SCHEMA_CONFIG = "ablate_schema"
_RESOLVER = re.compile(r"\$\{\s*[\w.-]+\s*:")


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
            out.extend(parser.parse_overrides([o]))
        except HydraException as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(f"{where}: cannot parse override {o!r} ({first}); the grammar is Hydra's: key=value, "
                            "key=a,b,c, key=range(1,4), key=choice(a,b)") from None
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


def sweep_values(o: Any) -> list[str]:
    """A sweep override (`a,b`, `range(..)`, `choice(..)`) as its values, each as canonical override text."""
    key = o.get_key_element()
    return [value_text(parse_overrides([f"{key}={v}"], "sweep")[0]) for v in o.sweep_string_iterator()]


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

    def __init__(self, recipes_dir: Path) -> None:
        self.dir = recipes_dir
        self.groups = recipe_groups(recipes_dir)
        h = hashlib.sha256(json.dumps(schema.defaults_tree(), sort_keys=True).encode())
        for p in sorted(recipes_dir.rglob("*.yaml")):
            h.update(str(p.relative_to(recipes_dir)).encode() + b"\0" + p.read_bytes() + b"\0")
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
        _refuse_resolvers(OmegaConf.to_container(raw, resolve=False), "")
        try:
            return OmegaConf.to_container(raw, resolve=True)
        except Exception as e:  # an interpolation of a key that does not exist
            raise ComposeError(f"cannot resolve an interpolation: {str(e).splitlines()[0]}") from None

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


def _refuse_resolvers(node: Any, where: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _refuse_resolvers(v, f"{where}.{k}" if where else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _refuse_resolvers(v, f"{where}[{i}]")
    elif isinstance(node, str) and _RESOLVER.search(node):
        raise ComposeError(f"{where}: {node!r} calls a resolver; recipes may interpolate other keys (${{batch.prompts}}) "
                           "but not resolvers such as ${oc.env:...}: write the value itself")


def _cache_dir() -> Path:
    d = store.cache_dir() / "compose"
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        pass
    return d


def _read_private(path: Path) -> dict[str, Any] | None:
    """A cache entry, only if this user owns it and no one else can write it or its folder; else None."""
    try:
        for p in (path.parent, path):
            st = p.stat()
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                return None
        data = store.read_json(path)
    except (OSError, ValueError):
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
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception as e:  # yaml.YAMLError, omegaconf errors, UnicodeDecodeError
        raise UserError(f"{path}: not valid YAML ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level")
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

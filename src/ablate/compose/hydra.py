"""Composing recipes: one recipes folder inside one Hydra context, on top of the schema's defaults.

The schema's defaults (`defaults_tree`) are registered in Hydra's ConfigStore as the config `ablate_schema`,
and a recipe's defaults list starts with it (recipes/base.yaml does), so a recipe states only what differs from
the schema and `key=value` works for every schema key. Hydra's public APIs do the work (the compose API, the
ConfigStore and the override parser); what a recipe may interpolate is checked first (ablate.compose.safe_yaml).

Composition costs ~0.1 s and a no-op `ablate sweep` re-run composes every arm again, so composed configs are
cached, in memory and on disk, keyed by the recipe files' contents, the schema's defaults and the overrides. The
disk cache is private to its user: an entry is used only if this user owns it and nobody else can write it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, cast

from omegaconf import OmegaConf

from ablate.compose import destinations as choice
from ablate.compose.overrides import override_key, parse_overrides
from ablate.compose.safe_yaml import (
    ONLY_KEYS,
    check_recipe_file,
    interpolation_problems,
    leaves_folder,
    no_resolvers,
    strings,
)
from ablate.config import schema
from ablate.config.schema import RunConfig, plain
from ablate.config.validation import closest, type_hints
from ablate.errors import ErrorKind, UserError
from ablate.storage import fs, ownership, store

SCHEMA_CONFIG = "ablate_schema"
_CACHE_VERSION = b"2"
"""Salts the compose cache key: entries composed by an older, laxer check are not reused."""


def defaults_tree(cls: type = RunConfig) -> dict[str, Any]:
    """The schema's non-null defaults as nested plain containers. Hydra composes recipes on top of this tree, so
    a recipe states only what differs from the schema and every schema key can be overridden. In a config group
    (a section with a `name` choice), null defaults are the options' parameters and are left out: only the option's
    own file brings them, so `loss.eps_max=4` with loss=dapo is a "not a parameter of loss=dapo" error, not a
    silently ignored value. Elsewhere (optim, train, ...) a null default is an ordinary optional value."""
    hints = type_hints(cls)
    group = any(f.name == "name" for f in dataclasses.fields(cls))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out[f.name] = defaults_tree(hints[f.name])
            continue
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value is not None or not group:
            out[f.name] = plain(value)
    return out


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

    _memory: ClassVar[dict[tuple, dict]] = {}

    def __init__(self, recipes_dir: Path) -> None:
        self.dir = recipes_dir
        self.groups = recipe_groups(recipes_dir)
        self._inside: set[tuple[str, ...]] = set()
        _refuse_links_out(recipes_dir)  # a linked folder's files would skip the check below, and Hydra reads them
        self.defaults = defaults_tree()
        h = hashlib.sha256(_CACHE_VERSION + json.dumps(self.defaults, sort_keys=True).encode())
        for p in sorted(recipes_dir.rglob("*.yaml")):
            data = p.read_bytes()
            check_recipe_file(p, data)  # before Hydra reads any of them
            h.update(str(p.relative_to(recipes_dir)).encode() + b"\0" + data + b"\0")
        self.fingerprint = h.hexdigest()

    def compose(self, name: str, overrides: Sequence[str]) -> dict[str, Any]:
        """The raw composed config (not yet validated) as plain containers; ComposeError explains a failure. The
        recipe is composed first without the tracker settings among `overrides`, which only the command line may
        give (ablate.compose.destinations): a recipe that chose a tracker or a destination itself is refused."""
        self.check_inside(name, overrides)
        own, track = choice.split(overrides)
        cfg = self._cached(name, own)
        problem = choice.recipe_problem(cfg, self.defaults, f"recipe {name!r} ({self.dir / name}.yaml)")
        if problem:
            raise ComposeError(problem)
        return self._cached(name, [*own, *track]) if track else cfg

    def _cached(self, name: str, overrides: Sequence[str]) -> dict[str, Any]:
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
            first = f"cannot compose with {list(overrides)}: {type(e).__name__}: {e}".splitlines()[0]
            raise ComposeError(first) from None
        problem = interpolation_problems(OmegaConf.to_container(raw, resolve=False))
        if problem:
            raise ComposeError(problem)
        try:
            with no_resolvers():
                cfg = OmegaConf.to_container(raw, resolve=True)
        except Exception as e:  # an interpolation of a key that does not exist
            raise ComposeError(f"cannot resolve an interpolation: {str(e).splitlines()[0]}") from None
        left = next(((w, v) for w, v in strings(cfg, "") if "${" in v), None)
        if left:  # text pieced together across keys into `${...}`: a later reader would resolve it
            raise ComposeError(f"{left[0]}: resolves to {left[1]!r}, which holds '${{'; {ONLY_KEYS}")
        return cast(dict[str, Any], cfg)  # a config composed from mappings is a mapping

    def check_inside(self, name: str, overrides: Sequence[str]) -> None:
        """Refuse, in one line, a recipe name or a config-group override whose option could name a file outside
        this folder (`loss=../../x`, `+../x=y`): Hydra would read it, unchecked
        (ablate.compose.safe_yaml.leaves_folder)."""
        if (name, *overrides) in self._inside:
            return
        if leaves_folder(name) or "/" in name:
            raise UserError(
                f"recipe {name!r}: not a recipe of {self.dir}; name a recipe file of that folder", kind=ErrorKind.RECIPE
            )
        for o in parse_overrides(overrides, "override"):
            group = o.key_or_group.lstrip("+~")
            value = o.value()
            values = getattr(value, "list", value if isinstance(value, list) else [value])  # a sweep's, a list's
            options = [v for v in values if isinstance(v, str)]
            if leaves_folder(group) or ((self.dir / group).is_dir() and any(leaves_folder(v) for v in options)):
                known = ", ".join(self.groups.get(group, [])) or "none"
                raise UserError(
                    f"{o.input_line}: names a file outside the recipes folder {self.dir}; name an option of "
                    f"recipes/{group}/ ({known})",
                    kind=ErrorKind.RECIPE,
                )
        self._inside.add((name, *overrides))

    def _explain_missing(self, text: str) -> str:
        m = re.search(r"Could not find '([^'/]+)/([^']+)'", text)
        if m and m.group(1) in self.groups:
            group, option = m.group(1), m.group(2)
            opts = self.groups[group]
            return (
                f"{group}={option}: no such option{closest(option, opts)}; options: {', '.join(opts)} "
                f"(recipes/{group}/)"
            )
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
        return [
            o for o in self.groups.get(group, []) if param in (OmegaConf.load(self.dir / group / f"{o}.yaml") or {})
        ]

    def explain_missing_key(self, name: str, overrides: Sequence[str], key: str) -> str:
        """Why `key` cannot be overridden: not a parameter of the arm's option, or unknown (with a suggestion)."""
        head, _, param = key.partition(".")
        if param and key in schema.all_keys() and head in self.groups:
            others = [o for o in overrides if override_key(parse_overrides([o], "override")[0]) != key]
            option = self.option_of(name, others, head)
            own = (
                [str(k) for k in (OmegaConf.load(self.dir / head / f"{option}.yaml") or {}) if k != "name"]
                if option in self.groups[head]
                else []
            )
            having = self.options_with(head, param)
            fix = f"use it with {head}={'|'.join(having)}" if having else "drop it"
            return f"{key}: not a parameter of {head}={option} (its parameters: {', '.join(own) or 'none'}); {fix}"
        return f"{key}: unknown key{closest(key, schema.all_keys())}"


def _refuse_links_out(recipes_dir: Path) -> None:
    """Refuse, in one line, a link inside the recipes folder to a folder or a YAML file outside it (or a YAML link
    that cannot be resolved): Hydra would read YAML through it. Links to other files (a venv's python) are not read."""
    top = recipes_dir.resolve()
    for folder, dirs, files in os.walk(top):  # does not descend into linked folders: each is checked here
        for entry in (Path(folder) / n for n in (*dirs, *files)):
            if not entry.is_symlink() or not (entry.suffix == ".yaml" or entry.is_dir()):
                continue
            try:
                inside = entry.resolve(strict=True).is_relative_to(top)
            except (OSError, RuntimeError):  # dangling, or a loop
                inside = False
            if not inside:
                raise UserError(
                    f"{entry}: a link to {os.readlink(entry)}, outside the recipes folder {top} (or broken); "
                    "copy the file into the folder instead",
                    kind=ErrorKind.FILE,
                )


def _cache_dir() -> Path:
    d = fs.cache_dir() / "compose"
    try:
        fs.make_dirs(fs.cache_dir(), fs.DIR_MODE)  # owner-only whatever the umask, the cache too
        fs.make_dirs(d, fs.DIR_MODE)
    except OSError:
        pass
    return d


def _read_private(path: Path) -> dict[str, Any] | None:
    """A cache entry, only if this user owns it and no one else can write it or its folder (`ownership.private_ok`);
    else None."""
    if not ownership.private_ok(path):
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

    ConfigStore.instance().store(name=SCHEMA_CONFIG, node=defaults_tree())
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(recipes_dir.resolve()), version_base=None):
            yield Composer(recipes_dir.resolve())
    finally:
        GlobalHydra.instance().clear()

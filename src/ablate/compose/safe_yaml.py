"""Reading recipe and sweep YAML safely: what a recipe may interpolate, and how large a YAML file may expand.

Recipes are data. What a recipe may interpolate: other keys of the same config by a literal name (`${batch.prompts}`,
`${..x}`), resolved when the config is composed, so config.yaml holds plain values. Anything else is refused, read
with OmegaConf's own grammar rather than a pattern: resolvers (`${oc.env:HOME}`, `${oc.decode:...}`, any
`${name:...}`, however the name is built: `${${x}:HOME}`), keys built from other interpolations (`${a.${b}}`) and
escaped interpolations (`\\${...}`, which would leave `${` in config.yaml for a later reader to resolve). Every
recipe file of the folder is checked before Hydra reads any (a resolver in a defaults list or an unused option
too), sweep files when they are read, and the composed config -- command-line overrides included -- before it is
resolved, with every resolver unregistered while it is (`no_resolvers`, which reaches into OmegaConf's resolver
registry as no public API offers it). A stored config must not carry the environment of the machine that composed it.

YAML files are parsed without expanding anchors first (`check_yaml`): aliases that would expand a file past
MAX_YAML_NODES nodes (a "billion laughs" alias bomb) are refused before OmegaConf, Hydra or PyYAML builds them.
The threats and their tests: docs/security.md.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from omegaconf import OmegaConf

from ablate.errors import ErrorKind, UserError

_CHECKED: set[bytes] = set()
"""Digests of recipe files that passed `check_recipe_file` in this process."""

MAX_YAML_NODES = 10_000
"""The most nodes a YAML file that uses aliases may expand to. The shipped files use none and hold a few hundred
nodes; OmegaConf builds ~10k nodes in well under a second and a few tens of MB, while nine levels of ten aliases
(a billion laughs) would be 10^9 nodes. A file without aliases is as large as it is written and is not limited."""

ONLY_KEYS = (
    "recipes may interpolate other keys by name (${batch.prompts}) but not call resolvers such as "
    "${oc.env:...}: write the value itself"
)


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
    allowed = (
        G.ConfigValueContext,
        G.TextContext,
        G.InterpolationContext,
        G.InterpolationNodeContext,
        G.ConfigKeyContext,
    )
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


def strings(node: Any, where: str) -> Iterator[tuple[str, str]]:
    """(dotted place, value) of every string in plain containers."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from strings(v, f"{where}.{k}" if where else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from strings(v, f"{where}[{i}]")
    elif isinstance(node, str):
        yield where, node


def interpolation_problems(node: Any, where: str = "") -> str | None:
    """The first string of plain containers whose interpolations are refused, as a message; None when all pass."""
    for w, v in strings(node, where):
        problem = interpolation_problem(v)
        if problem:
            return f"{w}: {v!r} {problem}; {ONLY_KEYS}"
    return None


@contextmanager
def no_resolvers() -> Iterator[None]:
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
        raise UserError(f"{where}: YAML nested too deeply to read", kind=ErrorKind.FILE) from None
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
            raise UserError(
                f"{where}: a YAML alias refers to the node that holds it; write the value out", kind=ErrorKind.FILE
            )
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
        raise UserError(f"{where}: YAML nested too deeply to read", kind=ErrorKind.FILE) from None
    if expanded > cap:
        raise UserError(
            f"{where}: its YAML aliases (*name) expand it past {MAX_YAML_NODES:,} more nodes than it "
            "holds; write the values out instead of repeating anchors",
            kind=ErrorKind.FILE,
        )
    return root


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    return []


def leaves_folder(name: str) -> bool:
    """Whether a config name or group path, as a defaults entry or a config-group override names it, could name a
    file outside the recipes folder: a `..` component, an absolute path (past the one leading `/` that means the
    folder's top in a defaults list), a backslash, or an interpolation (a path put together later)."""
    body = name[1:] if name.startswith("/") else name
    return body.startswith("/") or any(c in body for c in ("\\", "${", "\0")) or ".." in body.split("/")


def _defaults_problem(path: Path, root: Any) -> str | None:
    """The first entry of a recipe's defaults list (`- loss: cispo`, `- override /model: hf`, `- ablate_schema`) whose
    group or option could name a file outside the recipes folder, as a message; None when all stay inside."""
    import yaml

    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if key.value != "defaults" or not isinstance(value, yaml.SequenceNode):
            continue
        for entry in value.value:
            pairs = entry.value if isinstance(entry, yaml.MappingNode) else [(entry, None)]
            for k, v in pairs:
                group = str(k.value).split()[-1].split("@")[0] if isinstance(k, yaml.ScalarNode) else ""
                options = [v] if isinstance(v, yaml.ScalarNode) else list(getattr(v, "value", None) or [])
                names = [group] + [str(o.value) for o in options if isinstance(o, yaml.ScalarNode)]
                bad = next((n for n in names if leaves_folder(n)), None)
                if bad is not None:
                    return (
                        f"{path}:{entry.start_mark.line + 1}: defaults entry {bad!r} names a file outside the recipes "
                        "folder; name a recipe of this folder or an option of its groups (no '..', no absolute path)"
                    )
    return None


def check_recipe_file(path: Path, data: bytes) -> None:
    """A recipe file of the folder Hydra composes from: no alias bomb, no `hydra:` settings, no defaults entry that
    names a file outside the folder (`- loss: ../../x`), and no string anywhere in it (a defaults list, an option no
    arm uses) whose interpolations are refused. A file that is not YAML is left to Hydra, which says so if it reads
    it."""
    import yaml

    digest = hashlib.sha256(str(path).encode() + b"\0" + data).digest()
    if digest in _CHECKED:
        return
    try:
        root = check_yaml(data.decode("utf-8"), str(path))
    except (yaml.YAMLError, UnicodeDecodeError):
        return
    hydra_node = isinstance(root, yaml.MappingNode) and any(k.value == "hydra" for k, _ in root.value)
    if hydra_node or re.search(r"^#\s*@package\s+.*\bhydra\b", data.decode("utf-8"), re.M):
        raise UserError(
            f"{path}: sets Hydra's own config (`hydra:`, e.g. a searchpath that would compose files from "
            "anywhere); ablate composes recipes from this folder only: drop it",
            kind=ErrorKind.RECIPE,
        )
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
                raise UserError(
                    f"{path}:{n.start_mark.line + 1}: {n.value!r} {problem}; {ONLY_KEYS}", kind=ErrorKind.RECIPE
                )
        todo.extend(_children(n))
    outside = _defaults_problem(path, root)
    if outside:
        raise UserError(outside, kind=ErrorKind.RECIPE)
    _CHECKED.add(digest)


def load_yaml(path: Path) -> dict[str, Any]:
    """A recipe or sweep file as plain containers; UserError when it is missing, not YAML or not a mapping."""
    if not path.is_file():
        raise UserError(f"{path}: no such file", kind=ErrorKind.FILE)
    try:
        text = path.read_text(encoding="utf-8")
        check_yaml(text, str(path))  # before OmegaConf expands any alias
        data = OmegaConf.to_container(OmegaConf.load(io.StringIO(text)), resolve=False)
    except UserError:
        raise
    except Exception as e:  # yaml.YAMLError, omegaconf errors, UnicodeDecodeError
        raise UserError(
            f"{path}: not valid YAML ({str(e).splitlines()[0] if str(e) else type(e).__name__})", kind=ErrorKind.FILE
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level", kind=ErrorKind.RECIPE)
    problem = interpolation_problems(data)  # a sweep file's grid, runs and overrides are recipes too
    if problem:
        raise UserError(f"{path}: {problem}", kind=ErrorKind.RECIPE)
    return cast(dict[str, Any], data)  # YAML's keys as written (a sweep file's are names)

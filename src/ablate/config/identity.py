"""Identity of a run: the canonical text of its config, and the ids hashed from it.

    canonical(config)  -> str   sorted keys, numbers as floats (5 == 5.0, 1e-3 == 0.001; an integer no float
                                holds exactly, such as 2**53 + 1, as its digits), nulls dropped (a new
                                optional field keeps old ids), resource-only fields (`hash=False` in the schema,
                                the whole `launcher` section) left out, and so are fields marked
                                `hash="unless_default"` while at their default (trainer.name=ablate: the ids of
                                runs made before the field existed stay theirs)
    run_id(config)     -> str   12 hex digits of sha256(canonical): the same config gives the same id anywhere
    arm_id(config)     -> str   the same without the seed: runs that share it are seeds of one arm

Names that become paths are checked here too (`check_name`): run ids read back from a ledger, sweep names taken
from file names. Only letters, digits, `_` and `-` are allowed, so no name can climb out of the sweep root.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from ablate.errors import ErrorKind, UserError

ID_LEN = 12
_NAME = re.compile(r"[A-Za-z0-9_-]+")


def _plain(config: Any) -> dict[str, Any]:
    if hasattr(config, "to_dict"):  # a config.RunConfig
        return config.to_dict()
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"a run config is a RunConfig or a mapping, got {type(config).__name__}")


def _exact_float(n: int) -> bool:
    """Whether a float holds the integer `n` exactly."""
    try:
        return int(float(n)) == n
    except OverflowError:
        return False


def canonical_value(x: Any) -> Any:
    """A config value in the form ids hash: mappings sorted by key, nulls dropped, numbers as floats (5 == 5.0).

    An integer that no float holds exactly (2**53 + 1, 10**400) stays an integer: as a float it would round to a
    neighbour's value, and two configs would share an id. Every integer a float does hold exactly (all of them up
    to 2**53, and 10**18 == 1e18) hashes as that float, as every id did before this rule, so no id changes."""
    if isinstance(x, Mapping):
        return {str(k): canonical_value(v) for k, v in x.items() if v is not None}
    if isinstance(x, (list, tuple)):
        return [canonical_value(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int) and not _exact_float(x):
        return x  # json writes its exact digits, which no float's text is
    if isinstance(x, (int, float)):
        return float(x)  # json writes repr(float): one text per value
    return str(x)


def canonical(config: Any, *, seed: bool = True) -> str:
    """The canonical JSON text of a config that ids hash (see the module docstring)."""
    from ablate.config.schema import hashed_unless_default, unhashed_keys

    cfg = json.loads(json.dumps(canonical_value(_plain(config))))  # a deep copy of plain containers
    at_default = [k for k, default in hashed_unless_default() if _get(cfg, k) == canonical_value(default)]
    for dotted in [*unhashed_keys(), *at_default, *([] if seed else ["seed"])]:
        *parents, last = dotted.split(".")
        node: Any = cfg
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
            if not node and parents:  # a section left empty (trainer at its default) is as if it never existed
                _get(cfg, ".".join(parents[:-1])).pop(parents[-1])
    return json.dumps(cfg, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _get(cfg: dict[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for p in dotted.split(".") if dotted else []:
        node = node.get(p) if isinstance(node, dict) else None
    return node


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LEN]


def run_id(config: Any) -> str:
    """Short sha256 of the canonical resolved config."""
    return _hash(canonical(config))


def arm_id(config: Any) -> str:
    """`run_id` without the seed."""
    return _hash(canonical(config, seed=False))


def is_name(value: Any) -> TypeGuard[str]:
    """True for a non-empty string of letters, digits, `_` and `-` (safe as one path component)."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def check_name(value: Any, what: str, fix: str = "") -> str:
    """`value` if it is safe as one path component (see `is_name`), else a UserError naming `what` and the fix."""
    if not is_name(value):
        raise UserError(
            f"{what} {value!r}: use letters, digits, '_' and '-' only" + (f"; {fix}" if fix else ""),
            kind=ErrorKind.RECIPE,
        )
    return value


def label_seed(label: str) -> str | None:
    """The seed a run label names (`loss=dapo,seed=3` -> `3`; the last `seed=` part), or None when it names none.
    The one reader of the label grammar that ablate.compose.sweep writes (`<overrides>,seed=<n>`)."""
    seeds = [p.split("=", 1)[1].strip() for p in label.split(",") if p.strip().startswith("seed=")]
    return seeds[-1] if seeds else None


def label_arm(label: str) -> str:
    """A run label without its `seed=` part: the arm's name in `rank` (`base` when nothing else is left)."""
    return ",".join(p for p in label.split(",") if not p.strip().startswith("seed=")) or "base"

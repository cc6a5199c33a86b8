"""Every key of the run config as a reader needs it (`ablate show --keys`): its dotted name, type, default,
choices or bounds, and the doc line the schema declares it with (ablate.config.validation.schema_field)."""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from ablate.config.schema import RunConfig
from ablate.config.validation import closest, type_hints
from ablate.errors import ErrorKind, UserError

BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


@dataclass(frozen=True)
class Key:
    """One leaf of the schema."""

    name: str
    """Dotted, as an override names it (`loss.eps_max`)."""
    type: str
    default: Any
    choices: tuple[Any, ...] | None
    bounds: str
    """`> 0, < 1`, or '' when none."""
    doc: str
    in_id: bool
    """Whether the key is part of a run's id (launcher, resources, setup and track are not)."""


def keys(under: str | None = None) -> list[Key]:
    """The schema's keys in declaration order; `under`: only a section's (`loss`) or one key (`loss.eps_max`), else
    a UserError naming the closest."""
    found = list(_walk(RunConfig, "", True))
    if not under:
        return found
    chosen = [k for k in found if k.name == under or k.name.startswith(f"{under}.")]
    if not chosen:
        sections = sorted({k.name.split(".")[0] for k in found})
        raise UserError(
            f"--keys {under!r}: no such section or key{closest(under, [k.name for k in found] + sections)}; "
            f"sections: {', '.join(sections)}",
            kind=ErrorKind.SETTING,
        )
    return chosen


def _walk(cls: type, prefix: str, hashed: bool):
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        in_id = hashed and f.metadata.get("hash", True) is not False
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _walk(hints[f.name], f"{name}.", in_id)
            continue
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[operator]
        bounds = ", ".join(f"{sign} {_number(f.metadata[k])}" for k, sign in BOUNDS if k in f.metadata)
        hint = hints[f.name]
        kind = hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
        yield Key(name, kind, default, f.metadata.get("choices"), bounds, f.metadata.get("doc", ""), in_id)


def _number(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_.+-]{1,64}$")
"""A value a carried override may hold: a name, a number or a boolean. No `/`, `:` or `~` (a file or a server),
no `,`, `(` or `[` (a sweep or a list), no `{` or `$` (a whole section, an interpolation), no quote or space."""
NEVER_CARRIED = ("url", "server", "path", "dir", "file", "endpoint", "host", "port")
"""Words in a key that name where something is read from or sent to: never carried, whatever the value."""


def carried(override: str) -> bool:
    """Whether an override read from a file another user may have written (a sweep's ledger) may be repeated in a
    command ablate prints for the user to paste: a key that is part of a run's id (a recipe group such as `loss`,
    or one of the schema's keys such as `optim.lr`) set to a plain value, and nothing that names where data is
    read from or sent to. Trackers, launchers and resources are never part of a run's id."""
    key, eq, value = override.partition("=")
    if not eq or not PLAIN_VALUE.match(value) or any(w in key.lower() for w in NEVER_CARRIED):
        return False
    return key in _id_keys()


@functools.cache
def _id_keys() -> frozenset[str]:
    """The keys of a run's id, and the recipe groups (sections) they belong to: the schema is fixed."""
    in_id = {k.name for k in keys() if k.in_id}
    return frozenset(in_id | {name.split(".")[0] for name in in_id if "." in name})

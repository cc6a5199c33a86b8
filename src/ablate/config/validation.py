"""The generic checks behind `config.validate`: types and rules (choices, ge/gt/le/lt) from a dataclass schema's
field metadata. Every problem is collected (one line each, naming the key and the fix) so that a sweep reports all
its mistakes at once; the rules across keys are the caller's (ablate.config.combinations for the run config).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

INT_MAX = 2**62  # any integer field: far beyond any sane value, within every library's int64


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """typing.get_type_hints, cached: the schema is fixed and every validation walks it."""
    return typing.get_type_hints(cls)


def schema_field(default: Any = None, doc: str = "", *, factory: Any = None, **rules: Any) -> Any:
    """A dataclass field whose metadata holds its doc line and the rules this module checks (choices, ge, gt, le, lt)
    and whether ablate.config.identity hashes it (hash)."""
    meta = {"doc": doc, **rules}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def closest(name: str, candidates: list[str] | tuple[str, ...]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, or '' when none is close."""
    hit = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {hit[0]!r}?)" if hit else ""


def check_config(cls: type, data: Any, combinations: Callable[[dict[str, Any]], list[str]]) -> tuple[Any, list[str]]:
    """`data` (plain containers or an OmegaConf config) checked against the dataclass `cls`, completed with its
    defaults: (the instance, []) when it is valid, else (None, every problem). `combinations` judges the checked
    fields as a whole (rules no single field can), returning its problems."""
    if OmegaConf.is_config(data):
        data = OmegaConf.to_container(data, resolve=True)
    if not isinstance(data, dict):
        return None, [f"a run config must be a mapping of sections, got {type(data).__name__}"]
    errors: list[str] = []
    checked = _check_section(cls, data, "", errors)
    with contextlib.suppress(KeyError, TypeError, AttributeError):  # a field they read is invalid: reported above
        errors.extend(combinations(checked))
    return (None, errors) if errors else (_build(cls, checked), [])


def _build(cls: type, data: dict[str, Any]) -> Any:
    """The dataclass instance of a checked section (nested sections built first)."""
    hints = type_hints(cls)
    kw = {k: _build(hints[k], v) if dataclasses.is_dataclass(hints[k]) else v for k, v in data.items()}
    return cls(**kw)


def _check_section(cls: type, data: Any, prefix: str, errors: list[str]) -> dict[str, Any]:
    """Type- and range-check one dataclass section; append problems to `errors`; return the completed section."""
    where = prefix.rstrip(".") or "the config"
    if not isinstance(data, dict):
        errors.append(f"{where}: expected a mapping of {cls.__name__} fields, got {data!r}")
        return {}
    hints = type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            errors.append(
                f"{prefix}{key}: unknown key{closest(str(key), list(fields))}; valid keys in {where}: "
                f"{', '.join(fields)}"
            )
    out: dict[str, Any] = {}
    for name, f in fields.items():
        key = prefix + name
        if dataclasses.is_dataclass(hints[name]):
            out[name] = _check_section(hints[name], data.get(name, {}), key + ".", errors)
            continue
        if name not in data:
            out[name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            continue
        try:
            value = _coerce(data[name], hints[name])
        except TypeError:
            errors.append(f"{key}: expected {_type_name(hints[name])}, got {_short(data[name])}")
            continue
        out[name] = value
        problem = _check_rules(value, f.metadata)
        if problem:
            errors.append(f"{key}: {problem}")
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _coerce(value: Any, tp: Any) -> Any:
    """`value` as type `tp` (int, float, str, bool, X | None, tuple[x, ...]); TypeError when it is not one.

    Strict on purpose (no "5" -> 5): Hydra overrides and YAML already give typed values, so a string where a
    number belongs is a mistake to report. The one widening is int -> float, so that eps_max=5 means 5.0.
    """
    args = typing.get_args(tp)
    if _is_union(tp):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is not type(None):
                try:
                    return _coerce(value, a)
                except TypeError:
                    pass
        raise TypeError
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError
        return tuple(_coerce(v, args[0]) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer too large for a float
                raise TypeError from None
    elif tp is str and isinstance(value, str):
        return value
    raise TypeError


def _is_union(tp: Any) -> bool:
    """`X | None` (PEP 604) as well as `Optional[X]` / `Union[...]`: the schema may write either."""
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _type_name(tp: Any) -> str:
    args = typing.get_args(tp)
    if _is_union(tp) and type(None) in args:
        return " or ".join(_type_name(a) for a in args if a is not type(None)) + " or null"
    if typing.get_origin(tp) is tuple:
        return f"a list of {_type_name(args[0])}" if args else "a list"
    return getattr(tp, "__name__", str(tp))


def _check_rules(value: Any, meta: Any) -> str | None:
    """The first broken rule of a field's metadata (choices, ge, gt, le, lt) as a message, or None. Every number
    must be finite and every integer within INT_MAX, whatever the field's own rules."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if isinstance(value, tuple):
        return next((p for p in (_check_rules(v, {}) for v in value) if p), None)
    allowed = meta.get("choices")
    if allowed and value not in allowed:
        return f"{value!r} is not an option{closest(str(value), allowed)}; options: {', '.join(allowed)}"
    for rule, ok, word in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        if rule in meta and isinstance(value, (int, float)) and not ok(value, meta[rule]):
            return f"must be {word} {meta[rule]}, got {_short(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
        return f"must be at most {INT_MAX:.2e} in size, got {_short(value)}"
    return None

"""The override grammar: Hydra's parser reads `key=value` overrides and sweeps (`a,b`, `range(..)`, `choice(..)`).

Sweeps are counted before they are expanded, so an oversized or unsupported one is a one-line error, not a hang.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from ablate.errors import ErrorKind, UserError

MAX_RUNS = 10_000
"""The most runs a sweep may expand to. A run costs a config composition (~0.1 s uncached), a run directory and a
ledger line; the shipped sweeps have at most a few dozen. `seed=range(0,100000000)` is refused before expanding."""


def parse_overrides(overrides: Sequence[str], where: str) -> list[Any]:
    """Hydra `Override` objects; a grammar error becomes a one-line UserError naming the override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    out = []
    for o in overrides:
        if not isinstance(o, str):
            raise UserError(f"{where}: override {o!r} is not a 'key=value' string", kind=ErrorKind.RECIPE)
        try:
            parsed = parser.parse_overrides([o])
        except HydraException as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(
                f"{where}: cannot parse override {o!r} ({first}); the grammar is Hydra's: key=value, "
                "key=a,b,c, key=range(1,4), key=choice(a,b)",
                kind=ErrorKind.RECIPE,
            ) from None
        for p in parsed:
            if p.is_hydra_override():  # hydra.searchpath would compose files from anywhere, unchecked
                raise UserError(
                    f"{where}: {o!r} sets Hydra's own config; ablate composes recipes from the "
                    "recipe's folder only: drop it",
                    kind=ErrorKind.RECIPE,
                )
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


SUPPORTED_SWEEPS = (
    "a,b,c, choice(a,b), range(start,stop[,step]) with a nonzero step, "
    "each optionally in sort(...), shuffle(...) or tag(...)"
)


def sweep_size(o: Any) -> int:
    """How many values a sweep override expands to, counted without expanding it; a UserError naming the override
    for a sweep that does not expand to a finite list of runs (interval, glob) or a range that is empty or steps 0."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep, Sweep

    v = o.value()
    if isinstance(v, ChoiceSweep):
        if not v.list:
            raise UserError(
                f"{o.input_line}: a sweep of no values; supported: {SUPPORTED_SWEEPS}", kind=ErrorKind.RECIPE
            )
        if any(isinstance(x, Sweep) for x in v.list):
            raise UserError(
                f"{o.input_line}: a sweep inside a sweep; list the values in one: {SUPPORTED_SWEEPS}",
                kind=ErrorKind.RECIPE,
            )
        return len(v.list)
    if isinstance(v, RangeSweep) and v.start is not None and v.stop is not None:
        try:  # exact values, as Hydra's own float range steps through them
            start, stop, step = Decimal(v.start), Decimal(v.stop), Decimal(v.step)
        except (ArithmeticError, TypeError, ValueError):
            start = stop = step = Decimal(0)
        if step.is_finite() and step != 0 and start.is_finite() and stop.is_finite():
            n = max(0, math.ceil((stop - start) / step))
            if n == 0:
                raise UserError(
                    f"{o.input_line}: an empty range (no value from {v.start} to {v.stop} by {v.step}); "
                    "e.g. range(0,3) is 0,1,2",
                    kind=ErrorKind.RECIPE,
                )
            return n
        raise UserError(
            f"{o.input_line}: a range needs finite bounds and a nonzero step; e.g. range(0,3) is 0,1,2",
            kind=ErrorKind.RECIPE,
        )
    what = type(v).__name__.replace("Sweep", "").lower() if v is not None else "this"
    raise UserError(
        f"{o.input_line}: {'an' if what[0] in 'aeiou' else 'a'} {what} sweep does not expand to a list "
        f"of runs; supported: {SUPPORTED_SWEEPS}",
        kind=ErrorKind.RECIPE,
    )


def check_runs(n: int, what: str) -> None:
    """Refuse a sweep of more than MAX_RUNS runs before anything is expanded."""
    if n > MAX_RUNS:
        count = f"{n:,}" if n < 10**12 else f"about {n:.1e}"
        raise UserError(
            f"{what} expands to {count} runs, more than the {MAX_RUNS:,} a sweep may have; "
            "narrow its axes or seeds (or split it into several sweeps)",
            kind=ErrorKind.RECIPE,
        )


def sweep_values(o: Any) -> list[str]:
    """A sweep override (`a,b`, `range(..)`, `choice(..)`) as its values, each as canonical override text.
    Counted first (`sweep_size`): an unsupported or oversized sweep is one UserError, not a traceback or a hang."""
    from hydra.errors import HydraException

    check_runs(sweep_size(o), o.input_line)
    key = o.get_key_element()
    try:
        texts = list(o.sweep_string_iterator())
    except (HydraException, ValueError, TypeError, ArithmeticError) as e:
        raise UserError(
            f"{o.input_line}: cannot expand ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
            f"supported: {SUPPORTED_SWEEPS}",
            kind=ErrorKind.RECIPE,
        ) from None
    return [value_text(parse_overrides([f"{key}={v}"], "sweep")[0]) for v in texts]

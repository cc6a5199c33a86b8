"""The number formats of every table: plain values, value ± half-width, compact k/M/G, intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence


def num(v: float | None, digits: int = 3) -> str:
    """A value for a table: `—` when missing or not finite, thousands separated, fewer decimals as it grows."""
    if v is None or not math.isfinite(v):
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def fmt_pm(v: float | None, ci: Sequence[float] | None, digits: int = 3) -> str:
    """`value ±half-width` of the interval (the exact interval is in --json)."""
    if ci is None or v is None or not math.isfinite(v):
        return num(v, digits)
    half = (ci[1] - ci[0]) / 2.0
    return f"{num(v, digits)} ±{num(half, digits)}"


def compact(x: float) -> str:
    """Three significant digits with a k/M/G suffix: 97.1k, 450k, 256M, 0.00312."""
    if not math.isfinite(x):
        return "—"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def fmt_range(v: float | None, ci: Sequence[float] | None) -> str:
    """`value [lo, hi]` in compact numbers: for C_mid, whose interval is skewed and can span decades, where a
    symmetric ± would mislead."""
    if v is None or not math.isfinite(v):
        return num(v)
    if ci is None:
        return compact(v)
    return f"{compact(v)} [{compact(ci[0])}, {compact(ci[1])}]"


def short(x: float) -> str:
    """Two significant digits with a k/M/G suffix, never in e-notation: 2.5k, 450k, 16M, 0.16 (an interval's ends
    in the rank table, where the value itself keeps three: fmt_range)."""
    if not math.isfinite(x):
        return "—"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(x) >= 0.9995 * scale:  # 999.6 is 1k, not 1000
            v = x / scale
            return (f"{v:.0f}" if abs(v) >= 99.5 else f"{v:.2g}") + suffix
    return f"{x:.2g}"


def stacked(
    v: float | None, ci: Sequence[float] | None, digits: int = 3, *, skewed: bool = False, bound: float | None = None
) -> str:
    """A value over its interval, on two lines (± half-width; the ends for an interval `skewed` (C_mid) or one that
    reaches `bound`, as A's does when A is not measured): the rank table's numbers, kept narrow so that a row fits
    two lines at 120 columns."""
    if v is None or not math.isfinite(v) or ci is None:
        return compact(v) if skewed and v is not None else num(v, digits)
    if skewed:
        return f"{compact(v)}\n[{short(ci[0])}, {short(ci[1])}]"
    if bound is not None and ci[1] >= bound:  # opened up to the bound (A not measured): ± would hide which side
        return f"{num(v, digits)}\n[{short(ci[0])}, {short(ci[1])}]"
    return f"{num(v, digits)}\n±{num((ci[1] - ci[0]) / 2.0, digits)}"

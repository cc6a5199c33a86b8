"""How a compared arm's effect is put in words: the efficiency comparison, the short why cell, a compute value, and
whether an interval of a difference matters (`practical`). docs/verdicts.md says what the words mean."""

from __future__ import annotations

import numpy as np

from ablate.fit.arms import ArmResult


def efficiency_text(a: ArmResult) -> str:
    """The efficiency comparison in words: the compute ratio to three quarters of the gain tested (the seeds' mean
    log compute, where the arms have seeds; else the shared fit's) with its interval."""
    ci = None if a.shared is None else a.shared.compute_ratio_ci
    a_shared = float("nan") if a.shared is None else a.shared.A_shared
    return f"A shared {a_shared:.3f}: {tested_ratio(a):.2f}x compute to 3/4 of the gain" + (
        f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    )


def tested_ratio(a: ArmResult) -> float:
    """The compute ratio, arm to baseline, that the efficiency test read (the shared fit's where none was tested)."""
    return float("nan") if a.shared is None else float(a.shared.tested_ratio)


def short_effect(a: ArmResult, what: str) -> str:
    """The why cell (about 40 characters): the effect that decided, with its interval. `what`: ceiling, efficiency
    or both."""
    ci = a.delta_A_ci
    d_a = f"ΔA {a.delta_A:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
    rci = None if a.shared is None else a.shared.compute_ratio_ci
    ratio = tested_ratio(a)
    comp = (f"{ratio:.2f}x" if np.isfinite(ratio) else "—") + (f" [{rci[0]:.2f}, {rci[1]:.2f}]" if rci else "")
    if what == "ceiling":
        return d_a
    if what == "efficiency":
        return f"compute {comp}"
    if not ci:  # no seed spread: no intervals, the estimates only
        d_a, comp = f"ΔA {a.delta_A:+.3f}", f"{ratio:.2f}x" if np.isfinite(ratio) else "—"
    return f"{d_a}; compute {comp}"


def compute_text(x: float) -> str:
    """A compute value to read at a glance: 256,000 / 0.0312 / 1.6e+08."""
    return f"{x:,.0f}" if 1e3 <= x < 1e7 else f"{x:.3g}"


def practical(lo: float, hi: float, delta: float) -> str:
    """An interval [lo, hi] of a difference read against the smallest effect that matters, +-delta: `material`
    (wholly beyond it), `negligible` (wholly inside it) or `unclear`."""
    if lo > delta or hi < -delta:
        return "material"
    if lo >= -delta and hi <= delta:
        return "negligible"
    return "unclear"

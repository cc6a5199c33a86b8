"""Window sensitivity (`--window-sensitivity`): a fit refitted with its window cut short, and whether where the
window ends decides the answer. The JSON keys: docs/json.md (`window_sensitivity`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ablate.errors import Phrase, SettingError, UserError
from ablate.fit.analysis import fit_curves
from ablate.fit.notes import Note
from ablate.fit.result import FitOptions, FitResult

SENSITIVITY_CUTOFFS = (0.5, 0.75, 1.0)
UNSTABLE = (
    "unstable: A fitted on an earlier part of the window and A fitted on all of it have intervals that do not "
    "overlap (see the window-sensitivity table)"
)


def _after_name(e: UserError) -> str:
    """The refusal without the run's name in front (the row already says which cutoff it is)."""
    if isinstance(e, SettingError):
        return Phrase(e.template.split(": ", 1)[-1], *e.settings)
    return str(e).split(": ", 1)[-1]


def _row(frac: float, f: FitResult) -> dict[str, Any]:
    return {
        "cutoff": frac,
        "fit_until": f.window[1],
        "A": f.A,
        "A_ci": None if f.A_ci is None else list(f.A_ci),
        "B": f.B,
        "C_mid": f.C_mid,
        "pred_at_target": f.pred_at_target,
        "identifiable": f.identifiable,
    }


def window_sensitivity(
    result: FitResult, opts: FitOptions, cutoffs: Sequence[float] = SENSITIVITY_CUTOFFS
) -> FitResult:
    """Refit `result`'s curves with the window cut at fractions of its compute (50% of a 100k window: fit up to 50k,
    as the paper's window-sensitivity table does) and record A (with its interval), B, C_mid and the prediction at
    each. The fit is marked unstable when, at an earlier cutoff where A is identified, A's interval and this fit's
    do not overlap: where the window ends then decides the answer, beyond what the noise explains. Returns a new
    FitResult: `result` with its `sensitivity` rows, `unstable` and, when unstable, a note."""
    hi = result.window[1]
    rows: list[dict[str, Any]] = []
    n_boot = min(opts.n_boot, 300)  # intervals at the cutoffs: enough to compare, at a fraction of the cost
    for frac in cutoffs:
        until = frac * hi
        if frac == 1.0:
            rows.append(_row(frac, result))
            continue
        try:
            f = fit_curves(result.curves, replace(opts, fit_until=until, n_boot=n_boot), name=result.run)
        except UserError as e:  # too few points before this cutoff
            rows.append(
                {
                    "cutoff": frac,
                    "fit_until": until,
                    "A": None,
                    "A_ci": None,
                    "B": None,
                    "C_mid": None,
                    "pred_at_target": None,
                    "identifiable": False,
                    "note": _after_name(e),
                }
            )
            continue
        rows.append(_row(frac, f))
    unstable, notes = None, result.notes
    if result.A_ci is not None and result.identifiable:
        lo, hi_a = result.A_ci
        unstable = any(
            r["identifiable"] and r["A_ci"] is not None and (r["A_ci"][1] < lo or r["A_ci"][0] > hi_a)
            for r in rows[:-1]
        )
        if unstable:
            notes = [*notes, Note("other", UNSTABLE)]
    return replace(result, sensitivity=rows, unstable=unstable, notes=notes)

"""Fit one run or one arm (several runs) end to end: window, point fit, interval, identifiability, predictions.

This is what `ablate fit`, `rank` and `extrapolate` call; the records are in fit/result.py, and
`FitResult.to_json()` gives the keys documented in docs/json.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ablate.errors import ErrorKind, Phrase, SettingError, UserError
from ablate.fit.curve import Curve
from ablate.fit.identify import fit_status, not_identified
from ablate.fit.noise import NoiseEstimate
from ablate.fit.notes import Note
from ablate.fit.paper import fit_paper
from ablate.fit.result import METHODS, FitOptions, FitResult, SeedFits
from ablate.fit.sigmoid import B_BOUNDS, PointFit, compute_to_reach, fit_sigmoid, log_c_mid_bounds, sigmoid
from ablate.fit.uncertainty import parametric_bootstrap, percentile_ci, prediction_draws, seed_interval

__all__ = [
    "compare_forms",
    "fit_curves",
    "fit_seeds",
    "fit_table",
    "group_arms",
    "measured_run_r0",
    "rank_key",
    "window_points",
]

WindowPoints = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, tuple[float, float]]
"""The fit window's points: x, y, run_index, n (graded samples, or None) and the window (lo, hi) covered."""


def window_points(curves: list[Curve], opts: FitOptions, name: str) -> WindowPoints:
    """The points of `curves` inside the fit window, pooled and sorted by compute: x, y, run_index, n ([m] each;
    n is None unless every curve knows its graded-sample counts) and the window (lo, hi) actually covered."""
    xs, ys, idx = [], [], []
    ns: list[np.ndarray | None] = []
    lo = opts.fit_from if opts.fit_from is not None else 0.0
    hi = opts.fit_until if opts.fit_until is not None else np.inf
    for i, c in enumerate(curves):
        keep = (c.x > 0) & (c.x >= lo) & (c.x <= hi)
        xs.append(c.x[keep])
        ys.append(c.y[keep])
        idx.append(np.full(keep.sum(), i))
        known = c.n is not None and len(c.n) == len(c.x)  # counts that no longer match the points are not used
        ns.append(np.asarray(c.n, dtype=float)[keep] if known else None)
    x, y, run_index = np.concatenate(xs), np.concatenate(ys), np.concatenate(idx)
    if x.size == 0:
        span = [float(c.x[c.x > 0].min()) for c in curves if (c.x > 0).any()]
        if not span:  # R0 alone: no window can help
            raise UserError(
                f"{name}: no points with compute > 0 (R0 alone has no curve to fit); log evaluations as it trains",
                kind=ErrorKind.DATA,
            )
        where = f" (its points span {min(span):g}..{max(float(c.x.max()) for c in curves):g})"
        raise SettingError(
            f"{name}: no points in the fit window {opts.window_text()}{where}; widen {{fit_from}}/{{fit_until}}",
            "fit_from",
            "fit_until",
            kind=ErrorKind.DATA,
        )
    counts = [v for v in ns if v is not None]
    n = np.concatenate(counts) if len(counts) == len(ns) else None
    order = np.lexsort((x, run_index))  # run by run, each in compute order (the noise model reads runs as series)
    return (x[order], y[order], run_index[order], None if n is None else n[order], (float(lo), float(min(hi, x.max()))))


def measured_run_r0(curves: list[Curve], opts: FitOptions) -> list[float] | None:
    """Each run's measured R0 when the fixed R0 is their mean (so a resample redraws each measurement)."""
    r0s = [c.r0 for c in curves if c.r0 is not None]
    return None if opts.fit_r0 or opts.r0 is not None or len(r0s) < len(curves) else r0s


def _within(ci: tuple[float, float] | None, lo: float, hi: float) -> tuple[float, float] | None:
    return None if ci is None else (float(np.clip(ci[0], lo, hi)), float(np.clip(ci[1], lo, hi)))


def fit_seeds(curves: list[Curve], opts: FitOptions) -> SeedFits:
    """Fit every seed of an arm alone (point fits only)."""
    vals: list[tuple[float, float, float, float, bool]] = []
    fits: list[PointFit | None] = []
    for curve in curves:
        try:
            f = fit_curves([curve], replace(opts, n_boot=0), name=curve.run)
        except UserError:  # a seed with too few points in the window yet
            vals.append((np.nan, np.nan, np.nan, np.nan, False))
            fits.append(None)
            continue
        known = f.identifiable
        vals.append(
            (f.A if known else np.nan, f.C_mid if known else np.nan, f.B if known else np.nan, f.pred_at_target, known)
        )
        fits.append(f.fit)
    a, c, b, p, ok = (np.array(v) for v in zip(*vals))
    return SeedFits(
        A=a.astype(float),
        C_mid=c.astype(float),
        B=b.astype(float),
        pred=p.astype(float),
        identified=ok.astype(bool),
        fits=fits,
    )


def _held_r0(curves: list[Curve], opts: FitOptions, name: str, notes: list[Note]) -> float | None:
    """The R0 the fit holds (None: fitted): --r0, else the runs' mean measured pass rate at compute 0."""
    measured = [c.r0 for c in curves if c.r0 is not None]
    if opts.fit_r0:
        r0 = None
    elif opts.r0 is not None:
        r0 = float(opts.r0)
    elif measured:
        r0 = float(np.mean(measured))
    else:
        r0 = None
        notes.append(Note("other", Phrase("no point at compute 0: R0 fitted (give {r0} to fix it)", "r0")))
    if r0 is not None and r0 >= 1.0:  # the box A in [R0, 1] would be empty
        raise UserError(
            f"{name}: R0 = {r0:g}: the pass rate at compute 0 is already 1, so there is no gain to fit",
            kind=ErrorKind.DATA,
        )
    return r0


def _point_fit(
    curves: list[Curve],
    opts: FitOptions,
    pts: WindowPoints,
    r0: float | None,
    name: str,
    rng: np.random.Generator,
    notes: list[Note],
) -> tuple[PointFit, np.ndarray | None, list[NoiseEstimate] | None, str]:
    """The point fit of the window's points `pts` by opts.method, with its bootstrap draws, each run's measured
    noise and how the intervals are made."""
    x, y, run_index, n_eval, _ = pts
    if opts.method == "paper":
        if r0 is None:
            raise SettingError(
                f"{name}: {{method}} paper holds R0 fixed; the data has no point at compute 0, so give {{r0}}",
                "method",
                "r0",
                kind=ErrorKind.DATA,
            )
        pf, grid_note = fit_paper(x, y, r0=r0)
        if grid_note:
            notes.append(Note("other", grid_note))
        return pf, None, None, "none (the paper's procedure gives point estimates)"
    huber = 0.01 if opts.loss == "huber" else None
    pf = fit_sigmoid(x, y, r0=r0, loss=opts.loss, f_scale=huber or 1.0)
    if opts.n_boot <= 0:
        return pf, None, None, Phrase("none ({n_boot} 0)", "n_boot")
    draws, noises, interval_method = parametric_bootstrap(
        x, y, run_index, pf, n_boot=opts.n_boot, rng=rng, n=n_eval, huber=huber, run_r0=measured_run_r0(curves, opts)
    )
    return pf, draws, noises, interval_method


@dataclass
class _Intervals:
    """The intervals of one fit while they are made: A, B, C_mid, the prediction, and how they were made."""

    A: tuple[float, float] | None
    B: tuple[float, float] | None
    C_mid: tuple[float, float] | None
    pred: tuple[float, float] | None
    method: str


def _seed_intervals(
    iv: _Intervals, curves: list[Curve], opts: FitOptions, pf: PointFit, pred: float, x: np.ndarray, notes: list[Note]
) -> SeedFits:
    """An arm: the spread between its seeds, which no single run shows, sets its intervals (updates `iv`)."""
    seeds = fit_seeds(curves, opts)
    # t-intervals from few seeds can reach past what a fit could report: cut them to the fit's own box. The
    # prediction is every seed's (a seed's curve predicts whether or not its A is identified)
    iv.pred = _within(seed_interval(pred, seeds.pred, opts.ci), 0.0, 1.0) or iv.pred
    if seeds.n_identified >= 2:
        m_lo, m_hi = log_c_mid_bounds(x)
        iv.A = _within(seed_interval(pf.a, seeds.A, opts.ci), pf.r0, 1.0)
        iv.B = _within(seed_interval(pf.b, seeds.B, opts.ci, log=True), *B_BOUNDS)
        iv.C_mid = _within(seed_interval(pf.c_mid, seeds.C_mid, opts.ci, log=True), np.exp(m_lo), np.exp(m_hi))
        iv.method = f"t-intervals over {seeds.n_identified} seeds' own fits (the gain fraction from a {iv.method})"
    else:
        notes.append(
            Note(
                "other",
                f"fewer than 2 of its {len(curves)} seeds are identified alone: its intervals do "
                "not include the spread between seeds",
            )
        )
    return seeds


def _reach(
    opts: FitOptions, pf: PointFit, draws: np.ndarray | None, unconstrained: bool, identifiable: bool, notes: list[Note]
) -> tuple[float | None, tuple[float, float] | None]:
    """The compute to reach --target-r, with its interval (None when not asked, never reached, or unconstrained).
    Above the fitted A of a fit whose A is not measured, whether it is ever reached is unknown, not "never"."""
    if opts.target_r is None:
        return None, None
    c_to = compute_to_reach(opts.target_r, pf.r0, pf.a, pf.b, pf.c_mid)
    if c_to is None and not identifiable and opts.target_r > pf.r0:
        notes.append(Note("other", f"pass rate {opts.target_r:g}: whether it is reached is unknown (A not measured)"))
    elif c_to is None:
        notes.append(Note("other", f"pass rate {opts.target_r:g} is never reached (outside R0..A)"))
    c_to_ci = None
    if draws is not None:
        reach = np.array([compute_to_reach(opts.target_r, *d) or np.inf for d in draws])
        if np.isfinite(reach).mean() >= 1.0 - (1.0 - opts.ci) / 2 and not unconstrained:
            c_to_ci = percentile_ci(reach, opts.ci)  # unconstrained: the draws hold one value, no interval
    return c_to, c_to_ci


def _far_target(target: float, top: float) -> list[Note]:
    """A note when the target lies past 100x the largest compute fitted (a target given in other units, often)."""
    if target <= 100 * top:
        return []
    text = Phrase(
        f"{{to}} {target:g} is {target / top:,.0f}x the largest compute fitted ({top:g}): a long extrapolation; "
        "pass {to} in the units of the data",
        "to",
    )
    return [Note("far_target", text)]


def fit_curves(
    curves: list[Curve], opts: FitOptions, *, name: str | None = None, group: str | None = None
) -> FitResult:
    """Fit one run (one curve) or one arm (several curves pooled) and attach intervals and predictions."""
    if opts.method not in METHODS:
        raise UserError(f"unknown fit method '{opts.method}'; valid: {', '.join(METHODS)}", kind=ErrorKind.SETTING)
    name = name or curves[0].run
    notes: list[Note] = []
    r0 = _held_r0(curves, opts, name, notes)
    x, _, _, n_eval, window = pts = window_points(curves, opts, name)
    n_params = 3 if r0 is not None else 4
    if x.size < n_params + 1:
        fix = "log evaluations more often (an ablate run: a smaller train.eval_every) or run longer"
        if opts.fit_from is not None or opts.fit_until is not None:  # a window narrowed by the user
            fix = "widen the window or log evaluations more often"
        raise UserError(
            f"{name}: {x.size} point(s) in the fit window {opts.window_text()}, need at least {n_params + 1} "
            f"for {n_params} parameters; {fix}",
            kind=ErrorKind.DATA,
        )
    rng = np.random.default_rng(opts.seed)
    pf, draws, noises, interval_method = _point_fit(curves, opts, pts, r0, name, rng, notes)

    def ci(col):
        return None if draws is None else percentile_ci(draws[:, col], opts.ci)

    iv = _Intervals(A=ci(1), B=ci(2), C_mid=ci(3), pred=None, method=interval_method)
    reasons, unconstrained, f, f_ci = not_identified(pf, draws, x, window, iv.A, opts)
    identifiable = pf.success and not reasons
    notes += [Note("other", "A not identified: " + r) for r in reasons]
    notes += _far_target(opts.target, float(x.max()))
    pred = float(pf.predict(opts.target))
    if draws is not None and noises is not None and len(curves) == 1:
        n_last = None if n_eval is None else float(n_eval[-1])
        iv.pred = percentile_ci(prediction_draws(draws, opts.target, noises[0], n_last, rng), opts.ci)
    elif draws is not None:
        iv.pred = percentile_ci(sigmoid(opts.target, draws[:, 0], draws[:, 1], draws[:, 2], draws[:, 3]), opts.ci)
    seeds = None
    if len(curves) > 1 and opts.method != "paper" and opts.n_boot > 0:
        seeds = _seed_intervals(iv, curves, opts, pf, pred, x, notes)
    if not identifiable and iv.A is not None:  # A is not measured: its interval opens up to the bound
        iv.A = (min(iv.A[0], pf.a), 1.0)
    if not identifiable and iv.pred is not None and opts.target > float(x.max()):
        # past the window, an unmeasured A is the whole prediction: the seeds' fits share the window's bias, so
        # their spread cannot bound it; the curve may climb to any A the data allows
        iv.pred = (iv.pred[0], 1.0 if iv.A is None else max(iv.pred[1], iv.A[1]))
    if unconstrained and opts.method != "paper":  # an honest interval: all B and C_mid the search allows
        m_lo, m_hi = log_c_mid_bounds(x)
        iv.B = None if iv.B is None else (float(B_BOUNDS[0]), float(B_BOUNDS[1]))
        iv.C_mid = None if iv.C_mid is None else (float(np.exp(m_lo)), float(np.exp(m_hi)))
    c_to, c_to_ci = _reach(opts, pf, draws, unconstrained, identifiable, notes)
    return FitResult(
        run=name,
        group=group,
        method=opts.method,
        n_points=int(x.size),
        n_runs=len(curves),
        window=window,
        fit=pf,
        draws=draws,
        interval_method=iv.method,
        A_ci=iv.A,
        B_ci=iv.B,
        C_mid_ci=iv.C_mid,
        gain_fraction=f,
        identifiable=identifiable,
        status=fit_status(pf, identifiable),
        target=opts.target,
        pred_at_target=pred,
        pred_ci=iv.pred,
        target_r=opts.target_r,
        compute_to_target=c_to,
        compute_to_target_ci=c_to_ci,
        notes=notes,
        curves=curves,
        f_ci=f_ci,
        why_not_identified=reasons,
        noise=noises,
        seeds=seeds,
    )


def rank_key(fit: FitResult) -> tuple[float, float, float]:
    """How arms are ordered (best first with reverse=True): predicted R at the target, then A, then B; `rank` lists
    and `extrapolate` picks its winner by it."""
    return (round(fit.pred_at_target, 3), round(fit.A, 3), fit.B)


def group_arms(curves: list[Curve]) -> dict[str, list[Curve]]:
    """Curves by arm: `group` (a sweep's arm label, or a file's --group column), else each run alone.

    An arm is one config: curves under one name whose `arm_id`s (from their run directories' facts) differ are
    different arms, kept apart as `<name>@<arm id>` (`curves.curves_from_sweep` names a sweep's so already), so no
    two configs' seeds pool into one arm's spread."""
    by_name: dict[str, dict[str | None, list[Curve]]] = {}
    for c in curves:
        by_name.setdefault(c.group or c.run, {}).setdefault(c.arm_id or None, []).append(c)
    arms: dict[str, list[Curve]] = {}
    for name, by_id in by_name.items():
        known = [aid for aid in by_id if aid is not None]
        for aid, cs in by_id.items():
            arms[name if aid is None or len(known) < 2 else f"{name}@{aid[:8]}"] = cs
    return arms


def fit_table(curves: list[Curve], opts: FitOptions, *, by_group: bool = False) -> list[FitResult]:
    """One FitResult per run, or per group (its runs pooled, interval from resampling runs)."""
    if not by_group:
        return [fit_curves([c], opts, name=c.run, group=c.group) for c in curves]
    return [fit_curves(cs, opts, name=g, group=g) for g, cs in group_arms(curves).items()]


def compare_forms(result: FitResult, opts: FitOptions) -> dict[str, float]:
    """Rolling-origin backtest MAE per functional form on the result's window (see fit/forms.py)."""
    from ablate.fit.forms import backtest

    x = np.concatenate([c.x for c in result.curves])
    y = np.concatenate([c.y for c in result.curves])
    keep = (x > 0) & (x >= result.window[0]) & (x <= result.window[1])
    order = np.argsort(x[keep], kind="stable")
    r0 = None if result.fit.fit_r0 else result.R0
    return backtest(x[keep][order], y[keep][order], r0)

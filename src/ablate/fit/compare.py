"""`rank`: fit every arm, then say which design choices move the ceiling A and which only the efficiency, and
claim no more than the noise allows.

Per arm against the baseline (ScaleRL §2's order of questions):
1. Identified? When either window has not passed C_mid (the gain fraction's interval reaches below 50%, B sits on a
   bound, A on its bound), A is not measured: the arm is `not_identified`, ranked on its predicted pass rate at the
   target, and (when arms have seeds) tested on its pass rate at the end of the window every arm covers, where no
   extrapolation is needed: `r_call` higher / lower.
2. Ceiling: dA = A_arm - A_baseline against the seed-to-seed spread of A.
3. Efficiency: the two refitted with one shared A; the compute the arm needs to reach the pass rate the baseline
   reaches at the target, as a ratio, against the seed-to-seed spread of log compute.
All are two-sided t-tests, and all the tests of a ranking (two per identified arm, one per arm not identified) go
through Benjamini-Hochberg at a 5% false-discovery rate: `ceiling up/down` when the ceiling test is rejected, else
`efficiency up/down` when the efficiency test is, else `no detectable effect`.

The seed-to-seed spread (`NoiseFloor`) is measured, never assumed: from the arms of this ranking that have at least
two identified seeds (pooled), or from a stored measurement of the same task and recipe (`--noise FILE`, written by
`--save-noise`). Without either, a single seed cannot tell an effect from a lucky seed, and the verdict is `no
detectable effect (1 seed: needs seeds)`. The paper's own convention, a ceiling change beyond +-0.02 on A and an
efficiency change beyond +-15% compute, is available as `--margin paper` (or `--margin X` on A), labelled as such in
every verdict: a threshold rule, not a calibrated test. Every threshold here is justified by the calibration
harness (fit/calibrate.py, `ablate calibrate`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import t as student_t

from ablate.errors import UserError
from ablate.fit.analysis import FitOptions, FitResult, fit_curves, group_arms, rank_key, window_points
from ablate.fit.curve import Curve
from ablate.fit.sigmoid import B_BOUNDS, PointFit, _bounds, compute_to_reach, fit_batch, sigmoid

PAPER_A_MARGIN = 0.02  # ScaleRL §2: +-0.02 on A between single-seed runs is within noise (their seeds' spread)
PAPER_COMPUTE_MARGIN = float(np.log(1.15))  # the efficiency counterpart: +-15% compute
FDR = 0.05

VERDICTS = ("baseline", "ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down", "no_effect", "not_identified")
VERDICT_TEXT = {
    "baseline": "baseline", "ceiling_up": "ceiling ↑", "ceiling_down": "ceiling ↓",
    "efficiency_up": "efficiency ↑", "efficiency_down": "efficiency ↓", "no_effect": "no detectable effect",
    "not_identified": "not identified", None: "—",
}


@dataclass
class NoiseFloor:
    """The seed-to-seed spread comparisons are judged against: sd of one seed's A, and of one seed's log compute
    to reach a pass rate, around its arm's value; `dof` degrees of freedom behind them."""

    sd_A: float
    sd_logc: float
    dof: int
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"sd_A": self.sd_A, "sd_logc": self.sd_logc, "dof": self.dof, "source": self.source}

    @classmethod
    def load(cls, path: Path | str) -> "NoiseFloor":
        """A stored measurement (`--save-noise`); a UserError naming what is wrong with the file."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            floor = cls(sd_A=float(d["sd_A"]), sd_logc=float(d["sd_logc"]), dof=int(d["dof"]),
                        source=f"stored measurement {path} ({d.get('source', '?')})")
        except FileNotFoundError:
            raise UserError(f"--noise {path}: no such file; write one with `ablate rank SWEEP --save-noise FILE` "
                            "on a sweep with seeds") from None
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise UserError(f"--noise {path}: not a noise file ({type(e).__name__}: {e}); it needs sd_A, sd_logc "
                            "and dof, as --save-noise writes") from None
        if not (math.isfinite(floor.sd_A) and math.isfinite(floor.sd_logc) and floor.sd_A > 0 and floor.sd_logc > 0
                and floor.dof >= 1):
            raise UserError(f"--noise {path}: sd_A and sd_logc must be > 0 and dof >= 1")
        return floor


@dataclass
class ArmResult:
    arm: str
    arm_id: str | None
    fit: FitResult
    seeds: int
    partial: bool
    truncation_warning: bool
    verdict: str | None = None
    margin: float | None = None
    """The paper rule's margin on A (None under the calibrated tests)."""
    delta_A: float | None = None
    detail: str = ""
    shared: dict[str, Any] | None = None
    """The shared-A comparison: A_shared, B and C_mid of both arms under it, compute ratio and interval."""
    p_ceiling: float | None = None
    p_efficiency: float | None = None
    delta_R_end: float | None = None
    """Not identified: the arm's pass rate minus the baseline's at the end of the window they share."""
    p_at_end: float | None = None
    r_call: str | None = None
    """Not identified: `higher` / `lower` when the test at the shared window's end finds a difference, else None."""
    log_compute_seeds: list[float] | None = field(default=None, repr=False)
    """Each seed's log compute to the baseline's pass rate at the target, under the shared A."""

    @property
    def seed_A(self) -> list[float]:
        """A of each seed fitted alone (NaN where not identified); the pooled A for a single run."""
        if self.fit.seeds is not None:
            return [float(v) for v in self.fit.seeds.A]
        return [self.fit.A if self.fit.identifiable else float("nan")]

    def to_json(self) -> dict[str, Any]:
        def r(v):
            return None if v is None or not np.isfinite(v) else float(v)

        return {"arm": self.arm, "arm_id": self.arm_id, "seeds": self.seeds, **self.fit.to_json(),
                "verdict": self.verdict, "margin": self.margin, "delta_A": r(self.delta_A), "detail": self.detail,
                "partial": self.partial, "truncation_warning": self.truncation_warning, "shared_A": self.shared,
                "p_ceiling": r(self.p_ceiling), "p_efficiency": r(self.p_efficiency),
                "delta_R_end": r(self.delta_R_end), "p_at_end": r(self.p_at_end), "r_call": self.r_call}


@dataclass
class Ranking:
    arms: list[ArmResult]
    baseline: str | None
    margin_source: str
    target: float
    x: str
    opts: FitOptions
    not_fitted: list[dict[str, Any]] = field(default_factory=list)
    floor: NoiseFloor | None = None
    rule: str = "test"
    """test (calibrated t-tests with FDR control) | paper (the paper's threshold convention)."""
    end_spread: dict[str, Any] | None = None
    """{"at", "sd_R", "dof"}: the seed spread of the pass rate at the end of the window all arms share, which the
    not-identified arms are compared on; None when no arm has two seeds."""

    def to_json(self) -> dict[str, Any]:
        margins = {a.margin for a in self.arms if a.margin is not None}
        return {"baseline": self.baseline, "margin": margins.pop() if len(margins) == 1 else None,
                "margin_source": self.margin_source, "rule": self.rule, "fdr": FDR if self.rule == "test" else None,
                "noise_floor": None if self.floor is None else self.floor.to_json(),
                "end_spread": self.end_spread,
                "target": self.target, "x": self.x,
                "window": self.opts.window_text(), "arms": [a.to_json() for a in self.arms],
                "not_fitted": self.not_fitted}


def measured_floor(arms: list[ArmResult]) -> NoiseFloor | None:
    """The seed-to-seed spread pooled over the arms with >= 2 identified seeds, or None when no arm has them.
    Each arm's per-seed values are taken around that arm's own mean (so arms that differ do not inflate it)."""
    ss_a = ss_c = 0.0
    dof_a = dof_c = 0
    used = []
    for arm in arms:
        a = np.array([v for v in arm.seed_A if np.isfinite(v)])
        if a.size >= 2:
            ss_a += float(((a - a.mean()) ** 2).sum())
            dof_a += a.size - 1
            used.append(arm.arm)
        c = np.array([v for v in (arm.log_compute_seeds or []) if np.isfinite(v)])
        if c.size >= 2:
            ss_c += float(((c - c.mean()) ** 2).sum())
            dof_c += c.size - 1
    if dof_a == 0 or dof_c == 0:
        return None
    return NoiseFloor(sd_A=math.sqrt(ss_a / dof_a), sd_logc=math.sqrt(ss_c / dof_c), dof=min(dof_a, dof_c),
                      source=f"the seeds of {len(used)} arm(s) of this ranking")


def benjamini_hochberg(p: list[float], q: float = FDR) -> list[bool]:
    """Which of the p-values (NaN: no test) are discoveries at false-discovery rate q."""
    idx = [i for i, v in enumerate(p) if np.isfinite(v)]
    order = sorted(idx, key=lambda i: p[i])
    m = len(order)
    cut = 0
    for rank_i, i in enumerate(order, start=1):
        if p[i] <= q * rank_i / m:
            cut = rank_i
    keep = set(order[:cut])
    return [i in keep for i in range(len(p))]


def fit_shared_a(parts: list[tuple[np.ndarray, np.ndarray, float]],
                 starts: list[PointFit] | None = None) -> tuple[float, list[tuple[float, float]]]:
    """One A for all parts, own (B, C_mid) each; parts: [(x [n_i], y [n_i], R0_i)]; `starts`: each part's own
    fit (refitted when not given). Returns (A, [(B, C_mid)])."""
    lo_a = max(r0 for _, _, r0 in parts)
    p0, lo, hi = [], [lo_a], [1.0]
    if starts is None:
        starts = [fit_curves([Curve("p", None, x, y)], FitOptions(n_boot=0, r0=r0)).fit for x, y, r0 in parts]
    a0 = float(np.clip(np.mean([s.a for s in starts]), lo_a, 1.0))
    p0.append(a0)
    for (x, _, _), s in zip(parts, starts):
        m_lo, m_hi = _bounds(x)
        p0 += [s.b, np.log(s.c_mid)]
        lo += [B_BOUNDS[0], m_lo]
        hi += [B_BOUNDS[1], m_hi]
    p0 = np.clip(p0, np.array(lo) + 1e-9, np.array(hi) - 1e-9)

    def resid(p):
        out = []
        for k, (x, y, r0) in enumerate(parts):
            out.append(sigmoid(x, r0, p[0], p[1 + 2 * k], np.exp(p[2 + 2 * k])) - y)
        return np.concatenate(out)

    sol = least_squares(resid, p0, bounds=(lo, hi), x_scale="jac")
    a = float(sol.x[0])
    return a, [(float(sol.x[1 + 2 * k]), float(np.exp(sol.x[2 + 2 * k]))) for k in range(len(parts))]


def _seed_log_compute(c: Curve, a_shared: float, b: float, c_mid: float, r_t: float, opts: FitOptions) -> float:
    """log compute for one seed to reach r_t, refitted with A held at the shared value."""
    x, y, _, _, _ = window_points([c], opts, c.run)
    start = PointFit(r0=c.r0 if c.r0 is not None else float(y[0]), a=a_shared, b=b, c_mid=c_mid, sse=0.0,
                     n_points=len(x), fit_r0=False, at_bound=[])
    (r0, a, b1, cm), = fit_batch(x, y, start, fix_a=a_shared)
    reach = compute_to_reach(r_t, r0, a, b1, cm)
    return float(np.log(reach)) if reach else float("nan")


def compare_efficiency(arm: FitResult, base: FitResult, opts: FitOptions) -> dict[str, Any]:
    """Shared-A refit of arm and baseline: the compute the arm needs to reach the pass rate the baseline reaches
    at the target, as a ratio to the target; and each seed's log compute to that pass rate under the shared A (the
    spread the efficiency test is judged against)."""
    parts = []
    for res in (arm, base):
        x, y, _, _, _ = window_points(res.curves, opts, res.run)
        parts.append((x, y, res.R0))
    a_s, ((b_a, c_a), (b_b, c_b)) = fit_shared_a(parts, [arm.fit, base.fit])
    target = opts.target
    r_t = float(sigmoid(target, base.R0, a_s, b_b, c_b))
    c_arm = compute_to_reach(r_t, arm.R0, a_s, b_a, c_a)
    if c_arm:
        ratio = c_arm / target
    else:  # starts at or above the pass rate (0: no compute needed), or never reaches it under the shared A
        ratio = 0.0 if arm.R0 >= r_t else float("inf")
    seeds = [[_seed_log_compute(c, a_s, b, cm, r_t, opts) for c in res.curves] if res.n_runs > 1 else []
             for res, b, cm in ((arm, b_a, c_a), (base, b_b, c_b))]
    return {"A_shared": a_s, "B": b_a, "C_mid": c_a, "B_baseline": b_b, "C_mid_baseline": c_b,
            "target_pass_rate": r_t, "compute_ratio": ratio, "compute_ratio_ci": None,
            "_seeds_arm": seeds[0], "_seeds_base": seeds[1]}


def _own_log_compute_seeds(a: ArmResult, opts: FitOptions) -> None:
    """Each seed's log compute to the arm's own pass rate at the target, A held at the arm's: the arm's seed spread
    of compute when it has no comparison to measure it in."""
    f = a.fit
    if f.n_runs < 2 or not f.identifiable:
        return
    r_t = float(sigmoid(opts.target, f.R0, f.A, f.B, f.C_mid))
    a.log_compute_seeds = [_seed_log_compute(c, f.A, f.B, f.C_mid, r_t, opts) for c in f.curves]


def _fit_arm(item: tuple[str, list[Curve], FitOptions]) -> ArmResult | dict[str, Any]:
    """The arm's fit, or (a young arm with too few points in the window) why it can't be fitted yet."""
    label, cs, opts = item
    try:
        fit = fit_curves(cs, opts, name=label, group=label)
    except UserError as e:
        return {"label": label, "arm": label, "reason": str(e)}
    return ArmResult(arm=label, arm_id=cs[0].meta.get("arm_id"), fit=fit, seeds=len(cs),
                     partial=any(c.meta.get("partial") for c in cs),
                     truncation_warning=any(c.meta.get("truncation_warning") for c in cs))


def _efficiency(item: tuple[FitResult, FitResult, FitOptions]) -> dict[str, Any]:
    arm, base, opts = item
    return compare_efficiency(arm, base, opts)


def _pmap(fn, items: list, jobs: int) -> list:
    """map over processes (fork: the fit stack is already imported) when there is enough work to share."""
    if jobs <= 1 or len(items) < 2 * jobs:
        return [fn(it) for it in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(fn, items, chunksize=max(1, len(items) // (4 * jobs))))


def parse_margin(margin: str | float | None) -> float | None:
    """`--margin`: None (calibrated tests), `paper` (+-0.02 on A, the paper's convention) or a distance on A, finite
    and >= 0 (NaN would silently make every arm `no_effect`). Returns the margin on A, or None."""
    if margin is None:
        return None
    if isinstance(margin, str) and margin.strip().lower() == "paper":
        return PAPER_A_MARGIN
    try:
        m = float(margin)
    except (TypeError, ValueError):
        raise UserError(f"--margin {margin}: give `paper` (the paper's +-0.02 on A) or a number >= 0") from None
    if not (math.isfinite(m) and m >= 0.0):
        raise UserError(f"--margin {margin}: a margin on A must be a finite number >= 0 (e.g. 0.02), or `paper`")
    return m


def check_margin(margin: float | None) -> None:
    """Kept for callers that validate before ranking: see `parse_margin`."""
    parse_margin(margin)


def rank(curves: list[Curve], opts: FitOptions, *, baseline: str | None = None, margin: str | float | None = None,
         noise: NoiseFloor | None = None, x: str = "gpu_hours", not_fitted: list[dict[str, Any]] | None = None,
         jobs: int = 1) -> Ranking:
    """Fit every arm (seeds pooled) and give each a verdict against the baseline arm, best first (see the module
    docstring). `margin`: the paper's threshold rule instead of the tests; `noise`: a stored seed spread for arms
    without seeds of their own. Arms are independent fits: with many arms they run on `jobs` worker processes."""
    a_margin = parse_margin(margin)
    rule = "test" if a_margin is None else "paper"
    groups = group_arms(curves)
    if baseline is None:
        flagged = {c.group or c.run for c in curves if c.meta.get("baseline")}
        baseline = flagged.pop() if len(flagged) == 1 else None
    elif baseline not in groups:
        raise UserError(f"--baseline {baseline!r}: no such arm; arms are: {', '.join(groups)}")
    fitted = _pmap(_fit_arm, [(label, cs, opts) for label, cs in groups.items()], jobs)
    arms = [a for a in fitted if isinstance(a, ArmResult)]
    not_fitted = (not_fitted or []) + [a for a in fitted if not isinstance(a, ArmResult)]
    if not arms:
        raise UserError("no arm can be fitted yet: " + "; ".join(f"{a['label']}: {a['reason']}" for a in not_fitted[:3]))
    if baseline is not None and baseline not in {a.arm for a in arms}:
        why = next(a["reason"] for a in not_fitted if a.get("arm") == baseline)
        raise UserError(f"the baseline arm {baseline!r} can't be fitted yet ({why}); wait for it or pick --baseline")
    floor = end_spread = None
    source = "none (no baseline)"
    if baseline is None:  # no comparisons: each arm's seed spread around its own curve (for --save-noise)
        for a in arms:
            _own_log_compute_seeds(a, opts)
    if baseline is not None:
        base = next(a for a in arms if a.arm == baseline)
        base.verdict, base.detail = "baseline", "the reference arm"
        compared = []
        for a in arms:
            if a is base:
                continue
            a.delta_A = a.fit.A - base.fit.A
            if not (a.fit.identifiable and base.fit.identifiable):
                who = "this arm" if not a.fit.identifiable else "the baseline"
                a.verdict = "not_identified"
                a.detail = f"{who} has not passed C_mid: A is not measured; ranked on R at {opts.target:g}"
            else:
                compared.append(a)
        shared = _pmap(_efficiency, [(a.fit, base.fit, opts) for a in compared], jobs)
        for a, sh in zip(compared, shared):
            a.log_compute_seeds = sh.pop("_seeds_arm")
            base_seeds = sh.pop("_seeds_base")
            if base.log_compute_seeds is None and base_seeds:
                base.log_compute_seeds = base_seeds  # the baseline's spread, measured in its first comparison
            a.shared = sh
        for a in arms:
            if a.log_compute_seeds is None:  # the baseline without comparisons, or an arm not identified
                _own_log_compute_seeds(a, opts)
        if rule == "paper":
            whose = "the paper's convention" if a_margin == PAPER_A_MARGIN else "a threshold you chose"
            source = f"{whose} (±{a_margin:g} on A, ±15% compute): a threshold rule, not a test"
            for a in compared:
                _paper_verdict(a, a_margin, opts)
        else:
            measured = measured_floor(arms)
            # the stored spread (--noise) when it rests on more seeds than this ranking's own
            floor = noise if noise is not None and (measured is None or noise.dof > measured.dof) else measured
            source = floor.source if floor is not None else "none: no arm has 2 identified seeds and no --noise file"
            at_end, end_spread = _end_of_window(arms)
            unidentified = [a for a in arms if a.verdict == "not_identified"]
            _test_verdicts(compared, base, floor, opts, unidentified, at_end, end_spread)
    arms.sort(key=lambda a: rank_key(a.fit), reverse=True)
    return Ranking(arms=arms, baseline=baseline, margin_source=source, target=opts.target, x=x, opts=opts,
                   not_fitted=not_fitted, floor=floor, rule=rule, end_spread=end_spread)


def _log_ratio(a: ArmResult, base: ArmResult, ratio: float, target: float) -> float:
    """log compute ratio, arm to baseline, to the baseline's pass rate at the target: the difference of the seeds'
    mean log compute where an arm has seeds, the shared fit's own ratio for a single run."""
    def mean_log(values, fallback):
        v = np.asarray(values or [], dtype=float)
        v = v[np.isfinite(v)]
        return float(v.mean()) if v.size else fallback

    if not (np.isfinite(ratio) and ratio > 0):
        return float("nan")
    return mean_log(a.log_compute_seeds, math.log(ratio * target)) - mean_log(base.log_compute_seeds, math.log(target))


def _n_finite(values: list[float] | None) -> int:
    """How many seeds measured a value (1 for a single run, which has no per-seed list)."""
    return max(1, int(np.isfinite(values).sum())) if values else 1


def _end_of_window(arms: list[ArmResult]) -> tuple[dict[str, np.ndarray], dict[str, Any] | None]:
    """Each arm's per-seed fitted pass rate at the end of the window every arm covers (inside every window: no
    extrapolation, so it is defined whether A is identified or not), and their seed spread pooled over the arms
    with two seeds or more ({"at", "sd_R", "dof"}, or None when no arm has them)."""
    at = min(a.fit.window[1] for a in arms)
    values = {}
    for a in arms:
        f = a.fit
        v = f.seeds.at(at) if f.seeds is not None else f.fit.predict(np.array([at]))
        values[a.arm] = np.asarray(v, dtype=float)[np.isfinite(v)]
    ss, dof = 0.0, 0
    for v in values.values():
        if v.size >= 2:
            ss += float(((v - v.mean()) ** 2).sum())
            dof += v.size - 1
    spread = {"at": at, "sd_R": math.sqrt(ss / dof), "dof": dof} if dof and ss > 0 else None
    return values, spread


def _efficiency_text(a: ArmResult, opts: FitOptions) -> str:
    sh = a.shared or {}
    ci = sh.get("compute_ratio_ci")
    return (f"A shared {sh.get('A_shared', float('nan')):.3f}: {sh.get('compute_ratio', float('nan')):.2f}x compute to "
            f"baseline's R@{opts.target:g}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""))


def _paper_verdict(a: ArmResult, a_margin: float, opts: FitOptions) -> None:
    a.margin = a_margin
    label = "(paper convention)" if a_margin == PAPER_A_MARGIN else "(threshold rule)"
    ratio = a.shared["compute_ratio"]
    if abs(a.delta_A) > a_margin:
        a.verdict = "ceiling_up" if a.delta_A > 0 else "ceiling_down"
        a.detail = f"ΔA {a.delta_A:+.3f} beyond ±{a_margin:g} {label}"
    elif np.isfinite(ratio) and ratio > 0 and abs(np.log(ratio)) > PAPER_COMPUTE_MARGIN:
        a.verdict = "efficiency_up" if ratio < 1 else "efficiency_down"
        a.detail = _efficiency_text(a, opts) + f", beyond ±15% {label}"
    else:
        a.verdict = "no_effect"
        a.detail = f"ΔA {a.delta_A:+.3f} within ±{a_margin:g}; " + _efficiency_text(a, opts) + f" {label}"


def _test_verdicts(compared: list[ArmResult], base: ArmResult, floor: NoiseFloor | None, opts: FitOptions,
                   unidentified: list[ArmResult], at_end: dict[str, np.ndarray], end_spread: dict[str, Any] | None) -> None:
    """t-tests of dA and of the log compute ratio against the seed spread, and of the pass rate at the end of the
    shared window for the arms whose A is not identified, FDR-controlled together over the ranking."""
    pvals: list[float] = []
    if floor is None:
        one = all(x.seeds == 1 for x in compared + [base])
        why = ("1 seed: needs seeds (one seed per arm cannot measure the seed spread, and there is no --noise file)"
               if one else "needs seeds: no arm has 2 seeds identified alone to measure the seed spread, and there is "
               "no --noise file")
        for a in compared:
            a.verdict = "no_effect"
            a.detail = why + "; " + _efficiency_text(a, opts)
    else:
        crit = student_t.ppf(0.5 + opts.ci / 2.0, floor.dof)
        for a in compared:
            # the tested differences are those of the seeds' means, as the seed spread describes one seed
            n_a = max(1, int(np.isfinite(a.seed_A).sum()))
            n_b = max(1, int(np.isfinite(base.seed_A).sum()))
            if np.isfinite(a.seed_A).any() and np.isfinite(base.seed_A).any():
                a.delta_A = float(np.nanmean(a.seed_A) - np.nanmean(base.seed_A))
            se_a = floor.sd_A * math.sqrt(1.0 / n_a + 1.0 / n_b)
            ratio = a.shared["compute_ratio"]
            se_c = floor.sd_logc * math.sqrt(1.0 / _n_finite(a.log_compute_seeds)
                                             + 1.0 / _n_finite(base.log_compute_seeds))
            a.p_ceiling = float(2 * student_t.sf(abs(a.delta_A) / se_a, floor.dof))
            lr = _log_ratio(a, base, ratio, opts.target)
            a.p_efficiency = float(2 * student_t.sf(abs(lr) / se_c, floor.dof)) if np.isfinite(lr) else float("nan")
            if np.isfinite(lr):
                a.shared["compute_ratio_tested"] = math.exp(lr)
                a.shared["compute_ratio_ci"] = [math.exp(lr - crit * se_c), math.exp(lr + crit * se_c)]
            a.detail = f"ΔA {a.delta_A:+.3f} ±{crit * se_a:.3f} (p={a.p_ceiling:.2g})"
            pvals += [a.p_ceiling, a.p_efficiency]
    tested = []
    base_end = at_end.get(base.arm, np.array([]))
    for a in unidentified:
        v = at_end.get(a.arm, np.array([]))
        if end_spread is None or v.size == 0 or base_end.size == 0:
            continue
        a.delta_R_end = float(v.mean() - base_end.mean())
        se = end_spread["sd_R"] * math.sqrt(1.0 / v.size + 1.0 / base_end.size)
        a.p_at_end = float(2 * student_t.sf(abs(a.delta_R_end) / se, end_spread["dof"]))
        tested.append(a)
        pvals.append(a.p_at_end)
    found = benjamini_hochberg(pvals)
    if floor is not None:
        for i, a in enumerate(compared):
            ceiling, efficiency = found[2 * i], found[2 * i + 1]
            eff = _efficiency_text(a, opts) + (f" (p={a.p_efficiency:.2g})" if np.isfinite(a.p_efficiency) else "")
            if ceiling:
                a.verdict = "ceiling_up" if a.delta_A > 0 else "ceiling_down"
            elif efficiency:
                a.verdict = "efficiency_up" if a.shared["compute_ratio_tested"] < 1 else "efficiency_down"
                a.detail += "; " + eff
            else:
                a.verdict = "no_effect"
                a.detail += "; " + eff
    first = 2 * len(compared) if floor is not None else 0
    for k, a in enumerate(tested):
        at = end_spread["at"]
        if found[first + k]:
            a.r_call = "higher" if a.delta_R_end > 0 else "lower"
            a.detail += (f"; at {at:g} (the end of the shared window) its pass rate is {a.r_call} than the "
                         f"baseline's: ΔR {a.delta_R_end:+.3f} (p={a.p_at_end:.2g})")
        else:
            a.detail += (f"; at {at:g} (the end of the shared window) no detectable difference: "
                         f"ΔR {a.delta_R_end:+.3f} (p={a.p_at_end:.2g})")

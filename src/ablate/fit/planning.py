"""How many seeds and how much compute a question needs, and whether running arms still need more: answered by
simulation, never by a closed-form guess. Two engines give a design's power (ENGINES): `fast` (fit/power.py, the
default: every trial of a compute rung simulated and fitted at once, the verdicts by `rank`'s rules in closed form)
and `exact` (each simulated sweep ranked by `compare.rank` itself: the reference, minutes instead of seconds).

The task model (`TaskModel`) is what the simulation draws from, measured on real runs (`from_ranking`) or read
from a stored file (`--calibration`, written by `--save-calibration`):
- the baseline arm's fitted curve (R0, A, B, C_mid) on the compute axis `x`;
- the evaluation noise (`val_n` graded samples per evaluation: binomial) and the drift (AR(1): sd and
  autocorrelation per evaluation), pooled over every run's measured noise;
- the seed-to-seed spread of A and of log compute, as `rank` measured it (`seed_sd_a`, `seed_sd_logc`, on
  `seed_dof` degrees of freedom), and how much of it is the fits' own error at the window it was measured on
  (`fit_sd_a`, `fit_sd_logc`: the same design simulated without any seed spread). A spread measured on few seeds
  is uncertain, so every simulated trial draws its own: the measured variance redrawn from its sampling
  distribution (scaled inverse chi-square on `seed_dof`), less the fit error, floored at zero. The plan carries
  that uncertainty instead of trusting a point estimate, and a longer window is not charged the short one's fit
  error.

Questions (`design`): a ceiling change of `delta_a` (the paper's 0.02), found as `ceiling up`; an efficiency ratio
(the arm reaches the same pass rate with 1/ratio of the compute: C_mid / ratio), found as `efficiency up`. Power
counts only that verdict: `equivalent`, `inconclusive` or any other is a miss. A trial simulates a whole sweep of
`arms` arms (the baseline, one arm with the effect, the rest identical to the baseline; at most MAX_SIM_ARMS, the
remaining arms' tests are added to the false-discovery control as null p-values) with `seeds` seeds per arm, each
run evaluated every `eval_every` up to `compute`, gives it verdicts, and counts whether the effect arm gets its
verdict. Power at each (compute, seeds) is the share of trials (the exact engine stops early once the power is
clearly above or below the goal; the fast one runs them all). For each compute rung the fewest seeds that reach
the goal are found by bisection over SEED_LADDER.

Running arms (`futures`): each run is continued from its own fitted curve (shifted by a draw of its arm's bootstrap,
so the fit's uncertainty travels) with its own measured drift, carried on from its last residual, and evaluation
noise, up to the compute its max_steps will reach; the sweep is re-ranked, and the share of futures in which an
arm's verdict differs from today's is how likely more compute is to change it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from scipy.stats import beta as beta_dist

from ablate.errors import UserError
from ablate.fit.analysis import FitOptions
from ablate.fit.sigmoid import B_BOUNDS, gain_fraction
from ablate.fit.compare import NoiseFloor, Ranking, measured_floor, rank
from ablate.fit.curve import Curve
from ablate.fit.sigmoid import sigmoid
from ablate.fit.verdicts import (FDR, MAX_DOF, MAX_SD_A, MAX_SD_LOGC, SEED_LADDER, MinEffect,
                                 discoveries)

COMPUTE_RUNGS = (0.5, 1.0, 2.0, 4.0)
"""Compute per run tried, as multiples of the budget (the compute a run reaches at its max_steps)."""
MAX_POINTS = 60
"""Simulated evaluations per run at most (longer runs are evaluated less often: fewer points, never more)."""
MAX_SIM_ARMS = 6
MIN_GAIN = 0.55
"""A compute rung whose window reaches less of the baseline's gain than this cannot identify A: not simulated."""
QUESTIONS = ("ceiling", "efficiency")
WANTED = {"ceiling": "ceiling_up", "efficiency": "efficiency_up"}
CHANGED = ("ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down")
ENGINES = ("fast", "exact")
"""How a design's power is simulated: `fast` (fit/power.py: every trial of a rung at once, batched fits) or
`exact` (every trial ranked by `compare.rank`, the reference the fast engine is checked against)."""
PLAN_BOOT = 100
"""Bootstrap resamples per fit inside the simulations (identification reads the gain fraction's interval)."""
MIN_SCALE, MAX_SCALE = 1e-9, 1e30
"""Bounds on compute in a calibration file (c_mid, eval_every, budget, and a budget made from steps_per_x), in
units of its x. Measured: the simulations fit and decide as usual with a real calibration's compute scaled by
1e-12 up to 1e60, identify nothing from 1e-30 down (every simulated arm `not identified`), and overflow at 1e300;
these bounds keep inside that, and cover every real axis, from a CPU run's GPU-hours (1e-3) to FLOPs (1e24)."""
CALIBRATION_BOUNDS = {
    # field: (lo, hi, kind): "float" in [lo, hi], "above" in (lo, hi], "int" an integer in [lo, hi]
    "r0": (0.0, 1.0, "float"), "a": (0.0, 1.0, "above"), "b": (B_BOUNDS[0], B_BOUNDS[1], "float"),
    "c_mid": (MIN_SCALE, MAX_SCALE, "float"), "eval_every": (MIN_SCALE, MAX_SCALE, "float"),
    "budget": (MIN_SCALE, MAX_SCALE, "float"),
    "val_n": (1.0, 1e9, "float"),  # graded samples per evaluation (a binomial's n: an int64)
    "drift_sd": (0.0, 1.0, "float"), "drift_rho": (0.0, 1.0, "float"),  # pass rates: within [0, 1]
    "seed_sd_a": (0.0, MAX_SD_A, "float"), "seed_sd_logc": (0.0, MAX_SD_LOGC, "float"),
    "seed_dof": (1, MAX_DOF, "int"),
    "fit_sd_a": (0.0, MAX_SD_A, "float"), "fit_sd_logc": (0.0, MAX_SD_LOGC, "float"),
    "arms": (1, 10**6, "int"),
    # conversions between axes: GPU-hours per FLOP is ~1e-19, steps per FLOP smaller still
    "gpu_hours_per_x": (0.0, 1e40, "above"), "steps_per_x": (0.0, 1e40, "above"),
}


@dataclass
class TaskModel:
    """What a plan simulates from (see the module docstring). Compute is in units of `x`."""

    x: str
    r0: float
    a: float
    b: float
    c_mid: float
    val_n: float | None
    """Graded samples per evaluation (None: unknown; the evaluation noise is then part of the drift)."""
    eval_every: float
    drift_sd: float
    drift_rho: float
    seed_sd_a: float
    seed_sd_logc: float
    seed_dof: int
    fit_sd_a: float
    fit_sd_logc: float
    budget: float
    """Compute one run reaches at its max_steps (or at its end)."""
    arms: int
    gpu_hours_per_x: float | None = None
    steps_per_x: float | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def load(cls, path: Path | str) -> "TaskModel":
        """A stored model (`--save-calibration`); a UserError naming what is wrong with the file. Every field is
        type- and range-checked (CALIBRATION_BOUNDS): a number out of range sends the simulations where they
        cannot end (a compute scale of 1e-300) or overflow."""
        from ablate.fit.verdicts import number, read_json_object

        where = f"--calibration {path}"
        fix = "write one with `ablate plan SWEEP_DIR --save-calibration FILE`"
        d = read_json_object(path, "--calibration", fix + " on a sweep that ran with seeds")
        fix = f"not a calibration file: {fix}"
        got: dict[str, Any] = {}
        for key, (lo, hi, kind) in CALIBRATION_BOUNDS.items():
            got[key] = number(d, key, where, lo, hi, fix=fix, integer=kind == "int", above=kind == "above",
                              optional=key in ("val_n", "gpu_hours_per_x", "steps_per_x"))
        x, source, notes = d.get("x"), d.get("source", ""), d.get("notes", [])
        if not isinstance(x, str) or not x.strip() or len(x) > 200:
            raise UserError(f"{where}: x (the compute axis) must be a name such as gpu_hours; {fix}")
        if not isinstance(source, str) or not (isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
            raise UserError(f"{where}: source must be text and notes a list of texts; {fix}")
        if not got["r0"] < got["a"]:
            raise UserError(f"{where}: needs r0 < a (the ceiling above the start), got r0 {got['r0']:g}, a "
                            f"{got['a']:g}; {fix}")
        return cls(x=x, source=source, notes=list(notes), **got)

    def describe(self) -> str:
        ev = f"evaluation n={self.val_n:g}" if self.val_n else "evaluation noise inside the drift"
        return (f"baseline R0 {self.r0:.3f}, A {self.a:.3f}, B {self.b:.2f}, C_mid {self.c_mid:.4g}; {ev}, drift sd "
                f"{self.drift_sd:.4f} (rho {self.drift_rho:.2f} per evaluation); seed spread sd(A) "
                f"{self.seed_sd_a:.4f}, sd(log compute) {self.seed_sd_logc:.3f} ({self.seed_dof} dof; fit error "
                f"{self.fit_sd_a:.4f} / {self.fit_sd_logc:.3f} of it)")


# ---- simulation ----


def simulate_runs(m: TaskModel, a: float, b: float, c_mid: float, seeds: int, compute: float,
                  rng: np.random.Generator, name: str, sd_a: float, sd_logc: float) -> list[Curve]:
    """`seeds` runs of one arm from the model: a point at compute 0 (R0) and evaluations every `eval_every` up to
    `compute` (at most MAX_POINTS: then further apart, with the drift's autocorrelation scaled to the spacing)."""
    n_pts = int(np.clip(round(compute / m.eval_every), 8, MAX_POINTS))
    x = np.linspace(0.0, compute, n_pts + 1)
    rho = m.drift_rho ** ((compute / n_pts) / m.eval_every)
    a_j = np.clip(a + sd_a * rng.standard_normal(seeds), m.r0 + 0.02, 0.99)
    c_j = c_mid * np.exp(sd_logc * rng.standard_normal(seeds))
    mean = sigmoid(x[None, :], m.r0, a_j[:, None], b, c_j[:, None])  # [seeds, points]
    drift = np.zeros_like(mean)
    innov = rng.standard_normal(mean.shape) * m.drift_sd * math.sqrt(max(1.0 - rho * rho, 0.0))
    for t in range(1, x.size):
        drift[:, t] = rho * drift[:, t - 1] + innov[:, t]
    p = np.clip(mean + drift, 0.0, 1.0)
    if m.val_n:
        n = int(round(m.val_n))
        y = rng.binomial(n, p) / n
        ns = np.full(x.size, float(n))
    else:
        y, ns = p, None
    return [Curve(run=f"{name}-{j}", group=name, x=x, y=y[j], n=ns) for j in range(seeds)]


def _seed_spread(m: TaskModel, rng: np.random.Generator) -> tuple[float, float]:
    """One trial's spread between seeds (sd of A, sd of log C_mid): the measured variances redrawn from their
    sampling distribution (scaled inverse chi-square on seed_dof), less the fit error, floored at zero."""
    k = max(m.seed_dof, 1)
    out = []
    for sd, fit_sd in ((m.seed_sd_a, m.fit_sd_a), (m.seed_sd_logc, m.fit_sd_logc)):
        var = sd * sd * k / max(rng.chisquare(k), 1e-9)
        out.append(math.sqrt(max(var - fit_sd * fit_sd, 0.0)))
    return out[0], out[1]


def effect_of(question: str, delta_a: float, ratio: float) -> dict[str, float]:
    if question == "ceiling":
        return {"a": delta_a}
    if question == "efficiency":
        return {"c_mid": 1.0 / ratio}
    raise ValueError(question)


def _opts(compute: float, seed: int, to: float | None = None) -> FitOptions:
    """Fit options of a simulated sweep whose runs reach `compute`: verdicts ranked at `to` (default: twice that)."""
    return FitOptions(n_boot=PLAN_BOOT, target=to if to is not None else 2.0 * compute, seed=seed)


def trial(m: TaskModel, seeds: int, compute: float, effect: dict[str, float], rng: np.random.Generator,
          seed: int, noise: NoiseFloor | None = None, to: float | None = None,
          min_effect: MinEffect | None = None) -> str:
    """One simulated sweep through `compare.rank` (the exact engine; see the module docstring); the effect arm's
    verdict (`not_fitted` when it could not be fitted). The three tests of each arm beyond MAX_SIM_ARMS enter the
    false-discovery control as uniform p-values (a null arm's change tests are at least uniform, and its
    equivalence test, often smaller, would only ease the others' discoveries: so this never makes a discovery
    easier than the full sweep)."""
    sd_a, sd_logc = _seed_spread(m, rng)
    sim_arms = max(2, min(m.arms, MAX_SIM_ARMS))
    curves = simulate_runs(m, min(m.a + effect.get("a", 0.0), 0.99), m.b * effect.get("b", 1.0),
                           m.c_mid * effect.get("c_mid", 1.0), seeds, compute, rng, "arm", sd_a, sd_logc)
    for i in range(sim_arms - 1):
        curves += simulate_runs(m, m.a, m.b, m.c_mid, seeds, compute, rng, "base" if i == 0 else f"null{i}",
                                sd_a, sd_logc)
    ranking = rank(curves, _opts(compute, seed, to), baseline="base", noise=noise, min_effect=min_effect)
    by = {a.arm: a for a in ranking.arms}
    arm = by.get("arm")
    if arm is None:
        return "not_fitted"
    extra = 3 * (m.arms - sim_arms)
    if extra <= 0 or arm.verdict not in CHANGED + ("equivalent", "inconclusive"):
        return arm.verdict or "not_fitted"
    # the full sweep's false-discovery control: this ranking's p-values plus the arms not simulated
    pvals, where, is_eq = [], {}, []
    for a in ranking.arms:
        if a.p_ceiling is not None:
            where[a.arm] = len(pvals)
            pvals += [a.p_ceiling] + [float("nan") if p is None else p for p in (a.p_efficiency, a.p_equivalent)]
            is_eq += [False, False, True]
        elif a.p_at_end is not None:
            pvals.append(a.p_at_end)
            is_eq.append(False)
    pvals += list(rng.random(extra))
    is_eq += [k % 3 == 2 for k in range(extra)]
    found = discoveries(pvals, is_eq, FDR)
    i = where.get("arm")
    if i is None:
        return arm.verdict
    me = min_effect or MinEffect()
    ci = arm.delta_A_ci or [-math.inf, math.inf]
    rci = arm.shared.get("compute_ratio_ci") or [0.0, math.inf]
    hidden = (me.a >= max(abs(ci[0]), abs(ci[1])) and found[i + 1]  # as verdicts._conclude
              and not 1 / me.ratio <= rci[0] <= rci[1] <= me.ratio)
    if found[i] and not hidden:  # a negligible A change hides no efficiency change that may matter
        return "ceiling_up" if arm.delta_A > 0 else "ceiling_down"
    if found[i + 1]:
        return "efficiency_up" if arm.shared.get("compute_ratio_tested", 1.0) < 1 else "efficiency_down"
    return "equivalent" if found[i + 2] else "inconclusive"


def power_cell(m: TaskModel, seeds: int, compute: float, question: str, *, delta_a: float, ratio: float,
               trials: int, goal: float, seed: int, noise: NoiseFloor | None = None,
               to: float | None = None, min_effect: MinEffect | None = None) -> dict[str, Any]:
    """Power of one design: trials in blocks of 20, stopping once the 99% interval of the power is clearly below
    `goal` (from 20 trials) or clearly above it (from 40). Its random numbers depend only on the design and
    `seed`."""
    rng = np.random.default_rng([seed, seeds, int(compute * 1e6) % (2**31), QUESTIONS.index(question)])
    wanted = WANTED[question]
    effect = effect_of(question, delta_a, ratio)
    hits = n = 0
    while n < trials:
        for _ in range(min(20, trials - n)):
            hits += trial(m, seeds, compute, effect, rng, seed * 1009 + n, noise, to, min_effect) == wanted
            n += 1
        p = hits / n
        half = 2.58 * math.sqrt(max(p * (1 - p), 0.02) / n)
        if p + half < goal or (n >= 40 and p - half > goal):
            break
    p = hits / n
    return {"seeds": seeds, "compute": compute, "power": p, "se": math.sqrt(max(p * (1 - p), 1e-9) / n),
            "trials": n, "reached": p >= goal}


def _cell(args: tuple) -> dict[str, Any]:
    m, seeds, compute, question, kw = args
    return power_cell(m, seeds, compute, question, **kw)


def _fast_cells(m: TaskModel, compute: float, question: str, kw: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
    """power_cell's answer by the fast engine (fit/power.py) at one compute: seeds -> cell, every seed count drawing
    on the same simulated trials (each trial's first `seeds` runs per arm)."""
    from ablate.fit import power

    sim_arms = max(2, min(m.arms, MAX_SIM_ARMS))
    effect = effect_of(question, kw["delta_a"], kw["ratio"])
    seed = kw["seed"] * 1009 + QUESTIONS.index(question)
    rung = power.rung_for(m, compute, effect, kw["trials"], sim_arms, seed)
    target = kw["to"] if kw["to"] is not None else 2.0 * compute

    def cell(seeds: int) -> dict[str, Any]:
        return power.cell_power(rung, seeds, WANTED[question], target=target, noise=kw["noise"],
                                me=kw["min_effect"] or MinEffect(), extra_arms=m.arms - sim_arms, goal=kw["goal"],
                                seed=seed)
    return cell


def _pool(jobs: int):
    if jobs <= 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))


def design(m: TaskModel, question: str, *, delta_a: float = 0.02, ratio: float = 1.25, goal: float = 0.8,
           trials: int = 100, rungs: Sequence[float] = COMPUTE_RUNGS, ladder: Sequence[int] = SEED_LADDER,
           seed: int = 0, jobs: int = 1, noise: NoiseFloor | None = None, to: float | None = None,
           progress: Callable[[str], None] | None = None, engine: str = "fast",
           min_effect: MinEffect | None = None) -> dict[str, Any]:
    """For each compute rung (multiples of the budget), the fewest seeds per arm that reach `goal` power, by
    bisection over `ladder` (power grows with seeds). Rungs whose window cannot pass C_mid are reported, not
    simulated; a rung that could not be cheaper than the best found so far is skipped. Seed counts are tried
    doubling from the fewest (the cheap cells first), then bisected below the first that reaches the goal. The
    simulated verdicts are ranked at `to` (default: twice each rung's compute). Returns the rungs and the cheapest
    design (`best`, None when no rung reaches the goal within the ladder). `engine`: ENGINES (the fast engine runs
    every trial of a cell, on one process; the exact one stops a cell early and uses `jobs` processes)."""
    if engine not in ENGINES:
        raise ValueError(engine)
    kw = dict(delta_a=delta_a, ratio=ratio, trials=trials, goal=goal, seed=seed, noise=noise, to=to,
              min_effect=min_effect)
    rows, best = [], None
    pool = _pool(jobs) if engine == "exact" else None
    try:
        for mult in rungs:
            compute = m.budget * mult
            f = gain_fraction(compute, m.b, m.c_mid)
            row: dict[str, Any] = {"multiple": mult, "compute": compute, "gain_fraction": f, "seeds": None,
                                   "power": None, "se": None, "trials": 0, "tried": []}
            rows.append(row)
            if f < MIN_GAIN:
                row["why"] = f"the window reaches {f:.0%} of the gain: A cannot be identified"
                continue
            lo, hi = 0, len(ladder) - 1
            if best is not None:  # a design here must cost less than the best: fewer seeds than that allows
                cap = best["seeds"] * best["compute"] / compute
                while hi >= 0 and ladder[hi] >= cap:
                    hi -= 1
                if hi < 0:
                    row["why"] = "cannot be cheaper than a shorter run"
                    continue
            fast = _fast_cells(m, compute, question, kw) if engine == "fast" else None

            def run(idx: list[int]) -> list[dict[str, Any]]:
                cells = [(m, ladder[i], compute, question, kw) for i in idx]
                if fast is not None:
                    res = [fast(ladder[i]) for i in idx]
                else:
                    res = list(pool.map(_cell, cells)) if pool and len(cells) > 1 else [_cell(c) for c in cells]
                for r in res:
                    row["tried"].append(r)
                    if progress:
                        progress(f"{question} at {compute:.4g}: {r['seeds']} seeds -> power {r['power']:.2f} "
                                 f"({r['trials']} trials)")
                return res

            # doubling from the fewest seeds (cheap cells first, `jobs` at a time), then bisection below the first
            # count that reaches the goal
            doubling = [i for i in range(lo, hi + 1) if i == lo or ladder[i] >= 2 * ladder[lo] and
                        (ladder[i] & (ladder[i] - 1) == 0)] + [hi]
            doubling = sorted(set(doubling))
            found, last_bad = None, lo - 1
            step = max(1, jobs) if pool else 1  # cells in parallel only with a pool; else the cheapest first
            for k in range(0, len(doubling), step):
                idx = doubling[k:k + step]
                res = run(idx)
                ok = [i for i, r in zip(idx, res) if r["reached"]]
                if ok:
                    found = min(ok)
                    last_bad = max([last_bad] + [i for i, r in zip(idx, res) if not r["reached"] and i < found])
                    break
                last_bad = max(idx)
            if found is None:
                top = row["tried"][-1]
                row["why"] = (f"{top['seeds']} seeds reach {top['power']:.0%} power" + ("" if best is None else
                              " (more would cost more than the cheapest design)"))
                continue
            lo, hi = last_bad + 1, found - 1
            while lo <= hi:
                mid = (lo + hi) // 2
                if run([mid])[0]["reached"]:
                    found, hi = mid, mid - 1
                else:
                    lo = mid + 1
            r = next(t for t in row["tried"] if t["seeds"] == ladder[found])
            row.update(seeds=r["seeds"], power=r["power"], se=r["se"], trials=r["trials"])
            if best is None or r["seeds"] * compute < best["seeds"] * best["compute"]:
                best = {"multiple": mult, "compute": compute, "seeds": r["seeds"], "power": r["power"], "se": r["se"]}
    finally:
        if pool:
            pool.shutdown()
    for row in rows:
        row["tried"] = sorted(({"seeds": t["seeds"], "power": t["power"], "trials": t["trials"]} for t in row["tried"]),
                              key=lambda t: t["seeds"])
    return {"question": question, "effect": effect_of(question, delta_a, ratio), "goal": goal, "fdr": FDR,
            "engine": engine, "rungs": rows, "best": best}


# ---- the model, from a ranking ----


def _fit_error(m: TaskModel, seeds: int, compute: float, sims: int, seed: int) -> tuple[float, float]:
    """The spread between seeds' fitted A and log compute that fit error alone gives at this design (the same
    model without seed spread), as the variances `measured_floor` would report."""
    rng = np.random.default_rng([seed, 7])
    va, vc = [], []
    for i in range(sims):
        curves = []
        for k in range(max(2, min(m.arms, 3))):
            curves += simulate_runs(m, m.a, m.b, m.c_mid, seeds, compute, rng, f"arm{k}", 0.0, 0.0)
        r = rank(curves, _opts(compute, seed * 31 + i), baseline="arm0")
        floor = measured_floor(r.arms)
        if floor is not None:
            va.append(floor.sd_A ** 2)
            vc.append(floor.sd_logc ** 2)
    return (float(np.mean(va)) if va else 0.0, float(np.mean(vc)) if vc else 0.0)


def from_ranking(ranking: Ranking, *, budget: float, seeds: int, gpu_hours_per_x: float | None = None,
                 steps_per_x: float | None = None, source: str = "", seed: int = 0) -> TaskModel:
    """The task model measured on a ranked sweep (see the module docstring). `budget`: the compute a run reaches at
    its max_steps; `seeds`: seeds per arm the sweep ran (the design the seed spread was measured at)."""
    if not ranking.arms:
        raise UserError("nothing to plan from: no arm could be fitted")
    by = {a.arm: a for a in ranking.arms}
    notes = []
    base = by.get(ranking.baseline or "")
    if base is None:
        ident = [a for a in ranking.arms if a.fit.identifiable] or ranking.arms
        base = ident[0]
        notes.append(f"no baseline: the curve simulated is arm {base.arm!r}'s")
    f = base.fit
    if not f.identifiable:
        notes.append(f"arm {base.arm!r}'s A is not identified: its point fit (A {f.A:.3f}) is what is simulated; "
                     "run longer to measure it")
    floor = ranking.floor
    if floor is None and ranking.baseline is None:
        raise UserError("no baseline arm to plan against: the seed spread is measured in comparisons with it; give "
                        "--baseline ARM")
    if floor is None:
        raise UserError("no seed spread to plan with: no arm has 2 identified seeds; run the sweep with seeds "
                        "(seed=0,1,2) or give --noise FILE")
    est = [e for a in ranking.arms for e in (a.fit.noise or [])]
    if est:
        drift_sd = math.sqrt(float(np.median([e.drift_var for e in est])))
        rho = float(np.median([e.rho for e in est]))
        known = all(e.eval_known for e in est)
    else:
        drift_sd, rho, known = 0.0, 0.0, False
        notes.append("no drift measured (the fits' noise estimates are missing): only the evaluation noise and the "
                     "seed spread are simulated")
    curves = [c for a in ranking.arms for c in a.fit.curves]
    ns = [float(np.median(c.n)) for c in curves if c.n is not None]
    val_n = float(np.median(ns)) if ns and known else None
    steps = [float(np.median(np.diff(c.x[c.x > 0]))) for c in curves if (c.x > 0).sum() >= 2]
    eval_every = float(np.median(steps)) if steps else budget / 40
    m = TaskModel(x=ranking.x, r0=f.R0, a=f.A, b=f.B, c_mid=f.C_mid, val_n=val_n, eval_every=eval_every,
                  drift_sd=drift_sd, drift_rho=rho, seed_sd_a=floor.sd_A, seed_sd_logc=floor.sd_logc,
                  seed_dof=floor.dof, fit_sd_a=0.0, fit_sd_logc=0.0, budget=budget,
                  arms=len({a.arm for a in ranking.arms} | {d.get("arm") or d["label"] for d in ranking.not_fitted}),
                  gpu_hours_per_x=gpu_hours_per_x,
                  steps_per_x=steps_per_x, source=f"{source}; seed spread: {floor.source}", notes=notes)
    # how much of the measured spread is the fits' own error at the window it was measured on
    window = max(float(c.x.max()) for c in curves)
    err_a, err_c = _fit_error(m, max(2, seeds), window, sims=12, seed=seed)
    m.fit_sd_a, m.fit_sd_logc = math.sqrt(err_a), math.sqrt(err_c)
    return m


# ---- running arms: would more compute change the verdict? ----


def _verdict_key(a) -> str:
    v = a.verdict or "not_fitted"
    return f"{v}_{a.r_call}" if v == "not_identified" and a.r_call else v


def _continue(c: Curve, fit_pf, shift: Callable[[np.ndarray], np.ndarray], est, x_end: float,
              rng: np.random.Generator) -> Curve:
    """Curve c carried on to x_end: its fitted mean plus `shift`, its drift continued from the last residual,
    evaluation noise as measured."""
    xs = c.x[c.x > 0]
    if xs.size < 2 or x_end <= c.x[-1]:
        return c
    dx = float(np.median(np.diff(xs)))
    xf = np.arange(c.x[-1] + dx, x_end + dx * 1e-6, dx)
    if xf.size == 0:
        return c
    mean = np.asarray(fit_pf.predict(xf), dtype=float) + shift(xf)
    drift_var = est.drift_var if est is not None else 0.0
    rho = est.rho if est is not None else 0.0
    last = float(c.y[-1] - fit_pf.predict(np.array([c.x[-1]]))[0])
    ev_last = float(est.eval_var[-1]) if est is not None and est.eval_known and est.eval_var.size else 0.0
    d = last * drift_var / (drift_var + ev_last) if drift_var + ev_last > 0 else 0.0
    drift = np.empty(xf.size)
    sd = math.sqrt(drift_var * max(1.0 - rho * rho, 0.0))
    for t in range(xf.size):
        d = rho * d + sd * rng.standard_normal()
        drift[t] = d
    p = np.clip(mean + drift, 0.0, 1.0)
    n = c.n
    if n is not None and np.all(np.isfinite(n)):
        k = int(round(float(n[-1])))
        yf = rng.binomial(k, p) / k
        nf = np.concatenate([n, np.full(xf.size, float(k))])
    else:
        yf, nf = p, None
    return replace(c, x=np.concatenate([c.x, xf]), y=np.concatenate([c.y, yf]), n=nf, meta=dict(c.meta))


def change_bound(changes: int, n: int, level: float = 0.95) -> float:
    """One-sided `level` Clopper-Pearson upper bound on the chance of a change seen `changes` times in `n`."""
    if n <= 0:
        return 1.0
    return 1.0 if changes >= n else float(beta_dist.ppf(level, changes + 1, n - changes))


def futures(ranking: Ranking, ends: dict[str, float], *, n: int = 40, seed: int = 0,
            noise: NoiseFloor | None = None, frozen: set[str] | frozenset[str] = frozenset()) -> dict[str, dict[str, Any]]:
    """For each arm: today's verdict, and in how many of `n` simulated futures it changes. In each future every run
    goes on to its compute in `ends` (keyed by run name; runs not in it are over) from its own fit plus a bootstrap
    draw of its arm's curve, with its drift and evaluation noise, and the sweep is re-ranked: what the full sweep
    would say. The arms in `frozen` (candidates for stopping) are ranked a second time stopped where they are, the
    rest going on: what the sweep would say if they were stopped now. A change is a different verdict in either
    ranking, or an arm that can no longer be fitted; for the frozen arms, also any other arm whose verdict differs
    between the two rankings of the same future (stopping them moved it). Returns {arm: {"verdict", "changes", "n",
    "p_change", "bound" (the one-sided 95% upper bound on the chance of a change), "future": Counter of future
    verdicts, "stopped": Counter of verdicts when stopped now}}."""
    rng = np.random.default_rng([seed, 11])
    now = {a.arm: _verdict_key(a) for a in ranking.arms}
    out = {arm: {"verdict": v, "changes": 0, "n": 0, "future": {}, "stopped": {}} for arm, v in now.items()}
    opts = replace(ranking.opts, n_boot=min(ranking.opts.n_boot, PLAN_BOOT) or PLAN_BOOT)

    def tally(r: Ranking | None, key: str, arms: set[str], changed: dict[str, bool]) -> dict[str, str]:
        got = {} if r is None else {a.arm: _verdict_key(a) for a in r.arms}
        for arm in arms:
            v = got.get(arm, "not_fitted")
            out[arm][key][v] = out[arm][key].get(v, 0) + 1
            changed[arm] = changed.get(arm, False) or v != out[arm]["verdict"]
        return got

    def ranked(curves: list[Curve], i: int) -> Ranking | None:
        try:
            return rank(curves, replace(opts, seed=seed * 7919 + i), baseline=ranking.baseline, noise=noise,
                        x=ranking.x, min_effect=ranking.min_effect)
        except UserError:  # the baseline can't be fitted: no arm keeps its verdict
            return None

    for i in range(n):
        going, stopped = [], []
        for a in ranking.arms:
            f = a.fit
            draw = f.draws[rng.integers(len(f.draws))] if f.draws is not None and len(f.draws) else None

            def shift(x, draw=draw, f=f):
                if draw is None:
                    return np.zeros_like(x)
                return sigmoid(x, *draw) - f.fit.predict(x)
            for j, c in enumerate(f.curves):
                pf = f.seeds.fits[j] if f.seeds is not None and f.seeds.fits[j] is not None else f.fit
                est = f.noise[j] if f.noise is not None and j < len(f.noise) else None
                cont = _continue(c, pf, shift, est, ends.get(c.run, float(c.x[-1])), rng)
                going.append(cont)
                stopped.append(replace(c, meta={**c.meta, "status": "pruned"}) if a.arm in frozen else cont)
        changed: dict[str, bool] = {}
        full = tally(ranked(going, i), "future", set(out), changed)
        if frozen:
            cut = tally(ranked(stopped, i), "stopped", set(frozen) & set(out), changed)
            # stopping them must not move the others either (they share the seed spread, the false-discovery
            # control and the end-of-window test): if it does, none of them is settled in this future
            if any(cut.get(arm, "not_fitted") != full.get(arm, "not_fitted") for arm in set(out) - set(frozen)):
                for arm in set(frozen) & set(out):
                    changed[arm] = True
        for arm, ch in changed.items():
            out[arm]["n"] += 1
            out[arm]["changes"] += ch
    for o in out.values():
        o["p_change"] = o["changes"] / o["n"] if o["n"] else None
        o["bound"] = change_bound(o["changes"], o["n"])
    return out

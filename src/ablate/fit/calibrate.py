"""Calibration by simulation: how often the intervals cover the truth and the verdicts are right, measured on
synthetic arms with known parameters and realistic noise, through the exact code `ablate rank` runs.

A cell is (curve shape, noise model, seeds per arm, window, effect). In each trial a baseline arm and an effect
arm are simulated; `compare.rank` fits both and gives the effect arm its verdict, and the baseline arm's fit is
scored for interval coverage:
- A_ci covers the truth: with one seed, that run's own ceiling (its seed's random effect included); with seeds,
  the arm's ceiling (the mean over seeds);
- pred_ci covers the truth at --to: with one seed, what the run will show there (the curve continued with its
  own drift and evaluation noise); with seeds, the arm's mean curve at --to.
Effects: `null` (identical truth: any ceiling or efficiency verdict is a false discovery; `equivalent` is the right
answer, and its rate is the power to show the arms equal), `a+0.03`, `a+0.05`, `cmid/2` (an efficiency change: found
as efficiency, never as a ceiling change) and `b*1.5`; and the boundary of the smallest effect that matters (the
default `MinEffect`): `a+0.02` and `a-0.02` (a true difference of the arms' mean A of exactly 0.02) and `cmid*1.15`
(compute to every pass rate exactly 1.15x, at the same A), and `a+0.02@end` (A 0.02 higher, meeting the
baseline's pass rate at the window's end, ranked with the compute band opened: see ONLY_A). `equivalent` claims
|dA| < 0.02 and the compute ratio within +-15%, so on every non-null effect it is a false claim; at the boundary its
rate is the equivalence test's size, at most 5%. The test is intersection-union over A and compute, so a boundary
cell is a strong check of one side only when the other side passes: `cmid*1.15` checks the compute side (A equal),
`a+0.02@end` the A side. A plain `a+-0.02` still moves the compute to 3/4 of the gain under the shared A (by 10-30%),
so compute often decides there.

Windows are set by the gain fraction f the window reaches, `c_max = C_mid (f / (1 - f))^(1/B)`; every window has
the same number of evaluations, and --to is twice the window. `calibrate(...)` returns one row per cell.

With one seed per arm a verdict needs a seed spread measured elsewhere: `floor="stored"` cells first measure it on a
separate simulated sweep of the same shape and noise (two arms of four seeds), as `--save-noise` would, and pass it
to every trial's ranking as `--noise` does; `floor="own"` cells use only what the ranking itself measures.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ablate.fit.compare import rank
from ablate.fit.curve import Curve
from ablate.fit.futures import verdict_key
from ablate.fit.result import FitOptions
from ablate.fit.sigmoid import sigmoid
from ablate.fit.spread import MinEffect, NoiseFloor
from ablate.fit.synthetic import synthetic_curve
from ablate.fit.taskmodel import TaskModel
from ablate.fit.verdicts import measured_floor


@dataclass(frozen=True)
class Shape:
    """A curve's truth and its evaluation set: mean@k over `prompts` validation prompts."""

    name: str
    r0: float
    a: float
    b: float
    c_mid: float
    prompts: int
    k: int


@dataclass(frozen=True)
class Noise:
    """Noise beyond the evaluation's own: AR(1) drift, heavy-tailed jumps, seed-to-seed spread of A and C_mid."""

    name: str
    drift_sd: float = 0.0
    drift_phi: float = 0.0
    jump_rate: float = 0.0
    jump_sd: float = 0.0
    seed_sd_a: float = 0.0
    seed_sd_logc: float = 0.0


SHAPES = {
    # the paper's Table 1 (GPU-hours; R0 0.3 as in its Figure 1), evaluated as mean@16 on 1,000 prompts
    "scalerl-8b": Shape("scalerl-8b", 0.30, 0.610, 1.92, 2542.0, 1000, 16),
    "scalerl-scout": Shape("scalerl-scout", 0.30, 0.710, 1.65, 4242.0, 1000, 16),
    # the embedded default (samples axis): mean@4 on 200 prompts
    "embedded": Shape("embedded", 0.43, 0.750, 1.10, 37000.0, 200, 4),
}
NOISES = {
    "eval": Noise("eval"),
    "ar0.5": Noise("ar0.5", drift_sd=0.006, drift_phi=0.5),
    "ar0.9": Noise("ar0.9", drift_sd=0.008, drift_phi=0.9),
    "jumps": Noise("jumps", drift_sd=0.005, drift_phi=0.7, jump_rate=0.05, jump_sd=0.02),
    "seeds": Noise("seeds", drift_sd=0.005, drift_phi=0.7, seed_sd_a=0.010, seed_sd_logc=0.10),
}
EFFECTS = {
    "null": {},
    "a+0.03": {"a": 0.03},
    "a+0.05": {"a": 0.05},
    "cmid/2": {"c_mid": 0.5},
    "b*1.5": {"b": 1.5},
    "a+0.02": {"a": 0.02},
    "a-0.02": {"a": -0.02},
    "cmid*1.15": {"c_mid": 1.15},
    "a+0.02@end": {"a": 0.02, "meet": 1.0},
}
"""New effects go at the end: a cell's random numbers depend on its effect's position here. `meet`: C_mid moved so
the arm's curve meets the baseline's at that multiple of the window's end (see ONLY_A)."""
BOUNDARY = ("a+0.02", "a-0.02", "cmid*1.15", "a+0.02@end")
"""Effects on the edge of the default smallest effect that matters (`MinEffect()`: 0.02 on A, 1.15x compute)."""
ONLY_A = MinEffect(ratio=100.0)
"""The smallest effect of the cells that check the A side of the equivalence test alone (effects with `meet`): a
plain shift of A by 0.02 also moves the compute to 3/4 of the gain under the shared A (0.78-0.90x in these shapes;
0.45-0.66x when efficiency was read at the target's pass rate), so the compute side can decide there. Meeting the
baseline at the window's end, with this band (100x either way) taking compute out of the equivalence test, lets the
A side alone decide."""
WANTED = {
    "null": None,
    "a+0.03": "ceiling_up",
    "a+0.05": "ceiling_up",
    "cmid/2": "efficiency_up",
    "b*1.5": "efficiency_up",
    "a+0.02": "ceiling_up",
    "a-0.02": "ceiling_down",
    "cmid*1.15": "efficiency_down",
    "a+0.02@end": "ceiling_up",
}
"""The changed verdict each effect should get (its power)."""
POINTS = 40  # evaluations in every window
CALLS = (
    "ceiling_up",
    "ceiling_down",
    "efficiency_up",
    "efficiency_down",
    "not_identified_higher",
    "not_identified_lower",
)


def window_end(shape: Shape, f: float) -> float:
    """The compute at which the curve has made a fraction f of its gain."""
    return shape.c_mid * (f / (1.0 - f)) ** (1.0 / shape.b)


def shape_model(shape_name: str, noise_name: str, f: float = 0.9, points: int = 40) -> TaskModel:
    """A calibration shape and noise model as `ablate plan`'s task model: two arms, runs ending at a gain fraction
    f with `points` evaluations, the seed spread the noise model gives (what bench/looks.py and bench/decide.py
    simulate)."""
    shape, noise = SHAPES[shape_name], NOISES[noise_name]
    end = window_end(shape, f)
    return TaskModel(
        x="compute", r0=shape.r0, a=shape.a, b=shape.b, c_mid=shape.c_mid, val_n=float(shape.prompts * shape.k),
        eval_every=end / points, drift_sd=noise.drift_sd, drift_rho=noise.drift_phi, seed_sd_a=noise.seed_sd_a,
        seed_sd_logc=noise.seed_sd_logc, seed_dof=1000, fit_sd_a=0.0, fit_sd_logc=0.0, budget=end, arms=2,
        source=f"{shape_name}, {noise_name}",
    )  # fmt: skip


def _truth(shape: Shape, effect: dict[str, float], c_max: float) -> tuple[float, float, float]:
    """The arm's A, B and C_mid; with `meet`, C_mid such that its curve passes through the baseline's pass rate at
    `meet` x the window's end `c_max`."""
    a, b, c_mid = (
        min(shape.a + effect.get("a", 0.0), 0.99),
        shape.b * effect.get("b", 1.0),
        shape.c_mid * effect.get("c_mid", 1.0),
    )
    if "meet" in effect:
        at = effect["meet"] * c_max
        gain = (float(sigmoid(at, shape.r0, shape.a, shape.b, shape.c_mid)) - shape.r0) / (a - shape.r0)
        if not 0.0 < gain < 1.0:
            raise ValueError(f"shape {shape.name}: an arm with A {a:g} can't meet the baseline's pass rate at {at:g}")
        c_mid = at * (1.0 / gain - 1.0) ** (1.0 / b)
    return a, b, c_mid


def simulate_arm(
    shape: Shape, noise: Noise, effect: dict[str, float], seeds: int, f: float, rng: np.random.Generator, name: str
) -> tuple[list[Curve], list[dict[str, float]]]:
    """`seeds` runs of one arm, each observed up to the window end plus its continuation to twice that (held
    out: the fit sees only the window). Returns the curves and each run's truth (A, and y at --to observed)."""
    c_max = window_end(shape, f)
    a, b, c_mid = _truth(shape, effect, c_max)
    curves, truths = [], []
    for s in range(seeds):
        a_j = float(np.clip(a + noise.seed_sd_a * rng.standard_normal(), shape.r0 + 0.02, 0.99))
        c_j = float(c_mid * np.exp(noise.seed_sd_logc * rng.standard_normal()))
        c = synthetic_curve(
            a=a_j,
            b=b,
            c_mid=c_j,
            r0=shape.r0,
            c_max=2 * c_max,
            n_points=2 * POINTS,
            n_prompts=shape.prompts,
            k=shape.k,
            drift_sd=noise.drift_sd,
            drift_phi=noise.drift_phi,
            jump_rate=noise.jump_rate,
            jump_sd=noise.jump_sd,
            seed=rng,
            run=f"{name}-{s}",
            group=name,
        )
        truths.append({"A": a_j, "y_to": float(c.y[-1])})
        curves.append(c)
    return curves, truths


def arm_truth(shape: Shape, noise: Noise, effect: dict[str, float], to: float, draws: int = 4000) -> dict[str, float]:
    """The arm's mean ceiling and mean curve at `to` (twice the window's end) over the seeds' random effects
    (Monte Carlo)."""
    a, b, c_mid = _truth(shape, effect, to / 2.0)
    rng = np.random.default_rng(12345)
    a_j = np.clip(a + noise.seed_sd_a * rng.standard_normal(draws), shape.r0 + 0.02, 0.99)
    c_j = c_mid * np.exp(noise.seed_sd_logc * rng.standard_normal(draws))
    return {"A": float(a_j.mean()), "R_to": float(sigmoid(to, shape.r0, a_j, b, c_j).mean())}


def stored_floor(shape: Shape, noise: Noise, f: float, opts: FitOptions, rng: np.random.Generator) -> NoiseFloor:
    """The seed spread measured once on a separate simulated sweep: two identical arms of four seeds."""
    curves = []
    for name in ("s1", "s2"):
        curves += simulate_arm(shape, noise, {}, 4, f, rng, name)[0]
    ranking = rank(curves, opts, baseline="s1", decide=False)
    floor = measured_floor(ranking.arms)
    return floor or NoiseFloor(sd_A=1.0, sd_logc=10.0, dof=1, source="unmeasurable: seeds not identified")


def run_cell(
    shape: Shape,
    noise: Noise,
    seeds: int,
    f: float,
    effect: str,
    trials: int,
    *,
    seed: int = 0,
    n_boot: int = 300,
    floor: str = "own",
) -> dict[str, Any]:
    """One cell: `trials` simulated (baseline, effect arm) pairs through `rank`. Returns rates and counts."""
    rng = np.random.default_rng(
        [
            seed,
            seeds,
            int(f * 1000),
            list(EFFECTS).index(effect),
            list(SHAPES).index(shape.name) if shape.name in SHAPES else 99,
            list(NOISES).index(noise.name) if noise.name in NOISES else 99,
            0 if floor == "own" else 1,
        ]
    )
    to = 2 * window_end(shape, f)
    opts = FitOptions(n_boot=n_boot, target=to, seed=seed, fit_until=window_end(shape, f) * 1.000001)
    pop = arm_truth(shape, noise, {}, to)
    delta_a_true = arm_truth(shape, noise, EFFECTS[effect], to)["A"] - pop["A"]
    if effect in BOUNDARY and abs(delta_a_true - EFFECTS[effect].get("a", 0.0)) > 1e-9:
        raise ValueError(
            f"effect {effect} on shape {shape.name}: the arms' mean A differ by {delta_a_true:.6f}, not "
            f"{EFFECTS[effect].get('a', 0.0):g} (a clip of A moved the boundary); use a lower A"
        )
    stored = stored_floor(shape, noise, f, opts, rng) if floor == "stored" else None
    min_effect = ONLY_A if "meet" in EFFECTS[effect] else MinEffect()
    verdicts: dict[str, int] = {}
    cover_a = cover_pred = scored = 0
    for t in range(trials):
        base, base_truth = simulate_arm(shape, noise, {}, seeds, f, rng, "base")
        arm, _ = simulate_arm(shape, noise, EFFECTS[effect], seeds, f, rng, "arm")
        trial = replace(opts, seed=seed * 100003 + t)
        ranking = rank(base + arm, trial, baseline="base", noise=stored, min_effect=min_effect, decide=False)
        by = {a.arm: a for a in ranking.arms}
        v = verdict_key(by["arm"]) if "arm" in by else "not_fitted"  # not identified: with its end-of-window call
        verdicts[v] = verdicts.get(v, 0) + 1
        fit = by["base"].fit if "base" in by else None
        if fit is None or fit.A_ci is None or fit.pred_ci is None:
            continue
        scored += 1
        a_true = base_truth[0]["A"] if seeds == 1 else pop["A"]
        r_true = base_truth[0]["y_to"] if seeds == 1 else pop["R_to"]
        cover_a += fit.A_ci[0] <= a_true <= fit.A_ci[1]
        cover_pred += fit.pred_ci[0] <= r_true <= fit.pred_ci[1]
    calls = sum(verdicts.get(v, 0) for v in CALLS)
    wanted = WANTED[effect]
    equivalent = verdicts.get("equivalent", 0) / trials
    return {
        "shape": shape.name,
        "noise": noise.name,
        "seeds": seeds,
        "floor": floor,
        "f": f,
        "effect": effect,
        "trials": trials,
        "boundary": effect in BOUNDARY,
        "delta_A_true": delta_a_true,
        "min_effect": min_effect.to_json(),
        "coverage_A": cover_a / scored if scored else None,
        "coverage_pred": cover_pred / scored if scored else None,
        "false_call_rate": calls / trials if effect == "null" else None,
        "power": verdicts.get(wanted, 0) / trials if wanted else None,
        "equivalent_rate": equivalent,
        "false_equivalent_rate": equivalent if effect != "null" else None,
        "ceiling_calls": (verdicts.get("ceiling_up", 0) + verdicts.get("ceiling_down", 0)) / trials,
        "not_identified": sum(n for v, n in verdicts.items() if v.startswith("not_identified")) / trials,
        "verdicts": verdicts,
    }


def _cell(args: tuple) -> dict[str, Any]:
    sh, no, s, f, ef, floor, trials, seed, n_boot = args
    return run_cell(SHAPES[sh], NOISES[no], s, f, ef, trials, seed=seed, n_boot=n_boot, floor=floor)


def calibrate(
    shapes: Sequence[str],
    noises: Sequence[str],
    seeds: Sequence[int],
    fs: Sequence[float],
    effects: Sequence[str],
    trials: int,
    *,
    seed: int = 0,
    n_boot: int = 300,
    jobs: int = 1,
    stored_floor_for_one_seed: bool = True,
    progress=None,
) -> list[dict[str, Any]]:
    """Every cell of the grid (see the module docstring), on `jobs` worker processes; `progress(i, n, row)` after
    each cell. Single-seed cells run twice, with their own floor (none) and with a stored one. Rows come back in
    grid order, and each cell's random numbers depend only on the cell and `seed`."""
    cells = []
    for sh, no, s, f, ef in itertools.product(shapes, noises, seeds, fs, effects):
        floors = ("own", "stored") if s == 1 and stored_floor_for_one_seed else ("own",)
        cells += [(sh, no, s, f, ef, fl, trials, seed, n_boot) for fl in floors]
    rows: list[dict[str, Any]] = []
    if jobs <= 1 or len(cells) < 2:
        for i, c in enumerate(cells):
            rows.append(_cell(c))
            if progress:
                progress(i + 1, len(cells), rows[-1])
        return rows
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        for i, row in enumerate(pool.map(_cell, cells)):
            rows.append(row)
            if progress:
                progress(i + 1, len(cells), row)
    return rows

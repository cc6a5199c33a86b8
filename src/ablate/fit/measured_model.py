"""The task model `ablate plan` simulates from, measured on a ranked sweep (`from_ranking`): the baseline's curve,
the evaluation noise and drift pooled over every run, and the seed spread of A and log compute as `rank` measured
it, with the part of it that is the fits' own error (fit/planning.py's docstring says how a plan uses each)."""

from __future__ import annotations

import math
from typing import NoReturn

import numpy as np

from ablate.errors import ErrorKind, SettingError, UserError, joined, phrased
from ablate.fit.arms import Ranking
from ablate.fit.compare import rank
from ablate.fit.exact import sim_options
from ablate.fit.taskmodel import TaskModel, simulate_runs
from ablate.fit.verdicts import measured_floor


def _fit_error(m: TaskModel, seeds: int, compute: float, sims: int, seed: int) -> tuple[float, float]:
    """The spread between seeds' fitted A and log compute that fit error alone gives at this design (the same
    model without seed spread), as the variances `measured_floor` would report."""
    rng = np.random.default_rng([seed, 7])
    va, vc = [], []
    for i in range(sims):
        curves = []
        for k in range(max(2, min(m.arms, 3))):
            curves += simulate_runs(m, m.a, m.b, m.c_mid, seeds, compute, rng, f"arm{k}", 0.0, 0.0)
        r = rank(curves, sim_options(compute, seed * 31 + i), baseline="arm0", decide=False)
        floor = measured_floor(r.arms)
        if floor is not None:
            va.append(floor.sd_A**2)
            vc.append(floor.sd_logc**2)
    return (float(np.mean(va)) if va else 0.0, float(np.mean(vc)) if vc else 0.0)


def _no_spread(ranking: Ranking) -> NoReturn:
    """Why a ranking measured no seed spread to plan with, as the one-line error that says what to do."""
    waiting = [n for n in ranking.notes if n.kind == "baseline_waiting"]
    if ranking.baseline is None and waiting:  # the sweep's baseline, not evaluated yet
        raise UserError(f"nothing to plan against yet: {waiting[0]}", kind=ErrorKind.DATA)
    if ranking.baseline is None:
        raise SettingError(
            "no baseline arm to plan against: the seed spread is measured in comparisons with it; give {baseline} ARM",
            "baseline",
        )
    seeded = [a for a in ranking.arms if a.seeds >= 2]
    longer = (
        "run longer (a new sweep with a larger train.max_steps, in another sweep folder: a run's length is part of "
        "its id) or give {noise} FILE"
    )
    if seeded and all(a.fit.seeds is None or a.fit.seeds.n_identified < 2 for a in seeded):
        why = joined("; ", dict.fromkeys(w for a in seeded for w in a.fit.why_not_identified)) or "fitted alone"
        raise SettingError(
            phrased(
                "no seed spread to plan with: arms have seeds, but no arm has 2 whose A is identified (",
                why,
                "): " + longer,
            ),
            "noise",
            kind=ErrorKind.DATA,
        )
    base = next((a for a in ranking.arms if a.arm == ranking.baseline), None)
    compared = base is not None and base.fit.identifiable and any(a.fit.identifiable for a in ranking.arms if a != base)
    if seeded and not compared:
        raise SettingError(  # seeds identified alone, but no pooled arm compared: no compute ratio to spread
            "no seed spread to plan with: no arm is compared with the baseline (its A or the baseline's is not "
            "identified with the seeds pooled), so no compute ratio was read; " + longer,
            "noise",
            kind=ErrorKind.DATA,
        )
    if seeded:
        raise SettingError(
            "no seed spread to plan with: the seeds measured none (identical seeds, or no compute ratio could be "
            "read from them); give {noise} FILE",
            "noise",
            kind=ErrorKind.DATA,
        )
    raise SettingError(
        "no seed spread to plan with: no arm has 2 identified seeds; run the sweep with seeds "
        "(seed=0,1,2) or give {noise} FILE",
        "noise",
        kind=ErrorKind.DATA,
    )


def from_ranking(
    ranking: Ranking,
    *,
    budget: float,
    seeds: int,
    gpu_hours_per_x: float | None = None,
    steps_per_x: float | None = None,
    source: str = "",
    seed: int = 0,
) -> TaskModel:
    """The task model measured on a ranked sweep (see the module docstring). `budget`: the compute a run reaches at
    its max_steps; `seeds`: seeds per arm the sweep ran (the design the seed spread was measured at)."""
    if not ranking.arms:
        raise UserError("nothing to plan from: no arm could be fitted", kind=ErrorKind.DATA)
    by = {a.arm: a for a in ranking.arms}
    notes = []
    base = by.get(ranking.baseline or "")
    if base is None:
        ident = [a for a in ranking.arms if a.fit.identifiable] or ranking.arms
        base = ident[0]
        notes.append(f"no baseline: the curve simulated is arm {base.arm!r}'s")
    f = base.fit
    if not f.identifiable:
        notes.append(
            f"arm {base.arm!r}'s A is not identified: its point fit (A {f.A:.3f}) is what is simulated; "
            "run longer to measure it"
        )
    floor = ranking.floor
    if floor is None:
        _no_spread(ranking)
    est = [e for a in ranking.arms for e in (a.fit.noise or [])]
    if est:
        drift_sd = math.sqrt(float(np.median([e.drift_var for e in est])))
        rho = float(np.median([e.rho for e in est]))
        known = all(e.eval_known for e in est)
    else:
        drift_sd, rho, known = 0.0, 0.0, False
        notes.append(
            "no drift measured (the fits' noise estimates are missing): only the evaluation noise and the "
            "seed spread are simulated"
        )
    curves = [c for a in ranking.arms for c in a.fit.curves]
    ns = [float(np.median(c.n)) for c in curves if c.n is not None]
    val_n = float(np.median(ns)) if ns and known else None
    steps = [float(np.median(np.diff(c.x[c.x > 0]))) for c in curves if (c.x > 0).sum() >= 2]
    eval_every = float(np.median(steps)) if steps else budget / 40
    m = TaskModel(
        x=ranking.x,
        r0=f.R0,
        a=f.A,
        b=f.B,
        c_mid=f.C_mid,
        val_n=val_n,
        eval_every=eval_every,
        drift_sd=drift_sd,
        drift_rho=rho,
        seed_sd_a=floor.sd_A,
        seed_sd_logc=floor.sd_logc,
        seed_dof=floor.dof,
        fit_sd_a=0.0,
        fit_sd_logc=0.0,
        budget=budget,
        arms=len({a.arm for a in ranking.arms} | {d.arm or d.label for d in ranking.not_fitted}),
        gpu_hours_per_x=gpu_hours_per_x,
        steps_per_x=steps_per_x,
        source=f"{source}; seed spread: {floor.source}",
        notes=notes,
    )
    # how much of the measured spread is the fits' own error at the window it was measured on
    window = max(float(c.x.max()) for c in curves)
    err_a, err_c = _fit_error(m, max(2, seeds), window, sims=12, seed=seed)
    m.fit_sd_a, m.fit_sd_logc = math.sqrt(err_a), math.sqrt(err_c)
    return m

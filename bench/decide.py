"""Benchmark: compute to a decision, `sweep --decide` against the fixed design and AdaStop, on the same simulated runs.

Each simulated sweep is two arms (an effect arm and the baseline) on a calibration shape and noise model
(fit/calibrate.py), up to 12 seeds an arm, through `ablate plan`'s fast engine (rank's own tests, every trial at
once). On the same runs, four procedures:

- decide:  `sweep --decide --wave 3 --max-seeds 12`: looks at 3, 6, 9, 12 seeds, each held to 5% / 4, stopping an
           arm at its first settled verdict, or once 12 seeds could not settle it (fit/sequential.py);
- by hand: the same looks each held to 5% (adding seeds and ranking again until something is called);
- fixed:   one ranking at 12 seeds (the fixed design of the same maximum size);
- plan:    the fixed design `ablate plan` chooses at the same budget for 80% power on its two questions (ΔA of 0.02,
           a 1.25x compute ratio), up to 32 seeds an arm: printed per shape and noise, with decide's compute
           against it (a design that reaches 80% nowhere within 32 seeds counts as 32: a lower bound);
- AdaStop: the group-sequential permutation test of Mathieu et al. (TMLR 2024; `adastop` 0.1.3), waves of 3 and 4
           looks at level 5%, on per-run scores: each seed's fitted A, and its mean pass rate over the last three
           evaluations (AdaStop compares scores; it cannot say ceiling or efficiency, nor claim equivalence).

Truths: null (identical arms: any change called is false), ΔA = +0.02 (exactly the smallest effect that matters:
`equivalent` is false), ΔA = +0.05 and C_mid / 2 (a change: the right call is ceiling ↑, efficiency ↑; for AdaStop,
`larger`). Printed per cell: each procedure's rate of the call that matters (false change, false equivalent, or the
right call) and its mean seeds an arm (compute, against the fixed design's 12).

    .venv/bin/python bench/decide.py [--trials 200] [--adastop-trials 100] [--plan-trials 100] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ablate.fit import power
from ablate.fit.batch_verdicts import CODES
from ablate.fit.calibrate import shape_model
from ablate.fit.sequential import CHANGES, Looks, simulate
from ablate.fit.spread import MinEffect

WAVE, MAX_SEEDS = 3, 12
ME = MinEffect()
TRUTHS: dict[str, tuple[dict[str, float], str | None]] = {
    "null": ({}, None),
    "dA=+0.02": ({"a": ME.a}, None),
    "dA=+0.05": ({"a": 0.05}, "ceiling_up"),
    "C_mid/2": ({"c_mid": 0.5}, "efficiency_up"),
}


def adastop(scores: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """AdaStop on [T, 2 arms, MAX_SEEDS] per-run scores: per trial, +1 (arm 0 larger), -1 (smaller) or 0, and the
    seeds an arm it used."""
    from adastop import MultipleAgentsComparator

    T = scores.shape[0]
    call, used = np.zeros(T, dtype=int), np.zeros(T, dtype=int)
    looks = MAX_SEEDS // WAVE
    for t in range(T):
        comp = MultipleAgentsComparator(n=WAVE, K=looks, B=2000, alpha=0.05, seed=seed + t)
        for k in range(looks):
            have = (k + 1) * WAVE
            comp.partial_compare({"arm": scores[t, 0, :have], "base": scores[t, 1, :have]}, verbose=False)
            if comp.is_finished:
                break
        d = comp.decisions["[0 1]"]
        # AdaStop's "larger" means the first agent's scores are larger than the second's
        call[t] = {"larger": 1, "smaller": -1}.get(d, 0)
        used[t] = comp.n_iters["arm"]
    return call, used


def plan_seeds(shape: str, noise: str, trials: int, seed: int) -> dict[str, int | None]:
    """Seeds an arm `ablate plan` chooses for 80% power at the shape's budget, per question (None: > 32)."""
    from ablate.fit.planning import design

    m = shape_model(shape, noise)
    got = {}
    for q in ("ceiling", "efficiency"):
        best = design(m, q, rungs=(1.0,), trials=trials, seed=seed).best
        got[q] = None if best is None else int(best.seeds)
    return got


def cell(shape: str, noise: str, truth: str, trials: int, ada_trials: int, seed: int) -> dict[str, Any]:
    effect, right = TRUTHS[truth]
    m = shape_model(shape, noise)
    rung = power.rung_for(m, m.budget, effect, trials, 2, seed)
    looks = Looks(WAVE, MAX_SEEDS)
    out: dict[str, Any] = {"shape": shape, "noise": noise, "truth": truth, "trials": trials}

    def rate(codes: np.ndarray, changed: np.ndarray, equivalent: np.ndarray) -> float:
        if truth == "null":
            return float(changed.mean())
        if right is None:
            return float(equivalent.mean())
        return float((codes == CODES.index(right)).mean())

    for name, naive in (("decide", False), ("by_hand", True)):
        s = simulate(rung, looks, noise=None, me=ME, extra_arms=0, seed=seed, naive=naive, futility=not naive)
        out[name] = {"rate": rate(s.code, s.ever_changed, s.ever_equivalent), "seeds": float(s.seeds.mean())}
    fixed, _ = power.verdict_codes(rung, MAX_SEEDS, noise=None, me=ME, extra_arms=0, rng=np.random.default_rng(seed))
    changes = np.isin(fixed, [CODES.index(c) for c in CHANGES])
    out["fixed"] = {"rate": rate(fixed, changes, fixed == CODES.index("equivalent")), "seeds": float(MAX_SEEDS)}
    if ada_trials:
        ys = rung.y[:ada_trials, :, :MAX_SEEDS]  # [T, arms, seeds, points]
        for name, scores in (
            ("adastop_A", rung.seed_fit[:ada_trials, :, :MAX_SEEDS, 1]),
            ("adastop_R", ys[..., -3:].mean(-1)),
        ):
            call, used = adastop(scores, seed)
            ada = {"null": float((call != 0).mean()), "dA=+0.02": float("nan")}.get(truth, float((call == 1).mean()))
            out[name] = {"rate": ada, "seeds": float(used.mean())}
    return out


WHAT = {"null": "false change", "dA=+0.02": "false equivalent", "dA=+0.05": "right call", "C_mid/2": "right call"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--adastop-trials", type=int, default=100, help="AdaStop is run per trial (slower); 0: skip it")
    ap.add_argument("--shapes", default="embedded,scalerl-8b")
    ap.add_argument("--noises", default="ar0.5,seeds")
    ap.add_argument("--plan-trials", type=int, default=100, help="trials per plan cell; 0: skip the plan design")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    procs = ["decide", "by_hand", "fixed", *(["adastop_A", "adastop_R"] if args.adastop_trials else [])]
    print(f"{'shape':<11} {'noise':<6} {'truth':<9} {'rate of':<16} " + " ".join(f"{p:>15}" for p in procs))
    rows, plans = [], []
    for shape in args.shapes.split(","):
        for noise in args.noises.split(","):
            group = []
            for k, truth in enumerate(TRUTHS):
                r = cell(shape, noise, truth, args.trials, args.adastop_trials, seed=100 + k)
                group.append(r)
                cells = " ".join(f"{r[p]['rate']:>6.3f} @{r[p]['seeds']:>4.1f}s".rjust(15) for p in procs)
                print(f"{shape:<11} {noise:<6} {truth:<9} {WHAT[truth]:<16} {cells}", flush=True)
            rows += group
            if args.plan_trials:
                chosen = plan_seeds(shape, noise, args.plan_trials, seed=7)
                n = max(32 if v is None else v for v in chosen.values())
                spent = float(np.mean([r["decide"]["seeds"] for r in group]))
                plans.append({"shape": shape, "noise": noise, "plan": chosen, "fixed_seeds": n, "decide": spent})
                said = ", ".join(f"{q} {'> 32' if v is None else v}" for q, v in chosen.items())
                print(
                    f"{'':<11} plan's fixed design for 80% power: {said} seeds an arm; decide spends "
                    f"{spent:.1f} ({spent / n:.0%} of {n})",
                    flush=True,
                )
    print("each cell: the rate, @ the mean seeds an arm spent (the fixed design: 12)")
    decide_seeds = np.mean([r["decide"]["seeds"] for r in rows])
    share = decide_seeds / MAX_SEEDS
    print(f"decide's mean seeds an arm over every cell: {decide_seeds:.1f} of 12 ({share:.0%} of the fixed design)")
    if plans:
        share = np.mean([p["decide"] / p["fixed_seeds"] for p in plans])
        print(f"against the design `ablate plan` chooses for 80% power: {share:.0%} of its compute on average")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"cells": rows, "plan": plans}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: what ranking a sweep after every wave of seeds does to the 5% that one ranking controls.

A user who adds seeds to an undecided sweep and ranks it again runs a sequential procedure: look, and if nothing is
decided, add a wave and look again. Each look is `rank`'s own test at a 5% false-discovery rate; the procedure as a
whole is not. This replays that procedure on null arms (two identical arms: any ceiling or efficiency call is false)
with `ablate plan`'s fast engine (the tests and false-discovery control of `rank`, every trial at once): waves of 3
seeds an arm, a look after each, stopping at the first change called. It prints, per task shape and largest sweep,
the false-call rate of one look at the largest size (the fixed design) and of the whole procedure.

    .venv/bin/python bench/looks.py [--trials 400] [--json FILE]

`rank` says so when a sweep's ledger shows that its arms grew in more than one wave (docs/verdicts.md).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ablate.fit import power
from ablate.fit.batch_verdicts import CODES
from ablate.fit.calibrate import shape_model
from ablate.fit.spread import MinEffect
from ablate.fit.taskmodel import TaskModel

WAVE = 3
CHANGES = [CODES.index(c) for c in ("ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down")]


def procedure(m: TaskModel, max_seeds: int, trials: int, seed: int) -> dict[str, float]:
    """False calls on null arms: at one look with `max_seeds` seeds an arm, and over looks after every wave."""
    rung = power.rung_for(m, m.budget, {}, trials, 2, seed)
    me = MinEffect()
    called = np.zeros(trials, dtype=bool)
    last = None
    looks = list(range(WAVE, max_seeds + 1, WAVE))
    for k, seeds in enumerate(looks):
        rng = np.random.default_rng([seed, k])
        codes, _ = power.verdict_codes(rung, seeds, noise=None, me=me, extra_arms=0, rng=rng)
        called |= np.isin(codes, CHANGES)
        last = codes
    assert last is not None
    return {"looks": len(looks), "fixed": float(np.isin(last, CHANGES).mean()), "procedure": float(called.mean())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    print(f"{'shape':<12} {'noise':<7} {'seeds':>5} {'looks':>5} {'one look':>9} {'every wave':>11}  ratio")
    for shape in ("embedded", "scalerl-8b"):
        for noise in ("ar0.5", "seeds"):
            m = shape_model(shape, noise)
            for max_seeds in (6, 12, 30):
                r = procedure(m, max_seeds, args.trials, seed=max_seeds)
                rows.append({"shape": shape, "noise": noise, "max_seeds": max_seeds, **r, "trials": args.trials})
                ratio = r["procedure"] / r["fixed"] if r["fixed"] else float("inf")
                print(
                    f"{shape:<12} {noise:<7} {max_seeds:>5} {r['looks']:>5} {r['fixed']:>9.3f} "
                    f"{r['procedure']:>11.3f}  {ratio:.1f}x",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

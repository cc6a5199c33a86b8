"""The settled rule of `ablate sweep --prune`, on simulated sweeps with known truth (evaluation noise,
autocorrelated drift, seed-to-seed spread): a pruned sweep reaches the full sweep's verdicts with less compute, and
a stopped arm is read against the baseline on the stopped arm's own window. bench/prune_sim.py measures the same
over many more sweeps."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from ablate.fit.arms import CHANGED
from ablate.fit.calibrate import NOISES, SHAPES, simulate_arm, window_end
from ablate.fit.compare import rank
from ablate.fit.result import FitOptions
from ablate.prune.rules import PruneSettings, simulate

NULL = {"base": {}, "b": {}, "c": {}, "d": {}}


def _cut(c, end: float, status: str | None):
    keep = c.x <= end * (1 + 1e-9)
    return replace(c, x=c.x[keep], y=c.y[keep], n=c.n[keep], stopped=status)


def test_a_stopped_arm_is_compared_on_its_own_window():
    """A null arm stopped at 40% of the budget is read against the baseline's first 40%: false calls stay at the
    tests' rate, and the verdict says so."""
    shape, noise = SHAPES["scalerl-8b"], NOISES["seeds"]
    budget = window_end(shape, 0.9)
    rng = np.random.default_rng(3)
    calls, n = 0, 40
    for i in range(n):
        base, _ = simulate_arm(shape, noise, {}, 3, 0.9, rng, "base")
        arm, _ = simulate_arm(shape, noise, {}, 3, 0.9, rng, "arm")
        curves = [_cut(c, budget, None) for c in base] + [_cut(c, 0.4 * budget, "pruned") for c in arm]
        r = rank(curves, FitOptions(n_boot=100, target=2 * budget, seed=i), baseline="base")
        a = next(x for x in r.arms if x.arm == "arm")
        assert a.stopped == ["pruned"]
        if a.verdict in CHANGED:
            calls += 1
        elif a.verdict in ("equivalent", "inconclusive"):
            assert "read against the baseline's first" in a.detail, a.detail
    assert calls <= 0.1 * n, calls


def _sweep(args):
    arms, shape, seed = args
    # a settled check at every 20% of the way, its fits on 200 resamples (the monitor's defaults are 10% and rank's
    # 1,000; bench/prune_sim.py runs those): the rule is the same, the simulation five times lighter
    s = PruneSettings(x="gpu_hours", seed=seed, check_every=0.2, n_boot=200)
    return simulate(arms, shape=shape, seed=seed, settings=s)


BIG = {"base": {}, "null": {}, "a+0.12": {"a": 0.12}, "cmid/4": {"c_mid": 0.25}}


def test_a_pruned_sweep_reaches_the_full_sweeps_verdicts_and_stops_only_settled_decisions():
    """Only an arm shown equivalent or changed by more than the smallest effect that matters is stopped: null arms
    that are merely not significant run on (3 seeds cannot show them equal within ±15% compute), a large real
    ceiling change settles early and saves compute, and the pruned sweep reads as the full one."""
    jobs = [(NULL, "embedded", 0), (BIG, "scalerl-scout", 1)]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        out = list(pool.map(_sweep, jobs))
    pairs = [(r["full"][a], r["pruned"][a]) for r in out for a in r["full"] if a != "base"]
    assert sum(f == p for f, p in pairs) >= len(pairs) - 1, out
    for r in out:
        for arm in r["stopped"]:
            assert r["full"][arm] == "equivalent" or r["practical"][arm] == "material", (arm, r)
        assert r["spent"] <= 1.0 and "base" not in r["stopped"]
    null, big = out
    assert all(v == "inconclusive" for a, v in null["full"].items() if a != "base") and not null["stopped"], null
    assert big["stopped"] and big["spent"] < 1.0 and big["pruned"]["a+0.12"] == "ceiling_up", big


def test_an_inconclusive_arm_never_settles_however_stable():
    """The gate itself: an arm whose verdict no future changes is still open unless it is equivalent or a
    material change."""
    from types import SimpleNamespace

    from ablate.prune.outlook import Advice, ArmOutlook, Standing, advice

    ranking = SimpleNamespace(
        baseline="base", floor=object(), arms=[SimpleNamespace(arm="base", fit=SimpleNamespace(identifiable=True))]
    )
    row = ArmOutlook(
        arm="x",
        verdict="",
        identified=True,
        compute_now=100.0,
        compute_end=200.0,
        running=True,
        advice=Advice(Standing.OPEN, ""),
        p_change=0.0,
        bound=0.07,
        futures_n=40,
    )
    fit = SimpleNamespace(identifiable=True)
    for verdict, practical, state in [
        ("inconclusive", "unclear", "open"),
        ("ceiling_up", "unclear", "open"),
        ("ceiling_up", "negligible", "open"),
        ("ceiling_up", "material", "settled"),
        ("efficiency_down", "material", "settled"),
        ("equivalent", "negligible", "settled"),
    ]:
        arm = SimpleNamespace(arm="x", fit=fit, verdict=verdict, practical=practical)
        assert advice(arm, row, ranking, 0.10).standing == state, (verdict, practical)


def test_an_arm_whose_other_seeds_ran_on_is_read_on_the_whole_window():
    """One seed stopped `unstable` early, the others at the end: the arm's window is the baseline's, so it is
    compared with the whole baseline, not one refitted on the stopped seed's window."""
    shape, noise = SHAPES["scalerl-8b"], NOISES["seeds"]
    budget = window_end(shape, 0.9)
    rng = np.random.default_rng(5)
    base, _ = simulate_arm(shape, noise, {}, 3, 0.9, rng, "base")
    arm, _ = simulate_arm(shape, noise, {}, 3, 0.9, rng, "arm")
    curves = (
        [_cut(c, budget, None) for c in base]
        + [_cut(arm[0], 0.3 * budget, "unstable")]
        + [_cut(c, budget, None) for c in arm[1:]]
    )
    r = rank(curves, FitOptions(n_boot=100, target=2 * budget, seed=0), baseline="base")
    a = next(x for x in r.arms if x.arm == "arm")
    assert a.stopped == ["unstable"] and "read against the baseline's first" not in a.detail, a.detail
    # and stopped as a whole, it is read on its own window
    curves = [_cut(c, budget, None) for c in base] + [_cut(c, 0.5 * budget, "pruned") for c in arm]
    a = next(
        x
        for x in rank(curves, FitOptions(n_boot=100, target=2 * budget, seed=0), baseline="base").arms
        if x.arm == "arm"
    )
    assert "read against the baseline's first" in a.detail, a.detail

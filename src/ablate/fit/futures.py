"""Running arms: would more compute change their verdicts? Each run is continued from its own fitted curve
(shifted by a draw of its arm's bootstrap, so the fit's uncertainty travels) with its own measured drift, carried on
from its last residual, and evaluation noise, up to the compute its max_steps will reach; the sweep is re-ranked,
and the share of futures in which an arm's verdict differs from today's is how likely more compute is to change it.
docs/verdicts.md (Planning) says how `ablate plan` and `--prune` read it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.stats import beta as beta_dist

from ablate.errors import UserError
from ablate.fit.arms import ArmResult, Ranking
from ablate.fit.compare import rank
from ablate.fit.curve import Curve
from ablate.fit.noise import NoiseEstimate
from ablate.fit.sigmoid import PointFit, sigmoid
from ablate.fit.spread import NoiseFloor
from ablate.fit.taskmodel import PLAN_BOOT


def verdict_key(a: ArmResult) -> str:
    """An arm's verdict as one key (a not-identified arm with its end-of-window call: not_identified_higher)."""
    v = a.verdict or "not_fitted"
    return f"{v}_{a.r_call}" if v == "not_identified" and a.r_call else v


def _continue(
    c: Curve,
    fit_pf: PointFit,
    shift: Callable[[np.ndarray], np.ndarray],
    est: NoiseEstimate | None,
    x_end: float,
    rng: np.random.Generator,
) -> Curve:
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
        k = round(float(n[-1]))
        yf = rng.binomial(k, p) / k
        nf = np.concatenate([n, np.full(xf.size, float(k))])
    else:
        yf, nf = p, None
    return replace(c, x=np.concatenate([c.x, xf]), y=np.concatenate([c.y, yf]), n=nf)


def change_bound(changes: int, n: int, level: float = 0.95) -> float:
    """One-sided `level` Clopper-Pearson upper bound on the chance of a change seen `changes` times in `n`."""
    if n <= 0:
        return 1.0
    return 1.0 if changes >= n else float(beta_dist.ppf(level, changes + 1, n - changes))


def _one_future(
    ranking: Ranking,
    ends: dict[str, float],
    frozen: set[str] | frozenset[str],
    stopped_as: str,
    rng: np.random.Generator,
) -> tuple[list[Curve], list[Curve]]:
    """One simulated future of every run (`futures`): each run continued to its end, and the same with the runs of
    the `frozen` arms stopped where they are."""
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
            stopped.append(replace(c, stopped=stopped_as) if a.arm in frozen else cont)
    return going, stopped


def futures(
    ranking: Ranking,
    ends: dict[str, float],
    *,
    n: int = 40,
    seed: int = 0,
    noise: NoiseFloor | None = None,
    frozen: set[str] | frozenset[str] = frozenset(),
    stopped_as: str = "stopped",
) -> dict[str, dict[str, Any]]:
    """For each arm: today's verdict, and in how many of `n` simulated futures it changes. In each future every run
    goes on to its compute in `ends` (keyed by run name; runs not in it are over) from its own fit plus a bootstrap
    draw of its arm's curve, with its drift and evaluation noise, and the sweep is re-ranked: what the full sweep
    would say. The arms in `frozen` (candidates for stopping) are ranked a second time stopped where they are, the
    rest going on: what the sweep would say if they were stopped now (their runs marked `stopped_as`, the caller's
    name for the state; the ranking reads it only as "stopped early"). A change is a different verdict in either
    ranking, or an arm that can no longer be fitted; for the frozen arms, also any other arm whose verdict differs
    between the two rankings of the same future (stopping them moved it). Returns {arm: {"verdict", "changes", "n",
    "p_change", "bound" (the one-sided 95% upper bound on the chance of a change), "future": Counter of future
    verdicts, "stopped": Counter of verdicts when stopped now}}."""
    rng = np.random.default_rng([seed, 11])
    now = {a.arm: verdict_key(a) for a in ranking.arms}
    out: dict[str, dict[str, Any]] = {
        arm: {"verdict": v, "changes": 0, "n": 0, "future": {}, "stopped": {}} for arm, v in now.items()
    }
    opts = replace(ranking.opts, n_boot=min(ranking.opts.n_boot, PLAN_BOOT) or PLAN_BOOT)

    def tally(r: Ranking | None, key: str, arms: set[str], changed: dict[str, bool]) -> dict[str, str]:
        got = {} if r is None else {a.arm: verdict_key(a) for a in r.arms}
        for arm in arms:
            v = got.get(arm, "not_fitted")
            out[arm][key][v] = out[arm][key].get(v, 0) + 1
            changed[arm] = changed.get(arm, False) or v != out[arm]["verdict"]
        return got

    def ranked(curves: list[Curve], i: int) -> Ranking | None:
        try:
            return rank(
                curves,
                replace(opts, seed=seed * 7919 + i),
                baseline=ranking.baseline,
                noise=noise,
                x=ranking.x,
                min_effect=ranking.min_effect,
                decide=False,
            )
        except UserError:  # the baseline can't be fitted: no arm keeps its verdict
            return None

    for i in range(n):
        going, stopped = _one_future(ranking, ends, frozen, stopped_as, rng)
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

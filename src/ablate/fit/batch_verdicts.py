"""The verdicts of many simulated sweeps at once: the tests and false-discovery control of
`verdicts.decide_verdicts` in closed form over arrays, the last step of `ablate plan`'s fast engine (fit/power.py)."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri
from scipy.stats import t as student_t

from ablate.fit.spread import FDR, MinEffect, NoiseFloor
from ablate.fit.stats import benjamini_hochberg_rows, tost

FUTILE_POWER = 0.2
"""`sweep --decide` stops an open arm when its chance to be settled by the most seeds, at the difference measured,
is below this (`futile`)."""
FAMILY_CELLS = 4_000_000
"""p-values held at once in the false-discovery control of many trials (32 MB)."""
CODES = (
    "not_identified",
    "ceiling_up",
    "ceiling_down",
    "efficiency_up",
    "efficiency_down",
    "equivalent",
    "inconclusive",
)


def _arm0_discoveries(
    fam: np.ndarray, end: np.ndarray, extra_arms: int, rng: np.random.Generator, q: float = FDR
) -> np.ndarray:
    """Which of arm 0's three tests ([T, 3]: ceiling, efficiency, equivalence) are discoveries in its trial's family:
    fam [T, K, 3] the compared arms' tests, end [T, K] the end-of-window tests, and `extra_arms` arms beyond those
    simulated, three uniform p-values each. Changes (and end-of-window calls) are discoveries among the tests of
    change alone; equivalence among all."""
    T, K, _ = fam.shape
    is_eq = np.zeros(3 * K + K + 3 * extra_arms, dtype=bool)
    is_eq[2 : 3 * K : 3] = True
    is_eq[4 * K + 2 :: 3] = True
    found = np.zeros((T, 3), dtype=bool)  # arm 0's three tests: the family's first columns
    step = max(1, FAMILY_CELLS // (4 * K + 3 * extra_arms))  # trials at a time: a sweep of many arms stays small
    for lo in range(0, T, step):
        rows = slice(lo, min(T, lo + step))
        n = rows.stop - lo
        pvals = np.concatenate([fam[rows].reshape(n, -1), end[rows], rng.random((n, 3 * extra_arms))], axis=1)
        change = benjamini_hochberg_rows(np.where(is_eq, np.nan, pvals), q)[:, :3]
        every = benjamini_hochberg_rows(pvals, q)[:, :3]
        found[rows] = np.where(is_eq[:3], every, change)
    return found


def decide_codes(
    seed_a: np.ndarray,
    logc: np.ndarray,
    has_logc: np.ndarray,
    lr_fallback: np.ndarray,
    pooled_a: np.ndarray,
    compared: np.ndarray,
    ident: np.ndarray,
    ref: np.ndarray,
    noise: NoiseFloor | None,
    me: MinEffect,
    extra_arms: int,
    rng: np.random.Generator,
    q: float = FDR,
    horizon: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The tests and the false-discovery control of `verdicts.decide_verdicts` (at rate q), for every trial at once:
    [T] the index in CODES of arm 0's verdict, and [T] whether `sweep --decide` stops it: settled
    (`sequential.settled`), or, with `horizon` (the most seeds over the seeds it has), `futile`.
    seed_a [T, K, S] each seed's identified A (NaN: not identified); logc [T, K, S] each seed's log compute to 3/4
    of its gain under the pair's shared A, read where has_logc [T, K]; lr_fallback [T, K] the pooled fits' log
    compute ratio; pooled_a [T, K] the pooled fits' A; compared, ident [T, K]: which arms are compared with the
    baseline (arm 1), which are identified; ref [T, K] the baseline's pooled log compute to that share under each
    pair's shared A (what a side without seeds is read at)."""
    T, K, _ = seed_a.shape
    fin_a = np.isfinite(seed_a)
    n_a = fin_a.sum(2)
    mean_a = np.where(n_a > 0, np.nansum(seed_a, 2) / np.maximum(n_a, 1), np.nan)
    dev = np.where(fin_a, seed_a - mean_a[..., None], 0.0)
    use_a = n_a >= 2
    ss_a, dof_a = (np.where(use_a, (dev**2).sum(2), 0.0)).sum(1), np.where(use_a, n_a - 1, 0).sum(1)
    lc = np.where(has_logc[..., None], logc, np.nan)
    fin_c = np.isfinite(lc)
    n_c = fin_c.sum(2)
    mean_c = np.where(n_c > 0, np.nansum(np.where(fin_c, lc, 0.0), 2) / np.maximum(n_c, 1), np.nan)
    use_c = n_c >= 2
    ss_c = np.where(use_c, (np.where(fin_c, lc - mean_c[..., None], 0.0) ** 2).sum(2), 0.0).sum(1)
    dof_c = np.where(use_c, n_c - 1, 0).sum(1)
    measured = (dof_a > 0) & (dof_c > 0)
    dof = np.minimum(dof_a, dof_c).astype(float)
    sd_a = np.sqrt(ss_a / np.maximum(dof_a, 1))
    sd_c = np.sqrt(ss_c / np.maximum(dof_c, 1))
    if noise is not None:
        stored = ~measured | (noise.dof > dof)
        sd_a, sd_c = np.where(stored, noise.sd_A, sd_a), np.where(stored, noise.sd_logc, sd_c)
        dof, measured = np.where(stored, float(noise.dof), dof), np.ones(T, dtype=bool)
    dof = np.maximum(dof, 1.0)
    # per compared arm k (against the baseline, column 1)
    d_a = np.where((n_a > 0) & (n_a[:, 1:2] > 0), mean_a - mean_a[:, 1:2], pooled_a - pooled_a[:, 1:2])
    se_a = sd_a[:, None] * np.sqrt(1.0 / np.maximum(n_a, 1) + 1.0 / np.maximum(n_a[:, 1:2], 1))
    own_c = np.where(n_c > 0, mean_c, lr_fallback + ref)
    base_c = np.where(n_c[:, 1:2] > 0, mean_c[:, 1:2], ref)
    lr = np.where(np.isfinite(lr_fallback), own_c - base_c, np.nan)
    se_c = sd_c[:, None] * np.sqrt(1.0 / np.maximum(n_c, 1) + 1.0 / np.maximum(n_c[:, 1:2], 1))
    dofk = dof[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        p_ceil = 2 * student_t.sf(np.abs(d_a) / se_a, dofk)
        p_eff = 2 * student_t.sf(np.abs(lr) / se_c, dofk)
        t_a = tost(d_a, se_a, dofk, me.a)
        t_c = tost(lr, se_c, dofk, me.log_ratio)
    p_eq = np.maximum(t_a, t_c)  # intersection-union; NaN (no compute ratio): equivalence can't be shown
    tested = compared & measured[:, None]
    # one family per trial: three tests per compared arm, a uniform p for each other arm not identified
    fam = np.stack([p_ceil, p_eff, p_eq], axis=2)  # [T, K, 3]
    fam = np.where(tested[..., None], fam, np.nan)
    end = np.where(~ident & (np.arange(K) != 0) & (np.arange(K) != 1) & ident[:, 1:2], rng.random((T, K)), np.nan)
    found = _arm0_discoveries(fam, end, extra_arms, rng, q)
    return _arm0_code(found, compared, (d_a[:, 0], se_a[:, 0], lr[:, 0], se_c[:, 0]), dof, me, q, horizon)


def _arm0_code(found, compared, diffs, dof, me: MinEffect, q: float, horizon) -> tuple[np.ndarray, np.ndarray]:
    """Arm 0's verdict code and whether `--decide` stops it, from its discoveries `found` [T, 3] and its
    differences `diffs` (ΔA, its se, the log compute ratio, its se; [T] each), as `verdicts._conclude` reads them."""
    d_a, se_a, lr, se_c = diffs
    T = found.shape[0]
    code = np.full(T, CODES.index("not_identified"))
    code[compared[:, 0]] = CODES.index("inconclusive")
    up_a, up_c = d_a > 0, lr < 0
    crit = student_t.ppf(1.0 - q / 2, dof)  # the intervals sizes are read on: 95% at q = 5%, as rank's default
    # a ceiling change shown negligible does not hide an efficiency change that may matter (verdicts._conclude)
    negligible = np.abs(d_a) + crit * se_a <= me.a
    eff_negligible = np.abs(lr) + crit * se_c <= me.log_ratio
    ceil = found[:, 0] & ~(negligible & found[:, 1] & ~eff_negligible)
    eff, eq = found[:, 1] & ~ceil, found[:, 2] & ~found[:, 0] & ~found[:, 1]
    code[ceil] = np.where(up_a[ceil], CODES.index("ceiling_up"), CODES.index("ceiling_down"))
    code[eff] = np.where(up_c[eff], CODES.index("efficiency_up"), CODES.index("efficiency_down"))
    code[eq] = CODES.index("equivalent")
    material_a = np.abs(d_a) - crit * se_a > me.a
    material_c = np.abs(lr) - crit * se_c > me.log_ratio
    stops = _settled(ceil, eff, eq, (material_a, negligible), (material_c, eff_negligible))
    if horizon is not None and horizon > 1:
        stops |= compared[:, 0] & futile(d_a, se_a, lr, se_c, me, horizon, q)
    return code, stops


def futile(d_a, se_a, lr, se_c, me: MinEffect, horizon, level: float = FDR):
    """Whether an open arm cannot be decided by the most seeds: projected to `horizon` times the seeds it has (its
    standard errors shrink by the square root, its differences stay as measured), the chance of a change of A shown
    is below FUTILE_POWER, and so is that of A shown inside the smallest effect that matters together with the
    compute ratio shown changed or inside its own, each test at `level` (two-sided for a change, one-sided for each
    side of an equivalence). No spread measured (NaN): not futile. Scalars or arrays."""
    power = ndtri(1.0 - FUTILE_POWER)
    two, one = ndtri(1.0 - level / 2) - power, ndtri(1.0 - level) - power
    gain = np.sqrt(horizon)
    with np.errstate(invalid="ignore", divide="ignore"):
        change_a = np.abs(d_a) / se_a * gain >= two
        inside_a = (me.a - np.abs(d_a)) / se_a * gain >= one
        change_c = np.abs(lr) / se_c * gain >= two
        inside_c = (me.log_ratio - np.abs(lr)) / se_c * gain >= one
        no_spread = ~np.isfinite(se_a) | (se_a <= 0)
    return ~no_spread & ~change_a & ~(inside_a & (change_c | inside_c))


def _settled(ceil, eff, eq, a_size, c_size) -> np.ndarray:
    """`sequential.settled` for every trial: equivalent, a ceiling change of clear size (a_size: material, negligible),
    or an efficiency change of clear size (c_size) with A shown unmoved."""
    return eq | (ceil & (a_size[0] | a_size[1])) | (eff & (c_size[0] | c_size[1]) & a_size[1])

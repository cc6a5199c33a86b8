"""The tests' arithmetic shared by `rank` (fit/verdicts.py) and the fast planning engine (fit/power.py): the
false-discovery control (Benjamini-Hochberg) and the equivalence test (TOST)."""

from __future__ import annotations

import numpy as np
from scipy.stats import t as student_t

from ablate.fit.spread import FDR


def benjamini_hochberg(p: list[float], q: float = FDR) -> list[bool]:
    """Which of the p-values (NaN: no test) are discoveries at false-discovery rate q."""
    if not len(p):
        return []
    return [bool(v) for v in benjamini_hochberg_rows(np.asarray([p], dtype=float), q)[0]]


def benjamini_hochberg_rows(p: np.ndarray, q: float = FDR) -> np.ndarray:
    """Benjamini-Hochberg on each row of p ([T, m], NaN: no test), all rows at once: the discoveries, [T, m]
    bools. A row's discoveries are its p-values up to the largest p_(k) <= q k / m (m: its tests)."""
    finite = np.isfinite(p)
    m = finite.sum(1, keepdims=True)
    srt = np.sort(np.where(finite, p, np.inf), axis=1)
    ranks = np.arange(1, p.shape[1] + 1)[None, :]
    ok = srt <= q * ranks / np.maximum(m, 1)
    cut = np.where(ok.any(1), p.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1), -1)
    thresh = np.where(cut >= 0, srt[np.arange(p.shape[0]), np.maximum(cut, 0)], -np.inf)
    return finite & (p <= thresh[:, None])


def discoveries(pvals: list[float], is_equivalence: list[bool], q: float = FDR) -> list[bool]:
    """The false-discovery control of a ranking: a test of change is a discovery among the tests of change alone
    (Benjamini-Hochberg at q), so that arms shown equivalent never make a change easier to call; an equivalence
    test is one among all the tests."""
    change = benjamini_hochberg([float("nan") if e else p for p, e in zip(pvals, is_equivalence)], q)
    every = benjamini_hochberg(pvals, q)
    return [every[k] if e else change[k] for k, e in enumerate(is_equivalence)]


def tost(d, se, dof, delta):
    """Two one-sided t-tests of |true difference| < delta (H0: <= -delta, and H0: >= +delta): the larger p; NaN
    where there is no test (no difference, or no spread). Scalars or arrays."""
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.maximum(student_t.sf((d + delta) / se, dof), student_t.cdf((d - delta) / se, dof))
    return np.where(np.isfinite(d) & (se > 0), p, np.nan)

"""Reports: rich tables, matplotlib figures and JSON for fits, ranks and extrapolations.

Nothing here computes a fit; it only presents `FitResult`s (fit/analysis.py) and what is derived from them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

from ablate.fit.analysis import FitResult

def console(stderr: bool = False) -> Console:
    """A console that keeps tables whole when output goes to a file or a pipe (rich assumes 80 columns)."""
    import shutil
    import sys

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else max(shutil.get_terminal_size((150, 40)).columns, 150)
    return Console(width=width, stderr=stderr)


STATUS_STYLE = {"converged": "green", "at_bound": "yellow", "not_identified": "red", "failed": "red"}


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None or not math.isfinite(v):
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def fmt_pm(v: float | None, ci: Sequence[float] | None, digits: int = 3) -> str:
    """`value ±half-width` of the interval (the exact interval is in --json)."""
    if ci is None or v is None or not math.isfinite(v):
        return _fmt(v, digits)
    half = (ci[1] - ci[0]) / 2.0
    return f"{_fmt(v, digits)} ±{_fmt(half, digits)}"


def fit_table(results: Iterable[FitResult], *, title: str | None = None) -> Table:
    results = list(results)
    target = results[0].target if results else 16000
    t = Table(title=title, header_style="bold")
    for col, kw in [("run", {}), ("R0", {"justify": "right"}), ("A", {"justify": "right"}),
                    ("B", {"justify": "right"}), ("C_mid", {"justify": "right"}), ("window", {}),
                    ("n", {"justify": "right"}), ("f", {"justify": "right"}), ("status", {}),
                    (f"R@{target:g}", {"justify": "right"})]:
        t.add_column(col, **kw)
    for r in results:
        t.add_row(
            r.run,
            _fmt(r.R0),
            fmt_pm(r.A, r.A_ci),
            fmt_pm(r.B, r.B_ci, 2),
            fmt_pm(r.C_mid, r.C_mid_ci),
            f"{r.window[0]:g}..{r.window[1]:g}",
            str(r.n_points),
            f"{r.gain_fraction:.2f}" if math.isfinite(r.gain_fraction) else "—",
            f"[{STATUS_STYLE.get(r.status, 'white')}]{r.status}[/]",
            fmt_pm(r.pred_at_target, r.pred_ci),
        )
    return t


def forms_table(forms: dict[str, dict[str, float]]) -> Table:
    """Rolling-origin backtest: mean absolute error of each form's forecast, per run; best marked."""
    names = list(next(iter(forms.values())))
    t = Table(title="which form extrapolates best (rolling-origin backtest, MAE on unseen later points)",
              header_style="bold")
    t.add_column("run")
    for n in names:
        t.add_column(n, justify="right")
    t.add_column("best")
    for run, scores in forms.items():
        finite = {k: v for k, v in scores.items() if math.isfinite(v)}
        best = min(finite, key=finite.get) if finite else "—"
        t.add_row(run, *[_fmt(scores[n], 4) for n in names], best)
    return t


def print_notes(console: Console, results: Iterable[FitResult]) -> None:
    for r in results:
        for note in r.notes:
            console.print(f"  [dim]{r.run}:[/] {note}")


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, allow_nan=False, default=_nan_to_none)


def _nan_to_none(o):
    if isinstance(o, (np.floating, np.integer)):
        v = o.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(type(o).__name__)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fits(results: Sequence[FitResult], path: Path | str, *, highlight: str | None = None,
              title: str | None = None, heldout_from: float | None = None) -> Path:
    """Points, fitted curve (solid in the window, dashed beyond), the interval band up to the target,
    the fit window shaded, and points past `heldout_from` marked as held out. Log-compute x axis."""
    plt = _plt()
    path = Path(path)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lo_all = min(float(r.window[0]) for r in results)
    hi_all = max(float(r.window[1]) for r in results)
    for i, r in enumerate(results):
        color = "black" if highlight and r.run == highlight else colors[i % len(colors)]
        lw = 2.6 if highlight and r.run == highlight else 1.6
        for c in r.curves:
            pos = c.x > 0
            inwin = pos & (c.x >= r.window[0]) & (c.x <= r.window[1])
            ax.scatter(c.x[inwin], c.y[inwin], s=9, color=color, alpha=0.55)
            out = pos & ~inwin
            if heldout_from is not None:
                held = out & (c.x > heldout_from)
                ax.scatter(c.x[held], c.y[held], s=22, facecolors="none", edgecolors=color, marker="D",
                           label=f"{r.run}: held out" if held.any() else None)
                out &= ~held
            ax.scatter(c.x[out], c.y[out], s=9, facecolors="none", edgecolors=color, alpha=0.6)
        x_lo = max(min(float(c.x[c.x > 0].min()) for c in r.curves), 1e-9)
        x_hi = max(r.target, max(float(c.x.max()) for c in r.curves))
        xs = np.geomspace(x_lo, x_hi, 300)
        inside = xs <= r.window[1]
        label = f"{r.run}: A={r.A:.3f} B={r.B:.2f} C_mid={r.C_mid:,.0f}"
        ax.plot(xs[inside], r.predict(xs[inside]), color=color, lw=lw, label=label)
        ax.plot(xs[~inside], r.predict(xs[~inside]), color=color, lw=lw, ls="--")
        band = r.predict_band(xs)
        if band is not None:
            ax.fill_between(xs, band[0], band[1], color=color, alpha=0.12, lw=0)
        ax.axhline(r.A, color=color, lw=0.8, ls=":", alpha=0.7)
    if lo_all > 0:
        ax.axvspan(ax.get_xlim()[0], lo_all, color="grey", alpha=0.08, lw=0)
    ax.axvline(hi_all, color="grey", lw=0.8, ls="-.", alpha=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("compute")
    ax.set_ylabel("validation pass rate")
    ax.set_title(title or "ScaleRL sigmoid fits (dashed: extrapolation; band: interval; dotted: ceiling A)")
    ax.grid(alpha=0.25, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path

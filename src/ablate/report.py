"""Reports: rich tables, matplotlib figures and JSON for fits, ranks and extrapolations.

Nothing here computes a fit; it only presents `FitResult`s (fit/analysis.py) and what is derived from them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the fit stack imports scipy: keep `ablate sweep`/`status` start-up light
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
    """JSON for scripts: numpy scalars and arrays as plain values, NaN and infinities as null (not valid JSON)."""
    return json.dumps(_jsonable(obj), indent=2, allow_nan=False)


def _jsonable(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in o]
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fits(results: Sequence[FitResult], path: Path | str, *, highlight: str | None = None,
              title: str | None = None, heldout_from: float | None = None, xlabel: str = "compute") -> Path:
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
    ax.set_xlabel(xlabel)
    ax.set_ylabel("validation pass rate")
    ax.set_title(title or "ScaleRL sigmoid fits (dashed: extrapolation; band: interval; dotted: ceiling A)")
    ax.grid(alpha=0.25, which="both")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


VERDICT_STYLE = {"ceiling_up": "bold green", "ceiling_down": "bold red", "efficiency_up": "green",
                 "efficiency_down": "red", "no_effect": "dim", "not_identified": "yellow", "baseline": "bold"}


def rank_table(ranking) -> Table:
    """One row per arm, best first: seeds, R0, A, B, C_mid, R at target (± half-interval), verdict."""
    from ablate.fit.compare import VERDICT_TEXT

    t = Table(title=f"arms ranked by predicted pass rate at {ranking.x} = {ranking.target:g}", header_style="bold")
    for col, kw in [("#", {"justify": "right"}), ("arm", {}), ("seeds", {"justify": "right"}),
                    ("R0", {"justify": "right"}), ("A", {"justify": "right"}), ("B", {"justify": "right"}),
                    ("C_mid", {"justify": "right"}), (f"R@{ranking.target:g}", {"justify": "right"}),
                    ("verdict", {}), ("why", {"style": "dim"})]:
        t.add_column(col, **kw)
    for i, a in enumerate(ranking.arms, start=1):
        f = a.fit
        flags = []
        if a.partial:
            flags.append("[yellow]partial[/]")
        if a.truncation_warning:
            flags.append("[red]truncation >10%[/]")
        arm = a.arm + ("  " + " ".join(flags) if flags else "")
        verdict = VERDICT_TEXT[a.verdict]
        t.add_row(str(i), arm, str(a.seeds), _fmt(f.R0), fmt_pm(f.A, f.A_ci), fmt_pm(f.B, f.B_ci, 2),
                  fmt_pm(f.C_mid, f.C_mid_ci), fmt_pm(f.pred_at_target, f.pred_ci),
                  f"[{VERDICT_STYLE.get(a.verdict, 'white')}]{verdict}[/]", a.detail)
    return t


def plot_efficiency(ranking, path: Path | str) -> Path | None:
    """The paper's efficiency view: log F(R) = log((R - R0) / (A - R)) against log C, with one A shared by
    the arms that share the baseline's ceiling (verdicts efficiency/no effect; those that move the ceiling
    or are not identified don't belong on it), so each arm is a line of slope B (intercept -B log C_mid)."""
    from ablate.fit.analysis import window_points
    from ablate.fit.compare import fit_shared_a

    plt = _plt()
    path = Path(path)
    parts, names, starts = [], [], []
    same_ceiling = {"baseline", "efficiency_up", "efficiency_down", "no_effect", None}
    for a in ranking.arms:
        if a.verdict not in same_ceiling or not a.fit.identifiable:
            continue
        x, y, _, _ = window_points(a.fit.curves, ranking.opts, a.arm)
        parts.append((x, y, a.fit.R0))
        names.append(a.arm)
        starts.append(a.fit.fit)
    if not parts:
        return None  # no identified arm shares a ceiling: there is no efficiency view to draw
    a_s, params = fit_shared_a(parts, starts)
    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, ((x, y, r0), (b, c_mid), name) in enumerate(zip(parts, params, names)):
        color = "black" if name == ranking.baseline else colors[i % len(colors)]
        ok = (y > r0) & (y < a_s)
        ax.scatter(x[ok], (y[ok] - r0) / (a_s - y[ok]), s=8, color=color, alpha=0.5)
        xs = np.geomspace(x.min(), max(x.max(), ranking.target), 100)
        ax.plot(xs, (xs / c_mid) ** b, color=color, lw=2.4 if name == ranking.baseline else 1.5,
                label=f"{name}: B={b:.2f}, C_mid={c_mid:,.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(f"compute ({ranking.x})")
    ax.set_ylabel("F(R) = (R - R0) / (A - R)")
    ax.set_title(f"efficiency with A shared = {a_s:.3f} (slope = B)")
    ax.grid(alpha=0.25, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def extrapolation_table(ex) -> Table:
    f = ex.fit
    t = Table(title=f"{ex.subject}: fitted on {f.window[0]:g}..{f.window[1]:g}, projected to {f.target:g}",
              header_style="bold", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("fit", f"A {fmt_pm(f.A, f.A_ci)}   B {fmt_pm(f.B, f.B_ci, 2)}   C_mid {fmt_pm(f.C_mid, f.C_mid_ci)}   "
                     f"R0 {_fmt(f.R0)}   ({f.n_points} points, {f.n_runs} run(s))")
    t.add_row("identifiable", f"{'yes' if f.identifiable else '[red]no[/]'} — status {f.status}, "
                              f"gain reached f = {f.gain_fraction:.2f}")
    ci = f"  [{f.pred_ci[0]:.3f}, {f.pred_ci[1]:.3f}]" if f.pred_ci else ""
    t.add_row(f"R at {f.target:g}", f"[bold]{f.pred_at_target:.3f}[/]{ci}")
    if f.target_r is not None:
        c = f.compute_to_target
        cci = f"  [{_fmt(f.compute_to_target_ci[0])}, {_fmt(f.compute_to_target_ci[1])}]" if f.compute_to_target_ci else ""
        t.add_row(f"compute to R = {f.target_r:g}", (_fmt(c) + cci) if c is not None else "never (above the ceiling A)")
    if ex.heldout:
        last = ex.heldout[-1]
        t.add_row("held-out check", f"{len(ex.heldout)} points past {f.window[1]:g}: MAE {ex.heldout_mae:.4f}; "
                                    f"at {last['x']:g} observed {last['y']:.3f}, predicted {last['pred']:.3f}")
    return t

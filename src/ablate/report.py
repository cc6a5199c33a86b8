"""Reports: rich tables, matplotlib figures and JSON for fits, ranks and extrapolations.

Nothing here computes a fit; it only presents `FitResult`s (fit/analysis.py) and what `rank` derived from them.
Names come from users (run names, arm labels, columns): tables take them as `rich.text.Text` and printed lines
pass them through `esc`, so that `[bold]` or `[/]` in a name is shown as written, never read as markup.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from rich.console import Console
from rich.markup import escape as esc
from rich.table import Table
from rich.text import Text

from ablate.errors import UserError

if TYPE_CHECKING:  # the fit stack imports scipy: keep `ablate sweep`/`status` start-up light
    from ablate.fit.analysis import FitResult

def console(stderr: bool = False) -> Console:
    """A console that keeps tables whole when output goes to a file or a pipe (rich assumes 80 columns).

    Emoji codes stay text: a run named `:x:` is printed as `:x:`."""
    import shutil
    import sys

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else max(shutil.get_terminal_size((150, 40)).columns, 150)
    return Console(width=width, stderr=stderr, emoji=False)


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
                    (f"R@{target:g}", {"justify": "right"}), ("noise: drift sd / rho", {"justify": "right"})]:
        t.add_column(col, **kw)
    for r in results:
        t.add_row(
            Text(r.run),
            _fmt(r.R0),
            fmt_pm(r.A, r.A_ci),
            fmt_pm(r.B, r.B_ci, 2),
            fmt_pm(r.C_mid, r.C_mid_ci),
            f"{r.window[0]:g}..{r.window[1]:g}",
            str(r.n_points),
            f"{r.gain_fraction:.2f}" if math.isfinite(r.gain_fraction) else "—",
            f"[{STATUS_STYLE.get(r.status, 'white')}]{r.status}[/]" + (" [red]unstable[/]" if r.unstable else ""),
            fmt_pm(r.pred_at_target, r.pred_ci),
            noise_text(r),
        )
    return t


def r0_text(results: Sequence[FitResult], opts) -> str:
    """How R0 was set: measured at compute 0 (held fixed), given with --r0, or fitted."""
    if opts.r0 is not None:
        return f"R0 = {opts.r0:g} (--r0)"
    if any(r.fit.fit_r0 for r in results):
        return "R0 fitted" + (" (--fit-r0)" if opts.fit_r0 else " (no point at compute 0; --r0 fixes it)")
    return "R0 = the pass rate measured at compute 0, held fixed"


def interval_text(results: Sequence[FitResult]) -> str:
    """The interval method, once: each run's own noise is in the table's noise column and in --json."""
    kinds = {r.interval_method.split(" (")[0] for r in results}
    if len(kinds) == 1:
        return results[0].interval_method if len(results) == 1 else (
            kinds.pop() + " (each run from its own measured noise: see the noise column)")
    return "; ".join(sorted(kinds))


def rule_text(ranking) -> str:
    """Which rule produced the verdicts, and against what noise."""
    if ranking.rule == "paper":
        return ranking.margin_source
    if ranking.floor is None:
        return ("t-tests against the seed spread, false-discovery rate 5%; " + ranking.margin_source)
    f = ranking.floor
    return (f"t-tests against the seed spread (sd of one seed's A {f.sd_A:.4f}, of its log compute {f.sd_logc:.3f}; "
            f"{f.dof} dof; from {f.source}), false-discovery rate 5% over the ranking (the p-values and ± shown are "
            "each test's own; a verdict needs its test to survive the false-discovery control)")


def seeds_hint(inputs) -> str:
    """The command that adds seeds to the ranked sweep (or the general form for files)."""
    for p in inputs:
        p = Path(p)
        name = p.name if (p / "runs").is_dir() else None
        if name:
            recipe = Path("recipes") / f"{name}.yaml"
            return f"ablate sweep {recipe if recipe.exists() else name + '.yaml'} seed=0,1,2"
    return "ablate sweep SWEEP.yaml seed=0,1,2"


def noise_text(r: FitResult) -> str:
    """The run's measured noise, compact: drift sd / rho (an arm: its runs' median)."""
    if not r.noise:
        return "—"
    sd = float(np.median([math.sqrt(e.drift_var) for e in r.noise]))
    rho = float(np.median([e.rho for e in r.noise]))
    return f"{sd:.4f} / {rho:.2f}"


def sensitivity_table(results: Iterable[FitResult]) -> Table | None:
    """The window-sensitivity refits: A, B, C_mid and R at the target per fit-until cutoff, per run or arm."""
    results = [r for r in results if r.sensitivity]
    if not results:
        return None
    t = Table(title="window sensitivity: refits with the window cut at a share of its compute", header_style="bold")
    for col in ("run", "fit until", "A", "B", "C_mid", f"R@{results[0].target:g}", ""):
        t.add_column(col, justify="left" if col in ("run", "") else "right")
    for r in results:
        for row in r.sensitivity:
            mark = "" if row["identifiable"] else "not identified"
            if row["cutoff"] == 1.0 and r.unstable:
                mark = "[red]unstable[/]"
            t.add_row(Text(r.run), f"{row['fit_until']:g} ({row['cutoff']:.0%})", _fmt(row["A"]), _fmt(row["B"], 2),
                      _fmt(row["C_mid"]), _fmt(row["pred_at_target"]), mark)
    return t


def calibration_table(rows: list[dict[str, Any]]) -> Table:
    """`ablate calibrate`: one row per cell: coverage, false-call rate, power, ceiling calls, not identified."""
    t = Table(title="calibration by simulation (targets: coverage >= 0.90, false calls <= 0.05)", header_style="bold")
    for col in ("shape", "noise", "seeds", "floor", "f", "effect", "trials", "cover A", "cover R@to", "false calls",
                "power", "ceiling calls", "not identified"):
        t.add_column(col, justify="left" if col in ("shape", "noise", "effect", "floor") else "right")

    def rate(v, bad=None) -> str:
        if v is None:
            return "—"
        text = f"{v:.2f}"
        return f"[red]{text}[/]" if bad is not None and bad(v) else text

    for r in rows:
        t.add_row(r["shape"], r["noise"], str(r["seeds"]), r.get("floor", "own"), f"{r['f']:.2f}", r["effect"],
                  str(r["trials"]),
                  rate(r["coverage_A"], lambda v: v < 0.90), rate(r["coverage_pred"], lambda v: v < 0.90),
                  rate(r["false_call_rate"], lambda v: v > 0.05), rate(r["power"]), rate(r["ceiling_calls"]),
                  rate(r["not_identified"]))
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
        t.add_row(Text(run), *[_fmt(scores[n], 4) for n in names], best)
    return t


def print_notes(console: Console, results: Iterable[FitResult]) -> None:
    for r in results:
        for note in r.notes:
            console.print(f"  [dim]{esc(r.run)}:[/] {esc(note)}")


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


# Formats matplotlib lists but cannot write here: pgf needs a LaTeX installation.
_NEEDS_TOOLS = {"pgf"}


def figure_formats() -> list[str]:
    """File extensions `--plot` accepts (what matplotlib writes without extra tools), sorted."""
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(set(FigureCanvasBase.get_supported_filetypes()) - _NEEDS_TOOLS)


def figure_path(path: Path | str) -> Path:
    """The file a figure will be written to, checked before any work is done.

    No extension: `.png` is appended (as matplotlib does), so the path printed is the file that exists. A
    directory, an extension matplotlib can't write, or a parent that is a file: UserError.
    """
    path = Path(path)
    if not path.suffix and not path.is_dir():
        path = path.with_name(path.name + ".png")
    if path.is_dir():
        raise UserError(f"--plot {path}: is a directory; give a file name, e.g. --plot {path / 'fit.png'}")
    formats = figure_formats()
    if path.suffix[1:].lower() not in formats:
        raise UserError(f"--plot {path}: can't write '{path.suffix}' figures; use one of: "
                        + ", ".join("." + f for f in formats))
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"--plot {path}: {parent} is a file, not a directory; choose another path")
    return path


def _save(fig, path: Path) -> Path:
    """Render in memory, then replace the file atomically: a failed write leaves no half figure behind."""
    from ablate import store

    plt = _plt()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=path.suffix[1:].lower())
        store.atomic_write_bytes(path, buf.getvalue())
    except OSError as e:
        raise UserError(f"--plot {path}: can't write the figure ({e.strerror or e}); choose another path") from None
    finally:
        plt.close(fig)
    return path


def _tight(fig, **kw) -> None:
    """tight_layout, quietly: when labels can't fit it warns on stderr, which would break one-line output."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout(**kw)


def _tex(text: str) -> str:
    """Text for a figure, shown as written: matplotlib would read `$...$` in a run name as math."""
    return text.replace("$", r"\$")


# A scatter of millions of points takes minutes to draw and looks like a line: draw every k-th point beyond this.
MAX_DRAWN_POINTS = 5000


def _thin(mask: np.ndarray) -> np.ndarray:
    idx = np.nonzero(mask)[0]
    return idx[:: max(1, idx.size // MAX_DRAWN_POINTS)]


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
            k = _thin(inwin)
            ax.scatter(c.x[k], c.y[k], s=9, color=color, alpha=0.55)
            out = pos & ~inwin
            if heldout_from is not None:
                held = out & (c.x > heldout_from)
                k = _thin(held)
                ax.scatter(c.x[k], c.y[k], s=22, facecolors="none", edgecolors=color, marker="D",
                           label=_tex(f"{r.run}: held out") if held.any() else None)
                out &= ~held
            k = _thin(out)
            ax.scatter(c.x[k], c.y[k], s=9, facecolors="none", edgecolors=color, alpha=0.6)
        x_lo = max(min(float(c.x[c.x > 0].min()) for c in r.curves), 1e-9)
        x_hi = max(r.target, max(float(c.x.max()) for c in r.curves))
        xs = np.geomspace(x_lo, x_hi, 300)
        inside = xs <= r.window[1]
        label = _tex(f"{r.run}: A={r.A:.3f} B={r.B:.2f} C_mid={r.C_mid:,.0f}")
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
    ax.set_xlabel(_tex(xlabel))
    ax.set_ylabel("validation pass rate")
    ax.set_title(_tex(title) if title else "ScaleRL sigmoid fits (dashed: extrapolation; band: interval; dotted: ceiling A)")
    ax.grid(alpha=0.25, which="both")
    ax.legend(fontsize=7, loc="lower right")
    _tight(fig)
    return _save(fig, path)


VERDICT_STYLE = {"ceiling_up": "bold green", "ceiling_down": "bold red", "efficiency_up": "green",
                 "efficiency_down": "red", "no_effect": "dim", "not_identified": "yellow", "baseline": "bold"}


def rank_table(ranking) -> Table:
    """One row per arm, best first: seeds, R0, A, B, C_mid, R at target (± half-interval), verdict."""
    from ablate.fit.compare import VERDICT_TEXT

    t = Table(title=f"arms ranked by predicted pass rate at {esc(ranking.x)} = {ranking.target:g}", header_style="bold")
    for col, kw in [("#", {"justify": "right"}), ("arm", {}), ("seeds", {"justify": "right"}),
                    ("R0", {"justify": "right"}), ("A", {"justify": "right"}), ("B", {"justify": "right"}),
                    ("C_mid", {"justify": "right"}), (f"R@{ranking.target:g}", {"justify": "right"}),
                    ("verdict", {}), ("why", {"style": "dim"})]:
        t.add_column(col, **kw)
    for i, a in enumerate(ranking.arms, start=1):
        f = a.fit
        arm = Text(a.arm)
        if a.partial:
            arm.append("  partial", style="yellow")
        if a.truncation_warning:
            arm.append("  truncation >10%", style="red")
        verdict = Text(VERDICT_TEXT[a.verdict], style=VERDICT_STYLE.get(a.verdict, "white"))
        t.add_row(str(i), arm, str(a.seeds), _fmt(f.R0), fmt_pm(f.A, f.A_ci), fmt_pm(f.B, f.B_ci, 2),
                  fmt_pm(f.C_mid, f.C_mid_ci), fmt_pm(f.pred_at_target, f.pred_ci), verdict, Text(a.detail))
    return t


def _log_f(x: np.ndarray, y: np.ndarray, r0: float, a: float) -> tuple[np.ndarray, np.ndarray]:
    """The points as (C, F(R)) with F(R) = (R - R0) / (A - R), where it is defined (R0 < R < A)."""
    ok = (y > r0) & (y < a)
    return x[ok], (y[ok] - r0) / (a - y[ok])


def _window_points(fit) -> tuple[np.ndarray, np.ndarray]:
    """The points a fit was fitted on ([n] each), thinned for drawing."""
    x = np.concatenate([c.x for c in fit.curves])
    y = np.concatenate([c.y for c in fit.curves])
    k = _thin((x > 0) & (x >= fit.window[0]) & (x <= fit.window[1]))
    return x[k], y[k]


def plot_efficiency(ranking, path: Path | str) -> Path | None:
    """The efficiency comparisons behind the verdicts, one panel per arm compared with the baseline.

    Each panel draws the pairwise fit `rank` made (`ArmResult.shared`: the arm and the baseline refitted with one
    shared A) as the paper's efficiency view, log F(R) = log((R - R0) / (A - R)) against log C, where each run is
    a line of slope B through C_mid; the marks are where each reaches the pass rate the baseline reaches at the
    target, so their horizontal distance is the compute ratio. The title is the verdict. Arms that are not
    identified were not compared this way and have no panel. Returns None (nothing written)
    when no arm was compared on efficiency.
    """
    from ablate.fit.compare import VERDICT_TEXT

    pairs = [a for a in ranking.arms if a.shared is not None]
    base = next((a for a in ranking.arms if a.arm == ranking.baseline), None)
    if not pairs or base is None:
        return None
    plt = _plt()
    ncols = min(3, len(pairs))
    nrows = math.ceil(len(pairs) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.8 * nrows), dpi=110, squeeze=False)
    arm_color = plt.rcParams["axes.prop_cycle"].by_key()["color"][0]
    for ax, arm in zip(axes.flat, pairs):
        sh = arm.shared
        a_s, r_t, target = sh["A_shared"], sh["target_pass_rate"], ranking.target
        ratio = sh["compute_ratio"]
        for who, fit, b, c_mid, color, reach in (
                ("baseline", base.fit, sh["B_baseline"], sh["C_mid_baseline"], "black", target),
                ("arm", arm.fit, sh["B"], sh["C_mid"], arm_color, ratio * target)):
            x, y = _window_points(fit)
            px, pf = _log_f(x, y, fit.R0, a_s)
            ax.scatter(px, pf, s=7, color=color, alpha=0.45)
            hi = max(float(x.max()), target, reach if math.isfinite(reach) else 0.0)
            xs = np.geomspace(float(x.min()), hi, 100)
            name = base.arm if who == "baseline" else arm.arm
            ax.plot(xs, (xs / c_mid) ** b, color=color, lw=2.0 if who == "baseline" else 1.5,
                    label=_tex(f"{name}: B={b:.2f}, C_mid={c_mid:,.3g}"))
            if math.isfinite(reach) and fit.R0 < r_t < a_s:
                ax.plot([reach], [(r_t - fit.R0) / (a_s - r_t)], marker="o", ms=7, mfc="none", mec=color)
        ci = sh["compute_ratio_ci"]
        ratio_text = f"{ratio:.2f}x compute" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        ax.set_title(_tex(f"{arm.arm}: {VERDICT_TEXT[arm.verdict]}\n{ratio_text}, A shared {a_s:.3f}"), fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.25, which="both")
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(_tex(f"compute ({ranking.x})"))
    for ax in axes[:, 0]:
        ax.set_ylabel("F(R) = (R - R0) / (A - R)")
    fig.suptitle(f"efficiency against the baseline under a shared ceiling (slope = B; circles: reaching the "
                 f"baseline's R at {target:g})", fontsize=10)
    others = [f"{a.arm} ({VERDICT_TEXT[a.verdict]})" for a in ranking.arms if a.shared is None and a is not base]
    if others:
        shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
        fig.text(0.01, 0.005, _tex(f"no panel (not compared on efficiency): {shown}"), fontsize=7, color="grey")
    _tight(fig, rect=(0, 0.03 if others else 0, 1, 1))
    return _save(fig, Path(path))


def extrapolation_table(ex) -> Table:
    f = ex.fit
    t = Table(title=f"{esc(ex.subject)}: fitted on {f.window[0]:g}..{f.window[1]:g}, projected to {f.target:g}",
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

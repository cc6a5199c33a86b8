"""Figures (matplotlib): every fit with its band and points, and the efficiency view of rank's comparisons.

Like the tables, nothing here computes a fit: the figures draw the `FitResult`s and the pairwise comparisons that
produced the table's verdicts. The output format follows the file's extension (any format matplotlib can write).
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ablate.errors import ErrorKind, UserError

if TYPE_CHECKING:
    from ablate.fit.arms import ArmResult, Ranking
    from ablate.fit.result import FitResult


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
        raise UserError(
            f"--plot {path}: is a directory; give a file name, e.g. --plot {path / 'fit.png'}", kind=ErrorKind.FILE
        )
    formats = figure_formats()
    if path.suffix[1:].lower() not in formats:
        raise UserError(
            f"--plot {path}: can't write '{path.suffix}' figures; use one of: " + ", ".join("." + f for f in formats),
            kind=ErrorKind.SETTING,
        )
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"--plot {path}: {parent} is a file, not a directory; choose another path", kind=ErrorKind.FILE)
    from ablate.storage.paths import check_writable_output

    return check_writable_output(path, "--plot")  # and writable: not a read-only file system


def _save(fig, path: Path) -> Path:
    """Render in memory, then replace the file atomically: a failed write leaves no half figure behind."""
    from ablate.storage import store

    plt = _plt()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=path.suffix[1:].lower())
        store.atomic_write_bytes(path, buf.getvalue())
    except OSError as e:
        raise UserError(
            f"--plot {path}: can't write the figure ({e.strerror or e}); choose another path", kind=ErrorKind.FILE
        ) from None
    finally:
        plt.close(fig)
    return path


def _tight(fig, **kw) -> None:
    """tight_layout, quietly: when labels can't fit it warns on stderr, which would break one-line output."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout(**kw)


def as_figure_text(text: str) -> str:
    """Text for a figure, shown as written: matplotlib would read `$...$` in a run name as math, and a control
    character (an escape sequence, a bidi override) as a glyph it lacks, with a warning on stderr (text.safe)."""
    from ablate.text import safe

    return safe(text).replace("$", r"\$")


# A scatter of millions of points takes minutes to draw and looks like a line: draw every k-th point beyond this.
MAX_DRAWN_POINTS = 5000


def _thin(mask: np.ndarray) -> np.ndarray:
    idx = np.nonzero(mask)[0]
    return idx[:: max(1, idx.size // MAX_DRAWN_POINTS)]


def _points(ax: Any, r: FitResult, color: str, heldout_from: float | None) -> None:
    """One fit's measured points: filled in the fit window, hollow outside it, diamonds past `heldout_from` (one
    legend entry per arm, not one per seed)."""
    labelled_held = False
    for c in r.curves:
        pos = c.x > 0
        inwin = pos & (c.x >= r.window[0]) & (c.x <= r.window[1])
        k = _thin(inwin)
        ax.scatter(c.x[k], c.y[k], s=9, color=color, alpha=0.55)
        out = pos & ~inwin
        if heldout_from is not None:
            held = out & (c.x > heldout_from)
            k = _thin(held)
            first = held.any() and not labelled_held
            labelled_held |= bool(first)
            ax.scatter(
                c.x[k],
                c.y[k],
                s=22,
                facecolors="none",
                edgecolors=color,
                marker="D",
                label=as_figure_text(f"{r.run}: held out") if first else None,
            )
            out &= ~held
        k = _thin(out)
        ax.scatter(c.x[k], c.y[k], s=9, facecolors="none", edgecolors=color, alpha=0.6)


def plot_fits(
    results: Sequence[FitResult],
    path: Path | str,
    *,
    highlight: str | None = None,
    title: str | None = None,
    heldout_from: float | None = None,
    xlabel: str = "compute",
) -> Path:
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
        _points(ax, r, color, heldout_from)
        x_lo = max(min(float(c.x[c.x > 0].min()) for c in r.curves), 1e-9)
        x_hi = max(r.target, *(float(c.x.max()) for c in r.curves))
        xs = np.geomspace(x_lo, x_hi, 300)
        inside = xs <= r.window[1]
        a_text = f"A={r.A:.3f}" if r.identifiable else "A not identified"
        label = as_figure_text(f"{r.run}: {a_text} B={r.B:.2f} C_mid={r.C_mid:,.3g}")
        ax.plot(xs[inside], r.predict(xs[inside]), color=color, lw=lw, label=label)
        ax.plot(xs[~inside], r.predict(xs[~inside]), color=color, lw=lw, ls="--")
        band = r.predict_band(xs)
        if band is not None:
            ax.fill_between(xs, band[0], band[1], color=color, alpha=0.12, lw=0)
        if r.pred_ci is not None:  # the interval the tables report at the target (an arm's: from its seeds)
            ax.errorbar(
                [r.target],
                [r.pred_at_target],
                yerr=[[r.pred_at_target - r.pred_ci[0]], [r.pred_ci[1] - r.pred_at_target]],
                color=color,
                capsize=4,
                lw=1.4,
                fmt="o",
                ms=4,
            )
        if r.identifiable:  # a ceiling line only where the ceiling is measured
            ax.axhline(r.A, color=color, lw=0.8, ls=":", alpha=0.7)
    if lo_all > 0:
        ax.axvspan(ax.get_xlim()[0], lo_all, color="grey", alpha=0.08, lw=0)
    ax.axvline(hi_all, color="grey", lw=0.8, ls="-.", alpha=0.6)
    ax.set_xscale("log")
    ax.set_xlabel(as_figure_text(xlabel))
    ax.set_ylabel("validation pass rate")
    ax.set_title(
        as_figure_text(title)
        if title
        else "ScaleRL sigmoid fits (dashed: extrapolation; band: the fit's "
        "interval; "
        "bar: the reported interval at the target; dotted: ceiling A)"
    )
    ax.grid(alpha=0.25, which="both")
    ax.legend(fontsize=7, loc="lower right")
    _tight(fig)
    return _save(fig, path)


def efficiency_pairs(ranking: Ranking) -> tuple[ArmResult, list[ArmResult]] | None:
    """The baseline and the arms compared with it on efficiency (under a shared A), or None when there are none."""
    base = next((a for a in ranking.arms if a.arm == ranking.baseline), None)
    pairs = [a for a in ranking.arms if a.shared is not None]
    return None if base is None or not pairs else (base, pairs)


def efficiency_points(fit: FitResult, a_shared: float, max_points: int = MAX_DRAWN_POINTS) -> tuple[np.ndarray, ...]:
    """The points a fit was fitted on as (C, F(R)), F(R) = (R - R0) / (A - R) under the shared ceiling, where it is
    defined (R0 < R < A), thinned to about `max_points`; and every x of the fit's runs (for the line's span)."""
    x = np.concatenate([c.x for c in fit.curves])
    y = np.concatenate([c.y for c in fit.curves])
    ok = (x > 0) & (x >= fit.window[0]) & (x <= fit.window[1]) & (y > fit.R0) & (y < a_shared)
    k = np.nonzero(ok)[0]
    k = k[:: max(1, k.size // max_points)]
    return x[k], (y[k] - fit.R0) / (a_shared - y[k]), x


def plot_efficiency(ranking: Ranking, path: Path | str) -> Path | None:
    """The efficiency comparisons behind the verdicts, one panel per arm compared with the baseline.

    Each panel draws the pairwise fit `rank` made (`ArmResult.shared`: the arm and the baseline refitted with one
    shared A) as the paper's efficiency view, log F(R) = log((R - R0) / (A - R)) against log C, where each run is
    a line of slope B through C_mid; the marks are where each reaches three quarters of its gain (F(R) = 3), so
    their horizontal distance is the compute ratio. The title is the verdict, as the table words it.
    Arms that are not identified were not compared this way and have no panel. Returns None (nothing written)
    when no arm was compared on efficiency.
    """
    from ablate.render.rank import verdict_cell

    compared = efficiency_pairs(ranking)
    if compared is None:
        return None
    base, pairs = compared
    plt = _plt()
    ncols = min(3, len(pairs))
    nrows = math.ceil(len(pairs) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.8 * nrows), dpi=110, squeeze=False)
    arm_color = plt.rcParams["axes.prop_cycle"].by_key()["color"][0]
    for ax, arm in zip(axes.flat, pairs):
        sh = arm.shared
        if sh is None:  # never: `pairs` are the arms compared on efficiency
            continue
        a_s, ratio = sh.A_shared, sh.compute_ratio
        share = sh.gain_share
        for who, fit, b, c_mid, color, reach in (
            ("baseline", base.fit, sh.B_baseline, sh.C_mid_baseline, "black", sh.compute_to_share_baseline),
            ("arm", arm.fit, sh.B, sh.C_mid, arm_color, sh.compute_to_share),
        ):
            px, pf, x = efficiency_points(fit, a_s)
            x = x[(x >= fit.window[0]) & (x <= fit.window[1]) & (x > 0)]
            ax.scatter(px, pf, s=7, color=color, alpha=0.45)
            hi = max(float(x.max()), reach if math.isfinite(reach) else 0.0)
            xs = np.geomspace(float(x.min()), hi, 100)
            name = base.arm if who == "baseline" else arm.arm
            ax.plot(
                xs,
                (xs / c_mid) ** b,
                color=color,
                lw=2.0 if who == "baseline" else 1.5,
                label=as_figure_text(f"{name}: B={b:.2f}, C_mid={c_mid:,.3g}"),
            )
            if math.isfinite(reach):  # the share of the gain compared: F(R) = share / (1 - share)
                ax.plot([reach], [share / (1 - share)], marker="o", ms=7, mfc="none", mec=color)
        ci = sh.compute_ratio_ci
        ratio_text = f"{ratio:.2f}x compute" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
        ax.set_title(
            as_figure_text(f"{arm.arm}: {verdict_cell(arm).plain}") + f"\n{ratio_text}, A shared {a_s:.3f}", fontsize=9
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.25, which="both")
        ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(pairs) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel(as_figure_text(f"compute ({ranking.x})"))
    for ax in axes[:, 0]:
        ax.set_ylabel("F(R) = (R - R0) / (A - R)")
    how = "a shared ceiling per pair" if ranking.shared_a is None else "one ceiling for every arm"
    fig.suptitle(f"efficiency against the baseline under {how} (slope = B; circles: 3/4 of the gain)", fontsize=10)
    others = [f"{a.arm} ({verdict_cell(a).plain})" for a in ranking.arms if a.shared is None and a is not base]
    if others:
        shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
        fig.text(
            0.01, 0.005, as_figure_text(f"no panel (not compared on efficiency): {shown}"), fontsize=7, color="grey"
        )
    _tight(fig, rect=(0, 0.03 if others else 0, 1, 1))
    return _save(fig, Path(path))


def figures_line(plot: Path, efficiency: Path | None) -> str:
    """rank's last line: the figures it wrote (markup, paths escaped), or why there is no efficiency figure."""
    from ablate.render.terminal import esc

    return f"figures: {esc(str(plot))}" + (
        f", {esc(str(efficiency))}" if efficiency else " (no arm was compared on efficiency: no efficiency figure)"
    )


def rank_figure_paths(plot: Path | None) -> tuple[Path, Path] | None:
    """rank's two figures, checked before any fitting: the fits' (--plot) and the efficiency one beside it
    (NAME-efficiency.EXT); None without --plot."""
    if plot is None:
        return None
    plot = figure_path(plot)
    return plot, figure_path(plot.with_name(plot.stem + "-efficiency" + plot.suffix))


def plot_rank(ranking: Ranking, plot: Path, efficiency: Path) -> Path | None:
    """rank's figures: every arm's fit (baseline in black), and the efficiency panels (None: no arm compared)."""
    plot_fits(
        [a.fit for a in ranking.arms],
        plot,
        highlight=ranking.baseline,
        xlabel=f"compute ({ranking.x})",
        title=f"arms fitted on {ranking.opts.window_text()} (baseline in black)",
    )
    return plot_efficiency(ranking, efficiency)

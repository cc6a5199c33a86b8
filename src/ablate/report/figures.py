"""The report's figures as Plotly figures (drawn in the page by plotly.js): every arm's fit, the efficiency view and
the extrapolation. They show what ablate.render.figures draws with matplotlib (points, the fitted curve solid in the
window and dashed beyond, the band up to the target, the interval at the target) from the same `FitResult`s and
comparisons; nothing here fits. Every trace of an arm carries legendgroup = the arm's label, and one of them shows
in the legend, so that a click on the legend toggles the whole arm (docs/report.md)."""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ablate.text import safe

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from ablate.fit.arms import ArmResult, Ranking, SharedA
    from ablate.fit.extrapolate import Extrapolation
    from ablate.fit.result import FitResult

MAX_POINTS = 2000
"""Points drawn per run: past this a run's points are thinned (every k-th), which looks the same and keeps the page
light."""
BASELINE_COLOR = "#000000"


def text(s: object) -> str:
    """A name as Plotly shows it: Plotly reads tags in its strings, so a label is entity-escaped (shown as written),
    and its escape and other control characters are shown escaped (`\\x1b`: ablate.text.safe)."""
    return html.escape(safe(s), quote=False)


def colors(labels: list[str], baseline: str | None) -> dict[str, str]:
    """One colour per arm; the baseline black (as in rank's matplotlib figure)."""
    from plotly.colors import qualitative

    palette = list(qualitative.Plotly)
    others = [a for a in labels if a != baseline]
    out = {a: palette[i % len(palette)] for i, a in enumerate(others)}
    if baseline in labels:
        out[str(baseline)] = BASELINE_COLOR
    return out


def rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def thinned(x: np.ndarray, y: np.ndarray) -> tuple[list[float], list[float]]:
    keep = np.nonzero(x > 0)[0]
    keep = keep[:: max(1, keep.size // MAX_POINTS)]
    return [float(v) for v in x[keep]], [float(v) for v in y[keep]]


def point_traces(r: FitResult, label: str, color: str, x_name: str, heldout_from: float | None) -> list[go.Scatter]:
    """A fit's measured points, one trace per run (hover: run, compute, pass rate); points after `heldout_from`
    (the extrapolation's held-out check) as diamonds."""
    import plotly.graph_objects as go

    traces = []
    for c in r.curves:
        held = (c.x > heldout_from) if heldout_from is not None else np.zeros(c.x.shape, dtype=bool)
        for part, symbol, what in ((~held, "circle", "measured"), (held, "diamond-open", "held out")):
            if not part.any():
                continue
            px, py = thinned(c.x[part], c.y[part])
            traces.append(
                go.Scatter(
                    x=px,
                    y=py,
                    mode="markers",
                    marker=dict(color=color, size=5 if what == "measured" else 8, symbol=symbol, opacity=0.6),
                    name=text(f"{c.run} ({what})"),
                    hovertemplate=text(c.run) + f"<br>{what}<br>{x_name}: %{{x:,.4g}}<br>pass rate: %{{y:.3f}}"
                    "<extra></extra>",
                    legendgroup=safe(label),
                    showlegend=False,
                )
            )
    return traces


def fit_traces(
    r: FitResult, label: str, color: str, x_name: str, *, heldout_from: float | None = None
) -> list[go.Scatter]:
    """One fit drawn as traces of one legend group: its points (point_traces), the curve (solid in the window,
    dashed beyond), the band and the interval at the target."""
    import plotly.graph_objects as go

    group = dict(legendgroup=safe(label), showlegend=False)
    traces: list[go.Scatter] = point_traces(r, label, color, x_name, heldout_from)
    x_lo = max(min(float(c.x[c.x > 0].min()) for c in r.curves if (c.x > 0).any()), 1e-12)
    x_hi = max(r.target, *(float(c.x.max()) for c in r.curves))
    xs = np.geomspace(x_lo, x_hi, 200)
    band = r.predict_band(xs)
    if band is not None:
        for k, edge in enumerate(band):
            traces.append(
                go.Scatter(
                    x=xs.tolist(),
                    y=np.nan_to_num(edge).tolist(),
                    mode="lines",
                    line=dict(width=0, color=color),
                    fill="tonexty" if k else None,
                    fillcolor=rgba(color, 0.12),
                    hoverinfo="skip",
                    name=text(f"{label}: band"),
                    **group,
                )
            )
    inside = xs <= r.window[1]
    a_text = f"A={r.A:.3f}" if r.identifiable else "A not identified"
    shown = f"{label}: {a_text}, B={r.B:.2f}, C_mid={r.C_mid:,.3g}"
    in_legend = True  # the first line drawn (solid, unless the window ends before the points) stands for the arm
    for part, dash in ((inside, "solid"), (~inside, "dash")):
        if part.any():
            traces.append(
                go.Scatter(
                    x=xs[part].tolist(),
                    y=r.predict(xs[part]).tolist(),
                    mode="lines",
                    line=dict(color=color, width=2.4, dash=dash),
                    name=text(shown),
                    hovertemplate=text(label) + f" fit<br>{x_name}: %{{x:,.4g}}<br>R: %{{y:.3f}}<extra></extra>",
                    legendgroup=safe(label),
                    showlegend=in_legend,
                )
            )
            in_legend = False
    if r.pred_ci is not None:
        lo, hi = r.pred_ci
        traces.append(
            go.Scatter(
                x=[r.target],
                y=[r.pred_at_target],
                mode="markers",
                marker=dict(color=color, size=8),
                error_y=dict(
                    type="data", symmetric=False, array=[hi - r.pred_at_target], arrayminus=[r.pred_at_target - lo]
                ),
                name=text(f"{label}: R at the target"),
                hovertemplate=text(label) + f"<br>R at {r.target:g}: %{{y:.3f}} [{lo:.3f}, {hi:.3f}]<extra></extra>",
                **group,
            )
        )
    return traces


def layout(title: str, x_name: str) -> dict[str, Any]:
    """A pass-rate figure's layout: log compute, the legend toggling a whole arm, hover on the nearest point."""
    return dict(
        title=dict(text=text(title), font=dict(size=14)),
        xaxis=dict(type="log", title=dict(text=text(f"compute ({x_name})"))),
        yaxis=dict(title=dict(text="validation pass rate")),
        legend=dict(groupclick="togglegroup"),
        height=520,
        margin=dict(l=60, r=20, t=60, b=50),
        template="plotly_white",
        hovermode="closest",
    )


def fits_figure(ranking: Ranking) -> go.Figure:
    """Every arm's fit (baseline in black): a legend click toggles the arm."""
    import plotly.graph_objects as go

    labels = [a.arm for a in ranking.arms]
    palette = colors(labels, ranking.baseline)
    fig = go.Figure()
    for a in ranking.arms:
        fig.add_traces(fit_traces(a.fit, a.arm, palette[a.arm], ranking.x))
    window = max(a.fit.window[1] for a in ranking.arms)
    fig.add_vline(x=window, line=dict(color="grey", width=1, dash="dashdot"))
    fig.update_layout(
        **layout(
            f"arms fitted on {ranking.opts.window_text()}: solid in the window, dashed beyond it to the target "
            f"{ranking.target:g}; band: the fit's interval; bar: the interval at the target",
            ranking.x,
        )
    )
    return fig


def efficiency_figure(ranking: Ranking, base: ArmResult, pairs: list[ArmResult]) -> go.Figure:
    """The paper's efficiency view of each comparison behind a verdict: log F(R) = log((R - R0) / (A - R)) against
    log compute under the pair's shared A, each arm a line of slope B through C_mid (render.figures.plot_efficiency);
    one panel per compared arm, its title the verdict."""
    from plotly.subplots import make_subplots

    from ablate.render.rank import verdict_cell

    cols = min(2, len(pairs))
    rows = math.ceil(len(pairs) / cols)
    titles = [
        text(f"{a.arm}: {verdict_cell(a).plain}, {a.shared.compute_ratio:.2f}x compute") for a in pairs if a.shared
    ]
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08, vertical_spacing=0.12)
    palette = colors([a.arm for a in ranking.arms], ranking.baseline)
    legend_done: set[str] = set()
    for k, arm in enumerate(pairs):
        sh = arm.shared
        if sh is None:  # never: `pairs` are the arms compared on efficiency
            continue
        row, col = k // cols + 1, k % cols + 1
        for who, b, c_mid in ((base, sh.B_baseline, sh.C_mid_baseline), (arm, sh.B, sh.C_mid)):
            for tr in efficiency_traces(who, b, c_mid, sh, palette[who.arm], ranking.x, who.arm not in legend_done):
                fig.add_trace(tr, row=row, col=col)
            legend_done.add(who.arm)
    fig.update_xaxes(type="log", title_text=text(f"compute ({ranking.x})"))
    fig.update_yaxes(type="log", title_text="F(R) = (R − R0) / (A − R)")
    fig.update_layout(
        title=dict(
            text="efficiency against the baseline under a shared A (slope = B; F(R) = 3 at three quarters of the gain)",
            font=dict(size=14),
        ),
        legend=dict(groupclick="togglegroup"),
        height=380 * rows + 80,
        template="plotly_white",
        margin=dict(l=60, r=20, t=90, b=50),
    )
    return fig


def efficiency_traces(
    who: ArmResult, b: float, c_mid: float, shared: SharedA, color: str, x_name: str, legend: bool
) -> list[go.Scatter]:
    """One side of a comparison: its window's points as (C, F(R)) under the shared A, and its line (C / C_mid)^B."""
    import plotly.graph_objects as go

    from ablate.render.figures import efficiency_points

    fx, ff, x = efficiency_points(who.fit, shared.A_shared, MAX_POINTS)
    px, pf = [float(v) for v in fx], [float(v) for v in ff]
    hi = max(float(x.max()), 1e-12)
    xs = np.geomspace(max(float(x[x > 0].min()), 1e-12), hi, 100)
    return [
        go.Scatter(
            x=px,
            y=pf,
            mode="markers",
            marker=dict(color=color, size=4, opacity=0.45),
            legendgroup=safe(who.arm),
            showlegend=False,
            name=text(who.arm),
            hovertemplate=text(who.arm) + f"<br>{x_name}: %{{x:,.4g}}<br>F(R): %{{y:.3g}}<extra></extra>",
        ),
        go.Scatter(
            x=xs.tolist(),
            y=((xs / c_mid) ** b).tolist(),
            mode="lines",
            line=dict(color=color, width=2),
            legendgroup=safe(who.arm),
            showlegend=legend,
            name=text(f"{who.arm}: B={b:.2f}, C_mid={c_mid:,.3g}"),
        ),
    ]


def extrapolation_figure(ex: Extrapolation, x_name: str) -> go.Figure:
    """The projected arm: fitted up to the window's end, the held-out points after it (diamonds), the band to the
    target and the interval there."""
    import plotly.graph_objects as go

    fit = ex.fit
    fig = go.Figure(fit_traces(fit, ex.subject, "#1f77b4", x_name, heldout_from=fit.window[1]))
    fig.add_vline(x=fit.window[1], line=dict(color="grey", width=1, dash="dashdot"))
    mae = "no held-out points" if ex.heldout_mae is None else f"held-out error {ex.heldout_mae:.3f} (mean |R − fit|)"
    fig.update_layout(
        **layout(f"{ex.subject}: fitted to {fit.window[1]:g}, {ex.reach_word} to {fit.target:g}; {mae}", x_name)
    )
    return fig

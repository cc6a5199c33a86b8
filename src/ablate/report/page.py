"""The report page: the records of ablate.report.data and the figures of ablate.report.figures rendered through the
Jinja2 template templates/report.html.j2 (autoescaped), with plotly.js inlined once, and written atomically. What
the page shows and its DOM: docs/report.md."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ablate.config.identity import label_seed
from ablate.errors import joined
from ablate.launch.status import RunStatus
from ablate.render.figures import efficiency_pairs
from ablate.report import figures
from ablate.report.data import ReportData
from ablate.report.runs import run_warnings, seed_order
from ablate.storage import store
from ablate.storage.runinfo import RunInfo
from ablate.text import safe

if TYPE_CHECKING:
    from ablate.fit.arms import ArmResult, Ranking

TEMPLATES = Path(__file__).parent / "templates"

MEANING = {
    "baseline": "the arm every other arm is compared with",
    "ceiling_up": "A (the ceiling) is higher than the baseline's: the test of ΔA against 0 is a discovery",
    "ceiling_down": "A (the ceiling) is lower than the baseline's: the test of ΔA against 0 is a discovery",
    "efficiency_up": "no ceiling change found, but the arm reaches three quarters of its gain with less compute (under "
    "a shared A)",
    "efficiency_down": "no ceiling change found, but the arm needs more compute to reach three quarters of its gain "
    "(under a shared A)",
    "equivalent": "shown not to matter at this scale: |ΔA| and the compute ratio both inside the smallest effect "
    "that matters (two one-sided tests)",
    "inconclusive": "neither a change nor equivalence is shown; more seeds would decide it (the count is given)",
    "not_identified": "A is not measured (the window may not have passed C_mid, or the fit cannot pin A down; the "
    "arm's reasoning says which): no ceiling or efficiency verdict; the arm is ranked on its predicted pass rate at "
    "the target, and tested on its pass rate where every arm has data",
}
"""Each verdict in a line (docs/verdicts.md says it in full)."""


def plain(markup: str) -> str:
    """A line `ablate rank` prints (Rich markup, names escaped) as the plain text it shows."""
    return Text.from_markup(markup).plain.strip()


def verdict_rows(ranking: Ranking) -> list[dict[str, Any]]:
    """The verdict table's rows, best first as rank orders them: the verdict word as `rank --json` gives it."""
    from ablate.render.numbers import fmt_range, num
    from ablate.render.rank import verdict_cell

    def with_ci(v: float, ci: Any, digits: int = 3) -> str:
        return num(v, digits) + ("" if ci is None else f" [{num(ci[0], digits)}, {num(ci[1], digits)}]")

    rows = []
    for a in ranking.arms:
        f = a.fit
        rows.append(
            {
                "arm": a.arm,
                "seeds": a.seeds,
                "A": with_ci(f.A, f.A_ci) if f.identifiable else "not identified",
                "B": with_ci(f.B, f.B_ci, 2),
                "C_mid": fmt_range(f.C_mid, f.C_mid_ci),
                "R": with_ci(f.pred_at_target, f.pred_ci),
                "verdict": a.verdict or "",
                "reads": verdict_cell(a).plain,
                "why": a.effect or "—",
                "flags": [*(["partial"] if a.partial else []), *a.stopped]
                + (["truncation > 10%"] if a.truncation_warning else []),
            }
        )
    return rows


def _not_identified_advice(a: ArmResult, ranking: Ranking) -> str:
    """What would decide a not-identified arm: the rules its fit (or, when only the baseline fails, the baseline's)
    fails, and more compute per run when the window may end before C_mid."""
    base = next((b for b in ranking.arms if b.verdict == "baseline"), None)
    fit, whose = (a.fit, "its") if not a.fit.identifiable or base is None else (base.fit, "the baseline's")
    text = f"{whose} ceiling A is not measured ({safe(joined('; ', fit.why_not_identified)) or 'see the reasoning'})"
    if fit.gain_fraction < 0.5 or (fit.f_ci is not None and fit.f_ci[0] < 0.5):  # the window may end before C_mid
        return (
            f"{text}: more compute per run would measure it (a new sweep with a larger train.max_steps, under "
            "another --root; ablate plan simulates how much)"
        )
    return text


def ranking_context(data: ReportData) -> dict[str, Any]:
    """The ranking section: header lines, rows, notes and what would decide each undecided arm."""
    from ablate.render.rank import rank_lead, rank_tail

    r = data.ranking
    if r is None:
        return {}
    undecided = []
    for a in r.arms:
        if a.verdict == "inconclusive" and a.decide:
            undecided.append({"arm": a.arm, "what": a.decide.text})
        elif a.verdict == "not_identified":
            undecided.append({"arm": a.arm, "what": _not_identified_advice(a, r)})
    present = list(dict.fromkeys(a.verdict for a in r.arms if a.verdict))
    return {
        "header": [plain(line) for line in rank_lead(r)],
        "rows": verdict_rows(r),
        "notes": [
            *([data.analysis_source] if data.analysis_source else []),
            *(plain(line) for line in rank_tail(r, [data.sweep], data.elsewhere)),
        ],
        "meanings": [(v, MEANING.get(v, "")) for v in present],
        "undecided": undecided,
        "target": f"{r.target:g}",
        "x": r.x,
        "baseline": r.baseline,
        "single": len(r.arms) < 2,
    }


def figure_context(data: ReportData) -> tuple[dict[str, Any], dict[str, str]]:
    """The figures as Plotly JSON by div id, and for each that cannot be drawn the reason why."""
    figs: dict[str, Any] = {}
    missing: dict[str, str] = {}
    r = data.ranking
    if r is None:
        missing["plot-fits"] = missing["plot-efficiency"] = f"no ranking: {data.ranking_missing}"
    else:
        figs["plot-fits"] = figures.fits_figure(r)
        pairs = efficiency_pairs(r)
        if len(r.arms) < 2:
            missing["plot-efficiency"] = "one arm only: there is nothing to compare it with"
        elif pairs is None:
            why = ", ".join(f"{a.arm} ({a.verdict})" for a in r.arms if a.arm != r.baseline) or "none"
            missing["plot-efficiency"] = (
                "no arm was compared on efficiency (it needs both the arm's and the baseline's ceiling A "
                f"identified): {why}"
            )
        else:
            figs["plot-efficiency"] = figures.efficiency_figure(r, *pairs)
    if data.extrapolation is None:
        missing["plot-extrapolation"] = f"no extrapolation: {data.extrapolation_missing}"
    else:
        figs["plot-extrapolation"] = figures.extrapolation_figure(data.extrapolation.projection, data_x(data))
    return {k: json.loads(f.to_json()) for k, f in figs.items()}, missing


def data_x(data: ReportData) -> str:
    return data.ranking.x if data.ranking is not None else "compute"


def plan_context(data: ReportData) -> dict[str, Any] | None:
    """`ablate plan`'s answer as render.plan.print_plan shows it, as text lines and table rows (same columns and
    words); None without one."""
    from ablate.render.plan import design_cells, design_rows, designs_columns, designs_title, gpu_hours, question_text

    result = data.plan
    if result is None:
        return None
    m = result.model
    goal = result.designs[0].goal if result.designs else 0.8
    steps = f" ({round(m.budget * m.steps_per_x)} steps)" if m.steps_per_x else ""
    qtext = {d.question: question_text(d) for d in result.designs}

    designs = [
        {
            "cells": [qtext[r["question"]], *design_cells(r)],
            "note": "★ cheapest" if r["best"] else r["why"],
            "best": r["best"],
        }
        for r in design_rows(result)
    ]
    answers = []
    for d in result.designs:
        b = d.best
        if b is None:
            answers.append(
                (
                    f"{question_text(d)}: no design in the ladder reaches {goal:.0%} power; a larger effect, or more "
                    "compute than the rungs tried, is needed",
                    True,
                )
            )
            continue
        gh = gpu_hours(m, b.compute, b.seeds * m.arms)
        answers.append(
            (
                f"{question_text(d)}: {b.seeds} seeds x {b.compute:.4g} {m.x} per arm = {b.seeds * m.arms} "
                f"runs" + (f", {gh:.3g} GPU-hours in all" if gh is not None else "") + f" (power {b.power:.2f} "
                f"±{b.se:.2f})",
                False,
            )
        )
    return {
        "lead": [f"task model ({m.x}): {m.describe()}", f"{m.source}; budget {m.budget:.4g} {m.x} per run{steps}"],
        "notes": [f"note: {n}" for n in m.notes],
        "title": designs_title(result),
        "columns": designs_columns(m.x),
        "designs": designs,
        "answers": answers,
        "running": running_arms(data),
    }


def running_arms(data: ReportData) -> dict[str, Any] | None:
    """render.plan.running_arms_table's columns and cells, or None when the plan looked at no arm; `rows` is empty
    when every run has ended."""
    result = data.plan
    if result is None or not result.arms:
        return None
    x = result.model.x
    rows = [
        [
            a.arm,
            a.verdict,
            f"{a.compute_now:.4g}",
            f"{a.compute_end:.4g}",
            "" if a.p_change is None else f"{a.p_change:.0%}",
            str(a.advice.standing),
            str(a.advice),
        ]
        for a in result.arms
    ]
    return {
        "columns": ["arm", "verdict now", f"{x} now", "at max_steps", "futures changed", "state", "advice"],
        "rows": rows if any(a.running for a in result.arms) else [],
    }


def status_rows(data: ReportData) -> list[dict[str, Any]]:
    """`ablate status`'s cells per run (render.status.row_cells), with what a reader should know about it; by arm
    (the baseline first, then as ranked, then as swept) and seed."""
    from ablate.render.status import COLUMNS, row_cells

    names = [c for c, _ in COLUMNS]
    return [
        {"cells": dict(zip(names, (t for t, _ in row_cells(s)))), "state": str(s.state), "warnings": run_warnings(s)}
        for s in sorted(data.statuses, key=status_order(data))
    ]


def status_order(data: ReportData) -> Callable[[RunStatus], tuple[Any, ...]]:
    """The sort key of a status row: its arm's place (baseline, ranked, swept, then by name) and its seed."""
    ranked = [a.arm for a in data.ranking.arms] if data.ranking is not None else []
    base = [a.label for a in data.arms if a.baseline]
    order = list(dict.fromkeys([*base, *ranked, *(a.label for a in data.arms)]))

    def key(s: RunStatus) -> tuple[Any, ...]:
        arm = RunInfo(s.run_id, label=s.label).arm
        seed = label_seed(s.label) or ""
        return (order.index(arm) if arm in order else len(order), arm, seed_order(seed), s.label)

    return key


def extrapolate_command(data: ReportData) -> str | None:
    """The `ablate extrapolate` command that reproduces the page's projection, quoted to paste into a shell."""
    import shlex

    if data.extrapolation is None:
        return None
    p = data.extrapolation.projection
    args = ["ablate", "extrapolate", str(data.sweep), "--arm", p.subject, "--fit-until", f"{data.fit_until:g}"]
    args += ["--to", f"{p.fit.target:g}", *(["--x", data.ranking.x] if data.ranking else [])]
    return shlex.join(args)


def render(data: ReportData) -> str:
    """The whole page as HTML text."""
    import jinja2
    from plotly.offline import get_plotlyjs

    from ablate.render.status import summary_line
    from ablate.text import html_text

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=html_text,  # escape characters in a label are shown escaped (\x1b), as in the terminal
    )
    figs, missing = figure_context(data)
    ex = data.extrapolation
    return env.get_template("report.html.j2").render(
        data=data,
        rank=ranking_context(data),
        status_summary=summary_line(data.name, data.statuses),
        status_rows=status_rows(data),
        plan=plan_context(data),
        figures=figs,
        missing=missing,
        projection=None if ex is None else ex.projection,
        extrapolation_target=None if ex is None else ex.target_text,
        extrapolate_command=extrapolate_command(data),
        plotlyjs=get_plotlyjs(),
    )


def write(path: Path, page: str) -> Path:
    """Replace `path` with the page atomically and owner-only (0600), wherever it is written: it shows the sweep's
    configs, paths and hosts, for its reader to send on, not for every user of the machine. A link at `path` is
    refused (LinkRefused), never written through; on any failure the old file is left as it was."""
    path = Path(path)
    store.atomic_write_bytes(path, page.encode("utf-8"), mode=0o600)
    return path

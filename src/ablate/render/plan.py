"""What `ablate plan` prints: the task model, the table of designs (seeds and compute per arm for each question),
the cheapest design per question, and whether more compute could change a running arm's verdict. The plan itself:
ablate.analysis.plan and fit/planning.py; its JSON: docs/json.md."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ablate.fit.arms import verdict_words
from ablate.prune.outlook import Standing
from ablate.render import terminal
from ablate.render.terminal import esc
from ablate.text import safe

if TYPE_CHECKING:  # the fit stack imports scipy: keep start-up light
    from ablate.analysis.plan import PlanResult
    from ablate.fit.taskmodel import Design, TaskModel

STANDING_STYLE = {Standing.SETTLED: "green", Standing.OPEN: "yellow"}


def gpu_hours(model: TaskModel, compute: float, runs: int) -> float | None:
    """GPU-hours of `runs` runs to `compute` each, where the model knows the GPU-hours per unit of compute."""
    return None if model.gpu_hours_per_x is None else compute * model.gpu_hours_per_x * runs


def design_rows(result: PlanResult) -> list[dict[str, Any]]:
    """One row per (question, compute rung): what a sweep of the model's arms needs there."""
    m = result.model
    rows = []
    for d in result.designs:
        best = d.best
        for r in d.rungs:
            s = r.seeds
            rows.append(
                {
                    "question": d.question,
                    "compute": r.compute,
                    "steps": None if not m.steps_per_x else round(r.compute * m.steps_per_x),
                    "seeds": s,
                    "power": r.power,
                    "se": r.se,
                    "why": r.why or "",
                    "gpu_hours_arm": None if s is None else gpu_hours(m, r.compute, s),
                    "gpu_hours_sweep": None if s is None else gpu_hours(m, r.compute, s * m.arms),
                    "best": best is not None and best.compute == r.compute and best.seeds == s,
                }
            )
    return rows


def question_text(d: Design) -> str:
    """A question as the tables name it: the effect it is planned to detect."""
    e = d.effect
    if d.question == "ceiling":
        return f"ceiling ΔA +{e['a']:g}"
    return f"efficiency {1.0 / e['c_mid']:.3g}x"


def designs_title(result: PlanResult) -> str:
    """The designs table's title: the sweep, the power asked for and how power was simulated (without markup)."""
    goal = result.designs[0].goal if result.designs else 0.8
    how = (
        "simulated through ablate rank"
        if result.designs and result.designs[0].engine == "exact"
        else "simulated sweeps given verdicts by ablate rank's rules"
    )
    return f"what a sweep of {result.model.arms} arms needs: {goal:.0%} power, 5% false-discovery rate ({how})"


def designs_columns(x: str) -> list[str]:
    """The designs table's columns (the compute column names the axis `x`)."""
    return [
        "question",
        f"compute per run ({x})",
        "steps",
        "seeds per arm",
        "power",
        "GPU-h per arm",
        "GPU-h sweep",
        "note",
    ]


def designs_table(result: PlanResult) -> Table:
    """Every rung of every question: compute per run, steps, seeds per arm, power and GPU-hours; cheapest starred."""
    t = Table(title=esc(designs_title(result)), header_style="bold")
    for col in designs_columns(esc(result.model.x)):
        t.add_column(col, justify="left" if col in ("question", "note") else "right")
    qtext = {d.question: question_text(d) for d in result.designs}
    for r in design_rows(result):
        t.add_row(
            Text(qtext[r["question"]]),
            *design_cells(r),
            Text("★ cheapest" if r["best"] else r["why"], style="bold green" if r["best"] else "dim"),
        )
    return t


def design_cells(r: dict[str, Any]) -> list[str]:
    """One design row's numbers as the plan's table shows them (compute, steps, seeds, power, GPU-hours per arm and
    per sweep), the same words in the terminal and in the report's page."""

    def fmt(v: float | None) -> str:
        return "" if v is None else f"{v:.3g}"

    return [
        f"{r['compute']:.4g}",
        "" if r["steps"] is None else str(r["steps"]),
        "—" if r["seeds"] is None else str(r["seeds"]),
        "" if r["power"] is None else f"{r['power']:.2f} ±{r['se']:.2f}",
        fmt(r["gpu_hours_arm"]),
        fmt(r["gpu_hours_sweep"]),
    ]


def running_arms_table(result: PlanResult) -> Table:
    """Per running arm: its verdict now, where it is and will end, how often a future changed it, and the advice."""
    x = esc(result.model.x)
    t = Table(title="running arms: would more compute change the verdict?", header_style="bold")
    for col in ("arm", "verdict now", f"{x} now", "at max_steps", "futures changed", "state", "advice"):
        t.add_column(col)
    for a in result.arms:
        standing = a.advice.standing
        t.add_row(
            Text(safe(a.arm)),
            verdict_words(a.verdict),
            f"{a.compute_now:.4g}",
            f"{a.compute_end:.4g}",
            "" if a.p_change is None else f"{a.p_change:.0%}",
            Text(str(standing), style=STANDING_STYLE.get(standing, "")),
            Text(safe(str(a.advice)), style="dim"),
        )
    return t


def plan_notices(*, quiet: bool) -> tuple[Callable[[str], None] | None, Callable[[str], None] | None]:
    """What `ablate plan` says as it works (progress, on stderr) and the axis `--x auto` chose; nothing when
    `quiet` (--json)."""
    if quiet:
        return None, None
    err = terminal.console(stderr=True)
    return (
        lambda msg: err.print(f"[dim]  {esc(msg)}[/]"),
        lambda line: terminal.console().print(f"[yellow]axis[/]: {esc(line)}"),
    )


def print_plan(result: PlanResult, console: Console, saved: Path | None = None) -> None:
    """The plan as tables and lines, and where the task model was `saved` (--save-calibration). The model's axis,
    source and notes may come from a calibration file, and arm names from any input: all shown as text
    (text.safe), never obeyed by the terminal."""
    m = result.model
    x = safe(m.x)
    console.print(Text(f"task model ({x}): {m.describe()}"))
    console.print(
        Text(
            safe(
                f"  {m.source}; budget {m.budget:.4g} {m.x} per run"
                + (f" ({round(m.budget * m.steps_per_x)} steps)" if m.steps_per_x else "")
            )
        )
    )
    for n in m.notes:
        console.print(Text(safe(f"  note: {n}"), style="yellow"))
    goal = result.designs[0].goal if result.designs else 0.8
    console.print(designs_table(result))
    for d in result.designs:
        b = d.best
        if b is None:
            console.print(
                Text(
                    f"{question_text(d)}: no design in the ladder reaches {goal:.0%} power; a larger "
                    "effect, or more compute than the rungs tried, is needed",
                    style="yellow",
                )
            )
            continue
        gh = gpu_hours(m, b.compute, b.seeds * m.arms)
        console.print(
            Text(
                f"{question_text(d)}: {b.seeds} seeds x {b.compute:.4g} {x} per arm "
                f"= {b.seeds * m.arms} runs"
                + (f", {gh:.3g} GPU-hours in all" if gh is not None else "")
                + f" (power {b.power:.2f} ±{b.se:.2f})"
            )
        )
    if result.arms and not any(a.running for a in result.arms):
        console.print("running arms: none (every run has ended)")
    elif result.arms:
        console.print(running_arms_table(result))
    if saved is not None:
        console.print(f"task model written to {esc(str(saved))} (plan a sweep file with --calibration)")

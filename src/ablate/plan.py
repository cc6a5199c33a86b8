"""`ablate plan`: read a sweep (or a sweep file and a stored calibration), build the task model, and answer by
simulation (fit/planning.py) how many seeds and how much compute per arm each question needs, and, for arms still
running, whether more compute could change their verdict.

Budget (the compute a run reaches at its max_steps): for a sweep directory, each run's last evaluation scaled to
its max_steps (compute grows with steps); for other inputs, where the curves end; for a sweep file, max_steps times
the calibration's compute per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ablate.errors import UserError
from ablate.fit import planning
from ablate.fit.analysis import FitOptions
from ablate.fit.compare import NoiseFloor, Ranking, rank
from ablate.fit.verdicts import MinEffect

SETTLED_BOUND = 0.10
"""An arm is settled when the one-sided 95% upper bound on the chance that its verdict changes (continued to the end,
or stopped now while the rest go on) is at most this: with 40 futures, none may change it."""


@dataclass
class RunEnd:
    """Where one run is and where its max_steps will take it, on the compute axis."""

    run: str
    arm: str
    x_now: float
    x_end: float
    step: int | None
    max_steps: int | None
    gpu_hours_per_x: float | None
    ended: bool


@dataclass
class PlanResult:
    model: planning.TaskModel
    designs: list[dict[str, Any]]
    arms: list[dict[str, Any]] = field(default_factory=list)
    ranking: Ranking | None = None

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model.to_json(), "questions": self.designs, "arms": self.arms}


def run_ends(source: Path, curves: list, x: str) -> dict[str, RunEnd]:
    """Each curve's run: its compute now and at its max_steps (read from the run directories of a sweep)."""
    from ablate.rundir import RunDir

    out = {}
    runs_dir = source / "runs"
    by_label = {}
    if runs_dir.is_dir():
        for p in sorted(runs_dir.iterdir()):
            if (p / "run.json").exists():
                info = RunDir(p).info()
                by_label[info.label or p.name] = RunDir(p)
    for c in curves:
        x_now = float(c.x[-1])
        rd = by_label.get(c.run)
        step = max_steps = None
        ghx = None
        ended = True
        if rd is not None:
            info = rd.info()
            last = rd.last_metrics() or {}
            step = last.get("step") if isinstance(last.get("step"), int) else None
            max_steps = info.max_steps
            ended = info.status not in ("pending", "running", "preempted")
            g = last.get("gpu_hours")
            if isinstance(g, (int, float)) and x_now > 0:
                ghx = float(g) / x_now
        x_end = x_now
        if step and max_steps and not ended and step < max_steps:
            x_end = x_now * max_steps / step
        out[c.run] = RunEnd(run=c.run, arm=c.group or c.run, x_now=x_now, x_end=x_end, step=step,
                            max_steps=max_steps, gpu_hours_per_x=ghx, ended=ended)
    return out


def _median(values) -> float | None:
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    return float(np.median(v)) if v else None


def plan_measured(source: Path, *, x: str, baseline: str | None, to: float | None, noise: Path | None,
                  questions: list[str], delta_a: float, ratio: float, goal: float, trials: int, seed: int, jobs: int,
                  n_futures: int, progress: Callable[[str], None] | None, fmt: str = "auto", run: str | None = "run",
                  group: str | None = None, engine: str = "fast", min_effect: MinEffect | None = None) -> PlanResult:
    """A plan from measured curves (a sweep directory or any input `rank` reads). `engine`: planning.ENGINES."""
    from ablate.curves import load_inputs

    curves, skipped = load_inputs([source], x=x, fmt=fmt, run=run, group=group)
    ends = run_ends(source, curves, x) if source.is_dir() else {
        c.run: RunEnd(c.run, c.group or c.run, float(c.x[-1]), float(c.x[-1]), None, None, None, True) for c in curves}
    budget = max(e.x_end for e in ends.values())
    target = to if to is not None else 2.0 * budget
    floor = None if noise is None else NoiseFloor.load(noise)
    if progress:
        progress(f"fitting {len(curves)} runs")
    ranking = rank(curves, FitOptions(n_boot=200, target=target, seed=seed), baseline=baseline, noise=floor, x=x,
                   not_fitted=skipped, min_effect=min_effect)
    seeds = max((a.seeds for a in ranking.arms), default=1)
    steps_per_x = _median(e.step / e.x_now for e in ends.values() if e.step and e.x_now > 0)
    ghx = 1.0 if x == "gpu_hours" else _median(e.gpu_hours_per_x for e in ends.values())
    model = planning.from_ranking(ranking, budget=budget, seeds=seeds, gpu_hours_per_x=ghx, steps_per_x=steps_per_x,
                                  source=f"measured on {source}", seed=seed)
    designs = [planning.design(model, q, delta_a=delta_a, ratio=ratio, goal=goal, trials=trials, seed=seed,
                               jobs=jobs, noise=floor, to=to, progress=progress, engine=engine,
                               min_effect=min_effect) for q in questions]
    arms = running_arms(ranking, ends, n_futures, seed, floor, progress)
    return PlanResult(model=model, designs=designs, arms=arms, ranking=ranking)


def candidates(ranking: Ranking, live: set[str]) -> set[str]:
    """The running arms that could be stopped: identified, read against an identified baseline with a measured
    seed spread (else their verdict is no test)."""
    base = next((b for b in ranking.arms if b.arm == ranking.baseline), None)
    if base is None or not base.fit.identifiable or ranking.floor is None:
        return set()
    return {a.arm for a in ranking.arms if a.arm in live and a is not base and a.fit.identifiable}


def running_arms(ranking: Ranking, ends: dict[str, RunEnd], n: int, seed: int, floor: NoiseFloor | None,
                 progress: Callable[[str], None] | None = None, bound: float = SETTLED_BOUND,
                 settle_only: bool = False) -> list[dict[str, Any]]:
    """Per arm: its verdict now and whether more compute (up to its runs' max_steps) could change it, or stopping
    it now could. `settle_only`: no futures at all when no arm could be settled (the monitor's question)."""
    live = {e.arm for e in ends.values() if e.x_end > e.x_now}
    can = candidates(ranking, live)
    fut = {}
    if live and n > 0 and (can or not settle_only):
        if progress:
            progress(f"simulating {n} futures of the {len(live)} running arm(s)")
        x_end = {r: e.x_end for r, e in ends.items()}
        fut = planning.futures(ranking, x_end, n=n, seed=seed, noise=floor, frozen=can)
        # only the candidates that settle are stopped: check that future again with just them stopped, until the
        # set holds (it shrinks each time, so this ends)
        while True:
            settle = {arm for arm in can if fut[arm]["n"] and fut[arm]["bound"] <= bound}
            if not settle or settle == can:
                break
            can = settle
            again = planning.futures(ranking, x_end, n=n, seed=seed, noise=floor, frozen=can)
            fut.update({arm: again[arm] for arm in can})
    out = []
    for a in ranking.arms:
        row: dict[str, Any] = {"arm": a.arm, "verdict": planning._verdict_key(a), "identified": a.fit.identifiable,
                               "compute_now": max(float(c.x[-1]) for c in a.fit.curves),
                               "compute_end": max(ends[c.run].x_end if c.run in ends else float(c.x[-1])
                                                  for c in a.fit.curves),
                               "running": a.arm in live, "p_change": None, "bound": None, "futures_n": 0}
        f = fut.get(a.arm)
        if f is not None and a.arm in live:
            row.update(p_change=f["p_change"], bound=f["bound"], futures_n=f["n"], futures=f["future"])
            if f["stopped"]:
                row["if_stopped"] = f["stopped"]
        row["state"], row["advice"] = _advice(a, row, ranking, bound)
        out.append(row)
    return out


def _advice(a, row: dict[str, Any], ranking: Ranking, bound: float) -> tuple[str, str]:
    if not row["running"]:
        return "ended", "its runs have ended"
    if a.arm == ranking.baseline:
        return "reference", "the baseline: every verdict is read against it, so it runs to the end"
    if not a.fit.identifiable:
        return "open", "not identified: A is not measured until the window passes C_mid; keep it running"
    base = next((b for b in ranking.arms if b.arm == ranking.baseline), None)
    if base is None or not base.fit.identifiable:
        return "open", "the baseline's A is not identified yet: no verdict to settle"
    if ranking.floor is None:
        return "open", "no seed spread measured yet (needs seeds): its verdict is not a test, so it cannot settle"
    if not (a.verdict == "equivalent" or a.practical == "material"):
        now = (f"{a.verdict.replace('_', ' ')}, of a size not yet shown to matter ({a.practical})" if a.practical
               in ("negligible", "unclear") and a.verdict != "inconclusive" else a.verdict.replace("_", " "))
        return "open", (f"{now}: only an arm shown equivalent or changed by more than the smallest effect that "
                        "matters can settle")
    p = row["p_change"]
    if p is None:
        return "open", "no futures simulated"
    said = (f"its verdict changed in {row['p_change'] * row['futures_n']:.0f} of {row['futures_n']} futures "
            f"(continued, or stopped now; ≤{row['bound']:.0%} at 95%)")
    if row["bound"] <= bound:
        return "settled", f"{said}: it can stop at {row['compute_now']:.4g}"
    return "open", f"{said}: more compute can still decide it"


def plan_from_file(sweep_file: Path, overrides: list[str], calibration: Path | None, *, questions: list[str],
                   delta_a: float, ratio: float, goal: float, trials: int, seed: int, jobs: int,
                   progress: Callable[[str], None] | None, noise: Path | None,
                   to: float | None = None, engine: str = "fast", min_effect: MinEffect | None = None) -> PlanResult:
    """A plan before any run: the sweep file says how many arms and steps, a stored calibration the rest."""
    from ablate.sweep import load_sweep

    sweep = load_sweep(sweep_file, overrides)
    if calibration is None:
        raise UserError(f"{sweep_file}: a sweep file has no measurements yet; give --calibration FILE (written by "
                        "`ablate plan SWEEP_DIR --save-calibration FILE` on a sweep of the same task that ran with "
                        "seeds), or plan from a sweep directory")
    model = planning.TaskModel.load(calibration)
    model.arms = len(sweep.arms)
    max_steps = max(r.config.train.max_steps for r in sweep.runs)
    if model.steps_per_x:
        model.budget = max_steps / model.steps_per_x
        if not planning.MIN_SCALE <= model.budget <= planning.MAX_SCALE:
            raise UserError(f"--calibration {calibration}: steps_per_x {model.steps_per_x:g} makes {max_steps} steps "
                            f"a compute of {model.budget:g} {model.x}, outside [{planning.MIN_SCALE:g}, "
                            f"{planning.MAX_SCALE:g}]; write the calibration again with `ablate plan SWEEP_DIR "
                            "--save-calibration FILE`")
    else:
        model.notes.append(f"the calibration has no steps per unit of {model.x}: the budget is the calibrated "
                           f"sweep's ({model.budget:.4g}), not this file's max_steps {max_steps}")
    model.source = f"{calibration} ({model.source})"
    floor = None if noise is None else NoiseFloor.load(noise)
    designs = [planning.design(model, q, delta_a=delta_a, ratio=ratio, goal=goal, trials=trials, seed=seed,
                               jobs=jobs, noise=floor, to=to, progress=progress, engine=engine,
                               min_effect=min_effect) for q in questions]
    return PlanResult(model=model, designs=designs)


# ---- output ----


def _gpu_hours(model: planning.TaskModel, compute: float, runs: int) -> float | None:
    return None if model.gpu_hours_per_x is None else compute * model.gpu_hours_per_x * runs


def design_rows(result: PlanResult) -> list[dict[str, Any]]:
    """One row per (question, compute rung): what a sweep of the model's arms needs there."""
    m = result.model
    rows = []
    for d in result.designs:
        best = d["best"]
        for r in d["rungs"]:
            s = r["seeds"]
            rows.append({
                "question": d["question"], "compute": r["compute"],
                "steps": None if not m.steps_per_x else int(round(r["compute"] * m.steps_per_x)),
                "seeds": s, "power": r["power"], "se": r["se"], "why": r.get("why", ""),
                "gpu_hours_arm": None if s is None else _gpu_hours(m, r["compute"], s),
                "gpu_hours_sweep": None if s is None else _gpu_hours(m, r["compute"], s * m.arms),
                "best": best is not None and best["compute"] == r["compute"] and best["seeds"] == s})
    return rows


def question_text(d: dict[str, Any]) -> str:
    e = d["effect"]
    if d["question"] == "ceiling":
        return f"ceiling ΔA +{e['a']:g}"
    return f"efficiency {1.0 / e['c_mid']:.3g}x"


def render(result: PlanResult, console) -> None:
    """The plan as tables and lines. The model's axis, source and notes may come from a calibration file, and arm
    names from any input: all shown as text (text.safe), never obeyed by the terminal."""
    from rich.table import Table
    from rich.text import Text

    from ablate.report import esc
    from ablate.text import safe

    m = result.model
    x = safe(m.x)
    console.print(Text(f"task model ({x}): {m.describe()}"))
    console.print(Text(safe(f"  {m.source}; budget {m.budget:.4g} {m.x} per run"
                            + (f" ({int(round(m.budget * m.steps_per_x))} steps)" if m.steps_per_x else ""))))
    for n in m.notes:
        console.print(Text(safe(f"  note: {n}"), style="yellow"))
    goal = result.designs[0]["goal"] if result.designs else 0.8
    how = ("simulated through `ablate rank`" if result.designs and result.designs[0].get("engine") == "exact" else
           "simulated sweeps given verdicts by `ablate rank`'s rules")
    t = Table(title=f"what a sweep of {m.arms} arms needs: {goal:.0%} power, 5% false-discovery rate ({how})",
              header_style="bold")
    for col in ("question", f"compute per run ({esc(m.x)})", "steps", "seeds per arm", "power", "GPU-h per arm",
                "GPU-h sweep", "note"):
        t.add_column(col, justify="left" if col in ("question", "note") else "right")
    qtext = {d["question"]: question_text(d) for d in result.designs}
    for r in design_rows(result):
        fmt = (lambda v: "" if v is None else f"{v:.3g}")
        t.add_row(Text(qtext[r["question"]]), f"{r['compute']:.4g}", "" if r["steps"] is None else str(r["steps"]),
                  "—" if r["seeds"] is None else str(r["seeds"]),
                  "" if r["power"] is None else f"{r['power']:.2f} ±{r['se']:.2f}",
                  fmt(r["gpu_hours_arm"]), fmt(r["gpu_hours_sweep"]),
                  Text("★ cheapest" if r["best"] else r["why"], style="bold green" if r["best"] else "dim"))
    console.print(t)
    for d in result.designs:
        b = d["best"]
        if b is None:
            console.print(Text(f"{question_text(d)}: no design in the ladder reaches {goal:.0%} power; a larger "
                               "effect, or more compute than the rungs tried, is needed", style="yellow"))
            continue
        gh = _gpu_hours(m, b["compute"], b["seeds"] * m.arms)
        console.print(Text(f"{question_text(d)}: {b['seeds']} seeds x {b['compute']:.4g} {x} per arm "
                           f"= {b['seeds'] * m.arms} runs" + (f", {gh:.3g} GPU-hours in all" if gh is not None else "")
                           + f" (power {b['power']:.2f} ±{b['se']:.2f})"))
    if result.arms and not any(a["running"] for a in result.arms):
        console.print("running arms: none (every run has ended)")
    elif result.arms:
        t = Table(title="running arms: would more compute change the verdict?", header_style="bold")
        for col in ("arm", "verdict now", f"{esc(m.x)} now", "at max_steps", "futures changed", "state", "advice"):
            t.add_column(col)
        for a in result.arms:
            p = a["p_change"]
            t.add_row(Text(safe(a["arm"])), a["verdict"], f"{a['compute_now']:.4g}", f"{a['compute_end']:.4g}",
                      "" if p is None else f"{p:.0%}",
                      Text(a["state"], style={"settled": "green", "open": "yellow"}.get(a["state"], "")),
                      Text(safe(a["advice"]), style="dim"))
        console.print(t)

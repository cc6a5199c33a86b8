"""What `ablate fit`, `extrapolate` and `calibrate` print: tables and lines presenting `FitResult`s
(fit/analysis.py); nothing here computes a fit. Columns and JSON keys: docs/json.md."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from ablate.render.numbers import fmt_pm, fmt_range, num
from ablate.render.terminal import cell, esc

if TYPE_CHECKING:  # the fit stack imports scipy: keep `ablate sweep`/`status` start-up light
    from ablate.analysis.verbs import ExtrapolationReport, FitReport, Inputs
    from ablate.fit.extrapolate import Extrapolation
    from ablate.fit.result import FitOptions, FitResult

STATUS_STYLE = {"converged": "green", "at_bound": "yellow", "not_identified": "red", "failed": "red"}


def fit_table(results: Iterable[FitResult], *, title: str | None = None) -> Table:
    """One row per run (or arm): R0, A, B, C_mid with their intervals, the window, the status and R at the target."""
    results = list(results)
    target = results[0].target if results else 16000
    t = Table(title=title, header_style="bold")
    columns: list[tuple[str, dict[str, Any]]] = [
        ("run", {}),
        ("R0", {"justify": "right"}),
        ("A", {"justify": "right"}),
        ("B", {"justify": "right"}),
        ("C_mid", {"justify": "right"}),
        ("window", {}),
        ("n", {"justify": "right"}),
        ("f", {"justify": "right"}),
        ("status", {}),
        (f"R@{target:g}", {"justify": "right"}),
        ("noise: drift sd / rho", {"justify": "right"}),
    ]
    for col, kw in columns:
        t.add_column(col, **kw)
    for r in results:
        t.add_row(
            cell(r.run),
            num(r.R0),
            fmt_pm(r.A, r.A_ci),
            fmt_pm(r.B, r.B_ci, 2),
            fmt_range(r.C_mid, r.C_mid_ci),
            f"{r.window[0]:g}..{r.window[1]:g}",
            str(r.n_points),
            f"{r.gain_fraction:.2f}" if math.isfinite(r.gain_fraction) else "—",
            f"[{STATUS_STYLE.get(r.status, 'white')}]{r.status}[/]" + (" [red]unstable[/]" if r.unstable else ""),
            fmt_pm(r.pred_at_target, r.pred_ci),
            noise_text(r),
        )
    return t


def r0_text(results: Sequence[FitResult], opts: FitOptions) -> str:
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
        return (
            results[0].interval_method
            if len(results) == 1
            else (kinds.pop() + " (each run from its own measured noise: see the noise column)")
        )
    return "; ".join(sorted(kinds))


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
    for col in ("run", "fit until", "A", "B", "C_mid", f"R@{results[0].target:g}", "note"):
        t.add_column(col, justify="left" if col in ("run", "note") else "right")
    for r in results:
        for row in r.sensitivity or []:
            mark = "" if row["identifiable"] else "not identified"
            if row["cutoff"] == 1.0 and r.unstable:
                mark = "[red]unstable[/]"
            t.add_row(
                cell(r.run),
                f"{row['fit_until']:g} ({row['cutoff']:.0%})",
                num(row["A"]),
                num(row["B"], 2),
                num(row["C_mid"]),
                num(row["pred_at_target"]),
                mark,
            )
    return t


_CELL_KEYS = ("shape", "noise", "seeds", "floor", "f", "effect", "trials")
_RATES = (  # key, header (two short lines, so the table fits a terminal), the value that misses its target
    ("coverage_A", "cover\nA", lambda v: v < 0.90),
    ("coverage_pred", "cover\nR@to", lambda v: v < 0.90),
    ("false_call_rate", "false\ncalls", lambda v: v > 0.05),
    ("power", "power", None),
    ("ceiling_calls", "ceil.\ncalls", None),
    ("not_identified", "not\nident", None),
    ("equivalent_rate", "shown\nequiv", None),
    ("false_equivalent_rate", "false\nequiv", lambda v: v > 0.05),
)


def calibration_table(rows: list[dict[str, Any]]) -> Table:
    """`ablate calibrate`: one row per cell: coverage, false-call rate, power, ceiling calls, not identified, how
    often `equivalent` is found (the right answer on identical arms) and claimed falsely (on any real effect; at
    the smallest effect that matters, effects marked *, it is the equivalence test's size). A value off its target
    is marked `!` (and red), which survives a pipe; what every cell shares goes in the title, not a column."""

    def key(r: dict[str, Any], k: str) -> str:
        v = r.get(k, "own") if k == "floor" else r[k]
        if k == "f":
            return f"{v:.2f}"
        return f"{v}*" if k == "effect" and r.get("boundary") else str(v)

    shared = {k: key(rows[0], k) for k in _CELL_KEYS if rows and len({key(r, k) for r in rows}) == 1}
    columns = [k for k in _CELL_KEYS if k not in shared]
    title = "calibration by simulation\n! off target: cover < 0.90, false calls or false equiv > 0.05"
    if shared:
        title += "\n" + ", ".join(f"{k} {v}" for k, v in shared.items())
    t = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 0), show_edge=False)
    for k in columns:
        t.add_column(k, justify="right" if k in ("seeds", "f", "trials") else "left", no_wrap=True)
    for _, h, _ in _RATES:
        t.add_column(h, justify="right", no_wrap=True, min_width=5)

    def rate(v, bad) -> str:
        if v is None:
            return "—"
        shown = round(v, 2)  # judged as printed: 0.899 is 0.90, on target
        return f"[red]{shown:.2f}![/]" if bad is not None and bad(shown) else f"{shown:.2f}"

    for r in rows:
        t.add_row(*(key(r, k) for k in columns), *(rate(r.get(k), bad) for k, _, bad in _RATES))
    return t


def forms_table(forms: dict[str, dict[str, float]]) -> Table:
    """Rolling-origin backtest: mean absolute error of each form's forecast, per run; best marked."""
    names = list(next(iter(forms.values())))
    t = Table(
        title="which form extrapolates best (rolling-origin backtest, MAE on unseen later points)", header_style="bold"
    )
    t.add_column("run")
    for n in names:
        t.add_column(n, justify="right")
    t.add_column("best")
    for run, scores in forms.items():
        finite = {k: v for k, v in scores.items() if math.isfinite(v)}
        best = min(finite, key=lambda k: finite[k]) if finite else "—"
        t.add_row(cell(run), *[num(scores[n], 4) for n in names], best)
    return t


def print_notes(console: Console, results: Iterable[FitResult]) -> None:
    """Each fit's notes, under its run's name."""
    for r in results:
        for note in r.notes:
            console.print(f"  [dim]{esc(r.run)}:[/] {esc(note)}")


def print_defaults(console: Console, target_text: str, axis_text: str | None, axis_note: str | None) -> None:
    """The header lines of fit and extrapolate that say which target and which compute axis the command used, and
    why (choices.choose_target, choose_axis, wall_clock_note)."""
    console.print(f"target: {esc(target_text)}")
    for line in (axis_text, axis_note):
        if line:
            console.print(f"[yellow]axis[/]: {esc(line)}")


def extrapolation_table(ex: Extrapolation) -> Table:
    """The projected run: its fit, whether it is identified, R at the target, and the held-out check."""
    f = ex.fit
    t = Table(
        title=f"{esc(ex.subject)}: fitted on {f.window[0]:g}..{f.window[1]:g}, {ex.reach_word} to {f.target:g}",
        header_style="bold",
        show_header=False,
    )
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row(
        "fit",
        f"A {fmt_pm(f.A, f.A_ci)}   B {fmt_pm(f.B, f.B_ci, 2)}   C_mid {fmt_range(f.C_mid, f.C_mid_ci)}   "
        f"R0 {num(f.R0)}   ({f.n_points} points, {f.n_runs} run(s))",
    )
    t.add_row(
        "identifiable",
        f"{'yes' if f.identifiable else '[red]no[/]'} — status {f.status}, gain reached f = {f.gain_fraction:.2f}",
    )
    ci = f"  [{f.pred_ci[0]:.3f}, {f.pred_ci[1]:.3f}]" if f.pred_ci else ""
    t.add_row(f"R at {f.target:g}", f"[bold]{f.pred_at_target:.3f}[/]{ci}")
    if f.target_r is not None:
        c = f.compute_to_target
        cci = (
            f"  [{num(f.compute_to_target_ci[0])}, {num(f.compute_to_target_ci[1])}]" if f.compute_to_target_ci else ""
        )
        never = "never (above the ceiling A)" if f.identifiable else "unknown (A not identified)"
        t.add_row(f"compute to R = {f.target_r:g}", (num(c) + cci) if c is not None else never)
    if ex.heldout:
        last = ex.heldout[-1]
        t.add_row(
            "held-out check",
            f"{len(ex.heldout)} points past {f.window[1]:g}: MAE {ex.heldout_mae:.4f}; "
            f"at {last['x']:g} observed {last['y']:.3f}, predicted {last['pred']:.3f}",
        )
    return t


def print_fit(console: Console, report: FitReport, inputs: Inputs, *, window: bool, plot: Path | None) -> None:
    """The whole `ablate fit` report: how the fits were made, the table, the notes, the forms' backtest."""
    results, opts = report.results, report.opts
    console.print(
        f"fit window {opts.window_text()} of '{esc(inputs.x)}'; {r0_text(results, opts)}; method "
        f"{opts.method}; intervals: {esc(interval_text(results))}"
    )
    print_defaults(console, report.target_text, inputs.axis_text, inputs.axis_note)
    console.print(fit_table(results))
    if window:
        console.print(sensitivity_table(results))
    print_notes(console, results)
    if opts.target_r is not None:
        for r in results:
            console.print(
                f"  {esc(r.run)}: compute to reach {opts.target_r:g}: "
                f"{fmt_pm(r.compute_to_target, r.compute_to_target_ci)}"
            )
    if report.forms is not None:
        console.print(forms_table(report.forms))
    if plot is not None:
        console.print(f"figure: {esc(str(plot))}")


def print_extrapolation(
    console: Console, report: ExtrapolationReport, inputs: Inputs, *, window: bool, plot: Path | None
) -> None:
    """The whole `ablate extrapolate` report: its subject (and why), the target and axis, the table, the notes."""
    ex = report.projection
    picked = " (highest predicted pass rate at the target; its verdict: ablate rank)" if report.by_rank else ""
    console.print(f"subject: {esc(ex.subject)}{picked}; fit window {report.opts.window_text()} of '{esc(inputs.x)}'")
    print_defaults(console, report.target_text, inputs.axis_text, inputs.axis_note)
    console.print(extrapolation_table(ex))
    if window:
        console.print(sensitivity_table([ex.fit]))
    print_notes(console, [ex.fit])
    if report.by_rank and not ex.fit.identifiable:
        console.print(
            f"[yellow]note[/]: {esc(ex.subject)} leads on a predicted pass rate that rests on a ceiling its runs do "
            "not measure (A not identified): its lead may not hold; project an identified arm with --arm, or run "
            "longer"
        )
    if plot is not None:
        console.print(f"figure: {esc(str(plot))}")

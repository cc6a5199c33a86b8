"""Reports: rich tables, lines and JSON for fits, ranks and extrapolations (figures: ablate.figures).

Nothing here computes a fit; it only presents `FitResult`s (fit/analysis.py) and what `rank` derived from them.
Names come from users (run names, arm labels, columns) and from files (noise and calibration files' notes): tables
take them as `rich.text.Text` of `text.safe(name)` and printed lines pass them through `esc`, so that `[bold]` or
`[/]` in a name is shown as written, never read as markup, and an escape sequence or a bidi override is shown as
`\\x1b` or `\\u202e`, never obeyed by the terminal.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from rich.console import Console
from rich.markup import escape as _markup_escape
from rich.table import Table
from rich.text import Text

from ablate.text import safe

if TYPE_CHECKING:  # the fit stack imports scipy: keep `ablate sweep`/`status` start-up light
    from ablate.fit.analysis import FitResult


def esc(s: object) -> str:
    """Untrusted text for a printed line: control characters made visible (text.safe), then markup escaped."""
    return _markup_escape(safe(s))


def cell(s: object) -> Text:
    """Untrusted text for a table cell: a Text (never markup) with its control characters made visible."""
    return Text(safe(s))


def check_writable_output(path: Path | str, flag: str, *, folder: bool = False) -> Path:
    """Where a command will write (`--out`, `--plot`, `--save-noise`, `--save-calibration`; `folder`: a directory
    it creates or fills, `--root`), checked before any work: a folder where a file goes (or a file, or a device,
    where a folder goes), a path under a file, or a place that can't be written (a read-only file system, no
    permission) is one UserError line naming the flag. Writes still go through store's atomic writes: this only
    moves the refusal to before the minutes of fitting it would otherwise follow."""
    import os

    from ablate.errors import UserError

    p = Path(path)
    where = f"{flag} {safe(p)}"
    if folder and p.exists() and not p.is_dir():
        raise UserError(f"{where}: is a file, not a directory; choose another path")
    if not folder and p.is_dir():
        raise UserError(f"{where}: is a directory; give a file name, e.g. {flag} {safe(p / 'out.json')}")
    if not folder and p.exists() and not p.is_file():
        raise UserError(f"{where}: not a regular file (a device, a pipe, a socket); give a file name")
    parent = p if folder and p.exists() else p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{where}: {safe(parent)} is a file, not a directory; choose another path")
    try:
        read_only = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        raise UserError(f"{where}: {safe(parent)} is on a read-only file system; choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{where}: no permission to write in {safe(parent)}; choose another path")
    return p


def console(stderr: bool = False) -> Console:
    """A console that keeps tables whole when output goes to a file or a pipe (rich assumes 80 columns).

    Emoji codes stay text: a run named `:x:` is printed as `:x:`."""
    import shutil
    import sys

    stream = sys.stderr if stderr else sys.stdout
    # an explicit COLUMNS is the reader's pager width; else at least 150, so that a table piped to a file stays whole
    cols = os.environ.get("COLUMNS", "")
    width = (None if stream.isatty() else int(cols) if cols.isdigit() and int(cols) >= 40
             else max(shutil.get_terminal_size((150, 40)).columns, 150))
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


def _compact(x: float) -> str:
    """Three significant digits with a k/M/G suffix: 97.1k, 450k, 256M, 0.00312."""
    if not math.isfinite(x):
        return "—"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{suffix}"
    return f"{x:.3g}"


def fmt_range(v: float | None, ci: Sequence[float] | None) -> str:
    """`value [lo, hi]` in compact numbers: for C_mid, whose interval is skewed and can span decades, where a
    symmetric ± would mislead."""
    if v is None or not math.isfinite(v):
        return _fmt(v)
    if ci is None:
        return _compact(v)
    return f"{_compact(v)} [{_compact(ci[0])}, {_compact(ci[1])}]"


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
            cell(r.run),
            _fmt(r.R0),
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
    """Which rule produced the verdicts, and against what seed spread (measured where, or none)."""
    if ranking.rule == "paper":
        return ranking.margin_source
    end = ranking.end_spread
    read_at_end = end and any(a.verdict == "not_identified" for a in ranking.arms)
    at_end = ("" if not read_at_end else f"; not-identified arms: pass rates at {end['at']:g} (the end of the shared "
              f"window) against their seed spread (sd {end['sd_R']:.4f}, {end['dof']} dof)")
    tests = ("ceiling and efficiency t-tests and equivalence tests (TOST), false-discovery rate 5% (changes among the "
             "tests of change, equivalence among all)")
    if ranking.floor is None:
        return f"{tests}; seed spread: none measured (see the note below)" + at_end
    f = ranking.floor
    return (f"{tests}; seed spread: sd of one seed's A {f.sd_A:.4f}, of its log compute {f.sd_logc:.3f}, {f.dof} "
            f"dof, from {f.source}; intervals at {ranking.opts.ci:.0%}" + at_end + "; each arm's tests: --explain")


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
    for col in ("run", "fit until", "A", "B", "C_mid", f"R@{results[0].target:g}", "note"):
        t.add_column(col, justify="left" if col in ("run", "note") else "right")
    for r in results:
        for row in r.sensitivity:
            mark = "" if row["identifiable"] else "not identified"
            if row["cutoff"] == 1.0 and r.unstable:
                mark = "[red]unstable[/]"
            t.add_row(cell(r.run), f"{row['fit_until']:g} ({row['cutoff']:.0%})", _fmt(row["A"]), _fmt(row["B"], 2),
                      _fmt(row["C_mid"]), _fmt(row["pred_at_target"]), mark)
    return t


def calibration_table(rows: list[dict[str, Any]]) -> Table:
    """`ablate calibrate`: one row per cell: coverage, false-call rate, power, ceiling calls, not identified, how
    often `equivalent` is found (the right answer on identical arms) and claimed falsely (on any real effect; at
    the smallest effect that matters, effects marked *, it is the equivalence test's size)."""
    t = Table(title="calibration by simulation (targets: coverage >= 0.90, false calls <= 0.05, false equivalent "
              "<= 0.05)", header_style="bold")
    for col in ("shape", "noise", "seeds", "floor", "f", "effect", "trials", "cover A", "cover R@to", "false calls",
                "power", "ceiling calls", "not identified", "equivalent", "false equiv"):
        t.add_column(col, justify="left" if col in ("shape", "noise", "effect", "floor") else "right")

    def rate(v, bad=None) -> str:
        if v is None:
            return "—"
        text = f"{v:.2f}"
        return f"[red]{text}[/]" if bad is not None and bad(v) else text

    for r in rows:
        t.add_row(r["shape"], r["noise"], str(r["seeds"]), r.get("floor", "own"), f"{r['f']:.2f}",
                  r["effect"] + ("*" if r.get("boundary") else ""), str(r["trials"]),
                  rate(r["coverage_A"], lambda v: v < 0.90), rate(r["coverage_pred"], lambda v: v < 0.90),
                  rate(r["false_call_rate"], lambda v: v > 0.05), rate(r["power"]), rate(r["ceiling_calls"]),
                  rate(r["not_identified"]), rate(r.get("equivalent_rate")),
                  rate(r.get("false_equivalent_rate"), lambda v: v > 0.05))
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
        t.add_row(cell(run), *[_fmt(scores[n], 4) for n in names], best)
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


VERDICT_STYLE = {"ceiling_up": "bold green", "ceiling_down": "bold red", "efficiency_up": "green",
                 "efficiency_down": "red", "equivalent": "cyan", "inconclusive": "dim", "not_identified": "yellow",
                 "baseline": "bold"}


def verdict_cell(a) -> Text:
    """The verdict, and what a reader acts on: a change that may not matter says so ("(negligible)", "(unclear)";
    nothing when material), an inconclusive arm the seeds per arm that would decide it."""
    from ablate.fit.compare import CHANGED, VERDICT_TEXT
    from ablate.fit.verdicts import SEED_LADDER

    text = VERDICT_TEXT[a.verdict]
    if a.verdict in CHANGED and a.practical in ("negligible", "unclear"):
        text += f" ({a.practical})"
    elif a.verdict == "inconclusive" and a.decide:
        seeds = a.decide.get("seeds")
        text += f" · ~{seeds} seeds" if seeds is not None else f" · >{SEED_LADDER[-1]} seeds"
    return Text(text, style=VERDICT_STYLE.get(a.verdict, "white"))


def _short(x: float) -> str:
    """Two significant digits with a k/M/G suffix, never in e-notation: 2.5k, 450k, 16M, 0.16 (an interval's ends
    in the rank table, where the value itself keeps three: fmt_range)."""
    if not math.isfinite(x):
        return "—"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(x) >= 0.9995 * scale:  # 999.6 is 1k, not 1000
            v = x / scale
            return (f"{v:.0f}" if abs(v) >= 99.5 else f"{v:.2g}") + suffix
    return f"{x:.2g}"


def _stacked(v: float | None, ci: Sequence[float] | None, digits: int = 3, *, skewed: bool = False) -> str:
    """A value over its interval, on two lines (± half-width; `skewed`: the bounds, for C_mid): the rank table's
    numbers, kept narrow so that a row fits two lines at 120 columns."""
    if v is None or not math.isfinite(v) or ci is None:
        return _compact(v) if skewed and v is not None else _fmt(v, digits)
    if skewed:
        return f"{_compact(v)}\n[{_short(ci[0])}, {_short(ci[1])}]"
    return f"{_fmt(v, digits)}\n±{_fmt((ci[1] - ci[0]) / 2.0, digits)}"


def rank_table(ranking) -> Table:
    """One row per arm, best first (the order is the rank): R0, A, B, C_mid and R at the target (each over its
    interval), the verdict and the effect behind it with its interval. What applies to every row is said once
    around the table (the title: seeds an arm when they are the same; rank_header, rank_notes), the full reasoning
    per arm by `--explain` (explain_lines): a row takes at most two lines at 120 columns."""
    seeds = {a.seeds for a in ranking.arms}
    n = seeds.pop() if len(seeds) == 1 else None
    each = " (n: seeds of the arm)" if n is None else f" ({n} seed{'s' if n > 1 else ''} an arm)"
    t = Table(title=f"arms ranked by predicted pass rate at {esc(ranking.x)} = {ranking.target:g}{each}",
              header_style="bold")
    # widths: the numbers and the verdict are stacked two lines high; a long arm name folds onto a second line
    # so that the why cell keeps the 27 characters its longer half needs
    widest = 20 if n is not None else 16
    columns = [("arm", {"overflow": "fold", "max_width": widest})]
    if n is None:
        columns.append(("n", {"justify": "right", "no_wrap": True}))
    columns += [("R0", {"justify": "right", "no_wrap": True}), ("A", {"justify": "right", "no_wrap": True}),
                ("B", {"justify": "right", "no_wrap": True}), ("C_mid", {"justify": "right", "no_wrap": True}),
                (f"R@{_compact(ranking.target)}", {"justify": "right", "no_wrap": True}),
                ("verdict", {"width": 12}), ("why", {})]
    for col, kw in columns:
        t.add_column(col, **kw)
    for a in ranking.arms:
        f = a.fit
        source, colon, label = a.arm.partition(":")  # several inputs: `a/sweeps/loss:loss=grpo`, folded at the colon
        arm = Text(f"{safe(source)}:\n{safe(label)}") if colon and len(a.arm) > widest else cell(a.arm)
        if a.partial:
            arm.append("  partial", style="yellow")
        if a.truncation_warning:
            arm.append("  truncation >10%", style="red")
        for s in a.stopped:
            arm.append(f"  {s}", style="magenta" if s == "unstable" else "blue")
        row = [arm] + ([] if n is not None else [str(a.seeds)])
        t.add_row(*row, _fmt(f.R0), _stacked(f.A, f.A_ci), _stacked(f.B, f.B_ci, 2),
                  _stacked(f.C_mid, f.C_mid_ci, skewed=True), _stacked(f.pred_at_target, f.pred_ci),
                  verdict_cell(a), Text(";\n".join(safe(part) for part in (a.effect or "—").split("; "))))
    return t


def rank_header(ranking) -> list[str]:
    """The lines above the table (markup, names escaped): the target and how it was chosen, the rule and where the
    seed spread comes from, the smallest effect that matters, how efficiency was compared, the axis warning."""
    lines = []
    if ranking.target_source:
        lines.append(f"target: {esc(ranking.target_source)}")
    if ranking.baseline is not None:  # without one there are no verdicts: the line above says to give --baseline
        lines.append(f"verdicts: {esc(rule_text(ranking))}")
        if ranking.rule == "test":  # the paper's rule has its own margins, named in the line above
            lines.append(f"smallest effect that matters: {ranking.min_effect.describe()} (--min-effect, "
                         "--min-effect-compute)")
        lines.append(f"efficiency compared at: {esc(ranking.shared_mode)}")
    if ranking.axis_note:
        lines.append(f"[yellow]axis[/]: {esc(ranking.axis_note)}")
    return lines


def rank_notes(ranking, inputs) -> list[str]:
    """The notes under the table, each once (markup, names escaped): the ranking's own (needs seeds: with the
    command that adds them), and how arms whose A is not identified are read."""
    lines = []
    for note in ranking.notes:
        head, _, rest = note.partition(": ")
        if head == "needs seeds":
            lines.append(f"  [yellow]needs seeds[/]: {esc(rest)}; add seeds ({esc(seeds_hint(inputs))}), or measure "
                         "the spread once and pass --noise FILE")
        else:
            lines.append(f"  [yellow]note[/]: {esc(note)}")
    if any(a.verdict == "not_identified" for a in ranking.arms):
        where = (f"; with seeds, they are also tested on the pass rate at {ranking.end_spread['at']:g}, the end of "
                 "the window every arm covers (no extrapolation)" if ranking.end_spread else "")
        lines.append("  [yellow]not identified[/]: the window has not passed C_mid, so A is not measured and there is "
                     "no ceiling or efficiency verdict; those arms are ranked on their predicted pass rate at "
                     f"{ranking.target:g}{where}.")
    if ranking.floor is not None and ranking.rule == "test" and any(a.seeds > 1 for a in ranking.arms):
        lines.append("  [yellow]ΔA[/]: the difference of the arms' seed means of A (what the seed spread describes), so "
                     "it can differ from the A column, where each arm's seeds are fitted together; compute: the arm's "
                     "compute to the baseline's pass rate at the target, as a ratio to the baseline's")
    decided = [a.decide for a in ranking.arms if a.verdict == "inconclusive" and a.decide]
    if decided:
        lines.append("  [yellow]inconclusive[/]: neither a change nor equivalence is shown; ~N seeds: the seeds per "
                     "arm (this arm and the baseline, at the compute they have now) that would decide it with "
                     f"{decided[0]['power']:.0%} power if the measured difference is the true one (--explain: each "
                     "arm's reasoning)")
    return lines


def explain_lines(ranking) -> list[str]:
    """`rank --explain`: each arm's full reasoning (every test, its p-value and interval, what would decide it)."""
    from ablate.fit.compare import VERDICT_TEXT

    lines = ["[bold]why, in full[/] (--explain):"]
    for a in ranking.arms:
        if a.detail:
            lines.append(f"  [bold]{esc(a.arm)}[/] — {esc(VERDICT_TEXT[a.verdict])}: {esc(a.detail)}")
    return lines


def extrapolation_table(ex) -> Table:
    f = ex.fit
    t = Table(title=f"{esc(ex.subject)}: fitted on {f.window[0]:g}..{f.window[1]:g}, {ex.reach_word} to {f.target:g}",
              header_style="bold", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("fit", f"A {fmt_pm(f.A, f.A_ci)}   B {fmt_pm(f.B, f.B_ci, 2)}   C_mid {fmt_range(f.C_mid, f.C_mid_ci)}   "
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

"""What `ablate rank` prints: the header (target, rule, seed spread), the table of arms with their verdicts, the notes
under it and `--explain`'s reasoning. It presents a `Ranking` (fit/compare.py); verdicts: docs/verdicts.md."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ablate.render.fit import sensitivity_table
from ablate.render.numbers import compact, num, stacked
from ablate.render.terminal import cell, esc
from ablate.states import RunState
from ablate.text import flag, safe

if TYPE_CHECKING:  # the fit stack imports scipy: keep `ablate sweep`/`status` start-up light
    from ablate.fit.arms import ArmResult, Ranking
    from ablate.fit.notes import Note
    from ablate.fit.settings import Analysis, Elsewhere

VERDICT_STYLE = {
    "ceiling_up": "bold green",
    "ceiling_down": "bold red",
    "efficiency_up": "green",
    "efficiency_down": "red",
    "equivalent": "cyan",
    "inconclusive": "dim",
    "not_identified": "yellow",
    "baseline": "bold",
}


def rule_text(ranking: Ranking) -> str:
    """Which rule produced the verdicts, and against what seed spread (measured where, or none)."""
    if ranking.rule == "paper":
        return ranking.margin_source
    end = ranking.end_spread
    at_end = ""
    if end and any(a.verdict == "not_identified" for a in ranking.arms):
        at_end = (
            f"; not-identified arms: pass rates at {end.at:g} (the end of the shared window) against their "
            f"seed spread (sd {end.sd_R:.4f}, {end.dof} dof)"
        )
    tests = (
        "ceiling and efficiency t-tests and equivalence tests (TOST), false-discovery rate "
        f"{ranking.opts.level:.3g} (changes among the tests of change, equivalence among all)"
    )
    if ranking.floor is None:
        noted = any(n.kind == "needs_seeds" for n in ranking.notes)  # else no arm is compared: none is needed
        why = "see the note below" if noted else "no arm's A is measured to compare"
        return f"{tests}; seed spread of A and of log compute: none measured ({why})" + at_end
    f = ranking.floor
    return (
        f"{tests}; seed spread: sd of one seed's A {f.sd_A:.4f}, of its log compute {f.sd_logc:.3f}, {f.dof} "
        f"dof, from {f.source}; intervals at {ranking.opts.ci:.0%}" + at_end + "; each arm's tests: --explain"
    )


def sweep_command(inputs: Sequence[Path], *extra: str) -> str:
    """`ablate sweep` of the ranked sweep's file, with the overrides it was launched with, `extra` and its --root,
    so that pasted it adds to this sweep (or the general form for files)."""
    from ablate.compose.resources import find_recipe
    from ablate.errors import UserError
    from ablate.storage.ledger import Ledger
    from ablate.text import safe

    for given in inputs:
        p = Path(given)
        if (p / "runs").is_dir():
            recipe = Path("recipes") / f"{p.name}.yaml"
            try:
                find_recipe(recipe)  # in the user's folder or among the packaged recipes: `ablate sweep` finds it
            except UserError:
                recipe = Path(f"{p.name}.yaml")
            try:
                overrides = Ledger(p).launch_overrides() if (p / "ledger.jsonl").is_file() else []
            except OSError:  # a linked or unreadable ledger: the hint goes without its overrides
                overrides = []
            root = [] if os.path.abspath(p.parent) == os.path.abspath("sweeps") else ["--root", str(p.parent)]
            return safe(shlex.join(["ablate", "sweep", str(recipe), *overrides, *extra, *root]))
    return shlex.join(["ablate", "sweep", "SWEEP.yaml", *extra])


def seeds_hint(inputs: Sequence[Path]) -> str:
    """The command that adds seeds to the ranked sweep."""
    return sweep_command(inputs, "seed=0,1,2")


def verdict_cell(a: ArmResult) -> Text:
    """The verdict, and what a reader acts on: a change that may not matter says so ("(negligible)", "(unclear)";
    nothing when material), an inconclusive arm the seeds per arm that would decide it."""
    from ablate.fit.arms import CHANGED, VERDICT_TEXT
    from ablate.fit.decide import SEED_LADDER

    text = VERDICT_TEXT[a.verdict]
    if a.verdict in CHANGED and a.practical in ("negligible", "unclear"):
        text += f" ({a.practical})"
    elif a.verdict == "inconclusive" and a.decide:
        seeds = a.decide.seeds
        text += f" · ~{seeds} seeds" if seeds is not None else f" · >{SEED_LADDER[-1]} seeds"
    return Text(text, style=VERDICT_STYLE.get(a.verdict or "", "white"))


NARROW = 110
"""Below this many columns the table leaves out R0, B and C_mid (in --explain and --json), so that the arm and
the why keep their width."""


def rank_table(ranking: Ranking, *, fold: bool = True, narrow: bool = False) -> Table:
    """One row per arm, best first (the order is the rank): R0, A, B, C_mid and R at the target (each over its
    interval), the verdict and the effect behind it with its interval. What applies to every row is said once
    around the table (the title: seeds an arm when they are the same; rank_header, rank_notes), the full reasoning
    per arm by `--explain` (explain_lines): a row takes at most two lines at 120 columns. `fold`: a long arm name
    of several inputs on two lines at its colon (a terminal's width; Markdown keeps it whole). `narrow`: the
    table for a terminal narrower than NARROW, without R0, B and C_mid."""
    seeds = {a.seeds for a in ranking.arms}
    n = seeds.pop() if len(seeds) == 1 else None
    each = " (n: seeds of the arm)" if n is None else f" ({n} seed{'s' if n > 1 else ''} an arm)"
    t = Table(
        title=f"arms ranked by predicted pass rate at {esc(ranking.x)} = {ranking.target:g}{each}", header_style="bold"
    )
    # widths: the numbers and the verdict are stacked two lines high; a long arm name folds onto a second line
    # so that the why cell keeps the 27 characters its longer half needs
    widest = (20 if n is not None else 16) - (4 if narrow else 0)
    columns: list[tuple[str, dict[str, Any]]] = [("arm", {"overflow": "fold", "max_width": widest})]
    if n is None:
        columns.append(("n", {"justify": "right", "no_wrap": True}))
    wide = [] if narrow else ["R0", "B", "C_mid"]
    columns += [
        (c, {"justify": "right", "no_wrap": True})
        for c in ("R0", "A", "B", "C_mid", f"R@{compact(ranking.target)}")
        if c in ("A", f"R@{compact(ranking.target)}") or c in wide
    ]
    columns += [("verdict", {"width": 12}), ("why", {"min_width": 20} if narrow else {})]
    for col, kw in columns:
        t.add_column(col, **kw)
    for a in ranking.arms:
        f = a.fit
        source, colon, label = a.arm.partition(":")  # several inputs: `a/sweeps/loss:loss=grpo`, folded at the colon
        arm = Text(f"{safe(source)}:\n{safe(label)}") if fold and colon and len(a.arm) > widest else cell(a.arm)
        if a.partial:
            arm.append("  partial", style="yellow")
        if a.truncation_warning:
            arm.append("  truncation >10%", style="red")
        for s in a.stopped:
            arm.append(f"  {s}", style="magenta" if s == RunState.UNSTABLE else "blue")
        row = [arm] + ([] if n is not None else [str(a.seeds)])
        numbers = {
            "R0": num(f.R0),
            "A": stacked(f.A, f.A_ci, bound=1.0),
            "B": stacked(f.B, f.B_ci, 2),
            "C_mid": stacked(f.C_mid, f.C_mid_ci, skewed=True),
        }
        shown = [numbers[c] for c in ("R0", "A", "B", "C_mid") if c == "A" or c in wide]
        why = Text(";\n".join(safe(part) for part in (a.effect or "—").split("; ")))
        t.add_row(*row, *shown, stacked(f.pred_at_target, f.pred_ci, bound=1.0), verdict_cell(a), why)
    return t


def rank_header(ranking: Ranking) -> list[str]:
    """The lines above the table (markup, names escaped): the target and how it was chosen, the rule and where the
    seed spread comes from, the smallest effect that matters, how efficiency was compared, the axis warning."""
    lines = []
    if ranking.target_source:
        lines.append(f"target: {esc(ranking.target_source)}")
    if ranking.baseline is not None:  # without one there are no verdicts: the line above says to give --baseline
        lines.append(f"verdicts: {esc(rule_text(ranking))}")
        if ranking.rule == "test":  # the paper's rule has its own margins, named in the line above
            lines.append(
                f"smallest effect that matters: {ranking.min_effect.describe()} (--min-effect, --min-effect-compute)"
            )
        lines.append(f"efficiency compared at: {esc(ranking.shared_mode)}")
    if ranking.axis_note:
        lines.append(f"[yellow]axis[/]: {esc(ranking.axis_note)}")
    return lines


def rank_notes(ranking: Ranking, inputs: Sequence[Path]) -> list[str]:
    """The notes under the table, each once (markup, names escaped): the ranking's own (needs seeds: with the
    command that adds them), and how arms whose A is not identified are read."""
    lines = []
    for note in ranking.notes:
        if note.kind == "needs_seeds":
            lines.append(
                f"  [yellow]needs seeds[/]: {esc(note.body)}; add seeds ({esc(seeds_hint(inputs))}), or measure "
                "the spread once and pass --noise FILE"
            )
        else:
            lines.append(f"  [yellow]note[/]: {esc(note)}")
    if any(a.verdict == "not_identified" for a in ranking.arms):
        where = (
            f"; with seeds, they are also tested on the pass rate at {ranking.end_spread.at:g}, the end of "
            "the window every arm covers (no extrapolation)"
            if ranking.end_spread
            else ""
        )
        lines.append(
            "  [yellow]not identified[/]: A is not measured (the window may not have passed C_mid, or the fit "
            "cannot pin A down: --explain says which), so there is "
            "no ceiling or efficiency verdict; those arms are ranked on their predicted pass rate at "
            f"{ranking.target:g}{where}."
        )
    if ranking.floor is not None and ranking.rule == "test" and any(a.seeds > 1 for a in ranking.arms):
        lines.append(
            "  [yellow]ΔA[/]: the difference of the arms' seed means of A (what the seed spread describes), "
            "so it can differ from the A column, where each arm's seeds are fitted together; compute: the "
            "arm's compute to three quarters of its gain under the shared A, as a ratio to the baseline's"
        )
    decided = [a.decide for a in ranking.arms if a.verdict == "inconclusive" and a.decide]
    if decided:
        lines.append(
            "  [yellow]inconclusive[/]: neither a change nor equivalence is shown; ~N seeds: the seeds per "
            "arm (this arm and the baseline, at the compute they have now) that would decide it with "
            f"{decided[0].power:.0%} power if the measured difference is the true one (--explain: each "
            "arm's reasoning)"
        )
    open_arms = [a for a in ranking.arms if a.verdict == "inconclusive" or a.practical == "unclear"]
    decided_before = any(n.kind == "decided" for n in ranking.notes)  # its looks were its decisions
    if open_arms and ranking.floor is not None and not decided_before:
        wanted = [d.seeds for d in decided if d.seeds]
        lines.append(
            "  [yellow]next[/]: to add seeds where they decide something, with the error rate held over every look "
            f"(docs/verdicts.md, Deciding by waves): {esc(decide_hint(inputs, max(wanted, default=12)))}"
        )
    return lines


def decide_hint(inputs: Sequence[Path], seeds: int) -> str:
    """The `--decide` command for the ranked sweep: waves of 3 up to `seeds` an arm (rounded up to whole waves)."""
    waves = -(-max(seeds, 6) // 3) * 3
    return sweep_command(inputs, "--decide", "--max-seeds", str(waves))


def explain_lines(ranking: Ranking) -> list[str]:
    """`rank --explain`: each arm's full reasoning (every test, its p-value and interval, what would decide it)."""
    from ablate.fit.arms import VERDICT_TEXT

    lines = ["[bold]why, in full[/] (--explain):"]
    for a in ranking.arms:
        if a.detail:
            lines.append(f"  [bold]{esc(a.arm)}[/] — {esc(VERDICT_TEXT[a.verdict])}: {esc(a.detail)}")
    return lines


def far_target_note(ranking: Ranking) -> Note | None:
    """The first arm's note that --to is far past the compute fitted: said once under the table, not per arm."""
    far = [n for a in ranking.arms for n in a.fit.notes if n.kind == "far_target"]
    return far[0] if far else None


def rank_lead(ranking: Ranking) -> list[str]:
    """The lines above the table (markup): the fit window, the axis and the baseline, then rank_header."""
    base = esc(ranking.baseline) if ranking.baseline is not None else "— (give --baseline)"
    if any(n.kind == "baseline_waiting" for n in ranking.notes):  # the sweep's baseline, not evaluated yet
        base = "— (the sweep's baseline has no evaluations yet: see the note below)"
    return [f"fit window {ranking.opts.window_text()} of '{esc(ranking.x)}'; baseline: {base}", *rank_header(ranking)]


def rank_tail(ranking: Ranking, inputs: Sequence[Path], elsewhere: Elsewhere | None) -> list[str]:
    """The lines under the table (markup): rank_notes, the far-target note, the arms not fitted and, for a sweep
    whose --prune monitor settled arms with another analysis (`elsewhere`), what differs and the command that reads
    the verdicts as they were settled."""
    lines = rank_notes(ranking, inputs)
    far = far_target_note(ranking)
    if far:
        lines.append(f"  [yellow]note[/]: {esc(far)}")
    for s in ranking.not_fitted:
        lines.append(f"  [red]not fitted[/] {esc(s.label)}: {esc(s.reason)}")
    if elsewhere is not None:
        lines.append(f"  [yellow]decided with other settings[/]: {esc(elsewhere_text(elsewhere))}")
    return lines


def elsewhere_text(e: Elsewhere) -> str:
    """What a sweep's recorded decisions were made with, against this ranking, and the command that reads them."""
    differs = ", ".join(f"{flag(d.setting)} {d.recorded} (here: {d.here})" for d in e.differences)
    return (
        f"{e.sweep}: the stopped arms were settled by its {e.by} with {differs}; "
        f"to read them so: `{rank_command(e.sweep, e.recorded)}`"
    )


def rank_command(sweep: Path, analysis: Analysis) -> str:
    """The `ablate rank` command line that ranks `sweep` with `analysis`, to paste."""
    return shlex.join(["ablate", "rank", str(sweep), *(part for s, v in analysis.settings() for part in (flag(s), v))])


def print_rank(
    console: Console,
    ranking: Ranking,
    inputs: Sequence[Path],
    *,
    window: bool,
    explain: bool,
    elsewhere: Elsewhere | None,
) -> None:
    """The whole `ablate rank` report. `elsewhere`: a sweep whose recorded decisions used another analysis
    (ablate.analysis.verbs.decided_elsewhere)."""
    for line in rank_lead(ranking):
        console.print(line)
    console.print(rank_table(ranking, narrow=console.width < NARROW))
    if window:
        console.print(sensitivity_table([a.fit for a in ranking.arms]))
    for line in rank_tail(ranking, inputs, elsewhere):
        console.print(line)
    if explain:
        for line in explain_lines(ranking):
            console.print(line)

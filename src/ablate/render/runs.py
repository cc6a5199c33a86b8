"""What `ablate sweep --dry-run`, `show --trainers`, `train` and `init` print: the runs a sweep expands to, the
trainers' support matrix, a run's end, the files a project was given. (Run directories: docs/run-directory.md;
trainers: docs/trainers.md.)"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ablate.render.terminal import esc
from ablate.text import counted, safe

if TYPE_CHECKING:
    from ablate.compose.sweep import Sweep
    from ablate.states import RunSummary


def run_cells(sweep: Sweep) -> list[tuple[str, str, str, str]]:
    """One row per run: label (`*`: the baseline's), run id, arm id, overrides that differ from the base recipe."""
    return [
        (
            r.label + (" *" if r.baseline else ""),
            r.run_id,
            r.arm_id,
            " ".join(sweep.diffs.get(r.run_id, [])) or "(base)",
        )
        for r in sweep.runs
    ]


def runs_table(
    sweep: Sweep, states: dict[str, str] | None = None, where: Path | None = None, due: int | None = None
) -> Table:
    """`ablate sweep --dry-run`'s table (title: sweep, arms x seeds; caption: baseline, constants, notes; with
    `states`, each run's state in the sweep folder `where`, and how many runs a launch would submit, `due`). Labels
    and overrides are shown literally: `[x]` in a value is text, not rich markup, and control characters are
    escaped (ablate.text.safe)."""
    caption = [f"* baseline: {safe(sweep.baseline or 'none')}"]
    if states is not None and where is not None and due is not None:
        said = ", ".join(f"{n} {state}" for state, n in Counter(states.values()).items())
        caption.append(f"destination: {safe(where)} ({said}); `ablate sweep` would submit {counted(due, 'run')}")
    if sweep.constants:
        caption.append("every run: " + " ".join(map(safe, sweep.constants)))
    caption += [f"note: {safe(n)}" for n in sweep.notes]
    table = Table(
        title=Text(
            f"sweep {sweep.name}: {counted(len(sweep.arms), 'arm')} x {counted(len(sweep.seeds), 'seed')} = "
            f"{counted(len(sweep.runs), 'run')} (base recipe: {sweep.base})"
        ),
        caption=Text("\n".join(caption)),
        caption_justify="left",
    )
    table.add_column("label", no_wrap=True)
    table.add_column("run id", no_wrap=True)
    table.add_column("arm id", no_wrap=True)
    table.add_column("overrides vs base", overflow="fold")
    if states is not None:
        table.add_column("now", no_wrap=True)
    for spec, row in zip(sweep.runs, run_cells(sweep)):
        now = [states.get(spec.run_id, "new")] if states is not None else []
        table.add_row(*(Text(safe(c)) for c in [*row, *now]))
    return table


def print_trainers(console: Console) -> None:
    """Which options each trainer supports, and the base recipe under TRL."""
    from ablate.config.support import PRESET_HINT, SUPPORT, TRL_VERSION

    table = Table("option", "trainer=ablate", f"trainer=trl (TRL {TRL_VERSION})", show_lines=False)
    for row in SUPPORT:
        table.add_row(*(esc(c) for c in row))
    console.print(table)
    console.print(f"The base recipe under TRL: ablate train recipes/base.yaml {esc(PRESET_HINT)}", soft_wrap=True)


def run_end(summary: RunSummary) -> str:
    """`ablate train`'s last line: how the run ended, where, and its last pass rate."""

    def rate(v: Any) -> str:  # a pass rate to 4 decimals (a float32 read back prints 17 digits otherwise)
        return f"{v:.4f}" if isinstance(v, float) else str(v)

    resumed = f" (resumed from step {summary.resumed_from})" if summary.resumed_from is not None else ""
    at = summary.val_step
    evaluated = f" (step {at}'s evaluation)" if at is not None and at != summary.step else ""
    return (
        f"{summary.status}: step {summary.step}{resumed}, R0 {rate(summary.r0)}, "
        f"val_pass_rate {rate(summary.val_pass_rate)}{evaluated}" + (f" ({summary.reason})" if summary.reason else "")
    )


def written(folder: Path, files: Sequence[Path]) -> list[str]:
    """`ablate init`'s lines: what it wrote, and how the copy is used (shown as text: text.safe)."""
    recipes = [f for f in files if f.suffix == ".yaml" and "recipes" in f.relative_to(folder).parts[:1]]
    profiles = [f for f in files if "slurm" in f.relative_to(folder).parts[:1]]
    where = f" and an example SLURM profile, {safe(profiles[0])}" if profiles else ""
    return [
        f"wrote {len(recipes)} recipes and sweep files to {safe(folder / 'recipes')}/{where}",
        f"edit them there: run from {safe(folder)}, `ablate sweep recipes/NAME.yaml` reads your copy (your folder "
        "first, then ablate's packaged recipes); `--profile ./slurm/example.yaml` submits with that profile",
    ]


def print_keys(under: str | None) -> None:
    """`ablate show --keys [SECTION]`: each key on one line (its type, default and choices or bounds), its meaning
    indented under it; keys not part of a run's id say so."""
    import shutil
    import textwrap

    from ablate.config.keys import keys

    width = max(60, min(shutil.get_terminal_size((100, 24)).columns, 120))
    for k in keys(under):
        allowed = (
            f"  one of: {', '.join(map(str, k.choices))}" if k.choices else (f"  ({k.bounds})" if k.bounds else "")
        )
        default = "null" if k.default is None else repr(k.default)
        print(f"{k.name}: {k.type} = {default}{allowed}")
        note = "" if k.in_id else " (not part of the run id)"
        for line in textwrap.wrap(f"{k.doc}{note}", width - 4):
            print(f"    {line}")

"""What `ablate show --trainers`, `train` and `init` print: the trainers' support matrix, a run's end, the files a
project was given. (Run directories: docs/run-directory.md; trainers: docs/trainers.md.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ablate.render.terminal import esc
from ablate.text import safe


def print_trainers(console: Console) -> None:
    """Which options each trainer supports, and the base recipe under TRL."""
    from ablate.trainers import PRESET_HINT, SUPPORT, TRL_VERSION

    table = Table("option", "trainer=ablate", f"trainer=trl (TRL {TRL_VERSION})", show_lines=False)
    for row in SUPPORT:
        table.add_row(*(esc(c) for c in row))
    console.print(table)
    console.print(f"The base recipe under TRL: ablate train recipes/base.yaml {esc(PRESET_HINT)}", soft_wrap=True)


def run_end(summary: dict[str, Any]) -> str:
    """`ablate train`'s last line: how the run ended, where, and its last pass rate."""
    return (
        f"{summary['status']}: step {summary['step']}, R0 {summary['r0']}, val_pass_rate {summary['val_pass_rate']}"
        + (f" ({summary['reason']})" if summary.get("reason") else "")
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

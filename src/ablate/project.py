"""A project of the user's own: `ablate init DIR` copies the packaged recipes and an example SLURM profile into DIR.

The copy is the user's to edit: recipe paths resolve in the user's folder first (ablate.resources.find_recipe), and
the profile is chosen by path (`--profile ./slurm/example.yaml`), never by name (docs/security.md).
"""

from __future__ import annotations

from pathlib import Path

from ablate.errors import UserError
from ablate.resources import PROFILES_DIR, RECIPES_DIR

EXAMPLE_PROFILE = "example-cluster"
"""The packaged profile copied as slurm/example.yaml: a commented profile for a real GPU cluster."""


def _planned(folder: Path) -> list[tuple[Path, Path]]:
    """(packaged source, destination) of every file init writes, in a stable order."""
    recipes = sorted(p for p in RECIPES_DIR.rglob("*") if p.is_file() and p.suffix in (".yaml", ".md"))
    pairs = [(p, folder / "recipes" / p.relative_to(RECIPES_DIR)) for p in recipes]
    pairs.append((PROFILES_DIR / f"{EXAMPLE_PROFILE}.yaml", folder / "slurm" / "example.yaml"))
    return pairs


def init_project(folder: Path | str) -> list[Path]:
    """Write an editable copy of the recipes (FOLDER/recipes/...) and an example profile (FOLDER/slurm/example.yaml);
    returns the files written. Refuses, writing nothing, when any of them exists already."""
    folder = Path(folder)
    pairs = _planned(folder)
    taken = next((dst for _, dst in pairs if dst.exists()), None)
    if taken is not None:
        raise UserError(
            f"{taken}: already exists; ablate init writes only new files: move it away, or give "
            "another folder (ablate init DIR)"
        )
    for src, dst in pairs:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    return [dst for _, dst in pairs]

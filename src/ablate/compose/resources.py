"""The data ablate ships inside its package: the recipes (ablate/recipes/) and the SLURM profiles (ablate/profiles/).

They are read through importlib.resources, so a plain `pip install` finds them wherever the package lands. A recipe
path is looked up in the user's folder first, then among the packaged recipes; a profile NAME is only ever the
packaged one (why: docs/security.md).
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

from ablate.errors import ErrorKind, UserError

PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""What `--profile NAME` may be: a plain file name of ablate's profiles, without its .yaml."""
YOUR_FOLDER = "your folder"
PACKAGED = "ablate's packaged recipes"


def _package_dir(name: str) -> Path:
    """A data folder of the installed package as a file-system path (Hydra composes from a real folder)."""
    found = files("ablate").joinpath(name)
    if not isinstance(found, Path):
        raise UserError(
            f"ablate's {name} are inside an archive; install ablate as files (`pip install ablate`)",
            kind=ErrorKind.ENVIRONMENT,
        )
    return found


RECIPES_DIR = _package_dir("recipes")
"""The packaged recipes and sweep files; `ablate init` copies them into a project to edit."""
PROFILES_DIR = _package_dir("profiles")
"""The packaged SLURM profiles: the one place `--profile NAME` looks."""


def find_recipe(path: Path | str) -> tuple[Path, str]:
    """A recipe or sweep file and where it was found: the path as given when it exists (PACKAGED when that is a
    packaged file, else YOUR_FOLDER), else, for a relative path, PACKAGED (`recipes/loss.yaml` or `loss.yaml` is the
    packaged recipes/loss.yaml). UserError when it is in neither."""
    given = Path(path)
    if given.is_file():
        return given, PACKAGED if given.resolve().is_relative_to(RECIPES_DIR.resolve()) else YOUR_FOLDER
    if given.is_dir():
        from ablate.storage.rundir import holds_sweep

        raise UserError(
            f"{given}: a sweep directory, not a recipe; `ablate status {given}` lists its runs, and a sweep is "
            "launched from a recipe or sweep file (e.g. recipes/loss.yaml)"
            if holds_sweep(given)
            else f"{given}: a directory, not a recipe; give a recipe or sweep file (e.g. recipes/loss.yaml)",
            kind=ErrorKind.FILE,
        )
    if given.is_absolute():
        raise UserError(f"{given}: no such file; check the path", kind=ErrorKind.FILE)
    inside = Path(*given.parts[1:]) if given.parts[:1] == ("recipes",) else given
    packaged = RECIPES_DIR / inside
    if packaged.resolve().is_relative_to(RECIPES_DIR.resolve()) and packaged.is_file():
        return packaged, PACKAGED
    raise UserError(
        f"{given}: no such file (in this folder or among ablate's packaged recipes); check the path, "
        "or run `ablate init` for a copy of the recipes to edit",
        kind=ErrorKind.FILE,
    )


def profile_names() -> list[str]:
    """The names `--profile NAME` accepts."""
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def profile_path(name: str) -> Path:
    """The packaged profile NAME (it may not exist: the caller says so with the names it accepts). A NAME is a plain
    name (letters, digits, `_`, `-`, inner dots; no `..`, no separator): anything else is refused in one line, so that
    a name never reaches outside ablate's profiles; a file of one's own goes by path (`--profile ./slurm/x.yaml`)."""
    if not PROFILE_NAME.fullmatch(name) or ".." in name:
        raise UserError(
            f"--profile {name!r}: not a profile name (letters, digits, _, - and inner dots); name one of ablate's "
            f"profiles ({', '.join(profile_names()) or 'none'}), or give a file of your own by path: "
            "--profile ./slurm/mine.yaml",
            kind=ErrorKind.SETTING,
        )
    return PROFILES_DIR / f"{name}.yaml"

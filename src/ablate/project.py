"""A project of the user's own: `ablate init DIR` copies the packaged recipes and an example SLURM profile into DIR.

The copy is the user's to edit: recipe paths resolve in the user's folder first (ablate.resources.find_recipe), and
the profile is chosen by path (`--profile ./slurm/example.yaml`), never by name (docs/security.md). The git commit
a project's recipes are at is what `ablate sweep` records with each launch (docs/run-directory.md, "ledger.jsonl").
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ablate import store
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


def _obstacle(folder: Path, pairs: list[tuple[Path, Path]]) -> str | None:
    """Why init cannot write every file, or None: a destination that exists (a dangling link included), or a folder
    on the way that is a link or not a folder (init would write through it, or stop half-way)."""
    if os.path.lexists(folder) and not folder.is_dir():
        return f"{folder}: not a folder; give a folder (ablate init DIR)"
    folders = {dst.parent.relative_to(folder) for _, dst in pairs}
    for part in sorted({p for f in folders for p in (f, *f.parents)} - {Path(".")}):
        path = folder / part
        if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
            return f"{path}: a link or a file where ablate init makes a folder: move it away, or give another folder"
    taken = next((dst for _, dst in pairs if os.path.lexists(dst)), None)
    if taken is not None:
        return f"{taken}: already exists; ablate init writes only new files: move it away, or give another folder"
    return None


def init_project(folder: Path | str) -> list[Path]:
    """Write an editable copy of the recipes (FOLDER/recipes/...) and an example profile (FOLDER/slurm/example.yaml);
    returns the files written. Refuses, writing nothing, when any of them exists already (a dangling link too) or a
    folder on the way is a link or a file; each file is created new and never through a link (O_EXCL, O_NOFOLLOW)."""
    folder = Path(folder)
    pairs = _planned(folder)
    why = _obstacle(folder, pairs)
    if why is not None:
        raise UserError(why)
    for src, dst in pairs:
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd = store.open_fd(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(src.read_bytes())
    return [dst for _, dst in pairs]


def git_commit(where: Path) -> str | None:
    """The commit checked out where `where` (a file or a folder) is, with `+ uncommitted changes` when the checkout's
    tracked files differ from it or the file `where` names is not committed; None outside a git checkout (or when
    git is missing or hangs)."""
    folder = where if where.is_dir() else where.parent

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        # read-only: no index refresh written back (--no-optional-locks), no fsmonitor hook started; git itself
        # refuses a checkout another user owns (safe.directory)
        return subprocess.run(
            ["git", "--no-optional-locks", "-c", "core.fsmonitor=false", "-C", str(folder), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return None
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
        if not dirty and where.is_file():
            dirty = git("ls-files", "--error-unmatch", "--", where.name).returncode != 0
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")

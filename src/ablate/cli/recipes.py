"""`ablate show` and `ablate init`: what a recipe resolves to (and what each key means, and what each trainer
supports), and a project of one's own with an editable copy of the recipes. Recipes and sweep files:
recipes/README.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from ablate.cli.commands import argument, option, verb
from ablate.errors import ErrorKind, UserError


@dataclass(frozen=True, kw_only=True)
class ShowSettings:
    """`ablate show`'s options."""

    recipe: Path | None = argument(
        "Recipe (recipes/base.yaml) or sweep file narrowed to one run (recipes/loss.yaml loss=dapo).", default=None
    )
    overrides: list[str] | None = argument(
        "Hydra overrides, key=value, one value a key (a key given twice: the last wins).", default=None
    )
    trainers: bool = option(
        False,
        "--trainers",
        doc="Print which options each trainer (trainer=ablate, trainer=trl) supports, instead of a config.",
    )
    keys: bool = option(
        False,
        "--keys",
        doc="Print every key a recipe or override can set, with its type, default, choices and meaning, instead of a "
        "config; RECIPE then names a section (loss) or a key (loss.eps_max) to print alone.",
    )


@verb(ShowSettings)
def show(s: ShowSettings) -> None:
    """Print the resolved, validated config of one run (YAML), headed by its run id and arm id.

    The first line names the recipe file read: recipes/X.yaml is yours when your folder has it, else ablate's
    packaged one. Given a run directory (or its config.yaml), the config that run ran with. --keys prints what each
    key means instead (ablate show --keys loss).
    Example: ablate show recipes/base.yaml loss=dapo aggregation=token
    """
    from ablate.compose.recipe import compose_run
    from ablate.compose.resources import find_recipe
    from ablate.compose.sweep import config_yaml
    from ablate.render.runs import print_keys, print_trainers
    from ablate.render.terminal import console
    from ablate.text import safe

    if s.trainers:
        if s.recipe is not None or s.overrides:  # the matrix is the trainers', not a recipe's: say so, not ignore it
            raise UserError(
                "--trainers prints the support matrix of every recipe; drop the recipe and overrides, or --trainers",
                kind=ErrorKind.USAGE,
            )
        print_trainers(console())
        return
    if s.keys:
        print_keys(str(s.recipe) if s.recipe is not None else None)
        return
    if s.recipe is None:
        raise UserError(
            "give a recipe (ablate show recipes/base.yaml), or --trainers for the support matrix", kind=ErrorKind.USAGE
        )
    if run_dir := _a_run_or_sweep(Path(s.recipe), s.overrides):  # what a run was launched with, as it is
        from ablate.storage.rundir import RunDir
        from ablate.track.sync import run_config

        typer.echo(f"# run directory: {safe(run_dir)}\n{config_yaml(run_config(RunDir(run_dir)))}", nl=False)
        return
    config = config_yaml(compose_run(s.recipe, s.overrides or []))
    found, source = find_recipe(s.recipe)
    typer.echo(f"# recipe: {safe(found)} ({source})\n{config}", nl=False)


def _a_run_or_sweep(path: Path, overrides: list[str] | None) -> Path | None:
    """`ablate show` given a run directory (or its config.yaml): that directory. A sweep directory, or any other
    folder, is refused naming what shows it; a recipe: None."""
    from ablate.storage.rundir import holds_sweep

    if path.is_dir():
        run_dir = path
    elif path.name == "config.yaml" and (path.parent / "run.json").exists():
        run_dir = path.parent
    else:
        return None
    if holds_sweep(run_dir):
        raise UserError(
            f"{path}: a sweep directory; `ablate status {path}` lists its runs, `ablate show {path}/runs/RUN` prints "
            "one run's config",
            kind=ErrorKind.FILE,
        )
    if not (run_dir / "config.yaml").exists():
        raise UserError(f"{path}: a directory with no run's config.yaml; give a recipe file", kind=ErrorKind.FILE)
    if overrides:
        raise UserError(
            f"{overrides[0]}: {path} is a run's config, as it ran: drop the overrides, or show its recipe with them",
            kind=ErrorKind.USAGE,
        )
    return run_dir


@dataclass(frozen=True, kw_only=True)
class InitSettings:
    """`ablate init`'s options."""

    folder: Path = argument("The project's folder (created if missing; default: here).", default=Path("."))


@verb(InitSettings)
def init(s: InitSettings) -> None:
    """Start a project of your own: an editable copy of ablate's recipes (DIR/recipes/) and an example SLURM
    profile (DIR/slurm/example.yaml). Refuses, writing nothing, when any of those files exists already.

    Example: ablate init my-ablations && cd my-ablations && ablate sweep recipes/loss.yaml --dry-run
    """
    from ablate.compose.project import init_project
    from ablate.render.runs import written

    for line in written(s.folder, init_project(s.folder)):
        typer.echo(line)

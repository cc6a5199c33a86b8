"""One run's config from a recipe (or a sweep file narrowed to one run): what `ablate show` and `ablate train` read.

A recipe path resolves in the user's folder first, then among ablate's packaged recipes (ablate.compose.resources). The
composition itself: ablate.compose.hydra; what a recipe may hold: ablate.compose.safe_yaml; the override grammar:
ablate.compose.overrides.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ablate.compose.hydra import ComposeError, hydra_context
from ablate.compose.overrides import parse_overrides
from ablate.compose.resources import find_recipe
from ablate.compose.safe_yaml import load_yaml
from ablate.compose.sweep import load_sweep
from ablate.config import schema
from ablate.config.schema import ConfigErrors, RunConfig
from ablate.errors import ErrorKind, UserError


def is_recipe(path: Path | str) -> bool:
    """A recipe has a Hydra `defaults:` list (base.yaml); a sweep file does not."""
    return "defaults" in load_yaml(find_recipe(path)[0])


def compose_run(recipe_path: Path | str, overrides: Sequence[str] = ()) -> RunConfig:
    """The resolved, validated config of one run.

    `recipe_path` is a recipe (e.g. recipes/base.yaml) or a sweep file; a sweep file must narrow to exactly one
    run with the overrides (e.g. `recipes/loss.yaml loss=dapo`). Raises UserError / ConfigErrors.
    """
    path, _ = find_recipe(recipe_path)
    if not is_recipe(path):
        sweep = load_sweep(path, overrides)
        if len(sweep.runs) != 1:
            labels = ", ".join(r.label for r in sweep.runs[:6]) + (", ..." if len(sweep.runs) > 6 else "")
            raise UserError(
                f"{path} expands to {len(sweep.runs)} runs ({labels}); pick one with overrides, "
                f"e.g. {sweep.runs[0].label.replace(',', ' ')}",
                kind=ErrorKind.RECIPE,
            )
        return sweep.runs[0].config
    parsed = parse_overrides(overrides, str(path))
    sweeps = [o.input_line for o in parsed if o.is_sweep_override()]
    if sweeps:
        raise UserError(
            f"{sweeps[0]}: a sweep value; one run takes one value per key (sweeps go to `ablate sweep`)",
            kind=ErrorKind.RECIPE,
        )
    with hydra_context(path.parent) as hc:
        try:
            raw = hc.compose(path.stem, list(overrides))
        except ComposeError as e:
            msg = hc.explain_missing_key(path.stem, overrides, e.key) if e.key else str(e)
            raise ConfigErrors([msg]) from None
    return schema.validate(raw)

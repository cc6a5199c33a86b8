"""Where a run's data goes is the user's choice, never a file's: the trackers and their destinations (the `track`
section: tracker names, the MLflow URI, the W&B project, entity and mode) come from the command line (`--track NAME`,
`track.KEY=VALUE` overrides) or the environment (WANDB_*, MLFLOW_TRACKING_URI), not from a recipe, a recipe's config
group options or a sweep file, which are passed around with repositories. A file that sets one is refused in one line
(docs/security.md, docs/trackers.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ablate.compose.overrides import override_key, parse_overrides

SECTION = "track"
LEGACY_KEY = "train.tensorboard"
"""The setting trackers replaced (read as `track.to=[tensorboard]`): a tracker choice too."""

FIX = (
    "a recipe or sweep file cannot choose trackers or where they send data: drop it, and choose on the command line "
    "of `ablate train` or `ablate sweep` ({how}) or in the environment (WANDB_*, MLFLOW_TRACKING_URI)"
)


def _fix(key: str) -> str:
    """FIX, with the command-line form of `key` (a setting of a tracker goes with --track naming it)."""
    how = "--track NAME" if key in (SECTION, SECTION + ".to", LEGACY_KEY) else f"--track NAME {key}=VALUE"
    return FIX.format(how=how)


def is_track_key(key: str) -> bool:
    """Whether an override's dotted key chooses a tracker or its destination."""
    return key in (SECTION, LEGACY_KEY) or key.startswith(SECTION + ".")


def split(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """The overrides as (the others, the tracker settings), each in the order given."""
    others: list[str] = []
    track: list[str] = []
    for text in overrides:
        (track if is_track_key(override_key(parse_overrides([text], "override")[0])) else others).append(text)
    return others, track


def recipe_problem(composed: dict[str, Any], defaults: dict[str, Any], where: str) -> str | None:
    """The one line refusing a composed recipe (before the command line's tracker settings) that chose a tracker or
    a destination itself; None when its `track` section is the schema's and it sets no `train.tensorboard`."""
    track = composed.get(SECTION)
    want = defaults.get(SECTION, {})
    if track != want:
        have = track if isinstance(track, dict) else {}
        key = next((k for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)), None)
        name = f"{SECTION}.{key}" if key else SECTION
        return f"{where}: sets {name}; {_fix(name)}"
    train = composed.get("train")
    if isinstance(train, dict) and "tensorboard" in train:
        return f"{where}: sets {LEGACY_KEY}; {_fix(LEGACY_KEY)}"
    return None


def file_problem(overrides: Sequence[Any], where: str) -> str | None:
    """The one line refusing a sweep file whose overrides, runs or grid (parsed Hydra overrides) set a tracker
    setting; None when none does."""
    for o in overrides:
        key = override_key(o)
        if is_track_key(key):
            return f"{where}: {o.input_line!r} sets {key}; {_fix(key)}"
    return None

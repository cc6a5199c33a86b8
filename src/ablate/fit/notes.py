"""A note a fit or a ranking attaches for its reader: typed, so renderers branch on its kind, never on its text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NoteKind = Literal["needs_seeds", "far_target", "other"]
"""needs_seeds: no seed spread to test against (the renderer adds the command that adds seeds); far_target: --to is
far beyond the compute fitted (a long extrapolation); other: anything else, shown as written."""


@dataclass(frozen=True)
class Note:
    kind: NoteKind
    text: str

    def __str__(self) -> str:
        return self.text

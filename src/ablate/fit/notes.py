"""A note a fit or a ranking attaches for its reader: typed, so renderers branch on its kind, never on its text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NoteKind = Literal["needs_seeds", "far_target", "decided", "baseline_waiting", "other"]
"""needs_seeds: no seed spread to test against (the renderer adds the command that adds seeds); far_target: --to is
far beyond the compute fitted (a long extrapolation); decided: the sweep was grown by `sweep --decide` (its looks
are its decisions; no more waves are offered); baseline_waiting: the sweep's baseline has no run to fit yet (no
verdicts, nothing to plan against); other: anything else, shown as written."""


LABELS: dict[NoteKind, str] = {"needs_seeds": "needs seeds"}
"""The words a kind of note is headed by in text (JSON, a plain listing); a renderer may head it its own way."""


@dataclass(frozen=True)
class Note:
    kind: NoteKind
    body: str
    """The note without its heading."""

    @property
    def text(self) -> str:
        """The note as one line of text: its kind's heading (if it has one), then its body."""
        label = LABELS.get(self.kind)
        return label + ": " + self.body if label else self.body  # `+` keeps a Phrase body's settings

    def __str__(self) -> str:
        return self.text

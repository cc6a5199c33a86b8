"""RunSpec: one fully resolved, validated run of a sweep; the unit that `launch` submits and `rank` groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunSpec:
    sweep: str
    """Sweep name (the sweep file's stem, e.g. `loss`); results go to `sweeps/<sweep>/`."""
    label: str
    """Human label built from the overrides that differ from the base, e.g. `loss=dapo,seed=1`."""
    run_id: str
    """Short hash of the canonical resolved config (launcher, resources and paths excluded)."""
    arm_id: str
    """The same hash without the seed: runs that share it are seeds of one arm."""
    overrides: tuple[str, ...] = ()
    """Hydra overrides (`key=value`) that produced this run, relative to the base recipe."""
    config: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    """The resolved config as plain containers (what `config.yaml` in the run directory holds)."""
    baseline: bool = False
    """True for the runs of the sweep's baseline arm (`rank` compares every arm against it)."""

    @property
    def arm_label(self) -> str:
        """The label without its `seed=...` part: the name of the arm in `rank`."""
        parts = [p for p in self.label.split(",") if not p.startswith("seed=")]
        return ",".join(parts) or "base"

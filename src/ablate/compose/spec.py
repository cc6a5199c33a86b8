"""RunSpec: one fully resolved, validated run of a sweep; the unit that `launch` submits and `rank` groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ablate.config.identity import label_arm
from ablate.config.schema import RunConfig, validate


@dataclass(frozen=True)
class RunSpec:
    sweep: str
    """Sweep name (the sweep file's stem, e.g. `loss`); results go to `<root>/<sweep>/`."""
    label: str
    """Human label built from the overrides that differ from the base, e.g. `loss=dapo,seed=1`."""
    run_id: str
    """Short hash of the canonical resolved config (launcher, resources and paths excluded): ablate.config.identity."""
    arm_id: str
    """The same hash without the seed: runs that share it are seeds of one arm."""
    overrides: tuple[str, ...] = ()
    """Hydra overrides (`key=value`) that produced this run, relative to the base recipe."""
    config: RunConfig = field(default_factory=RunConfig, hash=False, compare=False)
    """The typed, validated config (what `config.yaml` in the run directory holds)."""
    baseline: bool = False
    """True for the runs of the sweep's baseline arm (`rank` compares every arm against it)."""

    @property
    def arm_label(self) -> str:
        """The label without its `seed=...` part: the name of the arm in `rank`."""
        return label_arm(self.label)

    def to_json(self) -> dict[str, Any]:
        """Plain containers, e.g. for a local runner's queue file; `from_json` reverses it."""
        return {
            "sweep": self.sweep,
            "label": self.label,
            "run_id": self.run_id,
            "arm_id": self.arm_id,
            "overrides": list(self.overrides),
            "config": self.config.to_dict(),
            "baseline": self.baseline,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunSpec:
        return cls(
            sweep=d["sweep"],
            label=d["label"],
            run_id=d["run_id"],
            arm_id=d["arm_id"],
            overrides=tuple(d["overrides"]),
            config=validate(d["config"]),
            baseline=bool(d["baseline"]),
        )

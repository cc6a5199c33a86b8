"""What every tracker implements, and what it is told about the run it mirrors (docs/trackers.md)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ablate.config.sections import TRACKERS as TRACKERS  # the names `--track` takes (the schema's, for track.to)

ENVIRONMENT: dict[str, dict[str, str]] = {
    "wandb": {"WANDB_SILENT": "true"},
    "mlflow": {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    },
}
"""The process-wide settings each tracker's library reads from the environment, set (unless already set) on the main
thread before the trackers' threads start: setenv is not safe while another thread may call C's getenv.
WANDB_SILENT: nothing of W&B's in the terminal. MLflow's REST client retries a call 7 times with backoff factor 2
and waits 120 s for an answer (minutes against a server that is down), takes these limits only from the
environment, and sends usage telemetry unless told not to (docs/trackers.md)."""


def set_environment(names: Sequence[str]) -> None:
    """The ENVIRONMENT of the trackers named, each variable unless already set. Call on the main thread only
    (setenv is not safe against another thread's getenv): the fan-out before its threads start, a reader before it
    reads."""
    for name in names:
        for var, value in ENVIRONMENT.get(name, {}).items():
            os.environ.setdefault(var, value)


def numbers(record: dict[str, Any]) -> dict[str, float]:
    """The fields of a metrics line a tracker plots: every int or float but the step (a bool is a flag)."""
    return {k: v for k, v in record.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def say(line: str) -> None:
    """One line for the person running the run: train.log (the run's logger) and stderr (the job's log in a
    sweep): the `wandb sync` command of an offline W&B run, say."""
    logging.getLogger("ablate.train").info("%s", line)
    print(line, file=sys.stderr, flush=True)


def warn(line: str) -> None:
    """A warning for the person running the run: train.log and stderr (the job's log in a sweep)."""
    logging.getLogger("ablate.train").warning("%s", line)
    print(f"warning: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TrackContext:
    """The run a tracker mirrors. A tracker writes only under `run_dir`, or under `sweep_dir` when it keeps one
    store for the whole sweep (MLflow's default SQLite database)."""

    run_dir: Path
    sweep_dir: Path | None
    """The sweep's directory; None for a run outside a sweep (`ablate train --run-dir DIR`)."""
    sweep: str | None
    """The sweep's name: W&B's group, MLflow's experiment (a run outside a sweep: its directory's name)."""
    arm_id: str
    arm_label: str
    """The arm's overrides against the baseline, e.g. `loss=grpo`: its name in `ablate rank` (`base` for an arm with
    no label; a run outside a sweep: its arm id)."""
    run_id: str
    label: str
    """The run's display name: the arm's label and its seed."""
    config: dict[str, Any]
    """The resolved recipe (RunConfig.to_dict())."""
    options: Any
    """The recipe's `track` section (project, entity, wandb_mode, mlflow_uri; ablate.config.sections.TrackConfig)."""
    baseline: bool = False
    """The run is a seed of its sweep's baseline arm: tagged, so that `ablate rank` reads the copy against it."""
    device: str | None = None
    """The kind of device the run trains on (`cpu`, `cuda`; None: not known), tagged so that `--x auto` picks the
    axis for the copy that it picks for the sweep."""
    note: Callable[[str], None] = field(default=say, compare=False)
    """Where a tracker writes a line for the user (train.log and stderr)."""


@dataclass
class Logged:
    """One run read back from a tracker (an MLflow store, W&B run files): where it is (the experiment or W&B group,
    i.e. the sweep), its name and id, what ablate tagged it with (arm, arm id, baseline, device; None when the run
    was not mirrored by ablate) and its metrics (step -> name -> value)."""

    experiment: str
    name: str
    run_id: str
    arm: str | None = None
    arm_id: str | None = None
    baseline: bool = False
    device: str | None = None
    steps: dict[float, dict[str, float]] = field(default_factory=dict)


class Tracker(Protocol):
    """One tracker. Its methods run on a background thread (track.fanout), never on the training loop's: they may
    block, and any exception they raise makes the fan-out warn once and drop the tracker for the rest of the run."""

    name: str

    def start(self, ctx: TrackContext, resumed_from: int | None) -> None:
        """Open (or reopen, on a resume) the tracker's run. `resumed_from` is the last step metrics.jsonl kept when
        this attempt resumed from a checkpoint (None: a fresh start); steps after it are redone and logged again
        by this attempt, so a tracker that already holds them must not hold them twice."""
        ...

    def log(self, record: dict[str, Any]) -> None:
        """One metrics.jsonl line (its `step` is the x the tracker logs at)."""
        ...

    def finish(self, state: str) -> None:
        """The run's state at the end of this attempt (a RunState value: done, failed, preempted, pruned, ...)."""
        ...

"""What `ablate sweep` says about the runs' tracker copies once they are submitted: where each copy is, and the
commands (pasteable) that browse, upload and rank it; docs/trackers.md."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.track.wandb import mode, project


def copy_hints(tracks: Sequence[Any], sdir: Path, sweep: str) -> list[str]:
    """One line per tracker the runs mirror to (`tracks`: each run's `track` section), for the sweep in `sdir`."""
    names = {n for t in tracks for n in t.to}
    where = shlex.quote(str(sdir))
    lines = []
    if "mlflow" in names:
        given = {getattr(t, "mlflow_uri", None) or os.environ.get("MLFLOW_TRACKING_URI") for t in tracks}
        if None in given or "" in given:  # the sweep's own SQLite store
            uri = shlex.quote("sqlite:///" + str((sdir / "mlflow.db").absolute()))
            lines.append(
                f"MLflow copy: browse it with: mlflow ui --backend-store-uri {uri}; rank it with: ablate rank "
                f"{where}/mlflow.db"
            )
        if given - {None, ""}:
            lines.append(
                f"MLflow copy on the tracking server, experiment {sweep}: rank it with: ablate rank "
                f"{shlex.quote('mlflow:' + sweep)} (MLFLOW_TRACKING_URI set to the server)"
            )
    if "wandb" in names:
        rank = f"rank its run files with: ablate rank {where}/runs/*/wandb"
        if any(mode(t) == "offline" for t in tracks):
            lines.append(
                f"W&B copy (offline): upload it once the runs end with: wandb sync {where}/runs/*/wandb/latest-run; "
                + rank
            )
        else:
            lines.append(f"W&B copy: project {project(tracks[0])}, group {sweep}; " + rank)
    return lines

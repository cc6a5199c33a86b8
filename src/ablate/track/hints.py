"""What `ablate sweep` says about the runs' tracker copies once they are submitted: where each copy is, and the
commands (pasteable) that browse, upload and rank it; docs/trackers.md."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ablate.track.mlflow import sqlite_path
from ablate.track.wandb import mode, project


def copy_hints(tracks: Sequence[Any], sdir: Path, sweep: str) -> list[str]:
    """One line per tracker the runs mirror to (`tracks`: each run's `track` section), for the sweep in `sdir`."""
    names = {n for t in tracks for n in t.to}
    where = shlex.quote(str(sdir))
    lines = []
    if "mlflow" in names:
        env = os.environ.get("MLFLOW_TRACKING_URI") or None
        given = {getattr(t, "mlflow_uri", None) or env for t in tracks}
        for uri in sorted(given, key=str):
            lines.append(_mlflow_hint(uri, env, sdir, sweep))
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


def _mlflow_hint(uri: str | None, env: str | None, sdir: Path, sweep: str) -> str:
    """Where an MLflow copy is, and how to browse and rank it: the sweep's own SQLite store (`uri` None), another
    SQLite store, or a server (the command sets MLFLOW_TRACKING_URI to it unless the shell's variable names it
    already, or the URI holds credentials, which are not printed)."""
    browse = "MLflow copy: browse it with: mlflow ui --backend-store-uri {}; rank it with: ablate rank {}"
    if uri is None:
        own = shlex.quote(f"sqlite:///{(sdir / 'mlflow.db').absolute()}")
        return browse.format(own, f"{shlex.quote(str(sdir))}/mlflow.db")
    if (db := sqlite_path(uri)) is not None:
        return browse.format(shlex.quote(uri), shlex.quote(str(db)))
    rank = f"ablate rank {shlex.quote('mlflow:' + sweep)}"
    if uri == env:
        return f"MLflow copy on the tracking server, experiment {sweep}: rank it with: {rank}"
    if "@" in urlparse(uri).netloc:  # its credentials are not printed
        where, server = "the tracking server track.mlflow_uri names", "MLFLOW_TRACKING_URI=<track.mlflow_uri>"
    else:
        where, server = uri, f"MLFLOW_TRACKING_URI={shlex.quote(uri)}"
    return f"MLflow copy on {where}, experiment {sweep}: rank it with: {server} {rank}"

"""The work behind `ablate train` around the run itself (ablate.train.run): where the run directory goes, made with
the right permissions before anything is written, and the command that resumes it. Run directories:
docs/run-directory.md; permissions: docs/security.md."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ablate.storage import fs, ownership


def prepare_run_dir(config: Any, out: Path | None, *, group_read: bool) -> Path:
    """The run directory of `config` (`out`, else sweeps/train/runs/<run_id>: the sweep of `train`), checked by the
    trainer's preflight and made: owner-only, or readable by the group with `group_read` (which also opens an
    existing one made owner-only by an earlier run). A directory someone else could change is refused first."""
    from ablate.config.identity import run_id
    from ablate.train import preflight

    run_dir = out if out is not None else Path("sweeps") / "train" / "runs" / run_id(config)
    preflight(config, run_dir)
    ownership.check_owned_dir(run_dir.absolute())
    if out is None:
        fs.make_dirs(run_dir.parent.parent, fs.dir_mode(group_read))
    fs.make_dirs(run_dir, fs.dir_mode(group_read))
    if group_read:
        for d in (run_dir.parent.parent, run_dir.parent) if out is None else ():
            fs.open_to_group(d, below=False)
        fs.open_to_group(run_dir)
    return run_dir


def resume_command(recipe: Path, overrides: list[str], run_dir: Path, *, threads: int, trackers: list[str]) -> str:
    """The `ablate train` command that resumes this run from its last checkpoint, as one shell line (with the
    trackers it mirrors to: `--track NAME` each)."""
    return shlex.join(
        [
            "ablate",
            "train",
            str(recipe),
            *overrides,
            "--run-dir",
            str(run_dir),
            *(["--threads", str(threads)] if threads != 1 else []),
            *[arg for name in dict.fromkeys(trackers) for arg in ("--track", name)],
        ]
    )

"""Checkpoints of a run: `ckpt/last.pt` and the one before it, `ckpt/prev.pt`.

A checkpoint is a dict of tensors and plain values (numbers, strings, lists, dicts): model and optimizer state,
the run's RNG state, the prompt pool, compute counters, the metric accumulators since the last evaluation, and the
evaluation record of the checkpoint's own step (so a metrics line torn by a crash is written again on resume,
not lost). It is loaded with `torch.load(weights_only=True)`, which unpickles only those types: a checkpoint
planted in a shared sweep directory cannot run code when the run resumes.

Saving writes a temp file, fsyncs it, keeps the current `last.pt` as `prev.pt`, then renames the temp file into
place; a failed save (a full disk) removes its temp file and leaves both checkpoints as they were. Loading falls
back to `prev.pt` when `last.pt` is empty, truncated or unreadable.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import torch

from ablate.errors import UserError
from ablate.rundir import no_space

log = logging.getLogger("ablate.train")


class Checkpoints:
    """The checkpoints of one run directory's `ckpt/` folder."""

    def __init__(self, folder: Path | str) -> None:
        self.dir = Path(folder)
        self.last = self.dir / "last.pt"
        self.prev = self.dir / "prev.pt"

    def exists(self) -> bool:
        return self.last.exists() or self.prev.exists()

    def save(self, state: dict[str, Any]) -> None:
        """Write `state` as the new last checkpoint (atomically; the old one becomes prev)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "last.pt.tmp"
        try:
            with open(tmp, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            if self.last.exists():
                os.replace(self.last, self.prev)
            os.replace(tmp, self.last)
        except BaseException as e:
            tmp.unlink(missing_ok=True)
            if isinstance(e, Exception) and not no_space(e) and _disk_full(self.dir):
                # torch's zip writer reports a full disk as a RuntimeError without the OSError behind it
                raise OSError(errno.ENOSPC, f"no space left on device writing {self.last}") from e
            raise
        log.info("checkpoint at step %d", state.get("step", -1))

    def load(self) -> dict[str, Any] | None:
        """The newest readable checkpoint, or None when there is none. A damaged `last.pt` is reported in the log and
        `prev.pt` is used; when both exist and neither loads, a UserError says how to start over."""
        tried = []
        for path in (self.last, self.prev):
            if not path.exists():
                continue
            try:
                state = torch.load(path, weights_only=True, map_location="cpu")
            except Exception as e:  # truncated, empty, or not a safe checkpoint (pickle of other objects)
                log.warning("checkpoint %s is unreadable (%s: %s); trying the previous one", path, type(e).__name__,
                            str(e).splitlines()[0] if str(e) else "")
                tried.append(path.name)
                continue
            if not isinstance(state, dict) or not isinstance(state.get("step"), int):
                log.warning("checkpoint %s is not a checkpoint of this trainer; trying the previous one", path)
                tried.append(path.name)
                continue
            if tried:
                log.warning("resuming from %s: %s could not be read", path.name, ", ".join(tried))
            return state
        if tried:
            raise UserError(f"{self.dir}: no readable checkpoint ({', '.join(tried)} damaged); delete {self.dir} to "
                            "start the run over (its metrics.jsonl lines after step 0 will be rewritten)")
        return None


def _disk_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under a MiB left

"""Checkpoints of a run: `ckpt/last.pt` and the one before it, `ckpt/prev.pt`.

A checkpoint is a dict of tensors and plain values (numbers, strings, lists, dicts): model and optimizer state,
the run's RNG state, the prompt pool, compute counters, the metric accumulators since the last evaluation, and the
evaluation record of the checkpoint's own step (so a metrics line torn by a crash is written again on resume,
not lost). It is loaded with `torch.load(weights_only=True)`, which unpickles only those types: a checkpoint
planted in a shared sweep directory cannot run code when the run resumes.

Saving writes a temp file, fsyncs it, keeps the current `last.pt` as `prev.pt`, then renames the temp file into
place; a failed save (a full disk) removes its temp file and leaves both checkpoints as they were.

Resuming (`Checkpoints.resume`) loads a checkpoint *and applies it* (into model, optimizer, counters) as one step:
whatever goes wrong on the way (an empty, truncated or foreign file, missing keys, wrong shapes or types, a step
this run cannot have reached: `check_state`) makes it try the previous checkpoint. A checkpoint that failed is set
aside as `<name>.bad` (kept to look at, never loaded again, and out of the way of the next save's rotation). When
none is left, the run starts afresh only if metrics.jsonl records no training yet (no line past step 0: nothing
is lost or contradicted by starting over); otherwise it fails with one line naming each checkpoint's fault,
rather than silently throw away the recorded curve.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ablate.errors import ErrorKind, UserError
from ablate.storage import fs, store
from ablate.storage.runinfo import no_space

log = logging.getLogger("ablate.train")


class BadCheckpoint(ValueError):
    """A checkpoint this run cannot resume from; the message says why, in a few words."""


class Checkpoints:
    """The checkpoints of one run directory's `ckpt/` folder. `lead`: this process may set bad ones aside (rank 0
    of a data-parallel run; the other ranks read the same files and reach the same verdicts)."""

    def __init__(self, folder: Path | str, *, lead: bool = True) -> None:
        self.dir = Path(folder)
        self.last = self.dir / "last.pt"
        self.prev = self.dir / "prev.pt"
        self.lead = lead
        self.rejected: list[str] = []  # the names of the checkpoints the last resume() could not use
        self.faults: list[str] = []  # and why, one each

    def exists(self) -> bool:
        return self.last.exists() or self.prev.exists()

    def save(self, state: dict[str, Any]) -> None:
        """Write `state` as the new last checkpoint (atomically; the old one becomes prev)."""
        fs.make_dirs(self.dir)  # ckpt/ takes the run directory's permissions
        tmp = self.dir / "last.pt.tmp"
        try:
            with fs.safe_open(tmp, "wb") as f:  # a link planted at last.pt.tmp is refused, not written through
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

    def read(self, path: Path) -> dict[str, Any]:
        """One checkpoint file as a dict (BadCheckpoint when it is unreadable or not a checkpoint)."""
        f = fs.safe_open(path, "rb")  # a linked checkpoint is refused (LinkRefused), not loaded or set aside
        try:
            with f:
                state = torch.load(f, weights_only=True, map_location="cpu")
        except Exception as e:  # truncated, empty, or not a safe checkpoint (pickle of other objects)
            log.warning("checkpoint %s: %s: %s", path, type(e).__name__, first_line(e))
            raise BadCheckpoint(f"unreadable ({type(e).__name__})") from None
        if not isinstance(state, dict):
            raise BadCheckpoint(f"holds a {type(state).__name__}, not a checkpoint of this trainer")
        return state

    def resume(self, apply: Callable[[dict[str, Any]], None], *, fresh_ok: bool) -> dict[str, Any] | None:
        """Load and apply the newest checkpoint that works, as one step: `apply(state)` checks it (`check_state`)
        and puts it into the run; any exception from reading or applying makes it try the previous one. Returns
        the state applied, or None for a fresh start: no checkpoint, or (with `fresh_ok`: nothing recorded would
        be lost) none usable. With none usable and not `fresh_ok`, or with a fault that is the config's (a UserError
        from `apply`: such checkpoints are not thrown away), a UserError names each one's fault. After a failed
        `apply` the run's state may be half-written, so a caller that then starts fresh must rebuild it. The failed
        checkpoints are listed in `self.rejected`; the caller sets them aside (`set_aside`: `<name>.bad`) once
        every rank is past its attempt."""
        self.rejected, self.faults = [], []
        mismatch = False  # a fault that is the config's, with its own fix (apply's UserError: another train.sharding)
        for path in (self.last, self.prev):
            if not path.exists():
                continue
            try:
                state = self.read(path)
                apply(state)
            except (MemoryError, torch.cuda.OutOfMemoryError, fs.LinkRefused):
                raise  # the machine's fault, not the checkpoint's; a planted link is refused, not set aside
            except Exception as e:
                why = str(e) if isinstance(e, (BadCheckpoint, UserError)) else f"{type(e).__name__}: {first_line(e)}"
                log.warning("checkpoint %s cannot be resumed from (%s); trying the previous one", path, why)
                self.rejected.append(path.name)
                self.faults.append(why)
                mismatch = mismatch or isinstance(e, UserError)
                continue
            if self.rejected:
                log.warning(
                    "resuming from %s (step %s): %s", path.name, state.get("step"), faults(self.rejected, self.faults)
                )
            return state
        if self.rejected:
            start_afresh(self.dir, self.rejected, self.faults, fresh_ok=fresh_ok, mismatch=mismatch)
        return None

    def set_aside(self) -> None:
        """Set the checkpoints the last `resume` rejected aside as `<name>.bad` (`set_aside`): not rotated into
        prev.pt by the next save. Rank 0 only, after every rank has made its attempt."""
        if self.lead:
            set_aside([self.dir / name for name in self.rejected], lambda path: path.with_name(path.name + ".bad"))


def fresh_ok(steps: list[int]) -> bool:
    """Whether a run with no usable checkpoint may start afresh: only while metrics.jsonl (its `steps`) records
    no training, no line past step 0 (nothing recorded is lost or contradicted by starting over)."""
    return not any(step > 0 for step in steps)


def start_afresh(folder: Path, names: list[str], whys: list[str], *, fresh_ok: bool, mismatch: bool = False) -> None:
    """No checkpoint in `folder` was usable (`names`, each failed for its `whys`): the run starts afresh, said in
    train.log, when `fresh_ok`; otherwise a UserError names each one's fault. `mismatch`: a fault is the config's
    (another train.sharding): the checkpoints are kept, and one shared fault is said as is (it says the fix)."""
    if mismatch and len(set(whys)) == 1:
        raise UserError(
            whys[0], kind=ErrorKind.STATE
        )  # every checkpoint is fine for the run's own config: say how to use them
    if not fresh_ok or mismatch:
        recorded = "" if fresh_ok else ", and metrics.jsonl records training past step 0"
        raise UserError(
            f"{folder}: no usable checkpoint ({faults(names, whys)}){recorded}; delete {folder} to start the run "
            "over (its metrics.jsonl lines after step 0 will be rewritten)",
            kind=ErrorKind.STATE,
        )
    log.warning("no usable checkpoint (%s) and no training recorded yet: starting afresh", faults(names, whys))


def set_aside(paths: list[Path], aside: Callable[[Path], Path]) -> None:
    """Rename failed checkpoints `paths` to `aside(path)` (replacing an older one there): kept to look at, never
    loaded again, and out of the trainer's checkpoint rotation. Worker 0 only, once every worker is past its
    attempt (a worker still reading a checkpoint would otherwise find it gone, and take another path)."""
    for path in paths:
        dest = aside(path)
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, dest)


def first_line(e: BaseException, limit: int = 120) -> str:
    """An exception's message, one line, cut to `limit` characters (load_state_dict's run to dozens of lines, under
    a heading line that ends in a colon: the line after it is kept too)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def faults(names: list[str], whys: list[str]) -> str:
    """The faults of checkpoints `names` (`whys`, one each) as "a: why; b: why", a fault they share named once."""
    if len(set(whys)) == 1:
        return f"{' and '.join(names)}: {whys[0]}"
    return "; ".join(f"{n}: {w}" for n, w in zip(names, whys))


def metric_steps(metrics_path: Path) -> list[int]:
    """The steps of metrics.jsonl's records (torn or damaged lines skipped), in file order."""
    return [r["step"] for r in store.read_jsonl(metrics_path) if type(r.get("step")) is int]


def _finite(x: Any) -> bool:
    return store.finite_number(x) is not None


def check_state(st: dict[str, Any], *, max_steps: int, eval_every: int, steps: list[int]) -> None:
    """BadCheckpoint unless `st` (ablate's part of a checkpoint, either trainer) could have been saved by this run:
    a whole-number step within [0, train.max_steps]; not past the last evaluation in metrics.jsonl (`steps`) by
    more than train.eval_every (the checkpoint's own evaluation line may have been torn by a crash, never more:
    evaluations are written before the checkpoint of their step); an evaluation record of the latest evaluation
    at or before that step; finite, non-negative compute counters; accumulators and health of the right shapes.
    A crafted step would otherwise cut metrics.jsonl back to nothing (negative) or report done at a step that
    never ran (past max_steps)."""
    step = st.get("step")
    if type(step) is not int:
        raise BadCheckpoint(f"its step {step!r} is not a whole number")
    if not 0 <= step <= max_steps:
        raise BadCheckpoint(f"its step {step} is outside [0, train.max_steps={max_steps}]")
    last = max(steps, default=0)
    if step > last + eval_every:
        raise BadCheckpoint(
            f"its step {step} is past metrics.jsonl's last evaluation (step {last}) by more than "
            f"train.eval_every={eval_every}"
        )
    ev = st.get("eval")
    if ev is not None:
        if not isinstance(ev, dict) or type(ev.get("step")) is not int or not step - eval_every <= ev["step"] <= step:
            raise BadCheckpoint(f"its evaluation record is not that of step {step}'s latest evaluation")
        rate = ev.get("val_pass_rate")
        value = store.finite_number(rate)
        if value is None or not 0 <= value <= 1:
            raise BadCheckpoint(f"its evaluation record has val_pass_rate {rate!r}, not a pass rate in [0, 1]")
    comp = st.get("compute")
    if not isinstance(comp, dict) or not all(
        _finite(comp.get(k)) and comp[k] >= 0 for k in ("wall_s", "flops", "samples")
    ):
        raise BadCheckpoint("its compute counters are missing, negative or not finite")
    acc = st.get("acc")
    if not (
        isinstance(acc, dict)
        and isinstance(acc.get("sums"), dict)
        and isinstance(acc.get("counts"), dict)
        and all(isinstance(v, (int, float)) for d in (acc["sums"], acc["counts"]) for v in d.values())
    ):
        raise BadCheckpoint("its metric accumulators are missing or not numbers")
    h = st.get("health")
    if not (
        isinstance(h, dict)
        and (h.get("r0") is None or _finite(h["r0"]))
        and isinstance(h.get("trunc_window"), list)
        and isinstance(h.get("warnings"), list)
    ):
        raise BadCheckpoint("its health record (r0, truncation window, warnings) is missing or malformed")


def _disk_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under a MiB left

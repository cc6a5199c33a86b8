"""A sweep's tracker copies read back: W&B run files (`run-*.wandb`) and MLflow stores (`mlflow:EXPERIMENT`, an
mlflow.db). Besides the points, each run carries what ablate tagged it with when it mirrored it (ablate.track: the
arm, its id, whether it is a baseline seed, the device it trained on), so that `ablate rank` reads the copy as it
reads the sweep: the same arms, the same baseline and, with `--x auto`, the same compute axis. Runs that ablate did
not mirror carry no tags: each is its own arm, as in any other tool's log."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path
from typing import Any

from ablate.curves.readers import WrongFormat, scalar, wandb_files
from ablate.errors import ErrorKind, UserError
from ablate.storage.reading import read_head, read_whole
from ablate.track.base import Logged

_WANDB_BLOCK, _WANDB_HEADER = 32768, 7

_READ: ContextVar[dict[tuple[str, str], list[Logged]] | None] = ContextVar("tracker_copies_read", default=None)
"""Inside `read_once`: each copy's runs by (kind, path), so a command that reads a copy twice (for its devices, then
for its curves) asks the file or the server once."""


@contextmanager
def read_once() -> Iterator[None]:
    """Within it, each tracker copy is read once (a server's experiment is one query) and its runs reused."""
    token = _READ.set(_READ.get() if _READ.get() is not None else {})
    try:
        yield
    finally:
        _READ.reset(token)


def _runs_of(kind: str, p: Path, read: Callable[[Path], list[Logged]]) -> list[Logged]:
    seen = _READ.get()
    if seen is None:
        return read(p)
    key = (kind, str(p))
    if key not in seen:
        seen[key] = read(p)
    return seen[key]


class Tracked(dict[str, dict[float, dict[str, float]]]):
    """Runs (name -> step -> metric -> value) with what their tags say: `arms` maps a run to its arm, `baseline`
    holds the runs of the sweep's baseline arm, `devices` each run's device kind (cpu, cuda; None: not tagged)."""

    def __init__(self) -> None:
        super().__init__()
        self.arms: dict[str, str] = {}
        self.baseline: set[str] = set()
        self.devices: dict[str, str | None] = {}


def tracked(logged: list[Logged], id_chars: int = 8, *, prefix_names: bool = True) -> Tracked:
    """`logged` as named runs: each by its name (prefixed by its experiment, the sweep, when they come from several
    and `prefix_names`; its first `id_chars` of id added when two share a name), in the arm its tag names (`label@arm
    id` when two configs share a label; prefixed by its sweep when there are several; the run itself when
    untagged)."""
    several = len({r.experiment for r in logged}) > 1
    names = [f"{r.experiment}/{r.name}" if several and prefix_names else r.name for r in logged]
    ids: dict[str | None, set[str | None]] = {}
    for r in logged:
        ids.setdefault(r.arm, set()).add(r.arm_id)
    runs = Tracked()
    for r, name in zip(logged, names):
        key = name if names.count(name) == 1 else f"{name} ({r.run_id[:id_chars]})"
        runs[key] = r.steps
        arm = key if r.arm is None else r.arm if len(ids[r.arm]) == 1 else f"{r.arm}@{(r.arm_id or '')[:8]}"
        runs.arms[key] = f"{r.experiment}/{arm}" if several and r.arm is not None else arm
        runs.devices[key] = r.device
        if r.baseline:
            runs.baseline.add(key)
    return runs


def is_mlflow(p: Path) -> bool:
    """`mlflow:EXPERIMENT` (at $MLFLOW_TRACKING_URI), or an SQLite file (MLflow's local store, e.g. a sweep's
    mlflow.db)."""
    if str(p).startswith("mlflow:"):
        return True
    if not p.is_file():  # a folder, no file, or a device or pipe (opening a pipe would block): detect says which
        return False
    return read_head(p, 16) == b"SQLite format 3\x00"


def read_mlflow(p: Path) -> Tracked:
    """`mlflow:EXPERIMENT` or an MLflow SQLite file (its every experiment)."""
    from ablate.track.mlflow_read import read_back

    return tracked(_runs_of("mlflow", p, read_back))


def _wandb_schema(p: Path) -> Any:
    try:
        from wandb.proto import wandb_internal_pb2 as pb
    except ImportError:
        raise UserError(
            f"{p}: reading W&B runs needs the wandb package: pip install wandb", kind=ErrorKind.ENVIRONMENT
        ) from None
    except Exception as e:  # a wandb whose protobuf schema does not load with the installed protobuf
        raise UserError(
            f"{p}: the installed wandb cannot load its record schema ({type(e).__name__}: {e}); "
            "reinstall it (pip install -U wandb protobuf)",
            kind=ErrorKind.ENVIRONMENT,
        ) from None
    return pb


def _wandb_records(f: Path, pb: Any) -> Iterator[Any]:
    """The records of a W&B transaction log (LevelDB's log format under a `:W&B` header), stopping at a torn end
    (a run still writing); a bad checksum before the end is a UserError."""
    data = read_whole(f, "a W&B run file")
    if data[:4] != b":W&B":
        raise WrongFormat(f, "wandb", "no :W&B header")
    pos, chunks = _WANDB_HEADER, b""
    while pos + 7 <= len(data):
        left = _WANDB_BLOCK - pos % _WANDB_BLOCK
        if left < 7:  # a block's zero-filled trailer
            pos += left
            continue
        crc, n, kind = struct.unpack_from("<IHB", data, pos)
        body = data[pos + 7 : pos + 7 + n]
        if kind == 0 and n == 0:  # preallocated space
            pos += left
            continue
        if len(body) < n:
            return
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            if pos + 7 + n >= len(data):
                return
            raise UserError(
                f"{f}: damaged at byte {pos} (bad checksum); the run's later history can't be read", kind=ErrorKind.FILE
            )
        pos += 7 + n
        chunks = body if kind in (1, 2) else chunks + body  # FULL, FIRST | MIDDLE, LAST
        if kind in (1, 4):
            rec = pb.Record()
            try:
                rec.ParseFromString(chunks)
            except Exception as e:  # protobuf's DecodeError: a record that passed its checksum but is not one
                raise UserError(
                    f"{f}: damaged record at byte {pos} ({type(e).__name__}); the run's later history can't be read",
                    kind=ErrorKind.FILE,
                ) from None
            yield rec


def _history_row(rec: Any) -> tuple[float, dict[str, float]]:
    """A W&B history record's step and its numeric values."""
    row: dict[str, float] = {}
    for item in rec.history.item:
        key = item.key or ".".join(item.nested_key)
        try:
            v = scalar(json.loads(item.value_json))
        except (ValueError, RecursionError):  # not a number: a media object, or nested past reading
            v = None
        if v is not None:
            row[key] = v
    return row.pop("_step", float(rec.history.step.num)), row


def _tag_facts(run: Logged, tags: list[str], job_type: str) -> None:
    """What ablate's W&B tags (ablate.track.wandb.tags) say of `run`: its arm id, baseline and device, and its arm,
    the job type, for a run ablate mirrored (another tool's job type, e.g. `train`, names no arm)."""
    from ablate.track.wandb import ARM_ID_TAG, BASELINE_TAG, DEVICE_TAG

    if not any(t.startswith(ARM_ID_TAG) for t in tags):
        return
    run.arm = job_type or None
    for t in tags:
        if t.startswith(ARM_ID_TAG):
            run.arm_id = t.removeprefix(ARM_ID_TAG)
        elif t.startswith(DEVICE_TAG):
            run.device = t.removeprefix(DEVICE_TAG)
        run.baseline = run.baseline or t == BASELINE_TAG


def read_wandb_runs(p: Path) -> list[Logged]:
    """The W&B runs under `p` (a run file, a run folder, a wandb/ folder or the folder holding it), one per run id
    (a resumed run writes one more file under the same id), with their group (the sweep), job type (the arm) and
    ablate's tags."""
    files = wandb_files(p)
    if not files:
        where = " in it, its runs' folders or wandb/" if p.is_dir() else ""
        raise WrongFormat(p, "wandb", "no run-*.wandb file" + where)
    pb = _wandb_schema(p)
    by_id: dict[str, Logged] = {}
    for f in files:
        run = Logged("", "", f.stem.removeprefix("run-"))
        tags: list[str] = []
        job_type = ""
        steps: dict[float, dict[str, float]] = {}
        for rec in _wandb_records(f, pb):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                r = rec.run
                run = Logged(r.run_group, r.display_name, r.run_id or run.run_id)
                tags, job_type = list(r.tags), r.job_type
            elif kind == "history":
                step, row = _history_row(rec)
                steps.setdefault(step, {}).update(row)
        _tag_facts(run, tags, job_type)
        old = by_id.setdefault(run.run_id, run)  # a resumed run: one more file, the same id
        if old is not run and run.arm is not None:  # a later attempt tagged by ablate: its facts hold (oldest first)
            by_id[run.run_id] = old = replace(run, name=old.name, steps=old.steps)
        old.name = old.name or run.name or run.run_id
        for step, row in steps.items():
            old.steps.setdefault(step, {}).update(row)
    return list(by_id.values())


def read_wandb(*paths: Path) -> Tracked:
    """W&B run files as runs, in the arms their job types name (the runs' ids added to names two runs share); with
    several paths (each run's wandb/ folder), their runs together."""
    runs = [r for p in paths for r in _runs_of("wandb", p, read_wandb_runs)]
    return tracked(runs, id_chars=64, prefix_names=False)


def devices(p: Path, fmt: str) -> list[str | None]:
    """The device each run of a tracker copy trained on, as tagged (None where untagged)."""
    runs = read_mlflow(p) if fmt == "mlflow" else read_wandb(p)
    return list(runs.devices.values())

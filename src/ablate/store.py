"""Files on disk: the sweep and run-directory layout, atomic writes, and the metrics JSONL contract.

    sweeps/<sweep>/ledger.jsonl                 append-only launch events (launch.py)
    sweeps/<sweep>/runs/<run_id>/config.yaml    the resolved config of the run
    sweeps/<sweep>/runs/<run_id>/run.json       run_id, arm_id, overrides, status, job_id, times, error, logs
    sweeps/<sweep>/runs/<run_id>/metrics.jsonl  one JSON object per evaluation (METRICS below)
    sweeps/<sweep>/runs/<run_id>/ckpt/          checkpoints (train/)
    sweeps/<sweep>/runs/<run_id>/logs/          logs

Every writer here is crash-safe: whole files are replaced atomically (write to a temp file, fsync,
rename), and JSONL appends write one complete line per call, so a reader sees either the old or the new
state, at worst a torn *last* line, which `read_jsonl` skips.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

# The metric names, documented in one place (design.md §4). Required ones first.
METRICS: dict[str, str] = {
    "step": "optimizer steps taken so far",
    "gpu_hours": "cumulative device-hours: wall-clock of the run x devices it holds (a CPU run counts 1)",
    "flops": "cumulative estimated training + generation FLOPs (6*params*trained tokens + 2*params*generated tokens)",
    "samples": "cumulative completions generated for training",
    "val_pass_rate": "held-out pass rate, mean@k over the validation split at the recipe's temperature",
    "train_reward": "mean reward of the training completions since the previous evaluation",
    "truncation_rate": "share of training completions that hit the max length since the previous evaluation",
    "mean_response_len": "mean completion length in tokens since the previous evaluation",
    "entropy": "mean per-token entropy of the policy on its own samples",
    "is_clip_frac": "share of tokens whose IS ratio was clipped (or capped, for CISPO)",
    "zero_variance_frac": "share of prompt groups dropped because all their rewards were equal",
    "pool_size": "prompts still in the no-positive-resampling pool",
    "lag": "policy versions between the generating and the training weights (off-policy lag)",
    "grad_norm": "gradient norm before clipping, mean since the previous evaluation",
    "wall_s": "wall-clock seconds since the run started (resumes included)",
}
REQUIRED_METRICS = ("step", "gpu_hours", "flops", "samples", "val_pass_rate")
TRUNCATION_WARN = 0.10  # ScaleRL §3: truncation above 10% of completions signals instability

RUN_STATES = ("pending", "running", "done", "failed", "preempted", "diverged")


def cache_dir() -> Path:
    """Machine-wide cache (warmed-up checkpoints, composed recipes): $ABLATE_CACHE or ~/.cache/ablate."""
    return Path(os.environ.get("ABLATE_CACHE") or Path.home() / ".cache" / "ablate")


def cpu_count() -> int:
    """Cores this process may use (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def sweep_dir(root: Path | str, sweep: str) -> Path:
    return Path(root) / sweep


def run_dir(root: Path | str, sweep: str, run_id: str) -> Path:
    return Path(root) / sweep / "runs" / run_id


def atomic_write_text(path: Path | str, text: str) -> None:
    """Replace `path` with `text` so that readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path | str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path | str) -> Any:
    return json.loads(Path(path).read_text())


def update_json(path: Path | str, **fields: Any) -> dict[str, Any]:
    """Read-modify-write of a JSON object file (run.json) with an atomic replace; a missing or torn file is {}."""
    try:
        data = read_json(path)
    except (FileNotFoundError, json.JSONDecodeError):
        data = {}
    data.update(fields)
    write_json(path, data)
    return data


def append_jsonl(path: Path | str, *records: dict[str, Any]) -> None:
    """Append records, one line each, with a single write() call, then fsync (a batch costs one flush).

    A line is written whole by O_APPEND, so concurrent appenders never interleave inside a line; if
    the writer dies mid-write, only the last line can be torn, and `read_jsonl` skips it. A torn tail
    is first terminated with a newline so that the next record starts on a line of its own.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = "".join(json.dumps(r, sort_keys=True, default=_json_default, allow_nan=False) + "\n" for r in records)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def iter_jsonl(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file, skipping blank lines and torn (unparsable) lines."""
    path = Path(path)
    if not path.exists():
        return
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line left by a crash mid-append
            if isinstance(rec, dict):
                yield rec


def jsonl_rows(path: Path | str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a user's JSONL file; strict, unlike `iter_jsonl`: a line
    that is not a JSON object is a UserError naming `path:line`."""
    from ablate.errors import UserError

    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{lineno}: not valid JSON ({e.msg}); fix or delete that line") from None
            if not isinstance(row, dict):
                raise UserError(f"{path}:{lineno}: expected a JSON object per line, got {type(row).__name__}")
            yield lineno, row


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    return list(iter_jsonl(path))


def write_jsonl(path: Path | str, records: Iterable[dict[str, Any]]) -> None:
    """Rewrite a whole JSONL file atomically (used to truncate metrics back to a checkpoint on resume)."""
    text = "".join(json.dumps(r, sort_keys=True, default=_json_default) + "\n" for r in records)
    atomic_write_text(path, text)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy / torch scalars
        v = o.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")

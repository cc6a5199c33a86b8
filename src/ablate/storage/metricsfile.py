"""A run's metrics.jsonl: the metric names every trainer writes and every reader reads (`METRICS`), and how a run
directory reads, appends to and cuts back the file (`MetricsFile`, a part of `RunDir`), feeding its trackers as it
goes (`MetricsMirror`). A torn last line is a crash mid-append and is skipped; any other damage is one UserError
naming the file and the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from ablate.errors import ErrorKind, UserError
from ablate.storage import fs, store

# The metric names, documented in one place: what every trainer writes to metrics.jsonl and every reader reads.
METRICS: dict[str, str] = {
    "step": "optimizer steps taken so far",
    "gpu_hours": "cumulative device-hours: wall-clock of the run x devices it holds (a CPU run counts 1)",
    "flops": "cumulative estimated training + generation FLOPs (6*params*trained tokens + 2*params*generated tokens)",
    "samples": "cumulative completions generated for training",
    "val_pass_rate": "held-out pass rate, mean@k over the validation split at the recipe's temperature",
    "val_n": "graded samples behind val_pass_rate (validation prompts x k)",
    "train_reward": "mean reward of the training completions since the previous evaluation",
    "truncation_rate": "share of training completions that hit the max length since the previous evaluation",
    "mean_response_len": "mean completion length in tokens since the previous evaluation",
    "entropy": "mean per-token entropy of the policy on its own samples",
    "is_clip_frac": "share of trained tokens whose IS ratio was clipped (or capped, for CISPO)",
    "zero_variance_frac": "share of prompt groups dropped because all their rewards were equal",
    "pool_size": "prompts still in the no-positive-resampling pool",
    "lag": "policy versions between the generating and the training weights (off-policy lag)",
    "grad_norm": "gradient norm before clipping, mean since the previous evaluation",
    "wall_s": "wall-clock seconds since the run started (resumes included)",
}
REQUIRED_METRICS = ("step", "gpu_hours", "flops", "samples", "val_pass_rate")
COMPUTE_AXES = ("gpu_hours", "flops", "samples", "step")
TRUNCATION_WARN = 0.10  # ScaleRL §3: truncation above 10% of completions signals instability


class MetricsMirror(Protocol):
    """What follows metrics.jsonl as it is written: the trackers of a run (ablate.track.fanout.FanOut)."""

    def rewind(self, step: int) -> None:
        """metrics.jsonl was cut back to the lines with step <= `step` (-1: emptied), as a run resumes."""
        ...

    def append(self, record: dict[str, Any]) -> None:
        """A line was appended to metrics.jsonl."""
        ...


class MetricsFile:
    """The metrics.jsonl side of `ablate.storage.rundir.RunDir`: every path goes through the directory's checked
    `at`, and every write through its `guard` (the directory is still this run's)."""

    metrics_path: Path
    mirror: MetricsMirror | None

    def at(self, path: Path) -> Path:
        raise NotImplementedError

    def guard(self) -> None:
        raise NotImplementedError

    def make(self, folder: Path | None = None) -> Path:
        raise NotImplementedError

    def metric_lines(self) -> list[tuple[int, dict[str, Any]]]:
        """(line number, record) of metrics.jsonl, in file order. A torn last line (a crash mid-append) is skipped;
        any other line that is not a JSON object is damage, reported as a UserError naming the file and line."""
        try:
            with fs.safe_open(self.at(self.metrics_path), "rb") as f:
                raw = f.read().split(b"\n")
        except FileNotFoundError:
            return []
        while raw and not raw[-1].strip():
            raw.pop()
        out = []
        for i, line in enumerate(raw, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                if i == len(raw):
                    continue  # the torn tail of a crash mid-append
                what = "not UTF-8" if isinstance(e, UnicodeDecodeError) else "not valid JSON"
                raise UserError(
                    f"{self.metrics_path}:{i}: {what}; the file is damaged: fix or delete that line",
                    kind=ErrorKind.FILE,
                ) from None
            if not isinstance(rec, dict):
                raise UserError(
                    f"{self.metrics_path}:{i}: expected a JSON object per line, got {type(rec).__name__}",
                    kind=ErrorKind.FILE,
                )
            out.append((i, rec))
        return out

    def metrics(self) -> list[dict[str, Any]]:
        """The evaluation records, in file order (see `metric_lines`)."""
        return [rec for _, rec in self.metric_lines()]

    def last_metrics(self, tail_bytes: int = 8192) -> dict[str, Any] | None:
        """The last complete record, reading only the file's tail (status over 1,000 runs stays fast)."""
        try:
            with fs.safe_open(self.at(self.metrics_path), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - tail_bytes))
                lines = f.read().splitlines()
        except FileNotFoundError:
            return None
        for line in reversed(lines):
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(rec, dict):
                return rec
        return None

    def append_metrics(self, record: dict[str, Any]) -> None:
        """One metrics line, then the same line to the `mirror` (the run's trackers) when there is one."""
        self.guard()
        self.make()
        store.append_jsonl(self.at(self.metrics_path), record)
        if self.mirror is not None:
            self.mirror.append(record)

    def keep_metrics_until(self, step: int) -> list[dict[str, Any]]:
        """Rewrite metrics.jsonl (atomically) keeping the records with step <= `step`: lines written after a
        checkpoint belong to work a resumed run redoes. Damaged lines are dropped too. Returns what was kept."""
        self.guard()
        kept = [
            r
            for r in store.read_jsonl(self.at(self.metrics_path))
            if isinstance(r.get("step"), int) and r["step"] <= step
        ]
        store.write_jsonl(self.at(self.metrics_path), kept)
        if self.mirror is not None:  # the trackers learn where this attempt resumes, even if it writes no line
            self.mirror.rewind(step)
        return kept

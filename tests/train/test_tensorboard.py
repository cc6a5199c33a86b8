"""`--tensorboard` (the alias of `--track tensorboard`, ablate.track.tensorboard): a run's metrics lines mirrored to
TensorBoard event files in <run>/tb/, read back with TensorBoard's own loader; after a crash and a resume,
TensorBoard shows each step once, as metrics.jsonl does. `--track tensorboard` itself, beside a failing tracker:
tests/train/test_trackers.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.storage import store
from jobs import SMALL_TRAIN, until

RECIPE = RECIPES_DIR / "base.yaml"


def _steps(out: Path) -> list[int]:
    path = out / "metrics.jsonl"
    return [r["step"] for r in store.read_jsonl(path)] if path.exists() else []


def _scalars(out: Path, tag: str) -> list[tuple[int, float]]:
    ea = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0})
    ea.Reload()
    return [(e.step, e.value) for e in ea.Scalars(tag)]


def test_mirror_shows_each_step_once_after_a_crash_and_resume(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "ablate",
        "train",
        str(RECIPE),
        *SMALL_TRAIN,
        "train.max_steps=1000000",
        "train.eval_every=2",
        "train.checkpoint_every=1000000",
        "--tensorboard",
        "--run-dir",
        str(out),
    ]

    def attempt(past: int, sig: signal.Signals) -> None:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        until(
            lambda: p.poll() is not None or (_steps(out) and _steps(out)[-1] >= past), f"an evaluation past step {past}"
        )
        assert p.poll() is None, p.communicate()[1][-2000:]  # still running: it did not fail on the way
        p.send_signal(sig)
        _, err = p.communicate()
        assert p.returncode == (128 + sig if sig == signal.SIGTERM else -sig), err[-2000:]

    attempt(4, signal.SIGTERM)  # a stop: the one checkpoint, at the step it came
    stopped = store.read_json(out / "run.json")["step"]
    attempt(stopped + 6, signal.SIGKILL)  # a crash: what it wrote after `stopped` is redone by the next attempt
    crashed = _steps(out)[-1]
    attempt(crashed + 4, signal.SIGTERM)
    assert store.read_json(out / "run.json")["resumed_from"] == stopped
    recs = store.read_jsonl(out / "metrics.jsonl")
    for tag in ("val_pass_rate", "samples", "gpu_hours"):
        tb = _scalars(out, tag)
        assert [s for s, _ in tb] == [r["step"] for r in recs], tag  # every step once, none from the crashed attempt
        assert all(abs(v - r[tag]) <= 1e-6 * max(1.0, abs(r[tag])) for (_, v), r in zip(tb, recs)), tag
    # and the mirror is a curve `ablate fit` reads (TensorBoard run folders are one of its inputs)
    res = CliRunner().invoke(app, ["fit", str(out / "tb"), "--x", "step", "--n-boot", "0", "--json"])
    assert res.exit_code == 0, res.output


def test_without_the_flag_nothing_is_mirrored(tmp_path):
    res = CliRunner().invoke(
        app,
        [
            "train",
            str(RECIPE),
            *SMALL_TRAIN,
            "train.max_steps=2",
            "train.eval_every=1",
            "--run-dir",
            str(tmp_path / "run"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert _steps(tmp_path / "run") == [0, 1, 2] and not (tmp_path / "run" / "tb").exists()

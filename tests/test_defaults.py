"""Defaults that never mislead (issue 27, item 5): the target `--to` picks without one, the compute axis `--x auto`
picks, the word for a target inside the fitted window, and the wall-clock warning."""

import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from ablate.analysis.choices import CPU_AXIS_TEXT, choose_axis, choose_target, launch_axis, wall_clock_note
from ablate.cli import app
from ablate.curves.inputs import curves_from_sweep
from ablate.curves.tables import write_csv
from ablate.fit.curve import Curve
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import store

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

runner = CliRunner()
CPU_SHAPE = dict(a=0.61, b=1.92, c_mid=0.0079, c_max=0.05)
"""The ScaleRL 8B curve's shape on a CPU run's clock: a twentieth of a GPU-hour in all."""


def line(top: float, run: str = "r") -> Curve:
    return Curve(run=run, group=None, x=np.linspace(0.0, top, 11), y=np.linspace(0.3, 0.6, 11))


def cpu_sweep(root, name: str, devices=("cpu",), slow_seed: float = 1.0) -> Path:
    """Two arms of two seeds written as a sweep whose runs recorded `devices` in run.json (cycled over the runs);
    seed 0's clock runs `slow_seed` times slower for the same samples (a machine busy while it ran)."""
    arms = {}
    for i, arm in enumerate(("loss=cispo", "loss=grpo")):
        seeds = [synthetic_curve(**CPU_SHAPE, seed=10 * i + s) for s in range(2)]
        seeds[0] = replace(seeds[0], x=seeds[0].x * slow_seed)
        arms[arm] = seeds
    sweep = write_sweep(root, name, arms, baseline="loss=cispo")
    for k, run in enumerate(sorted((sweep / "runs").iterdir())):
        store.update_json(run / "run.json", device=devices[k % len(devices)])
    return sweep


def test_the_papers_target_only_for_gpu_hours_within_reach():
    assert choose_target([line(8000)], "gpu_hours", None, None) == (
        16000.0,
        "16000 gpu_hours (the paper's scale; no --to)",
    )
    # a CPU run's hundredths of a GPU-hour: 16000 would be 320,000x the data, so twice the data instead
    assert choose_target([line(0.05)], "gpu_hours", None, None) == (
        0.1,
        "0.1 gpu_hours: twice the largest compute fitted (0.05; no --to)",
    )
    assert choose_target([line(256000), line(1000, "short")], "samples", None, None) == (
        512000.0,
        "512000 samples: twice the largest compute fitted (256000; no --to)",
    )
    # --fit-until cuts what is fitted: twice the last point fitted (51200), not the option's value; a readable
    # number, said to be about twice
    target, text = choose_target([line(256000)], "samples", None, 56789.0)
    assert target == 102000.0 and text == "102000 samples: about twice the largest compute fitted (51200; no --to)"


def test_a_given_target_is_kept_and_called_an_interpolation_inside_the_window():
    assert choose_target([line(256000)], "samples", 512000.0, None) == (512000.0, "--to 512000")
    target, text = choose_target([line(256000)], "samples", 16000.0, None)
    assert target == 16000.0 and "inside the fitted window" in text and "interpolation" in text


def test_extrapolate_calls_a_target_inside_the_window_an_interpolation(tmp_path):
    path = tmp_path / "curve.csv"
    write_csv([synthetic_curve(a=0.61, b=1.92, c_mid=2542, seed=0, run="a")], path)
    res = runner.invoke(app, ["extrapolate", str(path), "--to", "8000", "--n-boot", "100"])
    assert res.exit_code == 0, res.output
    assert "interpolated to 8000" in res.output and "projected" not in res.output
    assert "inside the fitted window" in res.output
    res = runner.invoke(app, ["extrapolate", str(path), "--to", "8000", "--n-boot", "0", "--json"])
    out = json.loads(res.stdout)
    assert out["interpolated"] is True and out["to"] == 8000 and "interpolation" in out["target_source"]
    res = runner.invoke(app, ["extrapolate", str(path), "--to", "32000", "--n-boot", "0"])
    assert res.exit_code == 0, res.output
    assert "projected to 32000" in res.output and "interpolated" not in res.output


def test_fit_and_extrapolate_say_which_target_without_to(tmp_path):
    path = tmp_path / "cpu.csv"
    write_csv([synthetic_curve(**CPU_SHAPE, seed=0, run="cpu")], path)
    for cmd in ("fit", "extrapolate"):
        res = runner.invoke(app, [cmd, str(path), "--n-boot", "0"])
        assert res.exit_code == 0, res.output
        assert "target: 0.1 gpu_hours: twice the largest compute fitted (0.05; no --to)" in res.output


def test_auto_axis_is_samples_for_cpu_runs_and_gpu_hours_elsewhere(tmp_path):
    cpu = cpu_sweep(tmp_path, "cpu")
    assert choose_axis([cpu], "auto") == ("samples", CPU_AXIS_TEXT)
    assert choose_axis([cpu / "runs" / sorted(p.name for p in (cpu / "runs").iterdir())[0]], "auto")[0] == "samples"
    assert choose_axis([cpu], "gpu_hours") == ("gpu_hours", None)  # asked for: kept
    assert choose_axis([cpu_sweep(tmp_path, "gpu", devices=("cuda:0",))], "auto") == ("gpu_hours", None)
    # a run that ran on CPU among GPU runs: their gpu_hours are not one clock
    assert choose_axis([cpu_sweep(tmp_path, "mixed", devices=("cuda:0", "cpu"))], "auto")[0] == "samples"
    assert choose_axis([write_sweep(tmp_path, "unknown", {"a": [line(10)]})], "auto") == ("gpu_hours", None)
    table = tmp_path / "c.csv"
    write_csv([line(10)], table)
    assert choose_axis([table], "auto") == ("gpu_hours", None)
    assert choose_axis([table], "auto", {"samples": 128.0, "gpu_hours": None})[0] == "samples"


def test_prune_axis_follows_where_the_runs_will_train():
    def runs(device, executor="local"):
        return [
            SimpleNamespace(
                config=SimpleNamespace(train=SimpleNamespace(device=device), launcher=SimpleNamespace(name=executor))
            )
        ]

    assert launch_axis(runs("cpu"), None)[0] == "samples"
    assert launch_axis(runs("cuda"), None)[0] == "gpu_hours"
    assert launch_axis(runs("auto", "slurm"), None)[0] == "gpu_hours"
    import torch

    assert launch_axis(runs("auto"), "local")[0] == ("gpu_hours" if torch.cuda.is_available() else "samples")


def test_the_wall_clock_warning_names_a_seed_whose_clock_ran_3x_slower(tmp_path):
    busy, _ = curves_from_sweep(cpu_sweep(tmp_path, "busy", slow_seed=3.0))
    assert all(set(c.facts.end) == {"gpu_hours", "samples", "step", "flops"} for c in busy)
    note = wall_clock_note(busy, "gpu_hours")
    assert note is not None and "3.0x in gpu_hours per sample in 2 arms" in note and "--x samples" in note
    assert wall_clock_note(busy, "samples") is None  # a load-independent axis: nothing to warn about
    calm, _ = curves_from_sweep(cpu_sweep(tmp_path, "calm", slow_seed=1.2))
    assert wall_clock_note(calm, "gpu_hours") is None


def test_rank_with_no_options_ranks_a_cpu_sweep(tmp_path):
    """The issue's case: a CPU sweep ranked with no --x and no --to was refused (16000 GPU-hours is 10^5 x the
    data). Now it ranks on samples at twice the samples fitted, and says so."""
    sweep = cpu_sweep(tmp_path, "loss", slow_seed=3.0)
    res = runner.invoke(app, ["rank", str(sweep), "--json", "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["x"] == "samples" and out["target"] == pytest.approx(256000)
    assert out["target_source"] == "256000 samples: twice the largest compute fitted (128000; no --to)"
    assert out["axis_note"] == CPU_AXIS_TEXT and len(out["arms"]) == 2
    res = runner.invoke(app, ["rank", str(sweep), "--x", "gpu_hours", "--json", "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["target"] == pytest.approx(0.3) and "wall-clock" in out["axis_note"]  # seed 0 ran to 0.15

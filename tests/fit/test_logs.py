"""Curves from other tools' logs (`ablate.curves.logs`): TensorBoard, W&B (offline run, wide and long CSV exports),
TRL's trainer_state.json and verl's JSONL and console logs, each written by the real library or in the exact shape the
tool writes. Each is detected by content, read through `ablate fit|rank` with --x step (or compute made from steps),
and every bad input is one `error[KIND]:` line."""

from __future__ import annotations

import csv
import json
import math
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.curves import logs
from ablate.curves.inputs import load_inputs
from ablate.curves.tables import write_csv
from ablate.errors import ErrorKind
from ablate.fit.synthetic import synthetic_curve
from jobs import error_kind

runner = CliRunner()
TAG = "val-core/gsm8k/reward/mean@1"
STEPS = list(range(0, 300, 10))  # 30 evaluations


def rate(step: float, a: float = 0.7) -> float:
    """A sigmoid-shaped pass rate in steps: R0 0.2, ceiling a, C_mid 100 steps."""
    return 0.2 if step == 0 else round(0.2 + (a - 0.2) / (1 + (100 / step) ** 2), 4)


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def ok_json(*args) -> dict:
    res = cli(*args, "--json", "--n-boot", "0")
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.stdout)


def one_line_error(*args, kind: ErrorKind) -> str:
    """`ablate ARGS` refused: exit 2, one `error[KIND]:` line of this `kind` on stderr, nothing on stdout. The caller
    checks the culprits it names."""
    res = cli(*args)
    assert res.exit_code == 2, (res.output, res.exception)
    assert res.stderr.startswith("error[") and res.stderr.count("\n") == 1, res.stderr
    assert error_kind(res.stderr) is kind, (kind, res.stderr)
    assert res.stdout == "" and "Traceback" not in res.output
    return res.stderr


# ---- the logs, written by the real libraries or as the tools write them -----------------------------------------


@pytest.fixture(scope="module")
def tb(tmp_path_factory):
    """Two runs, each a subfolder: the pass rate every 10 steps (also as a tensor-style scalar), the loss at others."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.util import tensor_util
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("tb") / "logs"
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for run, a in (("seedA", 0.7), ("seedB", 0.6)):
        w = SummaryWriter(str(root / run))
        for s in STEPS:
            w.add_scalar(TAG, rate(s, a), s)
            w.add_scalar("actor/loss", 1.0 / (s + 5), s + 5)
            tensor = Summary.Value(
                tag="val/tensor_rate", tensor=tensor_util.make_tensor_proto(rate(s, a)), metadata=scalars
            )  # as tf.summary (v2) writes scalars
            w._get_file_writer().add_summary(Summary(value=[tensor]), s)
        w.add_text("notes", "not a curve", 0)
        w.close()
    return root


@pytest.fixture(scope="module")
def wandb_offline(tmp_path_factory):
    """Two W&B offline runs written by wandb itself, in its wandb/ folder."""
    import wandb  # the `track` extra, which `make test` installs: a missing client fails, never skips

    root = tmp_path_factory.mktemp("wb")
    mp = pytest.MonkeyPatch()
    for k, v in {
        "WANDB_SILENT": "true",
        "WANDB_MODE": "offline",
        "WANDB_CONFIG_DIR": str(root / "cfg"),
        "WANDB_CACHE_DIR": str(root / "cache"),
        "WANDB_DATA_DIR": str(root / "data"),
    }.items():
        mp.setenv(k, v)
    try:
        for name, a in (("dapo-run", 0.7), ("grpo-run", 0.6)):
            run = wandb.init(mode="offline", dir=str(root), project="ablate-test", name=name)
            for s in STEPS:
                run.log({TAG: rate(s, a), "actor": {"loss": 1.0 / (s + 1)}}, step=s)
                run.log({"train/entropy": 0.5}, step=s + 5)
            run.finish()
        wandb.teardown()
    finally:
        mp.undo()
    return root / "wandb"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The file-shaped logs: W&B wide and long CSV exports, TRL output folder, verl JSONL and console log."""
    d = tmp_path_factory.mktemp("files")
    out = {}
    # W&B's panel export: Step, then per run the metric and its __MIN/__MAX; empty cells: not logged at that step
    wide = d / "wandb_export_2025-01-01T00_00_00.csv"
    with open(wide, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["Step"] + [f"{r} - {TAG}{s}" for r in ("runA", "runB") for s in ("", "__MIN", "__MAX")])
        for s in STEPS + [305]:
            cells = []
            for r, a in (("runA", 0.7), ("runB", 0.6)):
                logged = s != 305 and (r == "runA" or s % 20 == 0)
                cells += [rate(s, a), rate(s, a), rate(s, a)] if logged else ["", "", ""]
            w.writerow([s] + cells)
    out["wide"] = wide
    long_ = d / "history.csv"
    with open(long_, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "metric", "step", "value"])
        for s in STEPS:
            w.writerow(["runA", TAG, s, rate(s)])
            w.writerow(["runA", "train/loss", s + 5, 0.1])
    out["long"] = long_
    # TRL: train logs and eval logs interleaved as Trainer writes them; two checkpoints, the later one the longer
    trl = d / "grpo-out"
    for ckpt in (150, 290):
        hist = []
        for s in range(5, ckpt + 1, 5):
            hist.append(
                {"epoch": s / 300, "grad_norm": 0.5, "learning_rate": 1e-6, "loss": 0.01, "reward": 0.4, "step": s}
            )
            if s % 10 == 0:
                hist.append(
                    {
                        "epoch": s / 300,
                        "eval_loss": 0.02,
                        "eval_reward": rate(s),
                        "eval_runtime": 3.2,
                        "eval_samples_per_second": 10.0,
                        "eval_steps_per_second": 1.0,
                        "step": s,
                    }
                )
        hist.append({"epoch": ckpt / 300, "step": ckpt, "total_flos": 0.0, "train_loss": 0.01, "train_runtime": 100.0})
        state = {
            "best_global_step": None,
            "best_metric": None,
            "epoch": ckpt / 300,
            "eval_steps": 10,
            "global_step": ckpt,
            "log_history": hist,
            "logging_steps": 5,
            "max_steps": 300,
            "trial_name": None,
        }
        (trl / f"checkpoint-{ckpt}").mkdir(parents=True)
        (trl / f"checkpoint-{ckpt}" / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    out["trl"] = trl
    # verl: the file logger's JSONL, and the console logger's lines amid other output
    jl = d / "verl_gsm8k.jsonl"
    jl.write_text("".join(json.dumps({"step": s, "data": {TAG: rate(s), "actor/loss": 0.1}}) + "\n" for s in STEPS))
    out["verl-jsonl"] = jl
    log = d / "train.log"
    lines = ["(TaskRunner pid=42) Training from scratch", "INFO 01-01 vllm engine started"]
    for s in STEPS:
        lines.append(f"(TaskRunner pid=42) step:{s} - {TAG}:{rate(s)} - actor/loss:np.float64(0.1) - timing_s/gen:12.5")
        lines.append(f"Training Progress: {s}/300")
    log.write_text("\n".join(lines) + "\n")
    out["verl-log"] = log
    return out


CASES = [  # (log, expected format, runs, points per run, y)
    ("tb", "tensorboard", {"seedA": 30, "seedB": 30}, TAG),
    ("wide", "wandb-csv", {"runA": 30, "runB": 15}, TAG),
    ("long", "wandb-csv", {"runA": 30}, TAG),
    ("wandb", "wandb", {"dapo-run": 30, "grpo-run": 30}, TAG),
    ("trl", "trl", {"grpo-out": 29}, "eval_reward"),
    ("verl-jsonl", "verl", {"verl_gsm8k": 30}, TAG),
    ("verl-log", "verl", {"train": 30}, TAG),
]


@pytest.fixture
def logs_at(tb, files, request):
    def at(name):
        if name == "tb":
            return tb
        if name == "wandb":
            return request.getfixturevalue("wandb_offline")
        return files[name]

    return at


# ---- detection and reading ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fmt, runs, y", CASES, ids=[c[0] for c in CASES])
def test_each_log_is_detected_and_fitted_by_step(logs_at, name, fmt, runs, y):
    path = logs_at(name)
    assert logs.detect(path) == fmt
    out = ok_json("fit", path, "--x", "step", "--y", y)
    at0 = name != "trl"  # TRL does not evaluate before the first step: R0 is fitted there
    assert {f["run"]: f["n_points"] for f in out["fits"]} == {r: n - at0 for r, n in runs.items()}  # R0 not fitted
    assert all(f["R0"] == pytest.approx(0.2, abs=0 if at0 else 0.05) for f in out["fits"])
    curves, _ = load_inputs([path], x="_step", y=y)  # the alias of step
    for c in curves:
        assert c.group == c.run and c.n is None and len(c.x) == runs[c.run]
        a = 0.6 if c.run in ("seedB", "runB", "grpo-run") else 0.7
        assert np.all(np.diff(c.x) > 0) and c.x[0] == (0 if at0 else 10)
        np.testing.assert_allclose(
            c.y, [rate(s, a) for s in c.x]
        )  # TensorBoard keeps float32: read back as the decimal written


def test_tensorboard_single_event_file_and_tensor_scalars(tb):
    (event,) = (tb / "seedA").glob("events.out.tfevents.*")
    assert logs.detect(event) == "tensorboard"
    (c,) = load_inputs([event], x="step", y="val/tensor_rate")[0]
    assert c.run == "seedA" and len(c.x) == 30
    np.testing.assert_allclose(c.y, [rate(s) for s in STEPS])


def test_trl_reads_the_highest_checkpoint_or_the_file(files):
    (c,) = load_inputs([files["trl"]], x="step", y="eval_reward")[0]
    assert c.x[-1] == 290
    (c,) = load_inputs([files["trl"] / "checkpoint-150" / "trainer_state.json"], x="step", y="eval_reward")[0]
    assert c.run == "grpo-out" and c.x[-1] == 150 and c.x[0] == 10


def test_format_can_be_forced_and_a_wrong_one_is_one_line(files, tb):
    assert ok_json("fit", files["verl-log"], "--from", "verl", "--x", "step", "--y", TAG)["fits"][0]["run"] == "train"
    assert len(ok_json("fit", tb, "--from", "tensorboard", "--x", "step", "--y", TAG)["fits"]) == 2
    # the file, the format forced on it, and the --from it looks like
    err = one_line_error("fit", files["wide"], "--from", "tensorboard", "--x", "step", "--y", TAG, kind=ErrorKind.FILE)
    assert str(files["wide"]) in err and "TensorBoard" in err and "--from wandb-csv" in err
    err = one_line_error("fit", tb, "--from", "trl", "--x", "step", "--y", TAG, kind=ErrorKind.FILE)
    assert str(tb) in err and "trainer_state.json" in err and "--from tensorboard" in err
    err = one_line_error("fit", files["verl-jsonl"], "--from", "wandb", "--x", "step", kind=ErrorKind.FILE)
    assert str(files["verl-jsonl"]) in err and "--from verl" in err
    for alias in ("table", "csv", "jsonl"):  # the names users reach for first read a table too
        err = one_line_error("fit", files["long"], "--from", alias, kind=ErrorKind.FILE)
        assert "'gpu_hours'" in err and "run, metric, step, value" in err and "--x" in err
    err = one_line_error("fit", tb, "--from", "magic", kind=ErrorKind.SETTING)
    assert "--from magic" in err and "auto, table, tensorboard" in err


def test_format_naming_an_input_format_still_reads_it_and_says_it_is_now_from(files, tb, wandb_offline):
    """--format named the input format before it named the output: an input format's name there is read as
    --from, with a one-line note on stderr; an unknown name or two input formats are one error line."""
    for args in (
        ["rank", wandb_offline, "--format", "wandb", "--x", "step", "--y", TAG, "--baseline", "dapo-run"],
        ["fit", files["verl-log"], "--format", "verl", "--x", "step", "--y", TAG],
    ):
        res = cli(*args, "--json", "--n-boot", "50", "--to", "400")
        assert res.exit_code == 0, (res.output, res.exception)
        note = f"note: --format {args[3]} names the input format, now --from {args[3]}"
        assert res.stderr.startswith(note) and res.stderr.count("\n") == 1, res.stderr
        assert len(json.loads(res.stdout)["arms" if args[0] == "rank" else "fits"]) == (2 if args[0] == "rank" else 1)
    err = one_line_error("rank", tb, "--format", "csv", "--x", "step", "--y", TAG, kind=ErrorKind.SETTING)
    assert "--format csv" in err and "table, json, md" in err and "--from" in err
    err = one_line_error(
        "fit", tb, "--format", "verl", "--from", "tensorboard", "--x", "step", "--y", TAG, kind=ErrorKind.SETTING
    )
    assert "--format verl" in err and "--from tensorboard" in err
    err = one_line_error("fit", tb, "--format", "md", kind=ErrorKind.SETTING)
    assert "--format md" in err and "table, json" in err
    err = one_line_error("rank", tb, "--format", "md", "--json", kind=ErrorKind.SETTING)
    assert "--json" in err and "--format md" in err


def test_steps_made_into_compute(tb, files):
    (a, _b) = load_inputs([tb], x="samples", y=TAG, per_step={"samples": 256})[0]
    np.testing.assert_array_equal(a.x, np.array(STEPS) * 256.0)
    out = ok_json("fit", tb, "--x", "samples", "--samples-per-step", "256", "--y", TAG)
    assert [f["n_points"] for f in out["fits"]] == [29, 29]
    out = ok_json("fit", files["verl-log"], "--gpu-hours-per-step", "0.5", "--y", TAG, "--to", "100")
    assert out["fits"][0]["window"][1] == pytest.approx(290 * 0.5)
    sweep_like = files["wide"].parent / "curves.csv"
    write_csv([synthetic_curve(a=0.6, b=2.0, c_mid=2000.0, seed=0, n_points=20)], sweep_like)
    err = one_line_error("fit", sweep_like, "--samples-per-step", "8", kind=ErrorKind.SETTING)
    assert "--samples-per-step" in err and str(sweep_like) in err and "--x" in err
    err = one_line_error("fit", tb, "--x", "samples", "--samples-per-step", "0", "--y", TAG, kind=ErrorKind.SETTING)
    assert "--samples-per-step 0" in err and "> 0" in err


def test_missing_metric_lists_what_is_logged(tb, files):
    err = one_line_error("fit", tb, "--x", "step", "--y", "val/acc", kind=ErrorKind.DATA)
    assert "'seedA'" in err and "'val/acc'" in err and "--y" in err
    assert TAG in err and "actor/loss" in err and "val/tensor_rate" in err and "notes" not in err  # what it logs
    err = one_line_error(
        "fit", files["verl-log"], "--y", TAG, kind=ErrorKind.DATA
    )  # the default --x gpu_hours: not in a verl log
    assert "'gpu_hours'" in err and "--x step" in err and "--samples-per-step" in err
    err = one_line_error("fit", files["long"], "--x", "train/loss", "--y", TAG, kind=ErrorKind.DATA)
    assert "'train/loss'" in err and f"'{TAG}'" in err and "--x step" in err


def test_percentages_and_decreasing_x_are_one_line(tmp_path):
    log = tmp_path / "pct.log"
    log.write_text("".join(f"step:{s} - acc:{100 * rate(s)} - t:{300 - s}\n" for s in STEPS))
    err = one_line_error("fit", log, "--x", "step", "--y", "acc", kind=ErrorKind.FILE)
    assert "'pct'" in err and "step 0" in err and "'acc'" in err and "20" in err and "[0, 1]" in err
    log.write_text("".join(f"step:{s} - acc:{rate(s)} - t:{300 - s}\n" for s in STEPS))
    err = one_line_error("fit", log, "--x", "t", "--y", "acc", kind=ErrorKind.FILE)
    assert "'pct'" in err and "step 10" in err and "'t'" in err and "290" in err and "300" in err


def test_rank_over_two_tensorboard_runs_and_several_inputs(tb, files):
    res = cli("rank", tb, "--x", "step", "--y", TAG, "--baseline", "seedA", "--to", "400", "--n-boot", "50", "--json")
    assert res.exit_code == 0, res.output
    arms = {a["arm"]: a for a in json.loads(res.stdout)["arms"]}
    assert set(arms) == {"seedA", "seedB"}
    curves, _ = load_inputs([tb, files["verl-jsonl"]], x="step", y=TAG)
    assert [c.group for c in curves] == ["logs:seedA", "logs:seedB", "verl_gsm8k.jsonl:verl_gsm8k"]


def test_group_is_refused_and_unknown_files_say_so(tb, tmp_path):
    err = one_line_error("fit", tb, "--x", "step", "--y", TAG, "--group", "arm", kind=ErrorKind.SETTING)
    assert "--group" in err and str(tb) in err
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    err = one_line_error("fit", junk, kind=ErrorKind.FILE)
    assert str(junk) in err and "--from" in err
    (tmp_path / "empty").mkdir()
    err = one_line_error("fit", tmp_path / "empty", kind=ErrorKind.FILE)
    assert str(tmp_path / "empty") in err and "runs/" in err and "metrics.jsonl" in err  # and what it looked for


def test_wandb_without_the_package_says_how_to_install(wandb_offline, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb.proto", None)
    err = one_line_error("fit", wandb_offline, "--x", "step", "--y", TAG, kind=ErrorKind.ENVIRONMENT)
    assert "pip install wandb" in err


def test_wandb_nested_keys_and_offline_run_folder(wandb_offline):
    run_dir = sorted(d for d in wandb_offline.iterdir() if d.name.startswith("offline-run-"))[0]
    assert logs.detect(run_dir) == "wandb"
    (c,) = load_inputs([run_dir], x="step", y="actor.loss")[0]
    np.testing.assert_allclose(c.y, [1.0 / (s + 1) for s in STEPS])
    assert not math.isnan(c.y.sum())

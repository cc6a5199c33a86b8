"""A sweep's tracker copies read back as the sweep: the runs of a sweep mirrored by the real W&B (offline) and MLflow
(SQLite) trackers, with the context a sweep's run gives them, rank to the same arms, baseline, compute axis and
verdicts as the sweep directory itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind
from ablate.fit.synthetic import synthetic_curve
from ablate.storage import store
from ablate.storage.rundir import sweep_run_dirs
from ablate.track.base import TrackContext, set_environment
from jobs import one_error

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

BASE = "loss=cispo"
ARMS = {BASE: (0.60, 2500.0), "loss=gspo": (0.68, 2500.0), "loss=dapo": (0.60, 2500.0)}


def _ctx(copy: Path, run_dir: Path, baseline: bool) -> TrackContext:
    info = store.read_json(run_dir / "run.json")
    arm = info["label"].rsplit(",seed=", 1)[0]
    options = SimpleNamespace(wandb_mode="offline", project="copies", entity=None, mlflow_uri=None)
    return TrackContext(
        run_dir=copy / "runs" / run_dir.name,
        sweep_dir=copy,
        sweep="loss",
        arm_id=info["arm_id"],
        arm_label=arm,
        run_id=run_dir.name,
        label=info["label"],
        config={"seed": int(info["label"].rsplit("=", 1)[1])},
        options=options,
        baseline=baseline,
        device="cpu",
    )


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """A CPU sweep of three arms x three seeds, and its copy as the W&B and MLflow trackers made it."""
    from ablate.track.mlflow import MlflowTracker
    from ablate.track.wandb import WandbTracker

    root = tmp_path_factory.mktemp("copies")
    arms = {
        arm: [synthetic_curve(a=a, b=1.9, c_mid=c_mid, c_max=16000, n_points=40, seed=10 * k + s) for s in range(3)]
        for k, (arm, (a, c_mid)) in enumerate(ARMS.items())
    }
    sweep = write_sweep(root, "loss", arms, baseline=BASE, val_n=True)
    copy = root / "copy"
    mp = pytest.MonkeyPatch()
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    mp.setenv("WANDB_MODE", "offline")
    set_environment(["wandb", "mlflow"])
    try:
        for rd in sweep_run_dirs(sweep):
            info = store.read_json(rd.info_path)
            store.write_json(rd.info_path, {**info, "device": "cpu"})  # what the trainer records as it starts
            ctx = _ctx(copy, rd.path, info["baseline"])
            for tracker in (WandbTracker(), MlflowTracker()):
                tracker.start(ctx, None)
                for record in store.read_jsonl(rd.metrics_path):
                    tracker.log(record)
                tracker.finish("done")
    finally:
        mp.undo()
    return sweep, copy


def _rank(*inputs: Path) -> dict:
    res = CliRunner().invoke(app, ["rank", *map(str, inputs), "--n-boot", "300", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_w_and_b_and_mlflow_copies_rank_as_the_sweep(mirrored):
    sweep, copy = mirrored
    own = _rank(sweep)
    assert own["x"] == "samples" and own["baseline"] == BASE  # a CPU sweep: ranked on samples
    verdicts = {a["arm"]: a["verdict"] for a in own["arms"]}
    assert verdicts["loss=gspo"] == "ceiling_up"  # a ranking that decides something, so that parity means it
    wandb_dirs = sorted((copy / "runs").glob("*/wandb"))
    assert len(wandb_dirs) == 9
    for inputs in ([copy / "mlflow.db"], wandb_dirs):
        got = _rank(*inputs)
        assert (got["x"], got["baseline"]) == (own["x"], own["baseline"]), inputs[0]
        assert {a["arm"]: a["verdict"] for a in got["arms"]} == verdicts, inputs[0]
        assert {a["arm"]: a["seeds"] for a in got["arms"]} == {a["arm"]: a["seeds"] for a in own["arms"]}
        for mine, theirs in zip(own["arms"], got["arms"]):  # the same points and graded samples: the same fits
            assert theirs["A"] == pytest.approx(mine["A"], rel=1e-6), inputs[0]
            assert theirs["A_ci"] == pytest.approx(mine["A_ci"], rel=1e-6), inputs[0]
            assert [n["eval_sd"] for n in theirs["noise"]] == [n["eval_sd"] for n in mine["noise"]]  # val_n too
            assert all(n["eval_sd"] for n in theirs["noise"]), inputs[0]


def test_a_copy_without_tags_is_read_as_any_other_tools_log(mirrored, tmp_path):
    """Runs that ablate did not mirror (no arm, baseline or device tags): each is its own arm, on gpu_hours."""
    from ablate.curves.tracked import Tracked, tracked
    from ablate.track.base import Logged

    runs = tracked([Logged("", "a", "1", steps={0.0: {"x": 1.0}}), Logged("", "a", "2")])
    assert isinstance(runs, Tracked) and set(runs) == {"a (1)", "a (2)"}
    assert runs.arms == {"a (1)": "a (1)", "a (2)": "a (2)"} and not runs.baseline
    assert set(runs.devices.values()) == {None}


def test_sweep_says_where_the_copies_are_and_its_rank_commands_paste(mirrored, tmp_path, monkeypatch):
    """`ablate sweep --track ...` ends with one line per tracker copy; the rank command each gives, pasted into a
    shell (its glob expanded there), ranks the copy as the sweep."""
    import shlex
    import subprocess

    from ablate.compose.resources import RECIPES_DIR
    from ablate.track.hints import copy_hints
    from jobs import TOY_JOB

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = ["sweep", str(RECIPES_DIR / "loss.yaml"), "--root", str(tmp_path), "-e", "debug", "--job", TOY_JOB]
    res = CliRunner().invoke(app, [*args, "--track", "mlflow", "--track", "wandb", "track.wandb_mode=offline"])
    assert res.exit_code == 0, res.output
    sdir = shlex.quote(str(tmp_path / "loss"))
    assert f"wandb sync {sdir}/runs/*/wandb/latest-run" in res.output
    assert f"ablate rank {sdir}/mlflow.db" in res.output and "mlflow ui --backend-store-uri sqlite:///" in res.output

    sweep, copy = mirrored
    own = {a["arm"]: a["verdict"] for a in _rank(sweep)["arms"]}
    tracks = [SimpleNamespace(to=["mlflow", "wandb"], wandb_mode="offline", mlflow_uri=None, project=None)]
    lines = copy_hints(tracks, copy, "loss")
    assert len(lines) == 2
    for line in lines:
        cmd = line.split("rank it with: " if "MLflow" in line else "rank its run files with: ")[1]
        shell = cmd.replace("ablate rank", f"{shlex.quote(sys.executable)} -m ablate rank", 1) + " --json"
        out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True).stdout
        assert {a["arm"]: a["verdict"] for a in json.loads(out)["arms"]} == own, cmd


def test_each_mlflow_store_gets_a_rank_command_that_names_it(tmp_path, monkeypatch):
    """A store given on the command line (track.mlflow_uri) is named by the command, which the shell's
    MLFLOW_TRACKING_URI would not find; one from that variable is found as it is; credentials are not printed."""
    from ablate.track.hints import copy_hints

    def hint(uri):
        return copy_hints([SimpleNamespace(to=["mlflow"], mlflow_uri=uri)], tmp_path / "loss", "loss")

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "my store.db"
    assert hint(f"sqlite:///{db}") == [
        f"MLflow copy: browse it with: mlflow ui --backend-store-uri 'sqlite:///{db}'; rank it with: ablate rank '{db}'"
    ]
    assert hint("http://host:5000")[0].endswith(
        "rank it with: MLFLOW_TRACKING_URI=http://host:5000 ablate rank mlflow:loss"
    )
    assert "secret" not in hint("http://me:secret@host:5000")[0]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://host:5000")
    assert hint(None)[0].endswith("rank it with: ablate rank mlflow:loss")


def test_a_sweep_that_submits_nothing_points_at_no_copy(tmp_path, monkeypatch):
    """Its runs ended before, perhaps untracked: there are no copies to point at (W&B's offline files, say)."""
    from ablate.compose.resources import RECIPES_DIR
    from jobs import TOY_JOB

    args = ["sweep", str(RECIPES_DIR / "loss.yaml"), "--root", str(tmp_path), "-e", "debug", "--job", TOY_JOB]
    assert CliRunner().invoke(app, args).exit_code == 0
    res = CliRunner().invoke(app, [*args, "--track", "wandb", "track.wandb_mode=offline"])
    assert res.exit_code == 0 and "nothing to submit" in res.output, res.output
    assert "W&B copy" not in res.output and "wandb sync" not in res.output


def test_a_bad_w_and_b_file_among_the_copies_is_one_line(tmp_path):
    """A run file without W&B's header (a run killed as it started) among several folders: one error line, exit 2,
    whichever path reads it first (the axis choice or the curves)."""
    for name in ("a", "b"):
        (tmp_path / name / "wandb").mkdir(parents=True)
        (tmp_path / name / "wandb" / f"run-{name}.wandb").write_bytes(b"not a W&B log")
    for extra in ([], ["--x", "step"]):
        res = CliRunner().invoke(app, ["rank", str(tmp_path / "a" / "wandb"), str(tmp_path / "b" / "wandb"), *extra])
        one_error(res, ErrorKind.FILE, str(tmp_path / "a" / "wandb" / "run-a.wandb"), "W&B")


def test_w_and_b_runs_ablate_did_not_mirror_stay_their_own_arms(tmp_path, monkeypatch):
    """Runs logged by another tool (a job type, no ablate tags): each its own arm, whatever its job type, and
    --samples-per-step still makes their compute axis."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    set_environment(["wandb"])
    for seed in range(2):
        run = wandb.init(dir=str(tmp_path / f"r{seed}"), project="other", job_type="train", name=f"r{seed}")
        for step in range(1, 6):
            run.log({"val_pass_rate": 0.1 * step}, step=step)
        run.finish()
    args = ["rank", str(tmp_path / "r0" / "wandb"), str(tmp_path / "r1" / "wandb"), "--samples-per-step", "256"]
    res = CliRunner().invoke(app, [*args, "--n-boot", "200", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["x"] == "samples" and got["baseline"] is None  # compute made from steps; no baseline tag
    assert sorted(a["arm"] for a in got["arms"]) == ["r0", "r1"] and all(a["seeds"] == 1 for a in got["arms"])


def test_with_x_auto_each_copy_is_read_once(mirrored, monkeypatch):
    """Choosing the axis reads a copy's device tags, and the fit its points: one read of the store (one query to a
    server), not two. Outside one command nothing is kept: a second command reads the copy afresh."""
    import ablate.track.mlflow_read as mlflow_read
    from ablate.curves import tracked

    _, copy = mirrored
    reads: list[Path] = []
    real = mlflow_read.read_back
    monkeypatch.setattr(mlflow_read, "read_back", lambda p: reads.append(p) or real(p))
    wandb_reads: list[Path] = []
    real_wandb = tracked.read_wandb_runs
    monkeypatch.setattr(tracked, "read_wandb_runs", lambda p: wandb_reads.append(p) or real_wandb(p))
    assert _rank(copy / "mlflow.db")["x"] == "samples"  # the axis came from the tags
    assert reads == [copy / "mlflow.db"]
    wandb_dirs = sorted((copy / "runs").glob("*/wandb"))
    assert _rank(*wandb_dirs)["x"] == "samples"
    assert sorted(wandb_reads) == wandb_dirs
    _rank(copy / "mlflow.db")
    assert len(reads) == 2

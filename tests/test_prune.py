"""`ablate sweep --prune`: the monitor stops a broken run of a real sweep (its truncation rate above 10% at three
evaluations in a row), the run ends `unstable` with its reason in run.json, the ledger, `ablate status` and
`ablate rank`, keeps its files, and `--resume-pruned` continues it from where it stopped.

Driven by state: the broken run is far too long to finish by itself; the monitor's stop is what ends it. The
decision rules themselves (broken, settled) are checked on their inputs below and, for settled arms, by
simulation in tests/fit/test_planning.py."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.sweep import load_sweep
from ablate.errors import ErrorKind
from ablate.launch.status import wait_for
from ablate.prune.monitor import Monitor, monitor_alive
from ablate.prune.rules import PruneSettings, broken
from ablate.storage import store
from ablate.storage.ledger import Ledger
from ablate.storage.rundir import RunDir
from jobs import GUARD, one_error, until
from test_launch_train import RECIPE, SMALL

runner = CliRunner()


def _sweep_file(tmp_path: Path) -> Path:
    path = tmp_path / "guarded.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "base": str(RECIPE),
                "baseline": "base",
                "seeds": [0],
                "overrides": SMALL + ["train.eval_every=5", "train.checkpoint_every=1000000"],
                "runs": [
                    {"label": "base", "overrides": ["train.max_steps=20"]},
                    # every completion cut at one token: truncated, from the first evaluation on; far too long to end
                    {
                        "label": "cut",
                        "overrides": ["length=none", "length.max_new_tokens=1", "train.max_steps=1000000"],
                    },
                ],
            }
        )
    )
    return path


def test_prune_stops_a_broken_run_and_resume_pruned_continues_it(tmp_path):
    path = _sweep_file(tmp_path)
    sweep = load_sweep(path)
    base, cut = (r.run_id for r in sweep.runs)
    res = runner.invoke(app, ["sweep", str(path), "--prune", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "prune monitor started" in res.output
    sdir = tmp_path / "guarded"
    got = wait_for(tmp_path, "guarded", [base, cut], timeout=GUARD)
    assert got[base].state == "done"
    st = got[cut]
    assert st.state == "unstable" and "truncation above 10% at 3 evaluations in a row" in st.reason
    rd = RunDir.of(tmp_path, "guarded", cut)
    info = store.read_json(rd.info_path)
    assert info["status"] == "unstable" and info["reason"] == st.reason
    assert not rd.stop_path.exists()  # obeyed: the state now lives in run.json and the ledger
    finished = [e for e in Ledger(sdir).events() if e["event"] == "finished" and e["run_id"] == cut]
    assert finished[-1]["status"] == "unstable" and finished[-1]["reason"] == st.reason
    decisions = store.read_jsonl(sdir / "prune" / "decisions.jsonl")
    assert [(d["run_id"], d["state"]) for d in decisions if "run_id" in d] == [(cut, "unstable")]
    stopped_at = st.step
    assert stopped_at is not None and stopped_at < 1000000
    until(lambda: not monitor_alive(sdir), "the monitor to exit once nothing it watches is live")

    out = runner.invoke(app, ["status", "guarded", "--root", str(tmp_path)]).output
    assert "1 unstable" in out and f"cut,seed=0 ({cut}) unstable at step {stopped_at}: truncation" in out
    assert "pruning saved" in out
    ranked = json.loads(runner.invoke(app, ["rank", str(sdir), "--x", "samples", "--json", "--n-boot", "200"]).output)
    arms = {a["arm"]: a for a in ranked["arms"]}
    assert arms["cut"]["stopped"] == ["unstable"] and arms["base"]["stopped"] == []

    # a plain re-run leaves it stopped; --resume-pruned continues it from its checkpoint
    again = runner.invoke(app, ["sweep", str(path), "--root", str(tmp_path)])
    assert "1 unstable" in again.output and "nothing to submit" in again.output
    old_batch = Ledger(sdir).fold()[cut].batch
    res = runner.invoke(app, ["sweep", str(path), "--resume-pruned", "--root", str(tmp_path)])
    assert res.exit_code == 0 and "submitting 1" in res.output, res.output
    until(lambda: "resumed from step" in rd.train_log.read_text(), "the run to resume")
    steps = lambda: [r["step"] for r in store.read_jsonl(rd.metrics_path)]  # noqa: E731
    until(lambda: steps()[-1] >= stopped_at + 10, "two evaluations past the stop")
    log = rd.train_log.read_text()
    stop_step = int(log.split(": preempted at step ", 1)[1].split()[0])  # its checkpoint: where the stop arrived
    assert stop_step >= stopped_at and f"resumed from step {stop_step}" in log
    # resumed without --prune: no monitor watches it now; a stop request by hand still ends it where it is
    assert not Ledger(sdir).fold()[cut].prune and not monitor_alive(sdir)
    # a monitor's decision about the earlier submission (made while the run was resubmitted) is not obeyed
    assert Ledger(sdir).fold()[cut].batch != old_batch
    Monitor(sdir, PruneSettings()).stop(cut, "pruned", "a stale decision", stopped_at, 1000000, old_batch)
    assert not rd.stop_path.exists()
    rd.request_stop("pruned", "stopped by hand")
    final = wait_for(tmp_path, "guarded", [cut], timeout=GUARD)[cut]
    assert (final.state, final.reason) == ("pruned", "stopped by hand")
    got = steps()
    assert got == list(range(0, got[-1] + 1, 5))  # every evaluation once, across the stop and the resume


def _evals(trunc, rates, n=800):
    return [
        {"step": 5 * i, "val_pass_rate": r, "val_n": n, **({} if i == 0 else {"truncation_rate": t})}
        for i, (t, r) in enumerate(zip(trunc, rates))
    ]


def test_broken_runs_are_named_and_noise_is_not():
    s = PruneSettings()
    # truncation: three in a row above 10%, not two, not three with a dip between
    assert "truncation above 10%" in broken(_evals([0, 0.2, 0.3, 0.4], [0.5] * 4), s)
    assert broken(_evals([0, 0.05, 0.3, 0.4], [0.5] * 4), s) is None
    assert broken(_evals([0, 0.3, 0.05, 0.3, 0.3], [0.5] * 5), s) is None
    # collapse: below R0 by more than 4 sd of evaluation noise (sd 0.0177 at p 0.5, n 800) three times in a row
    assert "collapsed" in broken(_evals([0] * 5, [0.5, 0.45, 0.40, 0.41, 0.39]), s)
    assert broken(_evals([0] * 5, [0.5, 0.45, 0.46, 0.45, 0.47]), s) is None  # within the noise
    assert broken(_evals([0] * 5, [0.5, 0.40, 0.41, 0.50, 0.39]), s) is None  # not three in a row
    assert broken([{"step": 0, "val_pass_rate": 0.5}], s) is None


def test_prune_needs_a_baseline_and_its_options_need_prune(tmp_path):
    path = tmp_path / "nobase.yaml"
    path.write_text(yaml.safe_dump({"base": str(RECIPE), "grid": {"loss": ["grpo", "dapo"]}}))
    res = runner.invoke(app, ["sweep", str(path), "--prune", "--root", str(tmp_path)])
    one_error(res, ErrorKind.RECIPE, "--prune", "'nobase'", "baseline:")
    res = runner.invoke(app, ["sweep", str(path), "--prune-x", "samples", "--root", str(tmp_path)])
    one_error(res, ErrorKind.SETTING, "--prune-x", "add --prune")  # the fix ("--prune" alone is in "--prune-x")
    assert not (tmp_path / "nobase").exists()  # nothing written


def test_saved_compute_counts_only_what_stopped_runs_had_left():
    from ablate.launch.status import RunStatus, pruning_saved

    def st(state, step, gh):
        return RunStatus(
            run_id=state + str(step),
            label="x",
            state=state,
            cause=None,
            job_id=None,
            executor="local",
            step=step,
            max_steps=100,
            val_pass_rate=None,
            gpu_hours=gh,
            truncation_rate=None,
            truncation_warning=False,
            attempts=1,
            requeues=0,
            error=None,
            log=None,
        )

    assert pruning_saved([st("done", 100, 1.0)]) is None
    got = pruning_saved([st("done", 100, 1.0), st("pruned", 25, 0.25), st("running", 50, 0.5)])
    assert got["runs"] == 1 and abs(got["gpu_hours_saved"] - 0.75) < 1e-9 and abs(got["gpu_hours_full"] - 3.0) < 1e-9
    # a failed run counts at what it spent, a run not started yet at the median run's cost
    got = pruning_saved([st("done", 100, 1.0), st("pruned", 25, 0.25), st("failed", 10, 0.1), st("pending", None, 0.0)])
    assert abs(got["gpu_hours_full"] - (1.0 + 1.0 + 0.1 + 1.0)) < 1e-9 and abs(got["share"] - 0.75 / 3.1) < 1e-9


def test_the_target_the_checks_rank_at_outlives_the_monitor(tmp_path):
    """A later monitor of the sweep ranks where the first one did (on the same axis), and `rank` can say where the
    settled verdicts were read."""
    from ablate.prune.rules import recorded_target

    sdir = tmp_path / "s"
    assert recorded_target(sdir, "samples") is None and Monitor(sdir, PruneSettings(x="samples")).target is None
    store.append_jsonl(sdir / "prune" / "decisions.jsonl", {"t": 1.0, "target": 5e5, "x": "samples", "why": "w"})
    store.append_jsonl(sdir / "prune" / "decisions.jsonl", {"t": 2.0, "run_id": "r", "state": "pruned"})
    store.append_jsonl(sdir / "prune" / "decisions.jsonl", {"t": 3.0, "target": 6e5, "x": "samples", "why": "w"})
    assert recorded_target(sdir, "samples") == 6e5 and recorded_target(sdir, "gpu_hours") is None
    assert Monitor(sdir, PruneSettings(x="samples")).target == 6e5
    assert Monitor(sdir, PruneSettings(x="samples", to=7e5)).target == 7e5
    assert Monitor(sdir, PruneSettings(x="gpu_hours")).target is None

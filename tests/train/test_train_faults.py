"""Faults on the training side: checkpoints that do not load or do not fit, crafted checkpoint steps, a damaged
warm-up cache, and a run stopped by Ctrl-C.

- a checkpoint is loaded and applied as one step: missing keys, wrong shapes or types, a step outside
  [0, train.max_steps] or past metrics.jsonl, make the run resume from the checkpoint before it (both trainers),
  and set the bad one aside; with none usable, one line and exit 2 while training is recorded, a fresh start
  (from the very starting weights) while it is not;
- a torn, garbage or foreign warm-up cache entry is built again, atomically; concurrent builders build it once;
- Ctrl-C stops `ablate train` at a step boundary with exit 130 (SIGTERM 143) and a line saying how to resume;
  `ablate status --watch` and `ablate sweep --follow` exit 130 on Ctrl-C, without a traceback.

Tests that stop a process do it on a state they observe (a metrics line, a lock held), never on a clock.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.storage import fs, store
from ablate.train import run
from jobs import SMALL_TRAIN, TOY_JOB, one_error, small_config, until

ROOT = Path(__file__).resolve().parents[2]
RECIPE = RECIPES_DIR / "base.yaml"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def _steps(d: Path) -> list[int]:
    path = d / "metrics.jsonl"
    return [r["step"] for r in store.read_jsonl(path)] if path.exists() else []


# ---- the built-in trainer: load + apply as one step, falling back to prev.pt ----

CKPT = ("train.checkpoint_every=2", "train.max_steps=6")  # checkpoints at 2, 4, 6: last.pt step 6, prev.pt step 4


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of CKPT (copied by each test): metrics at 0, 2, 4, 6; last.pt at step 6, prev.pt at 4."""
    d = tmp_path_factory.mktemp("finished") / "r"
    run(small_config(*CKPT), d)
    return d


def _copy(finished: Path, tmp_path: Path) -> Path:
    d = tmp_path / "r"
    shutil.copytree(finished, d)
    (d / "run.json").write_text("{}")  # as if it had been killed: a rerun resumes it and records where from
    return d


def _missing_key(ck):
    ck["model"].pop("model.norm.weight")


def _wrong_shape(ck):
    ck["model"]["model.norm.weight"] = torch.zeros(7)


def _wrong_optimizer_shape(ck):
    st = ck["optim"]["state"][0]
    st["exp_avg"] = torch.zeros(3, 3)


def _wrong_type(ck):
    ck["rng"] = [1, 2, 3]


def _nan_compute(ck):
    ck["compute"]["samples"] = float("nan")


FAULTS = {
    "missing key": _missing_key,
    "wrong shape": _wrong_shape,
    "optimizer moment of another shape": _wrong_optimizer_shape,
    "wrong type": _wrong_type,
    "non-finite counter": _nan_compute,
    "negative step": lambda ck: ck.update(step=-5),
    "step past max_steps": lambda ck: ck.update(step=1000),
    "bool step": lambda ck: ck.update(step=True),
    "float step": lambda ck: ck.update(step=6.0),
    "infinite step": lambda ck: ck.update(step=float("inf")),
    "not a dict": None,
}


def _damage(path: Path, fault) -> None:
    if fault is None:
        torch.save([1, 2, 3], path)
        return
    ck = torch.load(path, weights_only=True)
    fault(ck)
    torch.save(ck, path)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_checkpoint_that_does_not_fit_falls_back_to_the_previous_one(finished, tmp_path, fault):
    d = _copy(finished, tmp_path)
    _damage(d / "ckpt" / "last.pt", FAULTS[fault])
    summary = run(small_config(*CKPT), d)
    assert summary["status"] == "done" and summary["step"] == 6
    assert store.read_json(d / "run.json")["resumed_from"] == 4
    assert _steps(d) == [0, 2, 4, 6]  # no line lost, none twice
    assert (d / "ckpt" / "last.pt.bad").is_file()  # set aside, not rotated into prev.pt by the next save
    assert torch.load(d / "ckpt" / "prev.pt", weights_only=True)["step"] == 4
    assert "cannot be resumed from" in (d / "logs" / "train.log").read_text()


def test_a_step_past_the_recorded_metrics_is_refused(finished, tmp_path):
    """A checkpoint whose step is further past metrics.jsonl's last line than one evaluation interval cannot be
    this run's: the crash that tears a metrics line can only tear its own step's."""
    d = _copy(finished, tmp_path)
    store.write_jsonl(d / "metrics.jsonl", [r for r in store.read_jsonl(d / "metrics.jsonl") if r["step"] <= 2])
    _damage(d / "ckpt" / "prev.pt", _missing_key)  # (so that only last.pt, step 6, is left to judge)
    res = runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, *CKPT, "--run-dir", str(d)])
    one_error(
        res,
        ErrorKind.STATE,
        str(d / "ckpt"),  # at fault, and what to delete
        "last.pt",
        "step 6",
        "metrics.jsonl",
        "step 2",
        "train.eval_every=2",
        "prev.pt",
        stream="stderr",
    )
    assert _steps(d) == [0, 2]  # nothing cut


def test_every_checkpoint_bad_with_training_recorded_is_one_line_and_changes_nothing(finished, tmp_path):
    d = _copy(finished, tmp_path)
    for name in ("last.pt", "prev.pt"):
        _damage(d / "ckpt" / name, _wrong_shape)
    before = (d / "metrics.jsonl").read_bytes()
    res = runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, *CKPT, "--run-dir", str(d)])
    one_error(
        res,
        ErrorKind.STATE,
        str(d / "ckpt"),
        "last.pt",
        "prev.pt",
        "RuntimeError",
        "model.norm.weight",
        stream="stderr",
    )
    assert (d / "metrics.jsonl").read_bytes() == before  # the recorded curve is kept, not restarted silently
    assert sorted(p.name for p in (d / "ckpt").iterdir()) == ["last.pt", "prev.pt"]
    assert store.read_json(d / "run.json")["status"] == "failed"


def test_every_checkpoint_bad_without_training_recorded_starts_afresh_from_the_starting_weights(finished, tmp_path):
    """Only the step-0 evaluation is recorded: nothing is lost by starting over, so the run does, from the very
    weights a fresh run starts from, although a checkpoint had been half applied before it failed (its other
    weights were trained ones: the half-loaded model is not what training restarts from)."""
    d = _copy(finished, tmp_path)
    store.write_jsonl(d / "metrics.jsonl", store.read_jsonl(d / "metrics.jsonl")[:1])
    first = store.read_jsonl(d / "metrics.jsonl")[0]
    ck = torch.load(d / "ckpt" / "last.pt", weights_only=True)  # the trained weights of step 6...
    ck.update(step=0, eval=first)  # ... claimed for step 0: they pass the step checks and are applied
    ck["model"]["model.norm.weight"] = torch.zeros(7)  # until this one fails
    torch.save(ck, d / "ckpt" / "last.pt")
    (d / "ckpt" / "prev.pt").write_bytes(b"garbage")
    summary = run(small_config(*CKPT), d)
    assert summary["status"] == "done" and store.read_json(d / "run.json")["resumed_from"] is None
    assert sorted(p.name for p in (d / "ckpt").glob("*.bad")) == ["last.pt.bad", "prev.pt.bad"]
    assert (d / "ckpt" / "last.pt").is_file()
    # the same curve and final weights as the run that started from scratch
    assert [r["val_pass_rate"] for r in store.read_jsonl(d / "metrics.jsonl")] == [
        r["val_pass_rate"] for r in store.read_jsonl(finished / "metrics.jsonl")
    ]
    a = torch.load(d / "ckpt" / "last.pt", weights_only=True)["model"]
    b = torch.load(finished / "ckpt" / "last.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in b)


# ---- TRL: its checkpoint-N folders, newest first ----

TRL = [
    "trainer=trl",
    "aggregation=token",
    "filtering.zero_variance=false",
    "filtering.no_positive_resampling=false",
    "length=none",
    "offpolicy=ppo",
    "offpolicy.k=1",
]
TRL_SMALL = [o for o in SMALL_TRAIN if not o.startswith("length.think")]


@pytest.fixture(scope="module")
def trl_finished(tmp_path_factory):
    """A finished TRL run: metrics at 0, 2, 4, 6; TRL's checkpoint-4 and checkpoint-6 (save_total_limit=2)."""
    d = tmp_path_factory.mktemp("trl") / "r"
    run(_trl_config(), d)
    assert sorted(p.name for p in (d / "ckpt").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    return d


def _trl_config():
    from ablate.compose.recipe import compose_run

    return compose_run(RECIPE, [*TRL, *TRL_SMALL, *CKPT])


def _drop_weight(ck: Path) -> None:
    from safetensors.torch import load_file, save_file

    w = load_file(ck / "model.safetensors")
    w.pop("model.norm.weight")
    save_file(w, ck / "model.safetensors", metadata={"format": "pt"})


def _optimizer_shape(ck: Path) -> None:
    opt = torch.load(ck / "optimizer.pt", weights_only=True)
    opt["state"][0]["exp_avg"] = torch.zeros(5, 5)
    torch.save(opt, ck / "optimizer.pt")


def _torn_weights(ck: Path) -> None:
    p = ck / "model.safetensors"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _crafted_step(ck: Path) -> None:
    st = store.read_json(ck / "ablate_state.json")
    st["step"] = -3
    store.write_json(ck / "ablate_state.json", st)


TRL_FAULTS = {
    "missing weight": _drop_weight,
    "optimizer moment of another shape": _optimizer_shape,
    "torn weights": _torn_weights,
    "crafted step": _crafted_step,
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(TRL_FAULTS))
def test_trl_resumes_from_the_next_older_checkpoint_when_the_newest_does_not_fit(trl_finished, tmp_path, fault):
    d = _copy(trl_finished, tmp_path)
    TRL_FAULTS[fault](d / "ckpt" / "checkpoint-6")
    summary = run(_trl_config(), d)
    assert summary["status"] == "done" and summary["step"] == 6
    assert store.read_json(d / "run.json")["resumed_from"] == 4
    assert "resuming from checkpoint-4" in (d / "logs" / "train.log").read_text()
    assert _steps(d) == [0, 2, 4, 6]
    assert (d / "ckpt" / "bad-checkpoint-6").is_dir()  # out of TRL's rotation; TRL saved step 6 again
    assert (d / "ckpt" / "checkpoint-6" / "ablate_state.json").is_file()


@pytest.mark.slow
def test_trl_with_no_usable_checkpoint_and_training_recorded_is_one_line(trl_finished, tmp_path):
    d = _copy(trl_finished, tmp_path)
    _drop_weight(d / "ckpt" / "checkpoint-6")
    _crafted_step(d / "ckpt" / "checkpoint-4")
    res = runner.invoke(app, ["train", str(RECIPE), *TRL, *TRL_SMALL, *CKPT, "--run-dir", str(d)])
    one_error(
        res,
        ErrorKind.STATE,
        str(d / "ckpt"),
        "checkpoint-6",
        "model.norm.weight",
        "checkpoint-4",
        "ablate_state.json",
        "step -3",
        stream="stderr",
    )
    assert _steps(d) == [0, 2, 4, 6]


# ---- the warm-up cache ----

QUICK = ("train.warmup.max_steps=0",)  # a warm-up of no steps: the cache logic without the minute of training


def _entry() -> tuple[Path, object, object]:
    from ablate.train.tasks import build_task
    from ablate.train.warmup import warmed_up_folder

    cfg = small_config(*QUICK)
    task = build_task(cfg.task, cfg.train.val_size, "")
    return warmed_up_folder(cfg, task), cfg, task


def _truncate(f: Path) -> None:
    w = f / "model.safetensors"
    w.write_bytes(w.read_bytes()[:100])


def _garbage(f: Path) -> None:
    (f / "model.safetensors").write_bytes(os.urandom(4096))


def _half_written(f: Path) -> None:  # a builder killed before it wrote the weights (a non-atomic older build)
    (f / "model.safetensors").unlink()


def _missing_weight(f: Path) -> None:
    from safetensors.torch import load_file, save_file

    w = load_file(f / "model.safetensors")
    w.pop("model.layers.0.mlp.up_proj.weight")
    save_file(w, f / "model.safetensors", metadata={"format": "pt"})


def _reshaped(f: Path) -> None:
    from safetensors.torch import load_file, save_file

    w = load_file(f / "model.safetensors")
    w["model.norm.weight"] = torch.ones(3)
    save_file(w, f / "model.safetensors", metadata={"format": "pt"})


def _other_architecture(f: Path) -> None:  # a config the weights' names fit, computed otherwise
    cfg = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**cfg, "hidden_act": "gelu"}))


def _other_norm(f: Path) -> None:  # the same weights, another RMSNorm epsilon
    cfg = json.loads((f / "config.json").read_text())
    (f / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))


def _other_tokenizer(f: Path) -> None:  # the same number of tokens, two characters swapped
    tok = json.loads((f / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    vocab["0"], vocab["1"] = vocab["1"], vocab["0"]
    (f / "tokenizer.json").write_text(json.dumps(tok))


def _bad_record(f: Path) -> None:
    (f / "warmup.json").write_text('{"steps": ')


def _foreign_file(f: Path) -> None:
    os.chown(f / "model.safetensors", 65534, 65534)


def _open_folder(f: Path) -> None:
    os.chmod(f, 0o777)  # noqa: S103 (the test makes the cache world-writable on purpose)


WARMUP_FAULTS = {
    "truncated weights": _truncate,
    "garbage weights": _garbage,
    "no weights": _half_written,
    "a missing weight": _missing_weight,
    "a weight of another shape": _reshaped,
    "another architecture's config": _other_architecture,
    "another norm epsilon": _other_norm,
    "another tokenizer": _other_tokenizer,
    "torn warm-up record": _bad_record,
    "a file of another user": _foreign_file,
    "a folder all can write": _open_folder,
}


@pytest.mark.parametrize("fault", list(WARMUP_FAULTS))
def test_a_damaged_warmup_cache_entry_is_built_again(tmp_path, monkeypatch, caplog, fault):
    from ablate.train.warmup import fault as entry_fault

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    folder, cfg, task = _entry()
    assert entry_fault(folder, cfg, task) is None
    WARMUP_FAULTS[fault](folder)
    assert entry_fault(folder, cfg, task) is not None
    caplog.set_level("INFO", logger="ablate.train")
    again, _, _ = _entry()
    assert again == folder and entry_fault(folder, cfg, task) is None
    assert "is unusable" in caplog.text and "warm-up done" in caplog.text
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name, f"{folder.name}.lock"]  # nothing aside


def test_an_entry_transformers_cannot_load_is_built_again_for_the_runs_that_load_it_there(tmp_path, monkeypatch):
    """The built-in trainer reads the entry without transformers; TRL, the vLLM sampler and FSDP load it with
    transformers, so their check loads it there too."""
    from ablate.train.tasks import build_task
    from ablate.train.warmup import fault as entry_fault
    from ablate.train.warmup import warmed_up_folder

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    folder, cfg, task = _entry()
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": "nonsense"}))  # a field only transformers reads
    assert entry_fault(folder, cfg, task) is None
    assert entry_fault(folder, cfg, task, transformers=True) is not None
    again = warmed_up_folder(cfg, build_task(cfg.task, cfg.train.val_size, ""), transformers=True)
    assert again == folder and entry_fault(folder, cfg, task, transformers=True) is None
    assert all(p.stat().st_mode & 0o077 == 0 for p in (folder, *folder.iterdir()))  # owner-only


def test_a_cache_others_can_write_is_refused_in_one_line(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "warmup").mkdir(parents=True)
    os.chmod(cache / "warmup", 0o777)  # noqa: S103 (world-writable on purpose: it must be refused)
    monkeypatch.setenv("ABLATE_CACHE", str(cache))
    res = runner.invoke(app, ["train", str(RECIPE), *SMALL_TRAIN, *QUICK, "--run-dir", str(tmp_path / "r")])
    one_error(res, ErrorKind.FILE, str(cache / "warmup"), "0777", "ABLATE_CACHE", stream="stderr")
    assert os.listdir(cache / "warmup") == []  # nothing built or loaded from it


_BUILDER = """
import sys
sys.path.insert(0, {tests!r})
from jobs import small_config
from ablate.train.tasks import build_task
from ablate.train.warmup import warmed_up_folder
import logging
logging.basicConfig(level=logging.INFO, format="%(message)s")
cfg = small_config("train.warmup.max_steps=20", "train.warmup.check_every=5")
task = build_task(cfg.task, cfg.train.val_size, "")
print("waiting", flush=True)
print("folder", warmed_up_folder(cfg, task), flush=True)
"""


def test_concurrent_builders_build_the_warmup_once_and_intact(tmp_path, monkeypatch):
    """Two processes need the same entry at once (the lock is held until both are on their way to it): one builds,
    the other waits and uses it; leftovers of a builder killed mid-write are cleared."""
    from filelock import FileLock

    from ablate.train.tasks import build_task
    from ablate.train.warmup import fault, warmup_key

    cache = tmp_path / "cache"
    monkeypatch.setenv("ABLATE_CACHE", str(cache))
    cfg = small_config("train.warmup.max_steps=20", "train.warmup.check_every=5")
    task = build_task(cfg.task, cfg.train.val_size, "")
    key = warmup_key(cfg, task)
    root = fs.private_cache("warmup")
    (root / f".{key}.tmp.killed").mkdir()
    (root / f".{key}.tmp.killed" / "model.safetensors").write_bytes(b"half")
    code = _BUILDER.format(tests=str(ROOT / "tests"))
    env = {**os.environ, "ABLATE_CACHE": str(cache)}
    with FileLock(str(root / f"{key}.lock")):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        for p in procs:
            assert p.stdout.readline().strip() == "waiting"
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert sum(err.count("warm-up done") for _, err in outs) == 1
    folders = {out.split("folder", 1)[1].strip() for out, _ in outs}
    assert folders == {str(root / key)} and fault(root / key, cfg, task) is None
    assert sorted(os.listdir(root)) == [key, f"{key}.lock"]


# ---- Ctrl-C ----

LONG = ["train.max_steps=1000000", "train.eval_every=2", "train.checkpoint_every=3"]


def _signal_after(cmd: list[str], out: Path, n_lines: int, sig: int) -> tuple[int, str]:
    """Start `cmd`, send `sig` once metrics.jsonl has `n_lines` lines; (exit status, stdout and stderr)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    until(lambda: p.poll() is not None or len(_steps(out)) >= n_lines, f"{n_lines} metrics lines")
    assert p.poll() is None, p.communicate()[0][-2000:]  # still running: it did not fail on the way
    p.send_signal(sig)
    said, _ = p.communicate(timeout=300)
    return p.returncode, said


def test_ctrl_c_stops_ablate_train_with_130_and_says_how_to_resume(tmp_path):
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "ablate", "train", str(RECIPE), *SMALL_TRAIN, *LONG, "--run-dir", str(out)]
    rc, err = _signal_after(cmd, out, 1, signal.SIGINT)
    assert rc == 130, err[-2000:]
    assert "Traceback" not in err
    meta = store.read_json(out / "run.json")
    assert meta["status"] == "preempted", meta
    stopped = meta["step"]
    hint = [ln for ln in err.splitlines() if "resume with:" in ln]
    assert len(hint) == 1 and f"stopped by SIGINT at step {stopped}" in hint[0], err[-2000:]
    again = shlex.split(hint[0].split("resume with: ", 1)[1])
    assert again[:2] == ["ablate", "train"]
    # the command it names resumes the run there; SIGTERM stops it with 143
    rc, err = _signal_after([sys.executable, "-m", *again], out, len(_steps(out)) + 2, signal.SIGTERM)
    assert rc == 143 and "stopped by SIGTERM" in err, err[-2000:]
    meta = store.read_json(out / "run.json")
    assert meta["status"] == "preempted" and meta["resumed_from"] == stopped, meta
    # its last line says it resumed, and which step's evaluation its pass rate is
    evaluated = max(_steps(out))
    end = next(ln for ln in err.splitlines() if ln.startswith("preempted: step"))
    assert end.startswith(f"preempted: step {meta['step']} (resumed from step {stopped}), R0 "), end
    assert (f"(step {evaluated}'s evaluation)" in end) == (evaluated != meta["step"]), end


class _CtrlCOnSleep:
    """Stands in for the `time` module of ablate.render.status: its first wait between refreshes is a real Ctrl-C
    (SIGINT to this process), sent once the command is inside its refresh loop."""

    def __init__(self) -> None:
        import time

        self.monotonic = time.monotonic
        self.sent = 0

    def sleep(self, seconds: float) -> None:
        self.sent += 1
        signal.raise_signal(signal.SIGINT)


def test_ctrl_c_ends_status_watch_with_130(tmp_path, monkeypatch):
    import ablate.render.status
    from ablate.launch.status import wait_for
    from ablate.launch.submit import launch_sweep
    from jobs import toy_sweep

    hold = tmp_path / "hold"
    hold.write_text("")
    launch_sweep(
        toy_sweep(tmp_path, arms=("a",), seeds=(0,), toy={"steps": 2, "hold": str(hold), "hold_at": 1}),
        root=tmp_path,
        executor="local",
        job=TOY_JOB,
        echo=None,
    )
    try:
        wait_for(tmp_path, "toy", ["toy-a0"], states=("running",), timeout=300)  # held: it never ends by itself
        fake = _CtrlCOnSleep()
        with monkeypatch.context() as m:
            m.setattr(ablate.render.status, "time", fake)  # (the watch loop's clock)
            res = runner.invoke(app, ["status", "toy", "--root", str(tmp_path), "--watch", "--interval", "0.1"])
        assert fake.sent == 1
        assert res.exit_code == 130, res.output
        assert "Traceback" not in res.output and "toy-a0" in res.output
    finally:
        hold.unlink()
    assert wait_for(tmp_path, "toy", ["toy-a0"], timeout=300)["toy-a0"].state == "done"


def test_ctrl_c_ends_sweep_follow_with_130_and_the_runs_go_on(tmp_path, monkeypatch):
    import ablate.render.status
    from ablate.compose.sweep import load_sweep

    hold = tmp_path / "hold"
    hold.write_text("")
    plan = load_sweep(RECIPE, [])
    store.write_json(
        tmp_path / plan.name / "toy.json", {r.run_id: {"steps": 2, "hold": str(hold), "hold_at": 1} for r in plan.runs}
    )
    fake = _CtrlCOnSleep()
    try:
        with monkeypatch.context() as m:
            m.setattr(ablate.render.status, "time", fake)  # (the follow loop's clock)
            res = runner.invoke(
                app, ["sweep", str(RECIPE), "--root", str(tmp_path), "-e", "local", "--job", TOY_JOB, "--follow"]
            )
        assert fake.sent == 1
        assert res.exit_code == 130, res.output
        assert "stopped following; the runs go on" in res.output and "Traceback" not in res.output
    finally:
        hold.unlink()
    from ablate.launch.status import wait_for

    ids = [r.run_id for r in plan.runs]
    assert all(s.state == "done" for s in wait_for(tmp_path, plan.name, ids, timeout=300).values())

"""The run: run directory contract, learning signal, resume after SIGTERM, PipelineRL's lag bound, bad data, divergence.

Every test composes its config from recipes/base.yaml (the real path `ablate train` takes) with a small model,
1-digit addition and a few steps, and a private warm-up cache. Tests that stop a run do it on a state they
observe (an evaluation line written), on runs too long to end first.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.storage import store
from ablate.storage.metricsfile import METRICS, REQUIRED_METRICS
from ablate.train import run
from jobs import SMALL_TRAIN, assert_resumed_without_gap, error_kind, refused, until

ROOT = Path(__file__).resolve().parents[2]
RECIPE = RECIPES_DIR / "base.yaml"
SMALL = SMALL_TRAIN
TASK = [o for o in SMALL_TRAIN if o.startswith("task.")]  # the first three: what a test with its own task= drops


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)


def _cfg(*extra: str):
    small = SMALL if not any(e.startswith("task=") for e in extra) else SMALL[len(TASK) :]
    return compose_run(RECIPE, small + list(extra))


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in store.read_jsonl(run_dir / "metrics.jsonl")]


def test_a_short_run_writes_a_valid_run_directory(tmp_path):
    cfg = _cfg()
    summary = run(cfg, tmp_path / "r")
    d = tmp_path / "r"
    assert summary["status"] == "done" and summary["step"] == 6
    from omegaconf import OmegaConf

    assert OmegaConf.to_container(OmegaConf.load(d / "config.yaml")) == cfg.to_dict()
    meta = store.read_json(d / "run.json")
    assert meta["status"] == "done" and meta["step"] == 6 and meta["started_at"] <= meta["ended_at"]
    assert meta["device"] == ("cuda" if torch.cuda.is_available() else "cpu")  # train.device=auto
    assert Path(meta["logs"]["train"]).read_text().count("eval step") == 4
    recs = store.read_jsonl(d / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 2, 4, 6]
    for r in recs:
        assert set(REQUIRED_METRICS) <= set(r) and set(r) <= set(METRICS)
        assert 0.0 <= r["val_pass_rate"] <= 1.0
    assert [r["samples"] for r in recs] == [0, 32, 64, 96]  # 4 prompts x 4 generations per step
    for key in ("gpu_hours", "flops", "wall_s"):
        assert all(a[key] < b[key] for a, b in itertools.pairwise(recs)), key
    assert {"train_reward", "truncation_rate", "entropy", "grad_norm", "zero_variance_frac", "lag"} <= set(recs[-1])
    assert (d / "ckpt" / "last.pt").is_file() and (d / "ckpt" / "prev.pt").is_file()
    assert [r["val_n"] for r in recs] == [32] * 4  # 16 validation prompts x mean@2
    # a rerun of a finished run changes nothing; a different config in the same directory is refused
    assert run(cfg, d)["step"] == 6 and _steps(d) == [0, 2, 4, 6]
    with refused(ErrorKind.STATE, str(d), "--run-dir"):
        run(_cfg("seed=5"), d)


def test_the_loss_decreases_on_a_fixed_batch(tmp_path):
    """Repeated steps on one batch: the clipped surrogate (grpo) decreases, and for every loss the policy moves
    log-probability from the negative-advantage completions to the positive ones."""
    from ablate.train.feeders import PPOFeeder
    from ablate.train.step import Learner

    LOSSES = {
        "grpo": ["loss=grpo", "loss.eps=0.2"],
        "cispo": [],
        "gspo": ["loss=gspo", "loss.eps_low=3e-3", "loss.eps_high=4e-3"],
    }
    for loss, extra in [*LOSSES.items(), ("grpo-slow", LOSSES["grpo"] + ["optim.lr=3e-4"])]:
        r = Learner(_cfg("optim.lr=3e-3", "batch.prompts=8", "batch.generations=8", *extra))
        b = PPOFeeder(r, 1).next(0)
        ro = b.ro
        # reward: "same completion as the group's first one"; identical completions always get identical rewards
        first = {int(g): ro.texts[i] for i, g in reversed(list(enumerate(ro.group.tolist())))}
        b.rewards = torch.tensor([float(t == first[int(g)]) for t, g in zip(ro.texts, ro.group.tolist())])
        pos, neg = b.rewards > 0, b.rewards == 0

        def gap(r=r, ro=ro, pos=pos, neg=neg) -> float:  # bound now: called within this iteration
            with torch.no_grad():
                lg = r.policy.completion_logits(ro.prompt_ids, ro.prompt_mask, ro.group, ro.tokens).float()
                lp = (torch.log_softmax(lg, -1).gather(2, ro.tokens[..., None]).squeeze(2) * ro.mask).sum(1)
            return float(lp[pos].mean() - lp[neg].mean())

        g0 = gap()
        values = [r.step(b, 0)["loss"] for _ in range(8)]
        assert gap() > g0 + (0.5 if loss != "grpo-slow" else 0.05), loss
        if loss == "grpo-slow":  # at a small lr the surrogate itself goes down monotonically-ish
            assert values[-1] < values[0] - 0.01 and values[-1] <= min(values[:4]), values


def test_different_losses_take_different_paths(tmp_path):
    """Same seed, same data: after a few off-policy steps (PPO-off-policy-4) the weights differ by loss.

    (While no clip binds, GRPO's and CISPO's gradients are the same, A*rho*grad log pi; a large lr and k=4 move
    the ratios out of GRPO's [0.8, 1.2] so that the difference shows.)"""
    clip = {}
    finals = {}
    for name, extra in {
        "cispo": [],
        "grpo": ["loss=grpo", "loss.eps=0.2"],
        "gspo": ["loss=gspo", "loss.eps_low=3e-3", "loss.eps_high=4e-3"],
    }.items():
        cfg = _cfg("offpolicy.k=4", "train.max_steps=8", "train.eval_every=4", "optim.lr=1e-2", *extra)
        run(cfg, tmp_path / name)
        finals[name] = torch.load(tmp_path / name / "ckpt" / "last.pt", weights_only=True)["model"]
        clip[name] = max(r.get("is_clip_frac", 0.0) for r in store.read_jsonl(tmp_path / name / "metrics.jsonl"))
    assert clip["grpo"] > 0 and clip["gspo"] > 0, clip
    for a, b in (("cispo", "grpo"), ("cispo", "gspo"), ("grpo", "gspo")):
        diff = max((finals[a][k] - finals[b][k]).abs().max().item() for k in finals[a])
        assert diff > 1e-6, (a, b)


def _stop_after(cmd: list[str], out: Path, n_lines: int, sig: int = signal.SIGTERM) -> subprocess.Popen:
    """Start `ablate train`, wait until metrics.jsonl has `n_lines` lines, send `sig`, wait for the process."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    until(lambda: len(_steps(out)) >= n_lines if out.exists() else False, f"{n_lines} metrics lines")
    p.send_signal(sig)
    p.communicate(timeout=300)
    return p


LONG = ["train.max_steps=1000000", "train.eval_every=2", "train.checkpoint_every=3"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_mid_run_checkpoints_and_a_rerun_resumes_without_gap_or_duplicate(tmp_path, sig):
    """SIGTERM and Ctrl-C (SIGINT) alike: the run saves where it is, run.json says preempted (not running), and a
    re-run resumes there. The run is far too long to finish; each stop follows an observed evaluation."""
    out = tmp_path / "r"
    cmd = [sys.executable, "-m", "ablate", "train", str(RECIPE), *SMALL, *LONG, "--run-dir", str(out)]
    p = _stop_after(cmd, out, 4, sig)  # 4 eval lines: past the first periodic checkpoint (step 3)
    assert p.returncode == 128 + sig  # the shell's status for a signal (130 for Ctrl-C): the run did not finish
    meta = store.read_json(out / "run.json")
    assert meta["status"] == "preempted", meta
    stopped = meta["step"]
    assert stopped >= 6 and torch.load(out / "ckpt" / "last.pt", weights_only=True)["step"] == stopped
    first = _steps(out)
    _stop_after(cmd, out, len(first) + 3, sig)
    assert_resumed_without_gap(out, first, stopped)


def test_a_killed_run_drops_metrics_written_after_its_last_checkpoint(tmp_path):
    d = tmp_path / "r"
    run(_cfg("train.checkpoint_every=4"), d)  # lines at 0, 2, 4, 6; checkpoints at 4 and 6
    ck = torch.load(d / "ckpt" / "last.pt", weights_only=True)
    ck["step"] = 4  # as if the process died after writing line 6 but before checkpoint 6
    ck["eval"] = next(r for r in store.read_jsonl(d / "metrics.jsonl") if r["step"] == 4)
    torch.save(ck, d / "ckpt" / "last.pt")
    with open(d / "run.json", "w") as f:
        f.write("{}")
    summary = run(_cfg("train.checkpoint_every=4"), d)
    assert summary["status"] == "done" and _steps(d) == [0, 2, 4, 6]
    assert store.read_json(d / "run.json")["resumed_from"] == 4


@pytest.mark.parametrize("generator", ["thread", "inline"])
@pytest.mark.parametrize("k", [1, 2])
def test_pipeline_rl_never_exceeds_its_lag_bound(tmp_path, k, generator):
    summary = run(
        _cfg("offpolicy=pipeline", f"offpolicy.k={k}", f"offpolicy.generator={generator}", "train.max_steps=10"),
        tmp_path / "r",
    )
    assert summary["status"] == "done" and summary["step"] == 10
    assert summary["max_lag"] <= k  # never more than k (how far a thread runs ahead depends on scheduling)
    if generator == "inline":
        assert summary["max_lag"] == k  # in turn: every batch after the first k is exactly k steps stale
    recs = store.read_jsonl(tmp_path / "r" / "metrics.jsonl")
    assert all(0 <= r["lag"] <= k for r in recs if "lag" in r)
    assert store.read_json(tmp_path / "r" / "run.json")["max_lag"] == summary["max_lag"]


def test_inline_pipeline_is_reproducible_and_auto_picks_it_for_the_torch_sampler_on_cpu(tmp_path):
    cfg = _cfg("offpolicy=pipeline", "offpolicy.k=2", "train.max_steps=8")
    assert cfg.offpolicy.generator == "auto"
    run(cfg, tmp_path / "a")
    run(_cfg("offpolicy=pipeline", "offpolicy.k=2", "offpolicy.generator=inline", "train.max_steps=8"), tmp_path / "b")
    a, b = (store.read_jsonl(tmp_path / d / "metrics.jsonl") for d in "ab")
    drop = ("wall_s", "gpu_hours")
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b
    ]
    assert (tmp_path / "a" / "logs" / "train.log").read_text().count("inline") >= 1


def test_ppo_off_policy_k_generates_k_batches_then_steps(tmp_path):
    summary = run(_cfg("offpolicy.k=3", "train.max_steps=6"), tmp_path / "r")
    assert summary["max_lag"] == 2  # the 3rd batch of a round is trained 2 steps after it was generated


def test_jsonl_task_runs_end_to_end(tmp_path):
    rows = [{"prompt": f"{a}*{b}=", "answer": str(a * b)} for a in range(1, 12) for b in range(1, 8)]
    f = tmp_path / "mul.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = run(
        _cfg(
            "task=jsonl",
            f"task.path={f}",
            "length.phrase='>'",
            "length.max_new_tokens=4",
            "length.think_budget_min=1",
            "length.think_budget_max=2",
            "train.warmup.max_steps=0",
        ),
        tmp_path / "r",
    )
    assert summary["status"] == "done" and _steps(tmp_path / "r") == [0, 2, 4, 6]


def test_bad_dataset_or_missing_file_is_a_clear_error(tmp_path):
    with refused(ErrorKind.FILE, "task.path", str(tmp_path / "missing.jsonl")):
        run(_cfg("task=jsonl", f"task.path={tmp_path / 'missing.jsonl'}"), tmp_path / "a")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "answer": "2"}\n{"prompt": "2+2="}\n')
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ablate",
            "train",
            str(RECIPE),
            *SMALL[len(TASK) :],
            "task=jsonl",
            f"task.path={bad}",
            "--run-dir",
            str(tmp_path / "b"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error[")]
    assert error_kind(line) is ErrorKind.FILE and f"{bad}:2" in line and "'answer'" in line, r.stderr
    assert "Traceback" not in r.stderr


def test_device_is_a_resource_choice_and_a_missing_accelerator_is_a_clear_error(tmp_path):
    from ablate.config.identity import run_id

    assert run_id(_cfg("train.device=cpu")) == run_id(_cfg("train.device=auto"))  # where it runs is not what it is
    if not torch.cuda.is_available():
        with refused(ErrorKind.ENVIRONMENT, "train.device=cuda", "train.device=auto"):
            run(_cfg("train.device=cuda"), tmp_path / "r")
        assert not (tmp_path / "r").exists()  # refused before anything was written
    summary = run(_cfg("train.device=cpu", "train.max_steps=2"), tmp_path / "c")
    assert summary["status"] == "done" and store.read_json(tmp_path / "c" / "run.json")["device"] == "cpu"


def test_a_blown_up_policy_is_marked_diverged(tmp_path):
    summary = run(_cfg("optim.lr=1e4", "optim.grad_clip=1e9", "train.max_steps=20"), tmp_path / "r")
    assert summary["status"] == "diverged" and summary["step"] < 20
    meta = store.read_json(tmp_path / "r" / "run.json")
    assert meta["status"] == "diverged" and meta["diverged_reason"] == summary["reason"]
    assert any(w in summary["reason"] for w in ("non-finite", "collapsed"))


@pytest.mark.slow
def test_rl_raises_the_pass_rate(tmp_path):
    """End to end: from the warmed-up small policy, 200 on-policy CISPO steps raise the held-out pass rate."""
    summary = run(
        _cfg(
            "optim.lr=1e-3",
            "batch.prompts=8",
            "batch.generations=8",
            "train.val_size=20",
            "train.eval_k=8",
            "train.max_steps=200",
            "train.eval_every=25",
            "train.checkpoint_every=1000",
        ),
        tmp_path / "r",
    )
    assert summary["status"] == "done"
    recs = store.read_jsonl(tmp_path / "r" / "metrics.jsonl")
    r0 = recs[0]["val_pass_rate"]
    late = sum(r["val_pass_rate"] for r in recs[-3:]) / 3
    assert late >= r0 + 0.05, [r["val_pass_rate"] for r in recs]
    assert recs[-1]["train_reward"] > recs[1]["train_reward"], [r.get("train_reward") for r in recs]

"""Data-parallel runs on the CPU: real processes over gloo, two ranks of the tiny model.

- The gradient identity: the same global batch gives the same gradient, update, metrics and prompt pool on two
  ranks as in one process, for every loss x aggregation, with each normalisation, micro-batches that split
  unevenly across ranks and a rank whose groups were all filtered out.
- A run at resources.nproc=2: the metrics file of a one-process run, a stop mid-run (SIGTERM, sent once an
  evaluation is observed) that checkpoints and resumes with no gap or duplicate, and a curve that agrees with the
  one-process run's within evaluation noise.
- A rank that fails, or is killed mid-run, fails the run with that rank's error; no rank hangs.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from ablate import store
from ablate.compose import compose_run
from ablate.errors import UserError
from ablate.train import distributed, run
from ablate.train.step import Learner
from jobs import SMALL_TRAIN, until

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "base.yaml"
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _env(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path_factory.getbasetemp() / "ablate-cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    torch.set_num_threads(1)


def _cfg(*extra: str):
    return compose_run(RECIPE, SMALL_TRAIN + list(extra))


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in store.read_jsonl(run_dir / "metrics.jsonl")]


# ---- (a) the gradient identity ----

CASES = [(loss, agg) for loss in ("grpo", "dapo", "gspo", "cispo") for agg in ("sample", "prompt", "token")
         if (loss, agg) != ("gspo", "token")]  # refused by validation: GSPO's ratio is per sequence


def _case(i: int, loss: str, agg: str):
    """Case i: a config and a global batch of 4 groups x 4 completions, made by one process. Old log-probs are
    perturbed so the clips bind; odd cases give groups 1 and 3 (rank 1's share) equal rewards, so that with
    zero-variance filtering rank 1 has no row to train; every third case splits the step into micro-batches of 3."""
    norm = ("prompt", "batch", "none")[i % 3]
    # no clipping (it would hide a scale error) and an Adam eps that keeps the first update a smooth function of
    # the gradient (with eps 1e-8 it is lr x sign(g), which float noise flips where g is ~0)
    extra = [f"loss={loss}", f"aggregation={agg}", f"normalization={norm}", "optim.grad_clip=1e9", "optim.eps=1e-4",
             "filtering.no_positive_resampling=true", "filtering.zero_variance=true"]
    if i % 3 == 0:
        extra.append("optim.micro_batch=3")
    cfg = _cfg(*extra)
    learner = Learner(cfg)
    g = torch.Generator().manual_seed(100 + i)
    b = learner.make_batch(learner.sampler(), g)
    b.ro.logp = torch.where(b.ro.mask, b.ro.logp + 0.3 * torch.randn(b.ro.logp.shape, generator=g), b.ro.logp)
    r = torch.randint(0, 2, b.rewards.shape, generator=g).float()
    r[0::4], r[1::4] = 1.0, 0.0  # every group mixed ...
    if i % 2:
        r[(b.ro.group % 2) == 1] = 1.0  # ... except rank 1's, in odd cases
    b.rewards, b.correct = r, r > 0
    return cfg, b


def test_two_ranks_take_the_one_process_step_for_every_loss_and_aggregation(tmp_path):
    cases, ref = [], []
    for i, (loss, agg) in enumerate(CASES):
        cfg, b = _case(i, loss, agg)
        cases.append({"config": cfg.to_dict(), "batch": b})
        learner = Learner(cfg)
        before = torch.cat([p.detach().reshape(-1).double() for p in learner.policy.model.parameters()])
        m = learner.step(b, 0)
        after = torch.cat([p.detach().reshape(-1).double() for p in learner.policy.model.parameters()])
        grad = torch.cat([p.grad.reshape(-1).double() for p in learner.policy.model.parameters()])
        ref.append({"delta": after - before, "grad": grad, "metrics": m, "pool": learner.pool.state_dict()})
    torch.save(cases, tmp_path / "cases.pt")
    out, codes = distributed.spawn("dp_ranks:grad_identity", 2, {"cases": str(tmp_path / "cases.pt"),
                                                                 "out": str(tmp_path / "out.pt")},
                                   tmp_path / "spawn", backend="gloo", timeout_s=300, stop=threading.Event())
    assert codes == {0: 0, 1: 0} and out == {"cases": len(CASES)}
    got = torch.load(tmp_path / "out.pt", weights_only=False)
    for (loss, agg), one, two in zip(CASES, ref, got):
        what = f"loss={loss} aggregation={agg}"
        assert one["grad"].norm() > 1e-4, what  # a step that learns something, or the comparison means nothing
        assert torch.allclose(two["grad"], one["grad"], rtol=1e-4, atol=1e-7), (what, (two["grad"] - one["grad"]).abs().max())
        assert torch.allclose(two["delta"], one["delta"], rtol=1e-4, atol=1e-7), what
        for k, v in one["metrics"].items():
            if k == "entropy" or not math.isfinite(v):
                continue
            assert two["metrics"][k] == pytest.approx(v, rel=1e-5, abs=1e-7), (what, k)
        assert two["pool"] == one["pool"], what

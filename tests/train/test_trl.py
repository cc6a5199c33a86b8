"""trainer=trl: the recipe run by Hugging Face TRL's GRPOTrainer, on the CPU with the tiny local model.

- the mapping onto GRPOConfig, field by field, for every loss x aggregation TRL has and the other mapped options;
- what TRL lacks is refused before launch, one line per option, and nothing is written;
- a short run writes a run directory that `rank`/`status` read like the built-in trainer's, and its pass rate moves;
- SIGTERM mid-run checkpoints (TRL's checkpoint-N) and a second `ablate train` resumes there without a gap.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.recipe import compose_run
from ablate.compose.resources import RECIPES_DIR
from ablate.config.identity import run_id
from ablate.config.schema import ConfigErrors
from ablate.config.support import PRESET_HINT, SUPPORT
from ablate.curves.inputs import curve_from_run_dir
from ablate.errors import ErrorKind
from ablate.fit.curve import Curve
from ablate.storage import store
from ablate.storage.metricsfile import REQUIRED_METRICS
from ablate.train.trl_config import grpo_config
from jobs import SMALL_TRAIN, assert_resumed_without_gap, error_kind, until

RECIPE = RECIPES_DIR / "base.yaml"
TRL = PRESET_HINT.split()  # the base recipe, minus what TRL lacks
CPU = torch.device("cpu")
runner = CliRunner()


def _args(tmp_path, *extra: str):
    return grpo_config(compose_run(RECIPE, [*TRL, *extra]), tmp_path / "ckpt", CPU)


# what every mapped config shares (the base recipe's optimizer and run settings)
COMMON = {
    "beta": 0.0,
    "num_iterations": 1,
    "learning_rate": 1e-4,
    "adam_beta1": 0.9,
    "adam_beta2": 0.99,
    "adam_epsilon": 1e-8,
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "warmup_steps": 100,
    "max_steps": 1000,
    "save_steps": 100,
    "seed": 0,
    "temperature": 1.0,
    "max_completion_length": 8,
    "num_generations": 8,
    "mask_truncated_completions": False,
    "use_vllm": False,
    "report_to": [],
    "use_cpu": True,
    "bf16": False,
}

CASES = {
    # loss x aggregation -> loss_type, importance level and clip parameters
    "cispo x token": ([], {"loss_type": "cispo", "epsilon_high": 5.0, "importance_sampling_level": "token"}),
    "grpo x sample": (
        ["loss=grpo", "aggregation=sample"],
        {"loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.2, "importance_sampling_level": "token"},
    ),
    "grpo x token": (["loss=grpo"], {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.2}),
    "dapo x token": (["loss=dapo"], {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}),
    "dapo x sample": (["loss=dapo", "aggregation=sample"], {"loss_type": "grpo", "epsilon": 0.2, "epsilon_high": 0.28}),
    "gspo x sample": (
        ["loss=gspo", "aggregation=sample"],
        {"loss_type": "grpo", "importance_sampling_level": "sequence", "epsilon": 3e-3, "epsilon_high": 4e-3},
    ),
    # normalisation and precision
    "normalization=batch": ([], {"scale_rewards": "batch"}),
    "normalization=prompt": (["normalization=prompt"], {"scale_rewards": "group"}),
    "normalization=none": (["normalization=none"], {"scale_rewards": "none"}),
    "fp32 head": ([], {"cast_lm_head_to_fp32": True}),
    "bf16 head": (["precision=bf16"], {"cast_lm_head_to_fp32": False}),
    # batch shape and the off-policy scheme: k optimizer steps per generation round
    "on-policy batch": (
        [],
        {
            "per_device_train_batch_size": 256,
            "gradient_accumulation_steps": 1,
            "steps_per_generation": 1,
            "generation_batch_size": 256,
        },
    ),
    "ppo k=4": (
        ["offpolicy.k=4"],
        {"per_device_train_batch_size": 256, "steps_per_generation": 4, "generation_batch_size": 1024},
    ),
    "micro-batches": (
        ["optim.micro_batch=16", "offpolicy.k=2", "batch.prompts=16", "batch.generations=4"],
        {
            "per_device_train_batch_size": 16,
            "gradient_accumulation_steps": 4,
            "num_generations": 4,
            "steps_per_generation": 8,
            "generation_batch_size": 128,
        },
    ),
    # generation length, optimizer, schedule and run
    "length and optimizer": (
        [
            "length.max_new_tokens=12",
            "optim.lr=3e-5",
            "optim.betas=[0.8,0.95]",
            "optim.eps=1e-15",
            "optim.weight_decay=0.01",
            "optim.grad_clip=0.5",
            "optim.lr_warmup_steps=7",
            "train.max_steps=50",
            "train.checkpoint_every=10",
            "seed=3",
            "rollout.temperature=0.7",
        ],
        {
            "max_completion_length": 12,
            "learning_rate": 3e-5,
            "adam_beta1": 0.8,
            "adam_beta2": 0.95,
            "adam_epsilon": 1e-15,
            "weight_decay": 0.01,
            "max_grad_norm": 0.5,
            "warmup_steps": 7,
            "max_steps": 50,
            "save_steps": 10,
            "seed": 3,
            "temperature": 0.7,
        },
    ),
    "vllm server": (
        ["rollout=vllm", "trainer.vllm_mode=server", "trainer.vllm_server_url=http://gen:8000"],
        {
            "use_vllm": True,
            "vllm_mode": "server",
            "vllm_server_base_url": "http://gen:8000",
            "vllm_gpu_memory_utilization": 0.3,
        },
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_grpo_config_field_by_field(case, tmp_path):
    overrides, expected = CASES[case]
    args = _args(tmp_path, *overrides)
    want = {**COMMON, **expected}
    got = {k: getattr(args, k) for k in want}
    for k, v in want.items():
        assert got[k] == pytest.approx(v) if isinstance(v, float) else got[k] == v, (k, got[k], v)
    assert args.lr_scheduler_type == "constant_with_warmup"
    assert args.output_dir == str(tmp_path / "ckpt") and args.save_total_limit == 2


def test_what_trl_lacks_is_refused_one_line_each_and_nothing_is_written(tmp_path):
    with pytest.raises(ConfigErrors) as e:
        compose_run(RECIPE, ["trainer=trl"])  # the base recipe as it is: five options TRL does not have
    assert [line.split(":")[0].split(" ")[0] for line in e.value.errors] == [
        "aggregation=prompt",
        "filtering.zero_variance=true",
        "filtering.no_positive_resampling=true",
        "length=interrupt",
        "offpolicy=pipeline",
    ]
    assert all("trainer=ablate" in line for line in e.value.errors)
    for extra, culprit in (
        (["aggregation=sample"], "loss=cispo with aggregation=sample"),
        (["resources.nproc=2", "train.sharding=fsdp"], "train.sharding=fsdp"),
        (["resources.nproc=2", "batch.prompts=3", "batch.generations=3"], "batch.prompts x"),
        (["optim.micro_batch=100"], "optim.micro_batch=100"),
    ):
        with pytest.raises(ConfigErrors) as e:
            compose_run(RECIPE, [*TRL, *extra])
        assert len(e.value.errors) == 1 and e.value.errors[0].startswith(culprit), e.value.errors
    out = tmp_path / "run"
    res = runner.invoke(app, ["train", str(RECIPE), "trainer=trl", "--run-dir", str(out)])
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error[")]
    assert res.exit_code == 2 and lines and all(error_kind(ln) is ErrorKind.RECIPE for ln in lines), res.output
    assert any("aggregation=prompt" in ln for ln in lines), res.output
    assert not out.exists()


def test_trainer_choice_is_part_of_the_id_and_ablate_keeps_old_ids():
    base = compose_run(RECIPE, [])
    assert run_id(base) == "7a75b21612e5"  # the base recipe's id before the trainer group existed
    assert run_id(compose_run(RECIPE, TRL)) != run_id(compose_run(RECIPE, [t for t in TRL if t != "trainer=trl"]))


def test_show_trainers_prints_the_support_matrix():
    res = runner.invoke(app, ["show", "--trainers"])
    assert res.exit_code == 0, res.output
    words = " ".join(res.output.split())
    for option, _, _ in SUPPORT:
        assert option.split(" ")[0] in words
    assert f"ablate train recipes/base.yaml {PRESET_HINT}" in words
    res = runner.invoke(app, ["show", "--trainers", "recipes/base.yaml", "los=dapo"])  # not silently ignored
    assert res.exit_code == 2 and res.output.startswith("error[usage]: --trainers"), res.output


# ---- real runs (TRL's GRPOTrainer on the CPU, the tiny model of the base recipe) ----

RUN = [*TRL, "train.val_size=400", "optim.lr=2e-4", "optim.lr_warmup_steps=0"]


@pytest.mark.slow
def test_a_trl_run_writes_the_run_directory_and_its_pass_rate_moves(tmp_path):
    from ablate.train import run as train_run

    cfg = compose_run(RECIPE, [*RUN, "train.max_steps=100", "train.eval_every=25", "train.checkpoint_every=50"])
    summary = train_run(cfg, tmp_path / "run")
    assert summary["status"] == "done" and summary["step"] == 100
    info = store.read_json(tmp_path / "run" / "run.json")
    assert info["status"] == "done" and info["trainer"] == "trl" and info["run_id"] == run_id(cfg)
    recs = store.read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 25, 50, 75, 100]
    for r in recs:
        assert set(REQUIRED_METRICS) <= set(r) and r["val_n"] == 1600
    for r in recs[1:]:
        assert {"train_reward", "truncation_rate", "mean_response_len", "entropy", "grad_norm", "is_clip_frac"} <= set(
            r
        )
    assert [r["samples"] for r in recs] == [0, 6400, 12800, 19200, 25600]  # 32 prompts x 8 per step
    assert all(a["gpu_hours"] < b["gpu_hours"] and a["flops"] < b["flops"] for a, b in itertools.pairwise(recs))
    assert sorted(p.name for p in (tmp_path / "run" / "ckpt").glob("checkpoint-*")) == [
        "checkpoint-100",
        "checkpoint-50",
    ]
    # the pass rate moves: the last evaluations are above R0 by more than 4 binomial standard errors
    r0, late = recs[0]["val_pass_rate"], (recs[-2]["val_pass_rate"] + recs[-1]["val_pass_rate"]) / 2
    se = (r0 * (1 - r0) / 1600) ** 0.5
    assert late > r0 + 4 * se, [r["val_pass_rate"] for r in recs]
    curve = curve_from_run_dir(tmp_path / "run", x="samples")  # what rank/extrapolate read
    assert isinstance(curve, Curve) and list(curve.x) == [0, 6400, 12800, 19200, 25600]


def _metric_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [r["step"] for r in store.read_jsonl(path)] if path.exists() else []


def _stop_after(cmd: list[str], out: Path, past: int) -> None:
    """Start `ablate train` (cmd), SIGTERM it once it has written an evaluation at step >= past, and check that it
    stopped cleanly (driven by the run's own state, never by time)."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    until(lambda: p.poll() is not None or any(s >= past for s in _metric_steps(out)), f"an evaluation at step {past}")
    assert p.poll() is None, p.communicate()[1][-2000:]  # still running: it did not fail on the way
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate()
    assert p.returncode == 128 + signal.SIGTERM, err[-2000:]  # stopped by the signal: 143, not success


@pytest.mark.slow
def test_sigterm_mid_run_checkpoints_and_the_next_train_resumes_there(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "ablate",
        "train",
        str(RECIPE),
        *RUN,
        "train.max_steps=1000000",
        "train.eval_every=2",
        "train.checkpoint_every=1000000",
        "--run-dir",
        str(out),
    ]

    _stop_after(cmd, out, 4)
    stopped, first = store.read_json(out / "run.json")["step"], _metric_steps(out)
    assert store.read_json(out / "run.json")["status"] == "preempted"
    assert (out / "ckpt" / f"checkpoint-{stopped}" / "ablate_state.json").is_file()
    _stop_after(cmd, out, stopped + 4)
    assert "resuming from checkpoint-" in (out / "logs" / "train.log").read_text()
    # the second attempt started from `stopped`: the helper checks run.json's resumed_from, every evaluation once
    assert_resumed_without_gap(out, [s for s in first if s <= stopped], stopped)


SMALL = [o for o in SMALL_TRAIN if not o.startswith("length.think")]  # the small test run, with length=none


def test_data_parallel_per_rank_batch(tmp_path):
    args = grpo_config(compose_run(RECIPE, [*TRL, "resources.nproc=4", "offpolicy.k=2"]), tmp_path, CPU)
    # the step's 256 completions split over 4 ranks; k=2 rounds of 2 steps each: 512 generated per round
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps, args.steps_per_generation) == (64, 1, 2)


@pytest.mark.slow
def test_two_ranks_train_one_step_together_stop_together_and_resume(tmp_path):
    """Two ranks (gloo, spawned like any data-parallel run) under TRL with PPO-off-policy-2: one run directory
    written by rank 0, the step's batch split (not doubled), a SIGTERM stops both at one step, and the next
    `ablate train` resumes."""
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "ablate",
        "train",
        str(RECIPE),
        *TRL,
        *SMALL,
        "resources.nproc=2",
        "offpolicy.k=2",
        "train.max_steps=1000000",
        "train.eval_every=2",
        "train.checkpoint_every=1000000",
        "--run-dir",
        str(out),
    ]

    _stop_after(cmd, out, 4)
    info = store.read_json(out / "run.json")
    stopped, first = info["step"], _metric_steps(out)
    assert (info["status"], info["ranks"], info["trainer"]) == ("preempted", 2, "trl")
    assert (out / "ckpt" / f"checkpoint-{stopped}" / "ablate_state.json").is_file()
    assert "resuming from" not in (out / "logs" / "rank-1.log").read_text()
    _stop_after(cmd, out, stopped + 4)
    assert f"resuming from checkpoint-{stopped}" in (out / "logs" / "rank-1.log").read_text()  # both ranks resumed
    recs = assert_resumed_without_gap(out, [s for s in first if s <= stopped], stopped)
    # 4 prompts x 4 per step over both ranks, counted step by step although TRL generates k=2 steps at once (and a
    # round cut by the stop is generated anew on resume)
    assert all(r["samples"] == 16 * r["step"] for r in recs), [(r["step"], r["samples"]) for r in recs]
    assert all("entropy" in r and "grad_norm" in r for r in recs[1:])  # TRL's log of the same step


@pytest.mark.slow
def test_one_hugging_face_folder_trains_under_both_trainers(tmp_path):
    """model=hf model.path=FOLDER: the same local folder (here the tiny model's warmed-up one, a plain HF folder
    with its tokenizer) is loaded and trained by the built-in trainer and by TRL, and both start from the same R0."""
    from ablate.train import run as train_run
    from ablate.train.step import TASK_PHRASE
    from ablate.train.tasks import build_task
    from ablate.train.warmup import warmed_up_folder

    tiny = compose_run(RECIPE, [*TRL, *SMALL])
    folder = warmed_up_folder(tiny, build_task(tiny.task, tiny.train.val_size, TASK_PHRASE[tiny.task.name]))
    hf = ["model=hf", f"model.path={folder}", "train.max_steps=2", "train.eval_every=1"]
    small = [o for o in SMALL if not o.startswith("model.")]
    r0 = {}
    for trainer in ("ablate", "trl"):
        cfg = compose_run(RECIPE, [*TRL, *small, *hf, f"trainer={trainer}"])
        summary = train_run(cfg, tmp_path / trainer)
        assert summary["status"] == "done" and summary["step"] == 2, summary
        r0[trainer] = summary["r0"]
    assert r0["ablate"] == r0["trl"]  # the same weights, evaluated by the same evaluator at step 0


def test_prompts_start_with_one_bos_whatever_the_tokenizer_adds():
    """TRL tokenizes the prompt text with the tokenizer's defaults: the BOS text goes in front only when the
    tokenizer would not add BOS itself (a Llama-style one does), so both trainers see [BOS, prompt...] once."""
    from tokenizers import processors

    from ablate.train.policy import build_char_tokenizer
    from ablate.train.trl_config import prompt_prefix

    plain = build_char_tokenizer("0123456789+=")
    adding = build_char_tokenizer("0123456789+=")
    adding._tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    for tok in (plain, adding):
        ids = tok(prompt_prefix(tok) + "1+2=")["input_ids"]
        assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id, ids
    assert (prompt_prefix(plain), prompt_prefix(adding)) == ("<s>", "")


@pytest.mark.slurm
def test_a_trl_run_of_two_slurm_tasks(tmp_path, slurm_cluster):
    """trainer=trl with resources.nproc=2 under -e slurm: one job of two tasks, each a rank that joined the process
    group from submitit's view of the job, with TRL (through accelerate) training across them; rank 0 records."""
    from ablate.compose.spec import RunSpec
    from ablate.compose.sweep import Sweep
    from ablate.config.identity import arm_id
    from ablate.launch.status import wait_for
    from ablate.launch.submit import launch_sweep
    from ablate.storage.rundir import RunDir
    from ablate.train import run as train_run

    train_run(compose_run(RECIPE, SMALL_TRAIN), tmp_path / "warm")  # the warm-up, cached once for the jobs
    cfg = compose_run(RECIPE, [*SMALL, *TRL, "resources.nproc=2"])
    spec = RunSpec("trls", "trl,seed=0", run_id(cfg), arm_id(cfg), ("seed=0",), cfg)
    plan = launch_sweep(
        Sweep("trls", RECIPE, None, [0], [spec]), root=tmp_path, executor="slurm", profile="local", echo=None
    )
    st = wait_for(tmp_path, "trls", [spec.run_id], timeout=300)[spec.run_id]
    rd = RunDir.of(tmp_path, "trls", spec.run_id)
    assert st.state == "done", (st, (rd.logs_dir / "train.log").read_text()[-2000:] if rd.train_log.exists() else "")
    meta = store.read_json(rd.info_path)
    assert (meta["ranks"], meta["trainer"], meta["step"]) == (2, "trl", 6)
    recs = store.read_jsonl(rd.metrics_path)
    assert [r["step"] for r in recs] == [0, 2, 4, 6] and [r["samples"] for r in recs] == [0, 32, 64, 96]
    assert (rd.logs_dir / "rank-1.log").read_text().count("eval step") == 4
    sacct = subprocess.run(
        ["sacct", "-j", plan.job_ids[spec.run_id], "-n", "-P", "-o", "JobID,NTasks"], capture_output=True, text=True
    ).stdout
    assert any(line.split("|")[1] == "2" for line in sacct.splitlines() if "|" in line), sacct

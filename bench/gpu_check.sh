#!/usr/bin/env bash
# bench/gpu_check.sh — the device check for a task that is lent a GPU machine (CI never runs it). <= 8 minutes.
#
#   bash bench/gpu_check.sh            # from the repository root, on the GPU machine; results in $OUT or bench/out
#
# The lent machine cannot install from a registry and ~64 MiB travel per call, so vLLM cannot go there: this
# checks what can run on CUDA with the machine's own torch + transformers, with a model built locally (no hub):
#   1. the torch sampler on CUDA: log-probs of the sampled tokens == the trainer's recompute (fp32, within 1e-4),
#      EOS/max-length semantics, tokens/s at 256 completions;
#   2. a short RL run (`ablate train ... train.device=cuda`, tiny model, 30 steps, PipelineRL-2: on CUDA its
#      generator runs in a thread) on the GPU: policy, sampler and optimizer on the device (run.json says cuda),
#      status done, lag within the bound, a valid metrics file;
#   3. with 2 or more GPUs: the same run data-parallel on 2 GPUs (resources.nproc=2: two ranks over NCCL, one GPU
#      each), then bench/scale.py on CUDA (steps/s and tokens/s per GPU at 1 and 2 ranks). Skipped with one GPU.
# Each step has its own timeout (60 + 150 + 240 + 300 + 300 s); the first failure stops the script (set -e).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-bench/out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export ABLATE_CACHE="$OUT/ablate-cache"

echo "== 0. environment"
timeout 60 "$PY" - <<'EOF'
import torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)
assert torch.cuda.is_available(), "no CUDA device visible"
print(torch.cuda.get_device_name(0))
EOF

echo "== 1. torch sampler on CUDA"
timeout 150 "$PY" - <<'EOF'
import json, os, time, torch
from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model
from ablate.train.rollout import SampleSpec, TorchSampler

torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 for the 1e-4 comparison
torch.backends.cudnn.allow_tf32 = False
tok = build_char_tokenizer("0123456789+=>")
out = {}
for name, size in {"tiny": dict(n_layers=2, hidden=128, n_heads=4, mlp=512),
                   "25m": dict(n_layers=6, hidden=512, n_heads=8, mlp=2048)}.items():
    pol = Policy(build_tiny_model(size, len(tok), 0).cuda().eval(), tok, torch.float32)
    g = torch.Generator(device="cuda").manual_seed(0)
    xs = torch.randint(0, 1000, (32, 2), generator=torch.Generator().manual_seed(0)).tolist()
    prompts = [f"{a}+{b}=" for a, b in xs]  # different lengths: left padding on the GPU path too
    s = TorchSampler(pol)
    s.generate(prompts[:2], 2, SampleSpec(4), g)  # warm-up
    torch.cuda.synchronize(); t0 = time.perf_counter()
    ro = s.generate(prompts, 8, SampleSpec(max_new_tokens=64, temperature=1.0), g)
    torch.cuda.synchronize(); dt = time.perf_counter() - t0
    assert ro.tokens.is_cuda and ro.tokens.shape[0] == 256
    with torch.no_grad():
        lg = pol.completion_logits(ro.prompt_ids, ro.prompt_mask, ro.group, ro.tokens).float()
    ref = torch.log_softmax(lg, -1).gather(2, ro.tokens[..., None]).squeeze(2)
    diff = float(((ref - ro.logp) * ro.mask).abs().max())
    assert diff < 1e-4, f"{name}: sampler vs recompute log-probs differ by {diff}"
    ends = ro.present.sum(1) - 1
    eos_ok = bool(((ro.tokens.gather(1, ends[:, None]).squeeze(1) == pol.eos_id) | ro.truncated).all())
    assert eos_ok, "a row ended without EOS but is not marked truncated"
    out[name] = {"params": pol.n_params, "tokens_per_s": round(int(ro.present.sum()) / dt), "max_logp_diff": diff}
    print(name, out[name], flush=True)
open(os.path.join(os.environ.get("OUT", "bench/out"), "gpu_sampler.json"), "w").write(json.dumps(out, indent=2))
EOF

echo "== 2. a short RL run on the GPU machine"
rm -rf "$OUT/gpu-run"
timeout 240 "$PY" -m ablate train recipes/base.yaml \
  task.digits=1 task.train_size=80 task.unseen_frac=0 train.val_size=20 train.eval_k=8 \
  batch.prompts=8 batch.generations=8 length.max_new_tokens=4 length.think_budget_min=1 length.think_budget_max=2 \
  train.warmup.max_steps=300 train.warmup.lr=3e-3 train.warmup.batch=32 train.warmup.target_pass_rate=0.2 \
  train.warmup.check_every=10 offpolicy=pipeline offpolicy.k=2 optim.lr=5e-4 optim.lr_warmup_steps=0 train.max_steps=30 train.eval_every=10 \
  train.device=cuda --run-dir "$OUT/gpu-run"
timeout 30 "$PY" - "$OUT/gpu-run" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "run.json").read_text())
recs = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines() if l.strip()]
assert meta["status"] == "done", meta
assert meta["device"].startswith("cuda"), meta["device"]
assert 1 <= meta["max_lag"] <= 2, meta["max_lag"]  # PipelineRL-2 with its generator thread on the GPU
assert [r["step"] for r in recs] == [0, 10, 20, 30], recs
assert all({"step", "gpu_hours", "flops", "samples", "val_pass_rate"} <= set(r) for r in recs)
print("run:", meta["status"], [round(r["val_pass_rate"], 3) for r in recs], "gpu_hours", round(recs[-1]["gpu_hours"], 5))
EOF
echo "== 3. data-parallel on 2 GPUs"
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -ge 2 ]; then
  rm -rf "$OUT/gpu-dp"
  timeout 300 "$PY" -m ablate train recipes/base.yaml \
    task.digits=1 task.train_size=80 task.unseen_frac=0 train.val_size=20 train.eval_k=8 \
    batch.prompts=8 batch.generations=8 length.max_new_tokens=4 length.think_budget_min=1 length.think_budget_max=2 \
    train.warmup.max_steps=300 train.warmup.lr=3e-3 train.warmup.batch=32 train.warmup.target_pass_rate=0.2 \
    train.warmup.check_every=10 offpolicy=ppo offpolicy.k=1 optim.lr=5e-4 optim.lr_warmup_steps=0 train.max_steps=30 \
    train.eval_every=10 train.device=cuda resources.nproc=2 --run-dir "$OUT/gpu-dp"
  timeout 30 "$PY" - "$OUT/gpu-dp" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
meta = json.loads((d / "run.json").read_text())
recs = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines() if l.strip()]
assert meta["status"] == "done" and meta["ranks"] == 2 and meta["device"].startswith("cuda"), meta
assert [r["step"] for r in recs] == [0, 10, 20, 30], recs
assert "eval step 30" in (d / "logs" / "rank-1.log").read_text()
print("dp run:", meta["status"], [round(r["val_pass_rate"], 3) for r in recs])
EOF
  timeout 300 "$PY" bench/scale.py --nproc 2 --steps 20 --json "$OUT/gpu_scale.json" train.device=cuda
else
  echo "skipped: $NGPU GPU visible (needs 2)"
fi
echo "== gpu_check: all steps passed"


"""Rollout throughput: the vLLM backend vs the torch sampler, same prompts, same process; weight-sync time per step.

    .venv-vllm/bin/python bench/rollout.py            # needs vLLM (make vllm-setup); ~3 min on 2 CPU cores
    .venv-vllm/bin/python bench/rollout.py --quick    # smaller batches, for a smoke check

Models (random init, built locally, char tokenizer): `tiny` = the embedded default (2 layers, hidden 128, 0.5M
parameters) and `25m` (6 layers, hidden 512, 8 heads of 64, MLP 2048: 25M parameters). Per model and generation length:
tokens/s of each backend at temperature 1 (generated tokens, EOS included, over wall time; the vLLM engine is
started and warmed before timing; vLLM seeded per request, as runs use it, and unseeded), and the wall time of a
weight sync after an optimizer step (`load_weights`, the PipelineRL path: copy into the policy + reload in the
engine + prefix-cache reset). Writes bench/out/rollout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch

from ablate.train.policy import Policy, build_char_tokenizer, build_tiny_model
from ablate.train.rollout import SampleSpec, TorchSampler
from ablate.train.rollout_vllm import VLLMSampler, shutdown_engines

MODELS = {
    "tiny": {"n_layers": 2, "hidden": 128, "n_heads": 4, "mlp": 512},
    "25m": {"n_layers": 6, "hidden": 512, "n_heads": 8, "mlp": 2048},
}


def make_policy(size: dict) -> Policy:
    tok = build_char_tokenizer("0123456789+=>")
    model = build_tiny_model(size, len(tok), seed=0)
    model.eval()
    return Policy(model, tok, torch.float32)


def prompts(n: int) -> list[str]:
    g = torch.Generator().manual_seed(0)
    xs = torch.randint(0, 1000, (n, 2), generator=g).tolist()
    return [f"{a:03d}+{b:03d}=" for a, b in xs]


def tokens_per_s(sampler, ps: list[str], n: int, spec: SampleSpec, reps: int, seeded: bool = True) -> tuple[float, int]:
    """Best-of-reps generated tokens per second (seeded: a torch.Generator per call, as the run passes one)."""
    best, ntok = 0.0, 0
    for r in range(reps):
        t0 = time.perf_counter()
        ro = sampler.generate(ps, n, spec, torch.Generator().manual_seed(r) if seeded else None)
        dt = time.perf_counter() - t0
        ntok = int(ro.present.sum())
        best = max(best, ntok / dt)
    return best, ntok


def sync_times(sampler: VLLMSampler, pol: Policy, steps: int) -> list[float]:
    """Optimizer step on the policy, then load_weights into the sampler (engine reload + prefix-cache reset)."""
    opt = torch.optim.AdamW(pol.model.parameters(), lr=1e-4)
    out = []
    ids, _ = pol.encode_prompts(["123+456="])
    for v in range(1, steps + 1):
        loss = pol.model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        sd = {k: t.detach().clone() for k, t in pol.model.state_dict().items()}
        n0 = len(sampler.sync_seconds)
        sampler.load_weights(sd, v)
        out.extend(sampler.sync_seconds[n0:])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "rollout.json"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    G, n = (8, 4) if a.quick else (32, 8)  # 256 completions per call by default
    cases = [("tiny", 16), ("tiny", 64), ("25m", 16), ("25m", 128)] if not a.quick else [("tiny", 16), ("25m", 16)]
    ps = prompts(G)
    results = []
    for name in dict.fromkeys(m for m, _ in cases):
        pol = make_policy(MODELS[name])
        params = sum(p.numel() for p in pol.model.parameters())
        vs = VLLMSampler(pol, kv_cache_mb=512)
        t0 = time.perf_counter()
        vs.generate(ps[:2], 2, SampleSpec(4, 1.0), torch.Generator())  # start + warm the engine
        start_s = time.perf_counter() - t0
        ts = TorchSampler(pol)
        ts.generate(ps[:2], 2, SampleSpec(4, 1.0), torch.Generator())
        for m, T in cases:
            if m != name:
                continue
            spec = SampleSpec(max_new_tokens=T, temperature=1.0)
            reps = 1 if (a.quick or T > 64) else 2
            v_tps, v_tok = tokens_per_s(vs, ps, n, spec, reps)
            u_tps, _ = tokens_per_s(vs, ps, n, spec, reps, seeded=False)
            t_tps, t_tok = tokens_per_s(ts, ps, n, spec, reps)
            row = {
                "model": name,
                "params": params,
                "completions": G * n,
                "max_new_tokens": T,
                "vllm_tokens_per_s": round(v_tps),
                "vllm_unseeded_tokens_per_s": round(u_tps),
                "torch_tokens_per_s": round(t_tps),
                "vllm_tokens": v_tok,
                "torch_tokens": t_tok,
            }
            results.append(row)
            print(json.dumps(row), flush=True)
        syncs = sync_times(vs, pol, 3 if a.quick else 8)
        row = {
            "model": name,
            "params": params,
            "engine_start_s": round(start_s, 2),
            "weight_sync_ms_median": round(1e3 * statistics.median(syncs), 1),
            "weight_sync_ms_max": round(1e3 * max(syncs), 1),
            "sync_steps": len(syncs),
        }
        results.append(row)
        print(json.dumps(row), flush=True)
        shutdown_engines()
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"threads": a.threads, "torch": torch.__version__, "results": results}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

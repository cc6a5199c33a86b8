"""`ablate sweep --prune` on real runs: the loss sweep with three seeds, once in full and once pruned; the same
verdicts, and the compute the pruned one did not spend.

    .venv/bin/python bench/prune.py [--root bench/out/prune] [--seeds 0,1,2] [--max-parallel 12] [--replay]

1. `ablate sweep recipes/loss.yaml seed=0,1,2 --follow` into ROOT/full: every run to its max_steps.
2. The same sweep with `--prune --prune-x samples --prune-to 2x` into ROOT/pruned: the monitor stops the runs of
   arms whose verdict against the baseline is settled, and broken runs.
3. `ablate rank` on both (samples, at twice the budget): the verdicts side by side, and the compute each sweep
   spent (samples, the load-independent count; GPU-hours as the status reports them).
4. The monitor's rule replayed offline on the full sweep's curves (ablate.prune.rules.replay: the same settled checks at
   every 10% of the way, the runs of settled arms cut where they would have stopped): its verdicts and saving.
   `--replay` does steps 1 and 4 only (the live pruned sweep costs as much again).
All runs of a sweep go at once (--max-parallel, default: all twelve), as on a cluster: the monitor can only stop
runs that are running. Re-running reuses finished sweeps (a sweep never repeats finished work); delete ROOT to
measure again. On 2 cores: about 40 minutes for the full sweep, 25 for the pruned one and 5 for the replay.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = "recipes/loss.yaml"


def ablate(*args: str, capture: bool = False) -> str:
    print("$ ablate " + " ".join(args), flush=True)
    out = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=ROOT, text=True, capture_output=capture)
    if out.returncode != 0:
        raise SystemExit(
            f"prune: `ablate {' '.join(args)}` exited with {out.returncode}: {out.stderr if capture else ''}"
        )
    return out.stdout if capture else ""


def spent(root: Path) -> dict[str, float]:
    """Samples and GPU-hours the sweep's runs spent, from their last metrics lines."""
    from ablate.states import STOPPED
    from ablate.storage.rundir import RunDir

    samples = gpu = 0.0
    runs = stopped = 0
    for p in sorted((root / "loss" / "runs").iterdir()):
        rd = RunDir(p)
        last = rd.last_metrics() or {}
        samples += float(last.get("samples", 0))
        gpu += float(last.get("gpu_hours", 0.0))
        runs += 1
        stopped += rd.info().status in STOPPED
    return {"samples": samples, "gpu_hours": gpu, "runs": runs, "stopped": stopped}


def replayed(sweep_dir: Path, to: float) -> None:
    """The monitor's settled rule replayed on the full sweep's real curves: verdicts and saving."""
    from ablate.curves.inputs import curves_from_sweep
    from ablate.fit.futures import verdict_key
    from ablate.prune.rules import PruneSettings, replay

    curves, _ = curves_from_sweep(sweep_dir, x="samples")
    print(
        f"\nreplaying the settled rule on {len(curves)} runs of {sweep_dir} (a check at every 10% of the way)",
        flush=True,
    )
    r = replay(curves, to, PruneSettings(x="samples", to=to))
    full = {a.arm: verdict_key(a) for a in r.full.arms}
    pruned = {a.arm: verdict_key(a) for a in r.pruned.arms}
    arm_of = {c.run: c.group or c.run for c in curves}
    at: dict[str, float] = {}
    for run, share in r.stopped.items():
        at[arm_of[run]] = share
    print(f"{'arm':<14}{'full':<22}{'replayed pruned':<30}same")
    for arm, v in full.items():
        tag = f" (stopped at {at[arm]:.0%})" if arm in at else ""
        print(f"{arm:<14}{v:<22}{pruned.get(arm, 'missing') + tag:<30}{'yes' if pruned.get(arm) == v else 'NO'}")
    print(
        f"replay saving: {1 - r.spent:.1%} of the samples; same verdicts: "
        f"{'yes' if all(pruned.get(a) == v for a, v in full.items()) else 'NO'}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT / "bench" / "out" / "prune")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--max-parallel", type=int, default=12)
    ap.add_argument("--replay", action="store_true", help="the full sweep and the offline replay only")
    args = ap.parse_args()
    from ablate.compose.sweep import load_sweep

    sweep = load_sweep(ROOT / SWEEP, [f"seed={args.seeds}"])
    budget = max(r.config.train.max_steps * r.config.batch.prompts * r.config.batch.generations for r in sweep.runs)
    to = str(2 * budget)
    full, pruned = args.root / "full", args.root / "pruned"
    common = [SWEEP, f"seed={args.seeds}", "--max-parallel", str(args.max_parallel), "--follow"]
    ablate("sweep", *common, "--root", str(full))
    replayed(full / "loss", float(to))
    if args.replay:
        return
    ablate("sweep", *common, "--root", str(pruned), "--prune", "--prune-x", "samples", "--prune-to", to)
    verdicts = {}
    for name, root in (("full", full), ("pruned", pruned)):
        out = json.loads(ablate("rank", str(root / "loss"), "--x", "samples", "--to", to, "--json", capture=True))
        verdicts[name] = {a["arm"]: (a["verdict"], a.get("r_call"), a.get("stopped") or []) for a in out["arms"]}
    print("\nverdicts at samples = " + to)
    print(f"{'arm':<14}{'full':<22}{'pruned':<22}same")
    same = True
    for arm in verdicts["full"]:
        f, p = verdicts["full"][arm], verdicts["pruned"].get(arm, ("missing", None, []))
        ok = f[:2] == p[:2]
        same &= ok
        tag = f" ({', '.join(p[2])})" if p[2] else ""
        print(
            f"{arm:<14}{f[0] + (' ' + f[1] if f[1] else ''):<22}{p[0] + (' ' + p[1] if p[1] else '') + tag:<22}"
            f"{'yes' if ok else 'NO'}"
        )
    a, b = spent(full), spent(pruned)
    print(f"\ncompute spent   full: {a['samples']:.4g} samples, {a['gpu_hours']:.3g} GPU-h ({a['runs']} runs)")
    print(
        f"              pruned: {b['samples']:.4g} samples, {b['gpu_hours']:.3g} GPU-h ({b['stopped']} of "
        f"{b['runs']} runs stopped)"
    )
    print(
        f"saving: {1 - b['samples'] / a['samples']:.1%} of the samples, {1 - b['gpu_hours'] / a['gpu_hours']:.1%} "
        f"of the GPU-hours; same verdicts: {'yes' if same else 'NO'}"
    )
    decisions = pruned / "loss" / "prune" / "decisions.jsonl"
    if decisions.exists():
        print("\nprune decisions:")
        for line in decisions.read_text().splitlines():
            d = json.loads(line)
            if "run_id" not in d:  # the ranking target, fixed at the first check
                continue
            print(f"  {d['run_id']} {d['state']} at step {d['step']}: {d['reason']}")


if __name__ == "__main__":
    main()

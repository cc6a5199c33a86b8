"""A real A/A check: N seeds of the base recipe, ranked against each other. Identical configs must not be told
apart: no verdict may be a change (ceiling or efficiency ↑/↓); `equivalent` or `inconclusive` are both honest.

    .venv/bin/python bench/aa.py [--seeds 6] [--root bench/out/aa] [--x samples]

1. `ablate sweep recipes/base.yaml seed=0,...,N-1` (the local executor, one core per run).
2. Each seed becomes its own arm (a curve file with a `group` column) and is ranked against seed 0, exactly as a
   user would rank a sweep with one seed per arm:
   - with the default rule (calibrated tests): a single seed has no seed spread of its own, so the honest answer is
     `inconclusive` (needs seeds) unless a floor is measured;
   - with the floor measured on these very seeds (`--noise`, written by `ablate rank --save-noise` on the N seeds as
     one arm), which is what a stored calibration of the task and recipe would give;
   - with the paper's convention (`--margin paper`: +-0.02 on A, +-15% compute), for comparison.
3. The seeds split into two arms (first half against second half), ranked with the default rule.
Prints how many verdicts are changes in each case (target: 0), the per-seed fits, and the
noise the fits measured (the calibration's noise model for the embedded task takes its sizes from here).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("ceiling_up", "ceiling_down", "efficiency_up", "efficiency_down")


def ablate(*args: str, capture: bool = False) -> str:
    cmd = [sys.executable, "-m", "ablate", *args]
    print("$ ablate " + " ".join(args), flush=True)
    out = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=capture)
    if out.returncode != 0:
        raise SystemExit(f"aa: `ablate {' '.join(args)}` exited with {out.returncode}: {out.stderr if capture else ''}")
    return out.stdout if capture else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--root", type=Path, default=ROOT / "bench" / "out" / "aa")
    ap.add_argument("--x", default="samples")
    ap.add_argument("--to-factor", type=float, default=2.0, help="rank at this multiple of the compute spent")
    a = ap.parse_args()
    if a.seeds < 4:
        raise SystemExit("aa: give --seeds 4 or more")
    sys.path.insert(0, str(ROOT / "src"))
    from ablate.curves.inputs import curves_from_sweep
    from ablate.curves.tables import write_csv

    seeds = ",".join(str(s) for s in range(a.seeds))
    ablate("sweep", "recipes/base.yaml", f"seed={seeds}", "--root", str(a.root), "--follow")
    curves, skipped = curves_from_sweep(a.root / "base", x=a.x)
    if skipped:
        raise SystemExit(f"aa: runs without a curve: {skipped}")
    to = str(a.to_factor * max(float(c.x.max()) for c in curves))
    for c in curves:  # each seed its own arm
        c.group = c.run
    solo = a.root / "aa-solo.csv"
    write_csv(curves, solo, x=a.x)
    base = next(c.run for c in curves if c.run.endswith("seed=0"))
    common = ["--group", "group", "--x", a.x, "--to", to, "--json"]
    results = {}
    noise = a.root / "noise.json"
    one_arm = a.root / "aa-one-arm.csv"
    for c in curves:
        c.group = "base"
    write_csv(curves, one_arm, x=a.x)
    ablate("rank", str(one_arm), "--group", "group", "--x", a.x, "--to", to, "--save-noise", str(noise), capture=True)
    for c in curves:
        c.group = c.run
    for name, extra in (
        ("default rule", []),
        ("floor from these seeds", ["--noise", str(noise)]),
        ("paper convention", ["--margin", "paper"]),
    ):
        res = json.loads(ablate("rank", str(solo), *common, "--baseline", base, *extra, capture=True))
        results[name] = [
            (arm["arm"], arm["verdict"], arm["detail"]) for arm in res["arms"] if arm["verdict"] != "baseline"
        ]
    half = a.seeds // 2
    for i, c in enumerate(sorted(curves, key=lambda c: c.run)):
        c.group = "first-half" if i < half else "second-half"
    split = a.root / "aa-split.csv"
    write_csv(curves, split, x=a.x)
    res = json.loads(ablate("rank", str(split), *common, "--baseline", "first-half", capture=True))
    results[f"{half} seeds against {a.seeds - half}"] = [
        (arm["arm"], arm["verdict"], arm["detail"]) for arm in res["arms"] if arm["verdict"] != "baseline"
    ]
    fits = json.loads(ablate("fit", str(solo), "--x", a.x, "--to", to, "--json", capture=True))["fits"]
    print(f"\nper-seed fits on '{a.x}' (--to {float(to):g}):")
    for f in fits:
        nz = (f.get("noise") or [{}])[0]
        print(
            f"  {f['run']:24s} R0 {f['R0']:.3f}  A {f['A']:.3f}  B {f['B']:.2f}  C_mid {f['C_mid']:10.0f}  "
            f"f {f['gain_fraction']:.2f}  {f['status']:15s} noise: drift sd {nz.get('drift_sd') or 0:.4f} "
            f"rho {nz.get('rho') or 0:.2f} eval sd {nz.get('eval_sd') or 0:.4f}"
        )
    print(f"\nmeasured seed spread: {noise.read_text().strip()}")
    out = {"seeds": a.seeds, "x": a.x, "to": float(to), "results": results, "fits": fits}
    total = 0
    for name, rows in results.items():
        calls = [r for r in rows if r[1] in CALLS]
        total += len(calls)
        print(f"\n{name}: {len(calls)} of {len(rows)} comparisons called an effect (target 0)")
        for arm, verdict, detail in rows:
            print(f"  {arm:24s} {verdict:16s} {detail}")
    (a.root / "aa.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"\nwrote {a.root / 'aa.json'}")


if __name__ == "__main__":
    main()

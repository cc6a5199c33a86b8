"""What a refactor must leave unchanged, captured so two checkouts can be compared: the run ids and arm ids of every
packaged recipe and sweep file (`ablate sweep FILE --dry-run`), the metrics of a 20-step run of the base recipe
(every value except the clock-driven `wall_s` and `gpu_hours`), and the verdicts `ablate rank --json` gives on a
finished sweep. It drives the CLI only, so the same script runs against an older checkout as well:

    .venv/bin/python bench/invariants.py --out /tmp/after [--sweep sweeps/demo]
    PYTHONPATH=/path/to/old/src .venv/bin/python bench/invariants.py --out /tmp/before --sweep ...
    .venv/bin/python bench/invariants.py --compare /tmp/before /tmp/after

The 20-step run takes about a minute on 2 cores; the rest a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CLOCK = ("wall_s", "gpu_hours")
"""Metrics that measure the machine, not the run."""


def ablate(*args: str, cwd: Path) -> str:
    env = {**os.environ, "COLUMNS": "250"}
    done = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"invariants: `ablate {' '.join(args)}` exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def recipe_files() -> list[str]:
    """The packaged recipe and sweep files, by the name a user types (recipes/NAME.yaml)."""
    import ablate

    root = Path(ablate.__file__).parent / "recipes"
    if not root.is_dir():  # a checkout from before recipes were package data
        root = Path(ablate.__file__).parents[2] / "recipes"
    return sorted(f"{root}/{p.name}" for p in root.glob("*.yaml"))


def run_ids(work: Path) -> dict[str, list[list[str]]]:
    """{file name: [[label, run id, arm id], ...]} from each file's dry-run table."""
    out = {}
    for path in recipe_files():
        table = ablate("sweep", path, "--dry-run", "--root", str(work / "sweeps"), cwd=work)
        rows = re.findall(r"│ (.+?) +│ ([0-9a-f]{12}) │ ([0-9a-f]{12}) │", table)
        out[Path(path).name] = [[label.rstrip(" *"), rid, aid] for label, rid, aid in rows]
    return out


def twenty_steps(work: Path) -> list[dict[str, object]]:
    base = next(p for p in recipe_files() if p.endswith("/base.yaml"))
    ablate("train", base, "train.max_steps=20", "--run-dir", str(work / "run20"), cwd=work)
    lines = (work / "run20" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in CLOCK} for line in lines]


def verdicts(sweep: Path, work: Path) -> list[dict[str, object]]:
    ranking = json.loads(ablate("rank", str(sweep.resolve()), "--json", cwd=work))
    keep = ("arm", "verdict", "practical", "decide", "A", "delta_A", "p_ceiling", "p_efficiency", "p_equivalent")
    return [{k: a.get(k) for k in keep} for a in ranking["arms"]]


def capture(out: Path, sweep: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        found = {"run_ids": run_ids(work), "metrics_20_steps": twenty_steps(work)}
        if sweep is not None:
            found["verdicts"] = verdicts(sweep, work)
    out.mkdir(parents=True, exist_ok=True)
    (out / "invariants.json").write_text(json.dumps(found, indent=1, sort_keys=True))
    print(
        f"invariants: {sum(len(v) for v in found['run_ids'].values())} run ids in {len(found['run_ids'])} files, "
        f"{len(found['metrics_20_steps'])} metric lines"
        + (f", {len(found['verdicts'])} arms" if sweep else "")
        + f" -> {out / 'invariants.json'}"
    )


def compare(before: Path, after: Path) -> int:
    a = json.loads((before / "invariants.json").read_text())
    b = json.loads((after / "invariants.json").read_text())
    bad = [key for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    for key in sorted(set(a) | set(b)):
        print(f"{key}: {'identical' if key not in bad else 'DIFFERENT'}")
    return 1 if bad else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder to write invariants.json into")
    p.add_argument("--sweep", type=Path, help="a finished sweep directory whose verdicts to keep")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = p.parse_args()
    if args.compare:
        raise SystemExit(compare(*args.compare))
    if args.out is None:
        p.error("give --out DIR or --compare BEFORE AFTER")
    capture(args.out, args.sweep)


if __name__ == "__main__":
    main()

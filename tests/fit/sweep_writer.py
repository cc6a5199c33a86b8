"""Write synthetic curves as a sweep directory, the files `ablate rank` reads from a real sweep (test helper; also
used by bench/rank.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ablate.fit.curve import Curve
from ablate.storage import store
from ablate.storage.rundir import RunDir


def write_sweep(
    root,
    name: str,
    arms: dict[str, list[Curve]],
    *,
    baseline: str | None = None,
    x: str = "gpu_hours",
    status: str = "done",
    val_n: bool = False,
) -> Path:
    """`<root>/<name>/runs/<id>/{run.json, metrics.jsonl}`, one run per curve, labelled `<arm>,seed=<i>`; with
    `val_n`, each evaluation's graded samples (the curve's `n`) as ablate's runs log them."""
    for arm, curves in arms.items():
        arm_id = hashlib.sha256(arm.encode()).hexdigest()[:12]
        for seed, c in enumerate(curves):
            label = f"{arm},seed={seed}"
            rd = RunDir.of(root, name, hashlib.sha256(label.encode()).hexdigest()[:12])
            store.write_json(
                rd.info_path,
                {
                    "run_id": rd.path.name,
                    "arm_id": arm_id,
                    "label": label,
                    "overrides": arm.split(","),
                    "status": status,
                    "baseline": arm == baseline,
                },
            )
            recs = [
                {
                    "step": i * 10,
                    x: float(xi),
                    "val_pass_rate": float(yi),
                    "samples": i * 1280,
                    "flops": float(xi) * 1e15,
                    "truncation_rate": 0.0,
                    **({"val_n": int(c.n[i])} if val_n and c.n is not None else {}),
                }
                for i, (xi, yi) in enumerate(zip(c.x, c.y))
            ]
            store.write_jsonl(rd.metrics_path, recs)
    return Path(root) / name

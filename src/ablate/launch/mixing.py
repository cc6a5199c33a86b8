"""One configuration per run label in a sweep folder: a re-launch whose runs changed (another `train.max_steps` on the
command line, an edited base recipe) would put runs of two configurations side by side under the same labels, and
`status` would list duplicates and `rank` split arms. `check_one_config` refuses it before anything is written,
naming what changed."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from ablate.compose.spec import RunSpec
from ablate.config.identity import canonical
from ablate.errors import ErrorKind, UserError
from ablate.storage import reading
from ablate.storage.ledger import Ledger
from ablate.text import safe


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}."))
    return out


def changed_keys(old_config: Path, new: dict[str, Any], most: int = 3) -> str:
    """What differs between a run's config.yaml and a new config, `key old -> new` for the first `most` keys, or ""
    when the old one cannot be read (never written: the run did not start)."""
    try:
        old = yaml.safe_load(reading.read_whole(old_config, "a run's config.yaml"))
    except (OSError, UserError, yaml.YAMLError):
        return ""
    if not isinstance(old, dict):
        return ""
    a, b = _flat(json.loads(canonical(old))), _flat(json.loads(canonical(new)))  # what run ids hash, only
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    raw_a, raw_b = _flat(old), _flat(new)  # shown as written (the hashed form makes every number a float)
    shown = [f"{k} {raw_a.get(k)!r} -> {raw_b.get(k)!r}" for k in keys[:most]]
    return ", ".join(shown) + (f" and {len(keys) - most} more" if len(keys) > most else "")


def check_one_config(sdir: Path, runs: Sequence[RunSpec], recs: Mapping[str, Any]) -> None:
    """Refuse runs whose label the sweep folder holds under other run ids only (another config). `recs`: run id ->
    the ledger's record of it (`.label`); in a sweep mixed before this check, a run of either config launches."""
    labels: dict[str, set[str]] = {}
    for rid, r in recs.items():
        if r.label:
            labels.setdefault(r.label, set()).add(rid)
    clash = [(s, min(labels[s.label])) for s in runs if s.label in labels and s.run_id not in labels[s.label]]
    if not clash:
        return
    spec, old_id = clash[0]
    what = changed_keys(sdir / "runs" / old_id / "config.yaml", spec.config.to_dict())
    raise UserError(
        f"{sdir}: already holds {safe(spec.label)} (run {old_id}) with another config"
        + (f" ({safe(what)})" if what else "")
        + f"; {len(clash)} run(s) would mix two configurations in one sweep. Launch the changed sweep under another "
        f"--root, or move {sdir} aside",
        kind=ErrorKind.STATE,
    )


def recorded_states(sdir: Path, runs: Sequence[RunSpec]) -> dict[str, Any]:
    """The ledger's record of each run of the sweep folder (its last recorded state, no liveness check), after
    refusing `runs` that would mix another config into it (check_one_config); {} for a folder with no ledger. Read
    before anything is made or submitted; `ablate sweep` checks again under the sweep's lock."""
    recs = Ledger(sdir).fold() if (sdir / "ledger.jsonl").is_file() else {}
    check_one_config(sdir, runs, recs)
    return recs

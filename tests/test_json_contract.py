"""The --json contract (docs/json.md): every command's document starts with `schema`, and the keys it prints at the
top level are exactly those its section of docs/json.md names, so that the page can neither promise a key a
script will not find nor leave one out."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.fit.synthetic import synthetic_curve
from ablate.render.terminal import JSON_SCHEMA
from ablate.storage import store

sys.path.insert(0, str(Path(__file__).parent / "fit"))
from sweep_writer import write_sweep

ROOT = Path(__file__).resolve().parents[1]
BASE = "loss=cispo"


def documented(command: str) -> set[str]:
    """The top-level keys docs/json.md names for `command`: its section's first table (the backticked names of
    the first column), else the keys of the `{"key": ...}` shape the section gives."""
    text = (ROOT / "docs" / "json.md").read_text()
    section = text.split(f"## `ablate {command} --json`", 1)[1].split("\n## ", 1)[0]
    shape = re.search(r"`?(\{\"[^\n]*\})`?", section)
    table = re.search(r"\| key \| meaning \|\n\|---\|---\|\n((?:\|.*\n)+)", section)
    if table:
        return {k for row in table.group(1).splitlines() for k in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert shape, f"docs/json.md, {command}: no table and no shape"
    return set(re.findall(r"\"(\w+)\":", shape.group(1)))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    curves = {
        BASE: [synthetic_curve(a=0.61, b=1.9, c_mid=2500, c_max=16000, n_points=40, seed=s) for s in range(3)],
        "loss=gspo": [
            synthetic_curve(a=0.68, b=1.9, c_mid=2500, c_max=16000, n_points=40, seed=10 + s) for s in range(3)
        ],
    }
    path = write_sweep(root, "loss", curves, baseline=BASE)
    for rd in sorted((path / "runs").iterdir()):  # a ledger, as `ablate sweep` writes one, for `status`
        info = json.loads((rd / "run.json").read_text())
        store.append_jsonl(
            path / "ledger.jsonl",
            {"event": "submitting", "run_id": rd.name, "batch": "b1", "label": info["label"], "t": 1.0},
        )
        store.append_jsonl(path / "ledger.jsonl", {"event": "done", "run_id": rd.name, "batch": "b1", "t": 2.0})
    return path


def printed(args: list[str]) -> dict:
    got = CliRunner().invoke(app, [*args, "--json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.output)
    assert next(iter(doc)) == "schema" and doc.pop("schema") == JSON_SCHEMA
    return doc


@pytest.mark.parametrize("command", ["fit", "rank", "extrapolate", "plan", "status"])
def test_each_command_prints_exactly_the_keys_the_page_names(sweep, command):
    args = {
        "fit": ["fit", str(sweep), "--x", "gpu_hours", "--compare-forms", "--n-boot", "50"],
        "rank": ["rank", str(sweep), "--x", "gpu_hours", "--n-boot", "200"],
        "extrapolate": ["extrapolate", str(sweep), "--x", "gpu_hours", "--fit-until", "8000", "--n-boot", "50"],
        "plan": ["plan", str(sweep), "--x", "gpu_hours", "--trials", "20", "--question", "ceiling"],
        "status": ["status", sweep.name, "--root", str(sweep.parent)],
    }[command]
    assert set(printed(args)) == documented(command)


def test_calibrate_prints_exactly_the_keys_the_page_names():
    args = ["calibrate", "--shapes", "embedded", "--noises", "eval", "--seeds", "3", "--f", "0.95"]
    args += ["--trials", "2", "--effects", "null", "--n-boot", "50"]
    assert set(printed(args)) == documented("calibrate")


def test_the_page_parser_reads_a_table_and_a_shape():
    assert documented("rank") >= {"baseline", "arms", "target"}
    assert documented("calibrate") == {"grid", "trials", "rows"}

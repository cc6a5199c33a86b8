"""The repository documents its own contracts and points at nothing outside itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ablate.rundir import METRICS, RUN_STATES

ROOT = Path(__file__).resolve().parents[1]


def test_the_run_directory_page_names_every_metric_and_state():
    text = (ROOT / "docs" / "run-directory.md").read_text()
    for name in METRICS:
        assert f"| `{name}` |" in text, name
    for state in RUN_STATES:
        assert f"| `{state}` |" in text, state


def test_no_file_points_outside_the_repository():
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    # the names of the developers' notes outside the repository and of a machine path, spelled in pieces so that
    # this file (which is checked too) does not name them
    outside = ["design" + r"\.md", r"\.\./" + "sha" + "red", "/" + "work/", r"[a-z]+-" + "notes" + r"\.md"]
    pattern = re.compile("|".join(outside))
    hits = []
    for f in files:
        path = ROOT / f
        if not path.is_file() or path.suffix in (".png", ".pt"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        hits += [f"{f}:{i}" for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not hits, hits


def test_the_trainers_page_has_the_support_matrix_the_code_has():
    from ablate.trainers import SUPPORT

    text = (ROOT / "docs" / "trainers.md").read_text()
    for option, ours, trl in SUPPORT:
        assert f"| `{option}` | {ours} | {trl} |" in text, option

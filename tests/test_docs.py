"""The repository documents its own contracts and points at nothing outside itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ablate.states import RUN_JSON as RUN_STATES
from ablate.storage.metricsfile import METRICS

ROOT = Path(__file__).resolve().parents[1]


def test_the_run_directory_page_names_every_metric_and_state():
    text = (ROOT / "docs" / "run-directory.md").read_text()
    for name in METRICS:
        assert f"| `{name}` |" in text, name
    for state in RUN_STATES:
        assert f"| `{state}` |" in text, state


def test_the_trackers_page_names_the_mlflow_tags_the_code_sets():
    from ablate.track.mlflow import STATE_TAG, TAGS

    row = next(line for line in (ROOT / "docs" / "trackers.md").read_text().splitlines() if line.startswith("| tags |"))
    documented = {"ablate." + name for name in re.findall(r"`([a-z_]+)`", row.split("|")[2])}
    assert documented >= {*TAGS, STATE_TAG}, sorted({*TAGS, STATE_TAG} - documented)


def test_no_file_points_outside_the_repository():
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
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
    from ablate.config.support import SUPPORT

    text = (ROOT / "docs" / "trainers.md").read_text()
    for option, ours, trl in SUPPORT:
        assert f"| `{option}` | {ours} | {trl} |" in text, option


def test_the_json_page_names_every_key_and_verdict_rank_prints():
    """docs/json.md documents every key of `rank --json` (the ranking's, each arm's, its fit's) and every verdict;
    docs/verdicts.md every verdict as the table words it."""
    from ablate.fit.arms import VERDICT_TEXT, VERDICTS
    from ablate.fit.compare import rank
    from ablate.fit.result import FitOptions
    from ablate.fit.synthetic import synthetic_curve

    curves = [
        synthetic_curve(a=a, b=1.9, c_mid=2500, seed=10 * i + s, run=f"{arm},seed={s}", group=arm)
        for i, (arm, a) in enumerate([("base", 0.61), ("other", 0.62)])
        for s in range(2)
    ]
    out = rank(curves, FitOptions(n_boot=100), baseline="base").to_json()
    keys = set(out) | {k for arm in out["arms"] for k in arm}
    text = (ROOT / "docs" / "json.md").read_text()
    assert not [k for k in keys if f"`{k}`" not in text]
    for verdict in VERDICTS:
        assert f"`{verdict}`" in text, verdict
    assert 'no_effect` ("no detectable effect") is no longer a verdict' in text
    page = (ROOT / "docs" / "verdicts.md").read_text()
    for verdict in VERDICTS:
        if verdict != "baseline":
            assert f"`{VERDICT_TEXT[verdict].split()[0]}" in page, verdict


def test_every_exit_status_a_command_raises_is_in_the_readmes_table():
    """README.md's exit-status table names every literal status the commands raise (typer.Exit(N)), and the
    signal statuses by their rule (128 + N)."""
    import re

    raised = set()
    for path in (ROOT / "src" / "ablate" / "cli").glob("*.py"):
        raised |= {int(n) for n in re.findall(r"typer\.Exit\((\d+)\)", path.read_text())}
    table = (ROOT / "README.md").read_text().split("Exit status, for scripts:", 1)[1].split("\n\n", 2)[1]
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)}
    signals = {n for n in raised if n > 128 and f" {n} " in table}
    assert raised - signals <= documented, raised - documented
    assert {0, 1, 2, 3} <= documented and {130, 141} <= signals


def test_the_readmes_error_kinds_are_the_codes_kinds_and_every_refusal_has_one():
    """README.md's table of `error[KIND]:` lines names exactly the kinds of ablate.errors.ErrorKind, and every
    UserError the package raises says its kind (the constructor requires it: a refusal without one fails here)."""
    import ast
    import re

    from ablate.errors import ErrorKind

    readme = (ROOT / "README.md").read_text()
    assert set(re.findall(r"^\| `error\[(\w+)\]:` \|", readme, re.M)) == {k.value for k in ErrorKind}
    for path in (ROOT / "src" / "ablate").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "UserError":
                assert any(k.arg == "kind" for k in node.keywords), f"{path}:{node.lineno}"

"""`ablate sweep --decide` end to end on runs of known truth (tests/jobs.py:curve_run), through the real launcher:
settled arms stop getting seeds, open arms get the next wave, each look is recorded, and running the command again
carries on from the record without running anything twice."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.storage import store
from jobs import CURVE_JOB, error_kind, one_error

runner = CliRunner()
LOSS = str(RECIPES_DIR / "loss.yaml")
TRUTH = {  # cispo is the baseline; dapo lifts the ceiling by 0.10; gspo and grpo are the baseline's twins
    "cispo": {"a": 0.60, "b": 1.5, "c_mid": 1000.0},
    "dapo": {"a": 0.70, "b": 1.5, "c_mid": 1000.0},
    "gspo": {"a": 0.60, "b": 1.5, "c_mid": 1000.0},
    "grpo": {"a": 0.60, "b": 1.5, "c_mid": 1000.0},
}
ARGS = ["sweep", LOSS, "train.max_steps=60", "--decide", "--max-seeds", "6", "--executor", "debug", "--job", CURVE_JOB]


@pytest.fixture
def sweep_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    store.write_json(tmp_path / "sweeps" / "loss" / "curves.json", TRUTH)
    return tmp_path / "sweeps" / "loss"


def _executions(sdir) -> dict[str, int]:
    return {p.parent.name: len(store.read_jsonl(p)) for p in sdir.glob("runs/*/executions.log")}


def _closing(output: str) -> str:
    """The closing summary: from its first line ("--decide: <why it stopped>; ...") to the end."""
    return output[output.rindex("--decide: no") :]


def _record(sdir) -> list[dict]:
    return store.read_jsonl(sdir / "decide" / "looks.jsonl")


def test_decide_stops_the_settled_arm_and_carries_on_from_its_record(sweep_here):
    sdir = sweep_here
    res = runner.invoke(app, ARGS)
    assert res.exit_code == 0, res.output
    record = _record(sdir)
    settings, looks = record[0]["settings"], record[1:]
    assert settings["max_seeds"] == 6 and settings["level"] == pytest.approx(0.025)  # two looks, 5% / 2 each
    assert looks[0]["seeds"] == 3 and all(look["level"] == 0.025 for look in looks)
    first = looks[0]["arms"]
    assert first["loss=dapo"]["verdict"] == "ceiling_up" and first["loss=dapo"]["standing"] == "settled"
    for twin in ("loss=gspo", "loss=grpo"):  # the baseline's twins: never a change, at any look
        assert all(
            not look["arms"][twin]["verdict"].startswith(("ceiling", "efficiency"))
            for look in looks
            if twin in look["arms"]
        )
    # the settled arm got no second wave; every run ran once
    ran = _executions(sdir)
    assert all(n == 1 for n in ran.values())
    per_arm: dict[str, int] = {}
    for rid in ran:
        label = store.read_json(sdir / "runs" / rid / "run.json")["label"]
        arm = ",".join(p for p in label.split(",") if not p.startswith("seed="))
        per_arm[arm] = per_arm.get(arm, 0) + 1
    assert per_arm["loss=dapo"] == 3
    open_after_first = [a for a, v in first.items() if v["standing"] == "open"]
    expect_base = 6 if open_after_first else 3
    assert per_arm["loss=cispo"] == expect_base
    assert "loss=dapo: ceiling ↑ at 3 seeds (settled)" in res.output
    for arm, v in first.items():  # stopped arms (settled, undecidable) got no second wave; open ones did
        assert per_arm[arm] == (6 if v["standing"] == "open" else 3), (arm, v)
    if open_after_first:  # grown in two launches: rank says the looks were the decisions, and offers no more
        ranked = runner.invoke(app, ["rank", "sweeps/loss"])
        assert "grown by `ablate sweep --decide`" in ranked.output and "--decide --max-seeds" not in ranked.output
    # run again: the looks are replayed from the record, nothing runs again, the same standing is printed
    again = runner.invoke(app, ARGS)
    assert again.exit_code == 0, again.output
    assert _executions(sdir) == ran and _record(sdir) == record
    assert _closing(again.output) == _closing(res.output)


def test_a_record_made_with_other_settings_is_refused_in_one_line(sweep_here):
    store.append_jsonl(sweep_here / "decide" / "looks.jsonl", {"settings": {"wave": 3, "max_seeds": 12, "fdr": 0.05}})
    res = runner.invoke(app, ARGS)
    assert res.exit_code == 2
    line = res.output.strip().splitlines()[-1]
    assert error_kind(line) is ErrorKind.STATE, line
    assert "loss/decide/looks.jsonl" in line and "max_seeds 12" in line, line
    assert not (sweep_here / "runs").exists()


@pytest.mark.parametrize(
    "extra, culprits",
    [
        (["seed=0,1"], ["--decide", "seed=", "0 to 5"]),  # the seeds it chooses itself
        (["--prune"], ["--decide", "--prune"]),
        (["--budget", "-1"], ["--budget -1", "> 0"]),
        (["--budget", "inf"], ["--budget inf", "> 0"]),
        (["--force"], ["--decide", "--force"]),  # it would run the looks' runs again from scratch
    ],
)
def test_decide_refuses_what_it_cannot_honour(sweep_here, extra, culprits):
    res = runner.invoke(app, [*ARGS, *extra])
    one_error(res, ErrorKind.SETTING, *culprits)
    assert not (sweep_here / "runs").exists()


def test_a_changed_config_is_refused_not_answered_from_the_record(sweep_here):
    """The record's looks are about the runs it ranked: the same command with longer runs (what a too-short arm is
    told to try) would replay them as its answer. It is refused, naming the change, as `ablate sweep` refuses it."""
    assert runner.invoke(app, ARGS).exit_code == 0
    ran, record = _executions(sweep_here), _record(sweep_here)
    longer = [a if a != "train.max_steps=60" else "train.max_steps=80" for a in ARGS]
    res = runner.invoke(app, longer)
    one_error(res, ErrorKind.STATE, "train.max_steps 60 -> 80", "--root")
    assert "looks made" not in res.output and _executions(sweep_here) == ran and _record(sweep_here) == record


def test_a_budget_the_first_wave_passes_stops_after_it_and_says_so(sweep_here):
    res = runner.invoke(app, [*ARGS, "--budget", "1"])
    assert res.exit_code == 0, res.output
    assert len(_record(sweep_here)) == 2 and all(n == 1 for n in _executions(sweep_here).values())  # one look
    closing = res.output[res.output.rindex("--decide: the next wave") :]
    assert "would pass the budget" in closing and "spent of 1 (over the budget" in closing, closing


def test_budget_and_wave_flags_need_decide(sweep_here):
    res = runner.invoke(app, ["sweep", LOSS, "--budget", "1000", "--dry-run"])
    one_error(res, ErrorKind.SETTING, "--budget", "add --decide")  # the fix ("--decide" alone is in the reason too)


def test_one_process_decides_a_sweep_at_a_time(sweep_here):
    from ablate.storage.locks import dir_lock

    with dir_lock(sweep_here / "decide") as lock:
        assert lock.locked
        res = runner.invoke(app, ARGS)
    line = res.output.strip().splitlines()[-1]  # (after --decide's notes)
    assert res.exit_code == 2 and error_kind(line) is ErrorKind.STATE, res.output
    assert "loss/decide" in line and "ablate sweep --decide" in line, line
    assert not (sweep_here / "runs").exists()


def test_a_linked_record_is_refused_not_read(sweep_here, tmp_path):
    elsewhere = tmp_path / "elsewhere.jsonl"
    store.append_jsonl(elsewhere, {"settings": {"wave": 3, "max_seeds": 6}})
    (sweep_here / "decide").mkdir()
    (sweep_here / "decide" / "looks.jsonl").symlink_to(elsewhere)
    res = runner.invoke(app, ARGS)
    line = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and error_kind(line) is ErrorKind.FILE and "loss/decide/looks.jsonl" in line, res.output
    assert not (sweep_here / "runs").exists()
    assert len(store.read_jsonl(elsewhere)) == 1  # nothing appended through the link


def test_rank_points_undecided_arms_to_decide_with_a_command_that_pastes(sweep_here):
    from ablate.render.rank import decide_hint

    (sweep_here / "runs").mkdir()
    hint = decide_hint([sweep_here], 10)
    assert hint == "ablate sweep recipes/loss.yaml --decide --max-seeds 12"  # whole waves of 3, at least 10
    res = runner.invoke(app, ["sweep", "recipes/loss.yaml", "--decide", "--max-seeds", "12", "seed=1"])
    one_error(res, ErrorKind.SETTING, "seed=", "0 to 11")  # the hint's form is what sweep reads: it chooses the seeds


def test_a_damaged_record_is_one_line_and_nothing_runs(sweep_here):
    assert runner.invoke(app, ARGS).exit_code == 0
    path = sweep_here / "decide" / "looks.jsonl"
    lines = path.read_text().splitlines()
    ran = _executions(sweep_here)
    path.write_text("\n".join([lines[0], lines[1].replace('"look": 1', '"look": 2')]) + "\n")
    res = runner.invoke(app, ARGS)
    assert res.exit_code == 2
    last = res.output.strip().splitlines()[-1]
    assert error_kind(last) is ErrorKind.STATE and "loss/decide/looks.jsonl" in last, last
    assert "line 2" in last and "look 1" in last, last
    assert _executions(sweep_here) == ran


def test_a_new_decided_sweep_is_owner_only(tmp_path, monkeypatch):
    tmp_path.chmod(0o755)  # a folder others may read: what ablate makes in it must not inherit that
    monkeypatch.chdir(tmp_path)
    store.write_json(tmp_path / "truth.json", TRUTH)  # outside the sweep: the folder is --decide's to make
    monkeypatch.setenv("ABLATE_TEST_CURVES", str(tmp_path / "truth.json"))
    res = runner.invoke(app, ARGS)
    assert res.exit_code == 0, res.output
    sdir = tmp_path / "sweeps" / "loss"
    assert (sdir.stat().st_mode & 0o777) == 0o700 and ((sdir / "runs").stat().st_mode & 0o777) == 0o700


def test_an_arm_whose_runs_end_before_c_mid_stops_asking_for_longer_runs(sweep_here):
    """grpo's C_mid lies past the runs' end (6,000): its A is not measured, which more seeds cannot change, so the
    first look stops it (before: it got every wave, and the summary said more seeds could settle it)."""
    store.write_json(sweep_here / "curves.json", {**TRUTH, "grpo": {"a": 0.60, "b": 1.5, "c_mid": 15000.0}})
    res = runner.invoke(app, ARGS)
    assert res.exit_code == 0, res.output
    first = _record(sweep_here)[1]["arms"]["loss=grpo"]
    assert first["verdict"] == "not_identified" and first["standing"] == "too_short", first
    ran = [store.read_json(p.parent / "run.json")["label"] for p in sweep_here.glob("runs/*/executions.log")]
    assert sum(label.startswith("loss=grpo,") for label in ran) == 3  # one wave, no more
    assert "loss=grpo: not identified at 3 seeds (stopped: its runs, or the baseline's, end before C_mid" in (
        _closing(res.output).replace("\n", " ")
    )
    assert "larger train.max_steps" in res.output

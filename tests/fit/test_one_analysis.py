"""One analysis behind every verb (ablate.fit.settings): the `--prune` monitor's settled check, `ablate rank` and
the report page rank a sweep the same way for the same settings; a sweep records the settings its monitor decided
with, the page ranks with them, and `rank` run with others says so with a command that, pasted, reads the
verdicts as the monitor did."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from sweep_writer import write_sweep
from typer.testing import CliRunner

from ablate.cli import app
from ablate.fit.settings import Analysis
from ablate.fit.spread import MinEffect
from ablate.fit.synthetic import synthetic_curve
from ablate.render.rank import rank_command
from ablate.storage import store

runner = CliRunner()
BASE = "loss=cispo"


def seeds(a: float, c_mid: float, first: int, n: int = 3) -> list:
    return [synthetic_curve(a=a, b=1.9, c_mid=c_mid, c_max=16000, n_points=60, seed=first + s) for s in range(n)]


def sweep_with_a_pruned_arm(root):
    """A baseline, an arm with a higher ceiling whose runs the monitor stopped (`pruned`), and a twin."""
    write_sweep(root, "s", {BASE: seeds(0.61, 2500, 0), "loss=dapo": seeds(0.61, 2500, 10)}, baseline=BASE)
    return write_sweep(root, "s", {"loss=gspo": seeds(0.68, 2500, 20)}, status="pruned")


def monitor_ranking(sweep, analysis: Analysis):
    """The ranking the monitor's settled check makes (ablate.prune.rules.settled) with `analysis`."""
    from ablate.curves.inputs import curves_from_sweep
    from ablate.prune.outlook import run_ends
    from ablate.prune.rules import PruneSettings, settled

    curves, skipped = curves_from_sweep(sweep, x=analysis.x)
    s = PruneSettings(x=analysis.x, to=analysis.to, n_boot=analysis.n_boot, seed=analysis.seed)
    ranking, _ = settled(curves, run_ends(sweep, curves, analysis.x), analysis.to, s, skipped)
    return ranking


def calls(arms) -> dict[str, tuple]:
    """Each arm's verdict, its practical mark, its ΔA and its advice: what must agree between verbs."""
    get = (lambda a, k: a[k]) if arms and isinstance(arms[0], dict) else getattr
    return {
        get(a, "arm"): (get(a, "verdict"), get(a, "practical"), round(get(a, "delta_A") or 0.0, 9), get(a, "decide"))
        for a in arms
    }


def record_monitor(sweep, analysis: Analysis) -> None:
    store.append_jsonl(
        sweep / "prune" / "decisions.jsonl",
        {"t": 1.0, "target": analysis.to, "x": analysis.x, "why": "test", "analysis": analysis.to_json()},
    )


def rank_json(*args: str) -> dict:
    got = runner.invoke(app, ["rank", *args, "--json"])
    assert got.exit_code == 0, got.output
    return json.loads(got.output)


def test_the_monitor_rank_and_the_page_give_the_same_verdicts_for_the_same_settings(tmp_path):
    from ablate.report.data import gather

    sweep = sweep_with_a_pruned_arm(tmp_path)
    analysis = Analysis("gpu_hours", to=32000.0, n_boot=300, seed=3)
    monitor = monitor_ranking(sweep, analysis)
    printed = rank_json(*shlex.split(rank_command(sweep, analysis))[2:])
    assert calls(printed["arms"]) == calls(monitor.arms)
    assert [a["arm"] for a in printed["arms"]] == [a.arm for a in monitor.arms]
    assert {a["arm"]: a["verdict"] for a in printed["arms"]}["loss=gspo"] == "ceiling_up"  # something was decided
    record_monitor(sweep, analysis)
    page = gather(sweep, n_boot=1000, command="ablate report s", progress=lambda _: None, plan=None)
    assert page.ranking is not None and calls(page.ranking.arms) == calls(monitor.arms)
    assert page.ranking.target == 32000.0 and page.ranking.opts.n_boot == 300
    assert page.analysis_source is not None and "--n-boot 300" in page.analysis_source
    assert page.elsewhere is None  # ranked with what the monitor decided with: nothing to say
    assert page.extrapolation is not None and page.extrapolation.projection.subject == printed["arms"][0]["arm"]


def test_rank_with_other_settings_says_so_and_its_command_reads_the_monitors_verdicts(tmp_path):
    sweep = sweep_with_a_pruned_arm(tmp_path)
    analysis = Analysis("gpu_hours", to=32000.0, n_boot=300, seed=3, min_effect=MinEffect(a=0.03))
    record_monitor(sweep, analysis)
    got = runner.invoke(app, ["rank", str(sweep), "--x", "gpu_hours"], env={"COLUMNS": "400"})
    assert got.exit_code == 0, got.output
    said = " ".join(got.output.split())
    assert "decided with other settings" in said, said
    for part in ("--n-boot 300 (here: 1000)", "--seed 3 (here: 0)", "--min-effect 0.03 (here: 0.02)"):
        assert part in said, said
    command = re.search(r"to read them so: `([^`]+)`", said)
    assert command is not None, said
    args = shlex.split(command.group(1))
    assert args[:2] == ["ablate", "rank"]
    pasted = rank_json(*args[2:])
    assert calls(pasted["arms"]) == calls(monitor_ranking_with_effect(sweep, analysis))
    again = runner.invoke(app, ["rank", *args[2:]], env={"COLUMNS": "400"})
    assert "decided with other settings" not in again.output


def monitor_ranking_with_effect(sweep, analysis: Analysis):
    """rank at the analysis, with its smallest effects: what the monitor's settings stand for in full (the report
    page's ranking, ablate.report.data.rank)."""
    from ablate.analysis import verbs
    from ablate.report.data import rank

    read = verbs.read_inputs([sweep], verbs.Reading(analysis.x, "val_pass_rate", "run", None, "auto", None, None))
    return rank(read, analysis.options(analysis.to), analysis).arms


def test_a_monitor_that_stopped_nothing_decided_nothing_to_mention(tmp_path):
    write_sweep(tmp_path, "s", {BASE: seeds(0.61, 2500, 0), "loss=dapo": seeds(0.61, 2500, 10)}, baseline=BASE)
    sweep = tmp_path / "s"
    record_monitor(sweep, Analysis("gpu_hours", to=32000.0, n_boot=300))
    got = runner.invoke(app, ["rank", str(sweep), "--x", "gpu_hours"], env={"COLUMNS": "400"})
    assert got.exit_code == 0 and "decided with other settings" not in got.output, got.output


def test_an_analysis_round_trips_and_a_damaged_record_is_none():
    a = Analysis("samples", to=5e5, fit_from=1000.0, n_boot=400, seed=2, min_effect=MinEffect(a=0.03, ratio=1.2))
    assert Analysis.from_json(json.loads(json.dumps(a.to_json()))) == a
    assert shlex.split(rank_command(Path("s"), a)) == [
        "ablate", "rank", "s", "--x", "samples", "--to", "500000", "--fit-from", "1000", "--n-boot", "400",
        "--seed", "2", "--min-effect", "0.03", "--min-effect-compute", "1.2",
    ]  # fmt: skip
    assert Analysis("samples").settings() == [("x", "samples")]
    good = a.to_json()
    damaged = [
        None,
        [],
        {"x": 3},
        {**good, "n_boot": -1},
        {**good, "n_boot": True},
        {**good, "to": float("nan")},
        {**good, "min_effect": {"A": 2.0, "compute_ratio": 1.15}},
        {**good, "fit_from": 10**400},  # JSON allows an integer no float holds
        {**good, "n_boot": 1_000_000},  # more than the command line allows: memory, not precision
        {**good, "n_boot": 0},
        {**good, "fit_from": 9000.0, "fit_until": 9000.0},  # an empty window
    ]
    for bad in damaged:
        assert Analysis.from_json(bad) is None, bad


def test_a_monitor_from_before_the_record_stands_for_what_it_used(tmp_path):
    """A decisions line without an analysis was written by a monitor that ranked with 200 resamples and seed 0."""
    from ablate.prune.rules import recorded_analysis

    sdir = tmp_path / "s"
    store.append_jsonl(sdir / "prune" / "decisions.jsonl", {"t": 1.0, "target": 6e5, "x": "samples", "why": "w"})
    assert recorded_analysis(sdir, "samples") == Analysis("samples", to=6e5, n_boot=200)
    assert recorded_analysis(sdir, "gpu_hours") is None


def test_the_flags_read_back_exactly():
    """A recorded target that `g` would round (a monitor's target is twice the furthest compute reached) is printed
    with every digit, so that the pasted command ranks where the monitor did and says nothing differs."""
    odd = Analysis("gpu_hours", to=1234567.0, fit_until=0.1 + 0.2)
    flags = dict(odd.settings())
    assert flags["to"] == "1234567.0" and float(flags["fit_until"]) == 0.1 + 0.2
    first = Analysis("gpu_hours", to=1234567.0 * (1 + 1e-5)).differences(odd)[0]
    assert (first.setting, first.recorded) == ("to", "1234567.0")

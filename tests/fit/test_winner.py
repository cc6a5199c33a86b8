"""The winner `ablate extrapolate` projects, and the one the report's page projects (fitted on the first half of
the compute), is the arm `ablate rank` puts first: one analysis behind every verb."""

from __future__ import annotations

from ablate.analysis import verbs
from ablate.fit.synthetic import synthetic_curve


def _inputs():
    # "fast" climbs early to a lower ceiling; "high" climbs late and steeply to a higher one: fitted on the first
    # half of the compute "fast" comes out ahead, on all of it (and at rank's target) "high" does
    curves = [
        synthetic_curve(a=0.60, b=2.0, c_mid=2000, seed=s, run=f"fast,seed={s}", group="fast") for s in range(2)
    ] + [synthetic_curve(a=0.80, b=3.0, c_mid=12000, seed=10 + s, run=f"high,seed={s}", group="high") for s in range(2)]
    return verbs.Inputs([], curves, [], "gpu_hours", None)


def test_extrapolate_and_the_page_project_ranks_winner_even_when_fitting_half():
    inputs = _inputs()
    opts = verbs.fit_options(n_boot=200)
    settings = verbs.check_rank_settings(
        baseline="fast", margin=None, shared_a="pair", noise=None, save_noise=None, min_effect=0.02,
        min_effect_compute=1.15, n_boot=200, window=False,
    )  # fmt: skip
    ranking = verbs.rank_inputs(inputs, opts, settings, to=None, jobs=1)
    assert ranking.arms[0].arm == "high"
    full = verbs.extrapolate_inputs(inputs, verbs.fit_options(n_boot=200), arm=None, to=None, window=False)
    half = verbs.fit_options(n_boot=200, fit_until=8000.0)
    page = verbs.extrapolate_inputs(inputs, half, arm=None, to=ranking.target, window=False)
    assert full.projection.subject == page.projection.subject == "high"


def test_a_winner_whose_ceiling_is_not_measured_is_projected_with_a_warning(tmp_path, monkeypatch):
    """rank's winner may lead only by an extrapolated ceiling (its runs end near C_mid): extrapolate still projects
    rank's winner (one analysis), and says in one note that its lead rests on an unmeasured A."""
    import json

    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.curves.tables import write_csv

    curves = [
        synthetic_curve(a=0.55, b=2.0, c_mid=2000, seed=s, run=f"fast,seed={s}", group="fast") for s in range(2)
    ] + [synthetic_curve(a=0.95, b=1.2, c_mid=14000, seed=10 + s, run=f"late,seed={s}", group="late") for s in range(2)]
    write_csv(curves, tmp_path / "c.csv")
    monkeypatch.setenv("COLUMNS", "200")
    args = ["extrapolate", str(tmp_path / "c.csv"), "--group", "group", "--n-boot", "200"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("subject: late") and "late leads on a predicted pass rate" in res.output
    assert "--arm" in res.output.split("late leads")[1]
    res = CliRunner().invoke(app, [*args, "--arm", "fast"])  # named, and identified: no such note
    assert res.exit_code == 0 and "leads on" not in res.output, res.output
    projected = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert projected["subject"] == "late"

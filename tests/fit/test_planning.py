"""`ablate plan`'s science: a plan made from a pilot sweep of simulated runs with known truth, followed on fresh
sweeps drawn from that truth, reaches the power it states; and the futures of running arms say which verdicts
more compute could still change."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ablate.compose.resources import RECIPES_DIR
from ablate.errors import ErrorKind
from ablate.fit import exact, measured_model, planning, power
from ablate.fit.arms import CHANGED
from ablate.fit.batch_verdicts import CODES
from ablate.fit.calibrate import NOISES, SHAPES, simulate_arm, window_end
from ablate.fit.compare import rank
from ablate.fit.decide import SEED_LADDER
from ablate.fit.futures import futures
from ablate.fit.result import FitOptions
from ablate.fit.spread import MinEffect
from ablate.fit.taskmodel import MAX_SIM_ARMS, WANTED, TaskModel, effect_of
from ablate.storage.measurements import load_calibration
from jobs import error_kind, one_error

SHAPE, NOISE = SHAPES["scalerl-8b"], NOISES["seeds"]


def _pilot(arms: int, seeds: int, f: float, seed: int, effect: dict | None = None):
    """A ranked pilot sweep of `arms` arms (arm `a1` with `effect`), its window ending at gain fraction f."""
    rng = np.random.default_rng(seed)
    c = window_end(SHAPE, f)
    curves = []
    for k in range(arms):
        cs, _ = simulate_arm(
            SHAPE, NOISE, (effect or {}) if k == 1 else {}, seeds, f, rng, "base" if k == 0 else f"a{k}"
        )
        curves += [replace(x, x=x.x[x.x <= c * 1.0001], y=x.y[x.x <= c * 1.0001], n=x.n[x.x <= c * 1.0001]) for x in cs]
    return curves, c


def _truth(budget: float, arms: int) -> TaskModel:
    """The truth as a task model: exact seed spread (a huge dof: no redraw), no fit error to remove."""
    return TaskModel(
        x="gpu_hours",
        r0=SHAPE.r0,
        a=SHAPE.a,
        b=SHAPE.b,
        c_mid=SHAPE.c_mid,
        val_n=SHAPE.prompts * SHAPE.k,
        eval_every=budget / 40,
        drift_sd=NOISE.drift_sd,
        drift_rho=NOISE.drift_phi,
        seed_sd_a=NOISE.seed_sd_a,
        seed_sd_logc=NOISE.seed_sd_logc,
        seed_dof=10**9,
        fit_sd_a=0.0,
        fit_sd_logc=0.0,
        budget=budget,
        arms=arms,
    )


def _truth_power(truth: TaskModel, question: str, seeds: int, compute: float, trials: int, seed: int, **kw) -> float:
    """The power of a design on fresh sweeps drawn from the truth, by the fast engine (checked against the exact
    one in test_fast_engine_agrees_with_rank)."""
    effect = effect_of(question, kw.get("delta_a", 0.02), kw.get("ratio", 1.25))
    rung = power.rung_for(truth, compute, effect, trials, max(2, min(truth.arms, MAX_SIM_ARMS)), seed)
    cell = power.cell_power(
        rung,
        seeds,
        WANTED[question],
        noise=None,
        me=MinEffect(),
        extra_arms=max(0, truth.arms - MAX_SIM_ARMS),
        goal=0.8,
        seed=seed,
    )
    return cell["power"]


@pytest.mark.parametrize(
    "question,kw,rungs", [("efficiency", {"ratio": 1.5}, (1.0, 2.0)), ("ceiling", {"delta_a": 0.05}, (2.0,))]
)
def test_following_the_plan_reaches_the_stated_power(question, kw, rungs):
    curves, c = _pilot(arms=3, seeds=3, f=0.9, seed=5)
    ranking = rank(curves, FitOptions(n_boot=200, target=2 * c), baseline="base")
    model = measured_model.from_ranking(ranking, budget=c, seeds=3)
    assert model.arms == 3 and model.seed_dof >= 2
    plan = planning.design(model, question, trials=100, rungs=rungs, seed=1, **kw)
    best = plan.best
    assert best is not None, plan
    # fresh sweeps from the truth, run as the plan says: the power reached is at least the stated goal, within the
    # simulation error of both estimates
    n = 400
    achieved = _truth_power(_truth(c, 3), question, best.seeds, best.compute, n, 99, **kw)
    se = np.sqrt(0.8 * 0.2 / n + best.se**2)
    assert achieved >= 0.8 - 2.5 * se, (best, achieved)
    # and the plan is not a blanket "as many seeds as possible": the smaller designs it tried fall short
    assert best.seeds < SEED_LADDER[-1]
    tried = next(r for r in plan.rungs if r.compute == best.compute).tried
    assert any(t.seeds < best.seeds and t.power < 0.8 for t in tried), tried


def test_null_arms_are_not_called_in_planned_sweeps():
    """The plan's own trials keep the false-discovery rate: an arm with no effect is rarely given a changed
    verdict (400 sweeps, 4 seeds an arm, the model measured on a pilot)."""
    curves, c = _pilot(arms=3, seeds=3, f=0.9, seed=6)
    model = measured_model.from_ranking(
        rank(curves, FitOptions(n_boot=200, target=2 * c), baseline="base"), budget=c, seeds=3
    )
    rung = power.rung_for(model, c, {}, 400, 3, seed=3)
    codes, _ = power.verdict_codes(rung, 4, noise=None, me=MinEffect(), extra_arms=0, rng=np.random.default_rng(3))
    calls = np.isin(codes, [CODES.index(v) for v in CHANGED])
    assert calls.mean() <= 0.05 + 2.5 * np.sqrt(0.05 * 0.95 / codes.size), np.bincount(codes)
    assert (codes != CODES.index("not_identified")).mean() > 0.9  # the arms were compared: a real test


@pytest.mark.parametrize(
    "question,kw,seeds,f", [("ceiling", {"delta_a": 0.03}, 4, 0.9), ("efficiency", {"ratio": 1.5}, 3, 0.75)]
)
def test_fast_engine_agrees_with_rank(question, kw, seeds, f):
    """The fast engine's power of a design equals the exact engine's (every sweep ranked by `compare.rank`) within
    simulation error. The cells are chosen with power away from 0 and 1, where a difference would show: a ceiling
    gain well inside the window, and an efficiency gain on a short window (f = 0.75: about half of the pooled arms
    are not identified there, so the fast engine's identification is tested too). Tolerance: the two powers, from
    n_exact and n_fast independent trials, differ by less than 2.58 standard errors of their difference (a 99%
    two-sample binomial interval), so a correct engine fails this about once in a hundred seeds."""
    c = window_end(SHAPE, f)
    truth = _truth(c, 2)
    effect = effect_of(question, kw.get("delta_a", 0.02), kw.get("ratio", 1.25))
    wanted = WANTED[question]
    rng = np.random.default_rng(7)
    n_exact = 60
    exact_verdicts = [exact.trial(truth, seeds, c, effect, rng, seed=i) for i in range(n_exact)]
    p_exact = np.mean([v == wanted for v in exact_verdicts])
    n_fast = 400
    p_fast = _truth_power(truth, question, seeds, c, n_fast, 7, **kw)
    pooled = (p_exact * n_exact + p_fast * n_fast) / (n_exact + n_fast)
    se = np.sqrt(max(pooled * (1 - pooled), 0.02) * (1 / n_exact + 1 / n_fast))
    assert 0.1 < pooled < 0.9, (p_exact, p_fast)  # a cell where the test can see a difference
    assert abs(p_fast - p_exact) <= 2.58 * se, (p_exact, p_fast, exact_verdicts)


def _bh_by_the_definition(p: list[float], q: float = 0.05) -> list[bool]:
    """Benjamini-Hochberg written out as its definition: sort the finite p-values, find the largest rank k with
    p_(k) <= q k / m, and reject the k smallest."""
    order = sorted((i for i, v in enumerate(p) if np.isfinite(v)), key=lambda i: p[i])
    cut = max((k for k, i in enumerate(order, start=1) if p[i] <= q * k / len(order)), default=0)
    keep = set(order[:cut])
    return [i in keep for i in range(len(p))]


def test_batched_false_discovery_control_is_benjamini_hochberg():
    """The Benjamini-Hochberg `rank` and the fast engine share (many sweeps at once, one row each) picks exactly
    what the procedure's definition picks, NaN (no test) and ties included."""
    from ablate.fit.stats import benjamini_hochberg, benjamini_hochberg_rows

    rng = np.random.default_rng(0)
    p = np.round(rng.random((500, 9)) ** 3, 3)  # rounded: ties
    p[rng.random(p.shape) < 0.2] = np.nan
    got = benjamini_hochberg_rows(p)
    assert got.any() and not got.all()
    assert all(list(got[i]) == _bh_by_the_definition(list(p[i])) for i in range(p.shape[0]))
    assert benjamini_hochberg(list(p[3])) == _bh_by_the_definition(list(p[3])) and benjamini_hochberg([]) == []


def test_futures_settle_a_clear_difference_and_not_an_open_one():
    """An arm with a large ceiling gain, well past C_mid, keeps its verdict in (nearly) every future; a smaller
    gain on a shorter window, not yet called, gets a different verdict in most futures."""
    curves, c = _pilot(arms=3, seeds=3, f=0.95, seed=8, effect={"a": 0.15})
    ranking = rank(curves, FitOptions(n_boot=200, target=2 * c), baseline="base")
    by = {a.arm: a for a in ranking.arms}
    assert by["a1"].verdict == "ceiling_up"
    fut = futures(ranking, {x.run: 2 * c for x in curves}, n=20, seed=1)
    assert fut["a1"]["p_change"] <= 0.1, fut["a1"]
    short, c2 = _pilot(arms=2, seeds=3, f=0.8, seed=8, effect={"a": 0.04})
    r2 = rank(short, FitOptions(n_boot=200, target=2 * c2), baseline="base")
    fut2 = futures(r2, {x.run: 3 * c2 for x in short}, n=20, seed=1)
    assert not fut2["a1"]["verdict"].startswith("ceiling")
    assert fut2["a1"]["p_change"] >= 0.5, fut2["a1"]
    assert fut2["a1"]["future"].get("ceiling_up", 0) >= 3  # the gain it has shows in the futures


def test_calibration_file_round_trips_and_bad_files_are_one_line(tmp_path):
    m = _truth(1000.0, 4)
    p = tmp_path / "cal.json"
    import json

    p.write_text(json.dumps(m.to_json()))
    assert load_calibration(p) == m
    from ablate.errors import SettingError
    from jobs import refused

    (tmp_path / "bad.json").write_text('{"r0": 0.3}')
    for name in ("bad.json", "missing.json"):
        with refused(ErrorKind.SETTING, str(tmp_path / name), "--save-calibration") as bad:
            load_calibration(tmp_path / name)
        assert isinstance(bad.value, SettingError) and bad.value.settings == ("calibration",)  # CLI: --calibration


def test_plan_command_from_curves_then_from_a_sweep_file_and_its_errors(tmp_path):
    """`ablate plan` on a curves file (one arm per group) writes a calibration that plans a sweep file before any
    run; bad input is one line and exit 2."""
    import json

    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.curves.tables import write_csv

    runner = CliRunner()
    curves, _ = _pilot(arms=3, seeds=3, f=0.9, seed=5)
    csv = tmp_path / "pilot.csv"
    write_csv(curves, csv)
    cal = tmp_path / "cal.json"
    fast = ["--question", "efficiency", "--ratio", "2", "--trials", "20", "--json"]
    res = runner.invoke(
        app, ["plan", str(csv), "--group", "group", "--baseline", "base", *fast, "--save-calibration", str(cal)]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["model"]["arms"] == 3 and out["model"]["val_n"] == SHAPE.prompts * SHAPE.k
    (q,) = out["questions"]
    assert q["question"] == "efficiency" and q["best"] is not None and q["best"]["power"] >= 0.8
    assert {a["arm"] for a in out["arms"]} == {"base", "a1", "a2"} and all(a["state"] == "ended" for a in out["arms"])
    assert load_calibration(cal).arms == 3
    renamed = tmp_path / "renamed.csv"  # another pass-rate column: named with --y, as rank takes it
    renamed.write_text(csv.read_text().replace("val_pass_rate", "pass_rate"))
    args = ["plan", str(renamed), "--group", "group", "--baseline", "base", *fast]
    one_error(runner.invoke(app, args), ErrorKind.FILE, "'val_pass_rate'", "--y", stream="stderr")
    res = runner.invoke(app, [*args, "--y", "pass_rate"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["questions"] == out["questions"]
    sweep_file = str(RECIPES_DIR / "loss.yaml")
    res = runner.invoke(app, ["plan", sweep_file, "--calibration", str(cal), *fast])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"]["arms"] == 4 and json.loads(res.stdout)["arms"] == []
    for args, kind, culprits in (
        (["plan", sweep_file], ErrorKind.SETTING, [sweep_file, "--calibration FILE"]),
        (
            ["plan", sweep_file, "--calibration", str(cal), "--baseline", "loss=dapo"],
            ErrorKind.SETTING,
            ["--baseline 'loss=dapo'"],
        ),
        (["plan", str(csv), "--calibration", str(cal)], ErrorKind.SETTING, ["--calibration", "SOURCE"]),
        (["plan", str(tmp_path / "nope")], ErrorKind.FILE, [str(tmp_path / "nope")]),
        (["plan", str(csv), "--ratio", "1"], ErrorKind.SETTING, ["--ratio 1.0", "(1, 10]"]),
        (["plan", str(csv), "--question", "speed"], ErrorKind.SETTING, ["--question 'speed'", "ceiling, efficiency"]),
    ):
        one_error(runner.invoke(app, args), kind, *culprits, stream="stderr")
    from ablate.cli.planning import questions

    assert questions("both") == questions("ceiling, efficiency") == ["ceiling", "efficiency"]  # the help's word


def test_plan_on_seeds_that_end_too_early_asks_for_longer_runs_not_seeds(tmp_path):
    """Two arms of two seeds each whose windows end at 30% of the gain: no seed is identified, and the way forward is
    longer runs (the seeds are there already); with one seed an arm it is seeds."""
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.curves.tables import write_csv

    runner = CliRunner()
    for seeds, fix in ((2, "train.max_steps"), (1, "seed=0,1,2")):  # longer runs, or seeds
        curves, _ = _pilot(arms=2, seeds=seeds, f=0.3, seed=7)
        csv = tmp_path / f"pilot{seeds}.csv"
        write_csv(curves, csv)
        res = runner.invoke(app, ["plan", str(csv), "--group", "group", "--baseline", "base", "--trials", "20"])
        line = res.stderr.strip().splitlines()[-1]  # (after plan's progress)
        assert res.exit_code == 2 and error_kind(line) is ErrorKind.DATA and "Traceback" not in res.output, res.output
        assert fix in line, line

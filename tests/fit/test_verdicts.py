"""Honest fits and verdicts: identifiability from intervals, the seed spread behind every verdict (measured, stored
or refused), window sensitivity, and the options the verdicts issue asked for."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

import ablate
from ablate.cli import app
from ablate.curves.tables import load_curves, write_csv
from ablate.errors import ErrorKind, SettingError
from ablate.fit.analysis import fit_curves
from ablate.fit.calibrate import NOISES, SHAPES, simulate_arm, window_end
from ablate.fit.compare import rank
from ablate.fit.decide import SEED_LADDER, decide_power
from ablate.fit.result import FitOptions
from ablate.fit.sensitivity import window_sensitivity
from ablate.fit.spread import MinEffect
from ablate.fit.synthetic import PAPER_CURVES, synthetic_curve
from ablate.text import as_cli
from jobs import one_error

runner = CliRunner()
P = PAPER_CURVES["scalerl-8b"]


def ok(args):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res


def test_a_window_short_of_c_mid_is_not_identified_whatever_n_boot():
    # the window ends where the true curve has made 37% of its gain: A is not measured, at 100 or 1000 resamples
    c_max = P["c_mid"] * (0.37 / 0.63) ** (1 / P["b"])
    short = synthetic_curve(**P, c_max=c_max, n_points=40, drift_sd=0.004, seed=3)
    long = synthetic_curve(**P, c_max=16000, n_points=40, drift_sd=0.004, seed=3)
    for n_boot in (100, 1000):
        r = fit_curves([short], FitOptions(n_boot=n_boot, target=16000))
        assert not r.identifiable and r.status == "not_identified", (n_boot, r.gain_fraction, r.f_ci)
        r = fit_curves([long], FitOptions(n_boot=n_boot, target=16000))
        assert r.identifiable and r.f_ci[0] > 0.5, (n_boot, r.f_ci)


def test_the_paper_method_does_not_call_a_flat_line_converged():
    c = synthetic_curve(**P, seed=1, drift_sd=0.0)
    c.y = np.where(c.x > 0, 0.3, c.y)  # no gain at all: curve_fit answers with B <= 0 or a step
    r = fit_curves([c], FitOptions(method="paper", n_boot=0))
    assert not r.identifiable and r.status != "converged", (r.B, r.fit.at_bound, r.notes)


def test_the_paper_grid_is_scaled_to_the_data_and_says_so():
    c = synthetic_curve(a=0.85, b=1.5, c_mid=60000, r0=0.3, c_max=256000, n_points=20, seed=2)  # samples, ceiling 0.85
    r = fit_curves([c], FitOptions(method="paper", n_boot=0, target=512000))
    assert any("grid scaled to the data" in n.text for n in r.notes)
    assert abs(r.A - 0.85) < 0.03 and r.identifiable  # the paper's A grid stops at 0.80; this one does not
    own = fit_curves([synthetic_curve(**P, seed=2)], FitOptions(method="paper", n_boot=0))
    assert not any("grid scaled" in n.text for n in own.notes)  # on the paper's own units: the paper's own grid


def seeded(tmp_path, n_seeds, single_arm_change):
    """A csv: base and 'steady' arms with n_seeds each, and 'one' with a single seed carrying the change."""
    curves = []
    for arm, change, k in (("base", {}, n_seeds), ("steady", {}, n_seeds), ("one", single_arm_change, 1)):
        for s in range(k):
            curves.append(
                synthetic_curve(
                    **{**P, **change}, seed=1000 * len(curves) + s, drift_sd=0.002, run=f"{arm},seed={s}", group=arm
                )
            )
    path = tmp_path / "c.csv"
    write_csv(curves, path)
    return path


def test_a_single_seed_arm_is_judged_against_the_spread_other_arms_measured(tmp_path):
    path = seeded(tmp_path, 3, {"a": 0.66})
    ranking = rank(load_curves(path, group="group"), FitOptions(n_boot=300), baseline="base")
    v = {a.arm: a.verdict for a in ranking.arms}
    assert v == {"base": "baseline", "steady": "equivalent", "one": "ceiling_up"}, [
        (a.arm, a.detail) for a in ranking.arms
    ]
    assert ranking.floor is not None and "2 arm(s)" in ranking.floor.source and ranking.floor.dof == 4


def test_a_stored_seed_spread_is_saved_and_read_back(tmp_path):
    seeded_path = seeded(tmp_path, 3, {})
    noise = tmp_path / "noise.json"
    ok(["rank", seeded_path, "--group", "group", "--baseline", "base", "--n-boot", "200", "--save-noise", noise])
    stored = json.loads(noise.read_text())
    assert {"sd_A", "sd_logc", "dof", "source"} <= set(stored) and stored["dof"] == 4  # two arms of 3 seeds
    solo = [
        synthetic_curve(**P, seed=7, drift_sd=0.002, run="b", group="b"),
        synthetic_curve(**{**P, "a": 0.66}, seed=8, drift_sd=0.002, run="up", group="up"),
        synthetic_curve(**P, seed=9, drift_sd=0.002, run="same", group="same"),
    ]
    path = tmp_path / "solo.csv"
    write_csv(solo, path)
    out = json.loads(ok(["rank", path, "--group", "group", "--baseline", "b", "--n-boot", "200", "--json"]).stdout)
    assert {a["arm"]: a["verdict"] for a in out["arms"]} == {
        "b": "baseline",
        "up": "inconclusive",
        "same": "inconclusive",
    }
    assert out["noise_floor"] is None
    out = json.loads(
        ok(["rank", path, "--group", "group", "--baseline", "b", "--n-boot", "200", "--json", "--noise", noise]).stdout
    )
    assert {a["arm"]: a["verdict"] for a in out["arms"]} == {  # the stored spread decides one seed each
        "b": "baseline",
        "up": "ceiling_up",
        "same": "equivalent",
    }
    assert out["noise_floor"]["source"].startswith("stored measurement")
    res = runner.invoke(app, ["rank", str(path), "--group", "group", "--noise", str(tmp_path / "nope.json")])
    one_error(res, ErrorKind.SETTING, f"--noise {tmp_path / 'nope.json'}", "--save-noise", stream="stderr")
    res = runner.invoke(app, ["rank", str(path), "--group", "group", "--save-noise", str(tmp_path / "n2.json")])
    one_error(res, ErrorKind.DATA, f"--save-noise {tmp_path / 'n2.json'}", "seed=0,1,2", stream="stderr")


def test_single_seed_ranking_says_it_needs_seeds_and_how(tmp_path):
    path = tmp_path / "solo.csv"
    write_csv(
        [
            synthetic_curve(**P, seed=1, run="b", group="b"),
            synthetic_curve(**{**P, "a": 0.66}, seed=2, run="up", group="up"),
        ],
        path,
    )
    res = ok(["rank", path, "--group", "group", "--baseline", "b", "--n-boot", "200"])
    assert "needs seeds" in res.stdout and "seed=0,1,2" in res.stdout and "ceiling ↑" not in res.stdout
    res = ok(["rank", path, "--group", "group", "--baseline", "b", "--n-boot", "200", "--margin", "paper"])
    assert "ceiling ↑" in res.stdout and "paper's convention" in res.stdout
    res = runner.invoke(app, ["rank", str(path), "--group", "group", "--margin", "loose"])
    one_error(res, ErrorKind.SETTING, "--margin loose", "paper", stream="stderr")
    # the library names a setting by its keyword and the command line by its flag: the same refusal, two spellings
    res = runner.invoke(app, ["rank", str(path), "--group", "group", "--min-effect", "0"])
    assert res.exit_code == 2 and res.stderr.startswith("error[setting]: --min-effect 0.0: the smallest change"), (
        res.output
    )
    with pytest.raises(SettingError) as refused:
        ablate.rank(path, min_effect=0.0)
    assert refused.value.settings == ("min_effect",) and str(refused.value).startswith("min_effect 0.0: the smallest")
    assert as_cli(refused.value).startswith("--min-effect 0.0: the smallest")  # as the report page says it


def test_window_sensitivity_marks_a_fit_that_moves_with_the_window(tmp_path):
    steady = synthetic_curve(**P, seed=4, drift_sd=0.002)
    r = window_sensitivity(fit_curves([steady], FitOptions(n_boot=300)), FitOptions(n_boot=300))
    assert [row["cutoff"] for row in r.sensitivity] == [0.5, 0.75, 1.0] and r.unstable is False
    late = synthetic_curve(**P, seed=4, drift_sd=0.002)
    late.y = late.y + np.clip((late.x - 8000) / 8000, 0, 1) * 0.05  # a second rise the first half could not see
    r = window_sensitivity(fit_curves([late], FitOptions(n_boot=300)), FitOptions(n_boot=300))
    assert r.unstable is True and any(n.text.startswith("unstable") for n in r.notes)
    path = tmp_path / "c.csv"
    write_csv([late], path)
    for cmd in ("fit", "extrapolate"):
        res = ok([cmd, path, "--n-boot", "200", "--window-sensitivity"])
        assert "window sensitivity" in res.stdout and "unstable" in res.stdout and "8000 (50%)" in res.stdout
    data = json.loads(ok(["fit", path, "--n-boot", "200", "--window-sensitivity", "--json"]).stdout)["fits"][0]
    assert data["unstable"] is True and len(data["window_sensitivity"]) == 3


def test_r0_is_an_option_of_rank_and_extrapolate_and_the_header_says_how_r0_was_set(tmp_path):
    c = synthetic_curve(**P, seed=5)
    c.x, c.y, c.n = c.x[1:], c.y[1:], c.n[1:]  # no point at compute 0
    path = tmp_path / "c.csv"
    write_csv([c], path)
    res = ok(["fit", path, "--n-boot", "100"])
    assert "R0 fitted (no point at compute 0; --r0 fixes it)" in res.stdout
    assert "points at compute 0 give R0" not in res.stdout
    for cmd in ("fit", "extrapolate", "rank"):
        out = ok([cmd, path, "--n-boot", "100", "--r0", "0.3", "--json"]).stdout
        fit = json.loads(out)
        fit = fit["fits"][0] if cmd == "fit" else fit["fit"] if cmd == "extrapolate" else fit["arms"][0]
        assert fit["R0"] == pytest.approx(0.3) and fit["fit_r0"] is False
    res = ok(["extrapolate", path, "--n-boot", "100", "--r0", "0.3", "--fit-until", "8000"])
    assert "(rank winner)" not in res.stdout


def test_each_run_reports_its_own_noise(tmp_path):
    calm = synthetic_curve(**P, seed=6, drift_sd=0.001, run="calm")
    wild = synthetic_curve(**P, seed=6, drift_sd=0.02, drift_phi=0.9, run="wild")
    path = tmp_path / "c.csv"
    write_csv([calm, wild], path)
    fits = {f["run"]: f for f in json.loads(ok(["fit", path, "--n-boot", "200", "--json"]).stdout)["fits"]}
    assert fits["wild"]["noise"][0]["drift_sd"] > 5 * fits["calm"]["noise"][0]["drift_sd"]
    assert fits["calm"]["noise"][0]["eval_sd"] is not None  # val_n travels in the csv: evaluation noise known
    width = {k: f["A_ci"][1] - f["A_ci"][0] for k, f in fits.items()}
    assert width["wild"] > 3 * width["calm"]
    res = ok(["fit", path, "--n-boot", "200"])
    assert "each run from its own measured noise" in res.stdout


def test_an_arm_whose_ceiling_is_not_identified_is_still_compared_where_both_arms_have_data(tmp_path):
    # 'slow' learns six times slower: its window never passes C_mid, so it gets no ceiling or efficiency verdict,
    # but at the end of the window both arms cover it is clearly behind; 'slow-too' is the same as 'slow'
    curves = []
    for arm, change in (("base", {}), ("slow", {"c_mid": 6 * P["c_mid"]}), ("slow-too", {"c_mid": 6 * P["c_mid"]})):
        for s in range(3):
            curves.append(
                synthetic_curve(
                    **{**P, **change}, seed=100 * len(curves) + s, drift_sd=0.004, run=f"{arm},seed={s}", group=arm
                )
            )
    ranking = rank(curves, FitOptions(n_boot=200, target=32000), baseline="base")
    by = {a.arm: a for a in ranking.arms}
    assert by["slow"].verdict == "not_identified" and by["slow"].r_call == "lower", by["slow"].detail
    assert ranking.end_spread is not None and (ranking.end_spread.at, ranking.end_spread.dof) == (
        pytest.approx(16000),
        6,
    )
    assert "pass rate lower: ΔR -0." in by["slow"].detail
    again = rank([c for c in curves if c.group != "base"], FitOptions(n_boot=200, target=32000), baseline="slow")
    other = {a.arm: a for a in again.arms}["slow-too"]
    assert (
        other.verdict == "not_identified"
        and other.r_call is None
        and "no difference shown, nor equality" in other.detail
    )
    path = tmp_path / "c.csv"
    write_csv(curves, path)
    out = json.loads(
        ok(
            ["rank", path, "--group", "group", "--baseline", "base", "--n-boot", "200", "--to", "32000", "--json"]
        ).stdout
    )
    slow = next(a for a in out["arms"] if a["arm"] == "slow")
    assert slow["r_call"] == "lower" and slow["p_at_end"] < 0.01 and slow["delta_R_end"] < -0.05


def test_an_arm_with_a_seed_that_has_only_just_started_is_fitted():
    # a live sweep: the third seed has logged its compute-0 evaluation only (val_n known); it has nothing in the
    # window, its R0 still counts
    runs = [synthetic_curve(**P, seed=20 + s, drift_sd=0.003, run=f"a,seed={s}", group="a") for s in range(3)]
    young = runs[1]
    young.x, young.y, young.n = young.x[:1], young.y[:1], young.n[:1]
    r = fit_curves(runs, FitOptions(n_boot=200, target=16000))
    assert r.identifiable and r.A_ci[0] < r.A < r.A_ci[1]
    long = synthetic_curve(**P, seed=21, drift_sd=0.003, n_points=5000, run="long")
    r = fit_curves(
        [long], FitOptions(n_boot=200, target=32000)
    )  # batch means: predictions carry one evaluation's noise
    assert r.noise[0].point_drift_var is not None and r.noise[0].point_drift_var >= r.noise[0].drift_var


def test_shared_a_all_compares_every_arm_at_one_ceiling_as_the_paper_does(tmp_path):
    """--shared-a all: one A for every arm (the mean of the identified arms' A), each arm refitted at it, and the
    arms compared by B and by compute to 3/4 of the gain; the default stays one shared A per pair."""
    curves = []
    for arm, change in (("base", {}), ("steeper", {"b": 1.4 * P["b"]}), ("slower", {"c_mid": 2 * P["c_mid"]})):
        for s in range(3):
            curves.append(
                synthetic_curve(
                    **{**P, **change}, seed=300 + 10 * len(curves) + s, drift_sd=0.003, run=f"{arm},seed={s}", group=arm
                )
            )
    opts = FitOptions(n_boot=200, target=16000)
    ranking = rank(curves, opts, baseline="base", shared_a="all")
    by = {a.arm: a for a in ranking.arms}
    a_all = np.mean([a.fit.A for a in ranking.arms if a.fit.identifiable])
    assert ranking.shared_a == "all" and f"{a_all:.3f}" in ranking.shared_mode
    for arm in ("steeper", "slower"):
        assert by[arm].shared.A_shared == pytest.approx(a_all)
    assert by["steeper"].shared.B_baseline < by["steeper"].shared.B  # compared by B at one A
    assert by["slower"].shared.compute_ratio > 1.3 and by["slower"].verdict == "efficiency_down"
    pairwise = rank(curves, opts, baseline="base")
    pair_a = next(a.shared.A_shared for a in pairwise.arms if a.arm == "slower")
    assert pairwise.shared_a is None and abs(pair_a - a_all) > 1e-6  # the default: the pair's own shared A
    path = tmp_path / "c.csv"
    write_csv(curves, path)
    res = ok(
        [
            "rank",
            path,
            "--group",
            "group",
            "--baseline",
            "base",
            "--n-boot",
            "200",
            "--shared-a",
            "all",
            "--plot",
            tmp_path / "r.png",
        ]
    )
    assert "efficiency compared at: one A for every arm" in res.stdout and (tmp_path / "r-efficiency.png").exists()
    out = json.loads(
        ok(
            ["rank", path, "--group", "group", "--baseline", "base", "--n-boot", "200", "--shared-a", "0.6", "--json"]
        ).stdout
    )
    assert out["shared_a"] == 0.6 and all(a["shared_A"]["A_shared"] == 0.6 for a in out["arms"] if a["shared_A"])
    res = runner.invoke(app, ["rank", str(path), "--group", "group", "--shared-a", "2"])
    one_error(res, ErrorKind.SETTING, "--shared-a 2", "pair", "all", stream="stderr")
    res = runner.invoke(
        app, ["rank", str(path), "--group", "group", "--baseline", "base", "--shared-a", "0.25", "--n-boot", "100"]
    )
    one_error(res, ErrorKind.SETTING, "--shared-a 0.25", "'base'", "--shared-a pair", stream="stderr")  # below R0 (0.3)
    res = ok(["rank", path, "--group", "group", "--baseline", "base", "--n-boot", "100", "--shared-a", "0.5"])
    assert "own A more than 0.02 away" in " ".join(res.stdout.split())  # B at an A the arms do not share


# ---- actionable verdicts: changed (material / negligible / unclear), equivalent, inconclusive ----


def _tight(tmp_path, arms: dict[str, dict], seeds: int = 3, drift_sd: float = 0.0005):
    """A csv of arms with `seeds` seeds each of very tight synthetic curves (each arm's change applied to P)."""
    curves = []
    for arm, change in arms.items():
        for s in range(seeds):
            curves.append(
                synthetic_curve(
                    **{**P, **change}, seed=1000 * len(curves) + s, drift_sd=drift_sd, run=f"{arm},seed={s}", group=arm
                )
            )
    path = tmp_path / "tight.csv"
    write_csv(curves, path)
    return load_curves(path, group="group")


def test_shown_equal_is_told_from_a_negligible_change_and_a_material_one(tmp_path):
    """Tight curves: an arm identical to the baseline is `equivalent`; a real +0.004 on A is found but called
    negligible (below the paper's 0.02 that matters); +0.05 is a material ceiling change."""
    curves = _tight(tmp_path, {"base": {}, "same": {}, "tiny": {"a": P["a"] + 0.004}, "big": {"a": P["a"] + 0.05}})
    ranking = rank(curves, FitOptions(n_boot=200), baseline="base")
    by = {a.arm: a for a in ranking.arms}
    got = {k: (a.verdict, a.practical) for k, a in by.items()}
    assert got == {
        "base": ("baseline", None),
        "same": ("equivalent", "negligible"),
        "tiny": ("ceiling_up", "negligible"),
        "big": ("ceiling_up", "material"),
    }, [(a.arm, a.detail) for a in ranking.arms]
    assert by["same"].p_equivalent < 0.05 and "does not matter" in by["same"].detail
    assert "below the smallest effect that matters" in by["tiny"].detail
    # the why cell: each part (effect and interval) within the 27 characters the table gives it
    assert all(len(part) <= 27 for a in ranking.arms for part in a.effect.split("; ")), [a.effect for a in ranking.arms]
    # with a smaller effect that matters (0.001) the tiny change is no longer negligible, and the identical arm is
    # no longer shown equal within it
    finer = {
        a.arm: (a.verdict, a.practical)
        for a in rank(curves, FitOptions(n_boot=200), baseline="base", min_effect=MinEffect(a=0.001)).arms
    }
    assert finer["tiny"][0] == "ceiling_up" and finer["tiny"][1] != "negligible" and finer["same"][0] != "equivalent"


def test_an_undecided_arm_is_inconclusive_with_the_seeds_that_would_decide_it():
    """Two noisy seeds, a real +0.03 on A: neither a change nor equivalence is shown. The seeds it asks for decide
    the same question, simulated at that many seeds through `rank`, about as often as promised (80%)."""
    shape, noise = SHAPES["scalerl-8b"], NOISES["seeds"]
    to = 2 * window_end(shape, 0.85)
    rng = np.random.default_rng(11)

    def sweep(seeds):
        curves = []
        for name, eff in (("base", {}), ("arm", {"a": 0.03})):
            curves += simulate_arm(shape, noise, eff, seeds, 0.85, rng, name)[0]
        return rank(curves, FitOptions(n_boot=100, target=to, seed=int(rng.integers(1 << 30))), baseline="base")

    ranking = next(
        r
        for r in (sweep(2) for _ in range(10))
        if r.arms[0].verdict == "inconclusive" or next(a for a in r.arms if a.arm == "arm").verdict == "inconclusive"
    )
    arm = next(a for a in ranking.arms if a.arm == "arm")
    assert arm.verdict == "inconclusive" and arm.practical == "unclear"
    assert arm.decide is not None and arm.decide.seeds is not None and arm.decide.seeds > 2, arm.decide
    assert arm.decide.text in arm.detail and f"~{arm.decide.seeds} seeds an arm" in arm.decide.text
    # the promise, checked at the truth: the floor of a well-seeded reference, the true +0.03
    ref = rank(
        [c for name in ("base", "n1", "n2", "n3") for c in simulate_arm(shape, noise, {}, 12, 0.85, rng, name)[0]],
        FitOptions(n_boot=100, target=to),
        baseline="base",
    )  # 44 dof: the spread to within ~10%
    # the spread's value from the reference, its degrees of freedom those of the sweep at n seeds (as in `rank`)
    floor = replace(ref.floor, dof=1)
    lr = float("nan")  # the compute ratio is not needed: the question is the ceiling
    n = next(
        k for k in SEED_LADDER if decide_power(0.03, lr, floor, MinEffect(), k, 2, np.random.default_rng(0)) >= 0.8
    )
    decided = sum(next(a for a in sweep(n).arms if a.arm == "arm").verdict != "inconclusive" for _ in range(20))
    assert decided >= 12, (n, decided)  # 80% promised; 12 of 20 is its one-sided 1% binomial bound


def test_no_effect_is_gone_from_the_vocabulary():
    from ablate.fit.arms import VERDICT_TEXT, VERDICTS

    assert "no_effect" not in VERDICTS and "no detectable effect" not in VERDICT_TEXT.values()
    assert {"equivalent", "inconclusive"} <= set(VERDICTS)


@pytest.mark.parametrize(
    "a, ratio, setting",
    [
        (0.0, 1.15, "min_effect"),
        (1.5, 1.15, "min_effect"),
        (float("nan"), 1.15, "min_effect"),
        (0.02, 1.0, "min_effect_compute"),
        (0.02, float("inf"), "min_effect_compute"),
    ],
)
def test_a_min_effect_out_of_range_is_one_line(a, ratio, setting):
    """Refused as a SettingError naming the setting (the CLI spells it as its flag: test_cli_fit)."""
    from ablate.errors import SettingError

    with pytest.raises(SettingError) as refused:
        MinEffect(a=a, ratio=ratio)
    assert refused.value.settings == (setting,)
    assert str(refused.value).startswith(f"{setting} {a if setting == 'min_effect' else ratio}:")


def test_equivalences_found_never_lower_the_bar_for_a_change():
    """Three arms shown equivalent are true discoveries; in one Benjamini-Hochberg family they would let a
    fourth arm's p = 0.012 through as a change. Changes are discoveries among the tests of change alone."""
    from ablate.fit.stats import benjamini_hochberg, discoveries

    pvals = [0.5, 0.6, 0.001, 0.4, 0.7, 0.002, 0.3, 0.5, 0.001, 0.012, 0.5, 0.9]  # (ceiling, efficiency, equiv) x 4
    is_eq = [k % 3 == 2 for k in range(len(pvals))]
    got = discoveries(pvals, is_eq)
    assert got[2] and got[5] and got[8] and not got[9]
    assert benjamini_hochberg(pvals)[9]  # what one family would have called


def test_a_negligible_ceiling_change_does_not_hide_a_material_efficiency_change(tmp_path):
    """Tight curves: A up by 0.003 (real, below the 0.02 that matters) and C_mid halved: the arm is read on its
    efficiency, and the detail says the ceiling moved by less than matters."""
    curves = _tight(tmp_path, {"base": {}, "fast": {"a": P["a"] + 0.003, "c_mid": P["c_mid"] / 2}})
    arm = next(a for a in rank(curves, FitOptions(n_boot=200), baseline="base").arms if a.arm == "fast")
    assert (arm.verdict, arm.practical) == ("efficiency_up", "material"), arm.detail
    assert arm.p_ceiling < 0.05 and "A changed by less than matters" in arm.detail


def test_seeds_to_decide_are_simulated_through_the_rankings_own_false_discovery_control():
    """Benjamini-Hochberg, as `rank` runs it: other arms' discoveries raise the threshold an arm must meet, so an arm
    among real changes needs fewer seeds than one among nulls; a Bonferroni-like family (every other test at p=1)
    asks for the most. Holding the others' p-values where they are errs on more seeds, never fewer."""
    from ablate.fit.decide import Family
    from ablate.fit.spread import NoiseFloor

    floor = NoiseFloor(sd_A=0.02, sd_logc=0.15, dof=8, source="test")
    me = MinEffect()

    def seeds(family: Family) -> int:
        power = [decide_power(0.025, 0.0, floor, me, n, 4, np.random.default_rng(1), family) for n in SEED_LADDER]
        return next(n for n, p in zip(SEED_LADDER, power) if p >= 0.8)

    three_nulls = Family((1.0,) * 6 + (0.9,) * 3, (False, False, True) * 3)
    three_changes = Family((1e-6, 0.5, 0.9) * 3, (False, False, True) * 3)
    alone = Family()
    assert seeds(three_changes) < seeds(three_nulls), (seeds(three_changes), seeds(three_nulls))
    assert seeds(alone) <= seeds(three_nulls)
    # power rises with seeds, and is the same draw for the same inputs (a fixed generator): no hidden randomness
    ladder = [decide_power(0.025, 0.0, floor, me, n, 4, np.random.default_rng(1), three_changes) for n in (3, 8, 24)]
    assert ladder == sorted(ladder) and ladder[-1] > 0.95


def test_the_efficiency_verdict_of_converged_identical_arms_does_not_move_with_to():
    """Two identical tight arms whose windows reach 95% of the gain: equivalent with no options, and the same verdict,
    compute ratio and interval wherever --to is put (at C_mid, at the default twice the window, far out). Efficiency
    is compared at three quarters of the gain; --to only moves the predicted pass rates."""
    shape, f = SHAPES["scalerl-8b"], 0.95
    rng = np.random.default_rng(5)
    curves = simulate_arm(shape, NOISES["eval"], {}, 3, f, rng, "base")[0]
    curves += simulate_arm(shape, NOISES["eval"], {}, 3, f, rng, "arm")[0]
    end = window_end(shape, f)
    seen = []
    for to in (shape.c_mid, 2 * end, 20 * end):
        ranking = rank(curves, FitOptions(n_boot=200, target=to, fit_until=end * 1.000001), baseline="base")
        arm = next(a for a in ranking.arms if a.arm == "arm")
        seen.append((arm.verdict, arm.shared.compute_ratio_tested, *arm.shared.compute_ratio_ci))
        assert arm.fit.target == to  # --to moves what is predicted, not the efficiency verdict
    assert seen[0][0] == "equivalent" and 0.97 < seen[0][1] < 1.03, seen
    assert [s[0] for s in seen] == ["equivalent"] * 3
    assert [s[1:] for s in seen[1:]] == [pytest.approx(seen[0][1:], rel=1e-9)] * 2

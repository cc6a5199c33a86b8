"""The calibration targets, asserted on a reduced grid of the harness (`ablate calibrate`; fixed seeds, so each
cell's numbers are the same on every machine). Every cell runs the exact code `ablate rank` runs.

The full grid, with the cells where a target is missed, is `make bench-calibrate` and docs/verdicts.md.

A cell of 40 trials measures a rate to about +-0.07, so each assertion is a one-sided binomial test of the target
itself: it fails when the trials show the target missed (p < 0.05), e.g. coverage at or below 32 of 40 against
the 90% target, 5 or more false calls of 40 against 5%, power at or below 27 of 40 against 80%.

`equivalent` is asserted both ways: claimed in at most 5% of trials where the true effect is exactly the smallest
that matters (0.02 on A, or 1.15x compute), and found on identical arms once the seeds measure them well enough
(a test that never claims it would pass the first alone)."""

from __future__ import annotations

import json

import pytest
from scipy.stats import binom
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import ErrorKind
from ablate.fit.calibrate import BOUNDARY, EFFECTS, NOISES, SHAPES, Shape, run_cell
from ablate.fit.spread import MinEffect
from jobs import one_error

TRIALS = 40
N_BOOT = 200


def cell(shape, noise, seeds, f, effect, floor="own"):
    return run_cell(SHAPES[shape], NOISES[noise], seeds, f, effect, TRIALS, n_boot=N_BOOT, floor=floor)


def at_least(rate, target):
    """False when the trials show the rate below `target` (one-sided binomial test at 5%)."""
    return binom.cdf(round(rate * TRIALS), TRIALS, target) >= 0.05


def at_most(rate, target):
    """False when the trials show the rate above `target`."""
    return binom.sf(round(rate * TRIALS) - 1, TRIALS, target) >= 0.05


@pytest.mark.parametrize(
    "shape,noise,seeds,f,floor",
    [
        ("embedded", "seeds", 2, 0.95, "own"),
        ("embedded", "ar0.5", 3, 0.8, "own"),
        ("scalerl-8b", "seeds", 3, 0.95, "own"),
        ("scalerl-8b", "ar0.9", 5, 0.8, "own"),
        ("scalerl-8b", "ar0.5", 1, 0.95, "stored"),
        ("embedded", "eval", 1, 0.8, "stored"),
    ],
)
def test_identical_arms_are_not_told_apart(shape, noise, seeds, f, floor):
    r = cell(shape, noise, seeds, f, "null", floor)
    assert at_most(r["false_call_rate"], 0.05), r["verdicts"]
    assert at_least(r["coverage_A"], 0.9) and at_least(r["coverage_pred"], 0.9), r


def test_one_seed_without_a_measured_spread_calls_nothing():
    for effect in ("null", "a+0.05"):
        r = cell("scalerl-8b", "eval", 1, 0.95, effect)
        assert r["false_call_rate"] in (0.0, None) and r["ceiling_calls"] == 0.0, r["verdicts"]
        assert set(r["verdicts"]) <= {"inconclusive", "not_identified"} and r["equivalent_rate"] == 0.0


@pytest.mark.parametrize("shape,noise", [("scalerl-8b", "eval"), ("scalerl-8b", "seeds"), ("embedded", "ar0.5")])
def test_a_ceiling_change_of_005_is_found_at_3_seeds(shape, noise):
    r = cell(shape, noise, 3, 0.95, "a+0.05")
    assert at_least(r["power"], 0.8), r["verdicts"]


@pytest.mark.parametrize("shape,noise", [("scalerl-8b", "eval"), ("scalerl-8b", "ar0.5")])
def test_a_halved_c_mid_is_an_efficiency_change_never_a_ceiling_change(shape, noise):
    r = cell(shape, noise, 3, 0.95, "cmid/2")
    assert at_least(r["power"], 0.8), r["verdicts"]
    assert at_most(r["ceiling_calls"], 0.05), r["verdicts"]


@pytest.mark.parametrize("noise,f", [("eval", 0.8), ("eval", 0.95), ("ar0.5", 0.8), ("ar0.5", 0.95)])
def test_a_twofold_c_mid_is_found_at_3_seeds_on_the_embedded_shape(noise, f):
    """Efficiency is compared at three quarters of the gain, where the curves climb: a halved C_mid is found in
    at least 90% of sweeps shaped like the embedded task, with no options (read on the plateau at the default
    --to, it was found in about half of them)."""
    r = cell("embedded", noise, 3, f, "cmid/2")
    assert at_least(r["power"], 0.9) and at_most(r["ceiling_calls"], 0.05), r["verdicts"]


def test_the_boundary_effects_sit_exactly_at_the_default_smallest_effect():
    me = MinEffect()
    assert {e: EFFECTS[e] for e in BOUNDARY} == {
        "a+0.02": {"a": me.a},
        "a-0.02": {"a": -me.a},
        "cmid*1.15": {"c_mid": me.ratio},
        "a+0.02@end": {"a": me.a, "meet": 1.0},
    }


def test_a_boundary_that_a_clip_of_a_would_move_is_refused():
    near_one = Shape("near-one", 0.30, 0.98, 1.92, 2542.0, 1000, 16)  # A + 0.02 would clip at 0.99
    with pytest.raises(ValueError, match=r"differ by 0\.010000, not 0\.02"):
        run_cell(near_one, NOISES["eval"], 2, 0.95, "a+0.02", 1)


@pytest.mark.parametrize(
    "shape,noise,seeds,effect",
    [
        # the compute side decides: A equal (its TOST passes in most trials), compute exactly 1.15x
        ("scalerl-8b", "ar0.5", 5, "cmid*1.15"),
        # the A side alone decides (compute near 1x, its band opened): A exactly 0.02 apart
        ("scalerl-8b", "ar0.9", 3, "a+0.02@end"),
        # a plain shift of A by 0.02, mostly inconclusive: equivalence from "not significant" would claim many
        ("embedded", "seeds", 3, "a+0.02"),
        ("embedded", "ar0.5", 2, "a-0.02"),
    ],
)
def test_equivalent_is_claimed_at_most_5pct_at_the_smallest_effect_that_matters(shape, noise, seeds, effect):
    r = cell(shape, noise, seeds, 0.95, effect)
    assert r["delta_A_true"] == pytest.approx(EFFECTS[effect].get("a", 0.0), abs=1e-9)  # no clip moved it
    assert at_most(r["false_equivalent_rate"], 0.05), r["verdicts"]


def test_identical_arms_are_shown_equivalent_when_the_seeds_measure_them():
    r = cell("scalerl-8b", "eval", 3, 0.95, "null")
    assert at_least(r["equivalent_rate"], 0.8) and at_most(r["false_call_rate"], 0.05), r["verdicts"]


def test_the_calibrate_verb_prints_a_table_and_writes_json(tmp_path):
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--shapes",
            "embedded",
            "--noises",
            "eval",
            "--seeds",
            "1,2",
            "--f",
            "0.95",
            "--effects",
            "null,cmid*1.15",
            "--trials",
            "3",
            "--n-boot",
            "50",
            "--out",
            str(out),
        ],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0, res.output
    assert "cover < 0.90" in res.output and "shown" in res.output and "cmid*1.15*" in res.output
    assert "trials 3" in res.output  # every cell's: said once, in the title
    rows = json.loads(out.read_text())["rows"]
    assert {(r["seeds"], r["floor"], r["effect"]) for r in rows} == {
        (s, f, e) for s, f in ((1, "own"), (1, "stored"), (2, "own")) for e in ("null", "cmid*1.15")
    }
    assert all(r["trials"] == 3 and 0.0 <= r["equivalent_rate"] <= 1.0 for r in rows)
    assert all((r["false_equivalent_rate"] is None) == (r["effect"] == "null") for r in rows)
    res = CliRunner().invoke(app, ["calibrate", "--shapes", "nowhere"])
    one_error(res, ErrorKind.SETTING, "--shapes 'nowhere'", "scalerl-8b, scalerl-scout, embedded", stream="stderr")
    res = CliRunner().invoke(app, ["calibrate", "--shapes", "embeded"])
    one_error(res, ErrorKind.SETTING, "--shapes 'embeded'", "did you mean 'embedded'?", stream="stderr")
    res = CliRunner().invoke(app, ["calibrate", "--seeds", "1,0"])
    one_error(res, ErrorKind.SETTING, "--seeds '1,0'", "[1, 20]", stream="stderr")
    res = CliRunner().invoke(app, ["calibrate", "--n-boot", "10"])
    one_error(res, ErrorKind.SETTING, "--n-boot 10", ">= 50", stream="stderr")


def test_the_table_marks_a_rate_off_target_in_plain_text_and_fits_a_terminal():
    """Red alone is lost in a pipe or a log: an off-target rate also carries `!`. A cell's name is never clipped,
    and what every row shares is said once, in the title, so the table fits 80 columns."""
    from rich.console import Console

    from ablate.render.fit import calibration_table

    def row(shape: str, effect: str, false_calls: float | None) -> dict:
        real = effect != "null"
        return dict(
            shape=shape,
            noise="seeds",
            seeds=3,
            f=0.8,
            effect=effect,
            boundary=real,
            trials=40,
            coverage_A=0.95,
            coverage_pred=0.875,
            false_call_rate=false_calls,
            power=0.9 if real else None,
            ceiling_calls=0.0,
            not_identified=0.15,
            equivalent_rate=0.2,
            false_equivalent_rate=0.1 if real else None,
        )

    rows = [row("scalerl-scout", "null", 0.075), row("embedded", "a+0.02@end", None), row("embedded", "null", 0.025)]
    rows.append({**row("embedded", "null", 0.0504), "coverage_A": 0.899})  # on target as printed: 0.05, 0.90
    console = Console(width=80, no_color=True, record=True)
    console.print(calibration_table(rows))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "scalerl-scout" in text and "a+0.02@end*" in text  # names whole
    assert "noise seeds, seeds 3, floor own, f 0.80, trials 40" in text
    assert text.count("0.88!") == 4 and text.count("0.07!") == 1 and text.count("0.10!") == 1  # cover, calls, equiv
    assert "0.03!" not in text and "0.95!" not in text and "0.90!" not in text  # on target: unmarked
    assert "0.05!" not in text and "0.90 " in text

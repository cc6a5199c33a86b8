"""`sweep --decide`'s error control, proved by simulation with known truth: the whole procedure (a look after every
wave, stopping at the first settled verdict) against the user's way (the same looks, each at 5%), on the embedded
task's shape with its evaluation noise and drift (fit/calibrate.py), through `rank`'s own tests (the fast engine)."""

from __future__ import annotations

import pytest

from ablate.errors import ErrorKind
from ablate.fit import power
from ablate.fit.arms import ArmResult, SharedA
from ablate.fit.calibrate import shape_model
from ablate.fit.sequential import Looks, futile_arm, settled, simulate
from ablate.fit.spread import MinEffect
from jobs import refused

TRIALS = 200


def _run(effect: dict[str, float], naive: bool = False, seed: int = 11, futility: bool = True):
    m = shape_model("embedded", "ar0.5")
    rung = power.rung_for(m, m.budget, effect, TRIALS, 2, seed)
    looks = Looks(3, 12)
    return simulate(rung, looks, noise=None, me=MinEffect(), extra_arms=0, seed=seed, naive=naive, futility=futility)


def test_the_looks_split_the_rate_equally_and_end_at_the_most_seeds():
    assert Looks(3, 12).seeds == (3, 6, 9, 12) and Looks(3, 12).level == pytest.approx(0.0125)
    assert Looks(3, 10).seeds == (3, 6, 9, 10) and Looks(4, 4).seeds == (4,)
    for bad, culprits in (
        ({"wave": 1}, ("wave 1",)),
        ({"wave": 4, "max_seeds": 3}, ("max_seeds 3",)),
        ({"q": 0.0}, ("0.0",)),
    ):
        with refused(ErrorKind.SETTING, *culprits):
            Looks(**bad)


def test_null_arms_false_calls_stay_within_5_percent_over_every_look():
    """Identical arms: any change called at any look is false. The procedure stays within 5%; the same looks each
    held to 5% (adding seeds by hand and ranking again) do not."""
    decided = _run({})
    by_hand = _run({}, naive=True, futility=False)
    assert decided.ever_changed.mean() <= 0.05
    assert by_hand.ever_changed.mean() >= 0.08  # the guarantee is not free: the same looks at 5% each break it
    assert decided.ever_changed.mean() < by_hand.ever_changed.mean()


def test_equivalence_is_claimed_rarely_when_the_true_difference_is_the_smallest_that_matters():
    at_margin = _run({"a": MinEffect().a})
    assert at_margin.ever_equivalent.mean() <= 0.05


def test_a_large_ceiling_change_stops_early_and_is_called_right():
    big = _run({"a": 0.05})
    right = (big.code == power.CODES.index("ceiling_up")).mean()
    assert right >= 0.9 and big.seeds.mean() < 12  # decided before the last look, on average
    assert not big.ever_equivalent.any()


def test_arms_that_cannot_be_decided_stop_early_without_a_claim():
    """Stopping for futility ends runs that could not settle by the most seeds: fewer seeds on null arms, and no
    more false calls than going on would make."""
    stopping = _run({})
    going_on = _run({}, futility=False)
    assert stopping.seeds.mean() < going_on.seeds.mean() - 1
    assert stopping.ever_changed.mean() <= going_on.ever_changed.mean()


def test_futility_reads_the_interval_rank_printed():
    me = MinEffect()
    wide = _arm("inconclusive", "unclear", [-0.05, 0.05])  # ΔA 0 ± 0.05 at 3 seeds: 12 seeds cannot resolve ±0.02
    wide.delta_A = 0.0
    assert futile_arm(wide, me, horizon=4, dof=4, level=0.0125)
    tight = _arm("inconclusive", "unclear", [-0.012, 0.012])  # inside ±0.02 by 12 seeds: equivalence is in reach
    tight.delta_A = 0.0
    tight.shared = SharedA(0.6, 1.0, 1.0, 1.0, 1.0, 0.75, 1.0, 1.0, 1.0, (0.95, 1.05), 1.0)
    assert not futile_arm(tight, me, horizon=4, dof=4, level=0.0125)
    assert not futile_arm(wide, me, horizon=1, dof=4, level=0.0125)  # at the last look: nothing is stopped early


def _arm(verdict: str, practical: str, delta_a_ci: list[float]) -> ArmResult:
    return ArmResult("x", None, None, 3, False, False, verdict=verdict, practical=practical, delta_A_ci=delta_a_ci)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "verdict, practical, ci, stops",
    [
        ("equivalent", "negligible", [-0.01, 0.01], True),
        ("ceiling_up", "material", [0.03, 0.09], True),
        ("ceiling_up", "unclear", [0.005, 0.06], False),  # real, but its size is not known: more seeds
        ("efficiency_up", "material", [-0.01, 0.015], True),  # A shown unmoved: only efficiency moved
        ("efficiency_up", "material", [-0.02, 0.07], False),  # A may have moved: a ceiling change can look like this
        ("inconclusive", "unclear", [-0.05, 0.05], False),
    ],
)
def test_when_an_arm_is_settled(verdict, practical, ci, stops):
    assert settled(_arm(verdict, practical, ci), MinEffect()) is stops

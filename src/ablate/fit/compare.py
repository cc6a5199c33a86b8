"""`rank`: fit every arm, then say which design choices move the ceiling A and which only the efficiency, and
claim no more than the noise allows.

Per arm against the baseline (ScaleRL §2's order of questions):
1. Identified? When either window has not passed C_mid (the gain fraction's interval reaches below 50%, B sits on a
   bound, A on its bound), A is not measured: the arm is `not_identified`, ranked on its predicted pass rate at the
   target, and (when arms have seeds) tested on its pass rate at the end of the window every arm covers, where no
   extrapolation is needed: `r_call` higher / lower.
2. Ceiling: dA = A_arm - A_baseline against the seed-to-seed spread of A.
3. Efficiency: the two refitted with one shared A; the compute each needs to reach three quarters of its gain under
   it, as a ratio, against the seed-to-seed spread of log compute (fit/shared.py).
This module fits the arms and makes the comparisons (the shared-A refits: fit/shared.py; the records: fit/arms.py);
fit/verdicts.py turns them into verdicts (the tests, the seed spread they are judged against, the false-discovery
control, the paper's threshold rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ablate.errors import ErrorKind, Phrase, SettingError, UserError, joined, phrased, refusal
from ablate.fit.analysis import fit_curves, group_arms, rank_key
from ablate.fit.arms import ArmResult, EndSpread, Ranking, Verdict
from ablate.fit.curve import Curve, NotFitted
from ablate.fit.notes import Note
from ablate.fit.result import FitOptions, FitResult
from ablate.fit.shared import Efficiency, compare_efficiency, own_log_compute_seeds
from ablate.fit.spread import PAPER_A_MARGIN, MinEffect, NoiseFloor
from ablate.fit.verdicts import decide_verdicts, end_of_window, measured_floor, paper_verdict, parse_margin

__all__ = ["parse_shared_a", "rank"]


def _fit_arm(item: tuple[str, list[Curve], FitOptions]) -> ArmResult | NotFitted:
    """The arm's fit, or (a young arm with too few points in the window) why it can't be fitted yet."""
    label, cs, opts = item
    try:
        fit = fit_curves(cs, opts, name=label, group=label)
    except UserError as e:
        return NotFitted(label, label, e.phrase if isinstance(e, SettingError) else str(e))
    return ArmResult(
        arm=label,
        arm_id=cs[0].arm_id,
        fit=fit,
        seeds=len(cs),
        partial=any(c.facts is not None and c.facts.partial for c in cs),
        truncation_warning=any(c.facts is not None and c.facts.truncation_warning for c in cs),
        stopped=sorted({c.stopped for c in cs if c.stopped}),
    )


def _efficiency(item: tuple[FitResult, FitResult, FitOptions, float | None]) -> Efficiency:
    return compare_efficiency(*item)


def parse_shared_a(value: str | float | None) -> str | float | None:
    """--shared-a: None (each pair's own shared A), "all" (the mean A of the identified arms), or a value."""
    if value is None or value == "pair":
        return None
    if value == "all":
        return "all"
    try:
        a = float(value)
    except ValueError:
        a = float("nan")
    if not 0.0 < a < 1.0:
        raise SettingError(
            f"{{shared_a}} {value}: give pair (the default), all (the mean A of the identified arms), or "
            "a ceiling strictly between 0 and 1",
            "shared_a",
        )
    return a


PAIR_MODE = "each arm and the baseline refitted with their own shared A"


def _one_a(
    shared_a: str | float | None, arms: list[ArmResult], base: ArmResult, compared: list[ArmResult]
) -> tuple[float | None, str]:
    """The A every compared arm is refitted at (None: each pair fits its own) and the mode in words."""
    if shared_a is None:
        return None, PAIR_MODE
    if shared_a == "all":
        ident = [a.fit.A for a in arms if a.fit.identifiable]
        if not ident:
            return None, "one A for every arm: none (no arm is identified), so no efficiency comparison"
        a_all = float(np.mean(ident))
        mode = f"one A for every arm, {a_all:.3f}: the mean of the {len(ident)} identified arms' A"
    else:
        a_all = float(shared_a)
        mode = Phrase(f"one A for every arm, {a_all:.3f} ({{shared_a}})", "shared_a")
    low = [a for a in [base, *compared] if a_all <= a.fit.R0 + 0.01]
    if low:
        raise SettingError(
            f"{{shared_a}} {shared_a}: one A of {a_all:.3f} leaves arm {low[0].arm!r} (R0 "
            f"{low[0].fit.R0:.3f}) no gain to fit; give an A above every arm's R0, or {{shared_a}} pair",
            "shared_a",
        )
    far = [a.arm for a in [base, *compared] if abs(a.fit.A - a_all) > PAPER_A_MARGIN]
    if far:
        mode += (
            f"; own A more than {PAPER_A_MARGIN:g} away for {', '.join(far[:4])}"
            f"{' and more' if len(far) > 4 else ''}: the paper compares B at one A where the A's agree"
        )
    return a_all, mode


def _pmap(fn, items: list, jobs: int) -> list:
    """map over processes (fork: the fit stack is already imported) when there is enough work to share."""
    if jobs <= 1 or len(items) < 2 * jobs:
        return [fn(it) for it in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(fn, items, chunksize=max(1, len(items) // (4 * jobs))))


def _x_end(a: ArmResult) -> float:
    return max(float(c.x[-1]) for c in a.fit.curves)


def _stopped_windows(arms: list[ArmResult], base: ArmResult, opts: FitOptions) -> dict[str, ArmResult | str]:
    """For each arm whose window `ablate sweep --prune` ended short of the baseline's (its longest run was
    stopped): the baseline fitted on the stopped arm's window (its curves cut at the arm's last evaluation), so that
    the two are compared at the same compute and a stopped arm does not lose A it had no compute to show; a string
    says why that fit failed. An arm with one stopped seed whose other seeds ran on is read on the whole window."""
    out: dict[str, ArmResult | str] = {}
    base_end = _x_end(base)
    for a in arms:
        if a is base or not a.stopped:
            continue
        end = _x_end(a)
        longest = max(a.fit.curves, key=lambda c: float(c.x[-1]))
        if end >= base_end or longest.stopped is None:
            continue
        until = end if opts.fit_until is None else min(end, opts.fit_until)
        fit = _fit_arm((base.arm, base.fit.curves, replace(opts, fit_until=until)))
        if isinstance(fit, ArmResult):
            out[a.arm] = fit
        else:
            out[a.arm] = phrased(
                f"stopped at {end:.4g}: the baseline's first {end:.4g} can't be fitted to compare it with (",
                fit.reason,
                ")",
            )
    return out


def _fit_arms(
    groups: dict[str, list[Curve]], opts: FitOptions, baseline: str | None, jobs: int, not_fitted: list[NotFitted]
) -> tuple[list[ArmResult], list[NotFitted]]:
    """Every arm fitted (on `jobs` processes), and the arms that can't be fitted yet with why."""
    fitted = _pmap(_fit_arm, [(label, cs, opts) for label, cs in groups.items()], jobs)
    arms = [a for a in fitted if isinstance(a, ArmResult)]
    not_fitted = not_fitted + [a for a in fitted if not isinstance(a, ArmResult)]
    if not arms:
        named = [
            a.reason if a.reason.startswith(f"{a.label}: ") else phrased(a.label, ": ", a.reason) for a in not_fitted
        ]
        why = joined("; ", named[:3])
        raise refusal(phrased("no arm can be fitted yet: ", why), ErrorKind.DATA)
    if baseline is not None and baseline not in {a.arm for a in arms}:
        why = next(a.reason for a in not_fitted if a.arm == baseline)
        raise SettingError(
            phrased(f"the baseline arm {baseline!r} can't be fitted yet (", why, "); wait for it or pick {baseline}"),
            "baseline",
            kind=ErrorKind.DATA,
        )
    return arms, not_fitted


def _identified_pairs(arms: list[ArmResult], base: ArmResult, bases: dict[str, ArmResult | str]) -> list[ArmResult]:
    """The arms compared with their baseline on A and efficiency (both identified); the others get their
    `not_identified` verdict (or, a stopped arm whose baseline can't be fitted on its window, why)."""
    compared = []
    for a in arms:
        if a is base:
            continue
        b = bases.get(a.arm, base)
        if isinstance(b, str):
            a.verdict, a.detail, a.effect = Verdict.NOT_IDENTIFIED, b, "baseline unfitted on its window"
            continue
        a.delta_A = a.fit.A - b.fit.A
        if not (a.fit.identifiable and b.fit.identifiable):
            who, fit = ("this arm", a.fit) if not a.fit.identifiable else ("the baseline", b.fit)
            a.verdict = Verdict.NOT_IDENTIFIED  # the footer says how it is ranked; the detail, which rule failed
            why = joined("; ", fit.why_not_identified) or "the fit did not converge"
            both = not (a.fit.identifiable or b.fit.identifiable)  # the baseline's reasons are in its own row
            a.detail = phrased(f"A not measured ({'both; ' * both}{who}: ", why, ")")
            a.effect = f"A not measured ({'this arm and the baseline' if both else who})"
        else:
            compared.append(a)
    return compared


def _efficiencies(
    arms: list[ArmResult],
    compared: list[ArmResult],
    base: ArmResult,
    bases: dict[str, Any],
    opts: FitOptions,
    a_all: float | None,
    jobs: int,
) -> None:
    """Each compared arm's shared-A comparison with its baseline, and every arm's seeds' log compute (the spread
    the efficiency test is judged against)."""
    shared = _pmap(_efficiency, [(a.fit, bases.get(a.arm, base).fit, opts, a_all) for a in compared], jobs)
    for a, eff in zip(compared, shared):
        b = bases.get(a.arm, base)
        a.log_compute_seeds = eff.seeds_arm
        a.base_log_compute_seeds = eff.seeds_base or None
        if b.log_compute_seeds is None and eff.seeds_base:
            b.log_compute_seeds = eff.seeds_base  # the baseline's spread, measured in its first comparison
        a.shared = eff.shared
    for a in arms:
        if a.log_compute_seeds is None:  # the baseline without comparisons, or an arm not identified
            own_log_compute_seeds(a, opts)


def _needs_seeds(compared: list[ArmResult], base: ArmResult) -> Note:
    one = all(x.seeds == 1 for x in compared + [base])
    return Note(
        "needs_seeds",
        Phrase(
            "one seed per arm cannot measure the seed spread, and there is no "
            "{noise} file, so no arm can be shown changed or equivalent"
            if one
            else "no arm has 2 seeds identified alone to measure the seed spread, and there is no "
            "{noise} file, so no arm can be shown changed or equivalent",
            "noise",
        ),
    )


@dataclass
class _Judgement:
    """What the comparisons with the baseline leave on the ranking: the seed spread used, the yardstick in words,
    the end-of-window spread, the shared-A mode and the notes for every arm."""

    source: str = "none (no baseline)"
    shared_mode: str = PAIR_MODE
    floor: NoiseFloor | None = None
    end_spread: EndSpread | None = None
    notes: list[Note] = field(default_factory=list)


def _tested(
    arms: list[ArmResult],
    compared: list[ArmResult],
    base: ArmResult,
    bases: dict[str, ArmResult | str],
    opts: FitOptions,
    tests: tuple[NoiseFloor | None, MinEffect, bool],
    x: str,
    out: _Judgement,
) -> None:
    """The calibrated tests: the seed spread measured (or stored) and every compared arm's verdict (fills `out`)."""
    noise, min_effect, decide = tests
    measured = measured_floor(arms)
    # the stored spread (--noise) when it rests on more seeds than this ranking's own
    floor = noise if noise is not None and (measured is None or noise.dof > measured.dof) else measured
    out.floor = floor
    out.source = (
        floor.source
        if floor is not None
        else Phrase(
            "no seed spread of A and compute: no arm has 2 seeds with both measured, and no {noise} file", "noise"
        )
    )
    at_end, out.end_spread = end_of_window(arms)
    unidentified = [a for a in arms if a.verdict == "not_identified"]
    decide_verdicts(
        compared,
        base,
        floor,
        opts,
        unidentified,
        at_end,
        out.end_spread,
        {k: v for k, v in bases.items() if isinstance(v, ArmResult)},
        min_effect,
        x,
        decide=decide,
    )
    if floor is None and compared:
        out.notes.append(_needs_seeds(compared, base))


def _judge(
    arms: list[ArmResult],
    baseline: str,
    opts: FitOptions,
    a_margin: float | None,
    shared_a: str | float | None,
    tests: tuple[NoiseFloor | None, MinEffect, bool],
    x: str,
    jobs: int,
) -> _Judgement:
    """Every arm's verdict against the baseline arm: by the paper's threshold rule when `a_margin` is set, else by
    the calibrated tests (`tests`: the stored seed spread, the smallest effect that matters, and whether to work out
    the seeds that would decide an inconclusive arm)."""
    out = _Judgement()
    base = next(a for a in arms if a.arm == baseline)
    base.verdict, base.detail, base.effect = Verdict.BASELINE, "the reference arm", "reference"
    if not base.fit.identifiable:
        why = joined("; ", base.fit.why_not_identified) or "the fit did not converge"
        base.detail = phrased(base.detail, "; A not measured (", why, "): no ceiling or efficiency verdicts")
        base.effect = "reference; A not measured"
    bases = _stopped_windows(arms, base, opts)
    compared = _identified_pairs(arms, base, bases)
    a_all, out.shared_mode = _one_a(shared_a, arms, base, compared)
    _efficiencies(arms, compared, base, bases, opts, a_all, jobs)
    if a_margin is not None:
        whose = "the paper's convention" if a_margin == PAPER_A_MARGIN else "a threshold you chose"
        out.source = f"{whose} (±{a_margin:g} on A, ±15% compute): a threshold rule, not a test"
        for a in compared:
            paper_verdict(a, a_margin, opts)
    else:
        _tested(arms, compared, base, bases, opts, tests, x, out)
    for a in arms:
        if isinstance(bases.get(a.arm), ArmResult):
            a.detail += f"; read against the baseline's first {_x_end(a):.4g} {x} (this arm was stopped there)"
    return out


def rank(
    curves: list[Curve],
    opts: FitOptions,
    *,
    baseline: str | None = None,
    margin: str | float | None = None,
    noise: NoiseFloor | None = None,
    x: str = "gpu_hours",
    not_fitted: list[NotFitted] | None = None,
    jobs: int = 1,
    shared_a: str | float | None = None,
    min_effect: MinEffect | None = None,
    decide: bool = True,
) -> Ranking:
    """Fit every arm (seeds pooled) and give each a verdict against the baseline arm, best first (see the module
    docstring). `margin`: the paper's threshold rule instead of the tests; `noise`: a stored seed spread for arms
    without seeds of their own; `shared_a`: "all" or a value refits every arm at one A for the efficiency
    comparison (the paper's way) instead of one A per pair; `min_effect`: the smallest effect that matters (default
    the paper's +-0.02 on A, +-15% compute); `decide=False` leaves out the seeds that would decide an inconclusive
    arm (a simulation of its own, which callers that read only the verdicts skip). Arms are independent fits: with
    many arms they run on `jobs` worker processes."""
    min_effect = min_effect or MinEffect()
    a_margin = parse_margin(margin)
    shared_a = parse_shared_a(shared_a)
    groups = group_arms(curves)
    waiting = {n.arm: n.reason for n in not_fitted or [] if n.arm not in groups}  # arms with no run to fit yet
    if baseline is None:
        flagged = {g for g, cs in groups.items() if any(c.facts is not None and c.facts.baseline for c in cs)}
        baseline = flagged.pop() if len(flagged) == 1 else None
    elif baseline in waiting:
        raise SettingError(
            f"{{baseline}} {baseline!r}: no run of this arm can be fitted yet ({waiting[baseline]}); rank again "
            f"once it has evaluations, or compare with another arm: {', '.join(groups)}",
            "baseline",
        )
    elif baseline not in groups:
        raise SettingError(f"{{baseline}} {baseline!r}: no such arm; arms are: {', '.join(groups)}", "baseline")
    arms, not_fitted = _fit_arms(groups, opts, baseline, jobs, not_fitted or [])
    if baseline is None:  # no comparisons: each arm's seed spread around its own curve (for --save-noise)
        judged = _Judgement()
        pending = {n.arm for n in not_fitted if n.arm in waiting and n.facts and n.facts.baseline}
        if len(pending) == 1:  # the sweep's baseline, not evaluated yet
            arm = pending.pop()
            why = f"the baseline arm {arm} has no run that can be fitted yet ({waiting[arm]}): no verdicts; rank"
            judged.notes.append(Note("baseline_waiting", why + " and plan again once it has"))
        for a in arms:
            own_log_compute_seeds(a, opts)
    else:
        judged = _judge(arms, baseline, opts, a_margin, shared_a, (noise, min_effect, decide), x, jobs)
    arms.sort(key=lambda a: rank_key(a.fit), reverse=True)
    return Ranking(
        arms=[a.seal() for a in arms],
        baseline=baseline,
        margin_source=judged.source,
        target=opts.target,
        x=x,
        opts=opts,
        not_fitted=not_fitted,
        floor=judged.floor,
        rule="test" if a_margin is None else "paper",
        end_spread=judged.end_spread,
        shared_mode=judged.shared_mode,
        shared_a=shared_a,
        min_effect=min_effect,
        notes=judged.notes,
    )

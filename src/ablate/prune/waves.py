"""`ablate sweep --decide`: the sweep grows by waves of seeds, with a look after each, until every arm is decided.

Each look ranks the arms still open against the baseline with `rank`'s own analysis (`verbs.rank_inputs`) on
their first seeds, holding its tests to the level the planned looks allow (fit/sequential.py: q / L, so that the
whole procedure errs at most q). Settled arms (`sequential.settled`) get no more seeds; open arms get the next wave
while seeds and budget last; the baseline runs as long as any arm is open. Each look is appended to
`<sweep>/decide/looks.jsonl` (its first line the settings), so running the same command again replays the looks
made and carries on; an interrupted wave's runs are picked up by the sweep's own resume (new and preempted runs go
again). One process decides a sweep at a time: it holds the lock of `<sweep>/decide/` while it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.errors import ErrorKind, UserError
from ablate.fit.arms import verdict_words
from ablate.fit.sequential import Looks, futile_arm, settled
from ablate.fit.spread import MinEffect
from ablate.storage import fs, store
from ablate.storage.locks import dir_lock

RECORD = "decide"
"""The folder of a --decide sweep's record (looks.jsonl) and lock, under the sweep directory."""
FINAL = ("done", "pruned", "diverged")
"""States a run of a wave may end in: a diverged run is data (`rank` reads what it logged, or skips it)."""


@dataclass(frozen=True)
class DecideSettings:
    """What one `--decide` sweep decides with: the first line of decide/looks.jsonl, checked on resume."""

    looks: Looks
    x: str
    budget: float | None = None
    """Compute (in units of x, summed over runs) the sweep may spend; None: only the seeds limit it."""
    n_boot: int = 1000
    min_effect: MinEffect = field(default_factory=MinEffect)
    baseline: str = ""
    arms: tuple[str, ...] = ()
    """The sweep's arms, baseline included: a record is about these."""

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "arms": list(self.arms),
            "wave": self.looks.wave,
            "max_seeds": self.looks.max_seeds,
            "fdr": self.looks.q,
            "level": self.looks.level,
            "x": self.x,
            "budget": self.budget,
            "n_boot": self.n_boot,
            "min_effect": self.min_effect.to_json(),
        }


@dataclass
class ArmState:
    """An arm's standing after the looks made so far."""

    arm: str
    seeds: int = 0
    verdict: str = "not looked at"
    effect: str = ""
    detail: str = ""
    standing: str = "open"
    """open (gets the next wave), settled (decided), undecidable (cannot be settled by --max-seeds: stopped) or
    too_short (A not measured: the window has not passed C_mid, which seeds cannot change: stopped)."""
    needs: str = ""
    """What `rank` says would decide an undecided arm (seeds per arm), when it says."""

    @property
    def stopped(self) -> bool:
        return self.standing != "open"


@dataclass
class Outcome:
    """Where a `--decide` sweep stands: each arm's state, the looks made, the compute spent, why it stopped."""

    arms: dict[str, ArmState]
    looks_made: int
    spent: float
    stopped: str = ""


def record_path(sdir: Path) -> Path:
    """A sweep's --decide record (whether or not it exists)."""
    return sdir / RECORD / "looks.jsonl"


def read_record(sdir: Path, settings: DecideSettings) -> list[dict[str, Any]]:
    """The looks already made (refusing a record made with other settings, or one damaged or edited), or [] for a
    new decision."""
    path = record_path(sdir)
    if not path.exists():
        return []
    fs.check_no_links(path, sdir)  # the record and the folders to it: a link is refused, never read through
    lines = store.read_jsonl(path)
    aside = f"move {sdir / RECORD} aside to start the looks again (the runs are kept)"
    if not lines or not isinstance(lines[0].get("settings"), dict):
        raise UserError(
            f"{path}: not a --decide record (its first line holds no settings); {aside}", kind=ErrorKind.STATE
        )
    was = lines[0]["settings"]
    now = settings.to_json()
    differ = [k for k in SETTLED_BY if was.get(k) != now[k]]
    if differ:
        said = ", ".join(f"{k} {was.get(k)} (now {now[k]})" for k in differ)
        raise UserError(
            f"{path}: this sweep was decided with {said}; give the same settings to carry on, or {aside}",
            kind=ErrorKind.STATE,
        )
    looks = lines[1:]
    for n, line in enumerate(looks, start=1):
        why = _bad_look(line, n, settings.looks)
        if why:
            raise UserError(
                f"{path}: line {n + 1}: {why}; the record was edited or damaged: {aside}", kind=ErrorKind.STATE
            )
    return looks


SETTLED_BY = ("wave", "max_seeds", "fdr", "x", "n_boot", "min_effect", "baseline", "arms")
"""The settings a record must share with the command that carries it on (--budget may change)."""


def _bad_look(line: Any, n: int, looks: Looks) -> str:
    """What is wrong with the n-th look of a record ("" when nothing is)."""
    if not isinstance(line, dict) or line.get("look") != n:
        return f"expected look {n}"
    if n > len(looks.seeds) or line.get("seeds") != looks.seeds[n - 1]:
        return f"look {n} is not one of the planned looks ({', '.join(map(str, looks.seeds))} seeds an arm)"
    compute, arms = line.get("compute"), line.get("arms")
    if not isinstance(compute, dict) or not all(
        isinstance(v, (int, float)) and math.isfinite(v) for v in compute.values()
    ):
        return "its compute is not a mapping of run ids to numbers"
    fields = ("verdict", "effect", "detail", "needs")
    if not isinstance(arms, dict) or not all(
        isinstance(a, dict) and a.get("standing") in STANDING and all(isinstance(a.get(f), str) for f in fields)
        for a in arms.values()
    ):
        return "its arms are not each a verdict, effect, detail, standing and needs"
    return ""


def _write_look(sdir: Path, settings: DecideSettings, entry: dict[str, Any]) -> None:
    path = record_path(sdir)
    if not path.exists():
        store.append_jsonl(path, {"settings": settings.to_json()})
    store.append_jsonl(path, entry)


def seeds_of(runs: list[Any]) -> dict[str, list[Any]]:
    """The runs of each arm, ordered by seed."""
    out: dict[str, list[Any]] = {}
    for r in sorted(runs, key=lambda r: r.config.seed):
        out.setdefault(r.arm_label, []).append(r)
    return out


def wanted_runs(sweep: Any, open_arms: set[str], seeds: int) -> list[Any]:
    """The runs a look at `seeds` seeds an arm needs: the first `seeds` of each open arm and of the baseline."""
    by_arm = seeds_of(sweep.runs)
    keep = open_arms | {sweep.baseline}
    return [r for arm in sweep.arms if arm in keep for r in by_arm[arm][:seeds]]


@contextlib.contextmanager
def _one_decider(sdir: Path) -> Iterator[None]:
    """Hold the lock of `<sweep>/decide/` (a link there refused): one process decides a sweep at a time."""
    fs.check_no_links(sdir / RECORD, sdir)
    with dir_lock(sdir / RECORD, blocking=False) as lock:
        if not lock.locked:
            raise UserError(
                f"{sdir / RECORD}: another `ablate sweep --decide` is deciding this sweep; wait for it",
                kind=ErrorKind.STATE,
            )
        yield


def decide(
    sweep: Any,
    sdir: Path,
    settings: DecideSettings,
    *,
    launch: Callable[[list[Any]], None],
    wait: Callable[[list[str]], list[Any]],
    look: Callable[[list[str], float], tuple[Any, dict[str, float]]],
    echo: Callable[[str], None],
) -> Outcome:
    """Run the looks of a `--decide` sweep (see the module docstring). `launch(runs)` submits the runs not yet done;
    `wait(run_ids)` returns their statuses once every one has ended; `look(run_ids, level)` ranks those runs: (a
    Ranking, each run's compute on the sweep's axis); `echo` says what happens. Returns where the sweep stands."""
    with _one_decider(sdir):
        looks = settings.looks
        arms = {a: ArmState(a) for a in sweep.arms if a != sweep.baseline}
        made = read_record(sdir, settings)
        used: dict[str, float] = {}  # compute of every run ranked so far
        count = 0
        for k, at in enumerate(looks.seeds):
            open_arms = {a for a, s in arms.items() if not s.stopped}
            if not open_arms:
                break
            runs = wanted_runs(sweep, open_arms, at)
            ids = [r.run_id for r in runs]
            if k < len(made):  # made before: replayed, not ranked again
                _replay(arms, made[k])
                used.update(made[k]["compute"])
                count = k + 1
                continue
            new = [i for i in ids if i not in used]
            spent = sum(used.values())
            cost = len(new) * spent / len(used) if used else None  # new runs at the mean cost of a run so far
            if settings.budget is not None and cost is not None and spent + cost > settings.budget:
                return Outcome(arms, count, spent, f"the next wave ({at} seeds an arm) would pass the budget")
            echo(f"look {k + 1}/{len(looks.seeds)}: {at} seeds an arm, {len(open_arms)} arm(s) open")
            launch(runs)
            _check_ended(wait(ids))
            ranking, compute = look(ids, looks.level)
            used.update(compute)
            entry = _look_entry(k, settings, ranking, open_arms, compute)
            _write_look(sdir, settings, entry)
            _replay(arms, entry)
            count = k + 1
            for a in sorted(open_arms):
                s = arms[a]
                echo(f"  {a}: {verdict_words(s.verdict)} ({SHORT[s.standing]}) {s.effect}".rstrip())
        stopped = "no arm is open" if all(s.stopped for s in arms.values()) else "no seeds left (--max-seeds)"
        return Outcome(arms, count, sum(used.values()), stopped)


def _check_ended(statuses: list[Any]) -> None:
    """A wave is read once each run ended done, pruned or diverged; a run that failed (or was lost) stops here."""
    failed = [s.run_id for s in statuses if str(s.state) not in FINAL]
    if failed:
        raise UserError(
            f"{len(failed)} run(s) of this wave did not finish ({', '.join(failed[:3])}); see `ablate status`, "
            "then run the same command again with --retry-failed",
            kind=ErrorKind.STATE,
        )


def _replay(arms: dict[str, ArmState], entry: dict[str, Any]) -> None:
    for name, got in entry["arms"].items():
        if name in arms:
            arms[name] = ArmState(
                name, entry["seeds"], got["verdict"], got["effect"], got["detail"], got["standing"], got["needs"]
            )


def _look_entry(
    k: int, settings: DecideSettings, ranking: Any, open_arms: set[str], compute: dict[str, float]
) -> dict[str, Any]:
    """A look's line in the record: each open arm's verdict, and whether it stays open."""
    looks, me = settings.looks, settings.min_effect
    at = looks.seeds[k]
    dof = float(ranking.floor.dof) if ranking.floor is not None else float("nan")
    arms = {}
    base = next((a.fit for a in ranking.arms if a.arm == ranking.baseline), None)
    for a in ranking.arms:
        if a.arm not in open_arms:
            continue
        standing = "open"
        if a.verdict and settled(a, me):
            standing = "settled"
        elif a.verdict == "not_identified" and any(f.gain_fraction < 0.5 for f in (a.fit, base) if f is not None):
            standing = "too_short"  # its window, or the baseline's, ends before C_mid: seeds cannot measure A
        elif a.verdict and math.isfinite(dof) and futile_arm(a, me, looks.max_seeds / at, dof, looks.level):
            standing = "undecidable"
        needs = a.decide.text if a.verdict == "inconclusive" and a.decide is not None else ""
        needs = needs.split("; seeds added after this look")[0]  # --decide plans its looks: no second-look caveat
        arms[a.arm] = {
            "verdict": a.verdict or "not_identified",
            "effect": a.effect or "",
            "detail": a.detail or "",
            "standing": standing,
            "needs": needs,
        }
    for name in open_arms - set(arms):  # an arm that could not be fitted at all
        arms[name] = {"verdict": "not_fitted", "effect": "", "detail": "", "standing": "open", "needs": ""}
    return {"look": k + 1, "seeds": at, "level": looks.level, "compute": compute, "arms": arms}


def restricted(sweep: Any, runs: list[Any]) -> Any:
    """The sweep narrowed to `runs` (what one wave launches)."""
    return dataclasses.replace(sweep, runs=list(runs))


def summary(outcome: Outcome, settings: DecideSettings) -> list[str]:
    """The closing lines: each arm's verdict and seeds, the compute spent, and what the open arms would need."""
    lines = [
        f"--decide: {outcome.stopped}; {outcome.looks_made} look(s), {_amount(outcome.spent)} {settings.x} spent"
        + (f" of {_amount(settings.budget)}" if settings.budget else "")
        + (
            " (over the budget: the first wave always runs, and a later one is priced at the mean cost of the runs "
            "before it)"
            if settings.budget and outcome.spent > settings.budget
            else ""
        ),
        f"error control: {settings.looks.describe()}",
    ]
    for s in outcome.arms.values():
        lines.append(
            f"  {s.arm}: {verdict_words(s.verdict)} at {s.seeds} seeds ({STANDING[s.standing]}) {s.effect}".rstrip()
        )
        if s.standing != "settled" and s.needs:
            lines.append(f"    {s.needs}")
    return lines


STANDING = {
    "settled": "settled",
    "undecidable": "stopped: at the difference measured, --max-seeds could not settle it",
    "open": "open: more seeds could settle it",
    "too_short": "stopped: its runs, or the baseline's, end before C_mid, so A is not measured; seeds cannot change "
    "that, longer runs can (a new sweep with a larger train.max_steps, under another --root)",
}


def _amount(v: float) -> str:
    """Compute as said in the summary: whole samples with thousands marked, a small number (GPU-hours) to 3 digits."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


SHORT = {"settled": "settled", "undecidable": "stopped: undecidable", "open": "open", "too_short": "stopped: too short"}
"""A standing in a look's progress line (the closing summary says it whole: STANDING)."""

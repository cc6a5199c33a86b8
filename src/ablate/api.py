"""ablate from Python (a notebook, a script): the verbs' library functions, each returning the record the command
prints. An input is what the commands read: a sweep directory (`sweeps/loss`), a run directory, a CSV or JSONL
table, another tool's log, an MLflow store. Bad input raises `ablate.errors.UserError` with the one line the
command would print. The page that documents these: docs/api.md.

    import ablate
    ranking = ablate.rank("sweeps/loss")
    for arm in ranking.arms:
        print(arm.arm, arm.verdict, arm.delta_A, arm.delta_A_ci)

`ablate.fit_curves` is `ablate fit` (the name `ablate.fit` is the package of the fits themselves).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fit stack imports scipy: `import ablate` stays light, each function imports what it needs
    from ablate.analysis.verbs import Inputs
    from ablate.fit.arms import Ranking
    from ablate.fit.extrapolate import Extrapolation
    from ablate.fit.result import FitResult
    from ablate.launch.status import RunStatus

PathLike = str | Path


def read(
    *inputs: PathLike, x: str = "auto", y: str = "val_pass_rate", run: str = "run", group: str | None = None
) -> Inputs:
    """The curves of `inputs` on the compute axis `x` (`auto`: the one `ablate rank` picks, said in `axis_text`):
    `.curves` (one `Curve` per run), `.skipped` (runs that could not be read, with the reason), `.x`. A curves
    file names its pass-rate column `y`, its run column `run` and, when its runs are seeds of arms, its arm column
    `group` (--y, --run, --group)."""
    from ablate.analysis.verbs import Reading, read_inputs

    return read_inputs(_paths(inputs), Reading(x, y, run, group, "auto", None, None))


def fit_curves(
    *inputs: PathLike,
    x: str = "auto",
    y: str = "val_pass_rate",
    run: str = "run",
    group: str | None = None,
    to: float | None = None,
    by_arm: bool = False,
    fit_from: float | None = None,
    fit_until: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> list[FitResult]:
    """`ablate fit`: the sigmoid fitted to each run (each arm, its seeds pooled, with `by_arm` or a curves file's
    `group` column), with A, B, C_mid, the pass rate predicted at `to` (default: twice the largest compute fitted)
    and their intervals. `y`, `run`, `group`: as `read`."""
    from ablate.analysis.choices import given_to
    from ablate.analysis.verbs import fit_inputs, fit_options

    opts = fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, target=given_to(to), seed=seed)
    got = read(*inputs, x=x, y=y, run=run, group=group)
    return fit_inputs(got, opts, to=to, by_group=by_arm or group is not None, window=False, compare=False).results


def rank(
    *inputs: PathLike,
    baseline: str | None = None,
    x: str = "auto",
    y: str = "val_pass_rate",
    run: str = "run",
    group: str | None = None,
    to: float | None = None,
    fit_from: float | None = None,
    fit_until: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    min_effect: float = 0.02,
    min_effect_compute: float = 1.15,
    noise: PathLike | None = None,
) -> Ranking:
    """`ablate rank`: every arm against the baseline, best first. Each `ArmResult` holds its fit, its `verdict`
    (`ceiling_up`, `efficiency_down`, `equivalent`, `inconclusive`, `not_identified`, ...), the ΔA and compute ratio
    with their intervals, and `decide` (what would decide it); `ranking.notes` what applies to every arm. `y`,
    `run`, `group`: as `read` (a curves file's arm column is `group`; without one, each run is an arm)."""
    from ablate.analysis.choices import given_to
    from ablate.analysis.verbs import check_rank_settings, fit_options, rank_inputs
    from ablate.storage.fs import cpu_count

    opts = fit_options(fit_from=fit_from, fit_until=fit_until, n_boot=n_boot, target=given_to(to), seed=seed)
    settings = check_rank_settings(
        baseline=baseline,
        margin=None,
        shared_a="pair",
        noise=None if noise is None else Path(noise),
        save_noise=None,
        min_effect=min_effect,
        min_effect_compute=min_effect_compute,
        n_boot=n_boot,
        window=False,
    )
    return rank_inputs(read(*inputs, x=x, y=y, run=run, group=group), opts, settings, to=to, jobs=cpu_count())


def extrapolate(
    *inputs: PathLike,
    arm: str | None = None,
    x: str = "auto",
    y: str = "val_pass_rate",
    run: str = "run",
    group: str | None = None,
    to: float | None = None,
    fit_until: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> Extrapolation:
    """`ablate extrapolate`: one arm (default: the winner `rank` puts first) projected to `to`, fitted up to
    `fit_until` and checked on the points after it (`heldout`, `heldout_mae`). `y`, `run`, `group`: as `read`."""
    from ablate.analysis.choices import given_to
    from ablate.analysis.verbs import extrapolate_inputs, fit_options

    opts = fit_options(fit_until=fit_until, n_boot=n_boot, target=given_to(to), seed=seed)
    got = read(*inputs, x=x, y=y, run=run, group=group)
    return extrapolate_inputs(got, opts, arm=arm, to=to, window=False).projection


def status(sweep: PathLike) -> list[RunStatus]:
    """`ablate status`: every run of a sweep directory, its state, step, latest pass rate and compute."""
    from ablate.report.data import sweep_folder
    from ablate.report.runs import run_statuses

    return run_statuses(sweep_folder(Path(sweep)))


def _paths(inputs: Sequence[PathLike]) -> list[Path]:
    if not inputs:
        from ablate.errors import ErrorKind, UserError

        raise UserError("no inputs: give a sweep directory, a run directory or a curves file", kind=ErrorKind.SETTING)
    return [Path(p) for p in inputs]

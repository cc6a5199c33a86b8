"""What `ablate plan` simulates from (`TaskModel`, measured on a sweep or read from a `--calibration` file) and how
it draws a simulated arm's runs from it (`simulate_runs`, `seed_spread`); the questions it asks. fit/planning.py
says what the model holds and how a plan uses it; docs/json.md gives the calibration file's keys."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ablate.fit.curve import Curve
from ablate.fit.sigmoid import B_BOUNDS, sigmoid
from ablate.fit.spread import MAX_DOF, MAX_SD_A, MAX_SD_LOGC

MAX_POINTS = 60
"""Simulated evaluations per run at most (longer runs are evaluated less often: fewer points, never more)."""
MAX_SIM_ARMS = 6
"""Arms a simulated sweep holds at most (the rest enter the false-discovery control as null p-values)."""
QUESTIONS = ("ceiling", "efficiency")
WANTED = {"ceiling": "ceiling_up", "efficiency": "efficiency_up"}
PLAN_BOOT = 100
"""Bootstrap resamples per fit inside the simulations (identification reads the gain fraction's interval)."""
MIN_SCALE, MAX_SCALE = 1e-9, 1e30
"""Bounds on compute in a calibration file (c_mid, eval_every, budget, and a budget made from steps_per_x), in
units of its x. Measured: the simulations fit and decide as usual with a real calibration's compute scaled by
1e-12 up to 1e60, identify nothing from 1e-30 down (every simulated arm `not identified`), and overflow at 1e300;
these bounds keep inside that, and cover every real axis, from a CPU run's GPU-hours (1e-3) to FLOPs (1e24)."""
CALIBRATION_BOUNDS = {
    # field: (lo, hi, kind): "float" in [lo, hi], "above" in (lo, hi], "int" an integer in [lo, hi]
    "r0": (0.0, 1.0, "float"),
    "a": (0.0, 1.0, "above"),
    "b": (B_BOUNDS[0], B_BOUNDS[1], "float"),
    "c_mid": (MIN_SCALE, MAX_SCALE, "float"),
    "eval_every": (MIN_SCALE, MAX_SCALE, "float"),
    "budget": (MIN_SCALE, MAX_SCALE, "float"),
    "val_n": (1.0, 1e9, "float"),  # graded samples per evaluation (a binomial's n: an int64)
    "drift_sd": (0.0, 1.0, "float"),
    "drift_rho": (0.0, 1.0, "float"),  # pass rates: within [0, 1]
    "seed_sd_a": (0.0, MAX_SD_A, "float"),
    "seed_sd_logc": (0.0, MAX_SD_LOGC, "float"),
    "seed_dof": (1, MAX_DOF, "int"),
    "fit_sd_a": (0.0, MAX_SD_A, "float"),
    "fit_sd_logc": (0.0, MAX_SD_LOGC, "float"),
    "arms": (1, 10**6, "int"),
    # conversions between axes: GPU-hours per FLOP is ~1e-19, steps per FLOP smaller still
    "gpu_hours_per_x": (0.0, 1e40, "above"),
    "steps_per_x": (0.0, 1e40, "above"),
}
OPTIONAL_FIELDS = ("val_n", "gpu_hours_per_x", "steps_per_x")
"""Fields a calibration file may leave out or null (unknown)."""


@dataclass
class TaskModel:
    """What a plan simulates from (see the module docstring). Compute is in units of `x`."""

    x: str
    r0: float
    a: float
    b: float
    c_mid: float
    val_n: float | None
    """Graded samples per evaluation (None: unknown; the evaluation noise is then part of the drift)."""
    eval_every: float
    drift_sd: float
    drift_rho: float
    seed_sd_a: float
    seed_sd_logc: float
    seed_dof: int
    fit_sd_a: float
    fit_sd_logc: float
    budget: float
    """Compute one run reaches at its max_steps (or at its end)."""
    arms: int
    gpu_hours_per_x: float | None = None
    steps_per_x: float | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        ev = f"evaluation n={self.val_n:g}" if self.val_n else "evaluation noise inside the drift"
        return (
            f"baseline R0 {self.r0:.3f}, A {self.a:.3f}, B {self.b:.2f}, C_mid {self.c_mid:.4g}; {ev}, drift sd "
            f"{self.drift_sd:.4f} (rho {self.drift_rho:.2f} per evaluation); seed spread sd(A) "
            f"{self.seed_sd_a:.4f}, sd(log compute) {self.seed_sd_logc:.3f} ({self.seed_dof} dof; fit error "
            f"{self.fit_sd_a:.4f} / {self.fit_sd_logc:.3f} of it)"
        )


def simulate_runs(
    m: TaskModel,
    a: float,
    b: float,
    c_mid: float,
    seeds: int,
    compute: float,
    rng: np.random.Generator,
    name: str,
    sd_a: float,
    sd_logc: float,
) -> list[Curve]:
    """`seeds` runs of one arm from the model: a point at compute 0 (R0) and evaluations every `eval_every` up to
    `compute` (at most MAX_POINTS: then further apart, with the drift's autocorrelation scaled to the spacing)."""
    n_pts = int(np.clip(round(compute / m.eval_every), 8, MAX_POINTS))
    x = np.linspace(0.0, compute, n_pts + 1)
    rho = m.drift_rho ** ((compute / n_pts) / m.eval_every)
    a_j = np.clip(a + sd_a * rng.standard_normal(seeds), m.r0 + 0.02, 0.99)
    c_j = c_mid * np.exp(sd_logc * rng.standard_normal(seeds))
    mean = sigmoid(x[None, :], m.r0, a_j[:, None], b, c_j[:, None])  # [seeds, points]
    drift = np.zeros_like(mean)
    innov = rng.standard_normal(mean.shape) * m.drift_sd * math.sqrt(max(1.0 - rho * rho, 0.0))
    for t in range(1, x.size):
        drift[:, t] = rho * drift[:, t - 1] + innov[:, t]
    p = np.clip(mean + drift, 0.0, 1.0)
    if m.val_n:
        n = round(m.val_n)
        y = rng.binomial(n, p) / n
        ns = np.full(x.size, float(n))
    else:
        y, ns = p, None
    return [Curve(run=f"{name}-{j}", group=name, x=x, y=y[j], n=ns) for j in range(seeds)]


def seed_spread(m: TaskModel, rng: np.random.Generator) -> tuple[float, float]:
    """One trial's spread between seeds (sd of A, sd of log C_mid): the measured variances redrawn from their
    sampling distribution (scaled inverse chi-square on seed_dof), less the fit error, floored at zero."""
    k = max(m.seed_dof, 1)
    out = []
    for sd, fit_sd in ((m.seed_sd_a, m.fit_sd_a), (m.seed_sd_logc, m.fit_sd_logc)):
        var = sd * sd * k / max(rng.chisquare(k), 1e-9)
        out.append(math.sqrt(max(var - fit_sd * fit_sd, 0.0)))
    return out[0], out[1]


def effect_of(question: str, delta_a: float, ratio: float) -> dict[str, float]:
    """The effect arm's change to the task model for a question: a ceiling gain on A, or C_mid divided by ratio."""
    if question == "ceiling":
        return {"a": delta_a}
    if question == "efficiency":
        return {"c_mid": 1.0 / ratio}
    raise ValueError(question)


@dataclass(frozen=True)
class Tried:
    """One (compute, seeds) cell a plan simulated: the power its trials reached."""

    seeds: int
    power: float
    trials: int

    def to_json(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "power": self.power, "trials": self.trials}


@dataclass(frozen=True)
class Cheapest:
    """A question's cheapest design: `seeds` per arm at `compute` per run (`multiple` of the budget), its power
    and that power's standard error over the trials."""

    multiple: float
    compute: float
    seeds: int
    power: float
    se: float

    def to_json(self) -> dict[str, Any]:
        return {
            "multiple": self.multiple,
            "compute": self.compute,
            "seeds": self.seeds,
            "power": self.power,
            "se": self.se,
        }


@dataclass(frozen=True)
class Rung:
    """One compute rung of a design: the fewest seeds per arm that reach the goal there (None: none in the ladder,
    or the rung was not simulated, and `why`), with every cell tried."""

    multiple: float
    compute: float
    gain_fraction: float
    seeds: int | None
    power: float | None
    se: float | None
    trials: int
    tried: tuple[Tried, ...]
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "multiple": self.multiple,
            "compute": self.compute,
            "gain_fraction": self.gain_fraction,
            "seeds": self.seeds,
            "power": self.power,
            "se": self.se,
            "trials": self.trials,
            "tried": [t.to_json() for t in self.tried],
        }
        if self.why is not None:
            out["why"] = self.why
        return out


@dataclass(frozen=True)
class Design:
    """What one question needs (`planning.design`): every rung, and the cheapest design that reaches `goal` power
    (None when none in the ladder does). docs/json.md, `ablate plan --json`."""

    question: str
    effect: dict[str, float]
    goal: float
    fdr: float
    engine: str
    rungs: tuple[Rung, ...]
    best: Cheapest | None

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "effect": dict(self.effect),
            "goal": self.goal,
            "fdr": self.fdr,
            "engine": self.engine,
            "rungs": [r.to_json() for r in self.rungs],
            "best": None if self.best is None else self.best.to_json(),
        }

"""The run-config schema: one frozen dataclass per design choice, and the one `validate()` that runs before anything.

`validate(data)` takes a resolved config (what Hydra composes from a recipe, or a run directory's config.yaml) and
returns a `RunConfig`, the typed run that every later layer reads by attribute; it collects *every* problem, one line
each, into `ConfigErrors` (field checks: ablate.config.validation; rules across keys: ablate.config.combinations). The
sections that are not design choices (model, task, rollout, optim, train, trainer, launcher, resources, setup, track):
ablate.config.sections.

Defaults live here and only here (recipes state what differs). A section's `name` is at once its recipe option file
(`recipes/<group>/<name>.yaml`), the schema value and the trainer's registry key; an option's parameters default to
null and its file sets them. Field metadata: the rules (`choices`, `ge`/`gt`/`le`/`lt`), `hash=False` (not in a run's
id, see ablate.config.identity) or `hash="unless_default"` (hashed only when it differs from what older runs had).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from ablate.config.combinations import check_combinations
from ablate.config.sections import (
    SEED_MAX,
    TRACKERS,
    LauncherConfig,
    ModelConfig,
    OptimConfig,
    ResourcesConfig,
    RolloutConfig,
    SetupConfig,
    TaskConfig,
    TrackConfig,
    TrainConfig,
    TrainerConfig,
)
from ablate.config.validation import check_config, closest, type_hints
from ablate.config.validation import schema_field as _f  # short: every field of the schema is declared with it
from ablate.errors import ErrorKind, UserError

# ---- one section per design choice (ScaleRL, arXiv 2510.13786 §3) ----


@dataclass(frozen=True)
class LossConfig:
    """The policy loss. Only the clip parameters of the chosen loss are set (the others stay null)."""

    name: str = _f(
        "cispo", "policy loss = registry key in ablate.train.losses", choices=("grpo", "dapo", "gspo", "cispo")
    )
    eps: float | None = _f(None, "grpo: symmetric PPO clip, ratio kept in [1-eps, 1+eps]", gt=0.0, lt=1.0)
    eps_low: float | None = _f(None, "dapo/gspo: lower clip, ratio >= 1-eps_low", gt=0.0, lt=1.0)
    eps_high: float | None = _f(None, "dapo/gspo: upper clip, ratio <= 1+eps_high", gt=0.0)
    eps_max: float | None = _f(None, "cispo: absolute cap on the IS weight (floor 0); ScaleRL uses 5", gt=0.0)


@dataclass(frozen=True)
class AggregationConfig:
    """How per-token losses are averaged into the step loss (ScaleRL §3: prompt-level averaging)."""

    name: str = _f("prompt", "sample | prompt | token", choices=("sample", "prompt", "token"))


@dataclass(frozen=True)
class NormalizationConfig:
    """How centred advantages r - mean(group) are scaled (ScaleRL §3: batch-level)."""

    name: str = _f(
        "batch", "prompt (group std) | batch (std over the batch) | none", choices=("prompt", "batch", "none")
    )


@dataclass(frozen=True)
class PrecisionConfig:
    """Numerics of the LM head (ScaleRL §3 / MiniMax-M1: FP32 logits fix the trainer-generator mismatch)."""

    name: str = _f("fp32_head", "bf16 | fp32_head", choices=("bf16", "fp32_head"))


@dataclass(frozen=True)
class FilteringConfig:
    """Data filters (ScaleRL §3: zero-variance filtering and no-positive-resampling)."""

    zero_variance: bool = _f(True, "drop prompt groups whose rewards are all equal from the loss and its denominator")
    zero_variance_tol: float = _f(
        1e-6, "a group whose highest and lowest rewards are at most this far apart counts as zero variance", ge=0.0
    )
    no_positive_resampling: bool = _f(True, "remove a prompt for good once its historical pass rate >= pass_threshold")
    pass_threshold: float = _f(
        0.9, "pass rate at which no-positive-resampling retires a prompt (ScaleRL: 0.9)", gt=0.0, le=1.0
    )


@dataclass(frozen=True)
class LengthConfig:
    """Length control: forced interruption (ScaleRL), DAPO's overlong penalty, or none."""

    name: str = _f("interrupt", "none | interrupt | penalty", choices=("none", "interrupt", "penalty"))
    max_new_tokens: int = _f(8, "hard cap on generated tokens per completion (L_max of generation)", ge=1)
    think_budget_min: int | None = _f(None, "interrupt: thinking budget drawn uniformly in [min, max]", ge=1)
    think_budget_max: int | None = _f(None, "interrupt: upper end of the budget window (< max_new_tokens)", ge=1)
    phrase: str | None = _f(
        None, "interrupt: end-of-thinking text appended at the budget; null = the task's own marker"
    )
    l_max: int | None = _f(None, "penalty: length at which the penalty reaches -1 (DAPO's L_max)", ge=1)
    l_cache: int | None = _f(None, "penalty: width of the soft zone below l_max (DAPO's L_cache)", ge=1)


@dataclass(frozen=True)
class OffPolicyConfig:
    """Off-policy scheme (ScaleRL §3: PipelineRL-8 beats PPO-off-policy-k)."""

    name: str = _f(
        "pipeline",
        "ppo (k mini-batches per generation round) | pipeline (trainer <= k steps ahead)",
        choices=("ppo", "pipeline"),
    )
    k: int = _f(8, "ppo: optimizer steps per generation round; pipeline: max steps the trainer runs ahead", ge=1)
    generator: str = _f(
        "auto",
        "pipeline: where generation runs: thread (concurrent with training) | inline (in "
        "turn with training, at the bound: lag = k) | auto (inline for the torch sampler on a CPU, "
        "else thread)",
        choices=("auto", "thread", "inline"),
        hash=False,
    )


@dataclass(frozen=True)
class BatchConfig:
    """Prompts x generations per optimizer step. ScaleRL §2: 48 prompts x 16 generations (768 completions) on GPU;
    the CPU default is smaller: 32 x 8 (16 prompts learn no faster per sample and are twice as noisy)."""

    prompts: int = _f(32, "prompts per optimizer step", ge=1)
    generations: int = _f(8, "completions per prompt (group size; group advantages need >= 2)", ge=2)


@dataclass(frozen=True)
class RunConfig:
    """One fully resolved run: what `validate` returns and every later layer reads."""

    seed: int = _f(0, "RNG seed of the run (its own sweep axis)", ge=0, le=SEED_MAX)
    loss: LossConfig = _f(factory=LossConfig)
    aggregation: AggregationConfig = _f(factory=AggregationConfig)
    normalization: NormalizationConfig = _f(factory=NormalizationConfig)
    precision: PrecisionConfig = _f(factory=PrecisionConfig)
    filtering: FilteringConfig = _f(factory=FilteringConfig)
    length: LengthConfig = _f(factory=LengthConfig)
    offpolicy: OffPolicyConfig = _f(factory=OffPolicyConfig)
    batch: BatchConfig = _f(factory=BatchConfig)
    model: ModelConfig = _f(factory=ModelConfig)
    task: TaskConfig = _f(factory=TaskConfig)
    rollout: RolloutConfig = _f(factory=RolloutConfig)
    optim: OptimConfig = _f(factory=OptimConfig)
    train: TrainConfig = _f(factory=TrainConfig)
    trainer: TrainerConfig = _f(factory=TrainerConfig)
    launcher: LauncherConfig = _f(factory=LauncherConfig, hash=False)
    resources: ResourcesConfig = _f(factory=ResourcesConfig, hash=False)
    setup: SetupConfig = _f(factory=SetupConfig, hash=False)
    track: TrackConfig = _f(factory=TrackConfig, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain containers (dicts, lists, scalars): what config.yaml holds and ids hash."""
        return plain(dataclasses.asdict(self))

    def replace(self, **sections: Any) -> RunConfig:
        """A copy with some fields changed, validated like any other config: `cfg.replace(seed=3)`, dotted keys as
        `cfg.replace(**{"train.max_steps": 5})`."""
        data = self.to_dict()
        for dotted, value in sections.items():
            *parents, last = dotted.split(".")
            node = data
            for p in parents:
                node = node[p]
            node[last] = value
        return validate(data)


def plain(x: Any) -> Any:
    """Dataclass values as plain containers: tuples become lists (what YAML, JSON and the ids hold)."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


class ConfigErrors(UserError):
    """All problems of a config (or of every run of a sweep), one line each in `errors`."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        # one problem a line; the CLI prints each as its own `error[recipe]:` line (cli/errors.fail)
        super().__init__("\n".join(self.errors), kind=ErrorKind.RECIPE)


# ---- schema introspection ----


def sections() -> dict[str, type]:
    """Top-level section name -> dataclass (the config groups and plain sections of a recipe)."""
    hints = type_hints(RunConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(hints[f.name])}


def choices(section: str) -> tuple[str, ...]:
    """The valid `name` values of a design-choice section (= its recipe option files = registry keys)."""
    cls = sections()[section]
    for f in dataclasses.fields(cls):
        if f.name == "name":
            return tuple(f.metadata.get("choices", ()))
    return ()


def _walk(cls: type = RunConfig, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """(dotted key, field) of every field of the schema, depth first: a section, then its fields."""
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        yield prefix + f.name, f
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _walk(hints[f.name], prefix + f.name + ".")


def all_keys() -> list[str]:
    """Every dotted key of the schema, e.g. `loss.eps_max`, `train.warmup.lr` (for did-you-mean suggestions)."""
    return [key for key, _ in _walk()]


RETIRED_UNHASHED = ("train.tensorboard",)
"""Resource-only keys the schema no longer has, which run directories made before still hold in config.yaml: left
out of ids too, so those runs keep theirs (`upgrade` reads them into their new place)."""


@functools.cache  # the schema is fixed; get_type_hints is slow and ids are hashed per run
def unhashed_keys() -> tuple[str, ...]:
    """Dotted keys marked `hash=False`: launcher and resource-only fields, left out of run and arm ids (a section's
    key stands for everything below it), and the retired ones (RETIRED_UNHASHED)."""
    out: list[str] = []
    for key, f in _walk():
        if f.metadata.get("hash", True) is False and not any(key.startswith(k + ".") for k in out):
            out.append(key)
    return (*out, *RETIRED_UNHASHED)


@functools.cache
def hashed_unless_default() -> tuple[tuple[str, Any], ...]:
    """(dotted key, default) of fields marked `hash="unless_default"`: left out of ids while at their default."""
    return tuple((key, f.default) for key, f in _walk() if f.metadata.get("hash") == "unless_default")


# ---- validation (field checks: ablate.config.validation; rules across keys: ablate.config.combinations) ----


def validate(data: Any) -> RunConfig:
    """`data` (plain containers or an OmegaConf config) checked against the schema, as a `RunConfig` completed with
    the defaults. Raises ConfigErrors listing every problem (unknown keys, wrong types, out-of-range values,
    impossible combinations), one line each, each naming the key(s) and the fix."""
    if isinstance(data, RunConfig):
        return data
    cfg, errors = check_config(RunConfig, upgrade(data), _check_rules)
    if errors:
        raise ConfigErrors(errors)
    return cfg


def _check_rules(checked: dict[str, Any]) -> list[str]:
    """The rules across keys (ablate.config.combinations), and the trackers' names (a list's items have no
    `choices`)."""
    bad = [t for t in checked.get("track", {}).get("to", ()) if t not in TRACKERS]
    unknown = [
        f"track.to: {t!r} is not a tracker{closest(str(t), TRACKERS)}; trackers: {', '.join(TRACKERS)}" for t in bad
    ]
    return [*check_combinations(checked), *unknown]


def upgrade(data: Any) -> Any:
    """A config as the schema reads it now: `train.tensorboard: true` (config.yaml of a run made before trackers,
    or a queued run's config) is `tensorboard` in `track.to`; `false` is dropped. Anything else is left for
    validation to judge."""
    if OmegaConf.is_config(data):
        data = OmegaConf.to_container(data, resolve=True)
    train = data.get("train") if isinstance(data, dict) else None
    if not isinstance(train, dict) or not isinstance(train.get("tensorboard"), bool):
        return data
    data = {**data, "train": {k: v for k, v in train.items() if k != "tensorboard"}}
    if train["tensorboard"]:
        track = data.get("track") if isinstance(data.get("track"), dict) else {}
        to = list(track.get("to") or [])
        data["track"] = {**track, "to": [*to, *([] if "tensorboard" in to else ["tensorboard"])]}
    return data

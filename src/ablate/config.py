"""The run-config schema: one frozen dataclass per design choice, and the one `validate()` that runs before anything does.

`validate(data)` (its checks: ablate.validation) takes a resolved config (what Hydra composes from a recipe, or a run directory's config.yaml) and
returns a `RunConfig`, the typed run that every later layer (launch, train) reads by attribute. It collects *every*
problem (unknown key with the closest valid name, wrong type, value out of range, impossible combination naming both
keys and the fix) as one line each and raises `ConfigErrors` (a `UserError`) with all of them.

Defaults live here and only here: recipes/base.yaml states only what differs from them (its group choices), and no
trainer or launcher code holds a default of its own. Each design-choice section has a `name` whose value is at
once the recipe option file (`recipes/<group>/<name>.yaml`), the schema value and the trainer's registry key. The
parameters of one option (`loss.eps_max` for cispo, ...) default to null here and are set by that option's file.

Field metadata carries the validation rules (`choices`, `ge`/`gt`/`le`/`lt`) and `hash=False` for resource-only
fields that must not change a run's id (ablate.identity), or `hash="unless_default"` for a choice added after runs
existed, hashed only when it differs from the behaviour those runs had (so their ids stay); `validate` reads them,
so a field added here is checked and hashed without touching the code below.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from ablate.errors import UserError

SEED_MAX = 2**32 - 1  # torch generators take 64-bit seeds; the trainer derives per-step seeds from the run seed
INT_MAX = 2**62  # any integer field: far beyond any sane value, within every library's int64


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """typing.get_type_hints, cached: the schema is fixed and every validation walks it."""
    return typing.get_type_hints(cls)


def _f(default: Any = None, doc: str = "", *, factory: Any = None, **rules: Any) -> Any:
    """A dataclass field whose metadata holds its doc line and validation rules (choices, ge, gt, le, lt, hash)."""
    meta = {"doc": doc, **rules}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# ---- one section per design choice (ScaleRL, arXiv 2510.13786 §3) ----


@dataclass(frozen=True)
class LossConfig:
    """The policy loss. Only the clip parameters of the chosen loss are set (the others stay null)."""

    name: str = _f("cispo", "policy loss = registry key in ablate.train.losses", choices=("grpo", "dapo", "gspo", "cispo"))
    eps: Optional[float] = _f(None, "grpo: symmetric PPO clip, ratio kept in [1-eps, 1+eps]", gt=0.0, lt=1.0)
    eps_low: Optional[float] = _f(None, "dapo/gspo: lower clip, ratio >= 1-eps_low", gt=0.0, lt=1.0)
    eps_high: Optional[float] = _f(None, "dapo/gspo: upper clip, ratio <= 1+eps_high", gt=0.0)
    eps_max: Optional[float] = _f(None, "cispo: absolute cap on the IS weight (floor 0); ScaleRL uses 5", gt=0.0)


@dataclass(frozen=True)
class AggregationConfig:
    """How per-token losses are averaged into the step loss (ScaleRL §3: prompt-level averaging)."""

    name: str = _f("prompt", "sample | prompt | token", choices=("sample", "prompt", "token"))


@dataclass(frozen=True)
class NormalizationConfig:
    """How centred advantages r - mean(group) are scaled (ScaleRL §3: batch-level)."""

    name: str = _f("batch", "prompt (group std) | batch (std over the batch) | none", choices=("prompt", "batch", "none"))


@dataclass(frozen=True)
class PrecisionConfig:
    """Numerics of the LM head (ScaleRL §3 / MiniMax-M1: FP32 logits fix the trainer-generator mismatch)."""

    name: str = _f("fp32_head", "bf16 | fp32_head", choices=("bf16", "fp32_head"))


@dataclass(frozen=True)
class FilteringConfig:
    """Data filters (ScaleRL §3: zero-variance filtering and no-positive-resampling)."""

    zero_variance: bool = _f(True, "drop prompt groups whose rewards are all equal from the loss and its denominator")
    zero_variance_tol: float = _f(1e-6, "a group whose highest and lowest rewards are at most this far apart counts as zero variance", ge=0.0)
    no_positive_resampling: bool = _f(True, "remove a prompt for good once its historical pass rate >= pass_threshold")
    pass_threshold: float = _f(0.9, "pass rate at which no-positive-resampling retires a prompt (ScaleRL: 0.9)", gt=0.0, le=1.0)


@dataclass(frozen=True)
class LengthConfig:
    """Length control: forced interruption (ScaleRL), DAPO's overlong penalty, or none."""

    name: str = _f("interrupt", "none | interrupt | penalty", choices=("none", "interrupt", "penalty"))
    max_new_tokens: int = _f(8, "hard cap on generated tokens per completion (L_max of generation)", ge=1)
    think_budget_min: Optional[int] = _f(None, "interrupt: thinking budget drawn uniformly in [min, max]", ge=1)
    think_budget_max: Optional[int] = _f(None, "interrupt: upper end of the budget window (< max_new_tokens)", ge=1)
    phrase: Optional[str] = _f(None, "interrupt: end-of-thinking text appended at the budget; null = the task's own marker")
    l_max: Optional[int] = _f(None, "penalty: length at which the penalty reaches -1 (DAPO's L_max)", ge=1)
    l_cache: Optional[int] = _f(None, "penalty: width of the soft zone below l_max (DAPO's L_cache)", ge=1)


@dataclass(frozen=True)
class OffPolicyConfig:
    """Off-policy scheme (ScaleRL §3: PipelineRL-8 beats PPO-off-policy-k)."""

    name: str = _f("pipeline", "ppo (k mini-batches per generation round) | pipeline (trainer <= k steps ahead)", choices=("ppo", "pipeline"))
    k: int = _f(8, "ppo: optimizer steps per generation round; pipeline: max steps the trainer runs ahead", ge=1)
    generator: str = _f("auto", "pipeline: where generation runs: thread (concurrent with training) | inline (in turn with "
                        "training, at the bound: lag = k) | auto (inline for the torch sampler on a CPU, else thread)",
                        choices=("auto", "thread", "inline"), hash=False)


@dataclass(frozen=True)
class BatchConfig:
    """Prompts x generations per optimizer step. ScaleRL §2: 48 prompts x 16 generations (768 completions) on GPU;
    the CPU default is smaller: 32 x 8 (16 prompts learn no faster per sample and are twice as noisy)."""

    prompts: int = _f(32, "prompts per optimizer step", ge=1)
    generations: int = _f(8, "completions per prompt (group size; group advantages need >= 2)", ge=2)


@dataclass(frozen=True)
class ModelConfig:
    """The policy. `tiny` is built locally on CPU; `hf` loads a Hugging Face causal LM from a local folder."""

    name: str = _f("tiny", "tiny | hf", choices=("tiny", "hf"))
    path: Optional[str] = _f(None, "hf: local Hugging Face model folder (no hub downloads)")
    n_layers: Optional[int] = _f(None, "tiny: transformer layers", ge=1)
    hidden: Optional[int] = _f(None, "tiny: hidden size", ge=1)
    n_heads: Optional[int] = _f(None, "tiny: attention heads", ge=1)
    mlp: Optional[int] = _f(None, "tiny: MLP width", ge=1)


@dataclass(frozen=True)
class TaskConfig:
    """The verifiable task. `synthetic_math` is generated locally; `jsonl` reads a math set from a file."""

    name: str = _f("synthetic_math", "synthetic_math | jsonl", choices=("synthetic_math", "jsonl"))
    path: Optional[str] = _f(None, "jsonl: path of the JSONL file (one problem per line)")
    reward: str = _f("binary", "binary (1/0) | signed (+1/-1)", choices=("binary", "signed"))
    digits: Optional[int] = _f(None, "synthetic_math: digits per operand", ge=1)
    digits_min: Optional[int] = _f(None, "synthetic_math: shortest operand (null = digits); shorter ones are zero-padded: mixed difficulty", ge=1)
    train_size: Optional[int] = _f(None, "synthetic_math: training problems (null = 20000); the pool no-positive-resampling draws from", ge=1)
    unseen_frac: float = _f(0.0, "synthetic_math: share of subtraction problems, which the warm-up never teaches: out of the "
                             "policy's reach, they cap the pass rate below 1", ge=0.0, lt=1.0)
    data_seed: int = _f(1234, "seed of the task's data split (not the run's seed: every run of a sweep sees the same splits)",
                        ge=0, le=SEED_MAX)
    val_path: Optional[str] = _f(None, "jsonl: a separate validation file (null = the first train.val_size rows after a fixed shuffle)")


@dataclass(frozen=True)
class RolloutConfig:
    """The generation backend: torch on CPU, vLLM on GPU."""

    name: str = _f("torch", "torch | vllm", choices=("torch", "vllm"))
    temperature: float = _f(1.0, "sampling temperature for training rollouts and evaluation", gt=0.0)
    # vLLM engine settings (rollout=vllm only; train/rollout_vllm.py). The LM head always follows `precision`.
    dtype: str = _f("auto", "vllm: engine body dtype (auto = the policy's, float32 here; bfloat16 on GPUs)",
                    choices=("auto", "float32", "bfloat16", "float16"))
    kv_cache_mb: int = _f(256, "vllm: KV-cache cap in MiB (uncapped vLLM takes ~90% of memory)", ge=1, hash=False)
    gpu_memory_utilization: float = _f(0.3, "vllm on GPU: share of GPU memory the engine may take", gt=0.0, le=1.0, hash=False)
    enforce_eager: bool = _f(True, "vllm: no CUDA graphs/compilation (fast start); false for long GPU runs", hash=False)
    max_model_len: Optional[int] = _f(None, "vllm: prompt + completion cap (null = the model's max positions)", ge=1, hash=False)


@dataclass(frozen=True)
class OptimConfig:
    """AdamW. The CPU default's learning rate: 1e-4 rises and levels off on the embedded task under PipelineRL-8;
    2e-4 swings under the 8-step staleness, and on-policy 5e-4 collapses within a few dozen steps."""

    lr: float = _f(1e-4, "learning rate", gt=0.0)
    betas: Tuple[float, ...] = _f((0.9, 0.99), "AdamW betas (two values in [0, 1))")
    weight_decay: float = _f(0.0, "AdamW weight decay", ge=0.0)
    eps: Optional[float] = _f(None, "AdamW epsilon (null = PyTorch's 1e-8; the paper: 1e-15)", gt=0.0)
    grad_clip: float = _f(1.0, "max gradient norm", gt=0.0)
    lr_warmup_steps: int = _f(100, "linear learning-rate warm-up over the first RL steps (Adam's first, bias-corrected "
                              "steps are full-size)", ge=0)
    micro_batch: Optional[int] = _f(None, "completions per backward pass (null = whole step); never changes the gradient",
                                    ge=1, hash=False)


@dataclass(frozen=True)
class WarmupConfig:
    """Supervised warm-up of the tiny model so that R0 is well above 0 before RL starts, as a real run starts from an
    SFT model. The pass rate jumps sharply during warm-up, so it is checked often or R0 overshoots."""

    max_steps: int = _f(2000, "upper bound on warm-up steps", ge=0)
    lr: float = _f(1e-3, "warm-up learning rate", gt=0.0)
    batch: int = _f(64, "warm-up batch size", ge=1)
    target_pass_rate: float = _f(0.55, "stop once the pass rate on the problems the warm-up teaches reaches this (R0 on "
                                 "the mixed validation split is lower when task.unseen_frac > 0)", ge=0.0, le=1.0)
    check_every: int = _f(25, "check the stop criterion every this many steps", ge=1)


@dataclass(frozen=True)
class TrainConfig:
    """The RL loop's length and evaluation cadence. ScaleRL runs to 16k GPU-hours (§2); the CPU default is 1,000
    steps, a few minutes on one core, and compute is counted in device-hours there too."""

    max_steps: int = _f(1000, "optimizer steps of RL", ge=1)
    eval_every: int = _f(20, "evaluate (and append a metrics line) every this many steps", ge=1)
    eval_k: int = _f(4, "completions per validation prompt (mean@k)", ge=1)
    val_size: int = _f(200, "held-out validation prompts", ge=1)
    checkpoint_every: int = _f(100, "save a checkpoint every this many steps", ge=1)
    device: str = _f("auto", "where the policy trains and the torch sampler runs: cpu | cuda | auto (cuda when visible)",
                     choices=("auto", "cpu", "cuda"), hash=False)
    sharding: str = _f("ddp", "how data-parallel ranks hold the policy (resources.nproc x nodes > 1): ddp = a whole "
                       "copy on every rank, gradients all-reduced; fsdp = parameters, gradients and optimizer state "
                       "sharded (FSDP2), whole weights kept only for generation", choices=("ddp", "fsdp"), hash=False)
    tensorboard: bool = _f(False, "also write every metrics line to TensorBoard event files in the run's tb/ "
                           "(`ablate train|sweep --tensorboard`)", hash=False)
    warmup: WarmupConfig = _f(doc="supervised warm-up", factory=WarmupConfig)


@dataclass(frozen=True)
class TrainerConfig:
    """Which trainer runs the recipe: ablate's own, or Hugging Face TRL's `GRPOTrainer` with the recipe mapped onto
    its `GRPOConfig` (train/trl_backend.py; what each supports: docs/trainers.md, `ablate show --trainers`)."""

    name: str = _f("ablate", "ablate (the built-in trainer) | trl (TRL's GRPOTrainer; pip install '.[trl]')",
                   choices=("ablate", "trl"), hash="unless_default")
    vllm_mode: str = _f("colocate", "trl with rollout=vllm: colocate (an engine inside the trainer process) | server "
                        "(a separate `trl vllm-serve` process)", choices=("colocate", "server"), hash=False)
    vllm_server_url: Optional[str] = _f(None, "trl, vllm_mode=server: the server's base URL (null = TRL's default, "
                                        "http://localhost:8000)", hash=False)


@dataclass(frozen=True)
class LauncherConfig:
    """Where runs execute. Excluded from run ids: the same run on another executor is the same run."""

    name: str = _f("local", "local | slurm | debug | auto (slurm when a SLURM controller answers)",
                   choices=("local", "slurm", "debug", "auto"))
    max_parallel: Optional[int] = _f(None, "runs at once (null = as many as the cores hold, `threads` each)", ge=1)
    threads: int = _f(1, "torch threads per run", ge=1, le=1024)
    timeout_min: float = _f(60.0, "wall-clock limit per job in minutes (SLURM rounds up to whole minutes); the job is "
                            "signalled before it, checkpoints and is requeued", gt=0.0, le=525600.0)
    max_requeues: int = _f(3, "requeues after preemption/timeout before a run counts as preempted", ge=0, le=1000)
    signal_delay_s: Optional[int] = _f(None, "local: seconds before the time limit that the checkpoint signal (USR2) "
                                       "arrives (null = a tenth of the limit, at most 30 s); SLURM takes the profile's",
                                       ge=1)


@dataclass(frozen=True)
class ResourcesConfig:
    """What one run holds: data-parallel trainer processes over torch.distributed. Excluded from run ids: the same
    recipe on 1 or 8 ranks is the same run (the step's gradient is the same; see docs/distributed.md)."""

    nproc: int = _f(1, "trainer processes (ranks) per node; each generates and trains on its share of the step's "
                    "prompt groups", ge=1, le=1024)
    nodes: int = _f(1, "nodes per run (more than 1 needs -e slurm)", ge=1, le=4096)
    collective_timeout_s: float = _f(1800.0, "how long a rank waits for the others in a collective before the run "
                                     "fails (a crashed rank is noticed at once; this bounds a hung one)",
                                     gt=0.0, le=86400.0)

    @property
    def world(self) -> int:
        """Ranks in all: nproc x nodes."""
        return self.nproc * self.nodes


@dataclass(frozen=True)
class SetupConfig:
    """Sizes that depend on the scale a recipe runs at. The length options and the sweep files read them by
    interpolation (`${setup.l_max}`), so an arm that switches its length option or batch keeps the scale it runs
    at; preset=scalerl_8b sets the paper's. Resource-only for ids: what they set is hashed where it lands."""

    think_budget_min: int = _f(5, "length=interrupt's thinking budget window, low end (the paper: 10,240)", ge=1)
    think_budget_max: int = _f(6, "length=interrupt's thinking budget window, high end (the paper: 12,288)", ge=1)
    l_max: int = _f(8, "length=penalty's L_max (the paper: 14,336)", ge=1)
    l_cache: int = _f(3, "length=penalty's L_cache (the paper: 2,048)", ge=1)
    large_batch_prompts: int = _f(53, "prompts of the 1,280-completion batch the paper gives Qwen2.5 and MiniMax-M1 "
                                      "(5/3 of ScaleRL's): 53 = 5/3 of the CPU base's 32; the paper: 80", ge=1)


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

    def to_dict(self) -> dict[str, Any]:
        """Plain containers (dicts, lists, scalars): what config.yaml holds and ids hash."""
        return _plain(dataclasses.asdict(self))

    def replace(self, **sections: Any) -> "RunConfig":
        """A copy with some fields changed, e.g. `cfg.replace(seed=3)`; dotted keys as `cfg.replace(**{"train.max_steps": 5})`.
        The result is validated like any other config."""
        data = self.to_dict()
        for dotted, value in sections.items():
            *parents, last = dotted.split(".")
            node = data
            for p in parents:
                node = node[p]
            node[last] = value
        return validate(data)


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


# Which clip/length parameters belong to which option: a parameter of another option must stay null, and the
# option's own ones must be set (PipelineRL-style: name the key and the option, never ignore it silently).
OPTION_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "loss": {"grpo": ("eps",), "dapo": ("eps_low", "eps_high"), "gspo": ("eps_low", "eps_high"), "cispo": ("eps_max",)},
    "length": {"none": (), "interrupt": ("think_budget_min", "think_budget_max"), "penalty": ("l_max", "l_cache")},
}
OPTIONAL_OPTION_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {"length": {"interrupt": ("phrase",)}}


class ConfigErrors(UserError):
    """All problems of a config (or of every run of a sweep), one line each in `errors`."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        # The CLI prints `error: <message>`; prefixing the other lines keeps the output one error per line.
        super().__init__("\nerror: ".join(self.errors))


# ---- schema introspection ----


def sections() -> dict[str, type]:
    """Top-level section name -> dataclass (the config groups and plain sections of a recipe)."""
    hints = _hints(RunConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(hints[f.name])}


def choices(section: str) -> tuple[str, ...]:
    """The valid `name` values of a design-choice section (= its recipe option files = registry keys)."""
    cls = sections()[section]
    for f in dataclasses.fields(cls):
        if f.name == "name":
            return tuple(f.metadata.get("choices", ()))
    return ()


def all_keys(cls: type = RunConfig, prefix: str = "") -> list[str]:
    """Every dotted key of the schema, e.g. `loss.eps_max`, `train.warmup.lr` (for did-you-mean suggestions)."""
    out: list[str] = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        out.append(key)
        if dataclasses.is_dataclass(hints[f.name]):
            out.extend(all_keys(hints[f.name], key + "."))
    return out


@functools.lru_cache(maxsize=None)  # the schema is fixed; get_type_hints is slow and ids are hashed per run
def unhashed_keys(cls: type = RunConfig, prefix: str = "") -> tuple[str, ...]:
    """Dotted keys marked `hash=False`: launcher and resource-only fields, left out of run and arm ids."""
    out: list[str] = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if f.metadata.get("hash", True) is False:
            out.append(key)
        elif dataclasses.is_dataclass(hints[f.name]):
            out.extend(unhashed_keys(hints[f.name], key + "."))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def hashed_unless_default(cls: type = RunConfig, prefix: str = "") -> tuple[tuple[str, Any], ...]:
    """(dotted key, default) of fields marked `hash="unless_default"`: left out of ids while at their default."""
    out: list[tuple[str, Any]] = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if f.metadata.get("hash") == "unless_default":
            out.append((key, f.default))
        elif dataclasses.is_dataclass(hints[f.name]):
            out.extend(hashed_unless_default(hints[f.name], key + "."))
    return tuple(out)


def closest(name: str, candidates: list[str] | tuple[str, ...]) -> str:
    """` (did you mean 'x'?)` for the closest candidate, or '' when none is close."""
    hit = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {hit[0]!r}?)" if hit else ""


# ---- validation (the checks live in ablate.validation) ----


def validate(data: Any) -> RunConfig:
    """Check a resolved config against the schema and return it as a `RunConfig`, completed with the defaults.

    `data`: plain containers or an OmegaConf config. Raises ConfigErrors listing every problem (unknown keys,
    wrong types, out-of-range values, impossible combinations), one line each, each naming the key(s) and the fix.
    """
    from ablate.validation import validate_config

    return validate_config(data)


def defaults_tree(cls: type = RunConfig) -> dict[str, Any]:
    """The schema's non-null defaults as nested plain containers. Hydra composes recipes on top of this tree, so
    a recipe states only what differs from the schema and every schema key can be overridden. In a config group
    (a section with a `name` choice), null defaults are the options' parameters and are left out: only the option's
    own file brings them, so `loss.eps_max=4` with loss=dapo is a "not a parameter of loss=dapo" error, not a
    silently ignored value. Elsewhere (optim, train, ...) a null default is an ordinary optional value."""
    hints = _hints(cls)
    group = any(f.name == "name" for f in dataclasses.fields(cls))
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out[f.name] = defaults_tree(hints[f.name])
            continue
        value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if value is not None or not group:
            out[f.name] = _plain(value)
    return out

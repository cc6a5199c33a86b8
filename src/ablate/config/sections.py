"""The run config's sections that are not ScaleRL design choices: the model, the task, the rollout backend, the
optimizer, the RL loop and its warm-up, the trainer, the launcher, the resources, the scale (`setup`) and the
trackers (`track`). Each field
documents itself; the design choices and `RunConfig` are in ablate.config.schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.config.validation import schema_field as _f  # short: every field of the schema is declared with it

SEED_MAX = 2**32 - 1  # torch generators take 64-bit seeds; the trainer derives per-step seeds from the run seed


@dataclass(frozen=True)
class ModelConfig:
    """The policy. `tiny` is built locally on CPU; `hf` loads a Hugging Face causal LM from a local folder."""

    name: str = _f("tiny", "tiny | hf", choices=("tiny", "hf"))
    path: str | None = _f(None, "hf: local Hugging Face model folder (no hub downloads)")
    n_layers: int | None = _f(None, "tiny: transformer layers", ge=1)
    hidden: int | None = _f(None, "tiny: hidden size", ge=1)
    n_heads: int | None = _f(None, "tiny: attention heads", ge=1)
    mlp: int | None = _f(None, "tiny: MLP width", ge=1)


@dataclass(frozen=True)
class TaskConfig:
    """The verifiable task. `synthetic_math` is generated locally; `jsonl` reads a math set from a file."""

    name: str = _f("synthetic_math", "synthetic_math | jsonl", choices=("synthetic_math", "jsonl"))
    path: str | None = _f(None, "jsonl: path of the JSONL file (one problem per line)")
    reward: str = _f("binary", "binary (1/0) | signed (+1/-1)", choices=("binary", "signed"))
    digits: int | None = _f(
        None,
        "synthetic_math: digits per operand (at most 30: a longer sum outgrows any model worth training here)",
        ge=1,
        le=30,
    )
    digits_min: int | None = _f(
        None,
        "synthetic_math: shortest operand (null = digits); shorter ones are zero-padded: mixed difficulty",
        ge=1,
        le=30,
    )
    train_size: int | None = _f(
        None, "synthetic_math: training problems (null = 20000); the pool no-positive-resampling draws from", ge=1
    )
    unseen_frac: float = _f(
        0.0,
        "synthetic_math: share of subtraction problems, which the warm-up never teaches: out "
        "of the policy's reach, they cap the pass rate below 1",
        ge=0.0,
        lt=1.0,
    )
    data_seed: int = _f(
        1234,
        "seed of the task's data split (not the run's seed: every run of a sweep sees the same splits)",
        ge=0,
        le=SEED_MAX,
    )
    val_path: str | None = _f(
        None, "jsonl: a separate validation file (null = the first train.val_size rows after a fixed shuffle)"
    )


@dataclass(frozen=True)
class RolloutConfig:
    """The generation backend: torch on CPU, vLLM on GPU."""

    name: str = _f("torch", "torch | vllm", choices=("torch", "vllm"))
    temperature: float = _f(1.0, "sampling temperature for training rollouts and evaluation", gt=0.0)
    # vLLM engine settings (rollout=vllm only; train/rollout_vllm.py). The LM head always follows `precision`.
    dtype: str = _f(
        "auto",
        "vllm: engine body dtype (auto = the policy's, float32 here; bfloat16 on GPUs)",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    kv_cache_mb: int = _f(256, "vllm: KV-cache cap in MiB (uncapped vLLM takes ~90% of memory)", ge=1, hash=False)
    gpu_memory_utilization: float = _f(
        0.3, "vllm on GPU: share of GPU memory the engine may take", gt=0.0, le=1.0, hash=False
    )
    enforce_eager: bool = _f(True, "vllm: no CUDA graphs/compilation (fast start); false for long GPU runs", hash=False)
    max_model_len: int | None = _f(
        None, "vllm: prompt + completion cap (null = the model's max positions)", ge=1, hash=False
    )


@dataclass(frozen=True)
class OptimConfig:
    """AdamW. The CPU default's learning rate: 1e-4 rises and levels off on the embedded task under PipelineRL-8;
    2e-4 swings under the 8-step staleness, and on-policy 5e-4 collapses within a few dozen steps."""

    lr: float = _f(1e-4, "learning rate", gt=0.0)
    betas: tuple[float, ...] = _f((0.9, 0.99), "AdamW betas (two values in [0, 1))")
    weight_decay: float = _f(0.0, "AdamW weight decay", ge=0.0)
    eps: float | None = _f(None, "AdamW epsilon (null = PyTorch's 1e-8; the paper: 1e-15)", gt=0.0)
    grad_clip: float = _f(1.0, "max gradient norm", gt=0.0)
    lr_warmup_steps: int = _f(
        100,
        "linear learning-rate warm-up over the first RL steps (Adam's first, bias-corrected steps are full-size)",
        ge=0,
    )
    micro_batch: int | None = _f(
        None, "completions per backward pass (null = whole step); never changes the gradient", ge=1, hash=False
    )


@dataclass(frozen=True)
class WarmupConfig:
    """Supervised warm-up of the tiny model so that R0 is well above 0 before RL starts, as a real run starts from an
    SFT model. The pass rate jumps sharply during warm-up, so it is checked often or R0 overshoots."""

    max_steps: int = _f(2000, "upper bound on warm-up steps", ge=0)
    lr: float = _f(1e-3, "warm-up learning rate", gt=0.0)
    batch: int = _f(64, "warm-up batch size", ge=1)
    target_pass_rate: float = _f(
        0.55,
        "stop once the pass rate on the problems the warm-up teaches reaches this (R0 "
        "on the mixed validation split is lower when task.unseen_frac > 0)",
        ge=0.0,
        le=1.0,
    )
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
    device: str = _f(
        "auto",
        "where the policy trains and the torch sampler runs: cpu | cuda | auto (cuda when visible)",
        choices=("auto", "cpu", "cuda"),
        hash=False,
    )
    sharding: str = _f(
        "ddp",
        "how data-parallel ranks hold the policy (resources.nproc x nodes > 1): ddp = a whole "
        "copy on every rank, gradients all-reduced; fsdp = parameters, gradients and optimizer state "
        "sharded (FSDP2), whole weights kept only for generation",
        choices=("ddp", "fsdp"),
        hash=False,
    )
    warmup: WarmupConfig = _f(doc="supervised warm-up", factory=WarmupConfig)


@dataclass(frozen=True)
class TrainerConfig:
    """Which trainer runs the recipe: ablate's own, or Hugging Face TRL's `GRPOTrainer` with the recipe mapped onto
    its `GRPOConfig` (train/trl_backend.py; what each supports: docs/trainers.md, `ablate show --trainers`)."""

    name: str = _f(
        "ablate",
        "ablate (the built-in trainer) | trl (TRL's GRPOTrainer; pip install '.[trl]')",
        choices=("ablate", "trl"),
        hash="unless_default",
    )
    vllm_mode: str = _f(
        "colocate",
        "trl with rollout=vllm: colocate (an engine inside the trainer process) | server "
        "(a separate `trl vllm-serve` process)",
        choices=("colocate", "server"),
        hash=False,
    )
    vllm_server_url: str | None = _f(
        None, "trl, vllm_mode=server: the server's base URL (null = TRL's default, http://localhost:8000)", hash=False
    )


@dataclass(frozen=True)
class LauncherConfig:
    """Where runs execute. Excluded from run ids: the same run on another executor is the same run."""

    name: str = _f(
        "local",
        "local | slurm | debug | auto (slurm when a SLURM controller answers)",
        choices=("local", "slurm", "debug", "auto"),
    )
    max_parallel: int | None = _f(None, "runs at once (null = as many as the cores hold, `threads` each)", ge=1)
    threads: int = _f(1, "torch threads per run", ge=1, le=1024)
    timeout_min: float = _f(
        60.0,
        "wall-clock limit per job in minutes (SLURM rounds up to whole minutes); the job is "
        "signalled before it, checkpoints and is requeued",
        gt=0.0,
        le=525600.0,
    )
    max_requeues: int = _f(3, "requeues after preemption/timeout before a run counts as preempted", ge=0, le=1000)
    signal_delay_s: int | None = _f(
        None,
        "local: seconds before the time limit that the checkpoint signal (USR2) "
        "arrives (null = a tenth of the limit, at most 30 s); SLURM takes the profile's",
        ge=1,
    )


TRACKERS = ("wandb", "mlflow", "tensorboard")
"""The trackers a run can mirror to: `track.to`'s values, the names `--track` takes (ablate.track)."""


@dataclass(frozen=True)
class TrackConfig:
    """The trackers a run's metrics are mirrored to (`ablate train|sweep --track NAME`; docs/trackers.md).
    Excluded from run ids: the same run watched elsewhere is the same run. Set on the command line only: a recipe or
    sweep file that sets it is refused (where data goes is the user's choice; ablate.compose.destinations)."""

    to: tuple[str, ...] = _f(
        (), "trackers to mirror every metrics line to: wandb, mlflow, tensorboard (a list)", hash=False
    )
    project: str | None = _f(None, "W&B project (null = $WANDB_PROJECT, else ablate)", hash=False)
    entity: str | None = _f(None, "W&B entity (null = $WANDB_ENTITY, else your default entity)", hash=False)
    wandb_mode: str | None = _f(
        None, "W&B mode: online | offline (null = $WANDB_MODE, else online)", choices=("online", "offline"), hash=False
    )
    mlflow_uri: str | None = _f(
        None,
        "MLflow tracking URI (null = $MLFLOW_TRACKING_URI, else sqlite:///<sweep>/mlflow.db, or the run "
        "directory's mlflow.db outside a sweep)",
        hash=False,
    )


@dataclass(frozen=True)
class ResourcesConfig:
    """What one run holds: data-parallel trainer processes over torch.distributed. Excluded from run ids: the same
    recipe on 1 or 8 ranks is the same run (the step's gradient is the same; see docs/distributed.md)."""

    nproc: int = _f(
        1,
        "trainer processes (ranks) per node; each generates and trains on its share of the step's prompt groups",
        ge=1,
        le=1024,
    )
    nodes: int = _f(1, "nodes per run (more than 1 needs -e slurm)", ge=1, le=4096)
    collective_timeout_s: float = _f(
        1800.0,
        "how long a rank waits for the others in a collective before the run "
        "fails (a crashed rank is noticed at once; this bounds a hung one)",
        gt=0.0,
        le=86400.0,
    )

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
    large_batch_prompts: int = _f(
        53,
        "prompts of the 1,280-completion batch the paper gives Qwen2.5 and MiniMax-M1 "
        "(5/3 of ScaleRL's): 53 = 5/3 of the CPU base's 32; the paper: 80",
        ge=1,
    )

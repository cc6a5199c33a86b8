"""The rules across keys of a run config: impossible combinations no single field can judge, each message naming
both keys and a fix (`config.validate` runs them after the field checks of ablate.config.validation).
"""

from __future__ import annotations

from typing import Any

# Which clip/length parameters belong to which option: a parameter of another option must stay null, and the
# option's own ones must be set (PipelineRL-style: name the key and the option, never ignore it silently).
OPTION_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "loss": {"grpo": ("eps",), "dapo": ("eps_low", "eps_high"), "gspo": ("eps_low", "eps_high"), "cispo": ("eps_max",)},
    "length": {"none": (), "interrupt": ("think_budget_min", "think_budget_max"), "penalty": ("l_max", "l_cache")},
}
OPTIONAL_OPTION_PARAMS: dict[str, dict[str, tuple[str, ...]]] = {"length": {"interrupt": ("phrase",)}}


def check_combinations(cfg: dict[str, Any]) -> list[str]:
    """Impossible combinations across keys; each message names both keys and a fix."""
    errs = option_params(cfg) + algorithm(cfg) + lengths(cfg) + sources(cfg) + data_parallel(cfg)
    if cfg["trainer"]["name"] == "trl":
        from ablate.config.support import trl_refusals

        errs += trl_refusals(cfg)
    if len(cfg["optim"]["betas"]) != 2 or not all(0.0 <= b < 1.0 for b in cfg["optim"]["betas"]):
        errs.append(f"optim.betas: need two values in [0, 1), got {cfg['optim']['betas']}")
    return errs


def option_params(cfg: dict[str, Any]) -> list[str]:
    """Each option's own parameters set, and no other option's (OPTION_PARAMS)."""
    errs: list[str] = []
    for section, table in OPTION_PARAMS.items():
        name = cfg[section]["name"]
        own = table[name] + OPTIONAL_OPTION_PARAMS.get(section, {}).get(name, ())
        for param in sorted({p for ps in table.values() for p in ps} | set(own)):
            value = cfg[section].get(param)
            if param in table[name] and value is None:
                errs.append(
                    f"{section}.{param}: required by {section}={name}; set it (see recipes/{section}/{name}.yaml)"
                )
            elif param not in own and value is not None:
                users = [o for o, ps in table.items() if param in ps]
                errs.append(
                    f"{section}.{param}: not a parameter of {section}={name} (it belongs to "
                    f"{section}={'|'.join(users)}); drop it or pick {section}={users[0]}"
                )
    return errs


def algorithm(cfg: dict[str, Any]) -> list[str]:
    """A loss with an aggregation that contradicts it."""
    if cfg["loss"]["name"] == "gspo" and cfg["aggregation"]["name"] == "token":
        return [
            "loss=gspo with aggregation=token: GSPO's importance ratio is per sequence, so pooling tokens "
            "re-weights sequences by length; use aggregation=sample or aggregation=prompt"
        ]
    return []


def lengths(cfg: dict[str, Any]) -> list[str]:
    """The length control's limits against each other and against max_new_tokens."""
    errs: list[str] = []
    length = cfg["length"]
    if length["name"] == "penalty" and None not in (length["l_max"], length["l_cache"]):
        if length["l_cache"] > length["l_max"]:
            errs.append(
                f"length.l_cache ({length['l_cache']}) > length.l_max ({length['l_max']}): the soft zone "
                "cannot be wider than the limit; set length.l_cache <= length.l_max"
            )
        if length["l_max"] > length["max_new_tokens"]:
            errs.append(
                f"length.l_max ({length['l_max']}) > length.max_new_tokens ({length['max_new_tokens']}): "
                "completions are cut before the penalty reaches -1; set length.l_max <= length.max_new_tokens"
            )
    if length["name"] == "interrupt" and None not in (length["think_budget_min"], length["think_budget_max"]):
        if length["think_budget_min"] > length["think_budget_max"]:
            errs.append(
                f"length.think_budget_min ({length['think_budget_min']}) > length.think_budget_max "
                f"({length['think_budget_max']}): the budget window is empty; swap them"
            )
        if length["think_budget_max"] >= length["max_new_tokens"]:
            errs.append(
                f"length.think_budget_max ({length['think_budget_max']}) >= length.max_new_tokens "
                f"({length['max_new_tokens']}): no room left for the answer after the phrase; "
                "lower the budget or raise length.max_new_tokens"
            )
    return errs


def sources(cfg: dict[str, Any]) -> list[str]:
    """The model and the task: a folder or file where one is needed, sizes that fit together."""
    errs: list[str] = []
    if cfg["model"]["name"] == "hf" and not cfg["model"]["path"]:
        errs.append("model=hf needs model.path: set model.path=/local/hf/model/folder (nothing is downloaded)")
    if cfg["task"]["name"] == "jsonl" and not cfg["task"]["path"]:
        errs.append("task=jsonl needs task.path: set task.path=/path/to/problems.jsonl")
    task, val = cfg["task"], cfg["train"]["val_size"]
    if task["name"] == "synthetic_math" and task["digits"] and task["train_size"]:
        space = 10 ** (2 * min(task["digits"], 10))  # distinct problems (a, b); past 10 digits, more than any pool
        if task["train_size"] + val > space:
            # the validation set alone may fill the space: then both need lowering, a tenth of it held out
            fix = (
                f"task.train_size={space - val}"
                if val < space
                else f"train.val_size={space // 10} task.train_size={space - space // 10}"
            )
            errs.append(
                f"task.train_size ({task['train_size']}) + train.val_size ({val}) is more than the {space} distinct "
                f"{task['digits']}-digit problems; lower it (e.g. {fix}) or raise task.digits"
            )
    if cfg["model"]["name"] == "tiny" and None in (cfg["model"][k] for k in ("n_layers", "hidden", "n_heads", "mlp")):
        errs.append(
            "model=tiny needs model.n_layers, model.hidden, model.n_heads and model.mlp (see recipes/model/tiny.yaml)"
        )
    elif cfg["model"]["name"] == "tiny" and cfg["model"]["hidden"] % cfg["model"]["n_heads"]:
        errs.append(
            f"model.hidden ({cfg['model']['hidden']}) is not divisible by model.n_heads "
            f"({cfg['model']['n_heads']}); "
            "pick sizes with hidden % n_heads == 0"
        )
    return errs


def data_parallel(cfg: dict[str, Any]) -> list[str]:
    """What data-parallel training over several processes requires (and fsdp: more than one)."""
    errs: list[str] = []
    res = cfg["resources"]
    world = res["nproc"] * res["nodes"]
    if cfg["train"]["sharding"] == "fsdp" and world == 1:
        errs.append(
            "train.sharding=fsdp shards the policy over data-parallel ranks: set resources.nproc (or nodes) "
            "above 1, or use train.sharding=ddp"
        )
    off = cfg["offpolicy"]
    if (
        world > 1
        and off["name"] == "pipeline"
        and off.get("generator") == "thread"
        and cfg["filtering"]["no_positive_resampling"]
    ):
        errs.append(
            f"offpolicy.generator=thread with {world} ranks and filtering.no_positive_resampling: each rank's "
            "generator thread would draw from the shared prompt pool at its own moment, so the ranks would "
            "train on different prompts; use offpolicy.generator=inline (or auto)"
        )
    if world > 1 and cfg["batch"]["prompts"] < world:
        errs.append(
            f"batch.prompts ({cfg['batch']['prompts']}) < resources.nproc x resources.nodes ({world}): every "
            "rank needs at least one prompt group per step; use fewer ranks or more prompts"
        )
    return errs

"""The checks behind `config.validate`: types, ranges and rules from the schema's field metadata, then the
combinations of keys no single field can judge. Every problem is collected (one line each, naming the key and the
fix) before `ConfigErrors` is raised, so a sweep reports all its mistakes at once.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

from omegaconf import OmegaConf

from ablate.config import INT_MAX, OPTION_PARAMS, OPTIONAL_OPTION_PARAMS, ConfigErrors, RunConfig, _hints, closest


def validate_config(data: Any) -> RunConfig:
    """Check a resolved config against the schema and return it as a `RunConfig`, completed with the defaults.

    `data`: plain containers or an OmegaConf config. Raises ConfigErrors listing every problem (unknown keys,
    wrong types, out-of-range values, impossible combinations), one line each, each naming the key(s) and the fix.
    """
    if isinstance(data, RunConfig):
        return data
    if OmegaConf.is_config(data):
        data = OmegaConf.to_container(data, resolve=True)
    errors: list[str] = []
    if not isinstance(data, dict):
        raise ConfigErrors([f"a run config must be a mapping of sections, got {type(data).__name__}"])
    cfg = _check_section(RunConfig, data, "", errors)
    try:
        errors.extend(_check_combinations(cfg))
    except (KeyError, TypeError, AttributeError):  # a field the combinations read is invalid: already reported
        pass
    if errors:
        raise ConfigErrors(errors)
    return _build(RunConfig, cfg)


def _build(cls: type, data: dict[str, Any]) -> Any:
    """The dataclass instance of a checked section (nested sections built first)."""
    hints = _hints(cls)
    kw = {k: _build(hints[k], v) if dataclasses.is_dataclass(hints[k]) else v for k, v in data.items()}
    return cls(**kw)


def _check_section(cls: type, data: Any, prefix: str, errors: list[str]) -> dict[str, Any]:
    """Type- and range-check one dataclass section; append problems to `errors`; return the completed section."""
    where = prefix.rstrip(".") or "the config"
    if not isinstance(data, dict):
        errors.append(f"{where}: expected a mapping of {cls.__name__} fields, got {data!r}")
        return {}
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            errors.append(f"{prefix}{key}: unknown key{closest(str(key), list(fields))}; valid keys in {where}: {', '.join(fields)}")
    out: dict[str, Any] = {}
    for name, f in fields.items():
        key = prefix + name
        if dataclasses.is_dataclass(hints[name]):
            out[name] = _check_section(hints[name], data.get(name, {}), key + ".", errors)
            continue
        if name not in data:
            out[name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            continue
        try:
            value = _coerce(data[name], hints[name])
        except TypeError:
            errors.append(f"{key}: expected {_type_name(hints[name])}, got {_short(data[name])}")
            continue
        out[name] = value
        problem = _check_rules(value, f.metadata)
        if problem:
            errors.append(f"{key}: {problem}")
    return out


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _coerce(value: Any, tp: Any) -> Any:
    """`value` as type `tp` (int, float, str, bool, Optional[...], Tuple[x, ...]); TypeError when it is not one.

    Strict on purpose (no "5" -> 5): Hydra overrides and YAML already give typed values, so a string where a
    number belongs is a mistake to report. The one widening is int -> float, so that eps_max=5 means 5.0.
    """
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union:
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is not type(None):
                try:
                    return _coerce(value, a)
                except TypeError:
                    pass
        raise TypeError
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError
        return tuple(_coerce(v, args[0]) for v in value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer too large for a float
                raise TypeError from None
    elif tp is str:
        if isinstance(value, str):
            return value
    raise TypeError


def _type_name(tp: Any) -> str:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union and type(None) in args:
        return " or ".join(_type_name(a) for a in args if a is not type(None)) + " or null"
    if typing.get_origin(tp) is tuple:
        return f"a list of {_type_name(args[0])}" if args else "a list"
    return getattr(tp, "__name__", str(tp))


def _check_rules(value: Any, meta: Any) -> str | None:
    """The first broken rule of a field's metadata (choices, ge, gt, le, lt) as a message, or None. Every number
    must be finite and every integer within INT_MAX, whatever the field's own rules."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if isinstance(value, tuple):
        return next((p for p in (_check_rules(v, {}) for v in value) if p), None)
    allowed = meta.get("choices")
    if allowed and value not in allowed:
        return f"{value!r} is not an option{closest(str(value), allowed)}; options: {', '.join(allowed)}"
    for rule, ok, word in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                           ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
        if rule in meta and isinstance(value, (int, float)) and not ok(value, meta[rule]):
            return f"must be {word} {meta[rule]}, got {_short(value)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
        return f"must be at most {INT_MAX:.2e} in size, got {_short(value)}"
    return None


def _check_combinations(cfg: dict[str, Any]) -> list[str]:
    """Impossible combinations across keys; each message names both keys and a fix."""
    errs: list[str] = []
    for section, table in OPTION_PARAMS.items():
        name = cfg[section]["name"]
        own = table[name] + OPTIONAL_OPTION_PARAMS.get(section, {}).get(name, ())
        for param in sorted({p for ps in table.values() for p in ps} | set(own)):
            value = cfg[section].get(param)
            if param in table[name] and value is None:
                errs.append(f"{section}.{param}: required by {section}={name}; set it (see recipes/{section}/{name}.yaml)")
            elif param not in own and value is not None:
                users = [o for o, ps in table.items() if param in ps]
                errs.append(f"{section}.{param}: not a parameter of {section}={name} (it belongs to {section}={'|'.join(users)}); "
                            f"drop it or pick {section}={users[0]}")
    loss, length = cfg["loss"], cfg["length"]
    if loss["name"] == "gspo" and cfg["aggregation"]["name"] == "token":
        errs.append("loss=gspo with aggregation=token: GSPO's importance ratio is per sequence, so pooling tokens "
                    "re-weights sequences by length; use aggregation=sample or aggregation=prompt")
    if length["name"] == "penalty" and None not in (length["l_max"], length["l_cache"]):
        if length["l_cache"] > length["l_max"]:
            errs.append(f"length.l_cache ({length['l_cache']}) > length.l_max ({length['l_max']}): the soft zone "
                        "cannot be wider than the limit; set length.l_cache <= length.l_max")
        if length["l_max"] > length["max_new_tokens"]:
            errs.append(f"length.l_max ({length['l_max']}) > length.max_new_tokens ({length['max_new_tokens']}): "
                        "completions are cut before the penalty reaches -1; set length.l_max <= length.max_new_tokens")
    if length["name"] == "interrupt" and None not in (length["think_budget_min"], length["think_budget_max"]):
        if length["think_budget_min"] > length["think_budget_max"]:
            errs.append(f"length.think_budget_min ({length['think_budget_min']}) > length.think_budget_max "
                        f"({length['think_budget_max']}): the budget window is empty; swap them")
        if length["think_budget_max"] >= length["max_new_tokens"]:
            errs.append(f"length.think_budget_max ({length['think_budget_max']}) >= length.max_new_tokens "
                        f"({length['max_new_tokens']}): no room left for the answer after the phrase; "
                        "lower the budget or raise length.max_new_tokens")
    if cfg["model"]["name"] == "hf" and not cfg["model"]["path"]:
        errs.append("model=hf needs model.path: set model.path=/local/hf/model/folder (nothing is downloaded)")
    if cfg["task"]["name"] == "jsonl" and not cfg["task"]["path"]:
        errs.append("task=jsonl needs task.path: set task.path=/path/to/problems.jsonl")
    if cfg["model"]["name"] == "tiny" and None in (cfg["model"][k] for k in ("n_layers", "hidden", "n_heads", "mlp")):
        errs.append("model=tiny needs model.n_layers, model.hidden, model.n_heads and model.mlp (see recipes/model/tiny.yaml)")
    elif cfg["model"]["name"] == "tiny" and cfg["model"]["hidden"] % cfg["model"]["n_heads"]:
        errs.append(f"model.hidden ({cfg['model']['hidden']}) is not divisible by model.n_heads ({cfg['model']['n_heads']}); "
                    "pick sizes with hidden % n_heads == 0")
    res = cfg["resources"]
    world = res["nproc"] * res["nodes"]
    if cfg["train"]["sharding"] == "fsdp" and world == 1:
        errs.append("train.sharding=fsdp shards the policy over data-parallel ranks: set resources.nproc (or nodes) "
                    "above 1, or use train.sharding=ddp")
    off = cfg["offpolicy"]
    if (world > 1 and off["name"] == "pipeline" and off.get("generator") == "thread"
            and cfg["filtering"]["no_positive_resampling"]):
        errs.append(f"offpolicy.generator=thread with {world} ranks and filtering.no_positive_resampling: each rank's "
                    "generator thread would draw from the shared prompt pool at its own moment, so the ranks would "
                    "train on different prompts; use offpolicy.generator=inline (or auto)")
    if world > 1 and cfg["batch"]["prompts"] < world:
        errs.append(f"batch.prompts ({cfg['batch']['prompts']}) < resources.nproc x resources.nodes ({world}): every "
                    "rank needs at least one prompt group per step; use fewer ranks or more prompts")
    if cfg["trainer"]["name"] == "trl":
        from ablate.trainers import trl_refusals

        errs += trl_refusals(cfg)
    if len(cfg["optim"]["betas"]) != 2 or not all(0.0 <= b < 1.0 for b in cfg["optim"]["betas"]):
        errs.append(f"optim.betas: need two values in [0, 1), got {cfg['optim']['betas']}")
    return errs

"""The rollout backends by name (`rollout.name`, registry `rollout`): `torch` (rollout.TorchSampler) and `vllm`
(rollout_vllm.VLLMSampler, imported on first use, so that a run on the torch sampler never imports vLLM). Kept
apart from both so that the lazy entry is no hidden cycle: this module imports each backend, neither imports it."""

from __future__ import annotations

from typing import Any

from ablate.registry import Registry
from ablate.train.policy import Policy
from ablate.train.rollout import PolicySampler, TorchSampler

BACKENDS: Registry[Any] = Registry("rollout")
BACKENDS.register("torch")(TorchSampler)
BACKENDS.add_lazy("vllm", "ablate.train.rollout_vllm:VLLMSampler")


def make_sampler(name: str, policy: Policy, **options: Any) -> PolicySampler:
    """A sampler of backend `name` (torch | vllm) over `policy`; `options` go to the backend (vLLM engine settings)."""
    return BACKENDS.get(name)(policy, **options)

"""A tiny name registry: design choices are selected by the same string in the recipe, the schema and here.

    LOSSES = Registry("loss")

    @LOSSES.register("grpo")
    def grpo(...): ...

    LOSSES.get("grpo")    # the function
    LOSSES.get("gpro")    # UserError: unknown loss 'gpro'; valid: cispo, dapo, grpo, gspo (did you mean 'grpo'?)

    BACKENDS.add_lazy("vllm", "ablate.train.rollout_vllm:VLLMSampler")   # imported on first `get`

Registering a name twice is a programming error (ValueError), not a user error. A lazy entry lets a module
offer an option whose code it must not import (an optional dependency); tests/test_architecture.py counts it as
an import all the same, so it can hide no cycle.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from ablate.errors import ErrorKind, UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects (usually pure functions). `kind` names the axis in error messages ("loss", ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REG.register("name")` stores the decorated object under `name` and returns it unchanged."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Store `obj` under `name` (the non-decorator form)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} registry: name must be a non-empty string, got {name!r}")
        if name in self._items:
            raise ValueError(f"{self.kind} registry: {name!r} is already registered")
        self._items[name] = obj

    def add_lazy(self, name: str, target: str) -> None:
        """Register `name` as "module:attribute", imported when `get(name)` is first called."""
        self.add(name, _Lazy(target))  # type: ignore[arg-type]

    def get(self, name: str) -> T:
        """The object registered as `name`; a UserError listing the valid names (and the closest one) otherwise."""
        try:
            obj = self._items[name]
        except (KeyError, TypeError):  # TypeError: an unhashable value from a config file
            obj = None
        if isinstance(obj, _Lazy):
            obj = self._items[name] = obj.load()
        if obj is not None:
            return obj
        msg = f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}"
        close = difflib.get_close_matches(str(name), self.names(), n=1)
        if close:
            msg += f" (did you mean {close[0]!r}?)"
        raise UserError(msg, kind=ErrorKind.RECIPE)

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"


class _Lazy:
    def __init__(self, target: str) -> None:
        self.target = target

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

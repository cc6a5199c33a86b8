"""Each verb's options as one settings dataclass: a field per option, whose metadata holds its flag and whose doc is
the option's help. The command Typer sees is built from the class (`verb`), so a verb's `--help`, its defaults and
the record its body works from cannot drift apart, and verbs that share a setting share its field (a base class:
ablate.cli.options.ReadingOptions, WindowOptions, OutputOptions; or one field of it, `shared`).

    @dataclass(frozen=True, kw_only=True)
    class FitSettings(OutputOptions, WindowOptions, ReadingOptions):
        file: Path = argument("A table or log to fit.")
        loss: str = option("linear", "--loss", doc="linear or huber.")

    @verb(FitSettings)
    def fit(s: FitSettings) -> None:
        '''Fit the ScaleRL sigmoid ...'''
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer

S = TypeVar("S")


def option(default: Any, *flags: str, doc: str, **typer_kw: Any) -> Any:
    """A settings field that is the option `flags` (its default `default`, its help `doc`; typer_kw: Typer's other
    Option arguments, such as a `callback` that checks the value as it is read)."""
    return dataclasses.field(default=default, metadata={"flags": flags, "doc": doc, "typer": typer_kw})


def argument(doc: str, *, default: Any = dataclasses.MISSING, **typer_kw: Any) -> Any:
    """A settings field that is a positional argument (its help `doc`), required unless it has a `default`."""
    return dataclasses.field(default=default, metadata={"argument": True, "doc": doc, "typer": typer_kw})


def shared(cls: type, name: str) -> Any:
    """The setting `name` of `cls` (a group of settings several verbs share), for a verb that takes it alone."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return dataclasses.field(default=f.default, metadata=f.metadata)


def info(f: dataclasses.Field[Any]) -> Any:
    """The Typer parameter a settings field declares (a new object each time: Typer keeps state on it)."""
    meta = f.metadata
    if meta.get("argument"):
        default = ... if f.default is dataclasses.MISSING else f.default
        return typer.Argument(default, help=meta["doc"], **meta["typer"])
    return typer.Option(f.default, *meta["flags"], help=meta["doc"], **meta["typer"])


def verb(cls: type[S]) -> Callable[[Callable[[S], None]], Callable[..., None]]:
    """The command of `cls`'s options: Typer reads its signature (a keyword per field, in the class's field order),
    and each call builds `cls` from the values given and runs `body` on it. The command keeps `body`'s name and
    docstring (the verb's help)."""
    hints = typing.get_type_hints(cls)

    def wrap(body: Callable[[S], None]) -> Callable[..., None]:
        params = [
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info(f), annotation=hints[f.name])
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        ]

        def command(**values: Any) -> None:
            body(cls(**values))

        command.__name__ = command.__qualname__ = body.__name__
        command.__doc__, command.__module__ = body.__doc__, body.__module__
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.settings = cls  # type: ignore[attr-defined]
        return command

    return wrap

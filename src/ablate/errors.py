"""Bad input as exceptions: the CLI prints the message on one line, `error[KIND]: ...`, and exits 2, no traceback.
The kind says what is wrong (ErrorKind), so that a script or a test can tell one refusal from another without
reading its words. A `SettingError` names the settings it is about as placeholders, so that the library speaks of
`min_effect` (the Python API's keyword) and the CLI of `--min-effect` (cli/errors.fail fills them in)."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class ErrorKind(StrEnum):
    """What a refusal is about: the word in `error[KIND]:` (README, Exit status)."""

    USAGE = "usage"
    """The command line itself: an unknown option, a missing argument, a value of the wrong type."""
    SETTING = "setting"
    """An option's value, or options that do not go together."""
    RECIPE = "recipe"
    """A recipe, sweep file, override or profile: an unknown key, a value out of range, a bad sweep."""
    FILE = "file"
    """An input or output path: missing, unreadable, malformed, a link or special file, not writable."""
    DATA = "data"
    """Inputs that were read but cannot answer: no points in the window, nothing to fit, no seeds."""
    STATE = "state"
    """A sweep or run folder in a state that forbids it: another config there, a writer at work, a damaged record,
    no usable checkpoint."""
    ENVIRONMENT = "environment"
    """The machine or a service: no SLURM controller, no CUDA device, a missing optional package, a tracker server."""


class UserError(Exception):
    """Bad input from the user (file, column, recipe key, value). The message names the culprit and the fix;
    `kind` says what is wrong."""

    def __init__(self, message: str, *, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[object, ...]:
        # rebuilt from its message and fields, not by calling __init__ again (whose arguments differ by subclass), so
        # that a refusal raised in a worker process reaches its parent whole: class, message, kind and fields
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls: type[UserError], args: tuple[object, ...], fields: dict[str, object]) -> UserError:
    e = cls.__new__(cls)
    e.args = args
    e.__dict__.update(fields)
    return e


class SettingError(UserError):
    """A value of one or more settings the library refuses. `template` holds each setting as `{name}` (the Python
    API's keyword: `min_effect`, `to`, `noise`); `settings` lists them, so a caller can tell which setting is at
    fault without reading the text. `str()` names them as the API does; `named(flag)` as a front end does. Its kind
    is `setting`, or `data` where the settings are right but the data cannot answer them (no seeds to measure a
    spread from, no points in the window)."""

    def __init__(self, template: str, *settings: str, kind: ErrorKind = ErrorKind.SETTING) -> None:
        self.template, self.settings = template, settings
        super().__init__(self.named(lambda s: s), kind=kind)

    def named(self, name: Callable[[str], str]) -> str:
        text = self.template
        for s in self.settings:
            text = text.replace("{" + s + "}", name(s))
        return text

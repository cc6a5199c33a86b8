"""Bad input as exceptions: the CLI prints the message on one line, `error[KIND]: ...`, and exits 2, no traceback.
The kind says what is wrong (ErrorKind), so that a script or a test can tell one refusal from another without
reading its words. A `SettingError` names the settings it is about as placeholders, so that the library speaks of
`min_effect` (the Python API's keyword) and the CLI of `--min-effect` (cli/errors.fail fills them in). A `Phrase`
does the same for text that is not an error: a note or a reason a record carries to whoever renders it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


def _fill(template: str, settings: tuple[str, ...], name: Callable[[str], str]) -> str:
    for s in settings:
        template = template.replace("{" + s + "}", name(s))
    return template


class Phrase(str):
    """Text that names library settings, as a record carries it (a note, a not-fitted reason, how intervals were
    made). `template` holds each setting as `{name}`, the Python API's keyword; `settings` lists them. As a `str`
    it names them as the API does (`give r0 to fix it`); `named(flag)` as a front end does (`give --r0 to fix
    it`): ablate.text.safe and the JSON writer spell them so. Joining it to plain text with `+` keeps it a
    Phrase; an f-string does not."""

    template: str
    settings: tuple[str, ...]

    def __new__(cls, template: str, *settings: str) -> Phrase:
        phrase = super().__new__(cls, _fill(template, settings, lambda s: s))
        phrase.template, phrase.settings = template, settings
        return phrase

    def named(self, name: Callable[[str], str]) -> str:
        return _fill(self.template, self.settings, name)

    def __add__(self, other: str) -> Phrase:
        more = other.settings if isinstance(other, Phrase) else ()
        return Phrase(self.template + (other.template if isinstance(other, Phrase) else other), *self.settings, *more)

    def __radd__(self, other: str) -> Phrase:
        return Phrase(other + self.template, *self.settings)

    def __reduce__(self) -> tuple[object, ...]:
        return Phrase, (self.template, *self.settings)


def phrased(*parts: str) -> str:
    """Plain text and phrases run together: a `Phrase` naming every part's settings when any part is one, else a
    plain str."""
    settings = tuple(s for p in parts if isinstance(p, Phrase) for s in p.settings)
    text = "".join(p.template if isinstance(p, Phrase) else p for p in parts)
    return Phrase(text, *settings) if settings else text


def joined(sep: str, parts: Iterable[str]) -> str:
    """`sep.join(parts)` that keeps the parts' settings (`phrased`)."""
    return phrased(*[piece for part in parts for piece in (sep, part)][1:])


class SettingError(UserError):
    """A value of one or more settings the library refuses. `template` holds each setting as `{name}` (the Python
    API's keyword: `min_effect`, `to`, `noise`); `settings` lists them, so a caller can tell which setting is at
    fault without reading the text. `str()` names them as the API does; `named(flag)` as a front end does. Its kind
    is `setting`, or `data` where the settings are right but the data cannot answer them (no seeds to measure a
    spread from, no points in the window)."""

    def __init__(self, template: str, *settings: str, kind: ErrorKind = ErrorKind.SETTING) -> None:
        if isinstance(template, Phrase):  # a record's reason quoted in the message: its settings too
            quoted = template
            template, settings = quoted.template, (*quoted.settings, *settings)
        self.template, self.settings = template, settings
        super().__init__(self.named(lambda s: s), kind=kind)

    def named(self, name: Callable[[str], str]) -> str:
        return _fill(self.template, self.settings, name)

    @property
    def phrase(self) -> Phrase:
        """The message as a record carries it on (an arm's not-fitted reason): its settings still to be named."""
        return Phrase(self.template, *self.settings)


def refusal(message: str, kind: ErrorKind) -> UserError:
    """The error for a message built from records' reasons: a `SettingError` when it names a setting (a `Phrase`),
    else a plain `UserError`."""
    return SettingError(message, kind=kind) if isinstance(message, Phrase) else UserError(message, kind=kind)

"""Bad input as exceptions: the CLI prints the message on one line and exits 2, no traceback. A `SettingError`
names the settings it is about as placeholders, so that the library speaks of `min_effect` (the Python API's
keyword) and the CLI of `--min-effect` (cli/errors.fail fills them in)."""

from __future__ import annotations

from collections.abc import Callable


class UserError(Exception):
    """Bad input from the user (file, column, recipe key, value). The message names the culprit and the fix."""


class SettingError(UserError):
    """A value of one or more settings the library refuses. `template` holds each setting as `{name}` (the Python
    API's keyword: `min_effect`, `to`, `noise`); `settings` lists them, so a caller can tell which setting is at
    fault without reading the text. `str()` names them as the API does; `named(flag)` as a front end does."""

    def __init__(self, template: str, *settings: str) -> None:
        self.template, self.settings = template, settings
        super().__init__(self.named(lambda s: s))

    def named(self, name: Callable[[str], str]) -> str:
        text = self.template
        for s in self.settings:
            text = text.replace("{" + s + "}", name(s))
        return text

"""Untrusted text shown as text: run names, W&B display names, grid values, labels and notes read from files.

Any of these can hold characters a terminal obeys (escape sequences, a carriage return, bidi overrides, a newline
that splits one error line in two); `safe` writes each as a visible escape. Why: docs/security.md ("text that takes
over your terminal"). Rich markup is a separate matter: ablate.render.terminal.esc.
"""

from __future__ import annotations

import unicodedata

from ablate.errors import Phrase, SettingError

_HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}
"""Unicode categories a terminal acts on or does not show: controls (C0, DEL, C1), format characters (bidi
overrides and isolates, zero-width ones, the byte-order mark), surrogates (undecodable bytes kept by Python's
surrogateescape: they cannot even be encoded for the terminal), and the line and paragraph separators."""


def _visible(ch: str) -> str:
    if unicodedata.category(ch) not in _HIDDEN:
        return ch
    n = ord(ch)
    return f"\\x{n:02x}" if n <= 0xFF else f"\\u{n:04x}" if n <= 0xFFFF else f"\\U{n:08x}"


def safe(s: object) -> str:
    """`s` as printable text: each control, format or separator character written as its escape (`\\x1b`,
    `\\n`, `\\u202e`); anything else, spaces and every script included, unchanged. Idempotent, and fast on the
    usual name (one `isprintable` check). A `Phrase` (a record's note or reason) names its settings by their flags,
    as the command line spells them."""
    s = s if isinstance(s, str) else str(s)
    if isinstance(s, Phrase):
        s = s.named(flag)
    if s.isprintable():
        return s
    return "".join(_visible(ch) for ch in s)


def html_text(value: object) -> object:
    """A value an HTML page prints (`ablate report`'s template: Jinja's finalize), its text as `safe` writes it,
    line breaks kept (whitespace in HTML); HTML the page made itself (an object with `__html__`, such as the
    figures' JSON) and anything not text pass as they are."""
    if not isinstance(value, str) or hasattr(value, "__html__"):
        return value
    if isinstance(value, Phrase):
        value = value.named(flag)
    return "\n".join(safe(line) for line in value.split("\n"))


def counted(k: int, noun: str) -> str:
    """`1 arm`, `3 arms`: a count and its noun, plural when it is not one."""
    return f"{k} {noun}" + ("" if k == 1 else "s")


def flag(setting: str) -> str:
    """The command line's spelling of a library setting: every verb spells `min_effect_compute` as
    `--min-effect-compute` (errors.SettingError and the settings an analysis is reproduced with name keywords)."""
    return "--" + setting.replace("_", "-")


def as_cli(e: Exception) -> str:
    """An error's message as the command line says it: a `SettingError`'s settings named by their flags."""
    return e.named(flag) if isinstance(e, SettingError) else str(e)

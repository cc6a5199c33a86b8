"""The console every command prints to, escaping of untrusted text, and JSON output (keys: docs/json.md).

Names come from users and from files: tables take them as `cell(name)`, printed lines through `esc(name)`, so that
`[bold]` in a name is shown as written and an escape sequence as `\\x1b` (ablate.text.safe; docs/security.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.text import Text

from ablate.errors import Phrase
from ablate.text import flag, safe


def esc(s: object) -> str:
    """Untrusted text for a printed line: control characters made visible (text.safe), then markup escaped."""
    return markup_escape(safe(s))


def cell(s: object) -> Text:
    """Untrusted text for a table cell: a Text (never markup) with its control characters made visible."""
    return Text(safe(s))


def console(stderr: bool = False) -> Console:
    """A console that keeps tables whole when output goes to a file or a pipe (rich assumes 80 columns).

    Emoji codes stay text: a run named `:x:` is printed as `:x:`."""
    stream = sys.stderr if stderr else sys.stdout
    # an explicit COLUMNS is the reader's pager width; else at least 150, so that a table piped to a file stays whole
    cols = os.environ.get("COLUMNS", "")
    width = (
        None
        if stream.isatty()
        else int(cols)
        if cols.isdigit() and int(cols) >= 40
        else max(shutil.get_terminal_size((150, 40)).columns, 150)
    )
    return Console(width=width, stderr=stderr, emoji=False)


JSON_SCHEMA = 1
"""The version of the --json contract (docs/json.md), the first key of every document: raised when a key changes
meaning or goes away (a new key leaves it as it is)."""


def dump_json(obj: Any) -> str:
    """JSON for scripts, headed by `schema` (JSON_SCHEMA): numpy scalars and arrays as plain values, NaN and
    infinities as null (not valid JSON)."""
    return json.dumps({"schema": JSON_SCHEMA, **jsonable(obj)}, indent=2, allow_nan=False, default=str)


def jsonable(o: Any) -> Any:
    """`o` with numpy values made plain, non-finite floats made None and a `Phrase`'s settings named by their flags
    (the command line's JSON speaks its own options), recursively."""
    if isinstance(o, Phrase):
        return o.named(flag)
    if isinstance(o, dict):
        return {k: jsonable(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in o]
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o

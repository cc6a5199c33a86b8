"""The job function a run's job calls: `module:function` or `path/to/file.py:function`, `ablate.train:run` unless
`--job` names another (docs/run-directory.md, "Jobs")."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.errors import ErrorKind, UserError

DEFAULT_JOB = "ablate.train:run"


def resolve_job(job: str) -> Callable[..., Any]:
    """`module:function` or `path/to/file.py:function` -> the callable; a UserError naming what is wrong."""
    mod_name, _, attr = job.rpartition(":")
    if not mod_name or not attr:
        raise UserError(f"--job {job!r} must look like 'module:function' or 'file.py:function'", kind=ErrorKind.SETTING)
    try:
        if mod_name.endswith(".py") or "/" in mod_name:
            path = Path(mod_name).resolve()
            if not path.is_file():
                raise UserError(f"--job {job!r}: no such file {str(path)!r}", kind=ErrorKind.SETTING)
            spec = importlib.util.spec_from_file_location(f"ablate_job_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise UserError(f"--job {job!r}: {path} cannot be imported", kind=ErrorKind.SETTING)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(mod_name)
    except UserError:
        raise
    except Exception as e:  # ImportError, SyntaxError, or anything the module raises at import
        raise UserError(
            f"--job {job!r}: cannot import {mod_name} ({type(e).__name__}: {e})".splitlines()[0], kind=ErrorKind.SETTING
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UserError(f"--job {job!r}: {mod_name} has no function {attr!r}", kind=ErrorKind.SETTING)
    return fn


def takes_stop(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "stop" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

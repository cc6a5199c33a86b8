"""The version of ablate that runs: the installed package's (pyproject.toml's), read on first use so that
`import ablate` stays quick; a source tree used without installing says `0+unknown`."""

from __future__ import annotations

import functools


@functools.cache
def installed() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ablate")
    except PackageNotFoundError:
        return "0+unknown"

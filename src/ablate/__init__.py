"""ablate: ScaleRL-style ablation sweeps for RL post-training of LLMs, and the sigmoid fits that rank them.

From Python, the verbs' library functions (ablate.api; docs/api.md): `ablate.rank`, `ablate.fit_curves`,
`ablate.extrapolate`, `ablate.read`, `ablate.status`, each returning the record its command prints.
"""

from typing import Any

from ablate.api import extrapolate, fit_curves, rank, read, status

__all__ = ["__version__", "extrapolate", "fit_curves", "rank", "read", "status"]


def __getattr__(name: str) -> Any:
    """`ablate.__version__`, read on first use (ablate.version)."""
    if name != "__version__":
        raise AttributeError(f"module 'ablate' has no attribute {name!r}")
    from ablate.version import installed

    return installed()

"""ablate: ScaleRL-style ablation sweeps for RL post-training of LLMs, and the sigmoid fits that rank them.

From Python, the verbs' library functions (ablate.api; docs/api.md): `ablate.rank`, `ablate.fit_curves`,
`ablate.extrapolate`, `ablate.read`, `ablate.status`, each returning the record its command prints.
"""

from importlib.metadata import version

from ablate.api import extrapolate, fit_curves, rank, read, status

__version__ = version("ablate")
"""The installed package's version (pyproject.toml's)."""

__all__ = ["__version__", "extrapolate", "fit_curves", "rank", "read", "status"]

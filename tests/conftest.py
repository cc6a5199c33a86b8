"""Shared test setup: the SLURM tests run only against the real local cluster (slurm/up), and one warm-up cache
serves the whole test session.

`make test` brings the cluster up with `bash slurm/up`, runs pytest with ABLATE_SLURM=1, and takes it
down with `bash slurm/down`. With ABLATE_SLURM=1 a cluster that does not answer is a loud failure
(never a skip); without it the `slurm`-marked tests are deselected and the header says why.

`make test` runs pytest in two processes (pytest-xdist, `-n 2`), the `slurm` and `slow` tests first so that
no worker ends alone on a long one. Tests that run side by side share nothing but the machine: each writes under
its own tmp_path, the SLURM tests act on their own job ids (the cluster advertises 8 CPUs, and every wait is on a
state, with a generous guard), and the ranks of a data-parallel run meet on a free port the OS picks.
ABLATE_CACHE points every test (and every process it starts) at one private cache under the session's temporary
folder, shared by the workers: each warmed-up model and composed recipe is built once per session (the warm-up
under a file lock), not once per test, and nothing is read from or left in the user's own ~/.cache. A test of the
cache itself sets its own ABLATE_CACHE.
"""

from __future__ import annotations

import os

import pytest

SLURM_ENV = "ABLATE_SLURM"

# xdist's workers inherit COLUMNS=80 from execnet, and the CLI honours an explicit COLUMNS (a pager's width): without
# this a worker would wrap the tables and messages a serial run prints whole. Tests that mean a width set their own.
os.environ.pop("COLUMNS", None)


REASON = (
    f"SLURM tests deselected: {SLURM_ENV} is not set "
    f"(run `bash slurm/up && {SLURM_ENV}=1 pytest -m slurm`, or `make test`)"
)
_dropped: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if _dropped:
        terminalreporter.write_line(f"{len(_dropped)} {REASON}", yellow=True)


def pytest_collection_modifyitems(config, items):
    # the SLURM and `slow` tests first (a stable sort: each file's order is kept otherwise), so that no xdist worker
    # is left at the end running one long test while the other has nothing to do
    items.sort(key=lambda item: not ("slurm" in item.keywords or "slow" in item.keywords))
    if os.environ.get(SLURM_ENV) == "1":
        return
    keep = [i for i in items if "slurm" not in i.keywords]
    dropped = [i for i in items if "slurm" in i.keywords]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        _dropped[:] = [i.nodeid for i in dropped]
        items[:] = keep


@pytest.fixture(scope="session")
def slurm_cluster():
    """The cluster from slurm/up; fails (does not skip) when ABLATE_SLURM=1 and it is not UP."""
    from ablate.launch.slurm import slurm_up

    if not slurm_up():
        pytest.fail(f"{SLURM_ENV}=1 but `scontrol ping` does not say UP: run `bash slurm/up` first", pytrace=False)
    return True


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory):
    """ABLATE_CACHE for the whole session: one folder that all xdist workers share (their base folders' parent)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
        import torch

        torch.set_num_threads(1)  # two workers on two cores: one thread each
    mp = pytest.MonkeyPatch()
    mp.setenv("ABLATE_CACHE", str(base / "ablate-cache"))
    yield base / "ablate-cache"
    mp.undo()

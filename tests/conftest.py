"""Shared test setup: the SLURM tests run only against the real local cluster (slurm/up).

`make test` brings the cluster up with `bash slurm/up`, runs pytest with ABLATE_SLURM=1, and takes it
down with `bash slurm/down`. With ABLATE_SLURM=1 a cluster that does not answer is a loud failure
(never a skip); without it the `slurm`-marked tests are deselected and the header says why.
"""

from __future__ import annotations

import os

import pytest

SLURM_ENV = "ABLATE_SLURM"


REASON = (f"SLURM tests deselected: {SLURM_ENV} is not set "
          f"(run `bash slurm/up && {SLURM_ENV}=1 pytest -m slurm`, or `make test`)")
_dropped: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if _dropped:
        terminalreporter.write_line(f"{len(_dropped)} {REASON}", yellow=True)


def pytest_collection_modifyitems(config, items):
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
    from ablate.launch import slurm_up

    if not slurm_up():
        pytest.fail(f"{SLURM_ENV}=1 but `scontrol ping` does not say UP: run `bash slurm/up` first", pytrace=False)
    return True

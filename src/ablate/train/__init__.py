"""One RL run: losses, advantages, filters and length control (pure tensor functions), plus the loop around them.

Kept import-free on purpose: `import ablate.train` must not pull torch or a model in (the CLI imports lazily).
"""


def run(config, run_dir, *, threads: int = 1):
    """Execute one RL run (see `ablate.train.loop.run`); imported lazily so `import ablate.train` stays light."""
    from ablate.train.loop import run as _run

    return _run(config, run_dir, threads=threads)

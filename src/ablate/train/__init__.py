"""One RL run (loop.py, over a session.RunSession and the recipe's trainer: builtin.py, trl_backend.py), its pieces
(build, step, evaluate, checkpoint, feeders, stopping, warmup) and the algorithm core:
losses, advantages, filters and length control as pure tensor functions in name registries.

Kept import-free on purpose: `import ablate.train` must not pull torch or a model in (the CLI imports lazily).
"""


def run(config, run_dir, *, threads: int = 1, stop=None):
    """The default job function (`ablate.train:run`): execute one RL run (see `ablate.train.loop.run`) and return
    how it ended as JSON (`states.RunSummary.to_json`), which the launcher records and hands back through the
    scheduler as any job function's result. Imported lazily so `import ablate.train` stays light."""
    from ablate.train.loop import run as _run

    return _run(config, run_dir, threads=threads, stop=stop).to_json()


def preflight(config, run_dir):
    """Refuse what can be refused before a run writes anything (see `ablate.train.session.preflight`)."""
    from ablate.train.loop import TRAINERS
    from ablate.train.session import preflight as _preflight

    return _preflight(config, run_dir, TRAINERS.get(config.trainer.name))

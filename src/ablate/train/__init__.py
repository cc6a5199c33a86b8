"""One RL run: losses, advantages, filters and length control (pure tensor functions), plus the loop around them.

Kept import-free on purpose: `import ablate.train` must not pull torch or a model in (the CLI imports lazily).
"""

"""Where processes run: the world of a data-parallel run (its ranks), the one way ablate starts a child Python
process (ranks, the local runner, the prune monitor), and which rank broke first. See docs/distributed.md.
"""

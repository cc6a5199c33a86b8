"""`ablate sweep --prune`: the rules that say when a run can stop (rules.py) and the monitor that applies them while
a sweep runs (monitor.py). What they decide, and why, is in docs/run-directory.md, "Pruning".
"""

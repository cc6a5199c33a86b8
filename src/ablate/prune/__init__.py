"""Spending a sweep's compute where it decides something. `ablate sweep --prune`: the rules that say when a run can
stop (rules.py) and the monitor that applies them while a sweep runs (monitor.py); what they decide, and why, is in
docs/run-directory.md, "Pruning". `ablate sweep --decide`: waves of seeds with a look after each (waves.py;
docs/verdicts.md, "Deciding by waves").
"""

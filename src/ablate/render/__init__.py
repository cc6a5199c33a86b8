"""Everything `ablate` prints or draws: tables, lines, number formats, JSON and figures, in one place.

The library computes (fit/, ablate.analysis.verbs, status, plan, sweep); these modules only present what it returns.
Untrusted text (run names, labels, notes read from files) is shown as written, never obeyed: docs/security.md.
The JSON keys: docs/json.md.

    terminal   the console, escaping (esc, cell) and JSON output
    numbers    the number formats of every table
    fit        fit, extrapolate and calibrate: tables and lines
    rank       rank: header, table, notes, --explain
    figures    matplotlib figures (--plot)
    status     `ablate status`: the runs of a sweep, refreshed with --watch; `sweep --follow`'s bar
    plan       `ablate plan`
    runs       `ablate sweep --dry-run`, `show --trainers`, `train` and `init`
    progress   progress bars of long commands
"""

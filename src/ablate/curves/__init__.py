"""every input format read as Curves: sweeps, tables, other tools' logs."""

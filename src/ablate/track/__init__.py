"""Mirrors of a run's metrics to the trackers a team watches (W&B, MLflow, TensorBoard): `--track NAME` on
`ablate train|sweep`. The run directory stays the source of truth; a tracker that fails warns once and is dropped,
never failing or slowing the run (docs/trackers.md)."""

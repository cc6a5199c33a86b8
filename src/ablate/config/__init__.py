"""the run config's schema, its checks, canonical text and ids, and what each trainer supports."""

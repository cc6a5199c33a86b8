"""the files of a sweep and a run (docs/run-directory.md): crash-safe, owner-only, never through a link."""

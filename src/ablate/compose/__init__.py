"""recipes and sweep files composed into RunSpecs (Hydra, treated as data); packaged recipes; `ablate init`."""

"""ablate: ScaleRL-style ablation sweeps for RL post-training of LLMs, and the sigmoid fits that rank them."""

__version__ = "0.1.0"

"""rl-fault-harness: inject known bugs into PPO/GRPO training and record their metric signatures."""

__version__ = "0.1.0"

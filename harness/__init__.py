"""rl-fault-harness: inject known bugs into PPO/GRPO training and record their metric signatures."""

__version__ = "0.2.0"

#: the version of the training code: part of every run's identity, so a store never reuses a run
#: that this code would not reproduce. Bump it whenever a change alters the metrics of a fixed config
#: (tests/agents/test_pinned_metrics.py fails until the bump and the re-pin are made together).
TRAINING_VERSION = "3"

"""Hydra plugin: the rl-fault-harness catalogue sweeper (``hydra/sweeper=catalogue``)."""

"""Shared helpers: compose a config exactly as the CLI does and run it for real."""

from __future__ import annotations

from harness.pipeline.compose import make_experiment
from harness.pipeline.train import RunResult, get_or_train

# Short runs for the fault tests: 16 envs x 64 steps x 12 updates.
SHORT = ["env.total_timesteps=12288", "algo.n_steps=64"]


def train(overrides: list[str]) -> RunResult:
    return get_or_train(make_experiment(overrides))



class SilentDetector:
    """A detector that never raises an alarm."""

    def reset(self, run_info):
        pass

    def update(self, update_index, metrics):
        return []

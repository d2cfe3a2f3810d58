"""Shared helpers: compose a config exactly as the CLI does and run it for real."""

from __future__ import annotations

from harness.pipeline.compose import make_experiment
from harness.pipeline.train import RunResult, get_or_train, healthy_twin

# Short runs for the fault tests: 16 envs x 64 steps x 12 updates.
SHORT = ["env.total_timesteps=12288", "algo.n_steps=64"]

#: the loud end of a fault's severity range, for tests of what its signature looks like when it shows.
#: At their defaults (near the reported cases: excessive_lr 3x as in ml-agents#1237, lr_too_low 10x)
#: 12 short CartPole updates carry no trace on any of 3 seeds (measured); at 100x both fire.
LOUD = {"excessive_lr": ["fault.factor=100"], "lr_too_low": ["fault.factor=100"]}


def train(overrides: list[str]) -> RunResult:
    return get_or_train(make_experiment(overrides))


def train_with_twin(overrides: list[str]) -> tuple[RunResult, RunResult]:
    """The run and its healthy twin as the pipeline makes it (the fault's setting included)."""
    exp = make_experiment(overrides)
    return get_or_train(exp), get_or_train(healthy_twin(exp))



class SilentDetector:
    """A detector that never raises an alarm."""

    def reset(self, run_info):
        pass

    def update(self, update_index, metrics):
        return []

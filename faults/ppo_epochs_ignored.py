"""The configured number of PPO epochs is recorded but only one epoch runs (verl #342)."""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class PPOEpochsIgnored(Fault):
    name = "ppo_epochs_ignored"
    description = "the configured ppo_epochs is recorded but silently ignored: every update runs one epoch"
    provenance = ("verl#342: commit 54051c85 (dynamic batch size, #118) removed the minibatch iterator "
                  "and with it the epoch loop; fixed by verl PR #346")
    acts_on = "effective hyperparameter: n_epochs -> 1"
    expected = ("optimizer_steps_short",)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, n_epochs=1)

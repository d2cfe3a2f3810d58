"""The configured number of PPO epochs is recorded but only one epoch runs (verl #342).

Report read: verl-project/verl#342 "Is ppo_epochs passed correctly to dp_actor.py?": "One of the
commit removed ... dataloader = self._make_minibatch_iterator(data=data). I believe this no
longer passes ppo_epoch to dp_actor.py"; the maintainer: "Great catch! I guess we missed this part
when we refactored", fixed in PR #346 by an outer loop over ppo_epochs. The config keeps saying
ppo_epochs=K while every update runs one epoch (form: overridden).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class PPOEpochsIgnored(Fault):
    name = "ppo_epochs_ignored"
    form = "overridden"
    description = ("the configured number of epochs (PPO n_epochs, GRPO num_iterations) is recorded but "
                   "silently ignored: every update runs one epoch")
    provenance = ("verl#342: commit 54051c85 (dynamic batch size, #118) removed the minibatch iterator "
                  "and with it the epoch loop ('missed this part when we refactored'); fixed by verl PR #346")
    algos = ("ppo", "grpo", "ppo_lm")
    expected = ("optimizer_steps_short",)

    def hyperparams(self, hp: Any) -> Any:
        epochs = "num_iterations" if hasattr(hp, "num_iterations") else "n_epochs"
        return replace(hp, **{epochs: 1})

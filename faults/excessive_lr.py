"""The learning rate is far too high.

Reports read:
- Unity-Technologies/ml-agents#1237 "PPO starts learning and loses everything learned": the reward
  rises, then drops suddenly; the answer: "you've got some crazy high hyperparameters setup and
  especially a really high learning rate".
- DLR-RM/stable-baselines3#324 "Problems with PPO on MiniGrid": "exploding KL divergence and
  explained variance becoming negative ... Lowering the learning rate makes it more stable".
Most often the config itself holds the bad value (form: misconfigured); ``form=overridden`` keeps
the intended value in the config while the update uses the multiplied one.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class ExcessiveLR(Fault):
    factor: float = param(100.0, "multiplier applied to the intended learning rate", gt=1, le=1e9)
    form: str = form_param("misconfigured", "misconfigured", "overridden")

    name = "excessive_lr"
    description = ("the learning rate is multiplied by a large factor (lr * factor): the ratio and KL explode, "
                   "entropy collapses, values may go NaN")
    provenance = ("ml-agents#1237 (reward collapses; 'especially a really high learning rate'); SB3#324 "
                  "('exploding KL divergence and explained variance becoming negative ... Lowering the "
                  "learning rate makes it more stable')")
    backends = ("native", "sb3", "trl")
    expected = ("kl_explodes", "kl_high", "entropy_collapse")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, lr=hp.lr * self.factor)

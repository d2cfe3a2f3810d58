"""The learning rate is far too high.

Reports read:
- Unity-Technologies/ml-agents#1237 "PPO starts learning and loses everything learned": the reward
  rises, then drops suddenly; the config holds learning_rate 1e-3 (ml-agents' default is 3e-4:
  about 3x); the answer: "you've got some crazy high hyperparameters setup and especially a really
  high learning rate".
- DLR-RM/stable-baselines3#324 "Problems with PPO on MiniGrid": "exploding KL divergence and
  explained variance becoming negative ... Lowering the learning rate makes it more stable".
Most often the config itself holds the bad value (form: misconfigured); ``form=overridden`` keeps
the intended value in the config while the update uses the multiplied one. Severity: ``factor``
defaults to 3 (the reported case); the dataset draws 3x-100x. The native PPO default lr (1e-3) is
already ~3-4x SB3's and CleanRL's, so at the default a short CartPole run may show no trace (a
result the catalogue reports, not a reason to make the default louder).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class ExcessiveLR(Fault):
    factor: float = param(3.0, "multiplier applied to the intended learning rate (reports: ~3x; the dataset "
                          "draws 3-100x)", gt=1, le=1e9)
    form: str = form_param("misconfigured", "misconfigured", "overridden")

    name = "excessive_lr"
    description = ("the learning rate is multiplied by a large factor (lr * factor): the ratio and KL explode, "
                   "entropy collapses, values may go NaN")
    provenance = ("ml-agents#1237 (lr 1e-3, ~3x ml-agents' default 3e-4: reward collapses; 'especially a really "
                  "high learning rate'); SB3#324 "
                  "('exploding KL divergence and explained variance becoming negative ... Lowering the "
                  "learning rate makes it more stable')")
    algos = ("ppo", "grpo", "ppo_lm")
    expected = ("kl_explodes", "kl_high", "entropy_collapse")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, lr=hp.lr * self.factor)

"""The discount factor (and GAE lambda) are set to the wrong values: gamma 0.9, lambda 0.99.

Report (read): pytorch/rl PR#3679 ("Wrong gamma default (0.9 -> 0.99): The discount factor was set
to 0.9, causing the agent to heavily discount future rewards and perform significantly worse than
expected on standard benchmarks ... Wrong lmbda default (0.99 -> 0.95): The GAE lambda was
inverted from the standard value"), i.e. gamma and lambda swapped in TorchRL's PPOTrainer
defaults. muPRL mutates gamma for the same reason. Both values are parameters (the severity knob:
how short the effective horizon 1 / (1 - gamma) becomes).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class WrongGamma(Fault):
    form: str = form_param("misconfigured", "misconfigured", "overridden")
    gamma: float = param(0.9, "the discount factor in effect", ge=0, lt=1)
    gae_lambda: float = param(0.99, "the GAE lambda in effect", ge=0, le=1)

    name = "wrong_gamma"
    description = ("gamma 0.9 and lambda 0.99 (the two swapped): a 10-step horizon, so long-term consequences are "
                   "discounted away and values stay small")
    provenance = ("pytorch/rl PR#3679 (TorchRL PPOTrainer defaults gamma 0.9 / lmbda 0.99: \"causing the agent to "
                  "heavily discount future rewards and perform significantly worse\"); muPRL's gamma mutation")
    algos = ("ppo",)
    expected = ('explained_variance_negative',)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, gamma=self.gamma, gae_lambda=self.gae_lambda)

"""The gradient-norm cap is so small that the updates vanish: the policy barely moves.

Report (read): strands-labs/robots PR#2028 (``max_grad_norm`` was never validated; with it at 0,
``clip_grad_norm_`` multiplies every gradient by ``max_norm / total_norm`` and "0 of 34,701
parameters moved" in a seeded 60-step PPO run, while ``validate()`` and ``train()`` reported
success). The cap is the severity knob: at 0 nothing moves (Adam's first moment stays 0); at a tiny
positive cap Adam rescales the clipped gradient back up until it falls below Adam's epsilon (1e-5,
SB3's and CleanRL's), after which the step shrinks with it.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class GradClipTiny(Fault):
    form: str = form_param("misconfigured", "misconfigured", "overridden")
    max_grad_norm: float = param(1e-6, "the gradient-norm cap in effect (0: every gradient is zeroed)", ge=0, le=1e-2)

    name = "grad_clip_tiny"
    description = ("max_grad_norm so small that every clipped gradient falls under Adam's epsilon: updates vanish, "
                   "the ratio stays near 1 and the return flat")
    provenance = ("strands-labs/robots PR#2028 (max_grad_norm 0: \"0 of 34,701 parameters moved\" while training "
                  "reported success)")
    algos = ("ppo",)
    expected = ('approx_kl_tiny',)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, max_grad_norm=self.max_grad_norm)

"""The value-loss coefficient is far too large: the critic's gradient dominates the shared clip.

Synthetic: no report of this exact misconfiguration was read. The closest: ray-project/ray PR#22171
(raising the value-loss coefficient on CartPole: "setting it higher results in bad agents", which
that PR traced to a value-clipping bug). With separate actor and critic networks (CleanRL's and
SB3's MLP layout) Adam normalises each parameter's step, so the coefficient acts mainly through the
global gradient-norm clip, which the value gradient now fills: the policy's share of every clipped
step shrinks. PPO-LM (TRL PPOTrainer-style) has separate policy and value models under one Adam and
one clip as well (TRL's default vf_coef 0.1; ``PPOConfig(vf_coef=10)`` is the factor 100). ``factor`` multiplies the intended vf_coef (the severity knob).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class VfCoefTooLarge(Fault):
    form: str = form_param("misconfigured", "misconfigured", "overridden")
    factor: float = param(100.0, "the intended vf_coef is multiplied by this", gt=1, le=1e4)

    name = "vf_coef_too_large"
    description = ("vf_coef multiplied by a large factor: the value loss fills the loss and the clipped gradient, "
                   "starving the policy's share of each step")
    provenance = ("synthetic: a unit or copy slip in vf_coef; ray PR#22171 notes higher value-loss coefficients "
                  "giving \"bad agents\" on CartPole (there from a value-clipping bug)")
    algos = ("ppo", "ppo_lm")
    expected = ('vf_coef_effective_high',)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, vf_coef=hp.vf_coef * self.factor)

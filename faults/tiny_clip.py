"""A clip range so small that almost every sample is clipped.

Report (read): XueZeyue/DanceGRPO#47 "Question about clip_range": clip_range 1e-4 in its Hunyuan,
Flux and SD recipes, inherited from DDPO ("I fork the 1e-4 from DDPO and leave it unchanged"); a
user training Wan2.1 finds the ratios 1e-3 to 1e-4 away from 1, "so they always exceed clip_range".
A recipe's clip range carried to a model whose ratios move more per step: the form users meet.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class TinyClip(Fault):
    clip_range: float = param(1e-3, "the clip range in effect", gt=0, le=1)
    form: str = form_param("misconfigured", "misconfigured", "overridden")

    name = "tiny_clip"
    description = ("the PPO clip range is tiny (1e-3 by default), so nearly every sample is clipped and the "
                   "policy barely moves")
    provenance = ("DanceGRPO#47 (clip_range 1e-4 copied from DDPO; on Wan2.1 the ratios are 1e-3 to 1e-4 away "
                  "from 1, 'so always exceed clip_range')")
    algos = ("ppo", "grpo", "ppo_lm")
    expected = ("clipfrac_saturated", "approx_kl_tiny")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, clip_range=self.clip_range)

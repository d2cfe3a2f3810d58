"""A clip range so small that almost every sample is clipped."""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, param


@dataclass
class TinyClip(Fault):
    clip_range: float = param(1e-3, "the effective PPO clip range", gt=0, le=1)

    name = "tiny_clip"
    description = "the PPO clip range is tiny, so nearly every sample is clipped and the policy barely moves"
    provenance = ("microsoft/post-training-toolkit heuristics (clipfrac > 0.3); a mis-scaled "
                  "clip_ratio such as 0.2 entered as a percentage (0.002)")
    acts_on = "effective hyperparameter: clip_range"
    backends = ("native", "sb3")
    expected = ("clipfrac_saturated", "approx_kl_tiny")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, clip_range=self.clip_range)

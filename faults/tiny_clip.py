"""A clip range so small that almost every sample is clipped."""

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
    provenance = ("synthetic: a clip range entered in the wrong unit (0.2 as 0.002) or copied from a recipe "
                  "for a different ratio scale; no public report of this exact value was found. The "
                  "post-training-toolkit heuristics flag clipfrac > 0.3 for this symptom")
    backends = ("native", "sb3", "trl")
    expected = ("clipfrac_saturated", "approx_kl_tiny")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, clip_range=self.clip_range)

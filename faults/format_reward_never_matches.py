"""The format reward function's pattern never matches, so one of the summed rewards is always 0.

Form: code bug (in the user's reward function). The total reward can still rise through the other
functions, so the run looks like it is learning: only the per-function log shows it
(``rewards/<fn>/mean`` and ``/std`` identically 0).

Provenance (read): unslothai/unsloth#1761 ("soft_format_reward_func and strict_format_reward_func
rewards are always zero ... However, the total rewards are increasing"; the regex missed newlines
inside the tags, fixed with ``(?s)``/DOTALL); StarsfieldAI/R1-V#124 ("even in the training log you
gave, the format reward is zero"); lsdefine/simple_GRPO#19 (the pattern without ``<|im_end|>``:
"it's always gonna be -1").
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from faults.base import Fault


@dataclass
class FormatRewardNeverMatches(Fault):
    name = "format_reward_never_matches"
    description = ("the format reward's pattern never matches: reward/format is 0 on every completion while the "
                   "total reward still rises through correctness")
    provenance = ("unsloth#1761 (format rewards 'always zero ... the total rewards are increasing'); R1-V#124; "
                  "simple_GRPO#19")
    algos = ("grpo",)
    expected = ("reward_fn_zero",)

    def reward_scores(self, scores: dict[str, Any]) -> dict[str, Any]:
        return {**scores, "format": np.zeros_like(scores["format"])}

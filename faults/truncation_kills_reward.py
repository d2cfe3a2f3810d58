"""The completion length limit is shorter than the answer: every completion is cut before its
answer is closed, so every reward is 0.

Form: misconfigured (``max_new_tokens``, TRL ``max_completion_length``, is in the user's config).
Knob: ``max_new_tokens`` (default 3: the shortest correct completion, ``<a> d d </a> </s>``, needs 5).
With every reward 0, every group is uniform, advantages and loss are 0 and nothing learns.

Provenance (read): greyhaven-ai/autocontext PR #1067 ("truncation zeroed all rewards"; the full
signature: ``completions/mean_length: 256 completions/clipped_ratio: 1 mean_terminated_length: 0
reward: 0 reward_std: 0 frac_reward_zero_std: 1 loss: 0 grad_norm: 0``); huggingface/trl#5697
(the quickstart's default ``max_completion_length=256`` truncates 97-99% of completions: "The
reward is 0 at most steps", clipped_ratio 1.0); jsboige/CoursIA#13596 (min = max = 80 tokens on
40/40 steps, mean_terminated_length 0).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, param


@dataclass
class TruncationKillsReward(Fault):
    max_new_tokens: int = param(3, "the (too short) completion length limit", ge=1, le=64, kind=int)

    name = "truncation_kills_reward"
    form = "misconfigured"
    description = ("the completion length limit (max_new_tokens; TRL max_completion_length) is shorter than the "
                   "answer: every completion is cut before its answer is closed, every reward is 0, groups are "
                   "uniform and the loss is 0")
    provenance = ("autocontext PR #1067 (clipped_ratio 1, mean_terminated_length 0, reward 0, frac_reward_zero_std "
                  "1, loss 0, grad_norm 0); trl#5697 (max_completion_length=256 truncates 97-99%); CoursIA#13596")
    algos = ("grpo",)
    expected = ("completions_truncated", "reward_zero", "groups_uniform")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, max_new_tokens=self.max_new_tokens)

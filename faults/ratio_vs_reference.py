"""The importance ratio is taken against the reference policy instead of the old (rollout) policy.

Form: code bug. ``ratio = exp(logp - logp_ref)`` where PPO/GRPO need ``exp(logp - logp_old)``: the
ratio measures the whole distance travelled since the start checkpoint, not one update's step.
It starts at 1 (the policy is the reference) and drifts away as training proceeds; once it is
outside [1 - eps, 1 + eps] the clipped objective stops the positive-advantage gradient and keeps
the negative one, whose weight is the (huge) ratio. With log-probs summed over many dimensions
(a diffusion or motion model, ``env=highdim``) a small per-dimension drift is a huge summed
log-ratio: the ratio reaches exp(20) (where frameworks clamp it) and the loss 1e8.

Provenance (read): a user's log quoted in rl-fault-harness's own issue 14 (not a public report:
a motion-generation model, 263 joints x 196
frames x 50 steps, log-probs summed: ``mean_ratio 485165216`` = e^20 with ratio =
exp(logp_current - logp_ref), ``kl_penalty 197562.5``, ``mean_log_prob_current -833610`` vs
``_ref -1031172``, ``loss 171551552``; healthy: ``mean_ratio 1.02``, ``kl_penalty 0.0045``);
huggingface/trl PR #2837 (closed, not merged: proposed replacing ``exp(per_token_logps -
per_token_logps.detach())`` by ``exp(per_token_logps - ref_per_token_logps.detach())`` as a
"fix"); ml-explore/mlx-examples PR #1233 review ("when I try using ref model log probs in ratio,
it unbalances the loss"). No public bug report of a trainer shipping this ratio was found: the
public evidence is a proposal (rejected) and a review remark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault


@dataclass
class RatioVsReference(Fault):
    name = "ratio_vs_reference"
    description = ("the importance ratio's denominator is the reference policy's log-prob, not the old policy's: "
                   "the ratio measures the distance from the start checkpoint and explodes as training moves away "
                   "(exp(20) with summed high-dimensional log-probs)")
    provenance = ("a user log quoted in this project's issue 14, not public (motion GRPO: mean_ratio 4.85e8 = e^20, "
                  "kl_penalty 197562, log-probs -8.3e5 vs -1.03e6); public: trl PR #2837 (closed, not merged: the "
                  "ratio against ref_per_token_logps proposed as a 'fix'); mlx-examples PR #1233 review ('using ref "
                  "model log probs in ratio ... unbalances the loss'); no shipped-bug report found")
    algos = ("grpo",)
    expected = ("approx_kl_tracks_kl_ref", "ratio_explodes")

    def behaviour_logprob(self, old: torch.Tensor, sources: dict[str, torch.Tensor]) -> torch.Tensor:
        return sources["reference"]

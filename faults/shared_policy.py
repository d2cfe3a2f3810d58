"""Old and new policy share one set of weights, so the importance ratio is exactly 1.

Reports read (the symptom they quote):
- PrimeIntellect-ai/verifiers PR #320 "fix: num_iterations": "The old_per_token_logps were not
  stored and were set to per_token_logps in compute_loss function, causing the ratio (coef_1) to
  always be 1" -- so num_iterations > 1 re-used each rollout with no trust region.
- tensorforce#312 "Possible bug: prob_ratio always 1": the ratio "is always exactly 1 for me ...
  after going through several mini batches the two distributions should certainly a little
  different"; caching the old distribution's parameters is the fix.
The healthy look-alike (one epoch, one minibatch, where ratio == 1 is correct) is what
minimind#775, ms-swift#4727 and trl#3120 ask about; the maintainers answer that it is on-policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault


@dataclass
class SharedPolicy(Fault):
    name = "shared_policy"
    description = ("old and new policy share one set of weights: the old log-probs are recomputed "
                   "by the live policy at every minibatch, so the ratio is exactly 1 and clipping never acts")
    provenance = ("verifiers PR #320 (old log-probs not cached under num_iterations > 1: 'the ratio (coef_1) to "
                  "always be 1'); tensorforce#312 ('prob_ratio always 1' across minibatches). Look-alike control: "
                  "minimind#775, ms-swift#4727, trl#3120 (ratio == 1 is correct single-pass)")
    algos = ("ppo", "grpo", "ppo_lm")
    expected = ("ratio_pinned", "approx_kl_zero", "clipfrac_zero")

    def old_logprob(self, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        return live.detach()

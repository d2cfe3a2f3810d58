"""Old and new policy share one set of weights, so the importance ratio is exactly 1."""

from dataclasses import dataclass

import torch

from faults.base import Fault


@dataclass
class SharedPolicy(Fault):
    name = "shared_policy"
    description = ("old and new policy share one set of weights: the old log-probs are recomputed "
                   "by the live policy at every minibatch, so the ratio is exactly 1 and clipping never acts")
    provenance = ("PrimeIntellect-ai/verifiers PR #320 (num_iterations broken: old_per_token_logps 'were not "
                  "stored and were set to per_token_logps in compute_loss, causing the ratio (coef_1) to always "
                  "be 1'); look-alike: TRL/verl single-pass old_logp = logp.detach() (trl#3120, verl PR #3119) "
                  "and minimind#775, where the maintainer confirms ratio == 1 is correct for one on-policy step")
    acts_on = "update-loop hook: old_logprob"
    backends = ("native", "sb3")
    expected = ("ratio_pinned", "approx_kl_zero", "clipfrac_zero")

    def old_logprob(self, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        return live.detach()

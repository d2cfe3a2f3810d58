"""Old and new policy share one set of weights, so the importance ratio is exactly 1."""

from dataclasses import dataclass

import torch

from faults.base import Fault


@dataclass
class SharedPolicy(Fault):
    name = "shared_policy"
    description = ("old and new policy share one set of weights: the old log-probs are recomputed "
                   "by the live policy at every minibatch, so the ratio is exactly 1 and clipping never acts")
    provenance = ("minimind#775 (rollout model shares the training weights, ratio == 1); the same "
                  "arithmetic as TRL/verl's single-pass old_logp = logp.detach() (trl#3120, verl PR #3119), "
                  "which is correct only with one epoch and one minibatch")
    acts_on = "update-loop hook: old_logprob"
    backends = ("native", "sb3")
    expected = ("ratio_pinned", "approx_kl_zero", "clipfrac_zero")

    def old_logprob(self, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        return live.detach()

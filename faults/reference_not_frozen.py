"""GRPO's reference policy is the live policy, so the KL penalty measures nothing."""

from dataclasses import dataclass

import torch

from faults.base import Fault


@dataclass
class ReferenceNotFrozen(Fault):
    name = "reference_not_frozen"
    description = ("the KL reference is the live policy instead of a frozen copy: kl_ref stays 0 "
                   "however far the policy moves, and the penalty never pulls it back")
    provenance = ("ref_model = model instead of a frozen copy (a common hand-rolled GRPO bug; "
                  "TRL needs ref_model or adapters disabled, verl a separate ref worker); "
                  "post-training-toolkit KL rules assume a frozen reference")
    acts_on = "update-loop hook: ref_logprob"
    algos = ("grpo",)
    expected = ("kl_ref_zero",)

    def ref_logprob(self, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        return live.detach()

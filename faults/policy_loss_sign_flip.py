"""The clipped policy loss has the wrong sign: gradient descent climbs away from the PPO objective.

``mistake="missing_minus"`` (default): ``policy_loss = min(r A, clip(r) A).mean()`` without the
leading minus, RLMutation's "incorrect loss function" operator on SB3's PPO (FlowSs/RLMutation,
RLMT/mutated_algorithms.py: ``policy_loss = th.min(policy_loss_1, policy_loss_2).mean()``), which
the paper models on faults in users' code. ``mistake="minus_through_min"``: the minus distributed
through the min, ``min(-r A, -clip(r) A)``, so the optimistic bound is taken and clipping stops
guarding the update (jvmncs/safe-grid-agents PR#28: "Discovered a flaw in the policy loss
calculation (negative sign being distributed through a `min`)"). The logged policy loss is the
wrong one, as the buggy code logs it. SB3 computes the surrogate inside PPO.train(): not
expressible there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param


@dataclass
class PolicyLossSignFlip(Fault):
    mistake: str = param("missing_minus", "missing_minus: -(the PPO loss) | minus_through_min: min(-rA, -clip(r)A)",
                         kind=str, choices=("missing_minus", "minus_through_min"))

    name = "policy_loss_sign_flip"
    description = ("the clipped surrogate loss has the wrong sign (or the minus goes through the min): the policy "
                   "moves away from advantageous actions")
    provenance = ("RLMutation incorrect_loss_function on SB3 PPO (policy_loss = th.min(...).mean(), no minus); "
                  "safe-grid-agents PR#28 (\"negative sign being distributed through a `min`\")")
    algos = ("ppo",)
    expected = ('return_falls',)

    def surrogate(self, pg_loss1: torch.Tensor, pg_loss2: torch.Tensor) -> torch.Tensor:
        import torch
        if self.mistake == "missing_minus":
            return -torch.max(pg_loss1, pg_loss2)
        return torch.min(pg_loss1, pg_loss2)

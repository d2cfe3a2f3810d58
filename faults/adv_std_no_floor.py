"""GRPO advantages divided by a group std with no usable floor.

Two variants (``variant``):

- ``loo_residue`` (default; NVIDIA-NeMo/RL PR 4161): a leave-one-out baseline and std, the std
  computed as sqrt(E[x^2] - E[x]^2) in fp32 matmuls, and the division guarded only by
  ``std > 0`` (plus NeMo's 1e-6). A group that splits 7-vs-1 on a reward that is not a dyadic
  fraction (0.3, 0.35, 0.7...) gives the singleton a leave-one-out set of identical rewards
  whose true std is 0 but whose fp32 result is ~1e-4, which passes the guard: that one
  advantage is ~1000-10000x too large, finite. Groups whose std is exactly 0 keep the
  unnormalised r - baseline, as NeMo does.
- ``zero_std``: (r - mean) / std with the epsilon removed: a group whose rewards are exactly
  equal gives 0/0 = NaN and the run diverges.

Provenance (read): NVIDIA-NeMo/RL PR 4161 ("fix: floor GRPO advantage std guard against fp32
leave-one-out residue": "a group that splits 7-vs-1 on a reward that is not exactly
representable in fp32 (0.35, 0.4, 0.3, ...) gives ... ~1.6e-4 ... 0.6 / 1.6e-4 ~ 4000x. Observed
in a 32x8 web-agent GRPO run (advantages/max 7428, loss -26, grad_norm 35 on one step). Binary
(dyadic) rewards cancel exactly and never hit it"); NVIDIA-NeMo/RL PR 4158 (the same spike:
rewards [0, 0.95 x 7] give std 4.6e-4 and a normalised advantage of -2075); NVIDIA-NeMo/RL#1518
(leave-one-out with binary rewards: "normalized advantages can explode to extreme values (e.g.,
+-1,000,000)" from division by a near-zero epsilon). TRL adds 1e-4 to the std and verl 1e-6.
"""

from dataclasses import dataclass, replace
from typing import Any

import torch

from faults.base import Fault, param


def loo_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """NeMo-RL's leave-one-out estimator: baseline and std of the other G - 1 rewards by matmuls
    with (1 - I), std = sqrt(E[x^2] - E[x]^2) in fp32; divide only where std > 0."""
    g = rewards.view(-1, group_size).float()
    others = 1 - torch.eye(group_size)
    n = group_size - 1
    baseline = (g @ others.T) / n
    mean_sq = ((g * g) @ others.T) / n
    std = (mean_sq - baseline.square()).sqrt().nan_to_num(0.0)
    centred = g - baseline
    return torch.where(std > 0, centred / (std + eps), centred).flatten()


@dataclass
class AdvStdNoFloor(Fault):
    variant: str = param("loo_residue", "loo_residue (NeMo leave-one-out std with fp32 residue: finite, huge "
                         "advantages) | zero_std (no epsilon: 0/0 = NaN on a uniform group)", kind=str,
                         choices=("loo_residue", "zero_std"))

    name = "adv_std_no_floor"
    description = ("advantages divided by a group std with no usable floor: fp32 residue in a leave-one-out std "
                   "makes one advantage ~1000x too large (or, variant zero_std, adv_eps -> 0: without epsilon a "
                   "uniform group gives 0/0 = NaN)")
    provenance = ("NVIDIA-NeMo/RL PR 4161 (7-vs-1 split on a non-dyadic reward: std ~1.6e-4, advantage ~4000x, "
                  "advantages/max 7428, grad_norm 35); PR 4158 (-2075); NeMo-RL#1518 (+-1,000,000)")
    algos = ("grpo",)
    backends = ("native", "trl")
    expected = ("adv_nonfinite_or_huge", "nonfinite")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, adv_eps=0.0) if self.variant == "zero_std" else hp

    def group_advantages(self, rewards: torch.Tensor, group_size: int, healthy: torch.Tensor) -> torch.Tensor:
        if self.variant == "zero_std":
            return healthy
        return loo_advantages(rewards, group_size)

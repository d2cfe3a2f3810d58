"""GRPO advantages divided by a group std with no usable floor.

Two variants (``variant``):

- ``loo_residue`` (default; NVIDIA-NeMo/RL PR 4161): NeMo-RL's leave-one-out baseline and std
  (``use_leave_one_out_baseline`` + ``normalize_rewards``), the std computed as
  sqrt(E[x^2] - E[x]^2) in fp32 matmuls, and the division guarded only by ``std > 0`` (plus
  NeMo's 1e-6), as before the PR. A group that splits 7-vs-1 on a reward that is not a dyadic
  fraction (0.3, 0.35, 0.7...) gives the singleton a leave-one-out set of identical rewards
  whose true std is 0 but whose fp32 result is ~1e-4, which passes the guard: that one
  advantage is ~1000-10000x too large, finite. The run and its healthy twin both use the
  leave-one-out estimator (``setting``: ``algo.baseline=leave_one_out``); the twin has the PR's
  fix, the 1e-3 floor under which a group keeps the unnormalised r - baseline, so the two differ
  only by the missing floor. Whether fp32 leaves the residue depends on the matmul kernel (it
  did on AVX2 builds, not on an AVX-512 one): where it does not, the fault leaves no trace.
  TRL's GRPOTrainer has no leave-one-out baseline, so this variant runs natively only.
- ``zero_std``: (r - mean) / std with the epsilon removed: a group whose rewards are exactly
  equal gives 0/0 = NaN and the run diverges.

Provenance (read): NVIDIA-NeMo/RL PR 4161 ("fix: floor GRPO advantage std guard against fp32
leave-one-out residue": "a group that splits 7-vs-1 on a reward that is not exactly
representable in fp32 (0.35, 0.4, 0.3, ...) gives ... ~1.6e-4 ... 0.6 / 1.6e-4 ~ 4000x. Observed
in a 32x8 web-agent GRPO run (advantages/max 7428, loss -26, grad_norm 35 on one step). Binary
(dyadic) rewards cancel exactly and never hit it"; the fix: "Threshold both the GRPO and GDPO
guards at STD_FLOOR = 1e-3 ... Groups under the floor keep the unnormalized reward - baseline");
NVIDIA-NeMo/RL PR 4158 (the same spike: rewards [0, 0.95 x 7] give std 4.6e-4 and a normalised
advantage of -2075); NVIDIA-NeMo/RL#1518 (leave-one-out with binary rewards: "normalized
advantages can explode to extreme values (e.g., +-1,000,000)" from division by a near-zero
epsilon). TRL adds 1e-4 to the std and verl 1e-6.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param


@dataclass
class AdvStdNoFloor(Fault):
    variant: str = param("loo_residue", "loo_residue (NeMo leave-one-out std with fp32 residue: finite, huge "
                         "advantages) | zero_std (no epsilon: 0/0 = NaN on a uniform group)", kind=str,
                         choices=("loo_residue", "zero_std"))

    name = "adv_std_no_floor"
    version = 2            # 2: loo_residue's twin is leave-one-out with NeMo's floor (was: mean / std)
    description = ("advantages divided by a group std with no usable floor: fp32 residue in a leave-one-out std "
                   "makes one advantage ~1000x too large (or, variant zero_std, adv_eps -> 0: without epsilon a "
                   "uniform group gives 0/0 = NaN)")
    provenance = ("NVIDIA-NeMo/RL PR 4161 (7-vs-1 split on a non-dyadic reward: std ~1.6e-4, advantage ~4000x, "
                  "advantages/max 7428, grad_norm 35; fixed by a 1e-3 floor); PR 4158 (-2075); NeMo-RL#1518 "
                  "(+-1,000,000)")
    algos = ("grpo",)
    expected = ("adv_nonfinite_or_huge", "nonfinite")

    def refusal(self, backend: str) -> str | None:
        if backend == "trl" and self.variant == "loo_residue":
            return ("variant loo_residue is NeMo-RL's leave-one-out estimator, which TRL's GRPOTrainer does not have "
                    "(variant zero_std runs on TRL)")
        return None

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"baseline": "leave_one_out", "scale": "group"} if self.variant == "loo_residue" else {}

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, adv_eps=0.0) if self.variant == "zero_std" else hp

    def group_advantages(self, rewards: torch.Tensor, group_size: int, healthy: torch.Tensor) -> torch.Tensor:
        from harness.advantages import loo_advantages
        if self.variant == "zero_std":
            return healthy
        return loo_advantages(rewards, group_size, floor=0.0)       # the guard before PR 4161: std > 0

"""Completions of different prompts are grouped together when the group baseline is computed.

Form: code bug. The rewards are laid out generation-major (P1_G1, P2_G1, ..., P1_G2, ...) while
the advantage code reshapes them prompt-major (``rewards.view(-1, G)``), or a micro-batch smaller
than G splits groups. Two variants (``variant``):

- ``misassigned`` (default): the rewards and the log-probs are reshaped inconsistently, so each
  completion is trained with the advantage computed for another one (in a mixed group): the
  policy gradient is noise and learning stalls;
- ``mixed_groups``: each completion keeps its own reward but its baseline is the mean of a group
  of different prompts (a batch-like baseline): on prompts of similar difficulty this is nearly
  harmless, a faint trace.

Provenance (read): google/tunix PR #820 (micro-batch sizes below num_generations make the
framework "silently reshape rewards/logprobs incorrectly, mixing generations from different
prompts. This leads to invalid advantage computations and results in the model failing to learn
(e.g., 0% accuracy for all metrics)"); dllm-reasoning/d1#19 (one completion per prompt, "the
grouping looks to be formed across the batch rather than K completions for the same prompt").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param


@dataclass
class GroupMisalignment(Fault):
    variant: str = param("misassigned", "misassigned (each completion gets another's advantage) | mixed_groups "
                         "(own reward, baseline of a group of mixed prompts)", kind=str,
                         choices=("misassigned", "mixed_groups"))

    name = "group_misalignment"
    description = ("the group baseline mixes completions of different prompts (a generation-major batch reshaped "
                   "prompt-major): advantages no longer compare answers to the same prompt and learning stalls "
                   "(variant misassigned: each completion is trained with another's advantage; mixed_groups: its "
                   "own reward with a mixed baseline)")
    provenance = ("tunix PR #820 ('mixing generations from different prompts ... the model failing to learn'); "
                  "d1#19")
    algos = ("grpo",)
    expected = ("reward_stalls",)

    @staticmethod
    def generation_major(n: int, group_size: int) -> torch.Tensor:
        import torch
        return torch.arange(n).view(n // group_size, group_size).T.reshape(-1)

    def group_layout(self, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        if self.variant == "misassigned":      # advantages are then read back in the wrong order
            return rewards[self.generation_major(rewards.numel(), group_size)]
        return rewards

    def group_advantages(self, rewards: torch.Tensor, group_size: int, healthy: torch.Tensor) -> torch.Tensor:
        import torch

        from harness.advantages import group_advantages
        if self.variant == "misassigned":
            return healthy
        order = self.generation_major(rewards.numel(), group_size)
        mixed = group_advantages(rewards[order], group_size, "group", 1e-4)
        adv = torch.empty_like(mixed)
        adv[order] = mixed                     # each completion keeps its own reward, with a mixed baseline
        return adv

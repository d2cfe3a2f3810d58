"""GRPO's group-relative advantages: the group std, the mean-baseline estimator and NeMo-RL's
leave-one-out one, on a reward vector. Pure torch, below every package that uses them: the GRPO
trainers (through :mod:`harness.agents.grpo_math`) and the faults that recompute them.

Shapes: ``rewards`` [B] with B = n_prompts x G, prompt-major (the G completions of a prompt are
adjacent).
"""

from __future__ import annotations

import torch


def group_std(groups: torch.Tensor) -> torch.Tensor:
    """Each group's reward std: unbiased (TRL's torch.std) for G > 1; a group of one has std 0."""
    return groups.std(1, correction=1 if groups.shape[1] > 1 else 0)


#: NeMo-RL's floor on the leave-one-out std (PR 4161): a group whose std is below it keeps r - baseline
LOO_STD_FLOOR = 1e-3


def loo_advantages(rewards: torch.Tensor, group_size: int, floor: float = LOO_STD_FLOOR, eps: float = 1e-6,
                   scale: str = "group") -> torch.Tensor:
    """NeMo-RL's leave-one-out estimator (``use_leave_one_out_baseline``, ``normalize_rewards``): each
    completion's baseline and std are those of the other G - 1 rewards, computed by matmuls with
    (1 - I), the std as sqrt(E[x^2] - E[x]^2) in fp32; r - baseline is divided by (std + eps) only
    where std > ``floor`` (1e-3 since NeMo-RL PR 4161; ``floor=0`` is the guard before it)."""
    g = rewards.view(-1, group_size).float()
    others = 1 - torch.eye(group_size)
    n = group_size - 1
    baseline = (g @ others.T) / n
    mean_sq = ((g * g) @ others.T) / n
    std = (mean_sq - baseline.square()).sqrt().nan_to_num(0.0)
    centred = g - baseline
    if scale == "none":
        return centred.flatten()
    return torch.where(std > floor, centred / (std + eps), centred).flatten()


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str, eps: float,
                     baseline: str = "mean") -> torch.Tensor:
    """(r - group mean) / (std + eps), with std over the group (:func:`group_std`; a group of
    one has advantage exactly 0), the batch, or none; ``baseline="leave_one_out"``: NeMo-RL's
    estimator with its std floor (:func:`loo_advantages`)."""
    if baseline == "leave_one_out":
        return loo_advantages(rewards, group_size, scale=scale)
    groups = rewards.view(-1, group_size)
    centred = (groups - groups.mean(1, keepdim=True)).flatten()
    if scale == "none":
        return centred
    if scale == "group":
        std = group_std(groups).repeat_interleave(group_size)
    else:
        std = rewards.std().expand_as(rewards)
    return centred / (std + eps)

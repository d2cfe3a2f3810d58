"""GRPO's maths, in one place for every GRPO trainer (native token and Gaussian, TRL) and every fault
that recomputes a piece of it: group statistics, group-relative advantages (and as the fault's hooks
lay out and change them), KL estimators, importance weights for the sampler/trainer mismatch, the
metrics of that mismatch and of the reward groups, and the budget in updates; plus the sampler's
weight schedule the native trainers share.

Shapes: ``rewards`` [B] with B = n_prompts x G, prompt-major (the G completions of a prompt are
adjacent); per-token tensors [B, T] with a boolean mask of real tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.agents.sampler import Sampler
from harness.config import Experiment
from harness.hooks import Hooks


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


def hooked_group_advantages(rewards: torch.Tensor, hp: Any, hooks: Hooks) -> torch.Tensor:
    """The advantages a GRPO trainer uses: :func:`group_advantages` (``hp.scale``, ``hp.adv_eps``,
    ``hp.baseline``) over the rewards as the group-layout hook groups them, through the
    group-advantages hook."""
    layout = hooks.group_layout(rewards, hp.group_size)
    return hooks.group_advantages(layout, hp.group_size,
                                  group_advantages(layout, hp.group_size, hp.scale, hp.adv_eps, hp.baseline))


def kl_terms(log_ref_ratio: torch.Tensor, estimator: str, clamp: float | None = None) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate from d = log(pi_ref / pi) on the policy's samples:
    k1 = -d, k2 = d^2 / 2, k3 = e^d - d - 1 (TRL's and verl's low_var_kl); ``clamp`` caps d inside
    k3's exp (sequence-level log-probs of many dimensions can overflow)."""
    if estimator == "k1":
        return -log_ref_ratio
    if estimator == "k2":
        return 0.5 * log_ref_ratio.pow(2)
    capped = log_ref_ratio if clamp is None else log_ref_ratio.clamp(max=clamp)
    return capped.exp() - log_ref_ratio - 1


def importance_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                       mode: str, clip_min: float, clip_max: float) -> torch.Tensor:
    """TRL's vLLM importance-sampling correction: per-token or per-sequence ratios
    exp(logp_trainer - logp_sampler), truncated to [clip_min, clip_max] (TIS) or zeroed outside
    it (MIS). Returns weights [B, T] (a sequence weight broadcast to its tokens)."""
    diff = torch.where(mask, trainer_logp - sampler_logp, 0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio = diff.exp()
    low = clip_min if clip_min > 0 else None
    if mode.endswith("truncate"):
        ratio = ratio.clamp(min=low, max=clip_max)
    else:
        ratio = ratio.masked_fill((ratio > clip_max) | (ratio < (low or 0.0)), 0.0)
    return ratio.expand_as(trainer_logp)


def updates_planned(exp: Experiment) -> int:
    """total_timesteps counts token slots: batch x max_new_tokens per update (highdim: samples)."""
    if exp.env.id == "harness/HighDim-v0":
        return exp.env.total_timesteps // exp.algo.batch_size
    return exp.env.total_timesteps // (exp.algo.batch_size * exp.algo.max_new_tokens)


def sampler_mismatch(log_r: torch.Tensor, clamp: float | None = None) -> dict[str, float]:
    """The sampler/trainer gap metrics from ``log_r`` = log(pi_trainer / pi_sampler) over the real
    tokens (samples) the sampler generated, trainer at the rollout weights; ``clamp`` caps log_r
    before exp (sequence-level log-probs of many dimensions can overflow)."""
    ratio = (log_r if clamp is None else log_r.clamp(max=clamp)).exp()
    return {
        "sampler_logp_diff_mean": float(log_r.abs().mean()),
        "sampler_logp_diff_max": float(log_r.abs().max()),
        "sampler_ratio_oob": float(((ratio < 0.9) | (ratio > 1.1)).float().mean()),
        "kl_sampler": float((ratio - 1 - log_r).mean()),
    }


def group_metrics(rewards: torch.Tensor, advantages: torch.Tensor, group_size: int) -> dict[str, float]:
    """The reward and advantage metrics of one batch: ``rewards`` [B] prompt-major (the true groups,
    whatever layout a fault gave the advantage computation), ``advantages`` [B]."""
    groups = rewards.view(-1, group_size)
    return {
        "reward_mean": float(rewards.mean()),
        "return_mean": float(rewards.mean()),
        "return_std": float(rewards.std()),
        "adv_mean": float(advantages.mean()),
        "adv_std": float(advantages.std()),
        "reward_std": float(rewards.std()),
        "group_reward_std_mean": float(group_std(groups).mean()),
        "frac_reward_zero_std": float((groups.amax(1) == groups.amin(1)).float().mean()),
    }


def refresh_sampler(sampler: Sampler, policy: nn.Module, update: int, hp: Any, hooks: Hooks) -> None:
    """The sampler's weights before update ``update``'s rollout: cast to this update's precision, the
    trainer's current weights queued, and every ``sync_every`` updates (as the sync-sampler hook
    decides) the version ``sampler_lag`` updates old loaded."""
    sampler.set_precision(hp.sampler_precision)
    sampler.push(policy, update, hp.sampler_lag)
    if hooks.sync_sampler(update, due=update % hp.sync_every == 0):
        sampler.sync()

"""GRPO's maths, in one place for every GRPO trainer (native token and Gaussian, TRL) and every fault
that recomputes a piece of it: group-relative advantages as the fault's hooks lay out and change them
(the estimators themselves are in :mod:`harness.advantages`, below the faults that also use them), KL
estimators, importance weights for the sampler/trainer mismatch, the metrics of that mismatch and of
the reward groups, and the budget in updates; plus the sampler's weight schedule the native trainers
share.

Shapes: ``rewards`` [B] with B = n_prompts x G, prompt-major (the G completions of a prompt are
adjacent); per-token tensors [B, T] with a boolean mask of real tokens.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from harness.advantages import group_advantages, group_std
from harness.agents.sampler import Sampler
from harness.config import Experiment
from harness.hooks import Hooks


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

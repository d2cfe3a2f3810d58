"""GRPO with a Gaussian policy over many dimensions (``env=highdim``), one metrics row per update.

The same loop as the token GRPO (harness/agents/grpo.py), with a sample x in R^D instead of a
completion: the sampler copy draws G samples per prompt from N(mu(prompt), noise_std^2 I), the
env scores them, the trainer recomputes the log-probs at the rollout weights, and the clipped
surrogate with a k3 KL penalty to the frozen start policy is taken on *sequence-level* log-probs
summed over all D dimensions (as diffusion-model GRPO does per denoising step). Per-"token"
metrics (ratio, KL, sampler gap) are therefore per sample.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

import torch
from torch import nn

from harness.agents.core import MinibatchEval, begin_update, ppo_update
from harness.agents.grpo_math import (
    group_metrics,
    hooked_group_advantages,
    kl_terms,
    refresh_sampler,
    sampler_mismatch,
    updates_planned,
)
from harness.agents.sampler import Sampler
from harness.config import Experiment
from harness.envs import make_vec_env

LOG_2PI = math.log(2 * math.pi)
ENV_ID = "harness/HighDim-v0"


class GaussianGenerator(nn.Module):
    """mu = scale (W c + b) (zero at the start), fixed isotropic noise; log-probs summed over
    dimensions. ``scale`` plays the part of a network's output scale: one optimizer step of lr
    moves each mean by about lr x scale x (|c|_1 + 1)."""

    def __init__(self, cond_dim: int, dim: int, noise_std: float, scale: float):
        super().__init__()
        self.mean = nn.Linear(cond_dim, dim)
        nn.init.zeros_(self.mean.weight)
        nn.init.zeros_(self.mean.bias)
        self.noise_std, self.scale = noise_std, scale

    def mu(self, cond: torch.Tensor) -> torch.Tensor:
        return (self.scale * self.mean(cond.to(self.mean.weight.dtype))).float()

    def logprob(self, cond: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        mu = self.mu(cond)
        z = (x - mu) / self.noise_std
        return (-0.5 * z.pow(2) - math.log(self.noise_std) - 0.5 * LOG_2PI).sum(-1)

    @torch.no_grad()
    def sample(self, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.mu(cond)
        x = mu + self.noise_std * torch.randn_like(mu)
        return x, self.logprob(cond, x)

    def entropy(self, n: int) -> torch.Tensor:
        dim = self.mean.out_features
        return torch.full((n,), dim * (0.5 + 0.5 * LOG_2PI + math.log(self.noise_std)))


#: the hooks this loop calls (a test records them on a run): a fault acting anywhere else (the token
#: task's completion masks, reward functions, sampler logits, reference weights) is refused on env=highdim
REACHED = frozenset({"behaviour_logprob", "group_advantages", "group_layout", "hyperparams", "loss", "micro_share",
                     "microbatch_backward", "old_logprob", "optimizer_step", "ratio_metrics", "ref_logprob",
                     "scheduled_lr", "surrogate", "sync_sampler", "wrap_env", "zero_grad"})


def train(exp: Experiment) -> Iterator[dict]:
    """Native GRPO on ``env=highdim``, one row of canonical metrics per update: the token loop of
    :func:`harness.agents.grpo.train` with one sample per "completion". Each update: the sampler's
    weights (:func:`harness.agents.grpo_math.refresh_sampler`), ``group_size`` samples of each
    prompt scored by the env, the trainer's and reference's log-probs at the rollout weights and
    the old log-probs, group-relative advantages, and the clipped-surrogate update with a KL penalty
    to the start policy. The row holds the reward and advantage metrics, the mean log-probs of
    trainer and reference, the sampler/trainer mismatch, the update metrics and ``steps``."""
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)
    B = cfg.batch_size
    envs = make_vec_env(exp.env, B, fault)
    task = envs.unwrapped
    policy = GaussianGenerator(task.cond_dim, task.dim, task.noise_std, task.mean_scale)
    reference = copy.deepcopy(policy).requires_grad_(False)
    sampler = Sampler(policy, cfg.sampler_precision, cfg.sampler_lag)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, fused=True)
    env_step = 0

    n_updates = updates_planned(exp)

    try:
        for update in range(n_updates):
            hooks, hp = begin_update(fault, cfg, update, n_updates)

            # ---- the sampler's weights, then G samples per prompt -------------------------
            refresh_sampler(sampler, policy, update, hp, hooks)
            obs, _ = envs.reset(seed=exp.seed if update == 0 else None, options={"group_size": hp.group_size})
            cond = torch.as_tensor(obs).clone()
            x, sampler_logp = sampler.model.sample(cond)
            _, rewards, _, _, _ = envs.step(x.numpy())
            env_step += B

            # ---- the trainer's log-probs at the rollout weights, the reference's ---------
            with torch.no_grad():
                trainer_logp = policy.logprob(cond, x)
                ref_logp = reference.logprob(cond, x)
            ref_logp = hooks.ref_logprob(ref_logp, trainer_logp, phase="rollout")
            mismatch = sampler_mismatch(trainer_logp - sampler_logp, clamp=80)
            old_logp = sampler_logp if hp.use_sampler_logprobs else trainer_logp
            old_logp = hooks.behaviour_logprob(old_logp, {"sampler": sampler_logp, "trainer": trainer_logp,
                                                          "reference": ref_logp})

            # ---- group-relative advantages -------------------------------------------------
            r = torch.from_numpy(rewards)
            advantages = hooked_group_advantages(r, hp, hooks)
            batch = {"cond": cond, "x": x, "logp": old_logp, "ref_logp": ref_logp, "adv": advantages}

            # ---- clipped surrogate on summed log-probs, k3 KL penalty to the start policy --
            def evaluate(mb: dict[str, torch.Tensor]) -> MinibatchEval:
                logp = policy.logprob(mb["cond"], mb["x"])
                log_ref_ratio = hooks.ref_logprob(mb["ref_logp"], logp, phase="update") - logp
                kl = kl_terms(log_ref_ratio, "k3", clamp=80)
                penalty = kl if hp.kl_estimator == "k3" else kl_terms(log_ref_ratio, hp.kl_estimator)
                if hp.kl_is_weight:                     # TRL use_bias_correction_kl
                    penalty = penalty * (logp - mb["logp"]).clamp(max=20).exp()
                return MinibatchEval(logp=logp, entropy=policy.entropy(len(logp)), loss=hp.beta * penalty.mean(),
                                     metrics={"kl_ref": kl.mean()})

            update_metrics, steps = ppo_update(policy, optimizer, batch, hp, hooks, evaluate, generator)

            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                **group_metrics(r, advantages, hp.group_size),
                "logp_mean": float(trainer_logp.mean()),
                "logp_ref_mean": float(ref_logp.mean()),
                **mismatch,
                **update_metrics,
                "steps": steps,
            }
    finally:
        envs.close()

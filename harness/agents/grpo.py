"""Native GRPO on the token environment, yielding one row of canonical metrics per update.

Read top to bottom: generate G completions for each prompt -> score -> group-relative
advantages -> the clipped-surrogate update shared with PPO (harness/agents/core.py), with
a k3 KL penalty to a frozen reference policy (as TRL and verl's low_var_kl).

Generation steps a gymnasium vector env (harness/envs/toyseq.py) with one env per
completion; an env is reset for every batch with ``group_size`` envs per prompt, and the
steps after a completion ends are masked out (the env's own autoreset is never used).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import numpy as np
import torch

from harness.agents.core import Evaluation, aggregate, masked_mean, ppo_update
from harness.agents.networks import TokenPolicy
from harness.config import Experiment
from harness.envs import make_vec_env


def group_std(groups: torch.Tensor) -> torch.Tensor:
    """Each group's reward std: unbiased (TRL's torch.std) for G > 1; a group of one has std 0."""
    return groups.std(1, correction=1 if groups.shape[1] > 1 else 0)


def group_advantages(rewards: torch.Tensor, group_size: int, scale: str, eps: float) -> torch.Tensor:
    """(r - group mean) / (std + eps), with std over the group (:func:`group_std`; a group of
    one has advantage exactly 0), the batch, or none."""
    groups = rewards.view(-1, group_size)
    centred = (groups - groups.mean(1, keepdim=True)).flatten()
    if scale == "none":
        return centred
    if scale == "group":
        std = group_std(groups).repeat_interleave(group_size)
    else:
        std = rewards.std().expand_as(rewards)
    return centred / (std + eps)


def updates_planned(exp: Experiment) -> int:
    """total_timesteps counts token slots: batch x max_len per update."""
    max_len = exp.env.kwargs.get("max_len", 6)
    return exp.env.total_timesteps // (exp.algo.batch_size * max_len)


def train(exp: Experiment) -> Iterator[dict]:
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    B = cfg.batch_size                                    # completions per batch
    envs = make_vec_env(exp.env, B, fault)
    token_env = envs.unwrapped
    eos, max_len = token_env.eos, token_env.max_len
    policy = TokenPolicy(envs.single_observation_space.shape[0], token_env.vocab, cfg.hidden)
    reference = copy.deepcopy(policy).requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, fused=True)

    obs_buf = torch.zeros((max_len, B, envs.single_observation_space.shape[0]))
    tok_buf = torch.zeros((max_len, B), dtype=torch.long)
    logp_buf, ref_buf = torch.zeros((max_len, B)), torch.zeros((max_len, B))
    mask_buf = torch.zeros((max_len, B), dtype=torch.bool)
    env_step = 0

    try:
        for update in range(updates_planned(exp)):
            hooks, hp = fault.begin_update(update, cfg)

            # ---- generate G completions per prompt --------------------------------
            obs, _ = envs.reset(seed=exp.seed if update == 0 else None,
                                options={"group_size": hp.group_size})
            rewards = np.zeros(B, dtype=np.float32)
            lengths = np.zeros(B, dtype=np.int64)
            cut = np.zeros(B, dtype=bool)
            alive = np.ones(B, dtype=bool)
            mask_buf.zero_()
            for t in range(max_len):
                obs_t = torch.as_tensor(obs)
                token, logp = policy.act(obs_t)
                ref_logp = hooks.ref_logprob(reference.logprob(obs_t, token), logp)
                obs_buf[t], tok_buf[t], logp_buf[t], ref_buf[t] = obs_t, token, logp, ref_logp
                mask_buf[t] = torch.from_numpy(alive)

                obs, reward, terminated, truncated, _ = envs.step(token.numpy())
                rewards += reward * alive
                ended = (terminated | truncated) & alive
                lengths[ended] = t + 1
                cut |= ended & (token.numpy() != eos)
                alive &= ~ended
                if not alive.any():
                    break
            T = t + 1
            env_step += int(lengths.sum())

            # ---- group-relative advantages ----------------------------------------
            r = torch.from_numpy(rewards)
            advantages = group_advantages(r, hp.group_size, hp.scale, hp.adv_eps)
            groups = r.view(-1, hp.group_size)
            reward_std_per_group = group_std(groups)
            mask = mask_buf[:T].T.contiguous()
            seq_logp = (logp_buf[:T].T * mask).sum(1)
            seq_ref_logp = (ref_buf[:T].T * mask).sum(1)
            batch = {"obs": obs_buf[:T].transpose(0, 1).contiguous(), "tokens": tok_buf[:T].T.contiguous(),
                     "logp": logp_buf[:T].T.contiguous(), "ref_logp": ref_buf[:T].T.contiguous(),
                     "mask": mask, "adv": advantages}

            # ---- clipped-surrogate update with a KL penalty to the reference ------
            def evaluate(mb: dict[str, torch.Tensor]) -> Evaluation:
                logp, entropy = policy.evaluate(mb["obs"], mb["tokens"])
                log_ref_ratio = hooks.ref_logprob(mb["ref_logp"], logp) - logp
                kl = log_ref_ratio.exp() - log_ref_ratio - 1          # k3, per token
                return Evaluation(logp=logp, entropy=entropy,
                                  loss=hp.beta * aggregate(kl, mb["mask"], hp.loss_agg),
                                  metrics={"kl_ref": masked_mean(kl, mb["mask"])})

            update_metrics, steps = ppo_update(policy, optimizer, batch, hp, hooks, evaluate, generator)

            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                "reward_mean": float(r.mean()),
                "return_mean": float(r.mean()),
                "return_std": float(r.std()),
                "length_mean": float(lengths.mean()),
                "adv_mean": float(advantages.mean()),
                "adv_std": float(advantages.std()),
                "reward_std": float(r.std()),
                "group_reward_std_mean": float(reward_std_per_group.mean()),
                "frac_reward_zero_std": float((groups.amax(1) == groups.amin(1)).float().mean()),
                "response_clip_ratio": float(cut.mean()),
                "logp_mean": float(seq_logp.mean()),
                "logp_ref_mean": float(seq_ref_logp.mean()),
                **update_metrics,
                "steps": steps,
            }
    finally:
        envs.close()

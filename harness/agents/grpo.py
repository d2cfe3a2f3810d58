"""Native GRPO as LLM RL runs it, yielding one row of canonical metrics per update.

Read top to bottom: sync the sampler's weights (on its schedule) -> the sampler generates G
completions per prompt (its own precision, temperature, top-k/top-p; log-probs recorded) ->
replay them through the task env for the rewards (several reward functions, summed) -> the
trainer recomputes old and reference log-probs at the rollout weights -> sampler/trainer
mismatch metrics and optional importance-sampling correction -> group-relative advantages ->
the clipped-surrogate update shared with PPO (harness/agents/core.py), with a KL penalty to
the frozen start checkpoint (harness/agents/sft.py).

The policy (``model=transformer``: a Llama-architecture causal transformer; ``model=mlp``: the
v1 MLP) starts from the supervised warm-up, which is also the reference. ``env=highdim`` runs
GRPO with a Gaussian policy over many dimensions instead (harness/agents/grpo_gaussian.py).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

import numpy as np
import torch

from harness.agents import sft
from harness.agents.core import Evaluation, aggregate, masked_mean, ppo_update
from harness.agents.lm import build_model, completion_logits, token_logprobs
from harness.agents.sampler import Sampler
from harness.config import Experiment
from harness.envs import make_vec_env
from harness.envs.toyseq import REWARD_FNS


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


def kl_terms(log_ref_ratio: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL(policy || reference) estimate from d = log(pi_ref / pi) on the policy's samples:
    k1 = -d, k2 = d^2 / 2, k3 = e^d - d - 1 (TRL's and verl's low_var_kl)."""
    if estimator == "k1":
        return -log_ref_ratio
    if estimator == "k2":
        return 0.5 * log_ref_ratio.pow(2)
    return log_ref_ratio.exp() - log_ref_ratio - 1


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


def replay(envs, tokens: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Step the task env through the generated completions: (reward the learner receives, each
    reward function's value, tokens the env consumed per completion)."""
    b, t_max = tokens.shape
    rewards = np.zeros(b, dtype=np.float32)
    scores = {name: np.zeros(b, dtype=np.float32) for name in REWARD_FNS}
    consumed = np.zeros(b, dtype=np.int64)
    alive = np.ones(b, dtype=bool)
    for t in range(t_max):
        _, reward, terminated, truncated, info = envs.step(tokens[:, t])
        rewards += reward * alive
        for name in REWARD_FNS:
            scores[name] += info[f"reward/{name}"] * alive
        ended = (terminated | truncated) & alive
        consumed[ended] = t + 1
        alive &= ~ended
        if not alive.any():
            break
    return rewards, scores, consumed


def train(exp: Experiment) -> Iterator[dict]:
    if exp.env.id == "harness/HighDim-v0":
        from harness.agents import grpo_gaussian
        yield from grpo_gaussian.train(exp)
        return
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    B = cfg.batch_size                                    # completions per batch
    envs = make_vec_env(exp.env, B, fault)
    task = envs.unwrapped
    vocab = task.vocab
    weights = task.reward_weights
    state, _ = sft.load_checkpoint(exp)                   # the supervised warm-up (cached)
    policy = build_model(cfg, vocab.size, task.prompt_width, task.max_len, vocab)
    policy.load_state_dict(state)
    reference = copy.deepcopy(policy).requires_grad_(False)
    sampler = Sampler(policy, cfg.sampler_precision, cfg.sampler_lag)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, fused=True)
    env_step = 0

    try:
        for update in range(updates_planned(exp)):
            hooks, hp = fault.begin_update(update, cfg)

            # ---- the sampler's weights: every sync_every updates, lag versions old ------
            sampler.set_precision(hp.sampler_precision)
            sampler.push(policy, update, hp.sampler_lag)
            if hooks.sync_sampler(update, due=update % hp.sync_every == 0):
                sampler.sync()

            # ---- generate G completions per prompt -----------------------------------
            envs.reset(seed=exp.seed if update == 0 else None,
                       options={"group_size": hp.group_size, "max_len": hp.max_new_tokens})
            prompts = torch.tensor(task.prompts)                 # a copy: the env autoresets in place
            prompt_mask = prompts != vocab.pad
            gen = sampler.generate(prompts, prompt_mask, hp.max_new_tokens, vocab.eos, vocab.pad,
                                   hp.temperature, hp.top_k, hp.top_p, hooks)
            completions = gen.tokens
            env_step += int(gen.lengths.sum())

            # ---- rewards: the completions replayed through the task env ---------------
            rewards, scores, consumed = replay(envs, completions.numpy())
            assert (consumed == gen.lengths.numpy()).all(), "sampler and env disagree on completion ends"
            changed = hooks.reward_scores(dict(scores))
            for name, w in weights.items():        # a reward function a fault changed changes the sum
                rewards = rewards + np.float32(w) * (changed[name] - scores[name])
            scores = changed

            # ---- the trainer's log-probs at the rollout weights, the reference's -------
            mask = hooks.completion_mask(gen.mask, completions, vocab.eos, vocab.pad)
            shift = hooks.logit_shift(1)
            t_train = hooks.logprob_temperature(hp.temperature, "trainer")
            with torch.no_grad():
                policy.train(hooks.dropout_active("old"))
                trainer_logp, _ = token_logprobs(
                    completion_logits(policy, prompts, prompt_mask, completions, mask, shift), completions, t_train)
                reference.train(hooks.dropout_active("ref"))
                ref_logp, _ = token_logprobs(
                    completion_logits(reference, prompts, prompt_mask, completions, mask, shift), completions, t_train)
            ref_logp = hooks.ref_logprob(ref_logp, trainer_logp, phase="rollout")

            # ---- sampler vs trainer, over the tokens the sampler generated -------------
            real = gen.mask
            log_r = (trainer_logp - gen.logp)[real]          # log(pi_trainer / pi_sampler)
            sampler_ratio = log_r.exp()
            mismatch = {
                "sampler_logp_diff_mean": float(log_r.abs().mean()),
                "sampler_logp_diff_max": float(log_r.abs().max()),
                "sampler_ratio_oob": float(((sampler_ratio < 0.9) | (sampler_ratio > 1.1)).float().mean()),
                "kl_sampler": float((sampler_ratio - 1 - log_r).mean()),
            }
            old_logp = gen.logp if hp.use_sampler_logprobs else trainer_logp
            old_logp = hooks.behaviour_logprob(old_logp, {"sampler": gen.logp, "trainer": trainer_logp,
                                                          "reference": ref_logp})

            # ---- group-relative advantages ----------------------------------------------
            r = torch.from_numpy(rewards)
            layout = hooks.group_layout(r, hp.group_size)
            advantages = hooks.group_advantages(
                layout, hp.group_size, group_advantages(layout, hp.group_size, hp.scale, hp.adv_eps))
            groups = r.view(-1, hp.group_size)               # the true groups, for the metrics
            token_adv = advantages[:, None].expand_as(trainer_logp)
            if hp.is_correction != "none":                  # TIS / MIS on the sampler's mismatch
                token_adv = token_adv * importance_weights(trainer_logp, gen.logp, real & mask,
                                                           hp.is_correction, hp.is_clip_min, hp.is_clip_max)
            batch = {"prompts": prompts, "prompt_mask": prompt_mask, "tokens": completions, "mask": mask,
                     "logp": old_logp, "ref_logp": ref_logp, "adv": token_adv.contiguous()}

            # ---- clipped-surrogate update with a KL penalty to the reference ------------
            def evaluate(mb: dict[str, torch.Tensor]) -> Evaluation:
                policy.train()
                logits = completion_logits(policy, mb["prompts"], mb["prompt_mask"], mb["tokens"], mb["mask"], shift)
                logp, entropy = token_logprobs(logits, mb["tokens"], t_train)
                log_ref_ratio = hooks.ref_logprob(mb["ref_logp"], logp, phase="update") - logp
                kl = log_ref_ratio.exp() - log_ref_ratio - 1                    # k3, the logged kl_ref
                penalty = kl if hp.kl_estimator == "k3" else kl_terms(log_ref_ratio, hp.kl_estimator)
                if hp.kl_is_weight:                     # TRL use_bias_correction_kl
                    penalty = penalty * (logp - mb["logp"]).exp()
                return Evaluation(logp=logp, entropy=entropy,
                                  loss=hp.beta * aggregate(penalty, mb["mask"], hp.loss_agg),
                                  metrics={"kl_ref": masked_mean(kl, mb["mask"])})

            update_metrics, steps = ppo_update(policy, optimizer, batch, hp, hooks, evaluate, generator)

            lengths = gen.lengths.float()
            terminated = lengths[gen.ended]
            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                "reward_mean": float(r.mean()),
                "return_mean": float(r.mean()),
                "return_std": float(r.std()),
                "length_mean": float(lengths.mean()),
                "terminated_length_mean": float(terminated.mean()) if len(terminated) else math.nan,
                "adv_mean": float(advantages.mean()),
                "adv_std": float(advantages.std()),
                "reward_std": float(r.std()),
                "group_reward_std_mean": float(group_std(groups).mean()),
                "frac_reward_zero_std": float((groups.amax(1) == groups.amin(1)).float().mean()),
                "response_clip_ratio": float((~gen.ended).float().mean()),
                "logp_mean": float((trainer_logp * mask).sum(1).mean()),
                "logp_ref_mean": float((ref_logp * mask).sum(1).mean()),
                **mismatch,
                **{f"reward/{name}": float(values.mean()) for name, values in scores.items()},
                **update_metrics,
                "steps": steps,
            }
    finally:
        envs.close()

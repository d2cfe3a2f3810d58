"""Native PPO on the token task with a value model, RLHF-style (TRL's PPOTrainer, verl's PPO with a
critic), yielding one row of canonical metrics per update.

Read top to bottom: the sampler generates one completion per prompt (``group_size``; log-probs
recorded) -> replay them through the task env for the score, minus ``missing_eos_penalty`` for a
completion without EOS -> the policy's (old), the reference's log-probs and the value model's values
at the rollout weights -> the per-token reward as TRL builds it: ``-kl_coef x (logp - logp_ref)`` at
every token, the score added at the last real token -> per-token GAE over the completion (the same
GAE hook as PPO's rollout; the last token terminates) -> advantages whitened over the batch's real
tokens -> the clipped-surrogate update shared with PPO and GRPO (harness/agents/core.py), whose
``evaluate`` adds ``vf_coef x 0.5 x`` the clipped value loss -> the KL controller's update.

Tokens after the first EOS are padding: they are outside the completion mask, so out of the policy
loss, the value loss, the KL and the GAE. The policy is GRPO's transformer, started from the same
supervised warm-up (harness/agents/sft.py), whose frozen copy is the reference. The value model is a
separate copy of the warm-up's trunk with a scalar head (TRL's separate value model), trained by the
same optimizer as the policy (its own parameter group: ``vf_lr``), gradients clipped together, as
TRL's PolicyAndValueWrapper.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from harness.agents.base import Trainer
from harness.agents.core import MinibatchEval, begin_update, masked_mean, ppo_update
from harness.agents.grpo import TOKEN_ENV_ID, replay, warm_started
from harness.agents.grpo_math import updates_planned
from harness.agents.lm import completion_logits, token_logprobs
from harness.agents.sampler import Generation, Sampler
from harness.config import ConfigError, EnvConfig, Experiment
from harness.envs import make_vec_env
from harness.hooks import Hooks, overridden

#: every hook the loop calls: a fault acting anywhere else would run silently unapplied, so it is refused
REACHED = ("wrap_env", "hyperparams", "scheduled_lr", "reference_weights", "sync_sampler", "sampler_logits",
           "logprob_temperature", "dropout_active", "reward_scores", "completion_mask", "logit_shift",
           "ref_logprob", "behaviour_logprob", "gae", "advantages", "old_logprob", "surrogate", "loss",
           "micro_share", "microbatch_backward", "zero_grad", "optimizer_step", "ratio_metrics")


def value_model_from(policy: nn.Module) -> nn.Module:
    """A copy of the policy's trunk (embeddings, blocks, final norm) with a scalar head in place of the
    LM head: ``forward`` gives one value per position [B, S, 1]. The head is HF's initialisation,
    normal(0, 0.02), with a zero bias."""
    value = copy.deepcopy(policy)
    head = nn.Linear(policy.spec.d_model, 1)
    nn.init.normal_(head.weight, std=0.02)
    nn.init.zeros_(head.bias)
    value.lm_head = head
    return value


def completion_values(value_model: nn.Module, prompts: torch.Tensor, prompt_mask: torch.Tensor,
                      completions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The value of each completion token's state [B, T]: the head's output at the position whose
    logits predict the token (the prompt and the tokens before it; TRL ``full_value[:, context - 1:-1]``),
    0 outside ``mask``."""
    values = completion_logits(value_model, prompts, prompt_mask, completions, mask).squeeze(-1)
    return torch.where(mask, values, 0.0)


@dataclass
class KLController:
    """The KL coefficient of the reward: fixed, or Ziegler et al.'s adaptive controller (old TRL's
    ``AdaptiveKLController``) when ``target`` is set: after each batch of ``n`` completions whose
    summed KL to the reference averaged ``kl``, ``value *= 1 + clip(kl / target - 1, +-0.2) x n / horizon``."""

    value: float
    target: float | None = None
    horizon: float = 10000.0

    def update(self, kl: float, n: int) -> None:
        if self.target is not None:
            error = float(np.clip(kl / self.target - 1, -0.2, 0.2))
            self.value *= 1 + error * n / self.horizon


def scores_of(envs, gen: Generation, weights: dict[str, float], hooks: Hooks,
              missing_eos_penalty: float | None) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
    """Each completion's score: the completions replayed through the task env (its summed reward functions,
    each through the reward-scores hook as GRPO's), minus ``missing_eos_penalty`` where no EOS closed it
    (TRL). Returns the scores [B] and each reward function's values."""
    rewards, fns, consumed = replay(envs, gen.tokens.numpy())
    assert (consumed == gen.lengths.numpy()).all(), "sampler and env disagree on completion ends"
    changed = hooks.reward_scores(dict(fns))
    for name, w in weights.items():        # a reward function a fault changed changes the sum
        rewards = rewards + np.float32(w) * (changed[name] - fns[name])
    score = torch.from_numpy(rewards).float()
    if missing_eos_penalty is not None:
        score = torch.where(gen.ended, score, score - missing_eos_penalty)
    return score, changed


def token_rewards(score: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor,
                  kl_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's per-token reward [B, T]: the non-score reward ``-kl_coef x kl`` at every real token, the
    score added at the last real token (EOS, or the last generated token of a cut completion); 0 on
    padding. Returns (rewards, non-score rewards)."""
    non_score = torch.where(mask, -kl_coef * kl, 0.0)
    rewards = non_score.clone()
    last = mask.sum(1).clamp(min=1) - 1
    rewards[torch.arange(len(score)), last] += score
    return rewards, non_score


def token_gae(hooks: Hooks, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
              lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token GAE over each completion through PPO's GAE hook (a completion is an episode of its
    tokens, laid out [T, B]): the last real token terminates it (no bootstrap), padding carries nothing.
    Returns (advantages, returns = advantages + values), both 0 on padding; the advantages then pass the
    advantage hook, as PPO's."""
    b, t = rewards.shape
    last = torch.nn.functional.one_hot(mask.sum(1).clamp(min=1) - 1, t).bool() & mask
    terminated = last.T.numpy().astype(np.float32)
    adv = hooks.gae(rewards.T.numpy(), values.T.numpy(), np.zeros(b, dtype=np.float32), terminated,
                    np.zeros_like(terminated), mask.T.numpy(), gamma, lam)
    adv = torch.where(mask, torch.from_numpy(np.ascontiguousarray(adv.T)).float(), 0.0)
    returns = adv + values
    adv = torch.from_numpy(np.ascontiguousarray(hooks.advantages(adv.numpy()))).float()
    return torch.where(mask, adv, 0.0), returns


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """TRL's ``masked_whiten``: (x - mean) / sqrt(var + eps) with the mean and unbiased variance over the
    real tokens; 0 on padding."""
    real = x[mask]
    return torch.where(mask, (x - real.mean()) * torch.rsqrt(real.var() + eps), 0.0)


def clipped_value_loss(value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                       clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's clipped value loss over the real tokens: the mean of the larger of the squared errors of the
    new value and of the new value clipped to ``old_value +- clip`` (without TRL's 1/2: the canonical
    value_loss; the loss back-propagated is ``vf_coef x 0.5 x`` it), and the share of tokens where the
    clipped error is the larger (TRL val/clipfrac_avg)."""
    clipped = old_value + (value - old_value).clamp(-clip, clip)
    error, clipped_error = (value - returns).pow(2), (clipped - returns).pow(2)
    return (masked_mean(torch.max(error, clipped_error), mask),
            masked_mean((clipped_error > error).float(), mask))


def value_lr_scale(hooks: Hooks, cfg) -> float:
    """The value model's learning rate relative to the policy's (its parameter group's ``lr_scale``):
    ``vf_lr / lr`` as this update's hyperparameters hold them, 1 without ``vf_lr`` (one rate, as TRL);
    the schedule scales both alike."""
    hp = hooks.hyperparams(cfg)
    return 1.0 if hp.vf_lr is None else hp.vf_lr / hp.lr


def explained_variance(returns: torch.Tensor, values: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the given (real) tokens; NaN when Var(returns) is 0."""
    var = float(returns.var(correction=0))
    return 1 - float((returns - values).var(correction=0)) / var if var > 0 else math.nan


def train(exp: Experiment) -> Iterator[dict]:
    """Native PPO on the token task (``algo=ppo_lm env=toyseq``), one row of canonical metrics per update.

    Set-up: ``batch_size`` copies of the task env, the policy loaded from the supervised warm-up, a
    frozen copy of it as the reference, the value model (:func:`value_model_from`), the sampler (a copy of
    the policy, synced every update) and one Adam over both models (two parameter groups). Each update
    then reads top to bottom: generation, scores (:func:`scores_of`), the rollout's log-probs and values,
    per-token rewards (:func:`token_rewards`), GAE (:func:`token_gae`) and whitening, the clipped-surrogate
    update (:func:`harness.agents.core.ppo_update`) with the clipped value loss
    (:func:`clipped_value_loss`), and the KL controller.

    The row holds what TRL's PPOTrainer logs under canonical names (score ``reward_mean``, ``rlhf_reward``,
    ``non_score_reward``, ``kl_ref_sum``, ``kl_coef``, ``value_clipfrac``, ``ratio_var``; EOS share as
    ``response_clip_ratio``), PPO's critic metrics over the real tokens (``value_mean``,
    ``explained_variance``, raw ``adv_mean``/``adv_std``), GRPO's completion metrics, each reward
    function's mean, the update metrics of ``ppo_update`` and ``steps`` (one row per minibatch)."""
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    B = cfg.batch_size                                    # completions per batch
    envs = make_vec_env(exp.env, B, fault)
    task = envs.unwrapped
    vocab = task.vocab
    policy, reference = warm_started(exp, task)          # GRPO's warm-up (cached), its frozen copy
    value_model = value_model_from(policy)
    models = nn.ModuleDict({"policy": policy, "value": value_model})   # TRL's PolicyAndValueWrapper
    sampler = Sampler(policy)
    optimizer = torch.optim.Adam([{"params": policy.parameters()}, {"params": value_model.parameters()}],
                                 lr=cfg.lr, fused=True)
    # the coefficient as the config holds it (what TRL and verl log); a fault may change the one in force
    kl_ctl = KLController(fault.user_config(cfg).kl_coef, cfg.kl_target if cfg.adaptive_kl else None,
                          cfg.kl_horizon)
    env_step = 0
    n_updates = updates_planned(exp)

    try:
        for update in range(n_updates):
            hooks, hp = begin_update(fault, cfg, update, n_updates)
            kl_coef = kl_ctl.value if hp.adaptive_kl else hp.kl_coef     # in the reward
            logged_coef = kl_ctl.value                                    # as the config holds it

            # ---- the sampler holds the policy's weights --------------------------------------
            sampler.push(policy, update, 0)
            if hooks.sync_sampler(update, due=True):
                sampler.sync()

            # ---- generate a completion per prompt (group_size of them) ----------------------
            envs.reset(seed=exp.seed if update == 0 else None,
                       options={"group_size": hp.group_size, "max_len": hp.max_new_tokens})
            prompts = torch.tensor(task.prompts)                 # a copy: the env autoresets in place
            prompt_mask = prompts != vocab.pad
            gen = sampler.generate(prompts, prompt_mask, hp.max_new_tokens, vocab.eos, vocab.pad,
                                   hp.temperature, 0, 1.0, hooks)
            completions = gen.tokens
            env_step += int(gen.lengths.sum())

            # ---- scores: the completions replayed through the task env ----------------------
            score, fn_scores = scores_of(envs, gen, task.reward_weights, hooks, hp.missing_eos_penalty)

            # ---- log-probs of the policy and the reference, values, at the rollout weights ---
            mask = hooks.completion_mask(gen.mask, completions, vocab.eos, vocab.pad)
            shift = hooks.logit_shift(1)
            t_train = hooks.logprob_temperature(hp.temperature, "trainer")
            with torch.no_grad():
                policy.train(hooks.dropout_active("old"))
                logp, _ = token_logprobs(
                    completion_logits(policy, prompts, prompt_mask, completions, mask, shift), completions, t_train)
                reference.train(hooks.dropout_active("ref"))
                ref_logp, _ = token_logprobs(
                    completion_logits(reference, prompts, prompt_mask, completions, mask, shift), completions, t_train)
                value_model.eval()
                values = completion_values(value_model, prompts, prompt_mask, completions, mask)
            ref_logp = hooks.ref_logprob(ref_logp, logp, phase="rollout")
            old_logp = hooks.behaviour_logprob(logp, {"sampler": gen.logp, "trainer": logp, "reference": ref_logp})

            # ---- per-token rewards: the KL penalty at every token, the score at the last -----
            kl = torch.where(mask, logp - ref_logp, 0.0)                     # k1, per token
            rewards, non_score = token_rewards(score, kl, mask, kl_coef)

            # ---- GAE over the completion's tokens, whitened advantages -----------------------
            raw_adv, returns = token_gae(hooks, rewards, values, mask, hp.gamma, hp.gae_lambda)
            adv = masked_whiten(raw_adv, mask) if hp.whiten_advantages else raw_adv
            batch = {"prompts": prompts, "prompt_mask": prompt_mask, "tokens": completions, "mask": mask,
                     "logp": old_logp, "values": values, "returns": returns, "adv": adv}

            # ---- clipped-surrogate update of the policy, clipped value loss ------------------
            def evaluate(mb: dict[str, torch.Tensor]) -> MinibatchEval:
                models.train()
                logits = completion_logits(policy, mb["prompts"], mb["prompt_mask"], mb["tokens"], mb["mask"], shift)
                new_logp, entropy = token_logprobs(logits, mb["tokens"], t_train)
                value = completion_values(value_model, mb["prompts"], mb["prompt_mask"], mb["tokens"], mb["mask"])
                v_loss, v_clipfrac = clipped_value_loss(value, mb["values"], mb["returns"], mb["mask"],
                                                        hp.clip_range_vf)
                return MinibatchEval(logp=new_logp, entropy=entropy, loss=hp.vf_coef * 0.5 * v_loss,
                                     metrics={"value_loss": v_loss.detach(), "value_clipfrac": v_clipfrac})

            optimizer.param_groups[1]["lr_scale"] = value_lr_scale(hooks, cfg)
            update_metrics, steps = ppo_update(models, optimizer, batch, hp, hooks, evaluate, generator)

            # ---- the KL controller, on this batch's KL --------------------------------------
            kl_sum = float(kl.sum(1).mean())
            kl_ctl.update(kl_sum, B)

            real = mask
            lengths = gen.lengths.float()
            terminated = lengths[gen.ended]
            ratio_means = torch.tensor([s["ratio_mean"] for s in steps])
            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                "reward_mean": float(score.mean()),              # TRL objective/scores
                "return_mean": float(score.mean()),
                "return_std": float(score.std()),
                "reward_std": float(score.std()),
                "non_score_reward": float(non_score.sum(1).mean()),
                "rlhf_reward": float(score.mean() + non_score.sum(1).mean()),
                "kl_ref_sum": kl_sum,
                "kl_coef": logged_coef,
                "adv_mean": float(raw_adv[real].mean()),
                "adv_std": float(raw_adv[real].std()),
                "value_mean": float(values[real].mean()),
                "explained_variance": explained_variance(returns[real], values[real]),
                "length_mean": float(lengths.mean()),
                "terminated_length_mean": float(terminated.mean()) if len(terminated) else math.nan,
                "response_clip_ratio": float((~gen.ended).float().mean()),
                "logp_mean": float((logp * mask).sum(1).mean()),
                "logp_ref_mean": float((ref_logp * mask).sum(1).mean()),
                **{f"reward/{name}": float(v.mean()) for name, v in fn_scores.items()},
                **update_metrics,
                "ratio_var": float(ratio_means.var()) if len(ratio_means) > 1 else math.nan,
                "steps": steps,
            }
    finally:
        envs.close()


class PPOLMTrainer(Trainer):
    """Native PPO with a value model on the token task (:func:`train`), as TRL's PPOTrainer."""

    backend, algo = "native", "ppo_lm"

    def updates_planned(self, exp: Experiment) -> int:
        return updates_planned(exp)

    def train(self, exp: Experiment) -> Iterator[dict]:
        return train(exp)

    def check_fault_on_env(self, fault: Hooks, env: EnvConfig) -> None:
        """A fault acting on a hook the loop never calls (:data:`REACHED`) is refused."""
        unreached = [h for h in overridden(fault) if h not in REACHED]
        if unreached:
            raise ConfigError(f"fault {getattr(fault, 'name', type(fault).__name__)} acts on {unreached[0]}, which "
                              "algo=ppo_lm's loop never reaches")

    def check_setup(self, algo, env: EnvConfig) -> None:
        """PPO-LM generates token sequences (env=toyseq) with the transformer (its value model copies the
        trunk); completions must fit in what the token env accepts."""
        if env.id != TOKEN_ENV_ID:
            raise ConfigError(f"algo=ppo_lm generates token sequences: it needs env=toyseq, not env={env.name}")
        if algo.model != "transformer":
            raise ConfigError(f"algo=ppo_lm's value model is a copy of the transformer's trunk: it needs "
                              f"model=transformer, not model={algo.model}")
        capacity = env.kwargs.get("max_len", 10)
        if algo.max_new_tokens > capacity:
            raise ConfigError(f"algo.max_new_tokens={algo.max_new_tokens} exceeds the longest completion the "
                              f"task accepts (env.kwargs.max_len={capacity})")

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

from harness.agents import grpo_gaussian, sft
from harness.agents.base import Trainer
from harness.agents.core import MinibatchEval, aggregate, begin_update, masked_mean, ppo_update
from harness.agents.grpo_math import (
    group_metrics,
    hooked_group_advantages,
    importance_weights,
    kl_terms,
    refresh_sampler,
    sampler_mismatch,
    updates_planned,
)
from harness.agents.lm import build_model, completion_logits, token_logprobs
from harness.agents.sampler import Sampler
from harness.config import ConfigError, EnvConfig, Experiment
from harness.envs import make_vec_env
from harness.envs.toyseq import REWARD_FNS
from harness.hooks import Hooks, overridden

TOKEN_ENV_ID = "harness/ToySeq-v0"
GRPO_ENVS = {TOKEN_ENV_ID: "toyseq", grpo_gaussian.ENV_ID: "highdim"}


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


def warm_started(exp: Experiment, task) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The policy loaded from the supervised warm-up (cached, :mod:`harness.agents.sft`) and the
    reference: its frozen copy, or the model the warm-up started from when the fault says so."""
    cfg, vocab = exp.algo, task.vocab
    state, _ = sft.load_checkpoint(exp)
    policy = build_model(cfg, vocab.size, task.prompt_width, task.max_len, vocab)
    policy.load_state_dict(state)
    reference = copy.deepcopy(policy).requires_grad_(False)
    if exp.fault.begin_update(0, cfg)[0].reference_weights() == "base":
        reference.load_state_dict(sft.base_state(exp))
    return policy, reference

def train(exp: Experiment) -> Iterator[dict]:
    """Native GRPO on the token task (``env=toyseq``), one row of canonical metrics per update.

    Set-up: ``batch_size`` copies of the task env, the policy loaded from the supervised warm-up
    (:mod:`harness.agents.sft`), a frozen copy of it as the reference, the sampler (its own copy of
    the weights) and Adam. Each update then reads top to bottom:

    - the sampler's weights (:func:`harness.agents.grpo_math.refresh_sampler`: precision, lag, sync);
    - generation: ``group_size`` completions of each of ``n_prompts`` prompts, with the sampler's
      log-probs;
    - rewards: the completions replayed through the task env (:func:`replay`), each reward
      function's score through the reward-scores hook, the summed reward following it;
    - the trainer's and the reference's log-probs at the rollout weights (completion-mask, logit-shift,
      temperature, dropout and reference hooks), and the old log-probs the ratio uses (recomputed or
      the sampler's; the behaviour-logprob hook);
    - group-relative advantages (:func:`harness.agents.grpo_math.hooked_group_advantages`), per
      token, optionally importance-weighted for the sampler/trainer mismatch (TIS / MIS);
    - the clipped-surrogate update (:func:`harness.agents.core.ppo_update`), whose ``evaluate``
      adds ``beta x`` the KL penalty to the reference.

    The yielded row holds the update and env step (tokens generated so far), whether the fault is
    active, the reward and advantage metrics over the true groups, completion lengths (all, those
    ended by EOS, the share cut at ``max_new_tokens``), the summed completion log-probs of trainer
    and reference, the sampler/trainer mismatch, each reward function's mean, the update metrics of
    ``ppo_update``, and ``steps`` (one row per minibatch) for the run store."""
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    B = cfg.batch_size                                    # completions per batch
    envs = make_vec_env(exp.env, B, fault)
    task = envs.unwrapped
    vocab = task.vocab
    weights = task.reward_weights
    policy, reference = warm_started(exp, task)          # the supervised warm-up (cached), its frozen copy
    sampler = Sampler(policy, cfg.sampler_precision, cfg.sampler_lag)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.lr, fused=True)
    env_step = 0

    n_updates = updates_planned(exp)

    try:
        for update in range(n_updates):
            hooks, hp = begin_update(fault, cfg, update, n_updates)

            # ---- the sampler's weights: every sync_every updates, lag versions old ------
            refresh_sampler(sampler, policy, update, hp, hooks)

            # ---- generate G completions per prompt -----------------------------------
            envs.reset(seed=exp.seed if update == 0 else None,
                       options={"group_size": hp.group_size, "max_len": hp.max_new_tokens,
                                "stop_at_close": hp.stop_at_close})
            prompts = torch.tensor(task.prompts)                 # a copy: the env autoresets in place
            prompt_mask = prompts != vocab.pad
            gen = sampler.generate(prompts, prompt_mask, hp.max_new_tokens, vocab.eos, vocab.pad,
                                   hp.temperature, hp.top_k, hp.top_p, hooks,
                                   also_stop=vocab.close if hp.stop_at_close else None)
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
            top_k, top_p = hooks.trainer_sampling_filter(hp.top_k, hp.top_p)    # the sampler's truncation, replayed
            with torch.no_grad():
                policy.train(hooks.dropout_active("old"))
                trainer_logp, _ = token_logprobs(
                    completion_logits(policy, prompts, prompt_mask, completions, mask, shift), completions, t_train,
                    top_k, top_p)
                reference.train(hooks.dropout_active("ref"))
                ref_logp, _ = token_logprobs(
                    completion_logits(reference, prompts, prompt_mask, completions, mask, shift), completions, t_train)
            ref_logp = hooks.ref_logprob(ref_logp, trainer_logp, phase="rollout")

            # ---- sampler vs trainer, over the tokens the sampler generated -------------
            real = gen.mask
            log_r = (trainer_logp - gen.logp)[real]          # log(pi_trainer / pi_sampler)
            mismatch = sampler_mismatch(log_r)
            old_logp = gen.logp if hp.use_sampler_logprobs else trainer_logp
            old_logp = hooks.behaviour_logprob(old_logp, {"sampler": gen.logp, "trainer": trainer_logp,
                                                          "reference": ref_logp})

            # ---- group-relative advantages ----------------------------------------------
            r = torch.from_numpy(rewards)
            advantages = hooked_group_advantages(r, hp, hooks)
            token_adv = advantages[:, None].expand_as(trainer_logp)
            if hp.is_correction != "none":                  # TIS / MIS on the sampler's mismatch
                token_adv = token_adv * importance_weights(trainer_logp, gen.logp, real & mask,
                                                           hp.is_correction, hp.is_clip_min, hp.is_clip_max)
            batch = {"prompts": prompts, "prompt_mask": prompt_mask, "tokens": completions, "mask": mask,
                     "logp": old_logp, "ref_logp": ref_logp, "adv": token_adv.contiguous()}

            # ---- clipped-surrogate update with a KL penalty to the reference ------------
            def evaluate(mb: dict[str, torch.Tensor]) -> MinibatchEval:
                policy.train()
                logits = completion_logits(policy, mb["prompts"], mb["prompt_mask"], mb["tokens"], mb["mask"], shift)
                logp, entropy = token_logprobs(logits, mb["tokens"], t_train, top_k, top_p)
                log_ref_ratio = hooks.ref_logprob(mb["ref_logp"], logp, phase="update") - logp
                kl = kl_terms(log_ref_ratio, "k3")                                # the logged kl_ref
                penalty = kl if hp.kl_estimator == "k3" else kl_terms(log_ref_ratio, hp.kl_estimator)
                if hp.kl_is_weight:                     # TRL use_bias_correction_kl
                    penalty = penalty * (logp - mb["logp"]).exp()
                return MinibatchEval(logp=logp, entropy=entropy,
                                     loss=hp.beta * aggregate(penalty, mb["mask"], hp.loss_agg),
                                     metrics={"kl_ref": masked_mean(kl, mb["mask"])})

            update_metrics, steps = ppo_update(policy, optimizer, batch, hp, hooks, evaluate, generator)

            lengths = gen.lengths.float()
            terminated = lengths[gen.ended]
            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                **group_metrics(r, advantages, hp.group_size),     # over the true groups
                "length_mean": float(lengths.mean()),
                "terminated_length_mean": float(terminated.mean()) if len(terminated) else math.nan,
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


class GRPOTrainer(Trainer):
    """Native GRPO: the token task (:func:`train`, a transformer or MLP policy) or, on
    ``env=highdim``, a Gaussian policy over many dimensions (:mod:`harness.agents.grpo_gaussian`)."""

    backend, algo = "native", "grpo"

    def updates_planned(self, exp: Experiment) -> int:
        return updates_planned(exp)

    def train(self, exp: Experiment) -> Iterator[dict]:
        if exp.env.id == grpo_gaussian.ENV_ID:
            return grpo_gaussian.train(exp)
        return train(exp)

    def check_fault_on_env(self, fault: Hooks, env: EnvConfig) -> None:
        """On ``env=highdim`` the loop reaches only :data:`grpo_gaussian.REACHED`: a fault on tokens
        (completion masks, reward functions, the sampler's logits, the reference's weights...) is refused."""
        if env.id != grpo_gaussian.ENV_ID:
            return
        unreached = [h for h in overridden(fault) if h not in grpo_gaussian.REACHED]
        if unreached:
            raise ConfigError(f"fault {getattr(fault, 'name', type(fault).__name__)} acts on {unreached[0]}, which "
                              f"env=highdim never reaches (it has no tokens): use env=toyseq")

    def check_setup(self, algo, env: EnvConfig) -> None:
        """GRPO generates token sequences (env=toyseq) or high-dimensional samples (env=highdim);
        completions must fit in what the token env accepts."""
        if env.id not in GRPO_ENVS:
            raise ConfigError(f"algo=grpo generates token sequences or high-dimensional samples: it needs "
                              f"env={' or env='.join(GRPO_ENVS.values())}, not env={env.name}")
        if env.id == TOKEN_ENV_ID:
            capacity = env.kwargs.get("max_len", 10)
            if algo.max_new_tokens > capacity:
                raise ConfigError(f"algo.max_new_tokens={algo.max_new_tokens} exceeds the longest completion the "
                                  f"task accepts (env.kwargs.max_len={capacity})")

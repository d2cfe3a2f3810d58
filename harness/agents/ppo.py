"""Native PPO (CleanRL-style), yielding one row of canonical metrics per update.

Read top to bottom: rollout -> GAE -> clipped-surrogate update (harness/agents/core.py).
Faults act only through the hooks (harness/hooks.py): ``hooks.hyperparams`` and
``hooks.scheduled_lr`` each update, ``hooks.wrap_env`` once, the episode-end, final-observation
and autoreset hooks in the rollout, the GAE and advantage hooks after it, and the
old-logprob / surrogate / loss / zero-grad / optimizer-step hooks in the update.

Gymnasium 1.x vector envs autoreset on the *next* step: the step after an episode ends
ignores the action, returns reward 0 and the first observation of the new episode. Those
reset steps are marked invalid and never trained on, so no transition crosses an episode
boundary; the observation they carry is the episode's final one, whose value bootstraps
a truncated episode.

Observation and reward normalisation (``norm_obs`` / ``norm_reward``) are gymnasium's vector
wrappers, outside the episode monitor and the fault's wrappers, as SB3's VecNormalize sits
outside Monitor and any ``wrapper_class``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers.vector import NormalizeObservation, NormalizeReward

from harness.agents.base import Trainer
from harness.agents.core import MinibatchEval, begin_update, ppo_update, value_loss
from harness.agents.networks import ActorCritic
from harness.config import ConfigError, EnvConfig, Experiment
from harness.envs import make_vec_env, restart_normalization


def first_reset(envs: Any, obs_norm: Any, fault: Any, cfg: Any, seed: int) -> np.ndarray:
    """The vector env's first reset, under update 0's hooks: its observations count in the running
    statistics as the obs-norm hook says, and the envs get the seeds the env-seeds hook gives
    (gymnasium's ``seed + i`` when it gives none). Returns the observations."""
    first = fault.begin_update(0, cfg)[0]
    if cfg.norm_obs:
        obs_norm.update_running_mean = first.obs_norm_training()
    seeds = first.env_seeds(seed, cfg.num_envs)
    obs, _ = envs.reset(seed=seed if seeds is None else seeds)
    return obs


def updates_planned(exp: Experiment) -> int:
    """How many updates the budget buys: one per ``num_envs x n_steps`` env steps."""
    return exp.env.total_timesteps // exp.algo.batch_size


def train(exp: Experiment) -> Iterator[dict]:
    """Native PPO on ``exp``, one row of canonical metrics per update.

    Set-up: the vector env (with the fault's wrappers; observation and reward normalisation outside
    them), the actor-critic, Adam, and the rollout buffers ``[n_steps, num_envs]``. Each update then
    reads top to bottom:

    - the update's hooks and hyperparameters (:func:`begin_update`);
    - rollout: ``n_steps`` steps of every env, with the episode-boundary hooks; a step that only
      autoresets the env (gymnasium 1.x next-step autoreset) is marked invalid and not trained on;
    - GAE through the GAE hook (a done step never bootstraps across the episode boundary), the value
      targets, then the advantage hook; the batch is the transitions trained on (the valid ones,
      unless the fault assumes same-step autoreset);
    - the clipped-surrogate update (:func:`harness.agents.core.ppo_update`), whose ``evaluate``
      adds the value loss ``vf_coef x MSE(value, return)``.

    The yielded row holds the update and env step, whether the fault is active, the rollout's reward,
    finished-episode return and length, the advantages (after the advantage hook), the rollout's
    values and the value function's explained variance, the update metrics of ``ppo_update``, and,
    for the run store, ``steps`` (one row per minibatch) and ``episodes`` (one per finished episode)."""
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    envs = make_vec_env(exp.env, cfg.num_envs, fault)
    obs_norm = envs = NormalizeObservation(envs) if cfg.norm_obs else envs
    envs = NormalizeReward(envs, gamma=cfg.gamma) if cfg.norm_reward else envs
    model = ActorCritic(envs.single_observation_space, envs.single_action_space, cfg.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=1e-5, fused=True)
    continuous = not model.discrete
    low, high = (envs.single_action_space.low, envs.single_action_space.high) if continuous else (None, None)

    T, N = cfg.n_steps, cfg.num_envs
    obs_buf = torch.zeros((T, N, *envs.single_observation_space.shape))
    act_buf = torch.zeros((T, N, *envs.single_action_space.shape))
    logp_buf, value_buf = torch.zeros((T, N)), torch.zeros((T, N))
    rewards, terminated, truncated = np.zeros((T, N)), np.zeros((T, N)), np.zeros((T, N))
    valid = np.zeros((T, N), dtype=bool)

    obs = first_reset(envs, obs_norm, fault, cfg, exp.seed)
    reset_step = np.zeros(N, dtype=bool)     # True where the next step() only resets the env
    ep_return, ep_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    env_step = 0
    n_updates = updates_planned(exp)

    try:
        for update in range(n_updates):
            hooks, hp = begin_update(fault, cfg, update, n_updates)
            if hooks.normalization_restarts(update):
                restart_normalization(envs)
            if cfg.norm_obs:
                obs_norm.update_running_mean = hooks.obs_norm_training()

            # ---- rollout ----------------------------------------------------------
            finished_returns, finished_lengths, episodes = [], [], []
            for t in range(T):
                obs_t = torch.as_tensor(obs, dtype=torch.float32)
                action, logp, value = model.act(obs_t)
                obs_buf[t], act_buf[t], logp_buf[t], value_buf[t] = obs_t, action, logp, value
                valid[t] = ~reset_step

                env_action = np.clip(action.numpy(), low, high) if continuous else action.numpy()
                obs, rewards[t], term, trunc, info = envs.step(env_action)
                terminated[t], truncated[t] = hooks.episode_end(term, trunc)
                obs = hooks.final_observation(obs, obs_buf[t].numpy(), trunc)

                ep_return += rewards[t] * valid[t]
                ep_length += valid[t]
                reset_step = term | trunc
                done = reset_step & valid[t]
                if done.any():
                    finished_returns.extend(ep_return[done])
                    finished_lengths.extend(ep_length[done])
                    at_step = env_step + int(valid[: t + 1].sum())
                    monitor = info["episode"]          # the env's own return (inside any fault wrapper)
                    episodes += [{"update": update, "env_step": at_step, "return": float(ep_return[i]),
                                  "env_return": float(monitor["r"][i]), "length": int(ep_length[i])}
                                 for i in np.flatnonzero(done)]
                    ep_return[done], ep_length[done] = 0.0, 0
            env_step += int(valid.sum())
            # the transitions trained on: not the reset steps (unless the loop assumes same-step autoreset)
            trained = np.ones_like(valid) if hooks.assumes_same_step_autoreset() else valid
            rewards *= trained                    # reset steps carry no transition
            terminated *= trained
            truncated *= trained

            # ---- GAE (a done step never bootstraps across the episode boundary) -----
            with torch.no_grad():
                next_value = model.value(torch.as_tensor(obs, dtype=torch.float32)).numpy()
            values = value_buf.numpy()
            advantages = hooks.gae(rewards, values, next_value, terminated, truncated, trained,
                                   hp.gamma, hp.gae_lambda)
            returns = advantages + values         # the value targets
            advantages = hooks.advantages(advantages)

            v = torch.from_numpy(trained)
            batch = {"obs": obs_buf[v], "actions": act_buf[v], "logp": logp_buf[v],
                     "adv": torch.from_numpy(advantages[trained]).float(),
                     "returns": torch.from_numpy(returns[trained]).float(),
                     "values": value_buf[v]}
            var_returns = float(returns[trained].var())
            explained_variance = (1 - float((returns - values)[trained].var()) / var_returns
                                  if var_returns > 0 else np.nan)

            # ---- clipped-surrogate update -----------------------------------------
            def evaluate(mb: dict[str, torch.Tensor]) -> MinibatchEval:
                logp, entropy, value = model.evaluate(mb["obs"], mb["actions"])
                v_loss = value_loss(value, mb["values"], mb["returns"], hp.clip_range_vf)
                return MinibatchEval(logp=logp, entropy=entropy, loss=hp.vf_coef * v_loss,
                                     metrics={"value_loss": v_loss})

            update_metrics, steps = ppo_update(model, optimizer, batch, hp, hooks, evaluate, generator)

            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                "reward_mean": float(rewards[trained].mean()),
                "return_mean": float(np.mean(finished_returns)) if finished_returns else np.nan,
                "return_std": float(np.std(finished_returns)) if finished_returns else np.nan,
                "length_mean": float(np.mean(finished_lengths)) if finished_lengths else np.nan,
                "adv_mean": float(advantages[trained].mean()),
                "adv_std": float(advantages[trained].std(ddof=1)),
                "value_mean": float(values[trained].mean()),
                "explained_variance": explained_variance,
                **update_metrics,
                "steps": steps,
                "episodes": episodes,
            }
    finally:
        envs.close()


class PPOTrainer(Trainer):
    """Native PPO (:func:`train`): discrete (categorical) and continuous (Gaussian) actions."""

    backend, algo = "native", "ppo"

    def updates_planned(self, exp: Experiment) -> int:
        return updates_planned(exp)

    def train(self, exp: Experiment) -> Iterator[dict]:
        return train(exp)

    def check_setup(self, algo, env: EnvConfig) -> None:
        if env.id == "harness/HighDim-v0":
            raise ConfigError(f"env=highdim scores whole high-dimensional samples: it runs with algo=grpo, not "
                              f"algo={algo.name}")

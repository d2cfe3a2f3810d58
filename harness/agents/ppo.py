"""Native PPO (CleanRL-style), yielding one row of canonical metrics per update.

Read top to bottom: rollout -> GAE -> clipped-surrogate update (harness/agents/core.py).
Faults act only through the hooks (harness/hooks.py): ``hooks.hyperparams`` each update,
``hooks.wrap_env`` once, and the old-logprob / loss / optimizer-step hooks in the update.

Gymnasium 1.x vector envs autoreset on the *next* step: the step after an episode ends
ignores the action, returns reward 0 and the first observation of the new episode. Those
reset steps are marked invalid and never trained on, so no transition crosses an episode
boundary; the observation they carry is the episode's final one, whose value bootstraps
a truncated episode.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from harness.agents.core import Evaluation, ppo_update
from harness.agents.networks import ActorCritic
from harness.config import Experiment
from harness.envs import make_vec_env


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_value: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray, gamma: float, lam: float
                ) -> np.ndarray:
    """GAE over a [T, N] rollout with next-step autoreset.

    ``values[t]`` is V(obs_t); ``next_value`` is V of the observation after the last step.
    At a terminated step there is no bootstrap; at a truncated step the bootstrap is
    V(final observation), which next-step autoreset hands back as the next observation,
    so ``values[t + 1]``. Neither lets the advantage of the next episode flow back.
    Entries of reset steps are meaningless and must be masked by the caller.
    """
    values_next = np.concatenate([values[1:], next_value[None]])
    deltas = rewards + gamma * values_next * (1.0 - terminated) - values
    carry = gamma * lam * (1.0 - np.maximum(terminated, truncated))
    advantages = np.zeros_like(rewards)
    last_gae = np.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        last_gae = deltas[t] + carry[t] * last_gae
        advantages[t] = last_gae
    return advantages


def updates_planned(exp: Experiment) -> int:
    return exp.env.total_timesteps // exp.algo.batch_size


def train(exp: Experiment) -> Iterator[dict]:
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    envs = make_vec_env(exp.env, cfg.num_envs, fault)
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

    obs, _ = envs.reset(seed=exp.seed)
    reset_step = np.zeros(N, dtype=bool)     # True where the next step() only resets the env
    ep_return, ep_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    env_step = 0

    try:
        for update in range(updates_planned(exp)):
            hooks, hp = fault.begin_update(update, cfg)

            # ---- rollout ----------------------------------------------------------
            finished_returns, finished_lengths, episodes = [], [], []
            for t in range(T):
                obs_t = torch.as_tensor(obs, dtype=torch.float32)
                action, logp, value = model.act(obs_t)
                obs_buf[t], act_buf[t], logp_buf[t], value_buf[t] = obs_t, action, logp, value
                valid[t] = ~reset_step

                env_action = np.clip(action.numpy(), low, high) if continuous else action.numpy()
                obs, rewards[t], term, trunc, info = envs.step(env_action)
                terminated[t], truncated[t] = term, trunc

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
            rewards *= valid                      # reset steps carry no transition
            terminated *= valid
            truncated *= valid
            env_step += int(valid.sum())

            # ---- GAE (a done step never bootstraps across the episode boundary) -----
            with torch.no_grad():
                next_value = model.value(torch.as_tensor(obs, dtype=torch.float32)).numpy()
            values = value_buf.numpy()
            advantages = compute_gae(rewards, values, next_value, terminated, truncated,
                                     hp.gamma, hp.gae_lambda)
            returns = advantages + values

            v = torch.from_numpy(valid)
            batch = {"obs": obs_buf[v], "actions": act_buf[v], "logp": logp_buf[v],
                     "adv": torch.from_numpy(advantages[valid]).float(),
                     "returns": torch.from_numpy(returns[valid]).float()}
            var_returns = float(returns[valid].var())
            explained_variance = (1 - float((returns - values)[valid].var()) / var_returns
                                  if var_returns > 0 else np.nan)

            # ---- clipped-surrogate update -----------------------------------------
            def evaluate(mb: dict[str, torch.Tensor]) -> Evaluation:
                logp, entropy, value = model.evaluate(mb["obs"], mb["actions"])
                value_loss = (value - mb["returns"]).pow(2).mean()
                return Evaluation(logp=logp, entropy=entropy, loss=hp.vf_coef * value_loss,
                                  metrics={"value_loss": value_loss})

            update_metrics, steps = ppo_update(model, optimizer, batch, hp, hooks, evaluate, generator)

            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                "reward_mean": float(rewards[valid].mean()),
                "return_mean": float(np.mean(finished_returns)) if finished_returns else np.nan,
                "return_std": float(np.std(finished_returns)) if finished_returns else np.nan,
                "length_mean": float(np.mean(finished_lengths)) if finished_lengths else np.nan,
                "adv_mean": float(advantages[valid].mean()),
                "adv_std": float(advantages[valid].std(ddof=1)),
                "value_mean": float(values[valid].mean()),
                "explained_variance": explained_variance,
                **update_metrics,
                "steps": steps,
                "episodes": episodes,
            }
    finally:
        envs.close()

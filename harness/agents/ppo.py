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
from harness.hooks import HEALTHY


def train(exp: Experiment) -> Iterator[dict]:
    cfg, fault = exp.algo, exp.fault
    torch.manual_seed(exp.seed)
    generator = torch.Generator().manual_seed(exp.seed)

    envs = make_vec_env(exp.env, cfg.num_envs, fault)
    model = ActorCritic(envs.single_observation_space, envs.single_action_space, cfg.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, eps=1e-5)
    continuous = not model.discrete
    low, high = (envs.single_action_space.low, envs.single_action_space.high) if continuous else (None, None)

    T, N = cfg.n_steps, cfg.num_envs
    obs_buf = torch.zeros((T, N, *envs.single_observation_space.shape))
    act_buf = torch.zeros((T, N, *envs.single_action_space.shape))
    logp_buf, value_buf, reward_buf = torch.zeros((T, N)), torch.zeros((T, N)), torch.zeros((T, N))
    terminated_buf, truncated_buf = torch.zeros((T, N)), torch.zeros((T, N))
    valid_buf = torch.zeros((T, N), dtype=torch.bool)

    obs, _ = envs.reset(seed=exp.seed)
    reset_step = np.zeros(N, dtype=bool)     # True where the next step() only resets the env
    ep_return, ep_length = np.zeros(N), np.zeros(N, dtype=np.int64)
    env_step = 0

    try:
        for update in range(exp.env.total_timesteps // (T * N)):
            fault.active = update >= fault.onset
            hooks = fault if fault.active else HEALTHY
            hp = hooks.hyperparams(cfg)

            # ---- rollout ----------------------------------------------------------
            finished_returns, finished_lengths = [], []
            for t in range(T):
                obs_t = torch.as_tensor(obs, dtype=torch.float32)
                action, logp, value = model.act(obs_t)
                obs_buf[t], act_buf[t], logp_buf[t], value_buf[t] = obs_t, action, logp, value
                valid = ~reset_step
                valid_buf[t] = torch.as_tensor(valid)

                env_action = np.clip(action.numpy(), low, high) if continuous else action.numpy()
                obs, reward, terminated, truncated, _ = envs.step(env_action)
                reward_buf[t] = torch.as_tensor(reward * valid, dtype=torch.float32)
                terminated_buf[t] = torch.as_tensor(terminated & valid, dtype=torch.float32)
                truncated_buf[t] = torch.as_tensor(truncated & valid, dtype=torch.float32)

                ep_return += reward * valid
                ep_length += valid
                done = (terminated | truncated) & valid
                finished_returns.extend(ep_return[done])
                finished_lengths.extend(ep_length[done])
                ep_return[done], ep_length[done] = 0.0, 0
                reset_step = terminated | truncated
            env_step += int(valid_buf.sum())

            # ---- GAE over valid steps (a done step never bootstraps across the boundary)
            with torch.no_grad():
                next_value = model.value(torch.as_tensor(obs, dtype=torch.float32))
            values = torch.cat([value_buf, next_value[None]])   # values[t+1] = V(obs after step t)
            advantages = torch.zeros((T, N))
            last_gae = torch.zeros(N)
            for t in reversed(range(T)):
                # terminated: no bootstrap; truncated: bootstrap from V(final obs) = values[t+1]
                delta = reward_buf[t] + cfg.gamma * values[t + 1] * (1 - terminated_buf[t]) - values[t]
                episode_continues = 1 - torch.maximum(terminated_buf[t], truncated_buf[t])
                last_gae = delta + cfg.gamma * cfg.gae_lambda * episode_continues * last_gae
                advantages[t] = last_gae
            returns = advantages + value_buf

            v = valid_buf
            batch = {"obs": obs_buf[v], "actions": act_buf[v], "logp": logp_buf[v],
                     "adv": advantages[v], "returns": returns[v]}
            var_returns = batch["returns"].var()
            explained_variance = float(1 - (batch["returns"] - value_buf[v]).var() / var_returns)

            # ---- clipped-surrogate update -----------------------------------------
            def evaluate(mb: dict[str, torch.Tensor]) -> Evaluation:
                logp, entropy, value = model.evaluate(mb["obs"], mb["actions"])
                value_loss = (value - mb["returns"]).pow(2).mean()
                return Evaluation(logp=logp, entropy=entropy, loss=hp.vf_coef * value_loss,
                                  metrics={"value_loss": value_loss})

            update_metrics = ppo_update(model, optimizer, batch, hp, hooks, evaluate, generator)

            yield {
                "update": update,
                "env_step": env_step,
                "fault_active": fault.active,
                "reward_mean": float(reward_buf[v].mean()),
                "return_mean": float(np.mean(finished_returns)) if finished_returns else np.nan,
                "return_std": float(np.std(finished_returns)) if finished_returns else np.nan,
                "length_mean": float(np.mean(finished_lengths)) if finished_lengths else np.nan,
                "adv_mean": float(batch["adv"].mean()),
                "adv_std": float(batch["adv"].std()),
                "value_mean": float(value_buf[v].mean()),
                "explained_variance": explained_variance if var_returns > 0 else np.nan,
                **update_metrics,
            }
    finally:
        envs.close()


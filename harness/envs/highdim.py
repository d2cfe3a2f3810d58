"""HighDim: GRPO on a continuous generator with log-probs summed over many dimensions.

A stand-in for RL fine-tuning of diffusion / flow / motion models (Flow-GRPO, DanceGRPO...),
where a "completion" is a sample x in R^D (a motion of 263 joints x 196 frames is D ~ 51,548
per denoising step) from a Gaussian policy N(mu(prompt), noise_std^2 I) whose noise is fixed
by the sampler (an SDE's), and the log-prob of a sample is the sum over all D dimensions.

A prompt is one of ``n_conditions`` fixed conditions c in R^k; its target is t = c A for a
fixed random map A (so a linear policy can learn it), with t_d ~ N(0, target_scale^2). The
reward of a sample is exp(-mean_d (x_d - t_d)^2 / reward_scale), in (0, 1]: about 0.5 for the
untrained policy (mu = 0) with the defaults, about 0.7 at the optimum (mu = t, where only the
sampling noise remains). One step per episode: ``reset(options={"group_size": G})`` serves each
run of G consecutive envs the same prompt; ``step(samples [n, D])`` scores them and ends.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

MAX_DIM = 65_536


class HighDimVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, dim: int = 50_000, n_conditions: int = 64, cond_dim: int = 8,
                 target_scale: float = 0.5, noise_std: float = 0.5, reward_scale: float = 0.7, mean_scale: float = 0.01,
                 task_seed: int = 0,
                 render_mode: str | None = None):
        if not (1 <= dim <= MAX_DIM and 1 <= n_conditions <= 4096 and 1 <= cond_dim <= 256):
            raise ValueError(f"env.kwargs need 1 <= dim <= {MAX_DIM}, 1 <= n_conditions <= 4096 and "
                             "1 <= cond_dim <= 256")
        if not (target_scale > 0 and noise_std > 0 and reward_scale > 0 and mean_scale > 0):
            raise ValueError("env.kwargs target_scale, noise_std, reward_scale and mean_scale must be > 0")
        self.num_envs, self.dim, self.cond_dim = num_envs, dim, cond_dim
        self.noise_std, self.reward_scale, self.render_mode = float(noise_std), float(reward_scale), render_mode
        self.mean_scale = float(mean_scale)      # the generator's output scale (see grpo_gaussian.py)
        task = np.random.default_rng(task_seed)          # the task is fixed; prompts are drawn per batch
        self.conditions = task.normal(size=(n_conditions, cond_dim)).astype(np.float32)
        mapping = task.normal(0.0, target_scale / np.sqrt(cond_dim), size=(cond_dim, dim)).astype(np.float32)
        self.targets = self.conditions @ mapping
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (cond_dim,), np.float32)
        self.single_action_space = gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.ids = np.zeros(num_envs, dtype=np.int64)
        self.prev_done = np.zeros(num_envs, dtype=bool)

    def _draw(self, idx: np.ndarray, group: int = 1) -> None:
        self.ids[idx] = np.repeat(self.np_random.integers(0, len(self.conditions), len(idx) // group), group)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        group = int((options or {}).get("group_size", 1))
        if group < 1 or self.num_envs % group:
            raise ValueError(f"group_size={group} must divide num_envs={self.num_envs}")
        self._draw(np.arange(self.num_envs), group)
        self.prev_done[:] = False
        return self.conditions[self.ids], {}

    def score(self, samples: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        err = np.square(samples - self.targets[self.ids[rows]]).mean(axis=1)
        return np.exp(-err / self.reward_scale).astype(np.float32)

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions, dtype=np.float32)
        live = ~self.prev_done
        reward = np.zeros(self.num_envs, dtype=np.float32)
        if live.any():
            reward[live] = self.score(actions[live], live)
        if self.prev_done.any():                         # next-step autoreset
            self._draw(np.flatnonzero(self.prev_done))
        self.prev_done = live.copy()
        return (self.conditions[self.ids], reward, live.copy(), np.zeros(self.num_envs, dtype=bool), {})


class HighDimEnv(gym.Env):
    """The single-env view (``gym.make``); training uses the vector env."""

    metadata = {"render_modes": []}

    def __init__(self, **kwargs: Any):
        self._vec = HighDimVectorEnv(num_envs=1, **kwargs)
        self.action_space = self._vec.single_action_space
        self.observation_space = self._vec.single_observation_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self._vec.reset(seed=seed, options=options)
        return obs[0], info

    def step(self, action: np.ndarray):
        obs, reward, terminated, truncated, info = self._vec.step(np.asarray(action)[None])
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), info


def register() -> None:
    if "harness/HighDim-v0" not in gym.registry:
        gym.register("harness/HighDim-v0", entry_point=HighDimEnv, vector_entry_point=HighDimVectorEnv)

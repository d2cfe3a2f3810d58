"""Vector environments: gymnasium's own vectorisation, wrapped by the fault's env hook."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from harness.config import ConfigError, EnvConfig
from harness.envs import highdim, toyseq
from harness.hooks import Hooks

toyseq.register()
highdim.register()


def check_env(env: EnvConfig) -> None:
    """The id is registered and the env builds with these kwargs; raises ConfigError."""
    try:
        gym.spec(env.id)
    except gym.error.Error:
        raise ConfigError(f"env.id={env.id!r} is not a registered gymnasium environment") from None
    try:
        gym.make(env.id, **env.kwargs).close()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env {env.name} ({env.id}): {exc}") from None


def make_vec_env(env: EnvConfig, num_envs: int, hooks: Hooks) -> Any:
    """``num_envs`` copies of ``env.id``, natively vectorised when the env offers it, with
    gymnasium's episode recorder (the monitor: ``info["episode"]`` holds the environment's own
    returns) inside the fault's wrappers, as SB3's Monitor and CleanRL's RecordEpisodeStatistics
    sit inside any reward wrapper a user adds."""
    spec = gym.spec(env.id)
    mode = "vector_entry_point" if spec.vector_entry_point else "sync"
    envs = gym.make_vec(env.id, num_envs=num_envs, vectorization_mode=mode, **env.kwargs)
    autoreset = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if autoreset != AutoresetMode.NEXT_STEP:  # the rollout loops assume next-step autoreset
        raise ConfigError(f"env {env.id} uses autoreset mode {autoreset}; only NEXT_STEP is supported")
    return hooks.wrap_env(RecordEpisodeStatistics(envs))

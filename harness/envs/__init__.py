"""Vector environments: gymnasium's own vectorisation (or EnvPool's, ``env.engine=envpool``), wrapped by
the fault's env hook."""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from harness.config import ConfigError, EnvConfig
from harness.envs import highdim, toyseq
from harness.hooks import Hooks

toyseq.register()
highdim.register()


#: EnvPool worker threads per env made (its default, 0, is a pool sized to the machine's cores)
ENVPOOL_THREADS = 1


class EnvPoolVectorEnv(VectorEnv):
    """EnvPool's batched C++ env as a gymnasium VectorEnv with gymnasium's semantics: next-step
    autoreset (the step after a done returns the reset observation with reward 0), ``terminated`` /
    ``truncated`` as EnvPool sets them (the same step caps: benchmarks/env_engines.py), spaces as
    gymnasium declares them (a float64 Box of actions, as EnvPool's MuJoCo envs give it, becomes
    gymnasium's float32 one). EnvPool fixes its seeds when it makes the env, so a reset with a seed
    makes it again with that seed: the same seed gives the same episodes.

    One worker thread per env made (``num_threads``, :data:`ENVPOOL_THREADS`) unless ``kwargs`` say
    otherwise: the episodes are the same with any thread count (tested). Measured by
    ``benchmarks/envpool_threads.py`` (seed-batched PPO on Hopper, 2 cores): a sweep's one process per
    core runs about 10% faster with one thread than with EnvPool's default pool, a run alone about 20%
    slower; the sweeps are where EnvPool is used (the catalogue's Acrobot, LunarLander and Hopper)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, env_id: str, num_envs: int, **kwargs: Any) -> None:
        envpool = _envpool()

        def make(seed: int) -> Any:
            with _float32_bounds_quiet():
                return envpool.make_gymnasium(env_id, num_envs=num_envs, seed=seed,
                                              **{"num_threads": ENVPOOL_THREADS, **kwargs})

        self._make = make
        self._env = self._make(0)
        self.num_envs = num_envs
        with _float32_bounds_quiet():
            self.single_observation_space = self._env.observation_space
            act = self._env.action_space
        if isinstance(act, gym.spaces.Box) and act.dtype == np.float64:
            act = gym.spaces.Box(act.low.astype(np.float32), act.high.astype(np.float32), act.shape, np.float32)
        self.single_action_space = act
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is not None:
            self._env.close()
            self._env = self._make(int(seed))
        obs, _ = self._env.reset()
        return obs, {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, reward, terminated, truncated, _ = self._env.step(np.asarray(actions))
        return (obs, np.asarray(reward, dtype=np.float64), np.asarray(terminated, dtype=bool),
                np.asarray(truncated, dtype=bool), {})

    def close_extras(self, **kwargs: Any) -> None:
        self._env.close()


@contextlib.contextmanager
def _float32_bounds_quiet() -> Any:
    """EnvPool declares float32 spaces with float64 bounds, which gymnasium warns about every time a
    space is built: silenced (the spaces are gymnasium's float32 ones either way)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
        yield


def _envpool() -> Any:
    """The envpool module; ConfigError when it is not installed."""
    try:
        import envpool
    except ImportError:
        raise ConfigError("env.engine=envpool needs EnvPool: pip install -e '.[envs]'") from None
    return envpool


def envpool_ids() -> set[str]:
    """The env ids EnvPool provides; ConfigError when it is not installed."""
    return set(_envpool().list_all_envs())


def check_env(env: EnvConfig) -> None:
    """The id is registered and the env builds with these kwargs; raises ConfigError."""
    if env.engine == "envpool":
        if env.id not in envpool_ids():
            raise ConfigError(f"env.id={env.id!r} is not an EnvPool env (env.engine=envpool)")
        return
    try:
        gym.spec(env.id)
    except gym.error.Error:
        raise ConfigError(f"env.id={env.id!r} is not a registered gymnasium environment") from None
    try:
        gym.make(env.id, **env.kwargs).close()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env {env.name} ({env.id}): {exc}") from None


def gymnasium_vector(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """gymnasium's vector env of ``env_id``: the env's own vectorised class where it has one, else
    SyncVectorEnv."""
    mode = "vector_entry_point" if gym.spec(env_id).vector_entry_point else "sync"
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode=mode, **kwargs)


def make_vec_env(env: EnvConfig, num_envs: int, hooks: Hooks) -> Any:
    """``num_envs`` copies of ``env.id``, natively vectorised when the env offers it, with
    gymnasium's episode recorder (the monitor: ``info["episode"]`` holds the environment's own
    returns) inside the fault's wrappers, as SB3's Monitor and CleanRL's RecordEpisodeStatistics
    sit inside any reward wrapper a user adds. ``env.engine=envpool``: EnvPool's C++ envs
    (:class:`EnvPoolVectorEnv`), faster than gymnasium's Python-stepped envs from 8 envs on."""
    if env.engine == "envpool":
        envs: Any = EnvPoolVectorEnv(env.id, num_envs, **env.kwargs)
    else:
        envs = gymnasium_vector(env.id, num_envs, **env.kwargs)
    autoreset = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if autoreset != AutoresetMode.NEXT_STEP:  # the rollout loops assume next-step autoreset
        raise ConfigError(f"env {env.id} uses autoreset mode {autoreset}; only NEXT_STEP is supported")
    return hooks.wrap_env(RecordEpisodeStatistics(envs))


def restart_normalization(env: Any) -> None:
    """Start gymnasium's vector NormalizeObservation / NormalizeReward wrappers in ``env``'s chain over
    with fresh statistics, as a newly built wrapper would have them (a run resumed without the
    saved statistics)."""
    from gymnasium.wrappers.utils import RunningMeanStd
    from gymnasium.wrappers.vector import NormalizeObservation, NormalizeReward

    while env is not None:
        if isinstance(env, NormalizeObservation):
            env.obs_rms = RunningMeanStd(shape=env.obs_rms.mean.shape, dtype=env.obs_rms.mean.dtype)
        elif isinstance(env, NormalizeReward):
            env.return_rms = RunningMeanStd(shape=())
            env.accumulated_reward = np.zeros_like(env.accumulated_reward)
        env = getattr(env, "env", None)

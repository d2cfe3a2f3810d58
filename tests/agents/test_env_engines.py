"""env.engine=envpool: EnvPool's C++ envs behind gymnasium's VectorEnv, with gymnasium's semantics, so a
fault does to a run on one engine what it does on the other."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config import ConfigError, EnvConfig
from harness.envs import EnvPoolVectorEnv, gymnasium_vector, make_vec_env
from harness.hooks import Hooks

envpool = pytest.importorskip("envpool")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "Pendulum-v1"])
def test_spaces_and_autoreset_are_gymnasiums(env_id):
    pool, ref = EnvPoolVectorEnv(env_id, 4), gymnasium_vector(env_id, 4)
    assert pool.single_observation_space == ref.single_observation_space
    assert pool.single_action_space == ref.single_action_space
    assert pool.metadata["autoreset_mode"] == ref.metadata["autoreset_mode"]
    pool.reset(seed=3)
    done_before, checked = np.zeros(4, bool), 0
    for _ in range(600):
        actions = np.stack([pool.single_action_space.sample() for _ in range(4)])
        _, reward, term, trunc, _ = pool.step(actions)
        if done_before.any():         # the step after a done: the reset observation, reward 0, no done
            assert (reward[done_before] == 0).all() and not (term | trunc)[done_before].any()
            checked += int(done_before.sum())
        done_before = term | trunc
    assert checked > 0
    pool.close()
    ref.close()


def test_the_same_seed_gives_the_same_episodes_and_another_seed_others():
    def rollout(seed):
        env = EnvPoolVectorEnv("CartPole-v1", 2)
        obs, _ = env.reset(seed=seed)
        out = [obs]
        for t in range(50):
            out.append(env.step(np.array([t % 2, 1 - t % 2]))[0])
        env.close()
        return np.stack(out)

    np.testing.assert_array_equal(rollout(5), rollout(5))
    assert not np.array_equal(rollout(5), rollout(6))


def test_one_worker_thread_gives_the_episodes_of_envpools_default_pool():
    """The engine runs EnvPool with one worker thread per env (faster beside a learner and a sweep's
    other processes); stored runs were made with EnvPool's default pool: the episodes must not change."""
    pytest.importorskip("mujoco")
    for env_id, shape in (("CartPole-v1", None), ("Hopper-v5", (8, 3))):
        one, pool = EnvPoolVectorEnv(env_id, 8), EnvPoolVectorEnv(env_id, 8, num_threads=0)
        assert one._env.config["num_threads"] == 1 and pool._env.config["num_threads"] != 1
        rng = np.random.default_rng(0)
        np.testing.assert_array_equal(one.reset(seed=4)[0], pool.reset(seed=4)[0])
        for _ in range(300):
            actions = rng.integers(0, 2, 8) if shape is None else rng.uniform(-1, 1, shape).astype(np.float32)
            for a, b in zip(one.step(actions)[:4], pool.step(actions)[:4]):
                np.testing.assert_array_equal(a, b)
        one.close()
        pool.close()


def test_mujoco_actions_are_declared_as_gymnasium_declares_them():
    pytest.importorskip("mujoco")
    pool = EnvPoolVectorEnv("HalfCheetah-v5", 2)
    assert pool.single_action_space.dtype == np.float32 and pool.single_action_space.shape == (6,)
    pool.close()


#: 2 envs x 256 steps an update, 2 updates: each env's first episode ends at Acrobot's 500-step limit
ACROBOT = ["env=acrobot", "env.total_timesteps=1024", "algo.num_envs=2", "algo.n_steps=256"]


def _run(results_dir, engine: str, fault: str, episodes: bool = False):
    from harness.logs.views import StoredRun
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    exp = make_experiment([*ACROBOT, f"env.engine={engine}", f"fault={fault}", f"results_dir={results_dir}",
                           "progress=false", "twin=false"])
    res = get_or_train(exp)
    assert res.meta["status"] == "ok"
    return (res.metrics, StoredRun.load(results_dir, res.run_id).episodes) if episodes else res.metrics


@pytest.mark.parametrize("fault, ratio", [("reward_scale_wrong", 1000.0), ("reward_sign_flip", -1.0)])
def test_an_env_fault_does_the_same_on_both_engines(tmp_path, store_dir, fault, ratio):
    """Acrobot's reward is -1 a step until the swing-up: the learner's reward and return are scaled x1000
    (flipped) against its healthy twin's on EnvPool exactly as on gymnasium, while the env's own return
    (the episode monitor sits inside the fault's wrapper) stays the env's."""
    for engine in ("gymnasium", "envpool"):
        (faulty, episodes), healthy = _run(tmp_path, engine, fault, episodes=True), _run(store_dir, engine, "none")
        assert faulty["reward_mean"].mean() / healthy["reward_mean"].mean() == pytest.approx(ratio, rel=0.05)
        returns = faulty["return_mean"].dropna()                # the learner's
        assert len(returns) and (returns < 0).all() == (ratio > 0)
        assert len(episodes) and (episodes["env_return"] < 0).all() and (episodes["env_return"] >= -500).all()


def test_envpool_runs_are_reproducible_and_keep_gymnasium_ids(tmp_path, store_dir):
    from harness.pipeline.compose import make_experiment
    from harness.store import run_id

    a, b = _run(store_dir, "envpool", "none"), _run(tmp_path, "envpool", "none")     # two trainings of one config
    cols = ["reward_mean", "value_loss", "approx_kl", "entropy"]
    np.testing.assert_array_equal(a[cols].to_numpy(), b[cols].to_numpy())
    gym_id = run_id(make_experiment(["env=acrobot"]).key())
    assert run_id(make_experiment(["env=acrobot", "env.engine=gymnasium"]).key()) == gym_id   # default: id kept
    assert run_id(make_experiment(["env=acrobot", "env.engine=envpool"]).key()) != gym_id


def test_engine_errors_are_one_line():
    from harness.pipeline.compose import make_experiment

    with pytest.raises(ConfigError, match="env.engine='bogus'; valid choices: gymnasium, envpool"):
        make_experiment(["env.engine=bogus"])
    with pytest.raises(ConfigError, match="is not an EnvPool env"):
        make_experiment(["algo=grpo", "env=toyseq", "env.engine=envpool"])
    with pytest.raises(ConfigError, match="backend=sb3 makes its own"):
        make_experiment(["backend=sb3", "env.engine=envpool"])
    envs = make_vec_env(EnvConfig(name="acrobot", id="Acrobot-v1", total_timesteps=1, engine="envpool"), 2, Hooks())
    assert envs.num_envs == 2
    envs.close()

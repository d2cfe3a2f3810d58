"""No transition crosses an episode boundary (gymnasium 1.x next-step autoreset)."""

from __future__ import annotations

import numpy as np

from harness.hooks import compute_gae
from tests.helpers import train


def test_reset_steps_are_not_trained_on(tmp_path):
    # 5-step episodes, reward 1 each: a reset step leaking in would add a reward-0
    # transition per episode (reward_mean 5/6) and stretch the recorded lengths.
    res = train(["env.id=harness-test/FixedLength-v0", "env.total_timesteps=1536", "algo.num_envs=4",
                 "algo.n_steps=128", f"results_dir={tmp_path}"])
    m = res.metrics
    assert res.meta["status"] == "ok" and len(m) == 3
    assert (m["reward_mean"] == 1.0).all()
    assert (m["length_mean"] == 5).all() and (m["return_mean"] == 5).all()
    # 4 envs x 128 steps, one reset step after each 5-step episode -> 5/6 are transitions
    assert (m["env_step"].diff().dropna() < 4 * 128).all()
    assert abs(m["env_step"].iloc[-1] - 3 * 512 * 5 / 6) <= 12


def test_gae_terminated_does_not_bootstrap():
    # one env, steps: r=1 (continue), r=1 (terminated), reset step, r=1 (continue)
    r = np.array([[1.0], [1.0], [0.0], [1.0]])
    v = np.array([[0.5], [0.4], [9.0], [0.3]])
    term = np.array([[0.0], [1.0], [0.0], [0.0]])
    trunc = np.zeros((4, 1))
    adv = compute_gae(r, v, np.array([0.2]), term, trunc, gamma=0.9, lam=1.0)
    assert np.isclose(adv[1, 0], 1.0 - 0.4)  # no bootstrap from the reset obs (9.0)
    assert np.isclose(adv[0, 0], 1 + 0.9 * 0.4 - 0.5 + 0.9 * (1.0 - 0.4))
    assert np.isclose(adv[3, 0], 1 + 0.9 * 0.2 - 0.3)


def test_gae_truncated_bootstraps_from_final_obs_but_stops_there():
    # step 1 is truncated; step 2 is the reset step whose obs is the final obs (value 9.0)
    r = np.array([[1.0], [1.0], [0.0], [1.0]])
    v = np.array([[0.5], [0.4], [9.0], [0.3]])
    term = np.zeros((4, 1))
    trunc = np.array([[0.0], [1.0], [0.0], [0.0]])
    adv = compute_gae(r, v, np.array([0.2]), term, trunc, gamma=0.9, lam=0.95)
    assert np.isclose(adv[1, 0], 1 + 0.9 * 9.0 - 0.4)
    expected0 = (1 + 0.9 * 0.4 - 0.5) + 0.9 * 0.95 * adv[1, 0]
    assert np.isclose(adv[0, 0], expected0)

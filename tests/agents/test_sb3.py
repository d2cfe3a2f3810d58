"""backend=sb3: stable-baselines3's PPO, recorded with the same metrics as the native trainer; it learns
(slow). The faults on SB3 (expressed or refused): tests/faults/test_framework_faults.py."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config import ConfigError
from harness.metrics import COLUMNS
from tests.helpers import make_experiment, train

SB3 = ["backend=sb3", "env.total_timesteps=384", "algo.n_steps=32", "algo.num_envs=4"]   # 3 updates of 128 samples


@pytest.mark.slow
def test_healthy_sb3_ppo_solves_cartpole_within_100k_steps(tmp_path):
    finals = []
    for seed in range(3):
        res = train(["backend=sb3", "fault=none", f"seed={seed}", f"results_dir={tmp_path}"])
        assert res.meta["status"] == "ok" and res.metrics["env_step"].iloc[-1] <= 100_000
        finals.append(float(np.nanmean(res.metrics["return_mean"].iloc[-5:])))
    assert sum(f >= 400 for f in finals) >= 2, finals


def test_sb3_records_every_ppo_metric(store_dir):
    res = train(["fault=ppo_epochs_ignored", "fault.onset=1", *SB3, f"results_dir={store_dir}"])
    m = res.metrics
    assert tuple(m.columns) == COLUMNS
    for col in ("reward_mean", "return_mean", "adv_mean", "adv_std", "value_mean", "explained_variance",
                "policy_loss", "value_loss", "entropy", "loss", "approx_kl", "kl_k1", "clipfrac",
                "clipfrac_binding", "ratio_mean", "ratio_min", "ratio_max", "ratio_dev_max", "grad_norm",
                "grad_norm_max", "optimizer_steps", "lr", "clip_range", "param_delta", "nonfinite"):
        assert m[col].notna().all(), col
    assert (m["entropy"] > 0).all()                                 # SB3's entropy_loss is -entropy
    assert list(m["optimizer_steps"]) == [40] + [4] * 2             # 10 epochs x 4 mb, then 1 epoch
    assert res.meta["hyperparameters"]["effective"]["n_epochs"] == 1
    assert (m["grad_norm_max"] >= m["grad_norm"]).all() and (m["grad_norm"] > 0.5).any()   # pre-clip


def test_sb3_runs_are_reproducible(tmp_path):
    a = train(["fault=tiny_clip", *SB3, f"results_dir={tmp_path / 'a'}"])
    b = train(["fault=tiny_clip", *SB3, f"results_dir={tmp_path / 'b'}"])
    assert a.metrics.equals(b.metrics)


@pytest.mark.parametrize("overrides, message", [
    (["algo=grpo", "env=toyseq"], "backend=sb3 runs stable-baselines3's PPO; algo=grpo runs on backend=native"),
    (["fault=reference_not_frozen"], "fault reference_not_frozen does not apply to algo=ppo"),
])
def test_sb3_errors_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_experiment(["backend=sb3", *overrides])

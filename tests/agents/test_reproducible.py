"""The same config and seed give the same metrics, bit for bit."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers import train

#: 3 updates of 16 envs x 64 steps
RUN = ["env.total_timesteps=3072", "algo.n_steps=64"]


def test_same_seed_same_metrics(tmp_path):
    args = ["fault=tiny_clip", "seed=3", *RUN]
    a = train([*args, f"results_dir={tmp_path / 'a'}"])
    b = train([*args, f"results_dir={tmp_path / 'b'}"])
    assert not a.reused and not b.reused
    assert a.run_id == b.run_id and len(a.metrics) == 3
    pd.testing.assert_frame_equal(a.metrics, b.metrics, check_exact=True)


def test_different_seed_different_metrics(tmp_path):
    a = train(["seed=0", "env.total_timesteps=1024", "algo.n_steps=64", f"results_dir={tmp_path}"])
    b = train(["seed=1", "env.total_timesteps=1024", "algo.n_steps=64", f"results_dir={tmp_path}"])
    assert a.run_id != b.run_id
    assert not a.metrics["policy_loss"].equals(b.metrics["policy_loss"])


def test_meta_records_versions_and_config(tmp_path):
    res = train(["fault=excessive_lr", *RUN, f"results_dir={tmp_path}"])
    meta = res.meta
    for lib in ("python", "torch", "gymnasium", "numpy", "harness"):
        assert meta["versions"][lib]
    assert meta["config"]["algo"]["lr"] == 1e-3
    assert meta["hyperparameters"]["effective"]["lr"] == pytest.approx(3e-3)        # 3x, the default
    assert meta["status"] == "ok" and meta["n_updates"] == meta["n_updates_planned"] == 3


def test_a_grpo_run_does_not_depend_on_whether_its_warm_up_was_cached(tmp_path):
    """The first GRPO run in a store trains the supervised warm-up (its own seed) and caches it; a run
    that finds it cached must draw the same completions. Training it used to move the global random
    state, so the same config and seed gave other metrics in a fresh store."""
    args = ["algo=grpo", "env=toyseq", "env.total_timesteps=2560", "algo.sft_steps=40", "seed=2",
            f"results_dir={tmp_path}"]
    fresh = train(args)                                   # trains and caches the warm-up first
    cached = train([*args, "retrain=true"])               # the warm-up is cached now
    assert not cached.reused
    pd.testing.assert_frame_equal(fresh.metrics, cached.metrics, check_exact=True)

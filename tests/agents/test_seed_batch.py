"""Seed-batched native PPO (engine=seed_batched): S seeds of one configuration as one computation.

Each seed must be the run the loop trains, up to float rounding: the same initial weights, action
noise and minibatch permutations (so the first update agrees with the loop's to float precision), every
hook applied per seed (a fault's signature is the loop's), its own Adam state and clipping; and a
seed's metrics must not depend on which seeds share its batch (exactly).

Runs are 4 envs x 32 steps an update (a batch of 128, 4 minibatches, 10 epochs), as few updates as a
claim needs; that batched seeds learn is a slow test.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from harness.agents import ppo
from harness.agents.ppo_seeds import train_seeds
from harness.config import ConfigError
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import get_or_train, get_or_train_seeds
from tests.helpers import SHORT

BATCH = ["algo.n_steps=32", "algo.num_envs=4"]                   # 128 steps an update


def updates(n: int) -> list[str]:
    return [*BATCH, f"env.total_timesteps={128 * n}"]


def _exp(tmp_path, *overrides):
    return make_experiment(["algo=ppo", f"results_dir={tmp_path}", "twin=false", "progress=false", *overrides])


def _seeds(exp, seeds):
    return [dataclasses.replace(exp, seed=s) for s in seeds]


def _same(a: dict, b: dict) -> list[str]:
    """The keys whose values differ (NaN equals NaN)."""
    def eq(x, y):
        return x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
    return [k for k in a if not eq(a[k], b[k])]


@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_a_seed_does_not_depend_on_its_batch(tmp_path, env):
    """Seed 6 trained with seeds 5 and 7 and trained alone: identical rows, steps and episodes over 4
    updates (one torch thread, as runs train: torch_threads=1)."""
    exps = _seeds(_exp(tmp_path, f"env={env}", "fault=none", *updates(4)), (5, 6, 7))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        together = [rows[1] for rows in train_seeds(exps)]
        alone = [rows[0] for rows in train_seeds(exps[1:2])]
    finally:
        torch.set_num_threads(threads)
    assert len(together) == len(alone) == 4
    for x, y in zip(together, alone):
        assert _same(x, y) == [], f"update {x['update']}: {_same(x, y)}"


@pytest.mark.parametrize("fault", ["none", "adv_sign_flip", "no_zero_grad", "shared_policy",
                                   "target_kl_too_strict", "obs_norm_frozen", "gae_no_done_mask", "vf_clip_unscaled"])
@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_first_update_is_the_loops(tmp_path, fault, env):
    """Update 0 of every seed (rollout, GAE, the fault's hooks, every minibatch step) agrees with the
    loop's run of that seed to float precision; later updates drift only by rounding. (A fault
    that makes training chaotic, e.g. excessive_lr at lr 0.1, turns that rounding into visible
    differences within the first update: its first minibatch is compared.)"""
    exps = _seeds(_exp(tmp_path, f"env={env}", f"fault={fault}", *updates(2)), (0, 1))
    batched = next(iter(train_seeds(exps)))
    for s, exp in enumerate(exps):
        loop = next(iter(ppo.train(exp)))
        row = batched[s]
        for key, value in loop.items():
            if key == "episodes":
                assert row[key] == value
            elif key == "steps":
                assert [st["stepped"] for st in row[key]] == [st["stepped"] for st in value]
                assert len(row[key]) == len(value)
            elif isinstance(value, float) and math.isfinite(value):
                assert row[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (fault, env, s, key)
            else:
                assert row[key] == value or (math.isnan(row[key]) and math.isnan(value)), (fault, env, s, key)


def test_chaotic_fault_first_minibatch_is_the_loops(tmp_path):
    exp = _exp(tmp_path, "fault=excessive_lr", "fault.factor=100", *updates(2))
    batched = next(iter(train_seeds([exp, dataclasses.replace(exp, seed=1)])))[0]["steps"][0]
    loop = next(iter(ppo.train(exp)))["steps"][0]
    for key, value in loop.items():
        assert batched[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_a_nonfinite_seed_steps_as_the_loop_does(tmp_path):
    """whiten_tiny_batch's NaN step is applied in the batch as in the loop: every planned step of the
    update is taken on the NaN weights, and each seed's run ends after it (2 epochs of 128 one-sample
    minibatches)."""
    bad = _exp(tmp_path, "fault=whiten_tiny_batch", *updates(2), "algo.n_epochs=2")
    seeds = _seeds(bad, (0, 1))
    rows = list(train_seeds(seeds))
    assert len(rows) == 1                              # both runs end after their first update
    for exp, row in zip(seeds, rows[0]):
        loop = next(iter(ppo.train(exp)))
        assert {st["epoch"] for st in loop["steps"]} == set(range(exp.algo.n_epochs))   # every epoch ran
        assert loop["nonfinite"] == row["nonfinite"] == 1
        assert loop["optimizer_steps"] == row["optimizer_steps"] == len(loop["steps"]) == len(row["steps"])
        assert math.isnan(loop["param_delta"]) and math.isnan(row["param_delta"])


def test_signatures_survive_batching(tmp_path):
    """What a fault leaves in the log under the loop it leaves batched: shared_policy's ratio is
    exactly 1 on every update; target_kl_too_strict stops every update after a few of its 40 steps,
    each seed on its own schedule (3 updates of 3 seeds; minibatches of 64, where a KL estimate from 32
    samples can stay under the target a few steps longer)."""
    exps = _seeds(_exp(tmp_path, "fault=shared_policy", *updates(3)), range(3))
    batches = list(train_seeds(exps))
    assert len(batches) == 3
    for rows in batches:
        assert all(r["approx_kl"] == 0.0 and r["ratio_dev_max"] == 0.0 for r in rows)
    wide = ["algo.n_steps=64", "algo.num_envs=4", "env.total_timesteps=768"]      # 3 updates of 256 steps
    exps = _seeds(_exp(tmp_path, "fault=target_kl_too_strict", *wide), range(3))
    batches = list(train_seeds(exps))
    assert len(batches) == 3
    for rows in batches:
        assert all(r["optimizer_steps"] <= 5 for r in rows)


@pytest.mark.slow
def test_healthy_batched_seeds_learn(tmp_path):
    """Healthy CartPole seeds trained as one batch learn (mean return over the last 3 updates >= 150
    for at least 3 of 4 seeds after 20 updates of 16 x 64 steps; they start near 20). (After 12, two
    seeds stood at 140-146 on an AVX-512 machine: kernel rounding moves a seed's curve.)"""
    exps = [dataclasses.replace(_exp(tmp_path, "fault=none", *SHORT, "env.total_timesteps=20480"), seed=s)
            for s in range(4)]
    rows = list(train_seeds(exps))
    finals = [float(np.nanmean([r[s]["return_mean"] for r in rows[-3:]])) for s in range(4)]
    assert sum(f >= 150 for f in finals) >= 3, finals


def test_stored_as_runs_of_their_own(tmp_path):
    """Each seed is stored as its own run (meta.json: seed_batch); the engine is part of the run's
    identity; a second call reuses every seed; a single seed_batched run trains through the same engine."""
    exps = _seeds(_exp(tmp_path, "fault=adv_sign_flip", "engine=seed_batched", *updates(2)), range(3))
    results = get_or_train_seeds(exps)
    assert len({r.run_id for r in results}) == 3 and not any(r.reused for r in results)
    for s, res in enumerate(results):
        meta = json.loads((tmp_path / "runs" / res.run_id / "meta.json").read_text())
        assert meta["seed"] == s and meta["status"] == "ok" and meta["config"]["engine"] == "seed_batched"
        assert meta["seed_batch"]["size"] == 3 and meta["seed_batch"]["seeds"] == [0, 1, 2]
    assert all(r.reused for r in get_or_train_seeds(exps))
    loop = dataclasses.replace(exps[0], engine="loop")
    assert get_or_train(loop).run_id != results[0].run_id
    single = get_or_train(dataclasses.replace(exps[0], seed=9))
    assert single.meta["seed_batch"]["size"] == 1


def test_bad_engine_and_bad_batches_say_so(tmp_path):
    with pytest.raises(ConfigError, match="engine=warp is not an engine"):
        _exp(tmp_path, "engine=warp")
    with pytest.raises(ConfigError, match="native PPO only"):
        make_experiment(["algo=grpo", f"results_dir={tmp_path}", "engine=seed_batched"])
    a = _exp(tmp_path, "fault=none", *updates(2))
    b = _exp(tmp_path, "fault=adv_sign_flip", *updates(2))
    with pytest.raises(ConfigError, match="differ in more than their seed"):
        next(iter(train_seeds([a, dataclasses.replace(b, seed=1)])))
    with pytest.raises(ConfigError, match="seeds repeat"):
        next(iter(train_seeds([a, a])))


def test_seeds_with_different_onsets_in_one_batch_are_the_loops(tmp_path):
    """A sweep's mid-run onsets differ per seed: in one batch, each seed's fault switches on at its own
    onset (its clip range changes then, not at the other seed's onset) and its rows follow the loop's run
    of that seed and onset."""
    from harness.pipeline.assemble import with_onset

    base = _exp(tmp_path, "fault=tiny_clip", *updates(5), "algo.n_epochs=2")
    exps = [with_onset(dataclasses.replace(base, seed=s), onset) for s, onset in ((0, 1), (1, 3))]
    batched = [rows for _, rows in zip(range(5), train_seeds(exps))]
    for s, exp in enumerate(exps):
        loop = [row for _, row in zip(range(5), ppo.train(exp))]
        clip = [rows[s]["clip_range"] for rows in batched]
        assert clip == [row["clip_range"] for row in loop]
        assert clip[exp.fault.onset - 1] != clip[exp.fault.onset] == clip[-1]
        for rows, row in zip(batched, loop):
            for key in ("approx_kl", "clipfrac", "policy_loss", "value_loss", "entropy"):
                assert rows[s][key] == pytest.approx(row[key], rel=1e-3, abs=1e-6), (s, row["update"], key)

"""Native GRPO: it learns, its metrics, the core faults and its own faults, the controls."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from faults import FAULTS
from harness.agents.grpo import group_advantages
from harness.analysis import signatures
from harness.config import ConfigError
from tests.helpers import make_experiment, train

GRPO = ["algo=grpo", "env=toyseq"]
SHORT = ["env.total_timesteps=30720"]            # 40 updates of 128 completions
SEEDS = [0, 1, 2]
FOR_GRPO = sorted(name for name, cls in FAULTS.items() if "grpo" in cls.algos and name != "none")


def run_pair(fault: str, seed: int, store_dir, *extra: str):
    common = [*GRPO, f"seed={seed}", f"results_dir={store_dir}", *SHORT, *extra]
    return train([f"fault={fault}", *common]), train(["fault=none", *common])


def test_group_advantages():
    r = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.4])
    adv = group_advantages(r, 2, "group", 1e-4)
    assert adv[0] == pytest.approx(0.5 / (0.7071 + 1e-4), rel=1e-3) and adv[1] == -adv[0]
    assert adv[2] == adv[3] == 0
    assert torch.allclose(group_advantages(r, 2, "none", 1e-4), torch.tensor([0.5, -0.5, 0, 0, -0.1, 0.1]))
    batch = group_advantages(r, 2, "batch", 1e-4)
    assert batch[4] == pytest.approx(-0.1 / (float(r.std()) + 1e-4))
    assert torch.equal(group_advantages(r, 1, "group", 1e-4), torch.zeros(6))
    assert torch.isnan(group_advantages(torch.ones(4), 2, "group", 0.0)).all()   # 0 / 0


@pytest.mark.slow
def test_healthy_grpo_learns_the_default_task(tmp_path):
    """Mean reward of the last 10 updates >= 0.8 on 3 seeds, each in under a minute."""
    for seed in SEEDS:
        res = train([*GRPO, f"seed={seed}", f"results_dir={tmp_path}"])
        m = res.metrics
        assert res.meta["status"] == "ok" and res.meta["wall_s"] < 60
        assert m["reward_mean"].iloc[:10].mean() < 0.2
        assert m["reward_mean"].iloc[-10:].mean() >= 0.8, f"seed {seed}"


def test_grpo_metrics_are_recorded(store_dir):
    _, twin = run_pair("shared_policy", 0, store_dir)
    m = twin.metrics
    for col in ("kl_ref", "reward_std", "group_reward_std_mean", "frac_reward_zero_std", "length_mean",
                "response_clip_ratio", "logp_mean", "logp_ref_mean", "ratio_dev_max", "clipfrac",
                "approx_kl", "grad_norm", "entropy", "param_delta", "optimizer_steps"):
        assert m[col].notna().all(), col
    for col in ("value_mean", "explained_variance", "value_loss"):
        assert m[col].isna().all(), col
    assert (m["optimizer_steps"] == 4).all()                       # 2 iterations x 2 minibatches
    assert ((m["frac_reward_zero_std"] >= 0) & (m["frac_reward_zero_std"] <= 1)).all()
    assert (m["length_mean"] <= 6).all() and (m["logp_mean"] < 0).all()
    assert m["kl_ref"].iloc[0] < m["kl_ref"].iloc[-1]              # the policy leaves the reference
    assert m["reward_mean"].iloc[-5:].mean() > m["reward_mean"].iloc[:5].mean()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("fault", FOR_GRPO)
def test_fault_shows_expected_signature_on_grpo(fault, seed, store_dir):
    faulty, twin = run_pair(fault, seed, store_dir)
    primary = FAULTS[fault].expected[0]
    fired = signatures.evaluate(faulty.metrics, faulty.meta, names=[primary])[primary]
    assert fired.fired, f"{fault} seed {seed}: {primary} did not fire ({fired.evidence})"
    on_twin = signatures.evaluate(twin.metrics, twin.meta, onset=faulty.meta["onset_update"], names=[primary])
    assert not on_twin[primary].fired, on_twin[primary].evidence


@pytest.mark.parametrize("beta", ["0.0", "0.04"])
def test_zero_reward_freezes_grpo(beta, store_dir):
    faulty, twin = run_pair("zero_reward", 0, store_dir, f"algo.beta={beta}")
    active = faulty.metrics[faulty.metrics["fault_active"]]
    assert len(active) == 40
    assert (active["frac_reward_zero_std"] == 1).all()
    assert (active["adv_mean"] == 0).all() and (active["adv_std"] == 0).all()
    assert (active["policy_loss"] == 0).all() and (active["grad_norm"] == 0).all()
    assert (active["param_delta"] == 0).all()
    assert twin.metrics["reward_mean"].iloc[-5:].mean() > twin.metrics["reward_mean"].iloc[:5].mean() + 0.1


def test_reference_not_frozen_hides_a_moving_policy(store_dir):
    faulty, twin = run_pair("reference_not_frozen", 0, store_dir)
    assert (faulty.metrics["kl_ref"] == 0).all()
    assert (faulty.metrics["param_delta"] > 0).all()                  # it moves all the same
    assert faulty.metrics["logp_ref_mean"].equals(faulty.metrics["logp_mean"])
    assert (twin.metrics["kl_ref"].iloc[1:] > 0).all()


def test_group_size_one_zeroes_advantages_keeps_batch_size(store_dir):
    faulty, _ = run_pair("group_size_one", 0, store_dir)
    assert faulty.meta["hyperparameters"]["effective"]["group_size"] == 1
    # misconfigured: the config a detector sees holds G = 1 (with as many prompts as completions)
    assert faulty.meta["hyperparameters"]["configured"]["group_size"] == 1
    assert faulty.meta["hyperparameters"]["configured"]["n_prompts"] == 128
    m = faulty.metrics
    assert (m["adv_mean"] == 0).all() and (m["adv_std"] == 0).all() and (m["policy_loss"] == 0).all()
    assert (m["frac_reward_zero_std"] == 1).all() and (m["group_reward_std_mean"] == 0).all()


def test_adv_std_no_floor_diverges_on_a_uniform_group(store_dir):
    faulty, _ = run_pair("adv_std_no_floor", 0, store_dir)
    m = faulty.metrics
    assert faulty.meta["status"] == "diverged" and m["nonfinite"].iloc[-1] == 1
    assert faulty.meta["hyperparameters"]["effective"]["adv_eps"] == 0


def test_kl_penalty_sign_flip_pushes_away_from_the_reference(store_dir):
    faulty, twin = run_pair("kl_penalty_sign_flip", 1, store_dir)
    assert faulty.meta["hyperparameters"]["effective"]["beta"] == -0.04
    assert faulty.metrics["kl_ref"].max() > 100 * twin.metrics["kl_ref"].max()


@pytest.mark.parametrize("overrides", [["algo.loss_agg=seq_mean"], ["algo.scale=batch"], ["algo.scale=none"]])
def test_loss_aggregation_and_scale_options_run_and_matter(overrides, store_dir):
    base = train([*GRPO, *SHORT, f"results_dir={store_dir}"])
    other = train([*GRPO, *SHORT, f"results_dir={store_dir}", *overrides])
    assert other.meta["status"] == "ok"
    assert not np.allclose(base.metrics["policy_loss"], other.metrics["policy_loss"])


@pytest.mark.parametrize("algo, extra", [("grpo_single_pass", [*SHORT, "env=toyseq"]),
                                         ("ppo_single_pass", ["env.total_timesteps=12288", "algo.n_steps=64"])])
def test_single_pass_controls_are_healthy_look_alikes(algo, extra, store_dir):
    res = train([f"algo={algo}", *extra, f"results_dir={store_dir}"])
    assert res.meta["is_control"] and res.meta["algo_variant"] == "single_pass"
    assert res.run_id.split("-")[0] == algo.replace("_single_pass", "_single_pass")
    m = res.metrics
    assert (m["optimizer_steps"] == 1).all()
    fired = signatures.evaluate(m, res.meta, names=["ratio_pinned", "clipfrac_zero"])
    assert fired["ratio_pinned"].fired and fired["clipfrac_zero"].fired, fired
    assert (m["param_delta"] > 0).all()                                   # it does learn


def test_ppo_runs_on_the_token_env(store_dir):
    res = train(["algo=ppo", "env=toyseq", "env.total_timesteps=8192", "algo.n_steps=64",
                 f"results_dir={store_dir}"])
    assert res.meta["status"] == "ok" and res.meta["action_space"] == {"type": "discrete", "n": 11}
    assert res.metrics["return_mean"].notna().all()


def test_grpo_needs_the_token_env_and_grpo_faults_need_grpo():
    with pytest.raises(ConfigError, match="needs env=toyseq"):
        make_experiment(["algo=grpo", "env=cartpole"])
    with pytest.raises(ConfigError, match="fault reference_not_frozen does not apply to algo=ppo"):
        make_experiment(["fault=reference_not_frozen"])
    with pytest.raises(ConfigError, match="algo.group_size=1 is out of range"):
        make_experiment([*GRPO, "algo.group_size=1"])

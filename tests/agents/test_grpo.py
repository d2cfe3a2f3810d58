"""Native GRPO: its advantages, its metrics, its options and controls, its configuration; that it learns
(slow). What particular faults do on GRPO is tests/faults/."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.advantages import group_advantages
from harness.analysis import signatures
from harness.config import ConfigError
from harness.store import RunStore
from tests.helpers import make_experiment, train

GRPO = ["algo=grpo", "env=toyseq"]
SHORT = ["env.total_timesteps=3840"]             # 3 updates of 128 completions (<= 10 tokens each)
LONG = ["env.total_timesteps=25600"]             # 20 updates
SEEDS = [0, 1, 2]


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
def test_healthy_grpo_learns_the_default_task(store_dir):
    """From the warm-up checkpoint: a middling start, mean reward of the last 10 updates >= 0.85,
    KL to the reference 0 at the start and small throughout, entropy not collapsed (its wall time is
    measured in benchmarks/grpo_speed.py, not here)."""
    collapsed = 0
    for seed in SEEDS:
        res = train([*GRPO, f"seed={seed}", f"results_dir={store_dir}"])
        m = res.metrics
        assert res.meta["status"] == "ok"
        assert 0.4 <= m["reward_mean"].iloc[:5].mean() <= 0.7, f"seed {seed}"
        assert m["reward_mean"].iloc[-10:].mean() >= 0.85, f"seed {seed}"
        steps = RunStore(store_dir).load_steps(res.run_id)
        assert steps["kl_ref"].iloc[0] == 0                      # the first minibatch is at the reference
        assert m["kl_ref"].max() < 1.0
        collapsed += signatures.evaluate(m, res.meta, names=["entropy_collapse"])["entropy_collapse"].fired
    assert collapsed <= 1


def test_grpo_metrics_are_recorded(store_dir):
    """A short healthy run (the healthy twin of the fault tests' GRPO runs) records every GRPO metric;
    that the reward rises is the slow test above."""
    twin = train([*GRPO, *SHORT, f"results_dir={store_dir}"])
    m = twin.metrics
    for col in ("kl_ref", "reward_std", "group_reward_std_mean", "frac_reward_zero_std", "length_mean",
                "terminated_length_mean", "response_clip_ratio", "logp_mean", "logp_ref_mean", "ratio_dev_max",
                "clipfrac", "approx_kl", "grad_norm", "entropy", "param_delta", "optimizer_steps",
                "sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_ratio_oob", "kl_sampler",
                "reward/format", "reward/correct"):
        assert m[col].notna().all(), col
    for col in ("value_mean", "explained_variance", "value_loss"):
        assert m[col].isna().all(), col
    assert (m["optimizer_steps"] == 4).all()                       # 2 iterations x 2 minibatches
    assert ((m["frac_reward_zero_std"] >= 0) & (m["frac_reward_zero_std"] <= 1)).all()
    assert (m["length_mean"] <= 10).all() and (m["logp_mean"] < 0).all()
    # the reward is the weighted sum of the reward functions (0.3 format + 0.65 correct)
    assert np.allclose(m["reward_mean"], 0.3 * m["reward/format"] + 0.65 * m["reward/correct"], atol=1e-5)
    # an fp32 sampler with the trainer's weights: the gap is float rounding (KV cache vs full pass)
    assert (m["sampler_logp_diff_max"] < 1e-4).all() and (m["sampler_ratio_oob"] == 0).all()
    assert m["kl_ref"].iloc[0] < m["kl_ref"].iloc[-1]              # the policy leaves the reference
    steps = RunStore(store_dir).load_steps(twin.run_id)
    assert len(steps) == 4 * len(m) and (steps["n_tokens"] > steps["n_samples"]).all()
    assert steps["kl_ref"].notna().all()


@pytest.mark.parametrize("overrides", [["algo.loss_agg=seq_mean"], ["algo.scale=batch"], ["algo.scale=none"]])
def test_loss_aggregation_and_scale_options_run_and_matter(overrides, store_dir):
    base = train([*GRPO, *SHORT, f"results_dir={store_dir}"])
    other = train([*GRPO, *SHORT, f"results_dir={store_dir}", *overrides])
    assert other.meta["status"] == "ok"
    assert not np.allclose(base.metrics["policy_loss"], other.metrics["policy_loss"])


@pytest.mark.parametrize("algo, extra", [("grpo_single_pass", [*SHORT, "env=toyseq"]),
                                         ("ppo_single_pass", ["env.total_timesteps=384", "algo.n_steps=32",
                                                              "algo.num_envs=4"])])
def test_single_pass_controls_are_healthy_look_alikes(algo, extra, store_dir):
    res = train([f"algo={algo}", *extra, f"results_dir={store_dir}"])
    assert res.meta["is_control"] and res.meta["algo_variant"] == "single_pass"
    assert res.run_id.split("-")[0] == algo
    m = res.metrics
    assert (m["optimizer_steps"] == 1).all()
    fired = signatures.evaluate(m, res.meta, names=["ratio_pinned", "clipfrac_zero"])
    assert fired["ratio_pinned"].fired and fired["clipfrac_zero"].fired, fired
    assert (m["param_delta"] > 0).all()                                   # it does learn


def test_ppo_runs_on_the_token_env(store_dir):
    res = train(["algo=ppo", "env=toyseq", "env.total_timesteps=2048", "algo.n_steps=32", "algo.num_envs=16",
                 f"results_dir={store_dir}"])
    assert res.meta["status"] == "ok" and res.meta["action_space"] == {"type": "discrete", "n": 15}
    assert res.metrics["return_mean"].notna().all()


def test_mlp_model_runs_on_the_same_sampler_and_trainer(store_dir):
    res = train([*GRPO, "model=mlp", *SHORT, f"results_dir={store_dir}"])
    assert res.meta["status"] == "ok" and res.meta["hyperparameters"]["configured"]["model"] == "mlp"
    assert res.metrics["sampler_logp_diff_max"].max() < 1e-4


@pytest.mark.slow
def test_mlp_model_learns_on_the_same_sampler_and_trainer(store_dir):
    res = train([*GRPO, "model=mlp", *LONG, f"results_dir={store_dir}"])
    assert res.meta["status"] == "ok" and res.meta["hyperparameters"]["configured"]["model"] == "mlp"
    assert res.metrics["sampler_logp_diff_max"].max() < 1e-4
    assert res.metrics["reward_mean"].iloc[-5:].mean() > res.metrics["reward_mean"].iloc[:5].mean()


def test_grpo_needs_a_generation_env_and_grpo_faults_need_grpo():
    with pytest.raises(ConfigError, match="it needs env=toyseq or env=highdim, not env=cartpole"):
        make_experiment(["algo=grpo", "env=cartpole"])
    with pytest.raises(ConfigError, match="fault reference_not_frozen does not apply to algo=ppo"):
        make_experiment(["fault=reference_not_frozen"])
    with pytest.raises(ConfigError, match="algo.group_size=1 is out of range"):
        make_experiment([*GRPO, "algo.group_size=1"])
    with pytest.raises(ConfigError, match="algo.max_new_tokens=12 exceeds the longest completion"):
        make_experiment([*GRPO, "algo.max_new_tokens=12"])
    with pytest.raises(ConfigError, match="algo.sampler_precision='fp8'; valid choices: fp32, bf16, fp16"):
        make_experiment([*GRPO, "algo.sampler_precision=fp8"])
    with pytest.raises(ConfigError, match="env=highdim .* runs with algo=grpo, not algo=ppo"):
        make_experiment(["env=highdim"])


@pytest.mark.parametrize("decay", ["linear", "cosine", "constant"])
def test_lr_schedule_is_transformers_own(decay):
    """Native GRPO's schedule is transformers' (what TRL's GRPOTrainer logs): the warmup starts at lr_lambda(0) = 0,
    so the first update runs, and is logged, at learning rate 0."""
    opt = pytest.importorskip("transformers.optimization")
    from harness.config.schemas import GRPOConfig

    cfg = GRPOConfig(lr=1e-3, warmup_updates=4, lr_decay=decay)
    n = 20
    make = {"linear": opt.get_linear_schedule_with_warmup, "cosine": opt.get_cosine_schedule_with_warmup,
            "constant": opt.get_constant_schedule_with_warmup}[decay]
    params = [torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.SGD(params, lr=1e-3)
    kwargs = {"num_training_steps": n} if decay != "constant" else {}
    scheduler = make(optimizer, num_warmup_steps=4, **kwargs)
    theirs = []
    for _ in range(n):
        theirs.append(optimizer.param_groups[0]["lr"])     # the rate the step uses (and the Trainer logs)
        optimizer.step()
        scheduler.step()
    assert [cfg.lr_at(u, n) for u in range(n)] == pytest.approx(theirs, abs=1e-12)
    assert cfg.lr_at(0, n) == 0.0


def test_only_runs_the_warmup_change_alters_get_new_ids():
    """The warmup-from-zero change is part of the identity of GRPO runs with a warmup, and of no other run:
    a run stored before it is trained again, every other stored run keeps its id."""
    from harness.store import run_id

    warm = make_experiment([*GRPO, "algo.warmup_updates=3"])
    flat = make_experiment(GRPO)
    ppo = make_experiment(["algo=ppo", "env=cartpole"])
    assert warm.key()["code_changes"] == {"warmup_from_zero": True}
    assert "code_changes" not in flat.key() and "code_changes" not in ppo.key()
    before = {k: v for k, v in warm.key().items() if k != "code_changes"}
    assert run_id(warm.key()) != run_id(before)

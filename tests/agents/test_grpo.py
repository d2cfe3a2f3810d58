"""Native GRPO: it learns, its metrics, the core faults and its own faults, the controls."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from faults import FAULTS
from harness.agents.grpo_math import group_advantages
from harness.analysis import signatures
from harness.config import ConfigError
from harness.store import RunStore
from tests.helpers import LOUD, make_experiment, train

GRPO = ["algo=grpo", "env=toyseq"]
SHORT = ["env.total_timesteps=25600"]            # 20 updates of 128 completions (<= 10 tokens each)
SEEDS = [0, 1, 2]
#: faults whose trace in a short default run is too faint for their primary signature: a result
#: (tested below under the conditions where they do show), not something to tune away
FAINT = {"kl_penalty_sign_flip": "at beta=0.04 the flipped KL term barely moves a 24-update run (verl's bug "
                                 "'still worked', Logic-RL#58); test_kl_penalty_sign_flip uses beta=0.5",
         "eos_masked": "no length drift in 60 updates on toyseq (the model keeps stopping as the warm-up taught it); "
                       "tests/test_llm_faults_more.py checks that exactly the EOS tokens leave the mask",
         "grad_accum_microbatch_dropped": "grad_norm_small's default threshold (10) is PPO's scale: the GRPO twin is "
                                          "below it too (the catalogue calibrates it); tests/test_llm_faults_more.py "
                                          "checks the step uses only the last micro-batch and the grad norm drops",
         "rollout_precision_uncorrected": "the bf16 gap of a 2-layer model shrinks over 20 updates (0.003 -> 0.0025 "
                                          "nats on 3 of 3 seeds): the reports' growth toward collapse needs long runs "
                                          "and large models; tests/test_new_faults.py checks only the correction "
                                          "differs"}
FOR_GRPO = sorted(name for name, cls in FAULTS.items()
                  if "grpo" in cls.algos and name != "none" and name not in FAINT and cls.expected)


def run_pair(fault: str, seed: int, store_dir, *extra: str):
    common = [*GRPO, f"seed={seed}", f"results_dir={store_dir}", *SHORT, *extra]
    return train([f"fault={fault}", *LOUD.get(fault, []), *common]), train(["fault=none", *common])


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
    """From the warm-up checkpoint: a middling start, mean reward of the last 10 updates >= 0.85,
    KL to the reference 0 at the start and small throughout, entropy not collapsed (its wall time is
    measured in benchmarks/grpo_speed.py, not here)."""
    collapsed = 0
    for seed in SEEDS:
        res = train([*GRPO, f"seed={seed}", f"results_dir={tmp_path}"])
        m = res.metrics
        assert res.meta["status"] == "ok"
        assert 0.4 <= m["reward_mean"].iloc[:5].mean() <= 0.7, f"seed {seed}"
        assert m["reward_mean"].iloc[-10:].mean() >= 0.85, f"seed {seed}"
        steps = RunStore(tmp_path).load_steps(res.run_id)
        assert steps["kl_ref"].iloc[0] == 0                      # the first minibatch is at the reference
        assert m["kl_ref"].max() < 1.0
        collapsed += signatures.evaluate(m, res.meta, names=["entropy_collapse"])["entropy_collapse"].fired
    assert collapsed <= 1


def test_grpo_metrics_are_recorded(store_dir):
    _, twin = run_pair("shared_policy", 0, store_dir)
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
    assert m["reward_mean"].iloc[-5:].mean() > m["reward_mean"].iloc[:5].mean()
    steps = RunStore(store_dir).load_steps(twin.run_id)
    assert len(steps) == 4 * len(m) and (steps["n_tokens"] > steps["n_samples"]).all()
    assert steps["kl_ref"].notna().all()


@pytest.mark.parametrize("fault", FOR_GRPO)
def test_fault_shows_expected_signature_on_grpo(fault, store_dir):
    """One of the fault's expected signatures fires (the first that does, usually the primary; a
    shared fault's primary is sometimes PPO's: excessive_lr's KL spike is entropy collapse here) on
    at least 2 of 3 seeds, and never on the healthy twin of a seed where it fired. A rate over
    seeds, not one seed's run: GRPO's sampled completions differ between CPU families (torch picks
    AVX2 or AVX-512 kernels), so a threshold one seed crosses on one machine may not on another."""
    expected = list(FAULTS[fault].expected)
    fired_on: dict[int, list[str]] = {}
    evidence = {}
    for seed in SEEDS:
        faulty, twin = run_pair(fault, seed, store_dir)
        results = signatures.evaluate(faulty.metrics, faulty.meta, names=expected)
        fired = [name for name in expected if results[name].fired]
        evidence[seed] = [results[n].evidence for n in expected]
        if fired:
            fired_on[seed] = fired
            on_twin = signatures.evaluate(twin.metrics, twin.meta, onset=faulty.meta["onset_update"],
                                          names=fired[:1])
            assert not on_twin[fired[0]].fired, f"seed {seed}: {on_twin[fired[0]].evidence} on the healthy twin"
    assert len(fired_on) >= 2, f"{fault}: {expected} fired on seeds {sorted(fired_on)} only ({evidence})"


@pytest.mark.parametrize("beta", ["0.0", "0.04"])
def test_zero_reward_freezes_grpo(beta, store_dir):
    faulty, twin = run_pair("zero_reward", 0, store_dir, f"algo.beta={beta}")
    active = faulty.metrics[faulty.metrics["fault_active"]]
    assert len(active) == 20
    assert (active["frac_reward_zero_std"] == 1).all()
    assert (active["adv_mean"] == 0).all() and (active["adv_std"] == 0).all()
    assert (active["policy_loss"] == 0).all()
    if beta == "0.0":       # no KL term: nothing moves (with beta > 0 the KL gradient is 0 only at the start)
        assert (active["grad_norm"] == 0).all() and (active["param_delta"] == 0).all()
    assert twin.metrics["reward_mean"].iloc[-5:].mean() > twin.metrics["reward_mean"].iloc[:5].mean() + 0.05


def test_reference_not_frozen_measures_only_the_drift_within_an_update(store_dir):
    faulty, twin = run_pair("reference_not_frozen", 0, store_dir)
    m, t = faulty.metrics, twin.metrics
    assert (m["kl_ref"] > 0).all() and (m["param_delta"] > 0).all()
    # the reference is the rollout policy: kl_ref is of the order of one update's approx_kl
    assert (m["kl_ref"] / m["approx_kl"]).median() < 3 < (t["kl_ref"] / t["approx_kl"]).median()
    assert m["logp_ref_mean"].equals(m["logp_mean"])              # stored with the batch = the policy's
    in_loss = train(["fault=reference_not_frozen", "fault.computed=in_loss", *GRPO, *SHORT,
                     f"results_dir={store_dir}"])
    assert (in_loss.metrics["kl_ref"] == 0).all()                 # TRL 0.14: at the loss's own weights


def test_group_size_one_runs_as_verl_runs_rollout_n_1(store_dir):
    """verl accepts rollout.n = 1 (its default): its GRPO estimator gives a group of one mean 0 and std
    1, so the advantage is the raw reward; its vectorised RLOO zeroes every advantage (PR #7581)."""
    faulty, _ = run_pair("group_size_one", 0, store_dir)
    assert faulty.meta["hyperparameters"]["effective"]["group_size"] == 1
    # misconfigured: the config a detector sees holds G = 1 (with as many prompts as completions)
    assert faulty.meta["hyperparameters"]["configured"]["group_size"] == 1
    assert faulty.meta["hyperparameters"]["configured"]["n_prompts"] == 128
    m = faulty.metrics
    assert (m["frac_reward_zero_std"] == 1).all() and (m["group_reward_std_mean"] == 0).all()
    assert np.allclose(m["adv_mean"], m["reward_mean"] / (1 + 1e-6), rtol=1e-5) and (m["adv_mean"] > 0).all()
    assert (m["policy_loss"] != 0).any()
    zero = train(["fault=group_size_one", "fault.estimator=rloo_vectorized", *GRPO, *SHORT, f"results_dir={store_dir}"])
    z = zero.metrics
    assert (z["adv_mean"] == 0).all() and (z["adv_std"] == 0).all() and (z["policy_loss"] == 0).all()


def test_adv_std_no_floor_residue_gives_finite_huge_advantages(store_dir):
    from harness.agents.grpo_math import loo_advantages

    # the default rewards: 0.3 (format only) and 0.95 (right) are not dyadic fractions; a 7-vs-1 split
    fmt_only, right = np.float32(0.3), np.float32(0.3) + np.float32(0.65)
    adv = loo_advantages(torch.tensor([fmt_only] * 7 + [right]), 8, floor=0.0)      # the guard before the fix
    g, others = torch.tensor([[fmt_only] * 7 + [right]]), (1 - torch.eye(8)).T      # the estimator's own matmuls
    residue = float(((g * g) @ others / 7 - (g @ others / 7).square())[0, -1])
    # whether fp32 leaves a residue here depends on the matmul kernel (AVX2 does, AVX-512 MKL does not)
    assert torch.isfinite(adv).all() and (adv[-1] > 1000 if residue > 0 else adv[-1] == right - fmt_only)
    adv = loo_advantages(torch.tensor([right] * 7 + [0.0]), 8, floor=0.0)
    assert adv[-1] < -1000                                               # NeMo-RL PR 4158's [0, 0.95 x 7]
    fixed = loo_advantages(torch.tensor([right] * 7 + [0.0]), 8)         # PR 4161's floor: r - baseline
    assert fixed[-1] == pytest.approx(-float(right), rel=1e-5)
    assert torch.allclose(loo_advantages(torch.tensor([1.0] * 7 + [0.0]), 8)[-1], torch.tensor(-1.0))  # dyadic
    faulty, twin = run_pair("adv_std_no_floor", 0, store_dir, "algo.baseline=leave_one_out")
    assert faulty.meta["hyperparameters"]["configured"]["baseline"] == "leave_one_out"
    assert faulty.meta["status"] == "ok" and np.isfinite(faulty.metrics["adv_std"]).all()
    assert faulty.metrics["adv_std"].max() > 30 > 2 > twin.metrics["adv_std"].max()
    zero = train(["fault=adv_std_no_floor", "fault.variant=zero_std", *GRPO, *SHORT, f"results_dir={store_dir}"])
    assert zero.meta["status"] == "diverged" and zero.metrics["nonfinite"].iloc[-1] == 1
    assert zero.meta["hyperparameters"]["effective"]["adv_eps"] == 0


def test_adv_std_no_floor_twin_is_the_same_estimator_with_the_floor():
    """The healthy twin of loo_residue is NeMo-RL's leave-one-out estimator with PR 4161's floor, so the
    two differ only where a leave-one-out std lies in (0, 1e-3]: on a 4/4 split (std well above the
    floor) they agree exactly, where the twin used to be mean / std (1.155 vs 0.935)."""
    from harness.agents.grpo_math import hooked_group_advantages
    from harness.hooks import HEALTHY
    from harness.pipeline.train import healthy_twin

    exp = make_experiment(["fault=adv_std_no_floor", *GRPO, *SHORT])
    twin = healthy_twin(exp)
    assert exp.algo.baseline == twin.algo.baseline == "leave_one_out" and twin.algo.scale == "group"
    split = torch.tensor([0.3, 0.3, 0.3, 0.3, 0.95, 0.95, 0.95, 0.95])
    fault = exp.fault
    fault.active = True
    assert torch.equal(hooked_group_advantages(split, exp.algo, fault), hooked_group_advantages(split, twin.algo, HEALTHY))
    uniform = torch.tensor([0.95] * 7 + [0.0])           # the singleton's others: a uniform set, std 0 or residue
    assert hooked_group_advantages(uniform, twin.algo, HEALTHY)[-1] == pytest.approx(-0.95, rel=1e-5)
    refusal = exp.fault.refusal("trl")
    assert refusal and "leave-one-out" in refusal and make_experiment(
        ["fault=adv_std_no_floor", "fault.variant=zero_std", "backend=trl", *GRPO, *SHORT]).algo.baseline == "mean"


def test_kl_penalty_sign_flip_pushes_away_from_the_reference(store_dir):
    common = [*GRPO, "seed=0", f"results_dir={store_dir}", *SHORT]
    faulty = train(["fault=kl_penalty_sign_flip", "fault.beta=0.5", *common])
    twin = train(["fault=none", "algo.beta=0.5", *common])      # the twin: the fault's setting, without the bug
    # a code bug: the config (what a detector sees) keeps +beta; the loss uses -beta; the twin has the same +beta
    assert faulty.meta["hyperparameters"]["configured"]["beta"] == 0.5
    assert faulty.meta["hyperparameters"]["effective"]["beta"] == -0.5
    assert faulty.metrics["kl_ref"].max() > 50 * twin.metrics["kl_ref"].max()
    assert faulty.metrics["reward_mean"].iloc[-5:].mean() < twin.metrics["reward_mean"].iloc[-5:].mean() - 0.2


def test_kl_penalty_sign_flip_is_inert_and_labelled_so_without_a_kl_term(store_dir, monkeypatch):
    """With beta = 0 (TRL's default) the flipped sign multiplies nothing: the run is its healthy twin,
    metric for metric, and the dataset labels it ``inert`` instead of teaching the diagnosis that the
    fault looks healthy (18 of 34 such runs of the 2026-11 dataset had beta = 0: version 1 of the fault
    had no setting, so it ran with the drawn beta). Version 2 brings its KL term, so its runs act."""
    from faults.kl_penalty_sign_flip import KLPenaltySignFlip
    from harness.analysis.labels import INERT, label

    common = [*GRPO, "seed=0", f"results_dir={store_dir}", "env.total_timesteps=6400", "algo.beta=0.0"]
    acting = train(["fault=kl_penalty_sign_flip", *common])
    assert acting.meta["hyperparameters"]["configured"]["beta"] == 0.04
    assert label(acting.meta, True) == "kl_penalty_sign_flip"

    monkeypatch.setattr(KLPenaltySignFlip, "setting", lambda self: {})      # version 1: no KL term of its own
    monkeypatch.setattr(KLPenaltySignFlip, "version", 1)
    faulty, twin = train(["fault=kl_penalty_sign_flip", *common]), train(["fault=none", *common])
    assert faulty.meta["hyperparameters"]["configured"]["beta"] == 0.0
    columns = [c for c in twin.metrics.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(faulty.metrics[columns], twin.metrics[columns])
    assert label(faulty.meta, True) == INERT
    assert label(twin.meta, True) == "healthy"


def test_kl_penalty_sign_flip_misconfigured_puts_the_negative_beta_in_the_config(store_dir):
    res = train(["fault=kl_penalty_sign_flip", "fault.form=misconfigured", "fault.beta=0.5", *GRPO, "seed=0",
                 f"results_dir={store_dir}", "env.total_timesteps=6400"])
    hp = res.meta["hyperparameters"]
    assert hp["configured"]["beta"] == -0.5 and hp["effective"]["beta"] == -0.5      # what a detector sees: -beta
    assert res.meta["fault_form"] == "misconfigured"


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
    assert res.run_id.split("-")[0] == algo
    m = res.metrics
    assert (m["optimizer_steps"] == 1).all()
    fired = signatures.evaluate(m, res.meta, names=["ratio_pinned", "clipfrac_zero"])
    assert fired["ratio_pinned"].fired and fired["clipfrac_zero"].fired, fired
    assert (m["param_delta"] > 0).all()                                   # it does learn


def test_ppo_runs_on_the_token_env(store_dir):
    res = train(["algo=ppo", "env=toyseq", "env.total_timesteps=8192", "algo.n_steps=64",
                 f"results_dir={store_dir}"])
    assert res.meta["status"] == "ok" and res.meta["action_space"] == {"type": "discrete", "n": 15}
    assert res.metrics["return_mean"].notna().all()


def test_mlp_model_runs_on_the_same_sampler_and_trainer(store_dir):
    res = train([*GRPO, "model=mlp", *SHORT, f"results_dir={store_dir}"])
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

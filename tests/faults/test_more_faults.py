"""Faults added from the next real reports (issue 24): each on a short real run of every backend that
can express it, against its healthy twin (which shares the fault's setting)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from faults import FAULTS
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import healthy_twin
from tests.helpers import train_with_twin

PPO = {"native": ["backend=native", "env.total_timesteps=4096", "algo.n_steps=64", "algo.num_envs=8"],  # 8 updates
       "sb3": ["backend=sb3", "env.total_timesteps=4096", "algo.n_steps=64", "algo.num_envs=8"]}


def fault_and_twin(store_dir, *overrides: str):
    return train_with_twin([*overrides, f"results_dir={store_dir}"])


@pytest.mark.parametrize("backend", ["native", "sb3"])
def test_norm_stats_not_restored_restarts_the_statistics_at_the_resume(backend, store_dir):
    """Before the resume every metric is the twin's; from it the policy sees observations scaled by
    fresh statistics, so what it does differs; at onset 0 (no resume) the run is its twin."""
    faulty, twin = fault_and_twin(store_dir, "fault=norm_stats_not_restored", "fault.onset=3", "env=pendulum",
                                  *PPO[backend])
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["norm_obs"] is True
    f, t = faulty.metrics.set_index("update"), twin.metrics.set_index("update")
    for col in ("reward_mean", "value_mean", "policy_loss", "approx_kl"):
        assert np.array_equal(f.loc[:2, col].to_numpy(), t.loc[:2, col].to_numpy()), col
    assert not np.array_equal(f.loc[3:, "value_mean"].to_numpy(), t.loc[3:, "value_mean"].to_numpy())
    at_start, twin0 = fault_and_twin(store_dir, "fault=norm_stats_not_restored", "fault.onset=0", "env=pendulum",
                                     *PPO[backend])
    cols = ["reward_mean", "value_mean", "policy_loss", "approx_kl"]
    assert np.array_equal(at_start.metrics[cols].to_numpy(), twin0.metrics[cols].to_numpy())
    assert FAULTS["norm_stats_not_restored"]().onset == 4             # by default a resume mid-run


@pytest.mark.parametrize("backend", ["native", "sb3"])
def test_envs_seeded_alike_gives_every_env_the_same_start_states(backend, monkeypatch):
    """The vector env's first reset gives every copy the same start state under the fault and
    distinct ones in its twin (gymnasium's and SB3's seed + i); the fault exists from the start only.
    It is SB3's (one env object per copy); the native trainer applies the same hook where the vector
    env has one env per copy (Pendulum here), checked by training the fault there directly."""
    from gymnasium.vector import VectorWrapper
    from stable_baselines3.common.vec_env import DummyVecEnv

    from harness.agents import ppo
    from harness.config import ConfigError
    from harness.pipeline.train import trainer

    first: list[np.ndarray] = []
    if backend == "native":
        class Recording(VectorWrapper):
            def reset(self, **kwargs):
                obs, info = self.env.reset(**kwargs)
                first.append(np.asarray(obs).copy())
                return obs, info
        make = ppo.make_vec_env
        monkeypatch.setattr(ppo, "make_vec_env", lambda *a: Recording(make(*a)))
    else:
        reset = DummyVecEnv.reset

        def recording(self):
            obs = reset(self)
            first.append(np.asarray(obs).copy())
            return obs
        monkeypatch.setattr(DummyVecEnv, "reset", recording)
    if backend == "sb3":
        exp = make_experiment(["fault=envs_seeded_alike", *PPO[backend]])
    else:                # not a registered backend of the fault: the hook, on an env with one object per copy
        exp = make_experiment(["fault=none", "env=pendulum", *PPO[backend]])
        exp = dataclasses.replace(exp, fault=FAULTS["envs_seeded_alike"]())
    for run in (exp, healthy_twin(exp)):
        next(iter(trainer(run).train(run)))                       # one update: the first reset is done
    faulty, twin = first[0], first[len(first) // 2] if backend == "sb3" else first[1]
    n = exp.algo.num_envs
    assert faulty.shape[0] == twin.shape[0] == n
    assert all(np.array_equal(faulty[0], row) for row in faulty)
    assert len({row.tobytes() for row in twin}) == n
    with pytest.raises(ConfigError, match="onset 0 only"):
        make_experiment(["fault=envs_seeded_alike", "fault.onset=2", *PPO["sb3"]])


def test_grad_accum_mean_of_means_weights_micro_batches_equally(store_dir):
    """Both runs accumulate 4 micro-batches of token-mean loss; the fault averages the micro-batches' own
    means: the same first rollout, a different first minibatch loss (the micro-batches hold different
    numbers of tokens), and the hook gives every micro-batch 1/4 whatever its tokens."""
    from harness.store import RunStore

    fault = FAULTS["grad_accum_mean_of_means"]()
    assert fault.micro_share(0.4, 4) == fault.micro_share(0.1, 4) == 0.25
    faulty, twin = fault_and_twin(store_dir, "fault=grad_accum_mean_of_means", "algo=grpo", "env=toyseq",
                                  "env.total_timesteps=3840")
    for run in (faulty, twin):
        hp = run.meta["hyperparameters"]["configured"]
        assert hp["grad_accum"] == 4 and hp["loss_agg"] == "token_mean"
    f, t = faulty.metrics.iloc[0], twin.metrics.iloc[0]
    assert f["reward_mean"] == t["reward_mean"] and f["length_mean"] == t["length_mean"]
    steps_f, steps_t = (RunStore(store_dir).load_steps(r.run_id) for r in (faulty, twin))
    assert steps_f["n_tokens"].iloc[0] == steps_t["n_tokens"].iloc[0]          # the same first minibatch
    assert steps_f["loss"].iloc[0] != pytest.approx(steps_t["loss"].iloc[0], rel=1e-6)


def test_sampling_filter_not_replayed_biases_every_ratio_by_the_kept_mass(store_dir):
    """Both runs sample under top-p 0.9 and take the old log-probs from the sampler; the twin's trainer
    replays the truncation (its log-probs match the sampler's), the fault's scores the full vocabulary:
    every trainer log-prob is below the sampler's by log(kept mass), the ratio's mean sits below 1."""
    import torch

    from harness.agents.lm import token_logprobs
    from harness.agents.sampler import filter_logits

    logits = torch.randn(4, 6, 12, generator=torch.Generator().manual_seed(0))
    tokens = filter_logits(logits, 0, 0.9).softmax(-1).argmax(-1)            # tokens inside the kept set
    kept, _ = token_logprobs(logits, tokens, 1.0, 0, 0.9)
    full, _ = token_logprobs(logits, tokens, 1.0)
    assert (kept >= full).all() and (kept > full).any()                    # renormalised over the kept set
    faulty, twin = fault_and_twin(store_dir, "fault=sampling_filter_not_replayed", "algo=grpo", "env=toyseq",
                                  "env.total_timesteps=12800")
    for run in (faulty, twin):
        hp = run.meta["hyperparameters"]["configured"]
        assert hp["top_p"] == 0.9 and hp["use_sampler_logprobs"] is True and run.meta["status"] == "ok"
    f, t = faulty.metrics, twin.metrics
    assert (t["sampler_logp_diff_mean"] < 1e-4).all() and (f["sampler_logp_diff_mean"] > 0.01).all()
    assert f["ratio_mean"].median() < 0.97 < t["ratio_mean"].median()
    from harness.analysis.signatures import evaluate
    fired = [evaluate(r.metrics, r.meta, names=["sampler_mismatch_high"])["sampler_mismatch_high"].fired
             for r in (faulty, twin)]
    assert fired == [True, False]


def test_rollout_precision_uncorrected_drops_only_the_correction(store_dir):
    """Both runs sample in bf16 beside the fp32 trainer and log the same gap at the first rollout; the
    twin's update carries verl's truncated importance sampling, the fault's config has none (what the
    user's config holds), so from the first update their steps differ."""
    faulty, twin = fault_and_twin(store_dir, "fault=rollout_precision_uncorrected", "algo=grpo", "env=toyseq",
                                  "env.total_timesteps=3840")
    assert faulty.meta["hyperparameters"]["configured"]["is_correction"] == "none"       # misconfigured
    assert twin.meta["hyperparameters"]["configured"]["is_correction"] == "token_truncate"
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["sampler_precision"] == "bf16"
    f, t = faulty.metrics.iloc[0], twin.metrics.iloc[0]
    assert f["sampler_logp_diff_mean"] == t["sampler_logp_diff_mean"] > 1e-4            # the same bf16 gap
    assert f["param_delta"] != t["param_delta"]


def test_the_ratio_makes_a_kl_estimate_s_gradient_the_kl_s():
    """The premise of kl_gradient_biased, on a categorical policy where the reverse KL and its gradient
    are exact: on samples of the policy, the mean gradient of k3 (or k1) times the ratio (value 1,
    differentiable) matches grad KL(pi || ref); k3 alone does not, and k1 alone averages to ~0."""
    import torch

    from harness.agents.grpo_math import kl_terms

    torch.manual_seed(0)
    logits = torch.randn(6, requires_grad=True)
    ref = torch.log_softmax(torch.randn(6), -1)
    logp_all = torch.log_softmax(logits, -1)
    exact = torch.autograd.grad((logp_all.exp() * (logp_all - ref)).sum(), logits)[0]
    samples = torch.distributions.Categorical(logits=logits.detach()).sample((400_000,))

    def mean_grad(estimator: str, weighted: bool) -> torch.Tensor:
        logp = torch.log_softmax(logits, -1)[samples]
        k = kl_terms(ref[samples] - logp, estimator)
        if weighted:
            k = k * (logp - logp.detach()).exp()
        return torch.autograd.grad(k.mean(), logits)[0]

    for estimator in ("k3", "k1"):
        assert torch.allclose(mean_grad(estimator, True), exact, atol=0.01), estimator
    assert (mean_grad("k3", False) - exact).abs().max() > 0.05
    assert mean_grad("k1", False).abs().max() < 0.01 < exact.abs().max()


@pytest.mark.parametrize("backend,form", [("native", "code bug"), ("native", "misconfigured"), ("trl", "code bug")])
def test_kl_gradient_biased_drops_only_the_ratio(store_dir, backend, form):
    """Run and twin share the KL penalty (beta) and start alike; the twin's penalty carries the ratio,
    the fault's does not (its config says so only when misconfigured), so their steps part once the
    policy has left the reference (at the reference both penalties have zero gradient)."""
    if backend == "trl":
        pytest.importorskip("trl")
    faulty, twin = fault_and_twin(store_dir, "fault=kl_gradient_biased", f"fault.form={form}", "algo=grpo",
                                  "env=toyseq", f"backend={backend}", "env.total_timesteps=6400")
    configured = faulty.meta["hyperparameters"]["configured"]
    assert configured["kl_is_weight"] is (form == "code bug")
    assert twin.meta["hyperparameters"]["configured"]["kl_is_weight"] is True
    assert faulty.meta["hyperparameters"]["effective"]["kl_is_weight"] is False
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["beta"] == 0.04
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]           # the same first rollout
    assert not np.array_equal(f["param_delta"].to_numpy(), t["param_delta"].to_numpy())


def test_kl_gradient_biased_k1_is_native_only():
    from harness.config import ConfigError

    with pytest.raises(ConfigError, match="TRL's KL penalty is k3; fault.estimator=k1 runs on backend=native"):
        make_experiment(["fault=kl_gradient_biased", "fault.estimator=k1", "algo=grpo", "env=toyseq", "backend=trl"])


def test_value_loss_clipping_is_cleanrl_s():
    """CleanRL's clipped value loss: the worse of the clipped and unclipped errors, so a value that
    moved more than clip_range_vf toward its target gets no further gradient."""
    import torch

    from harness.agents.core import value_loss

    old, ret = torch.zeros(3), torch.tensor([10.0, 10.0, -1.0])
    value = torch.tensor([0.1, 0.5, 0.0], requires_grad=True)
    assert float(value_loss(value, old, ret, None).detach()) == pytest.approx(float(((value - ret) ** 2).mean().detach()))
    (grad,) = torch.autograd.grad(value_loss(value, old, ret, 0.2), value)
    assert grad[0] < 0 and grad[1] == 0          # within the range: pulled on; beyond it: no gradient
    assert grad[2] > 0                           # already at the old value, the target below: pulled down


@pytest.mark.parametrize("backend,form", [("native", "misconfigured"), ("native", "code bug"), ("sb3", "misconfigured")])
def test_vf_clip_unscaled_makes_the_critic_lag(store_dir, backend, form):
    """CartPole's returns grow to tens within a few updates; a critic allowed 0.2 per update lags them
    (SB3's own logged value loss is cross-checked against the instrument's clipped one on sb3)."""
    faulty, twin = fault_and_twin(store_dir, "fault=vf_clip_unscaled", f"fault.form={form}", "env=cartpole",
                                  *PPO[backend])
    configured = faulty.meta["hyperparameters"]["configured"]["clip_range_vf"]
    assert configured == (0.2 if form == "misconfigured" else None)
    assert faulty.meta["hyperparameters"]["effective"]["clip_range_vf"] == 0.2
    assert twin.meta["hyperparameters"]["configured"]["clip_range_vf"] is None
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]
    assert f["value_mean"].iloc[-1] < 0.5 * t["value_mean"].iloc[-1]
    assert f["value_loss"].iloc[-3:].mean() > t["value_loss"].iloc[-3:].mean()


def test_vf_clip_unscaled_needs_a_config_without_value_clipping():
    from harness.config import ConfigError

    with pytest.raises(ConfigError, match="needs a config without value clipping .* algo.clip_range_vf=0.5"):
        make_experiment(["fault=vf_clip_unscaled", "algo.clip_range_vf=0.5"])


def test_reference_is_base_model_starts_far_from_its_reference(store_dir):
    """The policy starts from the warm-up, the reference is the model the warm-up started from: the KL
    to the reference is large from the first update (the twin's starts at ~0), kl_ref_high_at_start
    fires on the fault and not on the twin; both share the KL penalty."""
    from harness.analysis.signatures import evaluate

    faulty, twin = fault_and_twin(store_dir, "fault=reference_is_base_model", "algo=grpo", "env=toyseq",
                                  "env.total_timesteps=6400")
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["beta"] == 0.04
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]         # the same policy, the same first rollout
    assert f["kl_ref"].iloc[0] > 0.5 > 0.05 > t["kl_ref"].iloc[0]
    fired = [evaluate(r.metrics, r.meta, names=["kl_ref_high_at_start"])["kl_ref_high_at_start"].fired
             for r in (faulty, twin)]
    assert fired == [True, False]


def test_reference_is_base_model_is_refused_where_it_cannot_exist():
    from harness.config import ConfigError

    with pytest.raises(ConfigError, match="acts on reference_weights .*PEFT adapter"):
        make_experiment(["fault=reference_is_base_model", "algo=grpo", "env=toyseq", "backend=trl"])
    with pytest.raises(ConfigError, match="acts where the run starts"):
        make_experiment(["fault=reference_is_base_model", "fault.onset=3", "algo=grpo", "env=toyseq"])

"""What particular PPO faults do, beyond acting from their onset (test_every_fault.py): the quantity each
pins or changes, what the config a detector sees holds in each form, the telemetry faults' training left
untouched, a resume's fresh statistics, the envs' shared start states, the critic's lag. The runs are the
per-fault check's own where they show it (tests/faults/setups.py), shared through ``store_dir``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from faults import FAULTS
from harness.analysis import signatures
from harness.metrics import CANONICAL
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import healthy_twin
from tests.faults.setups import FAST_PPO, ONSET, fast_pair, fast_run, same
from tests.helpers import train_with_twin


def test_shared_policy_pins_the_ratio_exactly_from_its_onset(store_dir):
    faulty, twin = fast_pair(store_dir, "shared_policy")
    m = faulty.metrics
    assert faulty.meta["onset_update"] == ONSET
    assert list(m["fault_active"]) == [u >= ONSET for u in m["update"]]
    assert (m.loc[~m["fault_active"], "ratio_dev_max"] > 0).all()
    active = m[m["fault_active"]]
    assert (active["ratio_dev_max"] == 0).all()
    assert (active["approx_kl"] == 0).all() and (active["clipfrac"] == 0).all()
    assert (twin.metrics["ratio_dev_max"] > 0).all()
    # the signature is judged from the onset; over the whole run it would not hold
    assert signatures.evaluate(m, faulty.meta, names=["ratio_pinned"])["ratio_pinned"].fired
    assert not signatures.evaluate(m, faulty.meta, onset=0, names=["ratio_pinned"])["ratio_pinned"].fired


def test_ppo_epochs_ignored_records_configured_but_runs_one_epoch(store_dir):
    faulty, twin = fast_pair(store_dir, "ppo_epochs_ignored")
    hp = faulty.meta["hyperparameters"]
    assert hp["configured"]["n_epochs"] == 10 and hp["effective"]["n_epochs"] == 1
    n_mb = hp["configured"]["n_minibatches"]
    steps = faulty.metrics.set_index("update")["optimizer_steps"]
    assert steps.tolist() == [10 * n_mb] * ONSET + [n_mb] * (len(steps) - ONSET)
    assert (twin.metrics["optimizer_steps"] == 10 * n_mb).all()


def test_a_faults_form_decides_what_the_config_shows(store_dir):
    """misconfigured (tiny_clip, excessive_lr by default): the user's config holds the bad value from the
    start and it is what gets logged; switched on mid-run, the config shows what the run started with;
    overridden: the config keeps the intended value, the update uses the bad one."""
    tiny = fast_run(store_dir, "fault=tiny_clip")
    assert tiny.meta["fault_form"] == "misconfigured"
    assert tiny.meta["hyperparameters"]["effective"]["clip_range"] == 1e-3
    assert tiny.meta["hyperparameters"]["configured"]["clip_range"] == 1e-3
    assert (tiny.metrics["clip_range"] == 1e-3).all()
    late, _ = fast_pair(store_dir, "tiny_clip")
    assert late.meta["hyperparameters"]["configured"]["clip_range"] == 0.2
    assert late.metrics["clip_range"].tolist() == pytest.approx([0.2] * ONSET + [1e-3] * (3 - ONSET))

    lr = fast_run(store_dir, "fault=excessive_lr", "fault.factor=100")
    assert lr.meta["fault_params"] == {"factor": 100.0, "form": "misconfigured"}
    assert lr.meta["hyperparameters"]["configured"]["lr"] == pytest.approx(0.1)
    assert lr.metrics["lr"].tolist() == pytest.approx([0.1] * 3)
    over = fast_run(store_dir, "fault=excessive_lr", "fault.form=overridden")
    assert over.meta["hyperparameters"]["configured"]["lr"] == pytest.approx(1e-3)
    assert over.meta["hyperparameters"]["effective"]["lr"] == pytest.approx(3e-3)          # 3x, the default
    assert over.metrics["lr"].tolist() == pytest.approx([3e-3] * 3)
    late_lr, _ = fast_pair(store_dir, "excessive_lr")
    assert late_lr.metrics["lr"].tolist() == pytest.approx([1e-3] * ONSET + [3e-3] * (3 - ONSET))


def test_fault_parameter_changes_the_run(store_dir):
    a = fast_run(store_dir, "fault=tiny_clip", "fault.clip_range=0.05")
    assert (a.metrics["clip_range"] == 0.05).all()
    assert a.meta["fault_params"] == {"clip_range": 0.05, "form": "misconfigured"}


def test_zero_reward_zeroes_what_the_learner_sees(store_dir):
    faulty, twin = train_with_twin(["fault=zero_reward", *FAST_PPO, f"results_dir={store_dir}"])
    assert (faulty.metrics["reward_mean"] == 0).all()
    assert (faulty.metrics["return_mean"].dropna() == 0).all()
    assert (twin.metrics["reward_mean"] == 1).all()
    assert faulty.metrics["length_mean"].notna().any()          # the episodes still happen: lengths are recorded
    late, _ = fast_pair(store_dir, "zero_reward")
    assert late.metrics["reward_mean"].tolist() == [1] * ONSET + [0] * (3 - ONSET)


@pytest.mark.parametrize("fault", ["clipfrac_denominator_wrong", "metric_constant"])
def test_telemetry_faults_leave_training_untouched(fault, store_dir):
    faulty, twin = fast_pair(store_dir, fault)
    assert FAULTS[fault].kind == "telemetry"
    wrong = {"clipfrac_denominator_wrong": {"clipfrac", "approx_kl", "kl_k1", "clipfrac_binding", "clip_low_frac",
                                            "clip_high_frac"},
             "metric_constant": {"clipfrac", "clip_low_frac", "clip_high_frac"}}[fault]
    for m in CANONICAL:
        if m not in wrong:
            assert same(faulty.metrics[m], twin.metrics[m]), m
    f, t = faulty.metrics.iloc[ONSET:], twin.metrics.iloc[ONSET:]
    if fault == "metric_constant":
        assert (f["clipfrac"] == 0).all() and (t["clipfrac"] > 0).all()
        assert (f["ratio_dev_max"] > f["clip_range"]).all()
    else:
        np.testing.assert_allclose(f["clipfrac"], 84 * t["clipfrac"], rtol=1e-5)
        np.testing.assert_allclose(f["approx_kl"], 84 * t["approx_kl"], rtol=1e-4)
        np.testing.assert_allclose(f["clipfrac_binding"], 84 * t["clipfrac_binding"], rtol=1e-5)


@pytest.mark.parametrize("backend", ["native", "sb3"])
def test_norm_stats_not_restored_restarts_the_statistics_at_the_resume(backend, store_dir):
    """Before the resume every metric is the twin's; from it the policy sees observations scaled by
    fresh statistics, so what it does differs; at onset 0 (no resume) the run is its twin."""
    common = ["fault=norm_stats_not_restored", *FAST_PPO, f"backend={backend}", f"results_dir={store_dir}"]
    faulty, twin = train_with_twin([*common, f"fault.onset={ONSET}"])
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["norm_obs"] is True
    f, t = faulty.metrics.set_index("update"), twin.metrics.set_index("update")
    for col in CANONICAL:
        assert same(f.loc[:ONSET - 1, col], t.loc[:ONSET - 1, col]), col
    assert not np.array_equal(f.loc[ONSET:, "value_mean"].to_numpy(), t.loc[ONSET:, "value_mean"].to_numpy())
    at_start, twin0 = train_with_twin([*common, "fault.onset=0"])
    for col in CANONICAL:
        assert same(at_start.metrics[col], twin0.metrics[col]), col
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
        exp = make_experiment(["fault=envs_seeded_alike", "backend=sb3", *FAST_PPO])
    else:                # not a registered backend of the fault: the hook, on an env with one object per copy
        exp = make_experiment(["fault=none", "env=pendulum", *FAST_PPO])
        exp = dataclasses.replace(exp, fault=FAULTS["envs_seeded_alike"]())
    for run in (exp, healthy_twin(exp)):
        next(iter(trainer(run).train(run)))                       # one update: the first reset is done
    faulty, twin = first[0], first[len(first) // 2] if backend == "sb3" else first[1]
    n = exp.algo.num_envs
    assert faulty.shape[0] == twin.shape[0] == n
    assert all(np.array_equal(faulty[0], row) for row in faulty)
    assert len({row.tobytes() for row in twin}) == n
    with pytest.raises(ConfigError, match="onset 0 only"):
        make_experiment(["fault=envs_seeded_alike", "fault.onset=2", "backend=sb3", *FAST_PPO])


def test_value_loss_clipping_is_cleanrl_s():
    """CleanRL's clipped value loss (vf_clip_unscaled's premise): the worse of the clipped and unclipped
    errors, so a value that moved more than clip_range_vf toward its target gets no further gradient."""
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
    faulty, twin = train_with_twin(["fault=vf_clip_unscaled", f"fault.form={form}", f"backend={backend}", *FAST_PPO,
                                    f"results_dir={store_dir}"])
    configured = faulty.meta["hyperparameters"]["configured"]["clip_range_vf"]
    assert configured == (0.2 if form == "misconfigured" else None)
    assert faulty.meta["hyperparameters"]["effective"]["clip_range_vf"] == 0.2
    assert twin.meta["hyperparameters"]["configured"]["clip_range_vf"] is None
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]
    assert f["value_mean"].iloc[-1] < 0.5 * t["value_mean"].iloc[-1]
    assert f["value_loss"].iloc[-3:].mean() > t["value_loss"].iloc[-3:].mean()

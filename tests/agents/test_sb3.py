"""backend=sb3: stable-baselines3's PPO with the same faults, and agreement across implementations."""

from __future__ import annotations

import numpy as np
import pytest

from faults import FAULTS
from harness.analysis import signatures
from harness.config import ConfigError
from harness.metrics import COLUMNS
from tests.helpers import LOUD, make_experiment, train

SB3 = ["backend=sb3", "env.total_timesteps=12288", "algo.n_steps=64"]
NATIVE = ["backend=native", "env.total_timesteps=12288", "algo.n_steps=64"]
CORE = ["shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward", "excessive_lr"]


@pytest.mark.slow
def test_healthy_sb3_ppo_solves_cartpole_within_100k_steps(tmp_path):
    finals = []
    for seed in range(3):
        res = train(["backend=sb3", "fault=none", f"seed={seed}", f"results_dir={tmp_path}"])
        assert res.meta["status"] == "ok" and res.metrics["env_step"].iloc[-1] <= 100_000
        finals.append(float(np.nanmean(res.metrics["return_mean"].iloc[-5:])))
    assert sum(f >= 400 for f in finals) >= 2, finals


@pytest.mark.parametrize("fault", CORE)
def test_primary_signature_fires_on_both_backends(fault, store_dir):
    primary = FAULTS[fault].expected[0]
    for backend in (NATIVE, SB3):
        for seed in (0, 1):
            faulty = train([f"fault={fault}", *LOUD.get(fault, []), f"seed={seed}", *backend, f"results_dir={store_dir}"])
            twin = train(["fault=none", f"seed={seed}", *backend, f"results_dir={store_dir}"])
            got = signatures.evaluate(faulty.metrics, faulty.meta, names=[primary])[primary]
            assert got.fired, f"{fault} on {backend[0]} seed {seed}: {got.evidence}"
            assert not signatures.evaluate(twin.metrics, twin.meta, names=[primary])[primary].fired


def test_sb3_shared_policy_pins_the_ratio_exactly(store_dir):
    faulty = train(["fault=shared_policy", *SB3, f"results_dir={store_dir}"])
    twin = train(["fault=none", *SB3, f"results_dir={store_dir}"])
    assert faulty.run_id.startswith("ppo-cartpole-sb3-shared_policy")
    active = faulty.metrics[faulty.metrics["fault_active"]]
    assert len(active) == 12 and (active["ratio_dev_max"] == 0).all() and (active["approx_kl"] == 0).all()
    assert (twin.metrics["ratio_dev_max"] > 0).all()


def test_sb3_records_every_ppo_metric(store_dir):
    res = train(["fault=ppo_epochs_ignored", "fault.onset=4", *SB3, f"results_dir={store_dir}"])
    m = res.metrics
    assert tuple(m.columns) == COLUMNS
    for col in ("reward_mean", "return_mean", "adv_mean", "adv_std", "value_mean", "explained_variance",
                "policy_loss", "value_loss", "entropy", "loss", "approx_kl", "kl_k1", "clipfrac",
                "clipfrac_binding", "ratio_mean", "ratio_min", "ratio_max", "ratio_dev_max", "grad_norm",
                "grad_norm_max", "optimizer_steps", "lr", "clip_range", "param_delta", "nonfinite"):
        assert m[col].notna().all(), col
    assert (m["entropy"] > 0).all()                                 # SB3's entropy_loss is -entropy
    assert list(m["optimizer_steps"]) == [40] * 4 + [4] * 8         # 10 epochs x 4 mb, then 1 epoch
    assert res.meta["hyperparameters"]["effective"]["n_epochs"] == 1
    assert (m["grad_norm_max"] >= m["grad_norm"]).all() and (m["grad_norm"] > 0.5).any()   # pre-clip


def test_sb3_hyperparameter_and_env_faults_switch_at_onset(store_dir):
    lr = train(["fault=excessive_lr", "fault.factor=100", "fault.onset=3", *SB3, f"results_dir={store_dir}"]).metrics
    assert lr["lr"].tolist() == pytest.approx([1e-3] * 3 + [0.1] * 9)
    clip = train(["fault=tiny_clip", "fault.onset=3", *SB3, f"results_dir={store_dir}"]).metrics
    assert clip["clip_range"].tolist() == pytest.approx([0.2] * 3 + [1e-3] * 9)
    zero = train(["fault=zero_reward", "fault.onset=3", *SB3, f"results_dir={store_dir}"]).metrics
    assert (zero["reward_mean"].iloc[:3] == 1).all() and (zero["reward_mean"].iloc[3:] == 0).all()


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


def test_a_fault_sb3_cannot_express_is_refused():
    from dataclasses import dataclass

    from faults.base import Fault
    from harness.agents.sb3 import SB3Trainer

    check_expressible = SB3Trainer().check_expressible

    @dataclass
    class SkipSteps(Fault):
        name = "skip_steps"
        backends = ("native", "sb3")

        def optimizer_step(self, optimizer):
            pass

    with pytest.raises(ConfigError, match="fault skip_steps cannot be expressed on backend=sb3: it acts on "
                                          "optimizer_step"):
        check_expressible(SkipSteps())
    for cls in FAULTS.values():          # a fault that says it runs on SB3 does, in one of its forms at least
        if "sb3" in cls.backends:
            forms = cls.forms() if "form" in cls.param_docs() else None
            faults = [cls(form=f) for f in forms] if forms else [cls()]
            check_expressible(next(f for f in faults if f.refusal("sb3") is None))

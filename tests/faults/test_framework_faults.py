"""Faults on the framework backends: stable-baselines3's PPO (backend=sb3) and TRL's GRPOTrainer
(backend=trl, skipped without the [trl] extra) express a fault through their extension points, or
refuse it in one line naming why. Short real runs against their healthy twins, through ``store_dir``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from faults import FAULTS
from faults.base import Fault
from harness.agents.base import backends_of
from harness.config import ConfigError
from harness.pipeline.compose import make_experiment
from tests.faults.setups import FAST_GRPO, FAST_PPO, ONSET, assert_acts_from_onset, backend, fast_pair
from tests.helpers import train, train_with_twin

SB3 = ["backend=sb3", *FAST_PPO]                     # 3 updates of 4 envs x 32 steps
TRL = [*FAST_GRPO, "backend=trl"]                   # 3 updates of 128 completions


def sb3_pair(store_dir, fault: str, *extra: str):
    return train_with_twin([f"fault={fault}", *SB3, f"results_dir={store_dir}", *extra])


def trl_pair(store_dir, fault: str, *extra: str):
    pytest.importorskip("trl")
    return train_with_twin([f"fault={fault}", *TRL, f"results_dir={store_dir}", *extra])


def expressible_on_sb3(fault: str) -> bool:
    """Whether SB3 runs the fault at its defaults (what make_experiment checks, without composing a config)."""
    from harness.agents.sb3 import SB3Trainer

    if "sb3" not in backends_of(FAULTS[fault]) or FAULTS[fault]().refusal("sb3"):
        return False
    try:
        SB3Trainer().check_expressible(FAULTS[fault]())
    except ConfigError:
        return False
    return True


# ---- SB3 ----

#: the faults SB3 expresses besides the native trainer (the fast per-fault check runs them natively)
ON_SB3 = [name for name in FAULTS if name != "none" and backend(name) != "sb3" and expressible_on_sb3(name)]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ON_SB3)
def test_fault_acts_from_its_onset_and_not_before_on_sb3(fault, store_dir):
    """SB3 reaches a fault's hooks through its own callbacks, wrappers and schedule callables, not the
    native loops test_every_fault.py checks: each acts from its onset there too, and not before."""
    faulty, twin = fast_pair(store_dir, fault, backend_="sb3")
    assert faulty.meta["backend"] == "sb3"
    assert_acts_from_onset(fault, faulty, twin)


def test_sb3_shared_policy_pins_the_ratio_exactly(store_dir):
    faulty, twin = sb3_pair(store_dir, "shared_policy")
    assert faulty.run_id.startswith("ppo-cartpole-sb3-shared_policy")
    active = faulty.metrics[faulty.metrics["fault_active"]]
    assert len(active) == 3 and (active["ratio_dev_max"] == 0).all() and (active["approx_kl"] == 0).all()
    assert (twin.metrics["ratio_dev_max"] > 0).all()


def test_sb3_hyperparameter_and_env_faults_switch_at_onset(store_dir):
    common = [*SB3, f"fault.onset={ONSET}", f"results_dir={store_dir}"]
    lr = train(["fault=excessive_lr", "fault.factor=100", *common]).metrics
    assert lr["lr"].tolist() == pytest.approx([1e-3] * ONSET + [0.1] * (3 - ONSET))
    clip = train(["fault=tiny_clip", *common]).metrics
    assert clip["clip_range"].tolist() == pytest.approx([0.2] * ONSET + [1e-3] * (3 - ONSET))
    zero = train(["fault=zero_reward", *common]).metrics
    assert (zero["reward_mean"].iloc[:ONSET] == 1).all() and (zero["reward_mean"].iloc[ONSET:] == 0).all()


def test_entropy_sign_flip_runs_on_sb3_in_its_misconfigured_form(store_dir):
    faulty, twin = sb3_pair(store_dir, "entropy_sign_flip", "fault.form=misconfigured", f"fault.onset={ONSET}")
    hp = faulty.meta["hyperparameters"]
    assert hp["configured"]["ent_coef"] == 0.01 and hp["effective"]["ent_coef"] == -0.01   # switched mid-run
    assert twin.meta["hyperparameters"]["configured"]["ent_coef"] == 0.01
    assert not math.isclose(faulty.metrics["entropy"].iloc[-1], twin.metrics["entropy"].iloc[-1])


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward", "excessive_lr"])
def test_the_core_faults_leave_the_same_first_signature_on_sb3(fault, store_dir):
    """Agreement across implementations: SB3 expresses the core faults through its own callbacks and
    wrappers, and their first expected signature fires there as on the native trainer (test_every_fault.py),
    not on SB3's healthy twin: 12 updates of 16 envs x 64 steps, the loud end of excessive_lr."""
    from harness.analysis import signatures
    from tests.helpers import LOUD, SHORT

    faulty, twin = train_with_twin([f"fault={fault}", *LOUD.get(fault, []), "backend=sb3", *SHORT,
                                    f"results_dir={store_dir}"])
    first = FAULTS[fault].expected[0]
    got = signatures.evaluate(faulty.metrics, faulty.meta, names=[first])[first]
    assert got.fired, f"{fault} on sb3: {got.evidence}"
    assert not signatures.evaluate(twin.metrics, twin.meta, names=[first])[first].fired


@pytest.mark.parametrize("overrides, message", [
    (["fault=policy_loss_sign_flip"], "it acts on surrogate (SB3 computes the clipped surrogate inside PPO.train())"),
    (["fault=grad_accum_double_scaling"], "it acts on loss (SB3 builds the loss inside PPO.train())"),
    (["fault=clipfrac_denominator_wrong"], "it acts on ratio_metrics (SB3 computes and logs clip_fraction"),
    (["fault=metric_constant"], "it acts on ratio_metrics"),
    (["fault=whiten_tiny_batch"], "SB3 skips advantage normalisation for a one-sample minibatch since PR#1028"),
    (["fault=entropy_sign_flip"], "in form 'code bug' the sign slip is in the loss, which SB3 builds inside"),
    (["algo.grad_accum=2"], "the config cannot be expressed on backend=sb3: algo.grad_accum=2 (SB3's PPO takes one"),
])
def test_sb3_refuses_what_it_cannot_express_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        make_experiment(["backend=sb3", *overrides])
    text = str(info.value)
    assert message in text and "\n" not in text, text


def test_a_fault_sb3_cannot_express_is_refused_and_every_sb3_fault_is_expressible():
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
        if "sb3" in backends_of(cls):
            forms = cls.forms() if "form" in cls.param_docs() else None
            faults = [cls(form=f) for f in forms] if forms else [cls()]
            check_expressible(next(f for f in faults if f.refusal("sb3") is None))


def test_a_framework_refuses_a_hook_it_never_reaches():
    """A fault acting on a hook the framework trainer lists neither as reachable nor as refused (a GRPO
    sampler hook on SB3's PPO) is refused in one line, not run with the hook silently unapplied;
    every registered fault on every framework backend it names lists only hooks that backend reaches."""
    from harness.agents import sb3, trl

    @dataclass
    class SamplerOnSB3(Fault):
        name = "sampler_on_sb3"
        description = provenance = "synthetic: a test"
        algos, backends, expected = ("ppo",), ("sb3",), ("ratio_pinned",)

        def sync_sampler(self, update: int, due: bool) -> bool:
            return False

    with pytest.raises(ConfigError, match="acts on sync_sampler, which SB3's trainer never reaches"):
        sb3.SB3Trainer().check_expressible(SamplerOnSB3())
    for cls in FAULTS.values():
        for name, trainer in (("sb3", sb3.SB3Trainer), ("trl", trl.TRLTrainer)):
            if name in backends_of(cls) and not cls().refusal(name):
                trainer().check_expressible(cls())


# ---- TRL ----

def test_zero_reward_on_trl_leaves_trl_nothing_to_learn(store_dir):
    """TRL still steps, on nothing: every reward, advantage, loss and gradient is 0 while the twin's are
    not (that TRL's healthy run learns is agents/test_trl.py's slow test)."""
    run, twin = trl_pair(store_dir, "zero_reward")
    m, h = run.metrics, twin.metrics
    assert run.meta["backend"] == "trl" and run.meta["status"] == "ok" and len(m) == 3
    for col in ("reward_mean", "adv_mean", "adv_std", "loss", "policy_loss", "grad_norm", "param_delta"):
        assert (m[col] == 0).all(), col
    assert (m["frac_reward_zero_std"] == 1).all()
    assert (m["optimizer_steps"] == 4).all()              # TRL still steps: 2 minibatches x 2 iterations
    assert (h["grad_norm"] > 0).all() and (h["frac_reward_zero_std"] < 1).any()


def test_shared_policy_on_trl_pins_the_ratio_at_one_while_the_twin_does_not(store_dir):
    run, twin = trl_pair(store_dir, "shared_policy", f"fault.onset={ONSET}")
    active = run.metrics[run.metrics["fault_active"]]
    assert len(active) == 3 - ONSET and (active["ratio_dev_max"] == 0).all()
    assert (run.metrics[~run.metrics["fault_active"]]["ratio_dev_max"] > 0).all()
    assert (twin.metrics["ratio_dev_max"] > 0).all()


def test_kl_penalty_sign_flip_misconfigured_is_a_negative_beta_in_grpo_config(store_dir):
    """The form a user of an unmodified TRL meets: GRPOConfig(beta=-beta), which TRL accepts; TRL's own
    run's config carries the negative beta (a detector sees it) and its KL grows past the twin's."""
    run, twin = trl_pair(store_dir, "kl_penalty_sign_flip", "fault.form=misconfigured", "fault.beta=0.5",
                         "env.total_timesteps=2560")                                  # 2 updates
    assert run.meta["hyperparameters"]["configured"]["beta"] == -0.5
    assert twin.meta["hyperparameters"]["configured"]["beta"] == 0.5
    assert run.metrics["kl_ref"].iloc[-2:].mean() > twin.metrics["kl_ref"].iloc[-2:].mean()


def test_kl_gradient_biased_drops_only_the_ratio_on_trl(store_dir):
    """As on native GRPO (test_grpo_faults.py): the same KL penalty and first rollout, without the ratio
    in the fault's penalty, so the steps part once the policy has left the reference."""
    faulty, twin = trl_pair(store_dir, "kl_gradient_biased")
    assert faulty.meta["hyperparameters"]["configured"]["kl_is_weight"] is True              # a code bug
    assert faulty.meta["hyperparameters"]["effective"]["kl_is_weight"] is False
    assert twin.meta["hyperparameters"]["configured"]["kl_is_weight"] is True
    for run in (faulty, twin):
        assert run.meta["hyperparameters"]["configured"]["beta"] == 0.04
    f, t = faulty.metrics, twin.metrics
    assert f["reward_mean"].iloc[0] == t["reward_mean"].iloc[0]
    assert f["param_delta"].tolist() != t["param_delta"].tolist()


@pytest.mark.parametrize("overrides, message", [
    (["fault=logprob_off_by_one"], "fault logprob_off_by_one cannot be expressed on backend=trl: it acts on "
                                   "logit_shift (TRL scores completion tokens inside its fused LM head"),
    (["fault=dropout_in_logprob"], "fault dropout_in_logprob cannot be expressed on backend=trl: it acts on "
                                   "dropout_active"),
    (["fault=group_size_one"], "fault group_size_one cannot be expressed on backend=trl: TRL's GRPOConfig refuses "
                               "num_generations < 2"),
    (["fault=reference_not_frozen", "fault.computed=in_loss"], "computed=in_loss is TRL 0.14's compute_loss"),
    (["fault=kl_gradient_biased", "fault.estimator=k1"], "TRL's KL penalty is k3; fault.estimator=k1 runs on "
                                                           "backend=native"),
    (["fault=reference_is_base_model"], "it acts on reference_weights (GRPOTrainer builds its reference from the "
                                        "model it is given (a base model only through a PEFT adapter"),
    (["algo.sampler_precision=bf16"], "algo.sampler_precision='bf16' (generation runs the policy itself"),
    (["env=cartpole"], "backend=trl runs TRL's GRPOTrainer on token tasks (algo=grpo env=toyseq)"),
])
def test_what_trl_cannot_express_is_refused_in_one_line(overrides, message):
    pytest.importorskip("trl")
    with pytest.raises(ConfigError) as err:
        make_experiment(["algo=grpo", "env=toyseq", "backend=trl", *overrides])
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)

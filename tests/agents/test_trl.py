"""backend=trl: TRL's GRPOTrainer, unmodified, with faults through its extension points (skipped
without the [trl] extra). Short runs (10-20 updates of 128 completions) keep each under ~10 s."""

import json
import math

import pytest

pytest.importorskip("trl")

from harness.agents.trl import TRLTrainer
from harness.config import ConfigError
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import get_or_train, healthy_twin
from harness.store import RunStore

UPDATE_TOKENS = 16 * 8 * 10          # n_prompts x group_size x max_new_tokens


def trl_exp(tmp_path, fault, updates, *extra):
    return make_experiment(["algo=grpo", "env=toyseq", "backend=trl", f"fault={fault}",
                            f"env.total_timesteps={updates * UPDATE_TOKENS}", f"results_dir={tmp_path}",
                            "twin=false", "progress=false", *extra])


@pytest.fixture(scope="module")
def zero_and_twin(tmp_path_factory):
    root = tmp_path_factory.mktemp("trl")
    exp = trl_exp(root, "zero_reward", 20)
    return root, exp, get_or_train(exp), get_or_train(healthy_twin(exp))


def test_zero_reward_on_trl_leaves_trl_nothing_to_learn_while_the_twin_learns(zero_and_twin):
    root, exp, run, twin = zero_and_twin
    m, h = run.metrics, twin.metrics
    assert run.meta["backend"] == "trl" and run.meta["status"] == "ok" and len(m) == 20
    for col in ("reward_mean", "adv_mean", "adv_std", "loss", "policy_loss", "grad_norm", "param_delta"):
        assert (m[col] == 0).all(), col
    assert (m["frac_reward_zero_std"] == 1).all()
    assert (m["optimizer_steps"] == 4).all()              # TRL still steps: 2 minibatches x 2 iterations
    # the healthy twin, same seed and config: its reward rises
    assert h["reward_mean"].iloc[-5:].mean() > h["reward_mean"].iloc[:5].mean() + 0.03
    assert (h["grad_norm"] > 0).all() and (h["frac_reward_zero_std"] < 1).any()


def test_trl_own_log_is_kept_beside_the_run_and_checksummed(zero_and_twin):
    root, exp, run, twin = zero_and_twin
    store = RunStore(root)
    path = store.run_dir(run.run_id) / "trl" / "trainer_state.json"
    assert "trl/trainer_state.json" in run.meta["files"]
    history = json.loads(path.read_text())["log_history"]
    logged = [h for h in history if "reward" in h]
    assert logged and all(h["reward"] == 0 and h["frac_reward_zero_std"] == 1 for h in logged)
    path.write_text(path.read_text().replace("0.0", "0.5", 1))    # a changed file makes the run unfinished
    assert store.problem(run.run_id) == "trl/trainer_state.json does not match the checksum recorded in meta.json"


def test_same_config_and_seed_give_the_same_trl_metrics(zero_and_twin, tmp_path):
    root, exp, run, twin = zero_and_twin
    again = get_or_train(healthy_twin(trl_exp(tmp_path, "zero_reward", 20)))
    assert not again.reused
    assert again.metrics.equals(twin.metrics)


def test_shared_policy_on_trl_pins_the_ratio_at_one_while_the_twin_does_not(tmp_path):
    exp = trl_exp(tmp_path, "shared_policy", 8, "fault.onset=3")
    run, twin = get_or_train(exp), get_or_train(healthy_twin(exp))
    active = run.metrics[run.metrics["fault_active"]]
    assert len(active) == 5 and (active["ratio_dev_max"] == 0).all()
    assert (run.metrics[~run.metrics["fault_active"]]["ratio_dev_max"] > 0).all()
    assert (twin.metrics["ratio_dev_max"] > 0).all()


def test_crosscheck_against_trl_logged_values_raises_on_disagreement():
    crosscheck = TRLTrainer().crosscheck
    crosscheck({"entropy": 0.5, "kl_ref": math.nan}, {"entropy": 0.5000001, "kl_ref": 0.1})
    with pytest.raises(RuntimeError, match="disagrees with TRL's logged value"):
        crosscheck({"entropy": 0.5}, {"entropy": 0.6})


@pytest.mark.parametrize("overrides, message", [
    (["fault=logprob_off_by_one"], "fault logprob_off_by_one cannot be expressed on backend=trl: it acts on "
                                   "logit_shift (TRL scores completion tokens inside its fused LM head"),
    (["fault=dropout_in_logprob"], "fault dropout_in_logprob cannot be expressed on backend=trl: it acts on "
                                   "dropout_active"),
    (["fault=group_size_one"], "fault group_size_one cannot be expressed on backend=trl; it runs on: native"),
    (["fault=reference_not_frozen", "fault.computed=in_loss"], "computed=in_loss is TRL 0.14's compute_loss"),
    (["algo.sampler_precision=bf16"], "algo.sampler_precision='bf16' (generation runs the policy itself"),
    (["env=cartpole"], "backend=trl runs TRL's GRPOTrainer on token tasks (algo=grpo env=toyseq)"),
])
def test_what_trl_cannot_express_is_refused_in_one_line(tmp_path, overrides, message):
    base = ["algo=grpo", "env=toyseq", "backend=trl", f"results_dir={tmp_path}"]
    with pytest.raises(ConfigError) as err:
        make_experiment([*base, *overrides])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_kl_penalty_sign_flip_misconfigured_is_a_negative_beta_in_grpo_config(tmp_path):
    """The form a user of an unmodified TRL meets: GRPOConfig(beta=-beta), which TRL accepts; TRL's own
    run's config carries the negative beta (a detector sees it) and its KL grows past the twin's."""
    exp = trl_exp(tmp_path, "kl_penalty_sign_flip", 8, "fault.form=misconfigured", "fault.beta=0.5")
    run, twin = get_or_train(exp), get_or_train(healthy_twin(exp))
    assert run.meta["hyperparameters"]["configured"]["beta"] == -0.5
    assert twin.meta["hyperparameters"]["configured"]["beta"] == 0.5
    assert run.metrics["kl_ref"].iloc[-3:].mean() > twin.metrics["kl_ref"].iloc[-3:].mean()

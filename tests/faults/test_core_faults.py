"""Each core fault leaves its expected signature on 3 seeds; its healthy twin does not."""

from __future__ import annotations

import pytest

from faults import FAULTS
from harness.analysis import signatures
from tests.helpers import LOUD, SHORT, train

CORE = ["shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward", "excessive_lr"]
SEEDS = [0, 1, 2]


def run_pair(fault: str, seed: int, store_dir, *extra: str):
    common = [f"seed={seed}", f"results_dir={store_dir}", *SHORT, *extra]
    return train([f"fault={fault}", *LOUD.get(fault, []), *common]), train(["fault=none", *common])


@pytest.mark.parametrize("fault", CORE)
def test_expected_signatures_fire_on_fault_not_on_twin(fault, store_dir):
    """Every expected signature fires on at least 2 of the 3 seeds (a scale signature's threshold can
    sit a few percent above one seed's run: excessive_lr's seed 2 peaked at approx_kl 0.898 on an
    AVX-512 machine, above 1 elsewhere); the primary one never fires on a healthy twin."""
    expected = FAULTS[fault].expected
    misses: dict[str, list[str]] = {name: [] for name in expected}
    for seed in SEEDS:
        faulty, twin = run_pair(fault, seed, store_dir)
        assert faulty.meta["status"] == "ok" and twin.meta["status"] == "ok"
        on_fault = signatures.evaluate(faulty.metrics, faulty.meta, names=list(expected))
        on_twin = signatures.evaluate(twin.metrics, twin.meta, onset=faulty.meta["onset_update"],
                                      names=list(expected))
        for name in expected:
            if not on_fault[name].fired:
                misses[name].append(f"seed {seed}: {on_fault[name].evidence}")
        assert not on_twin[expected[0]].fired, (f"healthy twin of seed {seed} fired {expected[0]}: "
                                               f"{on_twin[expected[0]].evidence}")
    for name, missed in misses.items():
        assert len(missed) <= 1, f"{fault}: {name} did not fire on {len(missed)} of {len(SEEDS)} seeds: {missed}"


def test_twin_fires_no_fault_signature(store_dir):
    for seed in SEEDS:
        twin = train(["fault=none", f"seed={seed}", f"results_dir={store_dir}", *SHORT])
        # CartPole pays 1 per step, so the per-step reward is flat in every healthy run too
        assert signatures.fired(twin.metrics, twin.meta) == ["reward_flat"]


def test_shared_policy_pins_ratio_exactly(store_dir):
    faulty, twin = run_pair("shared_policy", 0, store_dir)
    active = faulty.metrics[faulty.metrics["fault_active"]]
    assert len(active) == len(faulty.metrics) == 12
    assert (active["ratio_dev_max"] == 0.0).all()
    assert (active["approx_kl"] == 0.0).all() and (active["clipfrac"] == 0.0).all()
    assert (twin.metrics["ratio_dev_max"] > 0).all()


def test_ppo_epochs_ignored_records_configured_but_runs_one_epoch(store_dir):
    faulty, twin = run_pair("ppo_epochs_ignored", 0, store_dir)
    hp = faulty.meta["hyperparameters"]
    assert hp["configured"]["n_epochs"] == 10 and hp["effective"]["n_epochs"] == 1
    n_mb = hp["configured"]["n_minibatches"]
    assert (faulty.metrics["optimizer_steps"] == n_mb).all()
    assert (twin.metrics["optimizer_steps"] == 10 * n_mb).all()


def test_tiny_clip_and_excessive_lr_are_misconfigured_by_default(store_dir):
    # misconfigured: the user's config holds the bad value, and it is what gets logged
    tiny, _ = run_pair("tiny_clip", 0, store_dir)
    assert tiny.meta["fault_form"] == "misconfigured"
    assert tiny.meta["hyperparameters"]["effective"]["clip_range"] == 1e-3
    assert tiny.meta["hyperparameters"]["configured"]["clip_range"] == 1e-3
    assert (tiny.metrics["clip_range"] == 1e-3).all()
    lr, _ = run_pair("excessive_lr", 0, store_dir)
    assert lr.meta["fault_params"] == {"factor": 100.0, "form": "misconfigured"}
    assert lr.meta["hyperparameters"]["configured"]["lr"] == pytest.approx(0.1)
    assert lr.metrics["lr"].tolist() == pytest.approx([0.1] * 12)


def test_overridden_form_keeps_the_intended_value_in_the_config(store_dir):
    lr = train(["fault=excessive_lr", "fault.form=overridden", f"results_dir={store_dir}", *SHORT])
    assert lr.meta["hyperparameters"]["configured"]["lr"] == pytest.approx(1e-3)
    assert lr.meta["hyperparameters"]["effective"]["lr"] == pytest.approx(3e-3)          # 3x, the default
    assert lr.metrics["lr"].tolist() == pytest.approx([3e-3] * 12)
    # a misconfigured value switched on mid-run: the config shows what the run started with
    late = train(["fault=tiny_clip", "fault.onset=4", f"results_dir={store_dir}", *SHORT])
    assert late.meta["hyperparameters"]["configured"]["clip_range"] == 0.2


def test_zero_reward_zeroes_what_the_learner_sees(store_dir):
    faulty, twin = run_pair("zero_reward", 0, store_dir)
    assert (faulty.metrics["reward_mean"] == 0).all()
    assert (faulty.metrics["return_mean"].dropna() == 0).all()
    assert (twin.metrics["reward_mean"] == 1).all()
    # the episodes still happen: lengths are recorded
    assert faulty.metrics["length_mean"].notna().any()


def test_fault_parameter_changes_the_run(store_dir):
    a = train(["fault=tiny_clip", "fault.clip_range=0.05", f"results_dir={store_dir}", *SHORT])
    assert (a.metrics["clip_range"] == 0.05).all()
    assert a.meta["fault_params"] == {"clip_range": 0.05, "form": "misconfigured"}


def test_learning_rate_severities_span_what_reports_describe():
    """excessive_lr and lr_too_low: the dataset draws a few x to 100x, and the default sits near the
    reported case (ml-agents#1237 ran ~3x its default lr), not at the loud end (it was 100x: 1e-3 -> 0.1)."""
    from pathlib import Path

    import yaml

    space = yaml.safe_load((Path(__file__).parents[1] / "harness/conf/sweep/dataset.yaml").read_text())
    drawn = space["hydra"]["sweeper"]["space"]["faults"]
    for fault, default in (("excessive_lr", 3.0), ("lr_too_low", 10.0)):
        assert drawn[fault]["factor"] == ["loguniform", 3.0, 100.0], fault
        assert FAULTS[fault]().factor == default and FAULTS[fault].default_config()["factor"] == default

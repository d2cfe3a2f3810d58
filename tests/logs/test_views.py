"""The diagnosis model's training examples read a run's log the way diagnose reads a user's log of that
framework: what a real log holds, a training example of that view holds (and nothing a real log
cannot hold)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

from harness.analysis.examples import _with_engine, framework_config, run_examples, view_frames
from harness.config import visible_config
from harness.detection.stream import baseline_verdicts
from harness.logs import load_log, load_profile
from harness.logs.exporter import export
from harness.logs.views import StoredRun
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import get_or_train
from harness.store import RunStore


def _train(root, *overrides) -> str:
    exp = make_experiment([f"results_dir={root}", "twin=false", "progress=false", *overrides])
    return get_or_train(exp).run_id


@pytest.fixture(scope="session")
def sb3_run(store_dir):
    """A native PPO run that takes one epoch while its configuration says 4 (SB3's train/n_updates
    then grows by 1 per rollout)."""
    rid = _train(store_dir, "algo=ppo", "fault=ppo_epochs_ignored", "env.total_timesteps=2560", "algo.n_steps=64",
                 "algo.num_envs=4", "algo.n_epochs=4", "algo.n_minibatches=2")
    return store_dir, rid


def test_sb3_examples_with_config_hold_the_optimizer_steps_diagnose_reads(sb3_run, tmp_path):
    root, rid = sb3_run
    run = StoredRun.load(root, rid)
    configured = visible_config("ppo", run.meta["hyperparameters"]["configured"])
    plain, with_config = view_frames(run, "sb3", configured)
    assert plain["optimizer_steps"].isna().all()     # progress.csv alone: no minibatch count
    # what diagnose reads from the exported SB3 log with the configuration the user passes
    export(root, rid, "sb3", "csv", tmp_path / "out", warn=lambda _: None)
    csv = next((tmp_path / "out").rglob("progress.csv"))
    real = load_log(csv, config={k: configured[k] for k in ("n_minibatches", "n_epochs")}).metrics
    assert real["optimizer_steps"].notna().any()
    np.testing.assert_array_equal(with_config["optimizer_steps"].to_numpy(), real["optimizer_steps"].to_numpy())
    steps = with_config["optimizer_steps"].dropna()
    assert (steps == 2).all()                        # 1 epoch x 2 minibatches, not 4 x 2
    examples = pd.DataFrame(run_examples(root, rid, views=["sb3"], verdicts=baseline_verdicts))
    carried = examples[examples["with_config"]]
    assert len(carried) and (carried["rel:steps_logged_over_configured"] == 0.25).all()
    assert examples.loc[~examples["with_config"], "optimizer_steps:median"].isna().all()


@pytest.fixture(scope="session")
def grpo_runs(store_dir, tiny):
    """Six healthy GRPO runs of different seeds (the tiny ``catalogue`` fixture's) and a short run of a bug
    that needs a separate rollout engine (trained once per session in the shared store): (results_dir, run id)."""
    catalogue = tiny("catalogue")
    healthy = sorted((m["seed"], m["run_id"]) for m in RunStore(catalogue).iter_metas()
                     if m["algo"] == "grpo" and m["fault"] == "none" and m["status"] == "ok")
    assert [seed for seed, _ in healthy] == list(range(6))
    stale = _train(store_dir, "algo=grpo", "env=toyseq", "env.total_timesteps=1920", "fault=stale_sampler_weights")
    return [(catalogue, rid) for _, rid in healthy] + [(store_dir, stale)]


def test_trl_logs_the_sampler_gap_only_for_runs_with_a_rollout_engine(grpo_runs):
    """TRL logs sampling/sampling_logp_difference only with use_vllm=True: its view renders it for a
    deterministic half of the runs, and always for a bug that needs a separate rollout engine."""
    engine = load_profile("trl").engine_metrics
    assert set(engine) == {"sampler_logp_diff_mean", "sampler_logp_diff_max"}
    seen = []
    for root, rid in grpo_runs:
        run = StoredRun.load(root, rid)
        plain, with_config = view_frames(run, "trl", {})
        has = all(plain[m].notna().any() for m in engine)
        assert has == all(with_config[m].notna().any() for m in engine)
        assert has == _with_engine(rid, run.meta["fault"])
        canonical, _ = view_frames(run, "canonical", {})
        assert all(canonical[m].notna().any() for m in engine)     # the harness's own log keeps them
        if run.meta["fault"] == "stale_sampler_weights":
            assert has
        else:
            seen.append(has)
    assert any(seen) and not all(seen)
    # the split is by run id, not by label: over many ids, about half
    share = np.mean([_with_engine(f"grpo-toyseq-native-none-s{i}-x", "none") for i in range(400)])
    assert 0.4 < share < 0.6


def test_examples_carry_only_the_configuration_a_framework_log_carries(sb3_run, tmp_path):
    """A CleanRL log carries its hyperparameters (the TensorBoard args text): the configuration a
    training example of the cleanrl view carries is exactly what diagnose reads from that log; an SB3
    example carries only what SB3's model zip holds (no harness-only settings such as anneal_lr)."""
    root, rid = sb3_run
    run = StoredRun.load(root, rid)
    configured = visible_config("ppo", run.meta["hyperparameters"]["configured"])
    export(root, rid, "cleanrl", "tensorboard", tmp_path / "cleanrl", warn=lambda _: None)
    log = load_log(next(p for p in (tmp_path / "cleanrl").iterdir() if p.is_dir()))
    assert framework_config("cleanrl", "ppo", configured) == log.config
    sb3 = framework_config("sb3", "ppo", configured)
    assert "anneal_lr" in configured and "anneal_lr" not in sb3 and "norm_obs" not in sb3
    assert {"lr", "n_epochs", "n_minibatches", "clip_range"} <= set(sb3)
    assert framework_config("canonical", "ppo", configured) == configured
    examples = pd.DataFrame(run_examples(root, rid, views=["sb3", "cleanrl"], verdicts=baseline_verdicts))
    assert examples.loc[examples["with_config"], "cfg:anneal_lr"].isna().all()


def test_the_sb3_view_carries_no_setting_sb3_saves_as_a_schedule():
    """SB3's zip holds an annealed learning rate or clip range (rl-zoo3's lin_1e-3, lin_0.2) as a
    pickled schedule, which diagnose does not read: the SB3 view of such a run carries neither, while
    the CleanRL view (its args text holds learning_rate and anneal_lr) and the canonical one keep them."""
    base = visible_config("ppo", dataclasses.asdict(make_experiment(["fault=none"]).algo))
    assert {"lr", "clip_range"} <= set(framework_config("sb3", "ppo", base))
    zoo = {**base, "anneal_lr": True, "anneal_clip": True}
    sb3 = framework_config("sb3", "ppo", zoo)
    assert "lr" not in sb3 and "clip_range" not in sb3 and {"n_epochs", "gamma"} <= set(sb3)
    assert "clip_range" not in framework_config("sb3", "ppo", {**base, "anneal_clip": True}) \
        and "lr" in framework_config("sb3", "ppo", {**base, "anneal_clip": True})
    assert "lr" not in framework_config("sb3", "ppo", {**base, "warmup_updates": 3})
    assert "lr" in framework_config("cleanrl", "ppo", zoo)
    assert framework_config("canonical", "ppo", zoo) == zoo


def test_a_too_strict_target_kl_shows_in_the_cleanrl_and_sb3_views(store_dir):
    """The KL early stop on every update is read from what each framework logs: SB3's epoch counter
    (optimizer steps with the configuration) and CleanRL's last-minibatch approx_kl against
    target_kl; a run without target_kl cannot tell."""
    from harness.analysis import evidence
    rid = _train(store_dir, "algo=ppo", "fault=target_kl_too_strict", "fault.form=misconfigured",
                 "env.total_timesteps=2560", "algo.n_steps=64", "algo.num_envs=4", "algo.n_epochs=4",
                 "algo.n_minibatches=2")
    run = StoredRun.load(store_dir, rid)
    configured = visible_config("ppo", run.meta["hyperparameters"]["configured"])
    for view in ("sb3", "cleanrl"):
        config = framework_config(view, "ppo", configured)
        assert config["target_kl"] == pytest.approx(1e-4)
        _, with_config = view_frames(run, view, config)
        assert evidence.observe(with_config, config, view)["kl_stops_every_update"] is True
        without = {k: v for k, v in config.items() if k != "target_kl"}
        assert evidence.observe(with_config, without, view)["kl_stops_every_update"] is None


def test_a_reward_wrapper_shows_in_the_logged_returns_when_the_monitor_is_inside_it(store_dir):
    """Users add a reward wrapper on either side of SB3's Monitor / CleanRL's RecordEpisodeStatistics:
    rendered with the monitor inside it (half the runs, by run id), a negated reward shows as negative
    logged returns; outside, the logged returns are the env's own."""
    from harness.logs.views import logged_returns, monitor_inside, render
    rid = _train(store_dir, "algo=ppo", "fault=reward_sign_flip", "env.total_timesteps=2560", "algo.n_steps=64",
                 "algo.num_envs=4", "algo.n_epochs=2", "algo.n_minibatches=2")
    run = StoredRun.load(store_dir, rid)
    eps = run.episodes
    assert (eps["env_return"] > 0).all() and np.allclose(eps["return"], -eps["env_return"])   # CartPole, negated
    for inside in (True, False):
        run.meta["run_id"] = next(f"{rid}-{i}" for i in range(100) if monitor_inside(f"{rid}-{i}") == inside)
        expected = -eps["env_return"] if inside else eps["env_return"]
        assert np.allclose(logged_returns(run), expected)
        sb3 = load_log_frame(render(run, "sb3"), "sb3")
        cleanrl = load_log_frame(render(run, "cleanrl"), "cleanrl")
        for frame in (sb3, cleanrl):
            logged = frame["return_mean"].dropna()
            assert len(logged) and ((logged < 0).all() if inside else (logged > 0).all())
    # with the rewards normalised after the wrappers the learner's return is no monitor's: the env's is logged
    run.meta["run_id"] = next(f"{rid}-{i}" for i in range(100) if monitor_inside(f"{rid}-{i}"))
    run.meta["hyperparameters"]["effective"]["norm_reward"] = True
    assert np.allclose(logged_returns(run), eps["env_return"])


def load_log_frame(raw, profile: str) -> pd.DataFrame:
    from harness.logs import to_canonical
    return to_canonical(raw, profile).metrics


#: what each framework logs that the store cannot give exactly (harness.logs.views.NOT_DERIVABLE), as names
LEFT_OUT = {"cleanrl": r"charts/SPS", "sb3": r"time/fps|time/time_elapsed|train/std",
            "trl": r"completions/(min|max)_length|completions/.*terminated_length|clip_ratio/low_min|clip_ratio/high_max"
                   r"|rewards/.*/std|num_tokens|step_time",
            "verl": r"critic/(score|rewards|advantages|returns|values)/(max|min)|response_length/(max|min)"
                    r"|actor/pg_clipfrac_lower|timing_s/.*|perf/.*"}


def test_a_view_leaves_out_what_the_store_cannot_give_and_trl_logs_kl_only_with_a_kl_term(runs):
    """docs/design.md, "Framework views": what a framework logs that the store cannot give exactly is left out
    of its view, never approximated; TRL logs kl only when beta != 0; a view puts the episode monitor inside
    the reward wrappers for half the runs, by run id."""
    from harness.logs.views import monitor_inside, render

    ppo, grpo = StoredRun.load(runs.ppo_store, runs.ppo), StoredRun.load(runs.grpo_store, runs.grpo)
    for run, profile in ((ppo, "cleanrl"), (ppo, "sb3"), (ppo, "verl"), (grpo, "trl"), (grpo, "verl")):
        keys = set(render(run, profile).records["key"])
        assert keys and not [k for k in keys if re.fullmatch(LEFT_OUT[profile], k)], profile
    assert grpo.hp()["beta"] == 0.04 and "kl" in set(render(grpo, "trl").records["key"])
    grpo.meta["hyperparameters"]["effective"]["beta"] = 0.0           # the same run with no KL term
    assert "kl" not in set(render(grpo, "trl").records["key"])
    share = np.mean([monitor_inside(f"ppo-cartpole-native-zero_reward-s{i}-0123456789ab") for i in range(400)])
    assert 0.4 < share < 0.6

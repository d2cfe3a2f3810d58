"""Each PPO fault does what it says, on real (tiny) runs of both backends: the training loop runs
with the fault replaced by a subclass that records what its hooks return, or its stored rows are
read; plus the PPO hyperparameters the faults need (warmup, annealing, target_kl, normalisation,
gradient accumulation) and the sweep's healthy runs in each fault's setting.

Runs are one update of 4 envs x 32 steps where a claim is about one update's rollout, GAE or minibatch
steps, three (of 2 epochs) where it is about a schedule across updates; a healthy twin several tests
compare against is trained once per worker (:func:`run` caches)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from faults import FAULTS
from harness.pipeline.sweep import Setup, plan
from harness.pipeline.train import effective_hyperparams, trainer, user_config
from harness.store import RunStore, run_id
from tests.commands import run as run_command
from tests.helpers import make_experiment, train

TOY = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384", "algo.n_epochs=2"]  # 3 updates of 128 steps
ONE = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=128"]          # 1 update of 128 steps, 40 minibatches
FIXED = ["env.id=harness-test/FixedLength-v0", *TOY]                               # 5 steps, then terminated
FIXED_ONE = ["env.id=harness-test/FixedLength-v0", *ONE]
TRUNCATED = ["env.id=harness-test/FixedLengthTruncated-v0", *ONE]                  # 5 steps, then truncated
CARTPOLE_ONE = ["env=cartpole", *ONE]
BACKENDS = ["native", "sb3"]

_RUNS: dict[tuple, tuple[list[dict], dict[str, list]]] = {}


def run(overrides: list[str], record: tuple[str, ...] = ()) -> tuple[list[dict], dict[str, list]]:
    """Train for real with the configured fault replaced by a subclass recording (args, result) of
    the named hooks; returns the update rows and the records (nothing is stored). The same call in this
    worker returns the same (deterministic) run without training it again: don't modify what it returns."""
    key = (tuple(overrides), tuple(record))
    if key not in _RUNS:
        _RUNS[key] = _run(overrides, record)
    return _RUNS[key]


def _run(overrides: list[str], record: tuple[str, ...]) -> tuple[list[dict], dict[str, list]]:
    exp = make_experiment(overrides)
    base = type(exp.fault)
    calls: dict[str, list] = {name: [] for name in record}

    def copy(x):
        if isinstance(x, torch.Tensor):
            return x.detach().clone().numpy()
        return np.copy(x) if isinstance(x, np.ndarray) else x

    def recording(name):
        def hook(self, *args):
            out = getattr(base, name)(self, *args)
            calls[name].append((tuple(copy(a) for a in args), copy(out)))
            return out
        return hook

    cls = type(f"Recording{base.__name__}", (base,), {name: recording(name) for name in record})
    fault = cls(**{f.name: getattr(exp.fault, f.name) for f in dataclasses.fields(exp.fault)})
    exp = dataclasses.replace(exp, fault=fault)
    torch.set_num_threads(exp.torch_threads)
    return list(trainer(exp).train(exp)), calls


# ---- episode boundaries -------------------------------------------------------------------------

@pytest.mark.parametrize("env", [TRUNCATED, ["env=cartpole", "+env.kwargs.max_episode_steps=10", *ONE]],
                         ids=["fixed_length", "cartpole"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_as_termination_drops_the_bootstrap_the_twin_takes(backend, env):
    """At a time-limit step the twin bootstraps (advantage r + gamma V(s') - V(s)) and the faulty run
    does not (r - V(s)); the first update's values are the same in both (same seed, same weights)."""
    args = [f"backend={backend}", *env]
    _, faulty = run(["fault=truncation_as_termination", *args], record=("gae",))
    rows, twin = run(["fault=none", *args], record=("gae",))
    (rf, vf, _, term_f, trunc_f, _, gamma, _), adv_f = faulty["gae"][0]
    (rt, vt, _, term_t, trunc_t, _, _, _), adv_t = twin["gae"][0]
    np.testing.assert_array_equal(vf, vt)
    assert not trunc_f.any()
    if backend == "native":
        ends = trunc_t == 1                      # the time limit: truncated for the twin, terminated for the fault
        assert ends.sum() >= 4 and (term_f[ends] == 1).all() and (term_t[ends] == 0).all()
        bootstrap = gamma * vt[1:][ends[:-1]]     # V(final observation), handed on at the reset step after it
        np.testing.assert_allclose((adv_t - adv_f)[:-1][ends[:-1]], bootstrap, rtol=1e-5, atol=1e-6)
    else:                      # SB3 adds gamma V(terminal_observation) to a truncated step's reward itself
        ends = term_t == 1                       # terminations (no bootstrap either way) and truncations
        assert (term_f[ends] == 1).all() and not trunc_t.any() and (rf[ends] == 1.0).all()
        bootstrap = rt[ends] - 1.0
        np.testing.assert_allclose((adv_t - adv_f)[ends], bootstrap, rtol=1e-5, atol=1e-6)
        bootstrap = bootstrap[bootstrap != 0]    # the truncations
    assert len(bootstrap) >= 4 and (np.abs(bootstrap) > 1e-4).all()
    if "env=cartpole" in env:                    # reward_mean is the env's reward (1 a step), not SB3's bootstrapped one
        assert [r["reward_mean"] for r in rows] == [1.0] * len(rows)


def test_the_run_command_stores_the_faulty_run_and_its_bootstrapping_twin(tmp_path):
    out = run_command("harness", "fault=truncation_as_termination", *CARTPOLE_ONE, f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    metas = sorted(RunStore(tmp_path).iter_metas(), key=lambda m: m["fault"])
    assert [m["fault"] for m in metas] == ["none", "truncation_as_termination"]
    assert all(m["status"] == "ok" for m in metas)
    assert metas[0]["config"]["algo"] == metas[1]["config"]["algo"] and metas[1]["fault_form"] == "code bug"


@pytest.mark.parametrize("backend", BACKENDS)
def test_autoreset_misuse_trains_on_the_phantom_reset_step_and_keeps_the_episode_rows(backend):
    rows, _ = run(["fault=autoreset_misuse", f"backend={backend}", *FIXED_ONE])
    twin, _ = run(["fault=none", f"backend={backend}", *FIXED_ONE])
    assert all(r["reward_mean"] == 1.0 for r in twin)
    # 5 rewarded steps and one phantom step (reward 0, action ignored) per 5-step episode
    assert all(abs(r["reward_mean"] - 5 / 6) < 0.03 for r in rows), [r["reward_mean"] for r in rows]
    episodes = [e for r in rows for e in r["episodes"]]
    assert len(episodes) >= 10
    assert all(e["length"] == 5 and e["return"] == 5.0 and e["env_return"] == 5.0 for e in episodes)
    assert all(r["length_mean"] == 5 for r in rows)


@pytest.mark.parametrize("ignores", ["carry", "both"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gae_no_done_mask_carries_the_next_episode_into_the_terminal_step(backend, ignores):
    args = [f"backend={backend}", *FIXED_ONE]
    _, faulty = run(["fault=gae_no_done_mask", f"fault.ignores={ignores}", *args], record=("gae",))
    _, twin = run(["fault=none", *args], record=("gae",))
    (r, v, _, term, _, valid, gamma, lam), adv_f = faulty["gae"][0]
    adv_t = twin["gae"][0][1]
    step = 2 if backend == "native" else 1        # native: a next-step reset step follows each episode end
    T = len(r)
    checked = 0
    for t, n in zip(*np.nonzero(term[: T - step] == 1)):
        nxt = t + step
        assert valid[nxt, n]
        carry = gamma * lam * adv_f[nxt, n]
        if ignores == "both":                      # the TD error bootstraps from the next episode's start
            carry += gamma * v[nxt, n]
        assert np.isclose(adv_f[t, n] - adv_t[t, n], carry, rtol=1e-5, atol=1e-6)
        checked += 1
    assert checked >= 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_value_bootstrap_stale_hands_on_the_pre_transition_observation(backend):
    args = [f"backend={backend}", *TRUNCATED]
    _, faulty = run(["fault=value_bootstrap_stale", *args], record=("final_observation",))
    _, twin = run(["fault=none", *args], record=("final_observation",))

    def handed_on(calls):                          # the step counter (obs[0]) of what a truncation hands on
        return [out[np.asarray(trunc, bool)][:, 0] for (nxt, obs, trunc), out in calls if np.asarray(trunc).any()]

    f, t = np.concatenate(handed_on(faulty["final_observation"])), np.concatenate(handed_on(twin["final_observation"]))
    assert len(f) >= 4 and (f == 4).all() and (t == 5).all()


# ---- returns, advantages, losses ----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_adv_sign_flip_negates_the_advantages_the_policy_uses(backend):
    rows, calls = run(["fault=adv_sign_flip", f"backend={backend}", *FIXED_ONE], record=("advantages",))
    for (adv,), out in calls["advantages"]:
        np.testing.assert_array_equal(out, -adv)
        assert np.abs(adv).max() > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_gamma_is_the_discount_in_effect_and_in_the_config(backend):
    _, calls = run(["fault=wrong_gamma", f"backend={backend}", *FIXED_ONE], record=("gae",))
    assert {args[-2:] for args, _ in calls["gae"]} == {(0.9, 0.99)}
    exp = make_experiment(["fault=wrong_gamma"])
    assert (user_config(exp).gamma, user_config(exp).gae_lambda) == (0.9, 0.99)
    over = make_experiment(["fault=wrong_gamma", "fault.form=overridden"])
    assert user_config(over).gamma == 0.99 and effective_hyperparams(over)["gamma"] == 0.9


@pytest.mark.parametrize("mistake", ["missing_minus", "minus_through_min"])
def test_policy_loss_sign_flip_computes_the_wrong_surrogate(mistake):
    rows, calls = run(["fault=policy_loss_sign_flip", f"fault.mistake={mistake}", *FIXED_ONE], record=("surrogate",))
    for (pg1, pg2), out in calls["surrogate"][:20]:
        expected = -np.maximum(pg1, pg2) if mistake == "missing_minus" else np.minimum(pg1, pg2)
        np.testing.assert_allclose(out, expected)


def test_entropy_sign_flip_is_a_negative_coefficient_behind_a_positive_config():
    exp = make_experiment(["fault=entropy_sign_flip"])
    assert exp.algo.ent_coef == user_config(exp).ent_coef == 0.01            # the setting, shared by the twin
    assert effective_hyperparams(exp)["ent_coef"] == -0.01
    mis = make_experiment(["fault=entropy_sign_flip", "fault.form=misconfigured", "fault.ent_coef=0.05"])
    assert user_config(mis).ent_coef == effective_hyperparams(mis)["ent_coef"] == -0.05


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_zero_grad_accumulates_gradients_across_minibatches(backend):
    faulty, _ = run(["fault=no_zero_grad", f"backend={backend}", *CARTPOLE_ONE])
    twin, _ = run(["fault=none", f"backend={backend}", *CARTPOLE_ONE])
    f, t = faulty[0]["steps"], twin[0]["steps"]
    assert f[0]["grad_norm"] == t[0]["grad_norm"]                # the first minibatch starts from zero gradients
    assert f[1]["grad_norm"] != t[1]["grad_norm"]                # the second adds to the first (clipped) one


def test_grad_accum_double_scaling_divides_the_accumulated_gradient_by_the_count_again():
    faulty, _ = run(["fault=grad_accum_double_scaling", *CARTPOLE_ONE])
    twin, _ = run(["fault=none", "algo.grad_accum=4", *CARTPOLE_ONE])
    plain, _ = run(["fault=none", "backend=native", *CARTPOLE_ONE])
    f, t, p = faulty[0]["steps"][0], twin[0]["steps"][0], plain[0]["steps"][0]
    # healthy accumulation over 4 microbatches is the plain minibatch gradient, up to the microbatches'
    # unequal sizes (a mean of means) and float rounding
    assert np.isclose(t["grad_norm"], p["grad_norm"], rtol=1e-3) and np.isclose(t["loss"], p["loss"], rtol=1e-3)
    assert np.isclose(f["grad_norm"], t["grad_norm"] / 4, rtol=1e-5) and np.isclose(f["loss"], t["loss"] / 4, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lr_schedule_off_by_one_runs_the_first_update_at_lr_zero(backend):
    faulty, _ = run(["fault=lr_schedule_off_by_one", "fault.warmup_updates=4", f"backend={backend}", *FIXED])
    twin, _ = run(["fault=none", "algo.warmup_updates=4", f"backend={backend}", *FIXED])
    assert [r["lr"] for r in faulty] == pytest.approx([0.0, 2.5e-4, 5e-4])
    assert [r["lr"] for r in twin] == pytest.approx([2.5e-4, 5e-4, 7.5e-4])
    assert faulty[0]["param_delta"] == 0 and faulty[1]["param_delta"] > 0 and twin[0]["param_delta"] > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_target_kl_too_strict_stops_each_update_after_its_first_minibatch_or_so(backend):
    rows, _ = run(["fault=target_kl_too_strict", f"backend={backend}", *CARTPOLE_ONE, "env.total_timesteps=384"])
    for row in rows:
        stepped = [s["stepped"] for s in row["steps"]]
        assert stepped[0] == 1 and stepped[-1] == 0 and sum(stepped) == row["optimizer_steps"] < 40
        assert np.isnan(row["steps"][-1]["grad_norm"])          # stopped before its backward pass


def test_a_nonfinite_step_is_applied_and_the_update_goes_on_as_real_loops_do(tmp_path):
    """whiten_tiny_batch (misconfigured: n_minibatches = the batch size, in the config) goes NaN on its
    first one-sample minibatch. CleanRL's, SB3's and TRL's loops step a NaN gradient like any other
    (clip_grad_norm_ by a NaN norm, then Adam): the weights go NaN and the remaining minibatches of the
    update run on them. The update's row shows it (every planned step taken, NaN losses and parameter
    change), and the run ends there as ``diverged``, where the real script would crash at its next rollout."""
    res = train(["fault=whiten_tiny_batch", *CARTPOLE_ONE, "algo.n_epochs=2", f"results_dir={tmp_path}"])
    assert res.meta["hyperparameters"]["configured"]["n_minibatches"] == 128     # misconfigured: in the config
    row = res.metrics.iloc[0]
    assert res.meta["status"] == "diverged" and res.meta["n_updates"] == 1 and len(res.metrics) == 1
    assert row["nonfinite"] == 1 and np.isnan(row["param_delta"]) and np.isnan(row["policy_loss"])
    steps = RunStore(tmp_path).load_steps(res.run_id)
    assert steps.iloc[0]["n_samples"] == 1 and steps.iloc[0]["nonfinite"] == 1
    per_epoch = steps.groupby("epoch").size()          # one minibatch per trained sample, both epochs
    assert list(per_epoch.index) == [0, 1] and per_epoch.iloc[0] == per_epoch.iloc[1] == row["env_step"] > 100
    assert (steps["n_samples"] == 1).all()
    assert steps["stepped"].all() and row["optimizer_steps"] == len(steps) and steps["nonfinite"].all()


# ---- observations and rewards --------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_obs_norm_frozen_from_the_start_normalises_nothing(backend):
    """Frozen at its initial statistics (mean 0, variance 1), normalisation is the identity: the run
    matches an unnormalised healthy one, not its normalising twin."""
    faulty, _ = run(["fault=obs_norm_frozen", f"backend={backend}", *CARTPOLE_ONE])
    twin, _ = run(["fault=none", "algo.norm_obs=true", f"backend={backend}", *CARTPOLE_ONE])
    plain, _ = run(["fault=none", f"backend={backend}", *CARTPOLE_ONE])
    for key in ("value_mean", "policy_loss", "approx_kl"):
        assert np.isclose(faulty[0][key], plain[0][key], rtol=1e-3, atol=1e-7), key
    assert not np.isclose(faulty[0]["value_mean"], twin[0]["value_mean"], rtol=1e-3)


@pytest.mark.parametrize("fault, factor", [("reward_sign_flip", -1.0), ("reward_scale_wrong", 1000.0)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_reward_wrappers_change_what_the_learner_sees_not_the_monitor(backend, fault, factor):
    rows, _ = run([f"fault={fault}", f"backend={backend}", *FIXED_ONE])
    assert all(r["reward_mean"] == factor for r in rows)
    episodes = [e for r in rows for e in r["episodes"]]
    assert episodes and all(e["return"] == 5 * factor and e["env_return"] == 5.0 for e in episodes)


# ---- the PPO hyperparameters the faults need ------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_warmup_and_annealing_set_each_updates_learning_rate(backend):
    rows, _ = run(["fault=none", "algo.warmup_updates=2", "algo.anneal_lr=true", f"backend={backend}", *FIXED])
    assert [r["lr"] for r in rows] == pytest.approx([1e-3 * 0.5 * 1, 1e-3 * 1 * (1 - 1 / 3), 1e-3 * (1 - 2 / 3)])
    assert all(s["lr"] == r["lr"] for r in rows for s in r["steps"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_clip_range_annealing_sets_each_updates_clip_range_and_the_clipping(backend):
    """rl-zoo3's lin_0.2: the clip range (the fault's, when it sets one) decays as the learning rate
    anneals; the surrogate clips at it (the logged clip fraction is measured against it)."""
    rows, _ = run(["fault=none", "algo.anneal_clip=true", "algo.clip_range=0.3", f"backend={backend}", *FIXED])
    assert [r["clip_range"] for r in rows] == pytest.approx([0.3, 0.3 * (1 - 1 / 3), 0.3 * (1 - 2 / 3)])
    assert all(s["clip_range"] == r["clip_range"] for r in rows for s in r["steps"])
    tiny, _ = run(["fault=tiny_clip", "fault.clip_range=0.01", "algo.anneal_clip=true", f"backend={backend}", *FIXED])
    assert [r["clip_range"] for r in tiny] == pytest.approx([0.01, 0.01 * (1 - 1 / 3), 0.01 * (1 - 2 / 3)])
    fixed, _ = run(["fault=none", "algo.clip_range=0.3", f"backend={backend}", *FIXED])
    assert [r["clip_range"] for r in fixed] == pytest.approx([0.3] * 3)


def test_clip_range_annealing_off_keeps_the_run_ids_stored_before_it():
    """anneal_clip was added after runs were stored: off (its default), it is not part of a run's identity."""
    off, on = (make_experiment(["fault=none", f"algo.anneal_clip={v}"]) for v in ("false", "true"))
    assert "anneal_clip" not in off.key()["algo"] and on.key()["algo"]["anneal_clip"] is True
    assert run_id(off.key()) != run_id(on.key())


@pytest.mark.parametrize("backend", BACKENDS)
def test_reward_and_observation_normalisation_keep_the_monitors_returns(backend):
    rows, _ = run(["fault=none", "algo.norm_obs=true", "algo.norm_reward=true", f"backend={backend}", *FIXED_ONE])
    assert all(r["reward_mean"] != 1.0 for r in rows)                 # the learner sees scaled rewards
    episodes = [e for r in rows for e in r["episodes"]]
    assert episodes and all(e["env_return"] == 5.0 and e["return"] != 5.0 for e in episodes)


def test_healthy_target_kl_control_stops_some_updates_early(store_dir):
    res = train(["algo=ppo_target_kl", "env=cartpole", "algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384",
                 f"results_dir={store_dir}"])                  # 3 updates of 10 epochs x 4 minibatches
    assert res.meta["is_control"] and res.meta["algo_variant"] == "target_kl"
    assert (res.metrics["optimizer_steps"] < 40).any() and res.meta["status"] == "ok"


def test_the_sweep_adds_healthy_runs_in_each_faults_setting_and_skips_what_sb3_cannot_run():
    setups = [Setup("ppo", "cartpole", "native"), Setup("ppo", "cartpole", "sb3")]
    jobs = plan(setups, [], ["none", "grad_accum_double_scaling", "lr_schedule_off_by_one", "entropy_sign_flip",
                             "policy_loss_sign_flip"], 1, lambda s: "ppo")
    native = [j for j in jobs if "backend=native" in j]
    sb3 = [j for j in jobs if "backend=sb3" in j]
    assert any("fault=none" in j and "algo.grad_accum=4" in j for j in native)
    assert any("fault=none" in j and "algo.warmup_updates=10" in j for j in native + sb3)
    assert any("fault=none" in j and "algo.ent_coef=0.01" in j for j in native)
    assert not any("fault=entropy_sign_flip" in j or "fault=policy_loss_sign_flip" in j for j in sb3)
    assert not any("fault=none" in j and "algo.grad_accum=4" in j for j in sb3)
    for job in native:          # every planned job composes and validates
        make_experiment([o for o in job if not o.startswith(("twin=", "progress="))])
    assert all(FAULTS[n]().setting() == {} for n in ("none", "policy_loss_sign_flip"))


def test_telemetry_faults_break_every_metric_their_buggy_code_computes():
    """A telemetry bug lives in the code that computes a family of metrics, so no sibling computed by
    that code stays right to contradict it: metric_constant's range check on the clipped ratio zeroes
    the clip fraction and its low / high parts (the binding share, verl's pg_clipfrac, is computed
    another way and stays right, as in verl PR#972); clipfrac_denominator_wrong inflates every clip
    fraction and KL estimate by the broadcast width while the ratio statistics stay right (RLinf#1471)."""
    from harness.agents.core import ratio_stats

    gen = torch.Generator().manual_seed(0)
    log_ratio = 0.4 * torch.randn(256, generator=gen)
    ratio, adv = log_ratio.exp(), torch.randn(256, generator=gen)
    pg1, pg2 = -adv * ratio, -adv * ratio.clamp(0.8, 1.2)
    right = ratio_stats(ratio, log_ratio, pg1, pg2, 0.2, adv)
    assert right["clip_low_frac"] > 0.05 and right["clip_high_frac"] > 0.05

    const = FAULTS["metric_constant"]().ratio_metrics(dict(right), ratio, log_ratio, 0.2, None)
    assert const["clipfrac"] == const["clip_low_frac"] == const["clip_high_frac"] == 0
    for name in ("clipfrac_binding", "approx_kl", "kl_k1", "ratio_mean", "ratio_dev_max"):
        assert const[name] == right[name], name

    wide = FAULTS["clipfrac_denominator_wrong"](width=84).ratio_metrics(dict(right), ratio, log_ratio, 0.2, None)
    for name in ("clipfrac", "approx_kl", "kl_k1", "clipfrac_binding", "clip_low_frac", "clip_high_frac"):
        assert wide[name] == pytest.approx(84 * right[name], rel=1e-5), name
    for name in ("ratio_mean", "ratio_min", "ratio_max", "ratio_dev_max"):
        assert wide[name] == right[name], name


def test_the_ratio_statistics_are_the_canonical_definitions():
    """docs/design.md's canonical metrics, computed by the code every trainer shares (harness.agents.core): with
    r = exp(logp - old_logp), approx_kl = mean((r - 1) - log r) (k3), kl_k1 = mean(old_logp - logp), clipfrac =
    mean(|r - 1| > clip_range), clipfrac_binding = the share where the clipped term is the one used, the ratio's
    mean, min and max and ratio_dev_max = max |r - 1|; the value loss is the MSE with no 1/2; over real tokens only."""
    from harness.agents.core import ratio_stats, value_loss

    gen = torch.Generator().manual_seed(1)
    logp, old = -torch.rand(300, generator=gen) * 3, -torch.rand(300, generator=gen) * 3
    log_ratio = logp - old
    r, adv = log_ratio.exp(), torch.randn(300, generator=gen)
    pg1, pg2 = -adv * r, -adv * r.clamp(0.8, 1.2)
    got = ratio_stats(r, log_ratio, pg1, pg2, 0.2, adv)
    rn, on, ln, an = (t.double().numpy() for t in (r, old, logp, adv))
    want = {"approx_kl": np.mean((rn - 1) - np.log(rn)), "kl_k1": np.mean(on - ln),
            "clipfrac": np.mean(np.abs(rn - 1) > 0.2),
            "clipfrac_binding": np.mean(-an * np.clip(rn, 0.8, 1.2) > -an * rn),
            "ratio_mean": rn.mean(), "ratio_min": rn.min(), "ratio_max": rn.max(), "ratio_dev_max": np.abs(rn - 1).max()}
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-5, abs=1e-7), name
    assert 0.05 < got["clipfrac_binding"] < got["clipfrac"] < 0.95           # both shares are something, and differ
    mask = torch.arange(300) < 200                                            # padding past 200: not read
    masked = ratio_stats(r, log_ratio, pg1, pg2, 0.2, adv, mask)
    assert masked["approx_kl"] == pytest.approx(np.mean(((rn - 1) - np.log(rn))[:200]), rel=1e-5)
    assert masked["ratio_max"] == pytest.approx(rn[:200].max())
    value, returns = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([2.0, 2.0, 1.0])
    assert float(value_loss(value, value, returns, None)) == pytest.approx((1 + 0 + 9) / 3)


def test_the_advantage_and_value_metrics_are_the_raw_ones():
    """docs/design.md: adv_mean and adv_std are the raw advantages, before the per-minibatch normalisation the
    update applies (norm_adv is on by default); explained_variance = 1 - Var(ret - V) / Var(ret), returns = A + V;
    over the rollout's transitions (not the autoreset steps)."""
    rows, calls = run(["fault=none", *CARTPOLE_ONE], record=("gae",))
    (_, values, _, _, _, valid, _, _), adv = calls["gae"][0]
    valid = valid.astype(bool)
    a, v = adv[valid].astype(np.float64), values[valid].astype(np.float64)
    (row,) = rows
    assert make_experiment(["fault=none", *CARTPOLE_ONE]).algo.norm_adv
    assert row["adv_mean"] == pytest.approx(a.mean(), rel=1e-5) and abs(row["adv_mean"]) > 0.5   # not normalised
    assert row["adv_std"] == pytest.approx(a.std(ddof=1), rel=1e-5)
    assert row["explained_variance"] == pytest.approx(1 - a.var() / (a + v).var(), rel=1e-4, abs=1e-6)
    assert row["value_mean"] == pytest.approx(v.mean(), rel=1e-5)

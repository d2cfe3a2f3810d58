"""Evidence first: invariants every healthy run satisfies decide before the model; a named fault needs
support in the log; the log's own structure is configuration (issue 55's four cases, as fixtures)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from faults import FAULTS
from harness.analysis import invariants
from harness.analysis.model import HEALTHY
from harness.detection.diagnosis import diagnose, diagnose_log, find_model, load_models
from harness.logs import load_log
from harness.monitor.core import AlarmPolicy
from tests.paths import DATA, ROOT

NOWHERE = ROOT / "tests" / "no-results"       # no results/ model here: the package's published model


def answer(path: Path, **kw):
    return diagnose(path, results_dir=NOWHERE, **kw)[1].result


def frame(n: int = 40, **cols) -> pd.DataFrame:
    out = pd.DataFrame({"update": np.arange(n), "nonfinite": 0.0})
    for k, v in cols.items():
        out[k] = v
    return out


# ---- the invariants on synthetic frames ---------------------------------------------------------------
def test_each_invariant_breaks_on_its_symptom_and_holds_on_a_healthy_shape():
    rng = np.random.default_rng(0)
    healthy = frame(approx_kl=rng.uniform(1e-3, 1e-2, 40), ratio_mean=1 + rng.normal(0, 1e-3, 40),
                    entropy=rng.uniform(0.5, 0.7, 40), adv_std=rng.uniform(0.5, 1, 40),
                    policy_loss=rng.normal(0, 0.01, 40), reward_mean=rng.normal(0.3, 0.1, 40))
    config = {"n_epochs": 4, "n_minibatches": 4}
    assert not invariants.broken(invariants.check(healthy, config))
    cases = {"finite": healthy.assign(nonfinite=[0.0] * 39 + [1.0]),
             "within_reach": healthy.assign(ratio_mean=np.geomspace(1, 4.85e8, 40)),
             "ratio_moves": healthy.assign(approx_kl=0.0),
             "signal_moves": healthy.assign(adv_std=0.0),
             "entropy_positive": healthy.assign(entropy=0.0)}
    for name, broken in cases.items():
        got = invariants.check(broken, config)[name]
        assert isinstance(got, invariants.Break) and got.invariant == name, (name, got)
        assert got.steps and got.line().startswith(name)
    # the ratio pinned at 1 is no symptom when each batch takes one optimizer step
    assert invariants.check(healthy.assign(approx_kl=0.0), {"n_epochs": 1, "n_minibatches": 1})["ratio_moves"] is False
    # a policy loss of exactly 0 is healthy GRPO at a ratio of 1 while the reward moves
    assert invariants.check(healthy.assign(policy_loss=0.0, adv_mean=0.0), config)["signal_moves"] is False


def test_clip_fractions_alone_need_reuse_a_learning_rate_and_100_steps():
    grpo = {"num_iterations": 2, "n_minibatches": 1, "lr": 1e-4}
    pinned = frame(150, clipfrac=0.0, reward_mean=np.linspace(0, 1, 150))
    assert isinstance(invariants.check(pinned, grpo)["clipping_acts"], invariants.Break)
    assert invariants.check(pinned, {**grpo, "lr": 1e-6})["clipping_acts"] is None      # TRL's default lr: no clipping
    assert invariants.check(pinned.iloc[:50], grpo)["clipping_acts"] is None
    assert invariants.check(pinned, {**grpo, "num_iterations": 1})["clipping_acts"] is False
    assert invariants.check(pinned.assign(clipfrac=[0.0] * 149 + [0.01]), grpo)["clipping_acts"] is False


def test_decisive_invariants_are_those_measured_at_most_1_percent_on_both_sets():
    table = invariants.measured()["invariants"]
    for name in invariants.decisive():
        for which in ("harness", "realworld"):
            s = table[name][which]
            assert s["logs"] > 0 and s["alarms"] / s["logs"] <= invariants.MAX_FALSE_ALARMS
    for name, sets in table.items():
        if any(s["alarms"] / max(1, s["logs"]) > invariants.MAX_FALSE_ALARMS for s in sets.values()):
            assert name not in invariants.decisive()


def test_trailing_invariants_are_decisive_and_within_the_bar_on_every_short_window():
    table = invariants.measured()["invariants"]
    assert invariants.trailing() <= invariants.decisive()
    for name in invariants.trailing():
        for which in ("harness", "realworld"):
            s = table[name][which]
            assert s["alarms_trailing"] / s["logs"] <= invariants.MAX_FALSE_ALARMS
    for name in invariants.decisive():       # decisive as a monitor reads it: every window of its evidence window
        assert all(s.get("alarms_window", 0) / s["logs"] <= invariants.MAX_FALSE_ALARMS for s in table[name].values())


def test_a_bug_begun_mid_run_breaks_a_trailing_invariant_on_the_last_rows_only():
    rng = np.random.default_rng(1)
    config = {"n_epochs": 4, "n_minibatches": 4}
    moving = rng.uniform(1e-3, 1e-2, 200)
    for pinned_rows, windows, trailing, broken in ((3, (10,), frozenset({"ratio_moves"}), True),
                                                    (3, (10,), frozenset(), False),
                                                    (10, (10,), frozenset(), True),
                                                    (3, (), frozenset({"ratio_moves"}), False)):
        log = frame(200, approx_kl=np.r_[moving[:-pinned_rows], np.zeros(pinned_rows)])
        got = invariants.check(log, config, windows, trailing)["ratio_moves"]
        assert isinstance(got, invariants.Break) is broken, (pinned_rows, windows, trailing, got)


# ---- issue 55's cases ---------------------------------------------------------------------------------
def test_seed_verl_log_with_zero_loss_entropy_and_advantages_is_no_learning_signal():
    r = answer(DATA / "seed" / "verl_grpo_zeros.csv")
    assert r.answer != HEALTHY and r.basis == "invariants"
    assert r.fault_class in ("no learning signal", "deterministic policy")
    assert {b["invariant"] for b in r.broken} >= {"signal_moves", "entropy_positive"}


def test_seed_ratio_of_4_8e8_is_outside_the_trust_region():
    r = answer(DATA / "seed" / "grpo_ratio_explodes.csv")
    assert r.answer == "excessive_lr" or r.fault_class == "outside the trust region"
    within = next(b for b in r.broken if b["invariant"] == "within_reach")
    assert within["decisive"] and "4.85e+08" in within["shows"]


def test_trl_ratio_pinned_at_1_with_batches_reused_is_the_trust_region_never_acting():
    r = answer(DATA / "trl_pinned_ratio" / "pinned" / "trainer_state.json")
    assert r.answer == "shared_policy" or r.fault_class == "trust region never acts", r
    assert "shared_policy" in (r.members or (r.answer,))
    twin = answer(DATA / "trl_pinned_ratio" / "healthy" / "trainer_state.json")
    assert not any(b["invariant"] in ("clipping_acts", "ratio_moves") for b in twin.broken)
    # the twin clips on 11 of 300 steps: healthy. A fault its view cannot show (its runs look healthy) is
    # never ruled out by its silent signatures, so its probability stays on the healthy-looking side
    assert twin.answer == HEALTHY, (twin.answer, twin.probabilities)
    assert not set(twin.ruled_out) & set(twin.invisible)


def test_trl_reward_cadence_is_read_as_num_iterations(tmp_path):
    state = json.loads((DATA / "trl_pinned_ratio" / "pinned" / "trainer_state.json").read_text())
    (tmp_path / "trainer_state.json").write_text(json.dumps(state))      # no training_args beside it
    log = load_log(tmp_path / "trainer_state.json")
    assert log.config["num_iterations"] == 2 and log.config["n_minibatches"] == 1
    assert any("cadence" in n for n in log.notes)


def test_trl_kl_zero_on_every_generating_step_is_read_on_those_steps(tmp_path):
    """TRL at num_iterations > 1 logs the KL to the reference exactly 0 on the steps that generate when the
    reference is the policy itself, and not on the steps between (they reuse reference log-probs taken
    before the policy moved): kl_ref_zero reads the generating steps and fires; the healthy twin's not."""
    from harness.analysis.signatures import SIGNATURES
    state = json.loads((DATA / "trl_pinned_ratio" / "healthy" / "trainer_state.json").read_text())
    logs = {}
    for name, kl_when_generating in (("frozen", 0.01), ("policy", 0.0)):
        for row in state["log_history"]:
            row["kl"] = kl_when_generating if "reward" in row else 0.012     # what TRL logs at beta > 0
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text(json.dumps(state))
        logs[name] = load_log(tmp_path / name / "trainer_state.json")
    log = logs["policy"]
    assert 0.4 < (log.metrics["kl_ref"] == 0).mean() < 0.6          # half the rows: below "most" overall
    fired = SIGNATURES["kl_ref_zero"].check(log.metrics, {"algo": "grpo"})
    assert fired.fired and "generating" in fired.evidence, fired
    assert not SIGNATURES["kl_ref_zero"].check(logs["frozen"].metrics, {"algo": "grpo"}).fired
    r = answer(tmp_path / "policy" / "trainer_state.json")
    assert r.answer == "reference_not_frozen", (r.answer, r.probabilities)


def test_sb3_nan_at_the_first_update_is_non_finite_not_too_short():
    log = load_log(DATA / "sb3_nan" / "progress.csv")
    assert log.metrics["nonfinite"].iloc[0] == 1.0
    r = answer(DATA / "sb3_nan" / "progress.csv")
    assert r.fault_class == "non-finite" and r.basis == "invariants"
    assert r.broken[0]["steps"][0] == 1


@pytest.mark.parametrize("seed", range(4))
def test_rl_zoo_scheduled_cartpole_is_healthy_and_its_schedule_is_configuration(seed):
    path = DATA / "sb3_zoo_cartpole" / f"seed{seed}" / "progress.csv"
    log = load_log(path)
    assert any("clip_range is configured as a linear schedule" in n for n in log.notes), log.notes
    r = answer(path)
    assert r.answer == HEALTHY, (r.answer, r.probabilities)
    assert "tiny_clip" not in (r.members or (r.answer,))


# ---- a named fault needs support --------------------------------------------------------------------
def logs_under(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.name in ("progress.csv", "trainer_state.json", "console.log") or p.name.startswith("events.out"):
            out.append(p.parent if p.name.startswith("events.out") else p)
    return sorted(set(out))


def unsupported(path: Path, models) -> str | None:
    """The named fault of ``path``'s answer when none of its readable expected signatures fires and
    nothing in the log (a broken invariant of its class, an evidence item) shows it; else None."""
    try:
        log = load_log(path)
    except Exception:  # a log the tests keep to be refused
        return None
    d = diagnose_log(log, models)
    r = d.result
    named = (r.answer,) if r.answer in FAULTS and r.basis != "invariants" else ()   # a class: its most probable member
    for fault in named:
        readable = [n for n in FAULTS[fault].expected if not d.expected.get(n, "").startswith(("not in", "in this log, but"))]
        if readable and not any(d.expected.get(n, "").startswith("fired") for n in readable) and not r.support.get(fault):
            return fault
    return None


def test_no_answer_on_the_kept_logs_names_a_fault_the_log_does_not_support():
    models = load_models(find_model(NOWHERE))
    bad = {str(p.relative_to(DATA)): f for p in logs_under(DATA) if "tiny" not in p.parts
           and (f := unsupported(p, models))}
    assert not bad, bad


# ---- the live monitor uses the same order -----------------------------------------------------------
def test_a_decisive_broken_invariant_alarms_at_the_first_check():
    from harness.detection.diagnosis import answer_frame, pick_model

    models = load_models(find_model(NOWHERE))
    log = load_log(DATA / "seed" / "grpo_ratio_explodes.csv")
    model = pick_model(models, log.algo, log.profile)
    policy = AlarmPolicy()
    first = None
    for rows in range(3, len(log.metrics) + 1):
        a = answer_frame(model, log.metrics.iloc[:rows], dict(log.config), recent=10)
        if policy.see(a, rows, float(rows)) is not None:
            first = rows
            break
    breaks = np.flatnonzero(log.metrics["ratio_mean"].to_numpy() > invariants.BOUNDS["ratio_mean"])
    assert first is not None and first == breaks[0] + 1
    assert policy.alarms[0].fault_class == "outside the trust region" and policy.alarms[0].broken
    assert math.isnan(policy.alarms[0].probability) or policy.alarms[0].probability >= 0


class _Payload:
    """A pickle that would run a command if it were loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_sb3_schedules_are_read_without_executing_the_pickle(tmp_path):
    import base64
    import pickle

    from harness.logs.readers import sb3_model_config, sb3_schedule

    marker = tmp_path / "ran"
    got = sb3_schedule({":type:": "<class 'function'>",
                        ":serialized:": base64.b64encode(pickle.dumps(_Payload(marker))).decode()})
    assert got is not None and got["kind"] == "function" and not marker.exists()
    config = sb3_model_config(DATA / "sb3_zoo_cartpole" / "seed0")
    assert "linear" in config["clip_range_schedule"] and "0.2" in config["clip_range_schedule"]
    assert "clip_range" not in config                        # a schedule is no constant setting
    assert sb3_model_config(DATA / "sb3_nan")["clip_range"] == 0.2      # a constant schedule is its value


def _trl_ppo_log(approxkl, entropy, n: int = 60):
    """A TRL PPOTrainer (0.12+) log of ``n`` updates: the documented keys, healthy-looking values but for
    ``approxkl(u)`` and ``entropy(u)``."""
    from harness.logs import to_canonical
    rows = []
    for u in range(n):
        values = {"objective/scores": 0.5 + 0.004 * u, "objective/kl": 0.1 + 0.01 * u,
                  "objective/non_score_reward": -0.005 * u, "objective/rlhf_reward": 0.5, "policy/approxkl_avg": approxkl(u),
                  "policy/clipfrac_avg": 0.0 if approxkl(u) == 0 else 0.05, "policy/entropy_avg": entropy(u),
                  "loss/policy_avg": -0.01, "loss/value_avg": 0.05, "val/clipfrac_avg": 0.01,
                  "val/ratio": 1.0 if approxkl(u) == 0 else 1.002, "val/num_eos_tokens": 60, "lr": 3e-4, "episode": 64 * u}
        rows += [(u, float(u + 1), k, v) for k, v in values.items()]
    return to_canonical(pd.DataFrame(rows, columns=["row", "step", "key", "value"]), "auto")


def test_ppo_lm_logs_without_a_model_are_answered_from_exact_evidence():
    """No model is fitted on PPO-LM runs: a TRL PPOTrainer log is answered from the invariants and exact
    signatures. approx_kl exactly 0 while the policy samples names shared_policy; the same zeros once the
    policy has stopped sampling (entropy exactly 0 over the last rows) are the deterministic policy's, not
    the ratio's; a log with neither is healthy, listing the faults only scale would show."""
    from harness.detection.diagnosis import diagnose_log, evidence_only, load_models, pick_model

    models = load_models(find_model(NOWHERE))
    pinned = _trl_ppo_log(lambda u: 0.0, lambda u: 0.7)
    assert (pinned.profile, pinned.algo) == ("trl_ppo", "ppo_lm") and pick_model(models, "ppo_lm", "trl_ppo") is None
    r = diagnose_log(pinned, models).result
    assert r.answer == "shared_policy" and r.basis == "evidence" and r.support["shared_policy"], r

    collapsed = _trl_ppo_log(lambda u: 0.01 if u < 5 else 0.0, lambda u: 0.7 if u < 5 else 0.0)
    r = diagnose_log(collapsed, models).result
    assert r.fault_class == "deterministic policy" and r.answer != "shared_policy", r

    healthy = _trl_ppo_log(lambda u: 0.01 + 0.001 * (u % 3), lambda u: 0.7 - 0.002 * u)
    r = evidence_only("ppo_lm", healthy.metrics, dict(healthy.config), {})
    assert r.answer == HEALTHY and "excessive_lr" in r.invisible and not r.broken, r


@pytest.mark.parametrize("run, expected", [("healthy", HEALTHY), ("old_logp_recomputed", "shared_policy")])
def test_real_trl_ppo_trainer_logs_are_read_with_their_config_and_answered(run, expected):
    """Logs TRL 0.28.0's PPOTrainer wrote (tests/data/trl_ppo/README.md): read as PPO-LM with the settings
    of its pickled PPOConfig (4 PPO epochs, 1 minibatch); the run whose old log-probs are recomputed breaks
    ratio_moves from the first step and is answered in its class, shared_policy most likely."""
    path = DATA / "trl_ppo" / run / "checkpoint-100" / "trainer_state.json"
    log = load_log(path)
    assert (log.profile, log.algo) == ("trl_ppo", "ppo_lm")
    assert {k: log.config[k] for k in ("n_epochs", "n_minibatches", "kl_coef")} == {"n_epochs": 4, "n_minibatches": 1,
                                                                                    "kl_coef": 0.05}
    r = answer(path)
    assert r.answer == expected, (r.answer, r.broken)
    if expected != HEALTHY:
        assert r.fault_class == "trust region never acts" and r.broken[0]["steps"][0] == 1


def test_a_ratio_that_moves_is_not_pinned_because_approx_kl_rounds_to_zero():
    """The last updates of a healthy run whose lr anneals toward 0: approx_kl (k3) of such a tiny update rounds
    to exactly 0 in float32 while max |r - 1| is still ~5e-5 (11 of the dataset's 328 healthy PPO runs, read
    over their last 5 rows): the ratio moves, so ratio_moves holds; with every exact quantity at 0 it breaks."""
    import pandas as pd

    from harness.analysis import invariants

    config = {"n_epochs": 4, "n_minibatches": 4}
    tail = pd.DataFrame({"update": range(34, 39), "approx_kl": 0.0, "ratio_dev_max": [1.7e-4, 1.6e-4, 9e-5, 5e-5, 4.6e-5],
                         "lr": [3.2e-5, 2.6e-5, 1.9e-5, 1.3e-5, 6e-6]})
    assert invariants.check(tail, config)["ratio_moves"] is False
    pinned = tail.assign(ratio_dev_max=0.0)
    assert invariants.check(pinned, config)["ratio_moves"].invariant == "ratio_moves"

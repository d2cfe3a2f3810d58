"""The diagnosis' parts on logs built to the point: features that see magnitudes and windows by
fraction, exact evidence and its Bayes update, identifiability from confusions, the learning
criterion, and the answer rule that never contradicts its own numbers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import evidence
from harness.analysis.features import features, window
from harness.analysis.identifiability import identify
from harness.analysis.learning import learning
from harness.analysis.model import HEALTHY, TOO_SHORT, UNKNOWN, DiagnosisModel
from harness.metrics import CANONICAL


def frame(n: int, **cols: float | np.ndarray) -> pd.DataFrame:
    out = pd.DataFrame({"update": np.arange(n)})
    for k, v in cols.items():
        out[k] = v
    return out


def test_windows_are_fractions_of_the_log():
    for n in (10, 16, 1000):
        values = np.arange(n, dtype=float)
        assert len(window(values, "head")) == max(1, int(np.ceil(0.2 * n)))
        assert window(values, "tail")[-1] == n - 1 and window(values, "head")[0] == 0
    # a 16-update log and a 1000-update log of the same smooth curve are described alike
    short = features(frame(16, approx_kl=np.linspace(1e-3, 1e-2, 16)), ["approx_kl"], "ppo")
    long = features(frame(1000, approx_kl=np.linspace(1e-3, 1e-2, 1000)), ["approx_kl"], "ppo")
    for stat in ("approx_kl:log_median", "approx_kl:trend"):
        assert short[stat] == pytest.approx(long[stat], abs=0.1)
    assert "log:steps" not in long        # the log's length is not a feature


def test_magnitudes_are_seen_on_a_log_scale():
    healthy = features(frame(20, approx_kl=8e-3, lr=3e-4), ["approx_kl", "lr"], "ppo", {"lr": 3e-4})
    shrunk = features(frame(20, approx_kl=1e-6, lr=3e-6), ["approx_kl", "lr"], "ppo", {"lr": 3e-6})
    assert healthy["approx_kl:log_median"] - shrunk["approx_kl:log_median"] == pytest.approx(np.log10(8e3))
    assert healthy["lr:log_median"] - shrunk["lr:log_median"] == pytest.approx(2.0)
    assert healthy["cfg:log_lr"] == pytest.approx(np.log10(3e-4))
    # approx KL per unit learning rate: the same policy movement per step at both rates
    assert healthy["rel:log_kl_per_lr"] == pytest.approx(np.log10(8e-3 / 3e-4))


def test_config_relative_features():
    f = features(frame(10, optimizer_steps=4.0, lr=3e-4, clip_range=0.2, grad_norm=5.0), CANONICAL, "ppo",
                 {"n_epochs": 10, "n_minibatches": 4, "lr": 3e-4, "clip_range": 0.2, "max_grad_norm": 0.5})
    assert f["rel:steps_logged_over_configured"] == pytest.approx(0.1)        # 4 steps of 40 configured
    assert f["rel:log_lr_logged_over_configured"] == pytest.approx(0.0)
    assert f["rel:log_grad_over_clip"] == pytest.approx(1.0)
    assert f["cfg:log2_steps"] == pytest.approx(np.log2(40))
    # TRL's cadence: a generation's rewards on every 2nd optimizer step, while the config implies every 4th
    trl = frame(40, reward_mean=[0.5 if i % 2 == 0 else np.nan for i in range(40)])
    g = features(trl, CANONICAL, "grpo", {"num_iterations": 2, "n_minibatches": 2}, view="trl")
    assert g["rel:reward_rows_over_expected"] == pytest.approx(2.0)
    assert math.isnan(features(trl, CANONICAL, "grpo", {"num_iterations": 2, "n_minibatches": 2})[
        "rel:reward_rows_over_expected"])       # only where rows are optimizer steps (TRL)


@pytest.mark.parametrize("cols, config, item, expected", [
    ({"approx_kl": 0.0, "clipfrac": 0.0}, {"n_epochs": 4, "n_minibatches": 4}, "ratio_exactly_one", True),
    ({"approx_kl": 0.0, "clipfrac": 0.0}, {"n_epochs": 1, "n_minibatches": 1}, "ratio_exactly_one", False),
    ({"approx_kl": 0.0, "clipfrac": 0.0}, {}, "ratio_exactly_one", None),          # the config cannot tell
    ({"approx_kl": 1e-3}, {"n_epochs": 4, "n_minibatches": 4}, "ratio_exactly_one", False),
    ({"approx_kl": 1e-4, "clipfrac": 0.0}, {"n_epochs": 4, "n_minibatches": 4}, "ratio_exactly_one", False),  # small update
    ({"clipfrac_binding": 0.0}, {"num_iterations": 2, "n_minibatches": 2}, "ratio_exactly_one", True),  # TRL: clips only
    ({"reward_mean": 0.0}, {}, "reward_exactly_zero", True),
    # one of the summed reward functions never pays (a format regex that never matches), another does
    ({"reward/format": 0.0, "reward/correct": np.linspace(0.1, 0.6, 30)}, {}, "reward_function_exactly_zero", True),
    ({"reward/format": 0.0, "reward/correct": 0.0}, {}, "reward_function_exactly_zero", False),   # reward_zero's
    ({"reward/format": np.r_[np.zeros(15), np.full(15, 0.5)], "reward/correct": 0.3}, {},
     "reward_function_exactly_zero", False),                                       # it pays half the time
    ({"reward/correct": 0.0}, {}, "reward_function_exactly_zero", None),           # one function: cannot tell
    ({"grad_norm": 0.0}, {}, "gradient_exactly_zero", True),
    ({"kl_ref": 0.0}, {"beta": 0.04}, "kl_ref_exactly_zero", True),
    ({"kl_ref": 0.0}, {"beta": 0.0}, "kl_ref_exactly_zero", False),
    ({"frac_reward_zero_std": 1.0}, {}, "groups_all_uniform", True),
    ({}, {}, "reward_exactly_zero", None),                                         # not logged
    ({"optimizer_steps": 32.0}, {"n_epochs": 10, "n_minibatches": 32}, "optimizer_steps_short", True),  # 1 epoch of 10
    ({"optimizer_steps": 320.0}, {"n_epochs": 10, "n_minibatches": 32}, "optimizer_steps_short", False),
    ({"optimizer_steps": 32.0}, {"n_epochs": 10, "n_minibatches": 32, "target_kl": 0.01}, "optimizer_steps_short",
     None),                                                                         # an early stop is healthy
    ({"optimizer_steps": 32.0}, {}, "optimizer_steps_short", None),
    # the KL early stop on every update: counted steps where the log has them (SB3), else the logged
    # approx_kl (CleanRL: the last minibatch's, compared with target_kl at each epoch's end)
    ({"optimizer_steps": 32.0}, {"n_epochs": 10, "n_minibatches": 32, "target_kl": 1e-4}, "kl_stops_every_update",
     True),
    ({"optimizer_steps": 320.0}, {"n_epochs": 10, "n_minibatches": 32, "target_kl": 0.02}, "kl_stops_every_update",
     False),
    ({"approx_kl": 3e-3}, {"n_epochs": 4, "n_minibatches": 4, "target_kl": 1e-4}, "kl_stops_every_update", True),
    ({"approx_kl": 3e-3}, {"n_epochs": 4, "n_minibatches": 4, "target_kl": 0.015}, "kl_stops_every_update", False),
    ({"approx_kl": 3e-3}, {"n_epochs": 4, "n_minibatches": 4}, "kl_stops_every_update", None),    # no target_kl
])
def test_exact_evidence(cols, config, item, expected):
    assert evidence.observe(frame(30, **cols), config)[item] == expected


def test_a_log_printed_with_few_decimals_cannot_show_a_ratio_or_kl_exactly_at_its_healthy_scale():
    """verl <= 0.3 printed its console with :.3f: an approx_kl or KL to the reference of 4e-4 reads 0.000, so
    those exact zeros are not read there (None); a reward function 0 on every step still is (its scale is 1)."""
    rng = np.random.default_rng(0)
    cols = dict(kl_k1=0.0, kl_ref=0.0, loss=rng.normal(0.3, 0.05, 30), entropy=rng.uniform(0.4, 0.6, 30),
                reward_mean=rng.uniform(0.2, 0.8, 30), **{"reward/format": 0.0, "reward/correct": rng.uniform(0.1, 0.6, 30)})
    full = frame(30, **cols)
    printed = full.copy()
    for c in ("loss", "entropy", "reward_mean", "reward/correct"):
        printed[c] = printed[c].round(3)
    cfg = {"num_iterations": 2, "n_minibatches": 4, "beta": 0.04}
    assert evidence.printed_decimals(full) is None and evidence.printed_decimals(printed) == 3
    assert evidence.observe(full, cfg)["ratio_exactly_one"] is True and evidence.observe(full, cfg)["kl_ref_exactly_zero"]
    seen = evidence.observe(printed, cfg)
    assert seen["ratio_exactly_one"] is None and seen["kl_ref_exactly_zero"] is None
    assert seen["reward_function_exactly_zero"] is True


def test_too_many_generations_is_evidence_in_trl_logs_only():
    """TRL logs the reward only on the optimizer step that generates: with num_iterations=2 a healthy
    log has it on every other row; on every row, the configured iterations are not taken."""
    every_other = [0.5 if i % 2 == 0 else np.nan for i in range(30)]
    cfg = {"num_iterations": 2, "n_minibatches": 1}
    trl = lambda reward, step=np.arange(1, 31): frame(30, reward_mean=reward, step=step)  # noqa: E731
    assert evidence.observe(trl(0.5), cfg, "trl")["generations_too_many"] is True
    assert evidence.observe(trl(every_other), cfg, "trl")["generations_too_many"] is False
    assert evidence.observe(trl(0.5), {"num_iterations": 1, "n_minibatches": 1}, "trl")["generations_too_many"] is False
    # 2 iterations x 2 minibatches: a healthy run generates on every 4th step, the bug on every 2nd
    every_4th = [0.5 if i % 4 == 0 else np.nan for i in range(30)]
    four = {"num_iterations": 2, "n_minibatches": 2}
    assert evidence.observe(trl(every_other), four, "trl")["generations_too_many"] is True
    assert evidence.observe(trl(every_4th), four, "trl")["generations_too_many"] is False
    short = frame(5, reward_mean=[0.5, np.nan, 0.5, np.nan, 0.5], step=np.arange(1, 6))    # 3 seen, 2 expected
    assert evidence.observe(short, four, "trl")["generations_too_many"] is False
    assert evidence.observe(trl(0.5), {}, "trl")["generations_too_many"] is None                # config unknown
    assert evidence.observe(trl(0.5, np.arange(10, 310, 10)), cfg, "trl")["generations_too_many"] is None  # logging_steps=10
    assert evidence.observe(trl(0.5), cfg, "verl")["generations_too_many"] is None              # a row per update
    assert evidence.observe(trl(0.5), cfg)["generations_too_many"] is None


def test_evidence_updates_the_model_by_the_measured_rates():
    labels = np.array([HEALTHY] * 200 + ["shared_policy"] * 40 + ["lr_too_low"] * 40)
    fired = np.r_[np.zeros(200), np.ones(38), np.zeros(2), np.r_[np.ones(4), np.zeros(36)]]
    rates = evidence.rates(pd.DataFrame({"ev:ratio_exactly_one": fired}), labels)
    assert rates["ratio_exactly_one"][HEALTHY] == (0, 200) and rates["ratio_exactly_one"]["shared_policy"] == (38, 40)
    probs = pd.Series({HEALTHY: 0.9, "shared_policy": 0.05, "lr_too_low": 0.05})
    after = evidence.combine(probs, {"ratio_exactly_one": True}, rates)
    assert after[HEALTHY] < 0.05 and after["shared_policy"] > 0.7           # never answered healthy
    assert evidence.combine(probs, {"ratio_exactly_one": None}, rates).equals(probs)   # cannot tell: no change


def _settings_examples(n_healthy: int = 120, n_fault: int = 40) -> tuple[pd.DataFrame, np.ndarray]:
    """Feature rows of healthy logs with gamma in 0.97..0.999 and ent_coef in 0..0.02, of wrong_gamma
    (gamma 0.5..0.9 in half of its logs: the misconfigured form; the config unchanged in the rest) and
    of entropy_sign_flip (its config unchanged: the code-bug form), and of another fault drawn like healthy."""
    rng = np.random.default_rng(0)
    rows, labels = [], []
    for label, n in ((HEALTHY, n_healthy), ("wrong_gamma", n_fault), ("entropy_sign_flip", n_fault),
                     ("lr_too_low", n_fault)):
        for i in range(n):
            gamma = rng.uniform(0.5, 0.9) if label == "wrong_gamma" and i % 2 == 0 else rng.uniform(0.97, 0.999)
            rows.append({"run_id": f"{label}-{i}", "cfg:gamma": gamma, "cfg:ent_coef": rng.uniform(0, 0.02),
                         "cfg:lr": rng.uniform(1e-4, 3e-3) / (30 if label == "lr_too_low" else 1)})
            labels.append(label)
    return pd.DataFrame(rows), np.array(labels)


def test_a_setting_no_training_run_had_is_evidence_with_measured_rates():
    rows, labels = _settings_examples()
    folds = [(np.flatnonzero(np.arange(len(rows)) % 3 != k), np.flatnonzero(np.arange(len(rows)) % 3 == k))
             for k in range(3)]
    settings = {"wrong_gamma": ("gamma", "gae_lambda"), "entropy_sign_flip": ("ent_coef",), "lr_too_low": ("lr",)}
    ranges, seen = evidence.setting_evidence(rows, labels, "ppo", settings, folds)
    # kept: the items that separate a fault from healthy (gamma below, lr below); not gamma above, nor
    # ent_coef, which no fault's logs have outside the healthy range
    assert set(ranges.items) == {"setting_below:gamma", "setting_below:lr"}
    # the range of lr is taken over every log where lr was not the bug: healthy and the other faults
    assert ranges.low["lr"] == pytest.approx(rows.loc[labels != "lr_too_low", "cfg:lr"].min())
    rates = ranges.pool(evidence.rates(seen, labels))
    assert rates["setting_below:gamma"]["wrong_gamma"] == (20, 40)                  # out of fold
    fired, logs = rates["setting_below:gamma"][HEALTHY]
    assert logs == 200 and fired <= 2                  # pooled over healthy, entropy_sign_flip, lr_too_low
    # evidence for the faults that change the setting; every other class fires at one pooled rate
    assert ranges.owners["gamma"] == ("wrong_gamma",) and ranges.owners["lr"] == ("lr_too_low",)
    assert rates["setting_below:gamma"][HEALTHY] == rates["setting_below:gamma"]["entropy_sign_flip"] \
        == rates["setting_below:gamma"]["lr_too_low"]
    user = pd.DataFrame([{"cfg:gamma": 0.5, "cfg:lr": 3e-4}, {"cfg:gamma": 0.99, "cfg:lr": 3e-4}, {}])
    observed = ranges.observe(user)
    assert observed["ev:setting_below:gamma"].tolist()[:2] == [1.0, 0.0]
    assert math.isnan(observed["ev:setting_below:gamma"].iloc[2])                  # no config: cannot tell
    assert "gamma (0.5) is below" in ranges.describe("setting_below:gamma", 0.5)
    # a healthy configuration inside every range fires nothing; the gamma item shows wrong_gamma
    probs = pd.Series({HEALTHY: 0.8, "wrong_gamma": 0.1, "entropy_sign_flip": 0.05, "lr_too_low": 0.05})
    after = evidence.combine(probs, {"setting_below:gamma": True}, evidence.rates(seen, labels))
    assert after.idxmax() == "wrong_gamma" and after["wrong_gamma"] > 0.8 and after[HEALTHY] < 0.1


def test_a_setting_outside_the_range_on_a_few_logs_of_an_unrelated_fault_is_no_evidence():
    """Out of fold, a few logs of a fault that does not change ent_coef fall above the other folds'
    range: the item has no owner that fires, so it is dropped (it would have pointed at that fault)."""
    rows, labels = _settings_examples()
    odd = np.flatnonzero(labels == "lr_too_low")[:4]
    rows.loc[odd, "cfg:ent_coef"] = 0.05
    folds = [(np.flatnonzero(np.arange(len(rows)) % 3 != k), np.flatnonzero(np.arange(len(rows)) % 3 == k))
             for k in range(3)]
    settings = {"wrong_gamma": ("gamma",), "entropy_sign_flip": ("ent_coef",), "lr_too_low": ("lr",)}
    ranges, _ = evidence.setting_evidence(rows, labels, "ppo", settings, folds)
    assert "setting_above:ent_coef" not in ranges.items and "setting_below:gamma" in ranges.items


def test_a_value_just_outside_the_sampled_range_is_nearer_healthy_than_the_bug():
    """Healthy clip ranges drawn in 0.1 .. 0.3 (sampled minimum above 0.1) and tiny_clip's misconfigured
    1e-4 .. 1e-2: CleanRL's Atari clip_coef of 0.1 lies just below the sampled range but far from every
    tiny clip; it fires only below the geometric midpoint (about 0.03), while gamma, whose faulty values
    sit just below the healthy ones, keeps its cut near the edge."""
    rng = np.random.default_rng(1)
    rows, labels = [], []
    for label, n in ((HEALTHY, 200), ("tiny_clip", 40)):
        for _ in range(n):
            clip = 10 ** rng.uniform(-4, -2) if label == "tiny_clip" else rng.uniform(0.1003, 0.3)
            rows.append({"cfg:clip_range": clip})
            labels.append(label)
    rows, labels = pd.DataFrame(rows), np.array(labels)
    ranges = evidence.SettingRanges.fit(rows, labels, "ppo", {"tiny_clip": ("clip_range",)})
    largest_tiny = rows.loc[labels == "tiny_clip", "cfg:clip_range"].max()
    assert ranges.cut_low["clip_range"] == pytest.approx(math.sqrt(largest_tiny * ranges.low["clip_range"]))
    assert ranges.side("clip_range", 0.1) is None                  # was "below" when the edge was the cut
    assert ranges.side("clip_range", 0.005) == "below"
    assert ranges.cut_high["clip_range"] == ranges.high["clip_range"]          # no owner value above
    assert "counted below" in ranges.describe("setting_below:clip_range", 0.005)
    gamma_rows, gamma_labels = _settings_examples()
    gamma = evidence.SettingRanges.fit(gamma_rows, gamma_labels, "ppo", {"wrong_gamma": ("gamma",)})
    assert gamma.cut_low["gamma"] < gamma.low["gamma"] and gamma.side("gamma", 0.9) == "below"
    # a model fitted before the cuts existed (unpickled without them) cuts at the edges
    old = evidence.SettingRanges(ranges.low, ranges.high, ranges.items, ranges.owners)
    del old.cut_low, old.cut_high
    assert old.side("clip_range", 0.1) == "below"


def test_sized_settings_are_never_setting_evidence():
    """GRPO's learning rate is sized to the model (1e-6 for TRL's defaults on an LLM, 1e-4 .. 2e-3 for the
    harness's tiny transformers): its training range says nothing about a user's run."""
    rows = pd.DataFrame({"cfg:lr": [1e-4, 1e-3, 1e-6], "cfg:beta": [0.0, 0.04, 0.04]})
    assert "lr" not in evidence.SettingRanges.keys(rows.columns, "grpo")
    assert "lr" in evidence.SettingRanges.keys(rows.columns, "ppo")


def test_identifiability_from_confusions():
    labels = ["a"] * 10 + ["b"] * 10 + ["c"] * 10 + ["d"] * 10 + [HEALTHY] * 10
    answers = (["a"] * 6 + ["b"] * 4) + (["b"] * 5 + ["a"] * 5) + ["c"] * 10 + [HEALTHY] * 8 + ["c"] * 2 + [HEALTHY] * 10
    ident = identify(labels, answers, ["a", "b", "c", "d"])
    assert ident.members("a") == ident.members("b") == ("a", "b")            # taken for each other
    assert ident.members("c") == ("c",)                                      # told apart
    assert ident.invisible == ("d",)                                         # looks healthy in this view


class _Fixed:
    """An estimator returning fixed probabilities (the answer rule is tested apart from fitting)."""

    classes_ = np.array([HEALTHY, "a", "b", "c", "d"])

    def __init__(self, probs):
        self.probs = np.asarray(probs, dtype=float)

    def predict_proba(self, X):
        return np.tile(self.probs, (len(X), 1))


def _answer(probs, n_rows=20, fired=None, rates=None):
    model = DiagnosisModel("ppo", "canonical", [], list(_Fixed.classes_), _Fixed(probs), anomaly_threshold=0.6,
                           healthy_weight=1.5, rates=rates or {},
                           identifiability=identify(["a"] * 10 + ["b"] * 10 + ["d"] * 10,
                                                    ["b"] * 5 + ["a"] * 5 + ["a"] * 10 + [HEALTHY] * 10, ["a", "b", "c", "d"]))
    rows = pd.DataFrame([{}])
    observed = pd.DataFrame([{f"ev:{k}": (np.nan if v is None else float(v)) for k, v in (fired or {}).items()}])
    return model.diagnose(rows, observed, [n_rows])[0]


@pytest.mark.parametrize("probs, answer, kind", [
    ([0.7, 0.1, 0.1, 0.05, 0.05], HEALTHY, HEALTHY),            # P(anomalous) 0.25 (0.18 after the prior) < 0.5
    ([0.3, 0.05, 0.05, 0.0, 0.6], HEALTHY, HEALTHY),            # d cannot be shown: it counts with healthy
    ([0.1, 0.3, 0.3, 0.2, 0.1], "a", "class"),                 # a and b cannot be told apart: their class wins
    ([0.1, 0.05, 0.05, 0.7, 0.1], "c", "fault"),
    ([0.3, 0.0, 0.0, 0.7, 0.0], "c", "fault"),
])
def test_the_answer_follows_from_its_numbers(probs, answer, kind):
    r = _answer(probs)
    assert (r.answer, r.kind) == (answer, kind)
    assert_consistent(r)


def test_too_short_and_unknown():
    assert _answer([0.1, 0.1, 0.1, 0.6, 0.1], n_rows=2).answer == TOO_SHORT
    spread = _answer([0.05, 0.16, 0.0, 0.3, 0.49])      # d is silent: anomalous 0.46, 0.36 after the prior
    assert spread.answer == HEALTHY and spread.anomalous == pytest.approx(0.46 / (0.46 + 1.5 * 0.54))
    assert spread.probability == pytest.approx(1 - spread.anomalous)     # healthy, or d
    model = DiagnosisModel("ppo", "canonical", [], list(_Fixed.classes_), _Fixed([0.0, 0.3, 0.1, 0.3, 0.3]),
                           anomaly_threshold=0.5, unknown_threshold=0.35)
    r = model.diagnose(pd.DataFrame([{}]), pd.DataFrame([{}]), [20])[0]
    assert r.answer == UNKNOWN                             # every class below 0.35
    assert_consistent(r)


def test_evidence_shows_a_fault_the_view_cannot_show():
    """d's logs look healthy to the view, but in a log where the ratio is pinned at exactly 1 (which
    fires on 9 of d's 10 training logs and on none of 20 healthy ones) d is no longer silent."""
    rates = {"ratio_exactly_one": {HEALTHY: (0, 20), "a": (0, 10), "b": (0, 10), "d": (9, 10)}}
    quiet = _answer([0.3, 0.05, 0.05, 0.0, 0.6], rates=rates, fired={"ratio_exactly_one": False})
    assert quiet.answer == HEALTHY and quiet.invisible == ("d",)
    shown = _answer([0.3, 0.05, 0.05, 0.0, 0.6], rates=rates, fired={"ratio_exactly_one": True})
    assert shown.invisible == () and shown.answer == "d" and shown.anomalous >= 0.5
    assert_consistent(shown)


def assert_consistent(r) -> None:
    """The rule printed with every answer (harness.analysis.model.Answer)."""
    if r.n_rows < r.min_rows:
        assert r.answer == TOO_SHORT
    elif r.anomalous < r.threshold:
        assert r.answer == HEALTHY
    elif r.answer == UNKNOWN:
        assert r.class_probability != r.class_probability or r.class_probability < r.unknown_threshold
    else:
        assert r.class_probability >= r.unknown_threshold and r.answer in r.members
        assert r.probabilities[r.answer] == max(r.probabilities[m] for m in r.members)


@pytest.mark.parametrize("env_id, returns, learns", [
    ("CartPole-v1", np.linspace(20, 200, 50), True),
    ("CartPole-v1", np.full(50, 25.0), False),
    ("Pendulum-v1", np.linspace(-1200, -1150, 50), False),
    ("CartPole-v1", np.full(50, 480.0), True),                 # flat, but at the cap: nothing left to learn
    ("Unknown-v0", np.linspace(0, 100, 50), None),
])
def test_learning_criterion(env_id, returns, learns):
    assert learning(pd.DataFrame({"return_mean": returns}), {"algo": "ppo", "env_id": env_id}).learns == learns


def test_a_grpo_run_near_the_task_s_largest_reward_counts_as_learned():
    """A flat reward curve at 84% of the task's largest reward is a run with little left to gain, not one
    that cannot learn; a flat curve at 60% is."""
    meta = {"algo": "grpo", "env_id": "harness/ToySeq-v0",
            "config": {"env": {"kwargs": {"reward_weights": {"format": 1.0, "correct": 1.0}}}}}
    assert learning(pd.DataFrame({"reward_mean": np.full(30, 1.68)}), meta).learns is True
    assert learning(pd.DataFrame({"reward_mean": np.full(30, 1.2)}), meta).learns is False


def test_a_gain_within_the_run_s_noise_is_not_called_not_learning():
    """A GRPO run whose reward rises 4% of the task's scale under update-to-update noise of 10% cannot
    be told from one that gains 5%: it is not labelled not_learning. The same rise without noise, and a
    noisy run that clearly falls, are."""
    meta = {"algo": "grpo", "env_id": "harness/ToySeq-v0"}
    rising = np.linspace(0.40, 0.438, 40)
    noise = np.random.default_rng(0).normal(0.0, 0.1, 40)
    assert learning(pd.DataFrame({"reward_mean": rising + noise}), meta).learns is True
    assert learning(pd.DataFrame({"reward_mean": rising}), meta).learns is False
    assert learning(pd.DataFrame({"reward_mean": np.linspace(0.6, 0.3, 40) + noise}), meta).learns is False


def test_learning_reads_the_env_s_own_return_not_the_normalised_one():
    """A PPO run that normalises rewards learns on returns of scale ~1; it is judged on the env's own
    returns (episodes.parquet ``env_return``, what Monitor logs), so a run that solves its env learns
    (judged on the learner's return_mean it did not: 0.2 -> 2 against CartPole's span of 478)."""
    metrics = pd.DataFrame({"return_mean": np.linspace(0.2, 2.0, 50)})
    episodes = pd.DataFrame({"update": np.arange(50), "env_return": np.linspace(20, 500, 50)})
    meta = {"algo": "ppo", "env_id": "CartPole-v1"}
    assert learning(metrics, meta).learns is False
    got = learning(metrics, meta, episodes)
    assert got.learns is True and got.metric == "env_return"


def test_a_log_unlike_every_training_log_is_clipped_and_said():
    """The logistic model reads each feature within the range its training logs spanned: a log far outside
    it (another task's entropy scale) moves the logits no further than the most extreme training log did,
    and the answer names the quantities it lies outside (and on which side)."""
    from harness.analysis.estimators import TrainingRange
    from harness.analysis.model import make_estimator

    rng = np.random.default_rng(0)
    n = 120
    y = np.array([HEALTHY, "a", "b"])[np.arange(n) % 3]
    X = pd.DataFrame({"entropy:median": rng.normal(1.0, 0.1, n) + (y == "a") * 0.5,
                      "cfg:lr": rng.uniform(1e-4, 1e-3, n), "clipfrac:log_min": rng.normal(-2, 0.2, n)})
    span = TrainingRange().fit(X.to_numpy())
    assert span.low_ == pytest.approx(X.min().to_numpy()) and span.high_ == pytest.approx(X.max().to_numpy())
    far = np.array([[50.0, 1e-6, np.nan]])
    assert span.transform(far)[0, :2] == pytest.approx([X["entropy:median"].max(), X["cfg:lr"].min()])
    assert np.isnan(span.transform(far)[0, 2])                                  # missing stays missing
    assert span.outside(far).tolist() == [[True, True, False]]

    est = make_estimator("logistic").fit(X.to_numpy(), y)
    model = DiagnosisModel("ppo", "canonical", list(X.columns), list(est.classes_), est)
    edge = X.iloc[[int(X["entropy:median"].idxmax())]].copy()
    beyond = edge.assign(**{"entropy:median": 50.0})
    assert model.probabilities(beyond).to_numpy() == pytest.approx(model.probabilities(edge).to_numpy())
    answers = model.diagnose(pd.concat([edge, beyond.assign(**{"cfg:lr": 1e-6})]), pd.DataFrame([{}, {}]), [20, 20])
    assert answers[0].unlike_training == {}
    assert answers[1].unlike_training == {"entropy": "above", "cfg:lr": "below"}


def test_a_saved_logistic_model_is_arrays_and_answers_as_the_pipeline(tmp_path):
    """A logistic model is saved as LinearModel (numpy reads it: no scikit-learn import in diagnose), and
    its probabilities and training range are the fitted pipeline's."""
    from harness.analysis.linear import LinearModel
    from harness.analysis.model import load_models, make_estimator, save_models

    rng = np.random.default_rng(1)
    n = 150
    y = np.array([HEALTHY, "a", "b"])[np.arange(n) % 3]
    X = pd.DataFrame({"entropy:median": rng.normal(1.0, 0.1, n) + (y == "a") * 0.5,
                      "cfg:lr": np.where(np.arange(n) % 7 == 0, np.nan, rng.uniform(1e-4, 1e-3, n)),
                      "clipfrac:log_min": rng.normal(-2, 0.2, n) - (y == "b") * 0.4})
    est = make_estimator("logistic").fit(X.to_numpy(), y)
    fitted = DiagnosisModel("ppo", "canonical", list(X.columns), list(est.classes_), est)
    save_models({("ppo", "canonical"): fitted}, tmp_path / "m.joblib", {})
    saved = load_models(tmp_path / "m.joblib")[("ppo", "canonical")]
    assert isinstance(saved.estimator, LinearModel) and saved.estimator.C == pytest.approx(0.03)
    probe = pd.concat([X, pd.DataFrame([{"entropy:median": 9.0, "cfg:lr": np.nan, "clipfrac:log_min": -9.0}])])
    assert saved.probabilities(probe).to_numpy() == pytest.approx(fitted.probabilities(probe).to_numpy(), abs=1e-12)
    assert saved.unlike_training(probe) == fitted.unlike_training(probe)
    assert saved.unlike_training(probe)[-1] == {"entropy": "above", "clipfrac": "below"}


def test_settings_to_check_come_from_every_run_of_a_fault():
    """A misconfigured run holds the wrong gamma in its configuration (nothing differs from what is in
    effect); an overridden one shows the change: the fault's settings are the union over its runs."""
    from harness.analysis.examples import fault_settings
    from harness.config import ALGO_SCHEMAS
    base = {f.name: getattr(ALGO_SCHEMAS["ppo"](), f.name) for f in dataclasses.fields(ALGO_SCHEMAS["ppo"]) if f.init}
    misconfigured = {"fault": "wrong_gamma", "algo": "ppo", "fault_params": {"gamma": 0.8, "gae_lambda": 0.95, "form": "misconfigured"},
                     "hyperparameters": {"configured": {**base, "gamma": 0.8, "gae_lambda": 0.95}}}
    overridden = {"fault": "wrong_gamma", "algo": "ppo", "fault_params": {"gamma": 0.8, "gae_lambda": 0.95, "form": "overridden"},
                  "hyperparameters": {"configured": base}}
    assert fault_settings([misconfigured]) == {"wrong_gamma": ()}
    assert "gamma" in fault_settings([misconfigured, overridden])["wrong_gamma"]
    assert fault_settings([overridden, misconfigured]) == fault_settings([misconfigured, overridden])


def test_an_expected_signature_the_log_has_but_cannot_read_is_not_called_absent():
    """SB3's PPO at lr 3e-7 on LunarLander (a real log: progress.csv's train/approx_kl) logs approx_kl in
    float32 steps: 20% exactly 0, median 8.7e-10. approx_kl_tiny leaves such a median to approx_kl_zero,
    which needs 90% zeros: neither can say. The diagnosis used to print "not in this log" for a metric
    the log has; it now says the metric is there and why the signature could not be read."""
    from harness.analysis import signatures
    from harness.detection.diagnosis import expected_status

    kl = np.array([1.8e-9, 5.8e-11, 0.0, 2.3e-10, 0.0, 0.0, 5.9e-9, 8.7e-10, 3.9e-9, 1.2e-9])
    res = signatures.evaluate(frame(10, approx_kl=kl, nonfinite=0.0), {}, onset=0,
                              names=["approx_kl_tiny", "approx_kl_zero"])
    assert not res["approx_kl_tiny"].evaluable and not res["approx_kl_zero"].fired
    status = expected_status(res["approx_kl_tiny"])
    assert status.startswith("in this log, but not readable here: median approx_kl") and "zero, not tiny" in status
    assert expected_status(None) == "not in this log"
    assert expected_status(res["approx_kl_zero"]).startswith("did not fire: approx_kl == 0 on 60% of 10")

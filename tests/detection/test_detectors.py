"""Detectors: the reference detectors, the evaluation, user classes by import path.

``harness_dataset`` is the tiny catalogue fixture's labelled dataset (tests/detection/conftest.py)."""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pandas as pd
import pytest

from harness.analysis import dataset
from harness.analysis.runs import RunSet
from harness.detection import Alarm, RunInfo
from harness.detection.config_aware import ConfigAwareDetector
from harness.detection.folk import FolkDetector
from harness.detection.scoring import evaluate
from tests.commands import run
from tests.helpers import SilentDetector, train


def test_config_aware_has_fewer_false_alarms_on_controls_than_folk(harness_dataset):
    folk = evaluate(FolkDetector(), harness_dataset.path)
    aware = evaluate(ConfigAwareDetector(), harness_dataset.path)
    folk_fa = folk.score("control")["false_alarm_rate"]
    aware_fa = aware.score("control")["false_alarm_rate"]
    assert folk_fa == 1.0 and aware_fa < folk_fa
    # a fault that leaves no loud symptom (the ratio stays at 1) and one that diverges are named
    # (ppo_epochs_ignored, named from the configured epochs: test_onset_delay_and_alarms_before_onset)
    for fault in ("shared_policy", "adv_std_no_floor"):
        assert aware.score(fault)["recall"] == 1 and aware.score(fault)["correct_cause"] == 1, fault
    assert folk.score("healthy")["false_alarm_rate"] > aware.score("healthy")["false_alarm_rate"]
    # every faulty run is either detected or not; named faults come from the registry
    assert set(aware.runs["named_fault"]) <= {*harness_dataset.runs["fault"], "(no alarm)", "(unnamed)"}
    assert int(aware.confusion.to_numpy().sum()) == len(harness_dataset.runs)


def test_silent_detector_scores_zero_and_raises_no_false_alarms(harness_dataset):
    ev = evaluate(SilentDetector(), harness_dataset.path)
    overall = ev.score("all faults")
    assert overall["recall"] == 0 and overall["correct_cause"] == 0
    assert ev.score("healthy")["false_alarm_rate"] == 0 and ev.alarms.empty


def test_onset_delay_and_alarms_before_onset(store_dir, tmp_path):
    """ppo_epochs_ignored from update 5 (two seeds, with their healthy runs): config_aware names it from the
    configured epochs at its onset, folk's kl < 0.01 fires on it from update 0, before the onset."""
    for seed in (0, 1):
        for fault in ("none", "ppo_epochs_ignored"):
            res = train([f"fault={fault}", *(["fault.onset=5"] if fault != "none" else []), f"seed={seed}",
                         "algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=1024",      # 8 updates
                         "twin=false", f"results_dir={store_dir}"])
            shutil.copytree(store_dir / "runs" / res.run_id, tmp_path / "runs" / res.run_id)
    dataset.write(RunSet.load(tmp_path), tmp_path / "dataset", "test")
    aware = evaluate(ConfigAwareDetector(), tmp_path)
    row = aware.score("ppo_epochs_ignored")
    assert row["recall"] == 1 and row["correct_cause"] == 1 and row["delay_median"] == 0 and row["before_onset"] == 0
    folk = evaluate(FolkDetector(), tmp_path)
    assert folk.score("ppo_epochs_ignored")["before_onset"] == 1     # kl < 0.01 fires from update 0
    first = aware.alarms.merge(aware.runs[["run_id", "fault"]])
    assert (first[first["fault"] == "ppo_epochs_ignored"]["update"] >= 5).all()


USER_DETECTOR = '''
from harness.detection import Alarm, RunInfo

class ZeroRewardWatch:
    """A user's own detector: flags a reward that never moves from 0."""
    def reset(self, run_info):
        self.zeros = 0
    def update(self, update_index, metrics):
        self.zeros = self.zeros + 1 if metrics["reward_mean"] == 0 else 0
        return [Alarm("reward stuck at 0", "zero_reward", 1.0)] if self.zeros >= 3 else []
'''


def test_cli_evaluates_reference_and_user_detectors(harness_dataset, tmp_path, monkeypatch):
    out = run("harness.evaluate", "detector=config_aware", f"dataset={harness_dataset.path}", f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    for word in ("recall", "correct", "false", "delay", "healthy", "control", "shared_policy"):
        assert word in out.stdout
    report = tmp_path / "evaluation" / "config_aware"
    assert {"scores.parquet", "runs.parquet", "alarms.parquet", "confusion.parquet", "symptoms.parquet",
            "REPORT.md", "scores.png"} <= {p.name for p in report.iterdir()}
    assert "| zero_reward |" in (report / "REPORT.md").read_text()

    (tmp_path / "mydetectors.py").write_text(USER_DETECTOR)
    monkeypatch.syspath_prepend(tmp_path)          # python -m puts its working directory first on the path
    monkeypatch.delitem(sys.modules, "mydetectors", raising=False)
    user = run("harness.evaluate", "detector._target_=mydetectors.ZeroRewardWatch", f"dataset={harness_dataset.path}",
               f"results_dir={tmp_path}", cwd=tmp_path)
    assert user.returncode == 0, user.stderr
    scores = pd.read_parquet(tmp_path / "evaluation" / "ZeroRewardWatch" / "scores.parquet")
    zero = scores[(scores["group"] == "zero_reward") & (scores["setup"] == "all")].iloc[0]
    assert zero["recall"] == 1 and zero["correct_cause"] == 1 and zero["delay_median"] == 2
    sys.modules.pop("mydetectors", None)


DICT_DETECTOR = '''
class DictAlarms:
    """A user's detector that returns its alarms as dicts instead of Alarm objects."""
    def reset(self, run_info):
        pass
    def update(self, update_index, metrics):
        return [{"symptom": "reward stuck", "fault": "zero_reward", "score": 1.0}]
'''


def test_a_detector_returning_dicts_gets_one_line_naming_the_protocol(harness_dataset, tmp_path, monkeypatch):
    """What used to fail deep in the scoring (AttributeError: 'dict' object has no attribute 'score')."""
    (tmp_path / "dictdetectors.py").write_text(DICT_DETECTOR)
    monkeypatch.syspath_prepend(tmp_path)          # python -m puts its working directory first on the path
    monkeypatch.delitem(sys.modules, "dictdetectors", raising=False)
    out = run("harness.evaluate", "detector._target_=dictdetectors.DictAlarms", f"dataset={harness_dataset.path}",
              f"results_dir={tmp_path}", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "DictAlarms.update returned a list holding dict" in out.stderr
    assert "from harness.detection import Alarm" in out.stderr


@pytest.mark.parametrize("returned, what", [
    ("reward stuck", "returned str"), ([None], "holding NoneType"), (Alarm("x"), "returned Alarm"),
    ({"symptom": "x"}, "returned dict"),
])
def test_what_a_detector_may_return(returned, what):
    from harness.config import ConfigError
    from harness.detection.base import alarms_from

    class Returns:
        def update(self, update_index, metrics):
            return returned

    with pytest.raises(ConfigError, match=what):
        alarms_from(Returns(), 0, {})
    ok = Returns()
    ok.update = lambda i, m: (Alarm("a", "zero_reward"),)
    assert alarms_from(ok, 0, {}) == [Alarm("a", "zero_reward")]
    ok.update = lambda i, m: None
    assert alarms_from(ok, 0, {}) == []


@pytest.mark.parametrize("args, message", [
    (["detector._target_=nowhere.Nothing"], "detector._target_='nowhere.Nothing' cannot be imported"),
    (["detector._target_=collections.OrderedDict"], "is not a detector"),
    (["detector=oracle"], "unknown detector 'oracle'; valid choices: config_aware, folk"),
    (["dataset=/no/such/dir"], "no labelled dataset at /no/such/dir"),
])
def test_bad_evaluate_arguments_are_one_line(args, message, tmp_path):
    out = run("harness.evaluate", *args, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert message in out.stderr


def test_alarm_is_a_plain_value():
    assert Alarm("x") == Alarm("x", None, 1.0)


def _ptt_reference(rule, series):
    """post-training-toolkit's ConditionEvaluator (heuristics/executor.py at 7ab9855), on a pandas Series."""
    recent = series.tail(rule.window)
    if rule.kind in ("<", ">"):
        m = float(recent.mean())
        return m < rule.value if rule.kind == "<" else m > rule.value
    if rule.kind == "drop":
        if len(series) < rule.window * 2:
            return False
        base = float(series.head(rule.window).mean())
        return base != 0 and (base - float(recent.mean())) / abs(base) * 100 >= rule.value
    if len(series) < rule.window:
        return False
    if len(series) <= rule.window + 5:
        base = float(series.head(len(series) - 5).mean())
    else:
        base = float(series.iloc[:-5].rolling(rule.window, min_periods=rule.window // 2).mean().iloc[-1])
    return not (pd.isna(base) or base == 0) and float(series.tail(5).max()) >= base * rule.value


def test_ptt_rules_evaluate_as_post_training_toolkit_does():
    from harness.detection.ptt import RULES, fires
    rng = np.random.default_rng(0)
    for _ in range(400):
        n = int(rng.integers(1, 120))
        values = rng.lognormal(0, 1, n) * rng.choice([0.01, 0.3, 1.0])
        if rng.random() < 0.3:
            values[-int(rng.integers(1, n + 1)):] *= rng.choice([0.1, 5.0])
        for rule in RULES:
            assert fires(rule, values) == _ptt_reference(rule, pd.Series(values)), (rule.name, n)


def test_ptt_detector_waits_for_min_steps_and_names_its_rule():
    from harness.detection.ptt import PostTrainingToolkitDetector
    det = PostTrainingToolkitDetector()
    det.reset(RunInfo(run_id="r", algo="ppo", env="", backend=""))
    first = None
    for i in range(40):
        alarms = det.update(i, {"clipfrac": 0.5, "value_loss": 0.1})
        if alarms and first is None:
            first = (i, [a.symptom for a in alarms])
    assert first == (29, ["yaml_clip_fraction_high"])          # min_steps 30
    det.reset(RunInfo(run_id="r", algo="ppo", env="", backend=""))
    assert all(not det.update(i, {"group_reward_std_mean": 0.0}) for i in range(60))   # a GRPO-only rule


#: a PPO update no folk rule fires on
CALM = {"approx_kl": 0.02, "entropy": 0.6, "adv_mean": 0.3, "policy_loss": -0.01, "ratio_min": 0.8, "ratio_max": 1.25,
        "grad_norm": 2.0, "clipfrac": 0.1, "loss": 0.5, "nonfinite": 0.0, "value_loss": 1.0}


@pytest.mark.parametrize("change, symptom", [
    ({"approx_kl": 0.11}, "approx_kl > 0.1"), ({"approx_kl": 0.009}, "approx_kl < 0.01"),
    ({"entropy": 0.0}, "entropy == 0"), ({"adv_mean": 0.0}, "advantage mean == 0"),
    ({"ratio_min": 0.49}, "ratio outside [0.5, 2]"), ({"ratio_max": 2.01}, "ratio outside [0.5, 2]"),
    ({"grad_norm": 10.1}, "grad norm > 10"), ({"clipfrac": 0.31}, "clip fraction > 0.3"),
    ({"frac_reward_zero_std": 0.99}, "share of zero-std groups ~ 1"),
])
def test_the_folk_rules_are_the_rules_of_thumb_docs_detectors_lists(change, symptom):
    det = FolkDetector()
    det.reset(RunInfo(run_id="r", algo="ppo", env="", backend=""))
    assert det.update(0, CALM) == []
    assert symptom in [a.symptom for a in det.update(1, {**CALM, **change})]


def test_the_folk_thresholds_are_constructor_arguments_set_on_the_command_line():
    """``+detector.kl_high=0.2``: the rule moves (an approx_kl of 0.15 no longer alarms), and flat reward
    alarms once the progress metric has not moved over ``flat_window`` updates."""
    from hydra import compose, initialize_config_dir

    from harness.commands.evaluate import build_detector
    from harness.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("evaluate", ["detector=folk", "+detector.kl_high=0.2"])
    det = build_detector(cfg)
    assert isinstance(det, FolkDetector) and det.kl_high == 0.2
    det.reset(RunInfo(run_id="r", algo="ppo", env="", backend=""))
    assert det.update(0, {**CALM, "approx_kl": 0.15}) == []
    flat = [det.update(i, {**CALM, "return_mean": 20.0}) for i in range(1, 11)]
    assert [i for i, alarms in enumerate(flat, 1) if any(a.symptom == "reward flat" for a in alarms)] == [10]


def test_the_python_api_of_docs_detectors(harness_dataset):
    """``from harness.evaluate import evaluate``; ``evaluate(MyDetector(), "results")`` (a results_dir, or its
    dataset dir), then ``ev.summary()``, ``ev.confusion``, ``ev.symptoms``."""
    from harness.evaluate import evaluate as documented

    ev = documented(SilentDetector(), harness_dataset.path)
    again = documented(SilentDetector(), harness_dataset.path / "dataset")
    pd.testing.assert_frame_equal(ev.scores, again.scores)
    summary = ev.summary()
    assert isinstance(summary, str) and "recall" in summary.splitlines()[0] and "zero_reward" in summary
    assert int(ev.confusion.to_numpy().sum()) == len(harness_dataset.runs) and isinstance(ev.symptoms, pd.DataFrame)


def test_the_learned_detector_alarms_after_patience_checks_that_are_not_healthy(diverse_model):
    """``learned`` (docs/detectors.md): the diagnosis asked at the ``warmup``-th update and every ``every``
    updates after; it alarms, naming the answer's fault, once the answer has not been healthy on ``patience``
    consecutive checks (the diverse fixture's model, on one of its zero_reward runs)."""
    from harness.analysis.model import HEALTHY, TOO_SHORT
    from harness.detection.diagnosis import answer_frame
    from harness.detection.learned import LearnedDetector
    from harness.detection.scoring import load_dataset, run_info
    from harness.metrics import CANONICAL

    data, runs = load_dataset(diverse_model)
    run = runs[(runs["label"] == "zero_reward") & (runs["origin"] == "diverse")].iloc[0]
    rows = data[data["run_id"] == run["run_id"]].sort_values("update")
    metrics = [{k: float(r[k]) for k in CANONICAL} for _, r in rows.iterrows()]
    det = LearnedDetector(catalogue=str(diverse_model / "catalogue"), patience=2, every=3, warmup=3)
    info = run_info(run)
    det.reset(info)
    alarms = [(n, a) for n, m in enumerate(metrics, 1) for a in det.update(n - 1, m)]
    # the rule, applied to the answers the diagnosis gives on each prefix it is asked about
    streak, expected = 0, None
    for n in [n for n in range(1, len(metrics) + 1) if n == 3 or (n > 3 and n % 3 == 0)]:
        prefix = pd.DataFrame([{**m, "update": i} for i, m in enumerate(metrics[:n])], columns=["update", *CANONICAL])
        answer = answer_frame(det.model, prefix, dict(info.configured), dict(info.action_space)).answer
        streak = streak + 1 if answer not in (HEALTHY, TOO_SHORT) else 0
        if streak >= 2 and expected is None:
            expected = (n, answer)
    assert expected is not None, "the zero_reward run is answered healthy: nothing to check the patience on"
    assert alarms and (alarms[0][0], alarms[0][1].fault) == expected

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

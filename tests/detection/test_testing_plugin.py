"""assert_detects and the pytest plugin, as a user's test suite would use them."""

from __future__ import annotations

import pytest

from harness.detection.config_aware import ConfigAwareDetector
from harness.testing import assert_detects
from tests.helpers import SilentDetector


class Never(SilentDetector):
    pass


class Always(SilentDetector):
    def update(self, update_index, metrics):
        from harness.detection import Alarm
        return [Alarm("always", "zero_reward")]


def test_good_detector_passes(harness_dataset):
    assert_detects(ConfigAwareDetector(), fault="ppo_epochs_ignored", min_recall=1.0,
                   max_false_alarm_rate=0.2, dataset=harness_dataset, require_cause=True)
    assert_detects(ConfigAwareDetector(), fault="zero_reward", min_recall=0.9, max_false_alarm_rate=0.2)


def test_never_firing_detector_fails_with_the_missed_runs(harness_dataset):
    with pytest.raises(AssertionError) as err:
        assert_detects(Never(), fault="zero_reward", min_recall=0.9, max_false_alarm_rate=0.05)
    msg = str(err.value)
    assert "Never on zero_reward" in msg and "recall 0.00 < 0.90 on zero_reward: missed 6 of 6 runs" in msg
    assert "no alarm at or after onset update 0" in msg and "ppo/cartpole/native, seed 0" in msg


def test_always_firing_detector_fails_with_the_flagged_runs(harness_dataset):
    with pytest.raises(AssertionError) as err:
        assert_detects(Always(), fault="zero_reward", min_recall=0.9, max_false_alarm_rate=0.05)
    msg = str(err.value)
    assert "false-alarm rate 1.00 > 0.05" in msg and "(control, ppo_single_pass/cartpole/native" in msg
    assert "'always' at update 0" in msg and "missed" not in msg


def test_unknown_fault_is_reported(harness_dataset):
    with pytest.raises(ValueError, match="has no runs with fault 'nope'"):
        assert_detects(Never(), fault="nope")


USER_TESTS = '''
from harness.detection import Alarm
from harness.testing import assert_detects


class StuckReward:
    def reset(self, run_info):
        self.stuck = 0
    def update(self, i, m):
        self.stuck = self.stuck + 1 if m["reward_mean"] == 0 else 0
        return [Alarm("reward stuck at 0", "zero_reward")] if self.stuck >= 3 else []


class Lazy:
    def reset(self, run_info):
        pass
    def update(self, i, m):
        return []


def test_stuck_reward(harness_dataset):
    assert len(harness_dataset.runs) > 0
    assert_detects(StuckReward(), fault="zero_reward", min_recall=0.9, max_false_alarm_rate=0.05)


def test_lazy():
    assert_detects(Lazy(), fault="zero_reward", min_recall=0.9, max_false_alarm_rate=0.05)
'''


def test_user_test_file_with_the_plugin(pytester, harness_dataset):
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess(f"--harness-dataset={harness_dataset.path}", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*Lazy on zero_reward*", "*recall 0.00 < 0.90 on zero_reward: missed 6 of 6 runs*"])

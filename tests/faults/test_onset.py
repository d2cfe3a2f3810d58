"""A fault switches on at its onset update: fault_active flips there and so do the metrics."""

from __future__ import annotations

import pytest

from harness.analysis import signatures
from harness.config import ConfigError
from tests.helpers import SHORT, train


def test_shared_policy_onset(store_dir):
    res = train(["fault=shared_policy", "fault.onset=5", f"results_dir={store_dir}", *SHORT])
    m = res.metrics
    assert res.meta["onset_update"] == 5
    assert list(m["fault_active"]) == [u >= 5 for u in m["update"]]
    assert (m.loc[~m["fault_active"], "ratio_dev_max"] > 0).all()
    assert (m.loc[m["fault_active"], "ratio_dev_max"] == 0).all()
    # the signature is judged after onset; over the whole run it would not hold
    assert signatures.evaluate(m, res.meta)["ratio_pinned"].fired
    assert not signatures.evaluate(m, res.meta, onset=0)["ratio_pinned"].fired


def test_zero_reward_onset(store_dir):
    res = train(["fault=zero_reward", "fault.onset=4", f"results_dir={store_dir}", *SHORT])
    m = res.metrics
    assert (m.loc[m["update"] < 4, "reward_mean"] == 1).all()
    assert (m.loc[m["update"] >= 4, "reward_mean"] == 0).all()


def test_hyperparameter_fault_onset(store_dir):
    res = train(["fault=excessive_lr", "fault.factor=100", "fault.onset=6", f"results_dir={store_dir}", *SHORT])
    lr = res.metrics.set_index("update")["lr"]
    assert (lr.loc[:5] == 1e-3).all()
    assert lr.loc[6:].tolist() == pytest.approx([0.1] * 6)


def test_onset_beyond_the_run_is_refused_before_training(store_dir):
    """A fault that would never switch on is not trained and stored under the fault's name (issue 22)."""
    with pytest.raises(ConfigError, match="is beyond the run"):
        train(["fault=shared_policy", "fault.onset=1000", f"results_dir={store_dir}", *SHORT])

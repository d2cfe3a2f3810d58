"""The labelled dataset of the detector tests: the checked-in ``tiny("catalogue")`` fixture's (tests/make_fixtures.py),
given to the package's pytest plugin as a user gives one (``pytest --harness-dataset=PATH``), so the fast tier
never generates the plugin's own small dataset (54 runs; tests/detection/test_testing_plugin.py generates one of its shape, four short runs).

It holds, on PPO CartPole (native): 10 healthy seeds, 6 of shared_policy, 10 of zero_reward at onset 0 and 6 at
a mid-run onset (3 or 4), 6 look-alike controls (ppo_single_pass), 6 healthy and 6 tiny_clip runs that crash;
on GRPO toyseq: 6 healthy seeds and 6 of adv_std_no_floor (zero_std) that diverge."""

from __future__ import annotations

import pytest

from harness import testing


@pytest.fixture(scope="session")
def harness_dataset(tiny) -> testing.LabelledDataset:
    """The plugin's fixture, on the tiny catalogue's dataset; ``assert_detects`` without ``dataset=`` reads it
    too, as after ``--harness-dataset``."""
    dataset = testing.LabelledDataset.load(tiny("catalogue"))
    before = dict(testing._settings)
    testing.configure(dataset=dataset.path, cache_dir=before["cache"])
    yield dataset
    testing._settings.update(before)

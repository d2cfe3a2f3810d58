"""One construction idiom: a backend's trainers, the fault and a detector are each a ``_target_`` in the
config, built by :func:`harness.config.instantiate`, and a bad one is a one-line ConfigError naming it."""

from __future__ import annotations

import pytest

from faults import FAULTS, build_fault
from faults.tiny_clip import TinyClip
from harness.agents.base import Trainer, trainer_for
from harness.agents.ppo import PPOTrainer
from harness.config import BackendConfig, ConfigError, backend_config, instantiate
from harness.config.schemas import backend_names
from harness.detection.base import build_detector
from harness.detection.folk import FolkDetector


@pytest.mark.parametrize("name", backend_names())
def test_every_backend_names_its_trainers_by_target(name):
    backend = backend_config(name)
    assert backend.trainers and all(set(spec) == {"_target_"} for spec in backend.trainers.values())
    for algo in backend.trainers:
        trainer = trainer_for(backend, algo)
        assert isinstance(trainer, Trainer) and trainer.algo == algo and trainer.backend == name
        assert trainer_for(backend_config(name), algo) is trainer          # one trainer per config, kept


def test_every_kind_is_built_by_the_same_helper():
    assert isinstance(instantiate({"_target_": "harness.agents.ppo.PPOTrainer"}, "backend.trainers.ppo", Trainer),
                      PPOTrainer)
    cfg = {**FAULTS["tiny_clip"].default_config(), "clip_range": 0.01}
    assert build_fault(cfg) == instantiate(cfg, "fault") == TinyClip(clip_range=0.01)
    folk = build_detector({"_target_": "harness.detection.folk.FolkDetector", "kl_high": 0.2})
    assert isinstance(folk, FolkDetector) and folk.kl_high == 0.2
    assert isinstance(build_detector("folk"), FolkDetector)                    # a reference detector's name


def _trainer(spec):
    return trainer_for(BackendConfig(name="mine", trainers={"ppo": spec}), "ppo")


@pytest.mark.parametrize("build, message", [
    (lambda: _trainer("harness.agents.ppo.PPOTrainer"),
     "backend.trainers.ppo: 'harness.agents.ppo.PPOTrainer' is not {_target_: a.dotted.Class, ...}"),
    (lambda: _trainer({"_target_": "harness.agents.ppo.Nope"}),
     "backend.trainers.ppo._target_='harness.agents.ppo.Nope' cannot be imported (is its package on the path?)"),
    (lambda: _trainer({"_target_": "harness.detection.folk.FolkDetector"}),
     "backend.trainers.ppo._target_='harness.detection.folk.FolkDetector' is not a harness.agents.base.Trainer "
     "subclass"),
    (lambda: build_fault({"onset": 0}), "fault: {'onset': 0} is not {_target_: a.dotted.Class, ...}"),
    (lambda: build_fault({"_target_": "faults.nope.Nope"}), "fault._target_='faults.nope.Nope' cannot be imported"),
    (lambda: build_fault({"_target_": "harness.agents.ppo.PPOTrainer"}),
     "fault._target_='harness.agents.ppo.PPOTrainer' is not a faults.base.Fault subclass"),
    (lambda: build_fault({"_target_": "faults.tiny_clip.TinyClip", "clip_rnage": 0.1}),
     "unknown parameter fault.clip_rnage for fault tiny_clip; did you mean fault.clip_range? valid: clip_range, "
     "form, onset"),
    (lambda: build_fault({"_target_": "faults.tiny_clip.TinyClip", "clip_range": 2.0}),   # the fault's own check
     "fault.clip_range=2.0 is out of range"),
    (lambda: build_detector({"_target_": "harness.detection.folk.FolkDetector", "kl_hgh": 0.2}),
     "unknown parameter detector.kl_hgh for detector FolkDetector; did you mean detector.kl_high?"),
    (lambda: build_detector({"_target_": "nowhere.Nothing"}), "detector._target_='nowhere.Nothing' cannot be imported"),
    (lambda: build_detector({"_target_": "collections.OrderedDict"}), "is not a detector"),
    (lambda: build_detector({"_target_": "harness.detection.base.RunInfo"}),     # its constructor fails
     "detector harness.detection.base.RunInfo: RunInfo.__init__() missing 4 required positional arguments"),
])
def test_a_bad_target_is_one_line_naming_it(build, message):
    with pytest.raises(ConfigError) as info:
        build()
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)

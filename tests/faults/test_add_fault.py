"""Adding a fault touches one module: a Fault subclass in a module of the user's own, outside the
faults package, registered with ``faults.register``, composes as ``fault=<name>`` (defaults from the
class, overrides validated), trains a real run and is listed in FAULTS, with nothing else edited."""

from __future__ import annotations

import importlib
import sys

import pytest

import faults
from faults import FAULTS
from harness.config import ConfigError
from harness.pipeline.compose import make_experiment, preflight
from harness.pipeline.train import get_or_train

NAME = "scaled_clip_for_test"
MODULE = "user_faults_for_test"

SOURCE = '''
"""A user's own fault: the clip range the update uses is the configured one scaled down."""

from dataclasses import dataclass, replace
from typing import Any

from faults import Fault, param, register


@register
@dataclass
class ScaledClip(Fault):
    scale: float = param(0.01, "the configured clip range is multiplied by this", gt=0, le=1)

    name = "scaled_clip_for_test"
    form = "overridden"
    description = "the update scales the configured clip range down: most samples are clipped"
    provenance = "synthetic: a test that adding a fault is one module"
    algos = ("ppo",)
    expected = ("clipfrac_saturated",)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, clip_range=hp.clip_range * self.scale)
'''

SHORT = ["env.total_timesteps=384", "algo.n_steps=32", "algo.num_envs=4", "twin=false", "progress=false"]  # 3 updates


@pytest.fixture
def user_fault(tmp_path, monkeypatch):
    """The module as a user writes it, imported the way a user's code imports it."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    cls = importlib.import_module(MODULE).ScaledClip
    yield cls
    faults.unregister(NAME)
    sys.modules.pop(MODULE, None)


def test_a_fault_in_a_users_module_composes_trains_and_is_listed(user_fault, tmp_path):
    assert FAULTS[NAME] is user_fault and list(FAULTS) == sorted(FAULTS)
    assert user_fault.acts_on == "effective hyperparameter: hyperparams"

    exp = make_experiment([f"fault={NAME}", "fault.scale=0.1", f"results_dir={tmp_path}", *SHORT])
    assert exp.fault_cfg == {"_target_": f"{MODULE}.ScaledClip", "onset": 0, "scale": 0.1}
    assert isinstance(exp.fault, user_fault) and exp.fault.scale == 0.1
    assert make_experiment([f"fault={NAME}"]).fault_cfg["scale"] == 0.01      # the class's default

    run = get_or_train(exp)
    assert run.meta["status"] == "ok" and run.meta["fault"] == NAME
    assert run.meta["hyperparameters"]["configured"]["clip_range"] == 0.2       # form overridden
    assert run.meta["hyperparameters"]["effective"]["clip_range"] == pytest.approx(0.02)
    assert len(run.metrics) == 3 and run.metrics["fault_active"].all()


@pytest.mark.parametrize("override, message", [
    ("fault.scale=2", "fault.scale=2 is out of range"),
    ("fault.scale=x", "fault.scale='x' must be a number"),
    ("+fault.bogus=1", f"unknown parameter fault.bogus for fault {NAME}; valid: onset, scale"),
    ("fault.bogus=1", "Could not override 'fault.bogus'"),
])
def test_its_overrides_are_validated(user_fault, override, message):
    with pytest.raises(ConfigError, match=message):
        make_experiment([f"fault={NAME}", override])


def test_it_is_a_choice_of_the_fault_group_until_unregistered(user_fault):
    with pytest.raises(ConfigError, match=f"unknown fault 'nope'; did you mean none\\? valid choices: .*{NAME}"):
        preflight(["fault=nope"])
    faults.unregister(NAME)
    assert NAME not in FAULTS
    with pytest.raises(ConfigError, match=f"unknown fault '{NAME}'"):
        preflight([f"fault={NAME}"])

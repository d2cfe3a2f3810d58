"""check_fault: a fault's conformance (registry rules, a short faulty/healthy pair on each backend that can
express it, its first expected signature), and a new fault written as users write one: its own module,
registered, nothing else touched."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from faults import FAULTS, unregister
from harness.testing import check_fault, registry_rules

NEW_FAULT = '''
"""The learner's rewards are halved (a reward scale applied twice)."""
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TransformReward
from gymnasium.wrappers.vector import TransformReward as VectorTransformReward

from faults.base import Fault, param


@dataclass
class HalvedReward(Fault):
    name = "halved_reward_tmp"
    description = "every reward the learner sees is multiplied by a factor below 1"
    provenance = "synthetic: a reward scale applied twice, as a check_fault example"
    algos = ("ppo",)
    expected = ("approx_kl_tiny",)
    factor: float = param(0.5, "the factor the rewards are multiplied by", gt=0.0, le=1.0)

    def wrap_env(self, env):
        """A vector env (native trainers) or each single env (SB3's make_vec_env)."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorTransformReward(env, lambda r: np.asarray(r) * self.factor if self.active else r)
        return TransformReward(env, lambda r: r * self.factor if self.active else r)
'''


@pytest.fixture
def new_fault(tmp_path):
    (tmp_path / "halved_reward_tmp.py").write_text(textwrap.dedent(NEW_FAULT))
    sys.path.insert(0, str(tmp_path))
    try:
        from faults import register

        module = importlib.import_module("halved_reward_tmp")
        yield register(module.HalvedReward)
    finally:
        unregister("halved_reward_tmp")
        sys.path.remove(str(tmp_path))
        sys.modules.pop("halved_reward_tmp", None)


def test_a_new_fault_in_its_own_module_passes_check_fault(new_fault, tmp_path):
    check = check_fault("halved_reward_tmp", results_dir=tmp_path / "store")
    # nothing declares where it runs: every backend whose trainer reaches its hook (wrap_env) runs it
    assert check.ok and list(check.pairs) == ["ppo/native", "ppo/sb3"], check.report()
    for pair in check.pairs.values():
        assert pair["status"] == "ok" and pair["twin_status"] == "ok" and pair["changed"] is True, check.report()
    pair = check.pairs["ppo/native"]
    assert pair["signature"] == new_fault.expected[0] and pair["signature_shows"].split(":")[0] in (
        "fired", "did not fire", "not readable"), check.report()
    assert "check_fault halved_reward_tmp: passes" in check.report()


def test_check_fault_names_every_rule_a_fault_breaks(new_fault):
    new_fault.provenance = ""
    new_fault.expected = ("no_such_signature",)
    broken = registry_rules(new_fault)
    assert any("provenance is empty" in b for b in broken)
    assert any("expected signatures that do not exist: no_such_signature" in b for b in broken)
    with pytest.raises(AssertionError, match="check_fault halved_reward_tmp: FAILS"):
        check_fault(new_fault)
    with pytest.raises(AssertionError, match="no fault named 'nope'"):
        check_fault("nope")


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_every_registered_fault_keeps_the_registry_rules(name):
    assert registry_rules(FAULTS[name]) == []


def test_where_a_fault_runs_is_derived_from_the_trainers_not_declared():
    """No fault declares its backends: a trainer that expresses it in some form runs it, unless the fault's
    refusal says the bug does not exist there."""
    from harness.agents.base import backends_of

    assert not [name for name, cls in FAULTS.items() if "backends" in vars(cls)]
    assert backends_of(FAULTS["envs_seeded_alike"]) == ("sb3",)            # refused natively: no per-copy seed
    assert backends_of(FAULTS["group_size_one"]) == ("native",)           # TRL refuses num_generations < 2
    assert backends_of(FAULTS["adv_std_no_floor"]) == ("native", "trl")   # variant zero_std runs on TRL
    assert backends_of(FAULTS["entropy_sign_flip"]) == ("native", "sb3")  # form misconfigured runs on SB3
    assert backends_of(FAULTS["zero_reward"]) == ("native", "sb3", "trl")

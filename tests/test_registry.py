"""Every fault is one module with provenance, validated parameters and a conf/fault YAML."""

from __future__ import annotations

from dataclasses import fields

import pytest
from omegaconf import OmegaConf

from faults import FAULTS
from harness.analysis.signatures import SIGNATURES
from harness.config import CONF_DIR, ConfigError


def test_core_faults_registered():
    assert {"none", "shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward",
            "excessive_lr"} <= set(FAULTS)


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_has_yaml_docs_and_known_signatures(name):
    cls = FAULTS[name]
    assert cls.__module__ == f"faults.{name}", "one fault per file, named after the fault"
    yaml = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "fault" / f"{name}.yaml"))
    assert yaml.pop("_target_") == f"{cls.__module__}.{cls.__qualname__}"
    defaults = {f.name: f.default for f in fields(cls)}
    assert yaml == defaults, "conf/fault YAML and the dataclass defaults disagree"
    assert cls.description and cls.provenance and cls.acts_on
    assert all(sig in SIGNATURES for sig in cls.expected)
    if name != "none":
        assert cls.expected, "a fault states its expected signature"


def test_yaml_files_match_registry():
    assert {p.stem for p in (CONF_DIR / "fault").glob("*.yaml")} == set(FAULTS)


@pytest.mark.parametrize("kwargs, message", [
    ({"onset": -1}, "fault.onset=-1 is out of range"),
    ({"onset": 1.5}, "must be an integer"),
    ({"clip_range": 0.0}, "fault.clip_range=0.0 is out of range: must be > 0"),
    ({"clip_range": "x"}, "must be a number"),
])
def test_parameters_are_validated(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FAULTS["tiny_clip"](**kwargs)

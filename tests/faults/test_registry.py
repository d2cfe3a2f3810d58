"""Every fault is one module with provenance and validated parameters; its config (Hydra's
``fault=<name>``) and where it acts (``acts_on``) are derived from its class; a bad parameter, or a
configuration a fault cannot exist in, ends in one line naming why, before anything is trained."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

import pytest
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import faults
from faults import FAULTS, Fault, param
from harness.agents.base import backends_of
from harness.analysis.signatures import SIGNATURES
from harness.config import CONF_DIR, ConfigError, locate
from harness.hooks import HOOK_SITES, Hooks, overridden
from harness.pipeline.assemble import fault_config
from harness.pipeline.compose import make_experiment
from tests.paths import ROOT


def test_core_faults_registered():
    assert {"none", "shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward",
            "excessive_lr"} <= set(FAULTS)
    assert list(FAULTS) == sorted(FAULTS)


def test_the_library_has_at_least_22_ppo_faults_14_of_them_on_sb3():
    library = ["truncation_as_termination", "autoreset_misuse", "gae_no_done_mask", "wrong_gamma", "adv_sign_flip",
               "whiten_tiny_batch", "value_bootstrap_stale", "policy_loss_sign_flip", "entropy_sign_flip",
               "no_zero_grad", "grad_clip_tiny", "lr_too_low", "target_kl_too_strict", "grad_accum_double_scaling",
               "lr_schedule_off_by_one", "vf_coef_too_large", "obs_norm_frozen", "reward_sign_flip",
               "reward_scale_wrong", "clipfrac_denominator_wrong", "metric_constant"]      # issue 13's
    ppo = [n for n, c in FAULTS.items() if "ppo" in c.algos and n != "none"]
    assert set(library) <= set(ppo) and len(ppo) >= 22 and len(FAULTS) - 1 >= 26
    assert sum("sb3" in backends_of(FAULTS[n]) for n in ppo) >= 14
    assert {FAULTS[n].kind for n in library} == {"training", "telemetry"}


def test_learning_rate_severities_span_what_reports_describe():
    """excessive_lr and lr_too_low: the dataset draws a few x to 100x, and the default sits near the
    reported case (ml-agents#1237 ran ~3x its default lr), not at the loud end (it was 100x: 1e-3 -> 0.1)."""
    import yaml

    space = yaml.safe_load((ROOT / "harness/conf/sweep/dataset.yaml").read_text())
    drawn = space["hydra"]["sweeper"]["space"]["faults"]
    for fault, default in (("excessive_lr", 3.0), ("lr_too_low", 10.0)):
        assert drawn[fault]["factor"] == ["loguniform", 3.0, 100.0], fault
        assert FAULTS[fault]().factor == default and FAULTS[fault].default_config()["factor"] == default


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_has_config_docs_and_known_signatures(name):
    cls = FAULTS[name]
    assert cls.__module__ == f"faults.{name}", "one fault per file, named after the fault"
    cfg = fault_config(name)
    assert locate(cfg.pop("_target_")) is cls
    assert cfg == {f.name: f.default for f in fields(cls)} and next(iter(cfg)) == "onset"
    stored = ConfigStore.instance().repo["fault"][f"{name}.yaml"]
    assert OmegaConf.to_container(stored.node) == fault_config(name), "fault=<name> composes the class's defaults"
    assert all(f.metadata.get("doc") for f in fields(cls)), "every parameter is made with param(default, doc)"
    assert cls.description and cls.provenance and cls.acts_on
    assert all(sig in SIGNATURES for sig in cls.expected)
    if name != "none":
        assert bool(cls.expected) != bool(cls.no_trace_expected), \
            "a fault states its expected signature, or why its reports expect none (no_trace_expected)"


def test_provenance_cites_reports_that_describe_the_bug():
    """Issue 24 (fault audit): a citation names its repository and describes the bug, a report from
    another field says it is a transplant, and a private source says it is not public."""
    import re

    for name, cls in FAULTS.items():   # no bare "issue 14": every report is owner/repo#N or repo#N
        assert not re.search(r"(?<![\w/#-])issue \d+", cls.provenance.replace("this project's issue", "")), name
    zero = FAULTS["zero_reward"].provenance
    assert "3857" not in zero and "trl#3452" in zero          # trl#3857's rewards are non-zero (uniform groups)
    assert "DanceGRPO#47" in FAULTS["tiny_clip"].provenance   # a clip range copied from DDPO's recipe
    assert FAULTS["no_zero_grad"].provenance.startswith("transplanted")
    assert "not public" in FAULTS["ratio_vs_reference"].provenance
    for name in ("grad_accum_double_scaling", "clipfrac_denominator_wrong"):    # transplants say so
        assert FAULTS[name].provenance.startswith("transplanted"), name
    assert "stand-in" in FAULTS["logprob_off_by_one"].provenance


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_acts_on_names_exactly_the_hooks_the_fault_overrides(name):
    cls = FAULTS[name]
    hooks = overridden(cls)
    if not hooks:
        assert cls.acts_on == "nothing"
        return
    named = []
    for part in cls.acts_on.split("; "):
        site, _, listed = part.partition(": ")
        for hook in listed.split(", "):
            assert HOOK_SITES[hook] == site, f"{hook} acts at {HOOK_SITES[hook]}, not {site}"
            named.append(hook)
    assert tuple(named) == hooks


def test_every_hook_has_a_site():
    hooks = {n for n, v in vars(Hooks).items() if callable(v) and not n.startswith("_")}
    assert set(HOOK_SITES) == hooks


def test_acts_on_is_not_written_by_hand():
    with pytest.raises(TypeError, match="computed from the hooks it overrides"):
        @dataclass
        class Handwritten(Fault):   # the class statement is what fails
            name = "handwritten"
            acts_on = "update-loop hook: loss"


def test_the_fault_group_is_the_registry():
    """The CLI's group listing and bad-name message read these options (no harness/conf/fault YAML)."""
    assert not (CONF_DIR / "fault").exists(), "a harness/conf/fault YAML would shadow the class's config"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        options = GlobalHydra.instance().config_loader().get_group_options("fault")
    GlobalHydra.instance().clear()
    assert sorted(options) == sorted(FAULTS)


def test_composed_fault_config_is_the_class_default_with_overrides():
    exp = make_experiment(["fault=group_misalignment", "fault.variant=mixed_groups", "algo=grpo"])
    assert exp.fault_cfg == {**fault_config("group_misalignment"), "variant": "mixed_groups"}
    assert list(make_experiment(["fault=tiny_clip"]).fault_cfg) == ["_target_", "onset", "clip_range", "form"]


@dataclass
class NoDefault(Fault):
    factor: float = field(default_factory=lambda: 0.5)
    name = "no_default_for_test"


@dataclass
class TupleDefault(Fault):
    sizes: tuple = param((1, 2), "not something a command line can hold")
    name = "tuple_default_for_test"


class NotADataclass(Fault):
    name = "not_a_dataclass_for_test"


@pytest.mark.parametrize("cls, message", [
    (int, "is not a faults.base.Fault subclass"),
    (NotADataclass, "must be a @dataclass"),
    (NoDefault, "every parameter needs a default"),
    (TupleDefault, "parameter defaults must be bool, int, float, str or None"),
    (FAULTS["tiny_clip"], None),                       # the same class again: a no-op
])
def test_register_checks_the_class(cls, message):
    if message is None:
        assert faults.register(cls) is cls and FAULTS[cls.name] is cls
        return
    with pytest.raises(TypeError, match=message):
        faults.register(cls)
    assert cls not in FAULTS.values()


def test_register_refuses_a_taken_name_and_a_nested_class():
    @dataclass
    class Nested(Fault):
        name = "nested_for_test"

    with pytest.raises(ValueError, match="top level"):
        faults.register(Nested)
    Nested.__qualname__, Nested.name = "Nested", "tiny_clip"
    with pytest.raises(ValueError, match="'tiny_clip' is taken by faults.tiny_clip.TinyClip"):
        faults.register(Nested)
    assert "nested_for_test" not in FAULTS


@pytest.mark.parametrize("kwargs, message", [
    ({"onset": -1}, "fault.onset=-1 is out of range"),
    ({"onset": 1.5}, "must be an integer"),
    ({"clip_range": 0.0}, "fault.clip_range=0.0 is out of range: must be > 0"),
    ({"clip_range": "x"}, "must be a number"),
])
def test_parameters_are_validated(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FAULTS["tiny_clip"](**kwargs)


@pytest.mark.parametrize("overrides, message", [
    (["fault=wrong_gamma", "fault.gamma=1.0"], "fault.gamma=1.0 is out of range: must be >= 0 and < 1"),
    (["fault=gae_no_done_mask", "fault.ignores=all"], "fault.ignores='all'; valid choices: carry, both"),
    (["fault=policy_loss_sign_flip", "fault.mistake=plus"], "fault.mistake='plus'; valid choices: missing_minus"),
    (["fault=entropy_sign_flip", "fault.ent_coef=0"], "fault.ent_coef=0 is out of range: must be > 0"),
    (["fault=entropy_sign_flip", "fault.form=overridden"], "fault.form='overridden'; valid choices: code bug"),
    (["fault=no_zero_grad", "fault.cleared=sometimes"], "valid choices: never, epoch, update"),
    (["fault=grad_clip_tiny", "fault.max_grad_norm=-1"], "fault.max_grad_norm=-1 is out of range: must be >= 0"),
    (["fault=lr_too_low", "fault.factor=0.5"], "fault.factor=0.5 is out of range: must be > 1"),
    (["fault=target_kl_too_strict", "fault.target_kl=0"], "fault.target_kl=0 is out of range: must be > 0"),
    (["fault=grad_accum_double_scaling", "fault.accum_steps=1"], "fault.accum_steps=1 is out of range: must be >= 2"),
    (["fault=grad_accum_double_scaling", "fault.accum_steps=2.5"], "fault.accum_steps=2.5 must be an integer"),
    (["fault=lr_schedule_off_by_one", "fault.lag=0"], "fault.lag=0 is out of range: must be >= 1"),
    (["fault=vf_coef_too_large", "fault.factor=abc"], "fault.factor='abc' must be a number"),
    (["fault=reward_scale_wrong", "fault.scale=0"], "fault.scale=0 is out of range: must be > 0"),
    (["fault=clipfrac_denominator_wrong", "fault.width=1"], "fault.width=1 is out of range: must be >= 2"),
    (["fault=wrong_gamma", "fault.discount=0.9"], "Could not override 'fault.discount'"),
    (["fault=grad_accum_double_scaling", "fault.accum_steps=64", "algo.n_minibatches=64"],
     "algo.grad_accum=64 exceeds the 32 samples of a minibatch"),
    # a configuration the bug cannot exist in
    (["fault=vf_clip_unscaled", "algo.clip_range_vf=0.5"], "needs a config without value clipping"),
    (["fault=reference_is_base_model", "fault.onset=3", "algo=grpo", "env=toyseq"], "acts where the run starts"),
    (["fault=envs_seeded_alike", "fault.onset=2", "backend=sb3"], "onset 0 only"),
    (["fault=reference_not_frozen"], "fault reference_not_frozen does not apply to algo=ppo"),
])
def test_bad_parameters_end_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        make_experiment(overrides)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_onset_beyond_the_run_is_refused_before_training(store_dir):
    """A fault that would never switch on is not trained and stored under the fault's name (issue 22)."""
    from tests.helpers import SHORT, train

    with pytest.raises(ConfigError, match="is beyond the run"):
        train(["fault=shared_policy", "fault.onset=1000", f"results_dir={store_dir}", *SHORT])


# ---- the counts and names the pages state (README.md, docs/*.md) --------------------------------------------

def _registry() -> dict[str, int]:
    faults = {n: c for n, c in FAULTS.items() if n != "none"}
    ppo = [n for n, c in faults.items() if "ppo" in c.algos]
    grpo = [n for n, c in faults.items() if "grpo" in c.algos]
    return {"faults": len(faults), "ppo": len(ppo), "sb3": sum("sb3" in backends_of(faults[n]) for n in ppo),
            "grpo": len(grpo), "trl": sum("trl" in backends_of(faults[n]) for n in grpo),
            "grpo_not_trl": sum("trl" not in backends_of(faults[n]) for n in grpo),
            **{f"form {form}": sum(c.form == form for c in faults.values())
               for form in ("misconfigured", "overridden", "code bug")},
            "also overridden": sum(c.form == "misconfigured" and "overridden" in c.forms() for c in faults.values()),
            "signatures": len(SIGNATURES)}


#: (page, a pattern whose groups are counts, what each group counts)
COUNTS = [
    ("README.md", r"the (\d+) faults, their forms", ["faults"]),
    ("docs/index.md", r"the (\d+) faults, their forms", ["faults"]),
    ("docs/faults.md", r"(\d+) faults \(`python -c", ["faults"]),
    ("docs/faults.md", r"(\d+) apply to PPO \((\d+) of them also run inside stable-baselines3's own PPO\), (\d+) to "
                       r"GRPO \((\d+) of them also run inside TRL", ["ppo", "sb3", "grpo", "trl"]),
    ("docs/faults.md", r"`misconfigured` \((\d+)\)", ["form misconfigured"]),
    ("docs/faults.md", r"`overridden` \((\d+)\)", ["form overridden"]),
    ("docs/faults.md", r"`code bug` \((\d+)\)", ["form code bug"]),
    ("docs/faults.md", r"seven misconfigured faults also take", []),
    ("docs/faults.md", r"(\d+) in\s+`harness.analysis.signatures.SIGNATURES`", ["signatures"]),
    ("docs/backends.md", r"(\d+) of the (\d+) PPO faults run on SB3", ["sb3", "ppo"]),
    ("docs/backends.md", r"(\d+) of the (\d+) GRPO faults run in TRL; the other (\d+)", ["trl", "grpo", "grpo_not_trl"]),
    ("docs/walkthrough.md", r"(\d+) of the (\d+) PPO faults run on SB3", ["sb3", "ppo"]),
    ("docs/walkthrough.md", r"(\d+) of the (\d+) GRPO faults run in TRL; the other (\d+)", ["trl", "grpo", "grpo_not_trl"]),
]


@pytest.mark.parametrize("page, pattern, counted", [
    pytest.param(page, pattern, counted, id=f"{page}:{'+'.join(counted) or 'seven'}")
    for page, pattern, counted in COUNTS])
def test_the_counts_a_page_states_are_the_registrys(page, pattern, counted):
    text = " ".join((ROOT / page).read_text().split())
    m = re.search(pattern, text)
    assert m, f"{page} no longer says {pattern!r}"
    registry = _registry()
    if not counted:                                      # "seven misconfigured faults also take fault.form=overridden"
        assert registry["also overridden"] == 7
    assert {name: int(n) for name, n in zip(counted, m.groups())} == {name: registry[name] for name in counted}


def test_the_faults_and_signatures_a_page_names_are_the_registrys():
    """docs/faults.md names the two telemetry faults, the five whose provenance is synthetic, the faults met in
    another form than their default, and signatures of harness.analysis.signatures."""
    faults = {n: c for n, c in FAULTS.items() if n != "none"}
    assert sorted(n for n, c in faults.items() if c.kind == "telemetry") == ["clipfrac_denominator_wrong", "metric_constant"]
    assert sorted(n for n, c in faults.items() if c.provenance.startswith("synthetic")) == [
        "adv_sign_flip", "obs_norm_frozen", "reference_not_frozen", "target_kl_too_strict", "vf_coef_too_large"]
    for name in ("entropy_sign_flip", "kl_gradient_biased"):
        assert faults[name].form == "code bug" and "misconfigured" in faults[name].forms(), name
    assert faults["vf_clip_unscaled"].form == "misconfigured" and "code bug" in faults["vf_clip_unscaled"].forms()
    text = (ROOT / "docs" / "faults.md").read_text().split("## Signatures", 1)[1]
    named = set(re.findall(r"`([a-z_0-9]+)`", text)) - {"harness"}
    assert named and named <= set(SIGNATURES), sorted(named - set(SIGNATURES))

"""The dataset sweep's sampling space (harness/conf/sweep/dataset.yaml): what the default space draws."""

from __future__ import annotations

import collections

import pytest
import yaml

from faults import FAULTS
from harness.agents.base import backends_of
from harness.config import ConfigError
from harness.pipeline.sample import Space, batch_of, estimated_cost
from tests.paths import ROOT

SPACE = yaml.safe_load((ROOT / "harness" / "conf" / "sweep" / "dataset.yaml").read_text())
SWEEPER = SPACE["hydra"]["sweeper"]


def updates_of(spec) -> int:
    return spec.env["total_timesteps"] // batch_of(spec.setup["algo_name"], spec.algo, spec.setup)[1]


def possible(dist) -> int:
    """Distinct values a distribution can give, up to 10 (issue 12: >= 10 per sampled hyperparameter
    where the range has them; a switch has 2, num_iterations 1-4 has 4)."""
    kind, *args = dist
    if kind in ("int", "logint"):
        return min(10, args[1] - args[0] + 1)
    if kind == "choice":
        return len(set(args[0]))
    return 1 if kind == "const" else 10 if kind in ("uniform", "loguniform") else 2


@pytest.fixture(scope="module")
def drawn():
    return Space(SWEEPER["space"]).sample(SWEEPER["size"], SWEEPER["seed"], updates_of)


def test_default_space_is_large_diverse_and_like_real_use(drawn):
    """Issue 21: >= 40 diverse runs per fault, a healthy share, framework defaults and tuned anchors on
    every PPO env, a share of runs hundreds of updates long, GRPO with warmup / decay schedules, several
    tasks, model sizes and completion lengths; its cost stated by the cost model."""
    space = SWEEPER["space"]
    assert len(drawn) == SWEEPER["size"]
    counts = collections.Counter(s.fault for s in drawn)
    assert counts["none"] >= 0.2 * len(drawn)
    # >= 40 runs of every fault for each algorithm it applies to (a fault of PPO and GRPO is not split)
    per_algo = collections.Counter((s.setup["algo_name"], s.fault) for s in drawn if s.fault != "none")
    assert min(per_algo.values()) >= 40, sorted(per_algo.items(), key=lambda kv: kv[1])[:5]
    assert per_algo["grpo", "shared_policy"] >= 40 and per_algo["ppo", "shared_policy"] >= 40
    assert sum(updates_of(s) >= 100 for s in drawn) >= 0.05 * len(drawn)
    grpo = [s for s in drawn if s.setup["algo_name"] == "grpo"]
    assert {s.algo.get("lr_decay") for s in grpo} >= {"constant", "linear", "cosine"}
    assert any(s.algo.get("warmup_updates", 0) > 0 for s in grpo)
    assert {s.env.get("kwargs", {}).get("task") for s in grpo} >= {"copy", "reverse", "sort"}
    assert len({(s.algo.get("n_layers"), s.algo.get("d_model")) for s in grpo}) >= 3
    assert max(s.algo.get("max_new_tokens", 10) for s in grpo) > 10
    ppo_envs = {s.setup["env"] for s in drawn if s.setup["algo_name"] == "ppo"}
    assert {"cartpole", "acrobot", "lunarlander", "pendulum"} <= ppo_envs
    for algo in ("ppo", "grpo"):
        for key, dist in space["hyperparameters"][algo].items():
            values = {s.algo[key] for s in drawn if s.setup["algo_name"] == algo}
            assert len(values) >= possible(dist), (algo, key, values)
    for s in drawn:       # every draw fits its setup's cost cap (the default, or the setup's own)
        cap = s.setup.get("max_cost", space["max_cost"])
        assert estimated_cost(s.setup, s.algo, updates_of(s)) <= cap, s
    cost = sum(estimated_cost(s.setup, s.algo, updates_of(s)) for s in drawn)
    assert cost / 2 / 3600 < 5       # hours on 2 cores, by the cost model (benchmarks/dataset.py measures it)


def test_framework_default_setups_keep_their_hyperparameters_and_draw_faults(drawn):
    presets = [s for s in drawn if s.setup.get("hyperparameters", {}).get("n_steps") == 2048]
    assert presets, "SB3's defaults are drawn"
    for s in presets:
        assert s.algo["n_minibatches"] == 32 and s.algo["n_epochs"] == 10 and s.algo["lr"] == 3e-4
    assert collections.Counter(s.fault == "none" for s in presets)[False] >= 1


def test_a_fault_setting_is_drawn_without_its_fault(drawn):
    """The setting a fault's bug lives in (gradient accumulation, bf16 sampler, top-p with sampler
    log-probs, ...) is drawn in healthy runs and in runs of other faults too, so that a detector
    reading the configuration cannot name the fault from its setting alone (on the old sampler every
    run in such a setting had that fault)."""
    def carries(spec, setting):
        return all(spec.algo.get(k) == v for k, v in setting.items())

    checked = 0
    for name, cls in FAULTS.items():
        own = [s for s in drawn if s.fault == name]
        settings = {tuple(sorted(cls(**s.fault_params).setting().items())) for s in own}
        settings.discard(())
        if not settings or len(settings) > 20:     # none, or a continuous severity (ent_coef)
            continue
        checked += 1
        algo = own[0].setup["algo_name"]
        others = [s for s in drawn if s.fault != name and s.setup["algo_name"] == algo
                  and any(carries(s, dict(st)) for st in settings)]
        healthy = [s for s in others if s.fault == "none"]
        with_setting = [s for s in own if cls(**s.fault_params).setting()]
        assert len(healthy) >= 8, (name, len(healthy))
        assert len(with_setting) / (len(with_setting) + len(others)) <= 0.6, (name, len(with_setting), len(others))
    assert checked >= 8


def test_a_setup_may_raise_its_own_cost_cap():
    base = {"setups": [{"algo": "ppo", "algo_name": "ppo", "env": "cartpole", "backend": "native",
                        "hyperparameters": {"n_steps": 2048, "num_envs": 1, "n_epochs": 10, "n_minibatches": 32}}],
            "max_cost": 5, "updates": ["int", 15, 20], "only": ["tiny_clip"]}
    with pytest.raises(ConfigError, match="fits max_cost=5"):
        Space(base).sample(1, 0, lambda spec: 20)
    base["setups"][0]["max_cost"] = 30
    (spec,) = Space(base).sample(1, 0, lambda spec: 20)
    assert estimated_cost(spec.setup, spec.algo, updates_of(spec)) > 5


def test_bad_distribution_is_one_line():
    bad = {"setups": [{"algo": "ppo", "algo_name": "ppo", "env": "cartpole", "backend": "native"}],
           "hyperparameters": {"ppo": {"lr": ["gaussian", 0, 1]}}}
    with pytest.raises(ConfigError, match="unknown distribution 'gaussian'"):
        Space(bad)


def test_a_sample_targeted_at_some_faults_draws_only_setups_they_apply_to():
    """``only`` (a supplement of runs of some faults): setups none of them applies to, and healthy-only
    controls, are not drawn; a fault no setup can run is one line."""
    space = {**SWEEPER["space"], "only": ["kl_penalty_sign_flip"]}
    specs = Space(space).sample(60, 2, updates_of)
    assert {s.setup["algo_name"] for s in specs} == {"grpo"}
    assert not any(s.setup.get("healthy_only") for s in specs)
    faults = collections.Counter(s.fault for s in specs)
    assert set(faults) == {"kl_penalty_sign_flip", "none"} and faults["kl_penalty_sign_flip"] >= 40
    forms = collections.Counter(s.fault_params["form"] for s in specs if s.fault != "none")
    assert forms["misconfigured"] >= 8 and forms["code bug"] >= 20
    grpo_only = {"setups": [s for s in SWEEPER["space"]["setups"] if s["algo_name"] == "grpo"],
                 "only": ["gae_no_done_mask"]}
    with pytest.raises(ConfigError, match="no setup of the space can run these faults"):
        Space(grpo_only).sample(1, 0, updates_of)


def test_a_sample_targeted_at_named_setups_draws_only_them():
    space = {**SWEEPER["space"], "setups_only": ["cleanrl_cartpole", "cleanrl_acrobot"]}
    specs = Space(space).sample(40, 3, updates_of)
    assert {s.setup["name"] for s in specs} == {"cleanrl_cartpole", "cleanrl_acrobot"}
    assert all(s.algo["n_steps"] == 128 and s.algo["num_envs"] == 4 for s in specs)      # CleanRL's ppo.py regime
    assert len({s.fault for s in specs}) > 10
    with pytest.raises(ConfigError, match="unknown setup 'cleanrl' in hydra.sweeper.space.setups_only; valid: "):
        Space({**SWEEPER["space"], "setups_only": ["cleanrl"]})
    names = [s["name"] for s in SWEEPER["space"]["setups"]]
    assert len(names) == len(set(names)) == len(SWEEPER["space"]["setups"])        # every setup named, once


def test_a_fault_no_drawn_setup_can_run_does_not_starve_the_others():
    """A fault every drawn setup refuses (vf_clip_unscaled needs a config without value clipping; CleanRL's
    setups clip at 0.2) is left out of the least-drawn choice once each refused it: before, it stayed the
    least drawn, every draw of it was refused, and every later run came out healthy (113 of 140)."""
    def refusing(spec) -> int:          # what composing the run does (harness/faults' setting checks)
        if spec.fault == "vf_clip_unscaled" and spec.algo.get("clip_range_vf") is not None:
            raise ConfigError("fault vf_clip_unscaled needs a config without value clipping")
        return updates_of(spec)

    space = {**SWEEPER["space"], "setups_only": ["cleanrl_cartpole", "cleanrl_acrobot", "cleanrl_lunarlander",
                                                 "cleanrl_continuous_invertedpendulum"]}
    specs = Space(space).sample(140, 5, refusing)
    faults = collections.Counter(s.fault for s in specs)
    assert faults["vf_clip_unscaled"] == 0 and faults["none"] <= 0.35 * len(specs)
    drawable = {f for f in FAULTS if f not in ("none", "vf_clip_unscaled") and "ppo" in FAULTS[f].algos
                and "native" in backends_of(FAULTS[f])}
    assert all(faults[f] >= 3 for f in drawable), {f: faults[f] for f in drawable if faults[f] < 3}


@pytest.mark.slow
def test_a_drawn_run_s_command_line_composes_to_the_run_the_sweep_trains(drawn):
    """``Spec.overrides()`` is the command line that trains one drawn run alone: composed as ``python -m
    harness`` composes it, it is the run the sweep trains (the same run id). One draw per setup and
    fault form, which includes GRPO's nested reward weights and string settings. (Slow: about 60 Hydra
    compositions, 0.2 s each.)"""
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.sample import SampledBases, specialise
    from harness.store import run_id

    base = SampledBases(lambda s: make_experiment([f"algo={s['algo']}", f"env={s['env']}", f"backend={s['backend']}",
                                                   "fault=none", "twin=false"]))
    picked: dict[tuple, object] = {}
    for spec in drawn:
        where = (spec.setup["algo"], spec.setup["env"], spec.setup["backend"], spec.fault_params.get("form"))
        picked.setdefault(where, spec)
    nested = [s for s in picked.values() if any(isinstance(v, dict) for v in s.env.get("kwargs", {}).values())]
    assert nested and len(picked) >= 20
    for spec in picked.values():
        try:
            expected = specialise(base(spec), spec)
        except ConfigError:
            continue
        assert run_id(make_experiment([*spec.overrides(), "twin=false"]).key()) == run_id(expected.key()), spec.overrides()


@pytest.mark.parametrize("value", ["code bug", "copy", "1e-3", "true", "null", "it's", "a\\b", "ends\\", "x,y", "[0]",
                                   1.5e-7, 3, True, None, {"format": 0.3, "correct": 0.65}, ["a b", 2]])
def test_an_override_value_reads_back_as_itself(value):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from harness.pipeline.compose import override_value

    assert OverridesParser.create().parse_override(f"k={override_value(value)}").value() == value


def test_every_diverse_run_records_its_draw(tiny):
    """docs/datasets.md: every draw is recorded in the run's meta.json (``sampled``): the setup, the fault with
    its drawn severity and form, the onset, the seed, the length and the hyperparameters, which a healthy run
    is configured with as drawn (the checked-in ``diverse`` fixture: a dataset sweep, as a user runs it)."""
    import json

    metas = [json.loads(p.read_text()) for p in sorted((tiny("diverse") / "runs").glob("*/meta.json"))]
    drawn = [m for m in metas if m.get("sampled")]
    assert len(drawn) == 60 and all(m["command"].endswith("tests/make_fixtures.py") for m in metas if m not in drawn)
    for m in drawn:
        s = m["sampled"]
        assert (s["fault"], s["seed"], s["env"]["total_timesteps"]) == (m["fault"], m["seed"], m["total_timesteps"])
        assert (s["setup"]["algo_name"], s["setup"]["env"], s["setup"]["backend"]) == (m["algo"], m["env"], m["backend"])
        if m["fault"] == "none":
            configured = m["hyperparameters"]["configured"]
            assert {k: configured[k] for k in s["algo"]} == s["algo"], m["run_id"]
        else:
            assert (s["fault_params"], s["onset"]) == (m["fault_params"], m["onset_update"]), m["run_id"]


def test_half_the_faulty_draws_switch_on_in_the_first_third(drawn):
    """docs/datasets.md: an onset, 0 or mid-run in the first third, for half of the faulty runs (a fault that exists
    at one onset kind only is drawn at that kind: a resume's bug mid-run, a bug of how a run starts at 0)."""
    faulty = [s for s in drawn if s.fault != "none"]
    both = [s for s in faulty if set(FAULTS[s.fault].onset_kinds) == {"0", "mid"}]
    assert 0.45 < sum(s.onset > 0 for s in both) / len(both) < 0.55
    assert all(0 < s.onset <= updates_of(s) / 3 for s in faulty if s.onset > 0)
    for s in faulty:
        kinds = FAULTS[s.fault].onset_kinds
        assert ("mid" if s.onset > 0 else "0") in kinds, (s.fault, s.onset)

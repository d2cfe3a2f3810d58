"""The command line as a user runs it: bad overrides (with "did you mean"), the run command, multirun, every
command's --help, and the old names of renamed keys."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from faults import FAULTS
from harness.config import CONF_DIR, ConfigError
from harness.metrics import COLUMNS
from harness.pipeline.compose import make_experiment, preflight
from harness.store import RunStore


def harness(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("args, expected", [
    (["fault=nope"], "unknown fault 'nope'; did you mean none? valid choices: " + ", ".join(sorted(FAULTS))),
    (["fault.onset=-1"], "fault.onset=-1 is out of range: must be >= 0"),
    (["fault=tiny_clip", "fault.clip_range=0"], "fault.clip_range=0 is out of range: must be > 0"),
    (["algo.clip_range=-0.1"], "algo.clip_range=-0.1 is out of range: must be > 0"),
    (["env=mars"], "unknown env 'mars'; valid choices: acrobot, cartpole, highdim, hopper, invertedpendulum, lunarlander, pendulum, toyseq, walker2d"),
    (["algo=grpo", "env=toyseq", "model=gpt"], "unknown model 'gpt'; valid choices: mlp, transformer"),
    (["algo=sarsa"], "unknown algo 'sarsa'; valid choices:"),
    (["seed=abc"], "could not be converted to Integer"),
    (["fault=shared_policy", "fault.factor=3"], "Could not override 'fault.factor': no such key; valid keys: onset"),
    (["fault=shared_polcy"], "unknown fault 'shared_polcy'; did you mean shared_policy? valid choices: adv_sign_flip"),
    (["seeed=1"], "Could not override 'seeed': no such key; did you mean seed? valid keys: algo, backend"),
    (["-m", "fault=none,nope", "seed=0,1"], "unknown fault 'nope'"),
    (["-m", "fault=tiny_clip", "fault.clip_range=0.01,-1"], "fault.clip_range=-1 is out of range"),
    (["fault=none,shared_policy"], "add -m"),
    (["algo=grpo", "env=cartpole"], "algo=grpo generates token sequences or high-dimensional samples: it needs env=toyseq or "
                    "env=highdim, not env=cartpole"),
    (["fault=group_size_one"], "fault group_size_one does not apply to algo=ppo; it applies to: grpo"),
    (["algo=grpo", "env=toyseq", "algo.scale=rank"], "algo.scale='rank'; valid choices: group, batch, none"),
    (["env=toyseq", "env.kwargs.task=chess"], "task='chess'; valid choices: copy, reverse, sort"),
])
def test_bad_override_is_one_line_and_touches_nothing(tmp_path, args, expected):
    out = harness(*args, f"results_dir={tmp_path / 'r'}")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    assert expected in lines[0]
    assert "Traceback" not in out.stderr + out.stdout
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("args, expected", [
    (["fault=nope"], "unknown fault 'nope'; did you mean none? valid choices: " + ", ".join(sorted(FAULTS))),
    (["algo.clip_range=-0.1"], "algo.clip_range=-0.1 is out of range: must be > 0"),
])
def test_python_api_gives_the_same_one_line_errors(args, expected):
    with pytest.raises(ConfigError) as info:
        make_experiment(args)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_run_command_trains_fault_and_twin_then_reuses(tmp_path):
    args = ["fault=shared_policy", f"results_dir={tmp_path}", "env.total_timesteps=8192", "algo.n_steps=64"]
    out = harness(*args)
    assert out.returncode == 0, out.stderr
    assert "shared_policy" in out.stdout and "none (twin)" in out.stdout
    assert "ratio_dev_max" in out.stdout and "ratio_pinned" in out.stdout
    store = RunStore(tmp_path)
    metas = {m["fault"]: m for m in store.iter_metas()}
    assert set(metas) == {"shared_policy", "none"}
    faulty = store.load_metrics(metas["shared_policy"]["run_id"])
    twin = store.load_metrics(metas["none"]["run_id"])
    assert tuple(faulty.columns) == tuple(twin.columns) == COLUMNS
    assert (faulty.loc[faulty["fault_active"], "ratio_dev_max"] == 0).all()
    assert (twin["ratio_dev_max"] > 0).all()

    again = harness(*args)
    assert again.returncode == 0 and again.stdout.count("reused") == 0  # table only on stdout
    assert again.stderr.count("reused") == 2
    pd.testing.assert_frame_equal(store.load_metrics(metas["shared_policy"]["run_id"]), faulty)


def test_twin_false_skips_the_twin(tmp_path):
    out = harness("fault=zero_reward", "twin=false", f"results_dir={tmp_path}",
                  "env.total_timesteps=4096", "algo.n_steps=64")
    assert out.returncode == 0, out.stderr
    assert [m["fault"] for m in RunStore(tmp_path).iter_metas()] == ["zero_reward"]


def test_multirun_sweeps_faults_and_seeds(tmp_path):
    out = harness("-m", "fault=none,tiny_clip", "seed=0,1", "twin=false", f"results_dir={tmp_path}",
                  "env.total_timesteps=4096", "algo.n_steps=64")
    assert out.returncode == 0, out.stderr
    runs = sorted((m["fault"], m["seed"]) for m in RunStore(tmp_path).iter_metas())
    assert runs == [("none", 0), ("none", 1), ("tiny_clip", 0), ("tiny_clip", 1)]


def test_grpo_zero_reward_command(tmp_path):
    out = harness("algo=grpo", "env=toyseq", "fault=zero_reward", f"results_dir={tmp_path}",
                  "env.total_timesteps=30720")           # 24 updates of 128 completions x 10 tokens
    assert out.returncode == 0, out.stderr
    assert "frac_reward_zero_std" in out.stdout and "groups_uniform" in out.stdout
    store = RunStore(tmp_path)
    metas = {m["fault"]: m for m in store.iter_metas()}
    faulty = store.load_metrics(metas["zero_reward"]["run_id"])
    active = faulty[faulty["fault_active"]]
    assert len(active) == 24
    assert (active["frac_reward_zero_std"] == 1).all()
    assert (active[["adv_mean", "adv_std", "policy_loss"]] == 0).all().all()
    twin = store.load_metrics(metas["none"]["run_id"])["reward_mean"]
    assert twin.iloc[-10:].mean() > twin.iloc[:10].mean() + 0.05


def test_grpo_defaults_to_the_token_task_unless_the_command_line_picks_an_env():
    from harness.pipeline.compose import with_default_env

    assert with_default_env(["algo=grpo", "fault=zero_reward"]) == ["env=toyseq", "algo=grpo", "fault=zero_reward"]
    assert with_default_env(["algo=grpo_single_pass"])[0] == "env=toyseq"
    assert with_default_env(["algo=grpo", "env=highdim"]) == ["algo=grpo", "env=highdim"]
    assert with_default_env(["algo=ppo"]) == ["algo=ppo"] and with_default_env([]) == []
    assert with_default_env(["-m", "algo=grpo,ppo"]) == ["-m", "algo=grpo,ppo"]    # a sweep over algos: untouched


def test_catalogue_switches_are_plain_keys_on_the_command_line(tmp_path):
    from harness.catalogue.settings import CatalogueSettings
    from harness.pipeline.compose import preflight

    (tmp_path / "runs").mkdir()
    preflight([f"results_dir={tmp_path}", "fit_model=false", "views=false", "plots=false"], "catalogue",
              CatalogueSettings.from_cfg)


# ---- did you mean --------------------------------------------------------------------------------

def _no_check(cfg) -> None:
    return None


@pytest.mark.parametrize("argv, config, expected", [
    (["fault=shared_polcy"], "config", "unknown fault 'shared_polcy'; did you mean shared_policy? valid choices: "),
    (["algo=ppo_smal_lr"], "config", "unknown algo 'ppo_smal_lr'; did you mean ppo_small_lr? valid choices: grpo,"),
    (["env=cartpol"], "config", "unknown env 'cartpol'; did you mean cartpole? valid choices: acrobot, cartpole,"),
    (["backend=sb4"], "config", "unknown backend 'sb4'; did you mean sb3? valid choices: native, sb3, trl"),
    (["log=x", "profile=cleanrll"], "diagnose", "unknown profile 'cleanrll'; did you mean cleanrl? valid choices: auto,"),
    (["run=all", "out=o", "profile=tlr"], "export", "unknown profile 'tlr'; did you mean trl? valid choices:"),
    (["detector=fokl"], "evaluate", "unknown detector 'fokl'; did you mean folk? valid choices: config_aware, folk, learned"),
    (["seeed=1"], "config", "Could not override 'seeed': no such key; did you mean seed? valid keys: "),
    (["algo.clip_rnge=0.1"], "config", "Could not override 'algo.clip_rnge': no such key; did you mean algo.clip_range? valid keys: anneal_clip, anneal_lr,"),
    (["env.total_timestep=5"], "config", "Could not override 'env.total_timestep': no such key; did you mean env.total_timesteps?"),
    (["fault=shared_policy", "fault.onsett=3"], "config", "Could not override 'fault.onsett': no such key; did you mean fault.onset? valid keys: onset"),
    (["-m", "seed=0,1", "fault.onsetx=1,2"], "config", "Could not override 'fault.onsetx': no such key; did you mean fault.onset?"),
    (["resuls_dir=x"], "evaluate", "Could not override 'resuls_dir': no such key; did you mean results_dir? valid keys: dataset, detector,"),
    (["log=x", "outptu=json"], "diagnose", "Could not override 'outptu': no such key; did you mean output? valid keys:"),
    (["log=x", "hp.lr=3e-4"], "diagnose", "Could not override 'hp.lr': hp has no keys; add one with +hp.lr=VALUE"),
])
def test_a_misspelled_name_gets_did_you_mean_and_the_valid_choices(argv, config, expected):
    with pytest.raises(ConfigError) as info:
        preflight(argv, config, _no_check)
    assert expected in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_did_you_mean_in_the_python_api_and_the_library():
    from faults import build_fault
    from harness.config import backend_config
    from harness.logs.profiles import load_profile

    with pytest.raises(ConfigError, match=r"unknown parameter fault.clip_rang for fault tiny_clip; did you mean "
                                          r"fault.clip_range\? valid: clip_range, form, onset"):
        make_experiment(["fault=tiny_clip", "+fault.clip_rang=0.1"])
    with pytest.raises(ConfigError, match=r"did you mean fault.onset\?"):
        build_fault({"_target_": "faults.tiny_clip.TinyClip", "onsett": 1})
    with pytest.raises(ConfigError, match=r"unknown key algo.lrr; did you mean algo.lr\? valid keys: anneal_clip, anneal_lr"):
        make_experiment(["+algo.lrr=0.1"])
    with pytest.raises(ConfigError, match=r"unknown profile 'sb33'; did you mean sb3\? valid choices: auto, canonical"):
        load_profile("sb33")
    with pytest.raises(ConfigError, match=r"unknown backend 'natve'; did you mean native\? valid choices: native, sb3"):
        backend_config("natve")
    with pytest.raises(ConfigError, match=r"unknown fault 'xyz'; valid choices: adv_sign_flip"):   # nothing close
        make_experiment(["fault=xyz"])


# ---- --help --------------------------------------------------------------------------------------

#: command module, config name, the groups it uses (and lists), groups of other commands it must not list
HELP = {
    "harness": ("config", ["algo", "env", "fault", "backend", "model"], ["detector:", "profile:", "schema"]),
    "harness.diagnose": ("diagnose", ["profile"], ["fault:", "algo:    ", "detector:", "sweep", "schema"]),
    "harness.evaluate": ("evaluate", ["detector"], ["fault:", "profile:", "sweep", "schema"]),
    "harness.export": ("export", ["profile"], ["fault:", "detector:", "sweep", "schema"]),
    "harness.catalogue": ("catalogue", [], ["fault:", "profile:", "detector:", "sweep:", "schema"]),
}
#: keys a command reads but a user does not set (the dataset sweep's batch file)
INTERNAL = {"batch"}


def _composed(config_name: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name)


@pytest.mark.parametrize("module", sorted(HELP))
def test_help_says_what_the_command_does_its_keys_and_only_its_groups(module):
    config_name, groups, foreign = HELP[module]
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    cfg = _composed(config_name)
    keys = [k for k in cfg if k not in groups and k not in INTERNAL]
    shown = [k for k in keys if f"{k}=" in text or f"+{k}.KEY=VALUE" in text]   # a free mapping: +hp.KEY=VALUE
    assert keys and shown == keys, sorted(set(keys) - set(shown))
    for group in groups:
        assert f"  {group}:" in text, group
    for other in foreign:
        assert not re.search(rf"(^|\s){re.escape(other)}", text), other     # not inside a word ("default:")
    assert "Examples:" in text and "== Keys" in text
    assert "rlfh" in text.splitlines()[0]                     # what it does, under the name it is installed as


# ---- old names of renamed keys ---------------------------------------------------------------------

def test_diagnose_old_names_set_the_new_keys_and_note_themselves():
    from harness.commands.diagnose import model_file, settle

    cfg = _composed("diagnose")
    assert (cfg.select, cfg.output, cfg.results_dir, cfg.get("catalogue")) == (None, "text", "results", None)
    assert settle(cfg) == []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        old = compose("diagnose", ["log=x", "run=b", "format=json", "catalogue=/somewhere/catalogue"])
    notes = settle(old)
    assert (old.select, old.output) == ("b", "json")
    assert model_file(old) == Path("/somewhere/catalogue/model/diagnosis.joblib")
    assert [n.split(" is now ")[0] for n in notes] == ["note: run=", "note: format=", "note: catalogue="]
    assert all("\n" not in n for n in notes)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        both = compose("diagnose", ["log=x", "run=b", "select=c"])
    with pytest.raises(ConfigError, match="run= is the old name of select="):
        settle(both)


def test_diagnose_command_prints_a_note_per_old_name(tmp_path):
    log = Path(__file__).parent / "data" / "sb3" / "progress.csv"
    out = subprocess.run([sys.executable, "-m", "harness.diagnose", f"log={log}", "run=x", "format=json",
                          f"catalogue={tmp_path}"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert lines[:3] == ["note: run= is now select= (the old name still works)",
                         "note: format= is now output= (the old name still works)",
                         "note: catalogue= is now results_dir= (the model is read from results_dir/catalogue/model/; "
                         "catalogue=DIR still works)"], out.stderr
    # the reader's words follow this command's vocabulary: select=, not run=
    assert lines[3:] == [f"error: select=x chooses a run inside a directory; log={log} is a file"]
    assert out.returncode == 2


# ---- a bare path is the log ----------------------------------------------------------------------

def test_a_bare_path_is_the_log_and_a_bad_one_is_one_line(tmp_path):
    from harness.commands.app import with_positional

    log = Path(__file__).parent / "data" / "sb3" / "progress.csv"
    assert with_positional([str(log), "output=json"], "log") == [f"log={log}", "output=json"]
    assert with_positional(["--cfg", "job", f"log={log}"], "log") == ["--cfg", "job", f"log={log}"]
    assert with_positional(["output=json"], "log") == ["output=json"]
    with pytest.raises(ConfigError, match="one log at a time"):
        with_positional([str(log), f"log={log}"], "log")
    with pytest.raises(ConfigError, match="no such file or directory"):
        with_positional([str(tmp_path / "missing.csv")], "log")
    out = subprocess.run([sys.executable, "-m", "harness.diagnose", str(log), "output=json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["log"] == str(log)
    bad = subprocess.run([sys.executable, "-m", "harness.watch", str(tmp_path / "missing.csv")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing.csv'}: no such file or directory "
                                               "(the log to read: log=PATH)"]

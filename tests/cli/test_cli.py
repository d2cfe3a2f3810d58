"""The command line as a user runs it: bad overrides (with "did you mean"), the run command, multirun, every
command's --help, and the old names of renamed keys.

The commands run in-process (tests.commands.run: ``main(argv)``, exit code and output captured);
``python -m harness.X`` is checked to reach the same ``main`` (runpy, as ``-m`` runs a module), and the
installed wheel runs every command from a fresh process in tests/cli/test_package.py (slow tier).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import runpy
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from faults import FAULTS
from harness.config import CONF_DIR, ConfigError
from harness.metrics import COLUMNS
from harness.pipeline.compose import make_experiment, preflight
from harness.pipeline.train import healthy_twin
from harness.store import RunStore, run_id
from tests.commands import COMMANDS, Ran, run
from tests.paths import DATA, TESTS

#: 3 updates of 4 envs x 32 steps: the shortest run the run command accepts with room for a fault's onset
TINY = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384"]


def harness(*args: str, cwd=None) -> Ran:
    return run("harness", *args, cwd=cwd)


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
    args = ["fault=shared_policy", f"results_dir={tmp_path}", "env.total_timesteps=2048", "algo.n_steps=64"]
    out = harness(*args)                                   # 2 updates of 16 envs x 64 steps, and the twin's
    assert out.returncode == 0, out.stderr
    assert re.search(r"shared_policy .* 2/2 updates", out.stderr) and re.search(r"none \(healthy twin\) .* 2/2 updates",
                                                                              out.stderr)     # progress, as it trains
    assert "shared_policy" in out.stdout and "none (twin)" in out.stdout
    assert "ratio_dev_max" in out.stdout and "ratio_pinned" in out.stdout
    store = RunStore(tmp_path)
    metas = {m["fault"]: m for m in store.iter_metas()}
    assert set(metas) == {"shared_policy", "none"}
    faulty = store.load_metrics(metas["shared_policy"]["run_id"])
    twin = store.load_metrics(metas["none"]["run_id"])
    assert tuple(faulty.columns) == tuple(twin.columns) == COLUMNS
    assert faulty["fault_active"].any()
    assert (faulty.loc[faulty["fault_active"], "ratio_dev_max"] == 0).all()
    assert (twin["ratio_dev_max"] > 0).all()

    again = harness(*args)
    assert again.returncode == 0 and again.stdout.count("reused") == 0  # table only on stdout
    assert again.stderr.count("reused") == 2
    pd.testing.assert_frame_equal(store.load_metrics(metas["shared_policy"]["run_id"]), faulty)


def test_multirun_sweeps_faults_and_seeds_and_twin_false_skips_the_twin(tmp_path):
    out = harness("-m", "fault=tiny_clip,zero_reward", "seed=0,1", "twin=false", f"results_dir={tmp_path}", *TINY)
    assert out.returncode == 0, out.stderr
    runs = sorted((m["fault"], m["seed"]) for m in RunStore(tmp_path).iter_metas())
    assert runs == [("tiny_clip", 0), ("tiny_clip", 1), ("zero_reward", 0), ("zero_reward", 1)]    # no twin


def test_grpo_zero_reward_command(store_dir):
    """The GRPO command end to end: fault and twin trained (from the session's shared warm-up checkpoint),
    the table in GRPO's metrics, the fault's mechanics in every active update. That the healthy twin
    learns is tests/agents/test_grpo.py::test_healthy_grpo_learns_the_default_task (slow tier)."""
    args = ["algo=grpo", "env=toyseq", "fault=zero_reward", "env.total_timesteps=3840"]   # 3 updates of 128 x 10 tokens
    out = harness(*args, f"results_dir={store_dir}")
    assert out.returncode == 0, out.stderr
    assert "frac_reward_zero_std" in out.stdout and "groups_uniform" in out.stdout
    store = RunStore(store_dir)
    exp = make_experiment([*args, f"results_dir={store_dir}"])
    faulty = store.load_metrics(run_id(exp.key()))
    active = faulty[faulty["fault_active"]]
    assert len(active) == 3
    assert (active["frac_reward_zero_std"] == 1).all()
    assert (active[["adv_mean", "adv_std", "policy_loss"]] == 0).all().all()
    twin = store.load_metrics(run_id(healthy_twin(exp).key()))
    assert (twin["frac_reward_zero_std"] < 1).all() and (twin["adv_std"] > 0).all()


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


#: Hydra renders --help by looking up every config group's options, deep-copying its config repository each
#: time: about 2.5 CPU-s a command. The fast tier reads the run command's; the slow tier every other's.
HELP_CASES = [m if m == "harness" else pytest.param(m, marks=pytest.mark.slow) for m in sorted(HELP)]


@pytest.mark.parametrize("module", HELP_CASES)
def test_help_says_what_the_command_does_its_keys_and_only_its_groups(module):
    config_name, groups, foreign = HELP[module]
    out = run(module, "--help", cwd=TESTS)
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
    log = DATA / "sb3" / "progress.csv"
    out = run("harness.diagnose", f"log={log}", "run=x", "format=json", f"catalogue={tmp_path}", cwd=tmp_path)
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

    log = DATA / "sb3" / "progress.csv"
    assert with_positional([str(log), "output=json"], "log") == [f"log={log}", "output=json"]
    assert with_positional(["--cfg", "job", f"log={log}"], "log") == ["--cfg", "job", f"log={log}"]
    assert with_positional(["output=json"], "log") == ["output=json"]
    with pytest.raises(ConfigError, match="one log at a time"):
        with_positional([str(log), f"log={log}"], "log")
    with pytest.raises(ConfigError, match="no such file or directory"):
        with_positional([str(tmp_path / "missing.csv")], "log")
    out = run("harness.diagnose", str(log), "output=json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["log"] == str(log)
    bad = run("harness.watch", str(tmp_path / "missing.csv"))
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing.csv'}: no such file or directory "
                                               "(the log to read: log=PATH)"]


# ---- python -m harness.X -------------------------------------------------------------------------

def _main_file(module: str) -> Path:
    """The file ``python -m module`` runs: the module, or a package's __main__.py."""
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).with_name("__main__.py") if spec.submodule_search_locations else Path(spec.origin)


@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_python_m_runs_the_command(module, monkeypatch, capsys):
    """``python -m harness.X`` runs the file as __main__, which hands the process's arguments to the command's
    main: here a misspelled key, which every command refuses with its one line. (runpy.run_path: pytest's
    assertion rewriter imports the harness package, as the plugin's, and run_module cannot read its code.)"""
    monkeypatch.setattr("sys.argv", [module, "nokey=1"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(_main_file(module)), run_name="__main__")
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("error: Could not override 'nokey': no such key")


# ---- what the run command ends with (README.md, docs/design.md "Commands") -------------------------------

def _table(stdout: str) -> dict[str, list[str]]:
    """The side-by-side table's rows: metric -> its cells, one per run."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if line.startswith("│") and len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


def test_the_run_command_ends_with_medians_after_the_onset_the_signatures_and_the_run_ids(store_dir):
    """The fault and its healthy twin for each of ``seeds`` seeds (each with its twin); the table compares
    the first seed: medians over the updates from the fault's onset on (not over the whole run), then the
    signatures that fired from the onset, the run ids stored, and a summary line per group. (Seed 0's pair
    is the per-fault check's zero_reward pair: tests/faults/setups.py, shared through ``store_dir``.)"""
    from harness.pipeline.report import KEY_METRICS, fmt

    args = ["fault=zero_reward", "fault.onset=1", *TINY, f"results_dir={store_dir}"]
    out = harness(*args, "seeds=2", "progress=false")
    assert out.returncode == 0, out.stderr
    assert not re.search(r"\d/\d updates", out.stdout + out.stderr)                        # progress=false: no bars
    exp = make_experiment(args)
    store = RunStore(store_dir)
    faulty, twin = (run_id(e.key()) for e in (exp, healthy_twin(exp)))
    lines = [x.rstrip() for x in out.stdout.splitlines()]
    assert "median over updates >= 1 (fault onset)" in lines
    rows = _table(out.stdout)
    assert rows["updates"] == ["3/3", "3/3"] and rows["status"] == ["ok", "ok"]
    differs = False
    for column, rid in enumerate((faulty, twin)):
        m = store.load_metrics(rid)
        for name in KEY_METRICS["ppo"]:
            after = m.loc[m["update"] >= 1, name]
            assert rows[name][column] == fmt(float(after.median())), (rid, name)
            differs |= fmt(float(m[name].median())) != rows[name][column]
    assert differs, "over the whole run the medians would read the same: nothing shows they start at the onset"
    assert "signatures that fired (updates >= 1):" in lines
    assert "    - reward_zero (reward_mean == 0 on 100% of 2 updates)" in lines       # 2 updates from the onset
    at = lines.index(f"stored in {store_dir}/runs/:")
    assert [x.strip() for x in lines[at + 1:at + 3]] == [faulty, twin]
    for label in ("zero_reward", "none (twin)"):
        assert any(x.startswith(f"{label}: last return_mean over 2 seeds: ") for x in lines), label
    seeds = {(m["fault"], m["seed"]) for m in store.iter_metas() if m["run_id"] in
             {run_id(e.key()) for s in (0, 1) for e in (dataclasses.replace(exp, seed=s),
                                                         healthy_twin(dataclasses.replace(exp, seed=s)))}}
    assert seeds == {("zero_reward", 0), ("zero_reward", 1), ("none", 0), ("none", 1)}


def test_the_defaults_are_the_ones_docs_configuration_lists():
    """docs/configuration.md's defaults: PPO's 16 envs x 128 steps, 10 epochs x 4 minibatches, lr 1e-3, clip 0.2,
    GAE 0.95, gamma 0.99, with the SB3/CleanRL extras off; GRPO's 16 prompts x 8 completions of <= 10 tokens,
    2 iterations x 2 minibatches, lr 2e-4, clip 0.2, beta 0.04 (k3), group scale, token_mean, on a 2-layer
    transformer and the token task; one torch thread; and each look-alike control is marked a control."""
    ppo = make_experiment([])
    assert (ppo.algo.name, ppo.env.name, ppo.backend.name, ppo.fault.name, ppo.seed, ppo.torch_threads) == (
        "ppo", "cartpole", "native", "none", 0, 1)
    assert (ppo.algo.num_envs, ppo.algo.n_steps, ppo.algo.n_epochs, ppo.algo.n_minibatches) == (16, 128, 10, 4)
    assert (ppo.algo.lr, ppo.algo.clip_range, ppo.algo.gae_lambda, ppo.algo.gamma) == (1e-3, 0.2, 0.95, 0.99)
    assert (ppo.algo.target_kl, ppo.algo.grad_accum, ppo.algo.norm_obs, ppo.algo.norm_reward, ppo.algo.anneal_lr,
            ppo.algo.warmup_updates, ppo.algo.anneal_clip, ppo.algo.clip_range_vf) == (None, 1, False, False, False, 0,
                                                                                      False, None)
    assert ppo.env.engine == "gymnasium"
    grpo = make_experiment(["algo=grpo"])
    a = grpo.algo
    assert grpo.env.name == "toyseq" and (a.model, a.n_layers) == ("transformer", 2)
    assert (a.n_prompts, a.group_size, a.max_new_tokens, a.num_iterations, a.n_minibatches) == (16, 8, 10, 2, 2)
    assert (a.lr, a.clip_range, a.beta, a.kl_estimator, a.scale, a.loss_agg) == (2e-4, 0.2, 0.04, "k3", "group",
                                                                                 "token_mean")
    assert (a.warmup_updates, a.lr_decay) == (0, "constant")
    for control in ("ppo_single_pass", "ppo_target_kl", "ppo_small_lr", "grpo_single_pass", "grpo_async_tis",
                    "grpo_bf16_tis", "grpo_temperature"):
        algo = make_experiment([f"algo={control}"]).algo
        assert algo.is_control and algo.variant == control.split("_", 1)[1], control

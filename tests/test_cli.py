"""The command line as a user runs it: bad overrides, the run command, multirun."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from faults import FAULTS
from harness.config import ConfigError
from harness.metrics import COLUMNS
from harness.pipeline.compose import make_experiment
from harness.store import RunStore


def harness(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("args, expected", [
    (["fault=nope"], "unknown fault 'nope'; valid choices: " + ", ".join(sorted(FAULTS))),
    (["fault.onset=-1"], "fault.onset=-1 is out of range: must be >= 0"),
    (["fault=tiny_clip", "fault.clip_range=0"], "fault.clip_range=0 is out of range: must be > 0"),
    (["algo.clip_range=-0.1"], "algo.clip_range=-0.1 is out of range: must be > 0"),
    (["env=mars"], "unknown env 'mars'; valid choices: acrobot, cartpole, highdim, lunarlander, pendulum, toyseq"),
    (["algo=grpo", "env=toyseq", "model=gpt"], "unknown model 'gpt'; valid choices: mlp, transformer"),
    (["algo=sarsa"], "unknown algo 'sarsa'; valid choices:"),
    (["seed=abc"], "could not be converted to Integer"),
    (["fault=shared_policy", "fault.factor=3"], "Could not override 'fault.factor'"),
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
    (["fault=nope"], "unknown fault 'nope'; valid choices: " + ", ".join(sorted(FAULTS))),
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

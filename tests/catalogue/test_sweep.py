"""Sweeps: the catalogue preset, resuming after kill -9, and the cluster launchers.

A sweep runs in this process (``tests.commands.run``) with ``hydra/launcher=basic`` where the launcher is not
what is tested (the catalogue preset's joblib launcher starts a process per core, each importing torch);
a separate process where it is (kill -9, Ray, submitit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from harness.agents.base import backends_of
from harness.pipeline.sweep import SLICES, Setup, dealing_order, only_setups
from harness.store import RunStore
from tests.commands import run

SMALL = ["hydra.sweeper.seeds=2", "hydra.sweeper.faults=[none,shared_policy,zero_reward,tiny_clip]",
         "hydra.sweeper.setups=[{algo:ppo,env:cartpole,backend:native}]",
         "hydra.sweeper.controls=[{algo:ppo_single_pass,env:cartpole,backend:native}]",
         "hydra.sweeper.progress_every_s=1", "hydra.sweeper.onsets=[0]", "env.total_timesteps=8192"]
EXPECTED = 4 * 2 + 2      # 4 faults (none included) x 2 seeds + the control x 2 seeds
#: trains in this process, one job after the other
IN_PROCESS = "hydra/launcher=basic"
#: 4 envs x 32 steps x 3 updates
TINY = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384"]


def harness(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          timeout=600, **kwargs)


def complete_runs(results_dir) -> dict[str, int]:
    """run_id -> meta.json mtime, for every complete run; every meta.json must parse."""
    runs = RunStore(results_dir).runs
    out = {}
    for run_dir in runs.iterdir() if runs.exists() else []:
        meta = run_dir / "meta.json"
        if meta.exists():
            json.loads(meta.read_text())            # never a torn file
            assert (run_dir / "metrics.parquet").exists()
            out[run_dir.name] = meta.stat().st_mtime_ns
    return out


@pytest.mark.slow
def test_catalogue_sweep_survives_kill_9_and_resumes(tmp_path):
    args = [sys.executable, "-m", "harness", "-m", "+sweep=catalogue", f"results_dir={tmp_path}",
            "hydra.launcher.n_jobs=2", *SMALL]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while len(complete_runs(tmp_path)) < 3:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)          # the sweep and its workers, mid-flight
    proc.wait()
    before = complete_runs(tmp_path)
    assert 3 <= len(before) < EXPECTED

    out = run("harness", "-m", "+sweep=catalogue", f"results_dir={tmp_path}", *SMALL, IN_PROCESS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{EXPECTED} runs, {len(before)} already stored" in out.stdout
    after = complete_runs(tmp_path)
    assert len(after) == EXPECTED
    assert all(after[rid] == mtime for rid, mtime in before.items()), "stored runs were retrained"
    metas = list(RunStore(tmp_path).iter_metas())
    assert sorted({m["fault"] for m in metas}) == ["none", "shared_policy", "tiny_clip", "zero_reward"]
    assert sum(m["is_control"] for m in metas) == 2

    again = run("harness", "-m", "+sweep=catalogue", f"results_dir={tmp_path}", *SMALL, IN_PROCESS)
    assert again.returncode == 0 and f"{EXPECTED} already stored" in again.stdout and "0 to train" in again.stdout


def test_catalogue_plan_covers_faults_setups_onsets_controls():
    from faults import FAULTS
    from harness.pipeline.sweep import mid_onset, plan

    jobs = plan([Setup("ppo", "cartpole"), Setup("grpo", "toyseq")], [Setup("ppo_single_pass", "cartpole")],
                "all", 2, algo_name=lambda s: s.algo.split("_")[0], onsets=["0", "mid"], n_updates=lambda s: 30)
    faults = {(j[0], j[3]) for j in jobs}
    assert ("algo=grpo", "fault=reference_not_frozen") in faults
    assert ("algo=ppo", "fault=reference_not_frozen") not in faults       # GRPO-only fault
    assert ("algo=ppo_single_pass", "fault=none") in faults
    assert not any(j[0] == "algo=ppo_single_pass" and j[3] != "fault=none" for j in jobs)
    n_ppo = sum("ppo" in c.algos and "native" in backends_of(c) for n, c in FAULTS.items() if n != "none")
    n_grpo = sum("grpo" in c.algos and "native" in backends_of(c) for n, c in FAULTS.items() if n != "none")
    # the healthy runs in the settings faults live in (e.g. gradient accumulation), once each per algo
    n_settings = sum(len({tuple(sorted(c().setting().items())) for n, c in FAULTS.items()
                          if algo in c.algos and "native" in backends_of(c) and c().setting()}) for algo in ("ppo", "grpo"))
    # every fault at onset 0 and, where its bug can start mid-run, at a mid-run onset (a bug that exists
    # only from the start, e.g. reference_is_base_model, once; one that exists mid-run only, a resume's
    # norm_stats_not_restored, once, at the drawn mid-run onsets); the healthy run and the control once;
    # 2 seeds each
    n_mid = sum(("mid" in c.onset_kinds) * (("ppo" in c.algos) + ("grpo" in c.algos))
                for n, c in FAULTS.items() if n != "none" and "native" in backends_of(c))
    n_mid_only = sum(("0" not in c.onset_kinds) * (("ppo" in c.algos) + ("grpo" in c.algos))
                     for n, c in FAULTS.items() if n != "none" and "native" in backends_of(c))
    assert n_mid_only >= 1
    assert len(jobs) == 2 * (n_ppo + n_grpo - n_mid_only + n_mid + 1 + n_settings + 1 + 1)
    resumed = [j for j in jobs if "fault=norm_stats_not_restored" in j]
    assert len(resumed) == 2 and all(any(o.startswith("fault.onset=") for o in j) for j in resumed)
    # asked for onset 0 alone, a mid-run-only fault runs once per seed at the mid-run onsets a sweep of
    # both onsets draws: the two plans train the same runs (its default onset put two runs of one seed,
    # from an onset-0 sweep and a later full one, into one cell)
    alone, both = (plan([Setup("ppo", "cartpole")], [], ["norm_stats_not_restored"], 3, algo_name=lambda s: "ppo",
                        onsets=kinds, n_updates=lambda s: 30) for kinds in (["0"], ["0", "mid"]))
    resumed_alone = [j for j in alone if "fault=norm_stats_not_restored" in j]
    assert len(resumed_alone) == 3 and all(any(o.startswith("fault.onset=") for o in j) for j in resumed_alone)
    assert resumed_alone == [j for j in both if "fault=norm_stats_not_restored" in j]
    # asked for mid-run onsets alone, a fault that exists from the start only is not planned
    start_only = plan([Setup("ppo", "cartpole")], [], ["envs_seeded_alike"], 1, algo_name=lambda s: "ppo",
                      onsets=["mid"], n_updates=lambda s: 30)
    assert not [j for j in start_only if "fault=envs_seeded_alike" in j]
    assert jobs[0][0] == "algo=grpo"              # longest jobs first
    onsets = [int(o.split("=")[1]) for j in jobs for o in j if o.startswith("fault.onset=")]
    assert len(onsets) == 2 * n_mid and all(1 <= k <= 10 for k in onsets)    # first third of 30
    # a list of faults still trains their twins: the healthy runs are planned whether or not it names none
    few = plan([Setup("ppo", "cartpole")], [], ["vf_clip_unscaled"], 2, algo_name=lambda s: "ppo")
    assert sorted(j[3] for j in few) == ["fault=none"] * 2 + ["fault=vf_clip_unscaled"] * 2
    # a setup's own onsets replace the sweep's for it alone (TRL at onset 0 while native GRPO has both)
    own = plan([Setup("ppo", "cartpole"), Setup("grpo", "toyseq", onsets=("0",))], [], ["zero_reward"], 2,
               algo_name=lambda s: s.algo, onsets=["0", "mid"], n_updates=lambda s: 30)
    mid = {j[0] for j in own if any(o.startswith("fault.onset=") for o in j)}
    assert mid == {"algo=ppo"} and sum(j[:2] == ["algo=grpo", "env=toyseq"] for j in own) == 4
    # a setup's extra overrides go with its runs alone
    extra = plan([Setup("ppo", "acrobot", extra=("env.engine=envpool",)), Setup("ppo", "cartpole")], [],
                 ["zero_reward"], 1, algo_name=lambda s: s.algo)
    assert {j[1] for j in extra if "env.engine=envpool" in j} == {"env=acrobot"}
    assert mid_onset("zero_reward", 3, 30) == mid_onset("zero_reward", 3, 30)
    assert len({mid_onset("zero_reward", seed, 300) for seed in range(12)}) > 6          # a spread of onsets


def test_a_part_of_the_sweep_is_its_setups_and_their_controls():
    """hydra.sweeper.setups_only names setups of the preset (algo/env/backend); the controls kept are those on
    their env and backend, so a part's cells have their look-alikes and no other setup's runs."""
    setups = [Setup("ppo", "cartpole"), Setup("ppo", "acrobot", extra=("env.engine=envpool",)),
              Setup("ppo", "acrobot", "sb3"), Setup("grpo", "toyseq")]
    controls = [Setup("ppo_single_pass", "cartpole"), Setup("ppo_small_lr", "acrobot"),
                Setup("ppo_single_pass", "acrobot", "sb3"), Setup("grpo_single_pass", "toyseq")]
    chosen, kept = only_setups(setups, controls, ["ppo/acrobot/sb3", "ppo/acrobot/native", "ppo/acrobot/sb3"])
    assert chosen == [setups[2], setups[1]] and kept == [controls[1], controls[2]]
    assert only_setups(setups, controls, ["grpo/toyseq/native"]) == ([setups[3]], [controls[3]])


@pytest.mark.parametrize("args, message", [
    (["seed=0,1"], "the catalogue sweep builds its own job list"),
    (["hydra.sweeper.faults=[none,nope]"], "unknown fault 'nope' in hydra.sweeper.faults"),
    (["hydra.sweeper.setups=[{algo:ppo,env:mars,backend:native}]"], "unknown env 'mars'"),
    (["hydra.sweeper.setups=[{algo:ppo,env:cartpole,onset:[0]}]"], "unknown key 'onset'; valid keys: algo, env"),
    (["hydra.sweeper.setups=[{algo:ppo,env:cartpole,extra:['env.engine=steam']}]"], "env.engine='steam'"),
    (["hydra.sweeper.setups=[{algo:ppo,env:cartpole,onsets:[late]}]"],
     "the onsets of setup ppo/cartpole/native=['late']; valid values: 0, mid"),
    (["hydra.sweeper.setups_only=[ppo/acrobot/sb3,ppo/mars/native]"],
     "hydra.sweeper.setups_only: no setup 'ppo/mars/native'; the sweep's setups: ppo/cartpole/native, "),
])
def test_bad_catalogue_sweep_is_one_line(tmp_path, args, message):
    out = run("harness", "-m", "+sweep=catalogue", f"results_dir={tmp_path}", *args)
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: ") and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not tmp_path.joinpath("runs").exists()


@pytest.mark.slow
def test_ray_launcher_runs_jobs_on_a_local_cluster(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    out = harness("-m", "fault=none,shared_policy,zero_reward", "twin=false", "hydra/launcher=ray",
                  f"results_dir={tmp_path}", "env.total_timesteps=4096", "algo.n_steps=64",
                  env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Ray" in out.stdout + out.stderr
    assert sorted(m["fault"] for m in RunStore(tmp_path).iter_metas()) == ["none", "shared_policy", "zero_reward"]


@pytest.mark.slow
def test_submitit_launcher_runs_jobs(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    out = harness("-m", "fault=none,tiny_clip", "twin=false", "hydra/launcher=submitit_local",
                  f"results_dir={tmp_path}", "env.total_timesteps=4096", "algo.n_steps=64")
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(m["fault"] for m in RunStore(tmp_path).iter_metas()) == ["none", "tiny_clip"]


def test_slurm_launcher_config_composes():
    out = run("harness", "hydra/launcher=harness_slurm", "--cfg", "hydra", "-p", "hydra.launcher")
    assert out.returncode == 0, out.stderr
    assert "SlurmLauncher" in out.stdout and "cpus_per_task: 1" in out.stdout


def test_the_dataset_plan_is_trained_in_stratified_slices():
    """A dataset sweep stopped early has stored a share of every (algorithm, fault) group, healthy
    included, not the costliest setups first; within a slice the longest runs go first."""
    def spec(algo: str, fault: str, steps: int):
        return SimpleNamespace(setup={"algo_name": algo, "backend": "native"}, fault=fault,
                               env={"total_timesteps": steps})

    specs = ([spec("grpo", "zero_reward", 10_000 + i) for i in range(40)]        # costliest
             + [spec("ppo", "none", 100 + i) for i in range(120)] + [spec("ppo", "tiny_clip", 200 + i) for i in range(40)])
    order = dealing_order(specs)
    assert sorted(map(id, order)) == sorted(map(id, specs))
    first = order[: len(specs) // SLICES]
    assert [(s.setup["algo_name"], s.fault) for s in first].count(("ppo", "none")) == 120 // SLICES
    assert {s.fault for s in first} == {"zero_reward", "none", "tiny_clip"}
    costs = [s.env["total_timesteps"] * (4 if s.setup["algo_name"] == "grpo" else 1) for s in first]
    assert costs == sorted(costs, reverse=True)


def test_mid_run_onsets_that_differ_per_seed_train_in_one_command(tmp_path):
    """A sweep's mid-run onsets differ per seed (``seed_onsets``): one command trains the seeds, each
    stored with its own onset, under the run id the sweep planned for it (onset in the identity)."""
    import dataclasses

    from harness.pipeline.assemble import with_onset
    from harness.pipeline.compose import make_experiment
    from harness.store import RunStore, run_id

    common = ["fault=tiny_clip", "algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=1024",
              f"results_dir={tmp_path}", "twin=false", "progress=false"]         # 8 updates
    out = run("harness", *common, "seeds=3", "seed_onsets=[5,2,7]")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metas = {m["seed"]: m for m in RunStore(tmp_path).iter_metas()}
    assert sorted(metas) == [0, 1, 2]
    base = make_experiment(common)
    for seed, onset in ((0, 5), (1, 2), (2, 7)):
        m = metas[seed]
        assert m["onset_update"] == onset
        assert m["run_id"] == run_id(with_onset(dataclasses.replace(base, seed=seed), onset).key())
    for bad, message in ((["seeds=2", "seed_onsets=[5]"], "seed_onsets has 1 onsets for seeds=2: give one per seed"),
                         (["seeds=1", "seed_onsets=[500]"], "seed_onsets=[500]: onset 500 is beyond the run")):
        got = run("harness", *common, *bad)
        assert got.returncode == 2 and message in got.stderr, got.stderr[-2000:]
    none = run("harness", *[c for c in common if c != "fault=tiny_clip"], "fault=none", "seed_onsets=[3]")
    assert none.returncode == 2 and "it means nothing with fault=none" in none.stderr


def test_the_presets_are_the_ones_the_pages_describe():
    """docs/catalogue.md: every fault on native PPO (CartPole, Acrobot, LunarLander, Hopper; the last three
    stepped by EnvPool), SB3's PPO (CartPole, Acrobot, on gymnasium's envs), GRPO natively and in TRL (onset 0
    alone), PPO-LM on the token task, the look-alike controls on each PPO env, 10 seeds at onset 0 and mid-run, a job
    a run, on all local cores (joblib, the dataset sweep's launcher too; docs/datasets.md: 3000 draws by
    default, 20% healthy, 60% in another fault's setting, chunks of 8 runs a job); docs/clusters.md: the SLURM
    preset asks one CPU and 4 GB per run, 30 minutes, 64 runs in flight."""
    import yaml

    from tests.paths import ROOT

    conf = ROOT / "harness" / "conf"
    preset = yaml.safe_load((conf / "sweep" / "catalogue.yaml").read_text())
    sweeper = preset["hydra"]["sweeper"]
    assert (sweeper["seeds"], sweeper["onsets"], sweeper["faults"]) == (10, ["0", "mid"], "all")
    assert "engine" not in sweeper                   # one engine: every run a job of its own
    setups = {(s["algo"], s["env"], s["backend"]): s for s in sweeper["setups"]}
    assert set(setups) == {("ppo", env, "native") for env in ("cartpole", "acrobot", "lunarlander", "hopper")} | {
        ("ppo", "cartpole", "sb3"), ("ppo", "acrobot", "sb3"), ("grpo", "toyseq", "native"), ("grpo", "toyseq", "trl"),
        ("ppo_lm", "toyseq", "native")}
    envpool = {key for key, s in setups.items() if "env.engine=envpool" in s.get("extra", [])}
    assert envpool == {("ppo", env, "native") for env in ("acrobot", "lunarlander", "hopper")}
    assert [key for key, s in setups.items() if "onsets" in s] == [("grpo", "toyseq", "trl")]
    assert setups["grpo", "toyseq", "trl"]["onsets"] == ["0"]
    control_envs = {(c["env"], c["backend"]) for c in sweeper["controls"]}
    assert control_envs == {(env, backend) for (algo, env, backend) in setups if algo == "ppo"} | {("toyseq", "native")}
    for sweep in ("catalogue", "dataset"):
        defaults = yaml.safe_load((conf / "sweep" / f"{sweep}.yaml").read_text())["defaults"]
        assert {"override /hydra/launcher": "joblib"} in defaults, sweep
    dataset = yaml.safe_load((conf / "sweep" / "dataset.yaml").read_text())["hydra"]["sweeper"]      # docs/datasets.md
    assert (dataset["size"], dataset["chunk"]) == (3000, 8)
    assert (dataset["space"]["healthy_share"], dataset["space"]["setting_share"]) == (0.2, 0.6)
    slurm = yaml.safe_load((conf / "hydra" / "launcher" / "harness_slurm.yaml").read_text())
    assert "submitit_slurm" in slurm["defaults"]
    assert (slurm["cpus_per_task"], slurm["mem_gb"], slurm["timeout_min"], slurm["array_parallelism"]) == (1, 4, 30, 64)

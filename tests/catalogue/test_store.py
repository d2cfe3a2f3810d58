"""The run store: stable ids, atomic writes with the user's umask, unfinished runs redone, crashes and divergence
kept, the numerics a run ran with, retrain; the run command's picture and TensorBoard log."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import stat

import numpy as np
import pandas as pd
import pytest
import torch

from harness.config import experiment as experiment_config
from harness.logs.readers import read
from harness.metrics import COLUMNS, EPISODE_COLUMNS, STEP_COLUMNS
from harness.pipeline.experiment import run_experiment
from harness.pipeline.report import traced_metrics
from harness.pipeline.train import get_or_train
from harness.store import RunStore, atomic_write_bytes, atomic_write_parquet, run_id
from tests.helpers import make_experiment, train

#: 4 envs x 32 steps x 3 updates
TINY = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384"]
#: 16 envs x 64 steps x 4 updates
SMALL = ["env.total_timesteps=4096", "algo.n_steps=64"]


def test_run_id_is_a_stable_hash_of_the_config_minus_outputs(tmp_path):
    a = make_experiment(["fault=tiny_clip", f"results_dir={tmp_path}/a", "twin=false", "progress=false"])
    b = make_experiment(["fault=tiny_clip", f"results_dir={tmp_path}/b"])
    assert run_id(a.key()) == run_id(b.key())
    assert run_id(a.key()).startswith("ppo-cartpole-native-tiny_clip-s0-")
    for change in ("fault.clip_range=0.01", "seed=1", "algo.lr=0.002", "fault.onset=2", "env.total_timesteps=5000"):
        c = make_experiment(["fault=tiny_clip", change])
        assert run_id(c.key()) != run_id(a.key()), change


def test_stored_run_has_canonical_columns_and_complete_meta(tmp_path):
    res = train(["fault=shared_policy", *TINY, f"results_dir={tmp_path}"])
    run_dir = RunStore(tmp_path).run_dir(res.run_id)
    files = ["episodes.parquet", "meta.json", "metrics.parquet", "steps.parquet"]
    assert sorted(p.name for p in run_dir.iterdir()) == files
    assert tuple(res.metrics.columns) == COLUMNS
    meta = json.loads((run_dir / "meta.json").read_text())
    for key in ("run_id", "fault", "fault_params", "onset_update", "algo", "env", "backend", "seed",
                "hyperparameters", "status", "error", "n_updates", "wall_s", "versions", "files"):
        assert key in meta
    assert meta["run_id"] == res.run_id and meta["error"] is None
    assert sorted(meta["files"]) == [f for f in files if f != "meta.json"]
    assert all(len(d["sha256"]) == 64 and d["bytes"] > 0 for d in meta["files"].values())


def test_per_update_metrics_are_derived_from_the_stored_optimizer_steps(store_dir):
    res = train(["fault=none", *TINY, f"results_dir={store_dir}"])
    steps = RunStore(store_dir).load_steps(res.run_id)
    assert tuple(steps.columns) == STEP_COLUMNS
    assert len(steps) == 3 * 10 * 4 and steps["stepped"].all()     # 3 updates x 10 epochs x 4 minibatches
    by_update = steps.groupby("update")
    m = res.metrics.set_index("update")
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm"):
        assert np.allclose(by_update[name].mean(), m[name], rtol=1e-9), name
    assert np.allclose(by_update["ratio_max"].max(), m["ratio_max"])
    assert (by_update["stepped"].sum() == m["optimizer_steps"]).all()


def test_episodes_record_the_env_return_beside_the_learner_return(store_dir):
    # zero_reward zeroes what the learner gets; the monitor inside the wrapper sees CartPole's own reward
    res = train(["fault=zero_reward", *SMALL, f"results_dir={store_dir}"])
    episodes = RunStore(store_dir).load_episodes(res.run_id)
    assert tuple(episodes.columns) == EPISODE_COLUMNS and len(episodes) > 20
    assert (episodes["return"] == 0).all()
    assert (episodes["env_return"] == episodes["length"]).all()      # CartPole pays 1 per step
    assert episodes["env_step"].is_monotonic_increasing and episodes["update"].between(0, 3).all()


def test_truncated_or_changed_file_makes_the_run_corrupt_and_it_is_retrained(tmp_path, capsys):
    first = train(["fault=zero_reward", *TINY, f"results_dir={tmp_path}"])
    store = RunStore(tmp_path)
    path = store.run_dir(first.run_id) / "metrics.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert "metrics.parquet has" in store.problem(first.run_id) and store.load_meta(first.run_id) is None
    warnings = []
    assert list(store.iter_metas(warn=warnings.append)) == []
    assert len(warnings) == 1 and first.run_id in warnings[0] and "\n" not in warnings[0]
    again = train(["fault=zero_reward", *TINY, f"results_dir={tmp_path}"])
    assert not again.reused and again.meta["status"] == "ok"
    assert "is corrupt" in capsys.readouterr().err
    assert store.problem(first.run_id) is None
    steps = store.run_dir(first.run_id) / "steps.parquet"        # same size, different bytes
    data = bytearray(steps.read_bytes())
    data[len(data) // 2] ^= 0xFF
    steps.write_bytes(bytes(data))
    assert "does not match the checksum" in store.problem(first.run_id)


def test_identical_run_is_reused_not_retrained(store_dir):
    first = train(["fault=zero_reward", *TINY, f"results_dir={store_dir}"])
    mtime = (RunStore(store_dir).run_dir(first.run_id) / "meta.json").stat().st_mtime_ns
    again = train(["fault=zero_reward", *TINY, f"results_dir={store_dir}"])
    assert again.reused and again.run_id == first.run_id
    assert (RunStore(store_dir).run_dir(first.run_id) / "meta.json").stat().st_mtime_ns == mtime


def test_unfinished_run_directory_is_redone(tmp_path):
    exp = make_experiment(["fault=zero_reward", *TINY, f"results_dir={tmp_path}"])
    run_dir = RunStore(tmp_path).run_dir(run_id(exp.key()))
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.parquet").write_bytes(b"half a file")
    (run_dir / "meta.json").write_text('{"run_id": "trunc')  # a torn write
    res = train(["fault=zero_reward", *TINY, f"results_dir={tmp_path}"])
    assert not res.reused and res.meta["status"] == "ok" and len(res.metrics) == 3
    assert not any(p.name.endswith(".tmp") for p in run_dir.iterdir())


def test_crashed_run_is_stored_with_traceback_and_metrics_so_far(store_dir):
    # each of the 2 envs raises on its 301st step, part-way through update 11
    res = train(["env.id=harness-test/Crashing-v0", "algo.num_envs=2", "algo.n_steps=32",
                 "env.total_timesteps=2000", f"results_dir={store_dir}"])
    assert res.meta["status"] == "crashed"
    assert "simulator exploded after 300 steps" in res.meta["error"]
    assert res.meta["n_updates"] == len(res.metrics) == 11 < res.meta["n_updates_planned"]
    assert res.metrics["env_step"].iloc[-1] <= 2 * 300
    again = train(["env.id=harness-test/Crashing-v0", "algo.num_envs=2", "algo.n_steps=32",
                   "env.total_timesteps=2000", f"results_dir={store_dir}"])
    assert again.reused and again.meta["status"] == "crashed"


def test_diverged_run_is_a_result(tmp_path, capsys):
    # A Gaussian policy with lr x 1e4 from update 2: log-std blows up and the loss goes non-finite.
    exp = make_experiment(["env=pendulum", "fault=excessive_lr", "fault.factor=1e4", "fault.onset=2",
                           "algo.num_envs=4", "algo.n_steps=64", "env.total_timesteps=5120",
                           "progress=false", "twin=false", f"results_dir={tmp_path}"])
    assert run_experiment(exp) == 0
    store = RunStore(tmp_path)
    meta = store.load_meta(run_id(exp.key()))
    m = store.load_metrics(run_id(exp.key()))
    assert meta["status"] == "diverged" and meta["n_updates"] < meta["n_updates_planned"]
    assert len(m) == meta["n_updates"] and m["update"].iloc[-1] >= 2
    assert m["nonfinite"].iloc[-1] == 1 and (m["nonfinite"].iloc[:-1] == 0).all()
    assert "nonfinite" in capsys.readouterr().out


def test_store_files_are_created_with_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        res = train(["fault=none", *TINY, f"results_dir={tmp_path}"])
        files = list(RunStore(tmp_path).run_dir(res.run_id).iterdir())
        assert len(files) == 4 and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o644}
        os.umask(0o002)
        atomic_write_bytes(tmp_path / "a.bin", b"x")
        atomic_write_parquet(tmp_path / "b.parquet", pd.DataFrame({"x": [1]}))
        assert {stat.S_IMODE((tmp_path / n).stat().st_mode) for n in ("a.bin", "b.parquet")} == {0o664}
    finally:
        os.umask(old)


def test_meta_records_the_numerics_and_a_new_training_version_is_a_new_run(tmp_path, monkeypatch):
    res = train(["fault=none", *TINY, f"results_dir={tmp_path}"])
    assert res.meta["numerics"] == {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                    "machine": platform.machine(), "threads": 1}
    exp = make_experiment(["fault=none", *TINY])
    monkeypatch.setattr(experiment_config, "TRAINING_VERSION", experiment_config.TRAINING_VERSION + "-next")
    assert run_id(exp.key()) != res.run_id
    assert not train(["fault=none", *TINY, f"results_dir={tmp_path}"]).reused


def test_reuse_with_other_numerics_says_so_and_retrain_replaces_the_run(tmp_path, capsys):
    args = ["fault=none", *TINY, "progress=false", f"results_dir={tmp_path}"]
    assert run_experiment(make_experiment(args)) == 0
    store = RunStore(tmp_path)
    rid = run_id(make_experiment(args).key())
    meta_path = store.run_dir(rid) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["numerics"].update(torch="1.0.0", cpu_capability="ZVECTOR")      # as if trained on another machine (s390x)
    meta_path.write_text(json.dumps(meta))
    capsys.readouterr()
    assert run_experiment(make_experiment(args)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: reused {rid}, trained with torch 1.0.0 (here "), err
    assert "cpu_capability ZVECTOR (here" in err[0] and "retrain=true discards and retrains it" in err[0]

    # an interrupted retrain leaves the stored run as it was
    def interrupt(row):
        raise KeyboardInterrupt
    before = {p.name: p.read_bytes() for p in store.run_dir(rid).iterdir()}
    with pytest.raises(KeyboardInterrupt):
        get_or_train(make_experiment([*args, "retrain=true"]), on_update=interrupt)
    assert {p.name: p.read_bytes() for p in store.run_dir(rid).iterdir()} == before

    assert run_experiment(make_experiment([*args, "retrain=true"])) == 0
    assert capsys.readouterr().err == ""
    assert store.load_meta(rid)["numerics"]["torch"] == torch.__version__


def test_run_command_draws_the_traces_and_writes_tensorboard(tmp_path, capsys):
    exp = make_experiment(["fault=zero_reward", "fault.onset=1", *TINY, "progress=false", "tensorboard=true",
                           f"results_dir={tmp_path}"])
    for _ in range(2):                          # the second time both runs are reused; nothing piles up
        assert run_experiment(exp) == 0
        out = capsys.readouterr().out
        run_dir = RunStore(tmp_path).run_dir(run_id(exp.key()))
        assert f"traces (faulty run vs twin, the metrics whose signatures fired): {run_dir / 'traces.png'}" in out
        assert (run_dir / "traces.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"TensorBoard: tensorboard --logdir {run_dir / 'tensorboard'}" in out
        runs = sorted(p.name for p in (run_dir / "tensorboard").iterdir())
        assert runs == ["fault=zero_reward", "healthy_twin"]
        for name in runs:
            assert len(list((run_dir / "tensorboard" / name).iterdir())) == 1
            records = read(run_dir / "tensorboard" / name).records
            assert sorted(records.loc[records["key"] == "return_mean", "step"]) == [0, 1, 2]
    assert RunStore(tmp_path).problem(run_id(exp.key())) is None      # the extra files leave the run complete


def test_traced_metrics_name_the_signatures_and_the_runs_they_fired_on():
    traced = traced_metrics("ppo", {"zero_reward": ["reward_zero", "reward_flat"], "none (twin)": ["reward_flat"]})
    assert traced == {"return_mean": "progress (no signature on it fired)",
                      "reward_mean": "signature fired: reward_zero, reward_flat (on both runs)"}


# ---- what docs/design.md's "Run store" section promises -----------------------------------------

#: the keys docs/design.md lists for meta.json (its "Run store" section), and numerics (its next paragraph)
META_KEYS = ("run_id", "fault", "fault_params", "onset_update", "fault_form", "fault_kind", "algo", "algo_variant",
             "env", "env_id", "backend", "seed", "is_control", "hyperparameters", "configured_optimizer_steps",
             "action_space", "status", "error", "n_updates", "n_updates_planned", "wall_s", "created", "command",
             "sampled", "start_checkpoint", "versions", "config", "files", "numerics")


def test_meta_json_holds_every_key_the_contract_lists(store_dir):
    """Every key docs/design.md names for meta.json is there, with what the page says it holds: the configured
    and effective hyperparameters, the versions of python, the harness, the training code and the libraries,
    the run's identity (``Experiment.key()``) and each file's size and SHA-256."""
    args = ["fault=zero_reward", *TINY, f"results_dir={store_dir}"]      # test_identical_run_is_reused_not_retrained's
    res = train(args)
    meta = json.loads((RunStore(store_dir).run_dir(res.run_id) / "meta.json").read_text())
    missing = [k for k in META_KEYS if k not in meta]
    assert not missing, missing
    assert set(meta["hyperparameters"]) == {"configured", "effective"}
    assert {"python", "harness", "training", "torch", "gymnasium"} <= set(meta["versions"])
    assert meta["config"] == json.loads(json.dumps(make_experiment(args).key(), default=str))
    assert (meta["fault"], meta["onset_update"], meta["fault_kind"], meta["is_control"]) == ("zero_reward", 0, "training",
                                                                                            False)
    assert meta["n_updates"] == meta["n_updates_planned"] == 3 and meta["status"] == "ok"
    for name, digest in meta["files"].items():
        data = (RunStore(store_dir).run_dir(res.run_id) / name).read_bytes()
        assert digest == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


def test_a_fault_s_version_and_the_thread_count_are_identity_and_output_and_display_flags_are_not(monkeypatch):
    """The run id hashes the fault's own code version and ``torch_threads``: bumping one fault's ``version``
    gives that fault's runs new ids and leaves every other run's (its healthy twin's, another fault's) alone;
    results_dir, twin, progress, tensorboard and retrain are not part of it."""
    import dataclasses

    from faults import FAULTS
    from harness.pipeline.train import healthy_twin

    tiny_clip, zero = make_experiment(["fault=tiny_clip"]), make_experiment(["fault=zero_reward"])
    ids = {name: run_id(exp.key()) for name, exp in (("tiny", tiny_clip), ("other", zero),
                                                      ("twin", healthy_twin(tiny_clip)))}
    assert run_id(dataclasses.replace(tiny_clip, torch_threads=2).key()) != ids["tiny"]
    for flag in ({"results_dir": "elsewhere"}, {"twin": False}, {"progress": False}, {"tensorboard": True},
                 {"retrain": True}):
        assert run_id(dataclasses.replace(tiny_clip, **flag).key()) == ids["tiny"], flag
    monkeypatch.setattr(FAULTS["tiny_clip"], "version", FAULTS["tiny_clip"].version + 1)
    assert run_id(tiny_clip.key()) != ids["tiny"]
    assert run_id(zero.key()) == ids["other"] and run_id(healthy_twin(tiny_clip).key()) == ids["twin"]


def test_a_job_waits_for_the_per_run_lock_another_job_holds(store_dir, tmp_path):
    """Parallel jobs take a per-run lock, ``locks/<run_id>.lock``: a job asking for a run that another
    process holds the lock of (training it) waits until that one is done, then reuses what it stored."""
    import shutil
    import threading
    import time

    rid = train(["fault=none", *TINY, f"results_dir={store_dir}"]).run_id
    shutil.copytree(store_dir / "runs" / rid, tmp_path / "runs" / rid)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(train(["fault=none", *TINY, f"results_dir={tmp_path}"])))
    with RunStore(tmp_path).lock(rid):
        assert (tmp_path / "locks" / f"{rid}.lock").exists()
        waiter.start()
        time.sleep(0.5)
        assert got == [] and waiter.is_alive()                # it waits for the lock ...
    waiter.join(timeout=60)
    assert len(got) == 1 and got[0].reused and got[0].run_id == rid      # ... and then reuses the run

"""Fixtures: a shared run store and small real environments built for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.toy_envs  # noqa: F401 - registers harness-test/* gymnasium ids


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> None:
    """Runs train on one torch thread (torch_threads=1) and the suite runs two workers to a 2-core
    machine: a test that calls a trainer directly gets one thread too, not whatever an earlier test in
    its worker left (torch's default, a thread per core, made test_seed_batch's tests 15x slower in a
    worker where no run had been trained before them)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """One run store for the session, so healthy twins are trained once and reused."""
    return tmp_path_factory.mktemp("results")


#: a small diverse dataset for the diagnosis model's tests: five faults on cheap setups, short runs
DIVERSE = ["hydra.sweeper.size=60", "hydra.sweeper.chunk=10", "hydra.sweeper.space.updates=[int,15,18]",
           "hydra.sweeper.space.max_cost=3",
           "hydra.sweeper.space.only=[zero_reward,shared_policy,excessive_lr,adv_sign_flip,entropy_sign_flip]",
           "hydra.sweeper.space.setups=[{algo:ppo,algo_name:ppo,env:cartpole,backend:native,weight:3},"
           "{algo:ppo,algo_name:ppo,env:cartpole,backend:sb3,weight:1,cost:2.0},"
           "{algo:grpo,algo_name:grpo,env:toyseq,backend:native,weight:2,tokens_per_completion:6}]"]


@pytest.fixture(scope="session")
def diverse_model(tmp_path_factory) -> Path:
    """A results_dir with a small diverse dataset (the dataset sweep, as a user runs it) and the
    diagnosis model that python -m harness.catalogue fits on it."""
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("diverse")
    sweep = subprocess.run([sys.executable, "-m", "harness", "-m", "+sweep=dataset", f"results_dir={root}", *DIVERSE],
                           capture_output=True, text=True, timeout=900)
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    # catalogue-style runs (each with its healthy twin): a calibration seed (even) trains the model
    # beside the diverse runs, a held-out seed (odd) never does
    for fault, seed in (("zero_reward", 0), ("shared_policy", 1)):
        one = subprocess.run([sys.executable, "-m", "harness", f"fault={fault}", f"seed={seed}", "env.total_timesteps=6144",
                              "algo.n_steps=64", "progress=false", f"results_dir={root}"],
                             capture_output=True, text=True, timeout=300)
        assert one.returncode == 0, one.stderr[-2000:]
    cat = subprocess.run([sys.executable, "-m", "harness.catalogue", f"results_dir={root}", "plots=false",
                          "views=false", "left_out=false"], capture_output=True, text=True, timeout=900)
    assert cat.returncode == 0, cat.stdout[-2000:] + cat.stderr[-2000:]
    return root

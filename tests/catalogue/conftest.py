"""Fixtures of the catalogue tests: short runs trained once per session (through the shared ``store_dir``)
and copied into a results_dir of the test's own, a small part built from them, and the published
catalogue rendered once per session for every worker."""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
from pathlib import Path

import pytest

from harness.pipeline.compose import make_experiment
from harness.pipeline.train import RunResult, get_or_train

#: 4 envs x 32 steps x 3 updates
TINY = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384"]


def stored(store_dir: Path, results_dir: Path, *runs: list[str]) -> list[RunResult]:
    """Train each run (its overrides) through the session's shared store, or reuse it there, and copy it
    into ``results_dir/runs``: a results_dir holding these runs and nothing else."""
    out = []
    for overrides in runs:
        res = get_or_train(make_experiment([*overrides, f"results_dir={store_dir}", "twin=false", "progress=false"]))
        target = results_dir / "runs" / res.run_id
        if not target.exists():
            shutil.copytree(Path(store_dir) / "runs" / res.run_id, target)
        out.append(res)
    return out


@pytest.fixture(scope="session")
def small_runs(store_dir, tmp_path_factory) -> Path:
    """Two seeds of zero_reward and two look-alike controls, no fault=none run: no cell has a
    healthy run, so no metric can be tested in any cell (the catalogue has no metric row at all)."""
    root = tmp_path_factory.mktemp("small") / "results"
    stored(store_dir, root, *([f"fault={fault}", "algo=" + algo, *TINY, f"seed={seed}"]
                              for seed in (0, 1) for algo, fault in (("ppo", "zero_reward"), ("ppo_single_pass", "none"))))
    return root


@pytest.fixture(scope="session")
def part(small_runs, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """The small store built as a catalogue with its plots (no dataset, no model): a part to merge into
    another catalogue (zero_reward on CartPole at another budget). Read it; copy it to change it.
    Returns its results_dir and what the build wrote."""
    from harness.catalogue.build import write
    from harness.catalogue.settings import CatalogueSettings

    root = tmp_path_factory.mktemp("part") / "part"
    shutil.copytree(small_runs / "runs", root / "runs")
    written = write(CatalogueSettings(root, n_mc=200, trace_metrics=(), plots=True, dataset=False, model=False))
    return root, written


def _session_root(tmp_path_factory) -> Path:
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def once_per_session(tmp_path_factory):
    """``once_per_session(name, make)``: the directory ``make(directory)`` filled, made by the first worker
    of the session that asks and read by the others (``make`` returns a JSON-able value, returned too)."""
    root = _session_root(tmp_path_factory)

    def get(name: str, make):
        target = root / name
        done = root / f"{name}.json"
        with _locked(root / f"{name}.lock"):
            if not done.exists():
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                done.write_text(json.dumps(make(target)))
        return target, json.loads(done.read_text())
    return get

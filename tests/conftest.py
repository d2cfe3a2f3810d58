"""Fixtures shared by every test file: the checked-in tiny stores, a run store shared by the session's
workers, and small real environments built for the tests.

Two tiers: ``python -m pytest`` runs the fast one (``-m "not slow"`` is in pyproject.toml's addopts);
``python -m pytest -m slow`` runs the slow one, which guards each core claim once with longer real runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import tests.toy_envs  # noqa: F401 - registers harness-test/* gymnasium ids
from tests.make_fixtures import MANIFEST, TINY


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> None:
    """Runs train on one torch thread (torch_threads=1) and the suite runs two workers to a 2-core
    machine: a test that calls a trainer directly gets one thread too, not whatever an earlier test in
    its worker left (torch's default, a thread per core, made test_seed_batch's tests 15x slower in a
    worker where no run had been trained before them).

    It also imports what a run's first optimizer step imports lazily (torch._dynamo and its ~300 modules):
    pytester's in-process runs drop the modules first imported inside them, and torch cannot register its
    operator libraries twice ("Only a single TORCH_LIBRARY can be used to register the namespace"), so a
    run trained inside one would break every later run of that worker. The same holds for pandas' parquet
    engine: it registers its arrow extension types with pyarrow on first use, and a second registration
    fails ("A type extension with name pandas.period already defined") in every later parquet read of
    that worker (CI saw 141 tests fail so when the plugin's in-process test was a worker's first)."""
    import pandas as pd
    import torch
    import torch._dynamo

    torch.set_num_threads(1)
    pd.io.parquet.get_engine("auto")


def _session_root(tmp_path_factory) -> Path:
    """A directory every worker of this session sees (under pytest-xdist each worker has its own basetemp,
    ``.../popen-gwN``; their parent is the session's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """One run store for the whole session, shared by its workers (the store's locks make that safe): a
    healthy twin or the GRPO warm-up checkpoint is trained once, by whichever test asks first."""
    path = _session_root(tmp_path_factory) / "shared-store"
    path.mkdir(exist_ok=True)
    return path


def _tiny_source(name: str) -> Path:
    source = TINY / name
    if not (source / MANIFEST).exists():
        pytest.fail(f"no fixture {source}: make it with python -m tests.make_fixtures {name}")
    return source


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> Callable[[str], Path]:
    """``tiny(name)``: this worker's copy of the checked-in fixture ``tests/data/tiny/<name>`` (a results_dir
    of short real runs with the catalogue, dataset and diagnosis model built from them;
    tests/make_fixtures.py). Shared by the worker's tests: read it, don't write to it (use ``tiny_copy``)."""
    copies: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in copies:
            copies[name] = Path(shutil.copytree(_tiny_source(name), tmp_path_factory.mktemp(f"tiny-{name}") / name))
        return copies[name]
    return get


@pytest.fixture
def tiny_copy(tmp_path) -> Callable[[str], Path]:
    """``tiny_copy(name)``: a copy of the fixture ``tests/data/tiny/<name>`` of this test's own, to write into."""
    def get(name: str) -> Path:
        return Path(shutil.copytree(_tiny_source(name), tmp_path / f"tiny-{name}"))
    return get


@pytest.fixture(scope="session")
def diverse_model(tiny) -> Path:
    """A results_dir with a small diverse dataset (a dataset sweep, as a user runs it) and the diagnosis
    model python -m harness.catalogue fitted on it (the ``diverse`` fixture)."""
    return tiny("diverse")

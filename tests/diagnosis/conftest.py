"""Fixtures of the diagnosis tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def joblib_in_process() -> Iterator[None]:
    """joblib's jobs run one after another in this process: a refit of the diagnosis model (``Parallel(n_jobs=-1)``
    over its held-out fits) computes the same fits without starting a pool of worker processes, each importing
    pandas, sklearn and the harness again (about 10 CPU-s per pytest worker for fits of a few seconds)."""
    from joblib import parallel_config

    with parallel_config(backend="sequential"):
        yield


@pytest.fixture(scope="session")
def trl_base(store_dir):
    """benchmarks/realworld's warm-started tiny Llama (a short SFT loop), made once per session: in the
    session's shared store directory, under its lock, so the second worker reuses the first one's."""
    pytest.importorskip("trl")
    from benchmarks.realworld import trl_runs
    from harness.store import RunStore

    with RunStore(store_dir).lock("trl-base-model"):
        return trl_runs.base_model(store_dir / "trl-base")

"""Fixtures: a shared run store and small real environments built for the tests."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.toy_envs  # noqa: F401 - registers harness-test/* gymnasium ids


@pytest.fixture(scope="session")
def store_dir(tmp_path_factory) -> Path:
    """One run store for the session, so healthy twins are trained once and reused."""
    return tmp_path_factory.mktemp("results")

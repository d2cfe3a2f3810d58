"""pytest plugin (entry point ``pytest11``): a labelled dataset for detector tests.

- ``--harness-dataset=PATH``: use this dataset (a results_dir or its ``dataset/`` directory);
  ``--harness-dataset=small``: a small one generated on first use and kept in pytest's cache;
  otherwise the dataset packaged with the harness (nothing is trained).
- fixture ``harness_dataset``: that dataset (``.data``, ``.runs``, ``.path``).
- ``harness.testing.assert_detects`` uses the same dataset by default.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rl-fault-harness")
    group.addoption("--harness-dataset", action="store", default=None, metavar="PATH",
                    help="labelled dataset for detector tests (a results_dir or its dataset/ dir; 'small': "
                         "generate a small one on first use and cache it); default: the one packaged with the harness")


@pytest.hookimpl(trylast=True)     # after the cache provider has set config.cache
def pytest_configure(config: pytest.Config) -> None:
    from harness import testing

    cache = getattr(config, "cache", None)
    cache = cache.mkdir("rl-fault-harness") if cache is not None else None
    testing.configure(dataset=config.getoption("--harness-dataset"), cache_dir=cache)


@pytest.fixture(scope="session")
def harness_dataset():
    from harness import testing

    return testing.default_dataset()

"""Regression-test a detector against runs with known bugs (public API; see
:mod:`harness.detection.testing`)::

    from harness.testing import assert_detects
"""

from harness.detection.testing import (
    LabelledDataset,
    assert_detects,
    configure,
    default_dataset,
    small_dataset,
)

__all__ = ["LabelledDataset", "assert_detects", "configure", "default_dataset", "small_dataset"]

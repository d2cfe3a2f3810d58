"""Signatures: named predicates over a run's metrics after a fault's onset.

A signature reduces a run's post-onset rows to one number (its *statistic*, e.g. the share of
updates whose ratio is exactly 1, or the median approx KL) and fires when that number is past a
*threshold* in its direction. Two kinds:

- exact signatures (a quantity that is exactly 0 or 1 on >= 90% of updates, a non-finite value):
  the threshold is part of the definition and never fitted;
- scale signatures (KL too high, entropy collapsed, clip fraction saturated...): the threshold
  is a default (the folk rule where one exists) that the catalogue re-fits on the healthy runs
  of a calibration half of the seeds and then reports on the held-out half (``thresholds``).

Rows where the run went non-finite are partial (the update stopped at the bad minibatch), so
only the signatures that are about non-finite values read them. Modules in this package
register signatures with :func:`signature`; :data:`SIGNATURES` is the registry
(:mod:`~harness.analysis.signatures.base` holds both and the helpers).
"""

from harness.analysis.signatures import core, llm, ppo  # noqa: F401 - each registers its signatures on import
from harness.analysis.signatures.base import (
    DIRECTIONS,
    EXACT,
    MOST,
    SIGNATURES,
    Result,
    Signature,
    evaluate,
    finite,
    fired,
    post_onset,
    share,
    share_where,
    signature,
    usable,
)

__all__ = ["DIRECTIONS", "EXACT", "MOST", "SIGNATURES", "Result", "Signature", "evaluate", "finite", "fired",
           "post_onset", "share", "share_where", "signature", "usable"]

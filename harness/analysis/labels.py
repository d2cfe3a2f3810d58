"""A stored run's label: its fault or ``healthy``, or one of the labels kept out of the diagnosis's
classes (the run stays in the dataset and its datasheet, but neither trains nor scores the model):

- ``not_learning``: a healthy run whose configuration does not learn in its setup
  (:mod:`harness.analysis.learning`);
- ``inert``: a faulty run whose bug changes nothing under its configuration
  (:meth:`faults.base.Fault.inert`: a KL term's sign flipped while beta = 0 computes and logs exactly
  what its healthy twin does). Training the model on it as the fault teaches it that the fault looks
  healthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faults import FAULTS
from harness.analysis.learning import HEALTHY, NOT_LEARNING
from harness.config import ConfigError

INERT = "inert"
#: labels of stored runs that are neither a class of the model nor scored as one
UNLABELLED = (NOT_LEARNING, INERT)


def inert_reason(meta: Mapping[str, Any]) -> str | None:
    """Why the run's fault changes nothing under the configuration it ran with, or None (healthy
    runs, faults that act, a fault name or parameters this code no longer knows)."""
    name = meta.get("fault", "none")
    if name == "none" or name not in FAULTS:
        return None
    try:
        fault = FAULTS[name](**(meta.get("fault_params") or {}))
    except (TypeError, ConfigError):
        return None
    return fault.inert(meta["hyperparameters"]["configured"])


def label(meta: Mapping[str, Any], learns: bool | None) -> str:
    """The label of a stored run (``meta``: its meta.json; ``learns``: its learning criterion)."""
    if meta["fault"] != "none":
        return INERT if inert_reason(meta) else meta["fault"]
    return NOT_LEARNING if learns is False else HEALTHY

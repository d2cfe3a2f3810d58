"""The signature registry, the result type, and the helpers signature modules share."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

EXACT = 1e-6     # |r - 1| below this is "exactly 1" (allows recompute rounding, verl#2305)
MOST = 0.9       # share of updates that "always" means (tolerates an onset transient)

#: how a statistic is compared with the threshold
DIRECTIONS: dict[str, Callable[[float, float], bool]] = {
    "above": lambda v, t: v > t,
    "at_least": lambda v, t: v >= t,
    "below": lambda v, t: v < t,
    "at_most": lambda v, t: v <= t,
}


@dataclass(frozen=True)
class Result:
    fired: bool
    evidence: str
    value: float = math.nan        # the statistic (NaN when the rows cannot tell)
    evaluable: bool = True         # False when the metric is absent or there are no usable rows


@dataclass(frozen=True)
class Signature:
    name: str
    description: str
    metric: str                    # the metric it reads (what to plot to see it)
    statistic: Callable[[pd.DataFrame, dict[str, Any]], tuple[float, str]]
    threshold: float
    direction: str                 # a key of DIRECTIONS
    calibrated: bool               # a scale signature whose threshold the catalogue fits
    reads_nonfinite: bool = False  # it is about non-finite values: it reads the partial rows too

    def check(self, post: pd.DataFrame, meta: dict[str, Any], threshold: float | None = None) -> Result:
        rows = post if self.reads_nonfinite else usable(post)
        if rows.empty:
            return Result(False, "no usable updates after onset", evaluable=False)
        if not self.reads_nonfinite and self.metric in rows and rows[self.metric].isna().all():
            return Result(False, f"{self.metric}: not recorded", evaluable=False)
        value, evidence = self.statistic(rows, meta)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return Result(False, evidence, evaluable=False)
        limit = self.threshold if threshold is None else threshold
        return Result(bool(DIRECTIONS[self.direction](value, limit)), evidence, float(value))


SIGNATURES: dict[str, Signature] = {}


def signature(name: str, metric: str, description: str, *, threshold: float, direction: str,
              calibrated: bool = False, reads_nonfinite: bool = False):
    """Register ``fn(post_rows, meta) -> (statistic, evidence)`` as a signature."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}; valid: {', '.join(DIRECTIONS)}")

    def register(fn: Callable[[pd.DataFrame, dict[str, Any]], tuple[float, str]]):
        if name in SIGNATURES:
            raise ValueError(f"signature {name!r} registered twice")
        SIGNATURES[name] = Signature(name, description, metric, fn, threshold, direction, calibrated,
                                     reads_nonfinite)
        return fn
    return register


# ---- helpers for signature modules -------------------------------------------------------

def share(mask: pd.Series) -> float:
    """The share of True in a boolean series (NaN when it is empty)."""
    return float(mask.mean()) if len(mask) else math.nan


def finite(col: pd.Series) -> pd.Series:
    return col[np.isfinite(col)]


def generating(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of steps that generate. A per-step log that carries the reward on only some rows (TRL
    logs a generation's rewards on the optimizer step that generates it; the other steps reuse that
    batch) gives those rows; any other log gives all rows."""
    if "reward_mean" not in rows:
        return rows
    logged = rows["reward_mean"].notna().to_numpy()
    return rows if logged.all() or not logged.any() else rows[logged]


def share_where(rows: pd.DataFrame, metric: str, test: Callable[[pd.Series], pd.Series],
                what: str) -> tuple[float, str]:
    """The share of updates (with a finite ``metric``) where ``test`` holds."""
    col = finite(rows[metric])
    if col.empty:
        return math.nan, f"{metric}: no finite values"
    rate = share(test(col))
    return rate, f"{what} on {rate:.0%} of {len(col)} updates"


def usable(metrics: pd.DataFrame) -> pd.DataFrame:
    """Rows of complete updates (a run that went non-finite stopped part-way through its last); the
    frame itself when every row is complete (no copy: callers only read it)."""
    if "nonfinite" not in metrics:
        return metrics
    partial = metrics["nonfinite"].to_numpy() == 1
    return metrics[~partial] if partial.any() else metrics


def post_onset(metrics: pd.DataFrame, onset: int, window: int | None = None) -> pd.DataFrame:
    """Rows from ``onset`` on; with ``window``, only the first ``window`` updates from the onset
    (so a healthy run is compared with a faulty one over the same updates)."""
    rows = metrics[metrics["update"] >= onset]
    if window is not None:
        rows = rows[rows["update"] < onset + window]
    return rows


def evaluate(metrics: pd.DataFrame, meta: dict[str, Any], onset: int | None = None,
             names: list[str] | None = None, thresholds: dict[str, float] | None = None,
             window: int | None = None) -> dict[str, Result]:
    """Every signature (or ``names``) on the rows from ``onset`` (default: the run's own), with
    ``thresholds`` overriding the defaults (a catalogue's calibrated ones)."""
    if onset is None:
        onset = meta.get("onset_update") or 0
    post = post_onset(metrics, onset, window)
    thresholds = thresholds or {}
    out = {}
    for name in names or SIGNATURES:
        if post.empty:
            out[name] = Result(False, "no updates after onset", evaluable=False)
        else:
            out[name] = SIGNATURES[name].check(post, meta, thresholds.get(name))
    return out


def fired(metrics: pd.DataFrame, meta: dict[str, Any], onset: int | None = None,
          thresholds: dict[str, float] | None = None) -> list[str]:
    return [name for name, res in evaluate(metrics, meta, onset, thresholds=thresholds).items() if res.fired]


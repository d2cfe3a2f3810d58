"""Window features of a training log, the input of the diagnosis model.

A log is a canonical frame (one row per training step as the framework logged it, NaN where it
does not log a metric; :mod:`harness.logs`). Its features describe each metric over the whole
log and over its first and last thirds (a fault switched on mid-run changes the last part), the
share of exactly-zero and non-finite values, the trend of the progress metric, every signature's
statistic, and, when the user's configuration is known, the hyperparameters and how the logged
values relate to them. Nothing here reads a label: the features of a stored run are exactly those
of its exported log.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import signatures
from harness.config import ALGO_SCHEMAS

#: per-metric statistics (names are ``<metric>:<stat>``)
STATS = ("present", "median", "first", "last", "min", "max", "spread", "zero", "nonfinite", "trend")
#: configured hyperparameters used as context when known (NaN otherwise)
CONFIG_KEYS = tuple(dict.fromkeys(k for schema in ALGO_SCHEMAS.values() for k in schema.VISIBLE
                                  if k not in ("scale", "loss_agg", "hidden")))


def _thirds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(values)
    k = max(1, n // 3)
    return values[:k], values[n - k:]


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else math.nan


def metric_features(name: str, column: pd.Series | None) -> dict[str, float]:
    out = {f"{name}:{s}": math.nan for s in STATS}
    if column is None:
        out[f"{name}:present"] = 0.0
        return out
    raw = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    logged = raw[~np.isnan(raw) | np.isinf(raw)]     # NaN = not logged at that step
    if len(logged) == 0:
        out[f"{name}:present"] = 0.0
        return out
    finite = logged[np.isfinite(logged)]
    first, last = _thirds(finite)
    out.update({
        f"{name}:present": 1.0,
        f"{name}:nonfinite": float(np.mean(~np.isfinite(logged))),
    })
    if len(finite):
        med_first, med_last = _median(first), _median(last)
        scale = abs(med_first) + abs(med_last)
        out.update({
            f"{name}:median": _median(finite), f"{name}:first": med_first, f"{name}:last": med_last,
            f"{name}:min": float(finite.min()), f"{name}:max": float(finite.max()),
            f"{name}:spread": float(finite.max() - finite.min()),
            f"{name}:zero": float(np.mean(finite == 0)),
            f"{name}:trend": (med_last - med_first) / scale if scale > 0 else 0.0,
        })
    return out


def signature_features(frame: pd.DataFrame, algo: str, action_space: Mapping[str, Any] | None,
                       optimizer_steps: int | None) -> dict[str, float]:
    """Every signature's statistic on the whole log (NaN where it cannot be evaluated)."""
    meta: dict[str, Any] = {"algo": algo, "action_space": dict(action_space or {})}
    if optimizer_steps:
        meta["configured_optimizer_steps"] = optimizer_steps
    rows = frame if "nonfinite" in frame else frame.assign(nonfinite=0.0)
    out = {}
    for name, res in signatures.evaluate(rows, meta, onset=0).items():
        value = res.value if res.evaluable else math.nan
        out[f"sig:{name}"] = float(np.clip(value, -1e12, 1e12)) if math.isfinite(value) or math.isnan(value) \
            else (1e12 if value > 0 else -1e12)
    return out


def config_features(frame: pd.DataFrame, config: Mapping[str, Any] | None) -> dict[str, float]:
    """The configured hyperparameters (NaN when unknown) and what the log says about them."""
    config = dict(config or {})
    out = {f"cfg:{k}": _number(config.get(k)) for k in CONFIG_KEYS}
    out["cfg:known"] = 1.0 if config else 0.0
    logged_lr, logged_clip = _logged(frame, "lr"), _logged(frame, "clip_range")
    out["cfg:lr_logged_over_configured"] = _ratio(logged_lr, _number(config.get("lr")))
    out["cfg:clip_logged_over_configured"] = _ratio(logged_clip, _number(config.get("clip_range")))
    epochs = _number(config.get("n_epochs", config.get("num_iterations")))
    minibatches = _number(config.get("n_minibatches"))
    out["cfg:optimizer_steps_over_configured"] = _ratio(_logged(frame, "optimizer_steps"), epochs * minibatches)
    return out


def _logged(frame: pd.DataFrame, name: str) -> float:
    if name not in frame:
        return math.nan
    col = pd.to_numeric(frame[name], errors="coerce").replace([np.inf, -np.inf], np.nan).dropna()
    return float(col.median()) if len(col) else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b != 0 else math.nan


def _number(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def features(frame: pd.DataFrame, metrics: Sequence[str], algo: str, config: Mapping[str, Any] | None = None,
             action_space: Mapping[str, Any] | None = None) -> dict[str, float]:
    """The feature vector of one log (a canonical frame) as a name -> value dict."""
    out: dict[str, float] = {"log:steps": float(len(frame))}
    for name in metrics:
        out.update(metric_features(name, frame[name] if name in frame else None))
    config = dict(config or {})
    epochs = _number(config.get("n_epochs", config.get("num_iterations")))
    minibatches = _number(config.get("n_minibatches"))
    steps = int(epochs * minibatches) if math.isfinite(epochs * minibatches) else None
    out.update(signature_features(frame, algo, action_space, steps))
    out.update(config_features(frame, config))
    return out

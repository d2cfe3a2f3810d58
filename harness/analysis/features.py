"""Window features of a training log, the input of the diagnosis model.

A log is a canonical frame (one row per training step as the framework logged it, NaN where it
does not log a metric; :mod:`harness.logs`). Its features describe each metric over the whole log
and over windows defined by *fractions* of the log (the first, middle and last fifth), so a
16-update log and a 1000-update log of the same run are described alike; quantities on a small
positive scale (learning rate, approx KL, clip fraction, gradient norm, KL to the reference...)
also by their log10, because a plain (or sign-log1p) value cannot tell 1e-6 from 1e-3; the share
of exactly-zero values and of steps that repeat the previous value exactly; every signature's
statistic; and, when the user's configuration is known, the hyperparameters and how the logged
values relate to them (KL per unit learning rate, optimizer steps per update against epochs x
minibatches, logged against configured learning rate and clip range, gradient norm against the
clipping norm, TRL's reward-row cadence against num_iterations). Nothing here reads a label: the
features of a stored run are exactly those of its exported log. The log's length is not a
feature (training and real logs differ in length for reasons that say nothing about bugs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import signatures
from harness.config import ALGO_SCHEMAS
from harness.metrics import CANONICAL

#: bump when the features change: cached examples are recomputed
FEATURE_VERSION = 2
#: windows of the log, as fractions of its rows: head, middle, tail
WINDOWS: dict[str, tuple[float, float]] = {"head": (0.0, 0.2), "mid": (0.4, 0.6), "tail": (0.8, 1.0)}
#: per-metric statistics (names are ``<metric>:<stat>``)
STATS = ("present", "median", "head", "mid", "tail", "min", "max", "spread", "zero", "const", "nonfinite", "trend")
#: metrics on a small positive scale, also described by log10 of their absolute value (``<metric>:log_<stat>``)
LOG_SCALE = ("lr", "approx_kl", "clipfrac", "clipfrac_binding", "clip_low_frac", "clip_high_frac", "grad_norm",
             "grad_norm_max", "param_delta", "ratio_dev_max", "kl_ref", "kl_sampler", "sampler_logp_diff_mean",
             "sampler_logp_diff_max", "sampler_ratio_oob", "value_loss", "adv_std", "reward_std",
             "group_reward_std_mean", "entropy", "response_clip_ratio", "frac_reward_zero_std", "clip_range")
LOG_STATS = ("median", "head", "tail", "min", "max")
LOG_FLOOR = 1e-12          # log10 of an exact 0 (the zero share says how many were)
#: configured hyperparameters used as context when known (NaN otherwise); not the string-valued ones, nor
#: stop_at_close, which no framework's log records
CONFIG_KEYS = tuple(dict.fromkeys(k for schema in ALGO_SCHEMAS.values() for k in schema.VISIBLE
                                  if k not in ("scale", "baseline", "loss_agg", "hidden", "stop_at_close")))
#: configured values on a small positive scale, also as log10
CONFIG_LOG = ("lr", "max_grad_norm", "target_kl", "clip_range", "beta", "ent_coef", "adv_eps")
MIN_ROWS = 5               # a log with fewer training steps is too short to judge


def window(values: np.ndarray, name: str) -> np.ndarray:
    """The rows of ``values`` in window ``name`` (:data:`WINDOWS`), at least one."""
    lo, hi = WINDOWS[name]
    n = len(values)
    start = min(int(math.floor(lo * n)), n - 1)
    stop = max(int(math.ceil(hi * n)), start + 1)
    return values[start:stop]


def _median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else math.nan


def _log10(values: np.ndarray) -> np.ndarray:
    return np.log10(np.maximum(np.abs(values), LOG_FLOOR))


def metric_features(name: str, column: pd.Series | None) -> dict[str, float]:
    """One metric's statistics over the log's steps that logged it (NaN = not logged at that step)."""
    out = {f"{name}:{s}": math.nan for s in STATS}
    if name in LOG_SCALE:
        out.update({f"{name}:log_{s}": math.nan for s in LOG_STATS})
    raw = None if column is None else pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    logged = np.array([]) if raw is None else raw[~np.isnan(raw) | np.isinf(raw)]
    out[f"{name}:present"] = float(len(logged) > 0)
    if len(logged) == 0:
        return out
    finite = logged[np.isfinite(logged)]
    out[f"{name}:nonfinite"] = float(np.mean(~np.isfinite(logged)))
    if len(finite) == 0:
        return out
    head, mid, tail = (_median(window(finite, w)) for w in WINDOWS)
    scale = abs(head) + abs(tail)
    out.update({
        f"{name}:median": _median(finite), f"{name}:head": head, f"{name}:mid": mid, f"{name}:tail": tail,
        f"{name}:min": float(finite.min()), f"{name}:max": float(finite.max()),
        f"{name}:spread": float(finite.max() - finite.min()),
        f"{name}:zero": float(np.mean(finite == 0)),
        f"{name}:const": float(np.mean(finite[1:] == finite[:-1])) if len(finite) > 1 else math.nan,
        f"{name}:trend": (tail - head) / scale if scale > 0 else 0.0,
    })
    if name in LOG_SCALE:
        lg = _log10(finite)
        out.update({f"{name}:log_median": _median(lg), f"{name}:log_head": _median(window(lg, "head")),
                    f"{name}:log_tail": _median(window(lg, "tail")), f"{name}:log_min": float(lg.min()),
                    f"{name}:log_max": float(lg.max())})
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


def configured_steps(config: Mapping[str, Any]) -> float:
    """Optimizer steps the configuration takes per batch: epochs (PPO) or iterations (GRPO) x
    minibatches; NaN when unknown."""
    return as_number(config.get("n_epochs", config.get("num_iterations"))) * as_number(config.get("n_minibatches"))


def config_features(frame: pd.DataFrame, config: Mapping[str, Any] | None, view: str = "canonical") -> dict[str, float]:
    """The configured hyperparameters (NaN when unknown; small-scale ones also as log10) and what the
    log says about them (``rel:``): logged over configured learning rate and clip range, optimizer
    steps per update over epochs x minibatches, approx KL per unit learning rate, gradient norm over
    the clipping norm, and (TRL, one row per optimizer step) the share of rows that carry a
    generation's rewards over what num_iterations x minibatches imply."""
    config = dict(config or {})
    out = {f"cfg:{k}": as_number(config.get(k)) for k in CONFIG_KEYS}
    for k in CONFIG_LOG:
        out[f"cfg:log_{k}"] = _log_number(as_number(config.get(k)))
    for k in ("ent_coef", "beta"):
        v = as_number(config.get(k))
        out[f"cfg:{k}_negative"] = float(v < 0) if math.isfinite(v) else math.nan
    out["cfg:known"] = 1.0 if config else 0.0
    steps = configured_steps(config)
    out["cfg:log2_steps"] = math.log2(steps) if math.isfinite(steps) and steps > 0 else math.nan
    lr = _logged(frame, "lr")
    lr = lr if math.isfinite(lr) else as_number(config.get("lr"))
    out["rel:log_lr_logged_over_configured"] = _log_ratio(_logged(frame, "lr"), as_number(config.get("lr")))
    out["rel:log_clip_logged_over_configured"] = _log_ratio(_logged(frame, "clip_range"),
                                                            as_number(config.get("clip_range")))
    out["rel:steps_logged_over_configured"] = _ratio(_logged(frame, "optimizer_steps"), steps)
    out["rel:log_kl_per_lr"] = _log_ratio(_logged(frame, "approx_kl"), lr, floor=True)
    out["rel:log_grad_over_clip"] = _log_ratio(_logged(frame, "grad_norm"), as_number(config.get("max_grad_norm")),
                                               floor=True)
    out["rel:reward_rows_over_expected"] = math.nan
    if view == "trl" and "reward_mean" in frame and len(frame) and math.isfinite(steps):
        share = float(pd.to_numeric(frame["reward_mean"], errors="coerce").notna().mean())
        out["rel:reward_rows_over_expected"] = share * steps
    return out


def _logged(frame: pd.DataFrame, name: str) -> float:
    if name not in frame:
        return math.nan
    col = pd.to_numeric(frame[name], errors="coerce").replace([np.inf, -np.inf], np.nan).dropna()
    return float(col.median()) if len(col) else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b != 0 else math.nan


def _log_number(v: float) -> float:
    return math.log10(max(abs(v), LOG_FLOOR)) if math.isfinite(v) else math.nan


def _log_ratio(a: float, b: float, floor: bool = False) -> float:
    """log10(a / b) of two positive scales (``floor``: an exact 0 in ``a`` counts as LOG_FLOOR)."""
    if not (math.isfinite(a) and math.isfinite(b)) or b == 0 or (a == 0 and not floor):
        return math.nan
    return _log_number(a) - _log_number(b)


def as_number(value: Any) -> float:
    """A setting's value as a float (NaN when it is not a number)."""
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def features(frame: pd.DataFrame, metrics: Sequence[str], algo: str, config: Mapping[str, Any] | None = None,
             action_space: Mapping[str, Any] | None = None, view: str = "canonical") -> dict[str, float]:
    """The feature vector of one log (a canonical frame) as a name -> value dict; ``view`` is the
    framework view the log is in (its cadence matters to a few features)."""
    out: dict[str, float] = {}
    missing = [m for m in CANONICAL if m not in frame]
    if missing:                  # a metric the log does not have is NaN, as in a canonical frame
        frame = pd.concat([frame, pd.DataFrame(np.nan, index=frame.index, columns=missing)], axis=1)
    for name in metrics:
        out.update(metric_features(name, frame[name] if name in frame else None))
    config = dict(config or {})
    steps = configured_steps(config)
    out.update(signature_features(frame, algo, action_space, int(steps) if math.isfinite(steps) else None))
    out.update(config_features(frame, config, view))
    return out

"""Exact evidence: what a healthy run of the configuration read from the log cannot produce.

Each item is a predicate over a log (its canonical frame and the configuration read with it) that
is True, False, or None when the log or its configuration cannot tell (the metric is not logged,
the setting is unknown). They are the things an expert reads first: the importance ratio exactly 1
(approx_kl or clip fraction exactly 0) while the configuration takes more than one optimizer step
per batch; the reward exactly 0; the gradient exactly 0; the KL to the reference exactly 0 while
beta > 0; every group's rewards identical; fewer optimizer steps than configured without a
target_kl; the KL early stop ending nearly every update when one is set; (TRL) the reward logged
on more optimizer steps than the configuration generates on.

The diagnosis does not trust them by decree: the rate at which each item fires on every class
(healthy and each fault) is measured on the training logs of the same framework view
(:func:`rates`), and a firing item multiplies the model's probabilities by those rates
(:func:`combine`, Bayes' rule with Jeffreys-smoothed rates). An item that never fires on healthy
training logs makes "healthy" very improbable; one that fires on healthy runs too barely moves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.features import as_number, configured_steps

MOST = 0.9          # share of logged steps that "always" means (as the signatures)
EXACT_RATIO = 1e-6  # |r - 1| below this is exactly 1 (recompute rounding, verl#2305)


def _share(frame: pd.DataFrame, metric: str, test: Callable[[np.ndarray], np.ndarray]) -> float | None:
    """The share of the steps that logged ``metric`` (finite) where ``test`` holds; None if none did."""
    if metric not in frame:
        return None
    col = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
    col = col[np.isfinite(col)]
    return float(np.mean(test(col))) if len(col) else None


@dataclass(frozen=True)
class Evidence:
    name: str
    description: str
    test: Callable[[pd.DataFrame, Mapping[str, Any]], bool | None]
    #: the framework views whose logs it can be read from (None: every view)
    views: tuple[str, ...] | None = None


def _ratio_pinned(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """The ratio exactly 1 while the configuration takes more than one optimizer step per batch. Read
    from the exact quantities where the log has one (max |r - 1|, approx_kl, kl_k1: exactly 0 only
    when every sample's ratio is exactly 1); a log with none of them (TRL logs only clip ratios) is
    read from its clip fractions, which are 0 for small healthy updates too (its measured rates say
    how much weaker that is)."""
    steps = configured_steps(config)
    if not math.isfinite(steps):
        return None
    exact = [s for s in (_share(frame, "ratio_dev_max", lambda c: c <= EXACT_RATIO),
                         _share(frame, "approx_kl", lambda c: c == 0),
                         _share(frame, "kl_k1", lambda c: c == 0)) if s is not None]
    shares = exact or [s for s in (_share(frame, "clipfrac", lambda c: c == 0),
                                   _share(frame, "clipfrac_binding", lambda c: c == 0),
                                   _share(frame, "clip_low_frac", lambda c: c == 0)) if s is not None]
    if not shares:
        return None
    return steps > 1 and max(shares) >= MOST


def _reward_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    share = _share(frame, "reward_mean", lambda c: c == 0)
    if share is None:
        share = _share(frame, "return_mean", lambda c: c == 0)
    return None if share is None else share >= MOST


def _grad_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    share = _share(frame, "grad_norm", lambda c: c == 0)
    return None if share is None else share >= MOST


def _kl_ref_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    beta = float(config["beta"]) if isinstance(config.get("beta"), (int, float)) else math.nan
    share = _share(frame, "kl_ref", lambda c: c == 0)
    if share is None or not math.isfinite(beta):
        return None
    return beta > 0 and share >= MOST


def _groups_uniform(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    share = _share(frame, "frac_reward_zero_std", lambda c: c == 1)
    return None if share is None else share >= MOST


def _steps_short(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """Fewer optimizer steps logged (or inferred from a counter: SB3's train/n_updates x minibatches)
    than the configured epochs x minibatches on >= 90% of updates, while no target_kl is configured:
    only an early stop on the KL can end a healthy update's epochs early. None when the log has no
    step count, the configuration is unknown or it sets target_kl."""
    steps = configured_steps(config)
    if not math.isfinite(steps) or config.get("target_kl") is not None:
        return None
    share = _share(frame, "optimizer_steps", lambda c: c < steps - 0.5)
    return None if share is None else share >= MOST


def _kl_stops_every_update(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """With a target_kl configured, the KL early stop ended (nearly) every update: fewer optimizer
    steps than epochs x minibatches on >= 90% of updates where the log counts steps (SB3's
    train/n_updates), else the logged approx_kl above target_kl on >= 90% of updates (CleanRL's
    ``approx_kl`` is the last minibatch's, the one its epoch-end check compares with target_kl; SB3's
    minibatch check stops at 1.5 x target_kl, above it too). A healthy target stops some updates,
    a too-strict one stops all: how often each happens is the measured rate. None without a
    target_kl or without either quantity."""
    target = as_number(config.get("target_kl"))
    steps = configured_steps(config)
    if not math.isfinite(target) or target <= 0:
        return None
    share = _share(frame, "optimizer_steps", lambda c: c < steps - 0.5) if math.isfinite(steps) else None
    if share is None:
        share = _share(frame, "approx_kl", lambda c: c > target)
    return None if share is None else share >= MOST


def _generations_too_many(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """A log of one row per optimizer step (TRL's GRPOTrainer with logging_steps=1) whose generation
    metrics (the reward) are on more rows than the configuration generates on: TRL appends them only
    on the step that generates, once every num_iterations x steps_per_generation /
    gradient_accumulation_steps optimizer steps, so a healthy run of ``n`` steps has ceil(n / that)
    of them. Fires at >= 1.5 times that and at least 2 more. None when the rows are not one per
    optimizer step (logging_steps > 1 averages the reward into every logged row)."""
    steps = configured_steps(config)
    if not math.isfinite(steps) or steps < 1 or "reward_mean" not in frame or "step" not in frame:
        return None
    step = pd.to_numeric(frame["step"], errors="coerce").to_numpy(dtype=float)
    step = step[np.isfinite(step)]
    if len(step) < 4 or float(np.median(np.diff(step))) != 1.0:
        return None
    expected = math.ceil(len(step) / steps)
    seen = int(pd.to_numeric(frame["reward_mean"], errors="coerce").notna().sum())
    return seen >= 1.5 * expected and seen >= expected + 2


EVIDENCE: dict[str, Evidence] = {e.name: e for e in (
    Evidence("ratio_exactly_one", "the importance ratio is exactly 1 (approx_kl exactly 0; a log without it: the clip "
             "fractions exactly 0) on >= 90% of steps while the configuration takes more than one optimizer step per "
             "batch", _ratio_pinned),
    Evidence("reward_exactly_zero", "the reward (or the logged return) is exactly 0 on >= 90% of steps", _reward_zero),
    Evidence("gradient_exactly_zero", "the gradient norm is exactly 0 on >= 90% of steps", _grad_zero),
    Evidence("kl_ref_exactly_zero", "the KL to the reference is exactly 0 on >= 90% of steps while beta > 0",
             _kl_ref_zero),
    Evidence("groups_all_uniform", "every group's rewards are identical on >= 90% of steps (advantages all 0)",
             _groups_uniform),
    Evidence("optimizer_steps_short", "fewer optimizer steps per update than the configured epochs x minibatches "
             "on >= 90% of updates (SB3: train/n_updates increments x minibatches) while no target_kl is set",
             _steps_short),
    Evidence("kl_stops_every_update", "with a target_kl set, the KL early stop ended >= 90% of updates (fewer optimizer "
             "steps than epochs x minibatches; a log without step counts: the logged approx_kl above target_kl)",
             _kl_stops_every_update),
    Evidence("generations_too_many", "the reward (logged on the optimizer step that generates) is on >= 1.5x "
             "as many steps as the configuration generates on (once every num_iterations x steps_per_generation "
             "optimizer steps; one log row per step)", _generations_too_many, views=("trl",)),
)}


def report_line(name: str, item: Mapping[str, Any]) -> str:
    """One fired item of an answer's evidence report (``Answer.evidence``), as diagnose and the monitors print it."""
    rates = ", ".join(f"{c} {k}/{n}" for c, (k, n) in item["rates"].items())
    return f"evidence: {name}: {item['description']} (fired on training logs of this view: {rates})"


def observe(frame: pd.DataFrame, config: Mapping[str, Any] | None, view: str = "canonical") -> dict[str, bool | None]:
    """Each evidence item on a log in a framework ``view``: True (fires), False, or None (the log or
    its view cannot tell)."""
    config = dict(config or {})
    return {name: (ev.test(frame, config) if ev.views is None or view in ev.views else None)
            for name, ev in EVIDENCE.items()}


# ---- rates measured on training logs, and Bayes' rule ------------------------------------------------

Rates = dict[str, dict[str, tuple[int, int]]]     # evidence -> class -> (fired, evaluable)


def rates(observed: pd.DataFrame, labels: np.ndarray) -> Rates:
    """For each evidence item and class, on how many training logs it fired among those where it
    could be evaluated. ``observed``: one column per item (1.0 fired, 0.0 not, NaN cannot tell)."""
    out: Rates = {}
    for name in EVIDENCE:
        col = observed[f"ev:{name}"].to_numpy(dtype=float) if f"ev:{name}" in observed else np.full(len(labels), np.nan)
        per = {}
        for label in np.unique(labels):
            sel = (labels == label) & np.isfinite(col)
            per[str(label)] = (int(col[sel].sum()), int(sel.sum()))
        out[name] = per
    return out


def fire_rate(counts: tuple[int, int] | None) -> float:
    """P(fires | class), Jeffreys-smoothed: (k + 1/2) / (n + 1); 1/2 for a class never evaluated."""
    k, n = counts if counts is not None else (0, 0)
    return (k + 0.5) / (n + 1.0)


def combine(probs: pd.Series, fired: Mapping[str, bool | None], table: Rates) -> pd.Series:
    """The class probabilities after the evidence items that fired: P(c | x, e) proportional to
    P(c | x) P(e | c), with P(e | c) the rate measured on training logs (:func:`fire_rate`)."""
    out = probs.astype(float).copy()
    for name, value in fired.items():
        if value:
            per = table.get(name, {})
            out = out * np.array([fire_rate(per.get(str(c))) for c in out.index])
    total = float(out.sum())
    return out / total if total > 0 else probs


def combine_frame(probs: pd.DataFrame, observed: pd.DataFrame, table: Rates) -> pd.DataFrame:
    """:func:`combine` for every row: ``probs`` (logs x classes), ``observed`` (logs x ``ev:<item>``,
    aligned with ``probs``)."""
    factor = np.ones(probs.shape)
    for name in EVIDENCE:
        col = f"ev:{name}"
        if col not in observed:
            continue
        fired = observed[col].to_numpy(dtype=float) == 1.0
        if not fired.any():
            continue
        per = table.get(name, {})
        rates_row = np.array([fire_rate(per.get(str(c))) for c in probs.columns])
        factor[fired] *= rates_row
    out = probs.to_numpy(dtype=float) * factor
    total = out.sum(axis=1, keepdims=True)
    out = np.where(total > 0, out / np.where(total > 0, total, 1.0), probs.to_numpy(dtype=float))
    return pd.DataFrame(out, columns=probs.columns, index=probs.index)

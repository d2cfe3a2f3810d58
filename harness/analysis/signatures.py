"""Signatures: named predicates over a run's post-onset metrics.

Each signature looks at the rows from the fault's onset on (for a healthy run, from the
same update as the faulty run it is compared with) and answers whether it fired, with a
line of evidence. Thresholds are the folk rules where one exists, otherwise an order of
magnitude away from what healthy runs of this harness show; the catalogue measures how
often each fires on faulty runs, healthy runs and healthy look-alike controls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

EXACT = 1e-6     # |r - 1| below this is "exactly 1" (allows recompute rounding, verl#2305)
MOST = 0.9       # share of updates that "always" means (tolerates an onset transient)


@dataclass(frozen=True)
class Result:
    fired: bool
    evidence: str


@dataclass(frozen=True)
class Signature:
    name: str
    description: str
    metric: str          # the metric it reads (what to plot to see it)
    check: Callable[[pd.DataFrame, dict[str, Any]], Result]


SIGNATURES: dict[str, Signature] = {}


def signature(name: str, metric: str, description: str):
    def register(fn: Callable[[pd.DataFrame, dict[str, Any]], Result]):
        SIGNATURES[name] = Signature(name, description, metric, fn)
        return fn
    return register


def share(mask: pd.Series) -> float:
    """The share of True in a boolean series (NaN when it is empty)."""
    return float(mask.mean()) if len(mask) else math.nan


def _finite(col: pd.Series) -> pd.Series:
    return col[np.isfinite(col)]


def _share_rule(post: pd.DataFrame, metric: str, test: Callable[[pd.Series], pd.Series],
                what: str, need: float = MOST) -> Result:
    col = _finite(post[metric])
    if col.empty:
        return Result(False, f"{metric}: no finite values")
    rate = share(test(col))
    return Result(rate >= need, f"{what} on {rate:.0%} of {len(col)} updates")


@signature("ratio_pinned", "ratio_dev_max", "importance ratio exactly 1 (max |r - 1| < 1e-6) on >= 90% of updates")
def ratio_pinned(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "ratio_dev_max", lambda c: c <= EXACT, "max |r-1| <= 1e-6")


@signature("approx_kl_zero", "approx_kl", "approx_kl (k3) is 0 on >= 90% of updates")
def approx_kl_zero(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "approx_kl", lambda c: c.abs() <= 1e-9, "approx_kl == 0")


@signature("approx_kl_tiny", "approx_kl", "the policy moves but barely: median approx_kl in (1e-9, 1e-4)")
def approx_kl_tiny(post: pd.DataFrame, meta: dict) -> Result:
    col = _finite(post["approx_kl"])
    if col.empty:
        return Result(False, "approx_kl: no finite values")
    med = float(col.median())
    return Result(1e-9 < med < 1e-4, f"median approx_kl {med:.2e}")


@signature("clipfrac_zero", "clipfrac", "clip fraction exactly 0 on >= 90% of updates: clipping never acts")
def clipfrac_zero(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "clipfrac", lambda c: c == 0, "clipfrac == 0")


@signature("clipfrac_saturated", "clipfrac", "median clip fraction > 0.3 (post-training-toolkit rule; healthy ~0.03)")
def clipfrac_saturated(post: pd.DataFrame, meta: dict) -> Result:
    col = _finite(post["clipfrac"])
    med = float(col.median()) if len(col) else math.nan
    return Result(bool(med > 0.3), f"median clipfrac {med:.3f}")


@signature("optimizer_steps_short", "optimizer_steps",
           "fewer optimizer steps than configured epochs x minibatches on >= 50% of updates")
def optimizer_steps_short(post: pd.DataFrame, meta: dict) -> Result:
    configured = meta.get("configured_optimizer_steps")
    if not configured:
        return Result(False, "configured optimizer steps unknown")
    ok = post[post["nonfinite"] != 1]["optimizer_steps"]
    return _share_rule(pd.DataFrame({"s": ok}), "s", lambda c: c < configured,
                       f"optimizer_steps < {configured} (median {ok.median():.0f})", need=0.5)


@signature("reward_zero", "reward_mean", "reward is exactly 0 on every update")
def reward_zero(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "reward_mean", lambda c: c == 0, "reward_mean == 0", need=1.0)


@signature("reward_flat", "reward_mean", "reward exactly the same on every update (a constant reward function)")
def reward_flat(post: pd.DataFrame, meta: dict) -> Result:
    col = _finite(post["reward_mean"])
    if len(col) < 2:
        return Result(False, "reward_mean: fewer than 2 finite values")
    spread = float(col.max() - col.min())
    return Result(spread == 0, f"reward_mean spread {spread:.3g} over {len(col)} updates")


@signature("value_to_zero", "value_mean", "critic collapses to 0: median |value_mean| < 0.01 over the last half")
def value_to_zero(post: pd.DataFrame, meta: dict) -> Result:
    col = _finite(post["value_mean"])
    if col.empty:
        return Result(False, "value_mean: no finite values")
    med = float(col.iloc[len(col) // 2:].abs().median())
    return Result(med < 0.01, f"median |value_mean| {med:.3g} over the last half")


@signature("adv_zero", "adv_mean", "advantages identically 0 (mean and std) on >= 90% of updates")
def adv_zero(post: pd.DataFrame, meta: dict) -> Result:
    std = post["adv_std"]
    if std.isna().all():      # a log with the mean only (verl logs mean, max, min)
        return _share_rule(post, "adv_mean", lambda c: c.abs() <= 1e-9, "adv mean == 0 (no std logged)")
    both = post["adv_mean"].abs().fillna(math.inf) + std.abs().fillna(math.inf)
    return _share_rule(pd.DataFrame({"a": both}), "a", lambda c: c <= 1e-9, "adv mean and std == 0")


@signature("loss_zero", "policy_loss", "policy loss exactly 0 on >= 90% of updates")
def loss_zero(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "policy_loss", lambda c: c.abs() <= 1e-9, "policy_loss == 0")


@signature("grad_zero", "grad_norm", "gradient norm exactly 0 on >= 90% of updates")
def grad_zero(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "grad_norm", lambda c: c == 0, "grad_norm == 0")


@signature("param_frozen", "param_delta", "parameters unchanged (param_delta == 0) on >= 90% of updates")
def param_frozen(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "param_delta", lambda c: c == 0, "param_delta == 0")


@signature("kl_explodes", "approx_kl",
           "approx_kl sustained above 0.1 (median; the folk rule, healthy ~0.01) or a spike above 5 "
           "(healthy runs peak below 3; a policy that collapses after the spike has KL 0 again), or non-finite")
def kl_explodes(post: pd.DataFrame, meta: dict) -> Result:
    col = post["approx_kl"].dropna()
    if col.empty:
        return Result(False, "approx_kl: no values")
    if not np.isfinite(col).all():
        return Result(True, "approx_kl non-finite")
    med, peak = float(col.median()), float(col.max())
    return Result(med > 0.1 or peak > 5, f"median approx_kl {med:.3g}, max {peak:.3g}")


@signature("entropy_collapse", "entropy",
           "entropy over the last 5 updates < 10% of the initial policy's (discrete: ln n), "
           "or down by > 2.3 nats per action dimension from a unit Gaussian")
def entropy_collapse(post: pd.DataFrame, meta: dict) -> Result:
    col = _finite(post["entropy"])
    if col.empty:
        return Result(False, "entropy: no finite values")
    last = float(col.iloc[-5:].mean())
    space = meta.get("action_space") or {}
    if space.get("type") == "box":
        initial = space["dim"] * (0.5 + 0.5 * math.log(2 * math.pi))
        return Result(initial - last > 2.3 * space["dim"], f"entropy {initial:.3f} -> {last:.3f}")
    if space.get("type") == "discrete":
        initial = math.log(space["n"])
        return Result(last < 0.1 * initial, f"entropy ln({space['n']})={initial:.3f} -> {last:.3g}")
    initial = float(col.max())    # action space unknown (a user's log): against its own peak
    return Result(last < max(0.1 * initial, 1e-3), f"entropy peak {initial:.3g} -> {last:.3g}")


@signature("adv_nonfinite_or_huge", "adv_std",
           "advantages non-finite; for GRPO also their std > 10 (group-normalised advantages have std ~1)")
def adv_nonfinite_or_huge(post: pd.DataFrame, meta: dict) -> Result:
    bad = ~np.isfinite(post["adv_mean"]) | ~np.isfinite(post["adv_std"])
    if meta.get("algo") == "grpo":
        bad |= post["adv_std"] > 10
    n = int(bad.sum())
    return Result(n > 0, f"{n} update(s) with non-finite or huge advantages")


@signature("groups_uniform", "frac_reward_zero_std", "GRPO: every group's rewards equal (frac_reward_zero_std == 1) on >= 90% of updates")
def groups_uniform(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "frac_reward_zero_std", lambda c: c == 1, "frac_reward_zero_std == 1")


@signature("kl_ref_zero", "kl_ref", "GRPO: KL to the reference exactly 0 on >= 90% of updates")
def kl_ref_zero(post: pd.DataFrame, meta: dict) -> Result:
    return _share_rule(post, "kl_ref", lambda c: c.abs() <= 1e-9, "kl_ref == 0")


@signature("kl_ref_explodes", "kl_ref", "GRPO: KL to the reference exceeds 20 per token (healthy runs peak below ~8)")
def kl_ref_explodes(post: pd.DataFrame, meta: dict) -> Result:
    col = post["kl_ref"].dropna()
    if col.empty:
        return Result(False, "kl_ref: no values")
    peak = float(col.max()) if np.isfinite(col).all() else math.inf
    return Result(peak > 20, f"max kl_ref {peak:.3g}")


@signature("nonfinite", "nonfinite", "a loss, gradient or parameter became NaN/Inf")
def nonfinite(post: pd.DataFrame, meta: dict) -> Result:
    bad = int((post["nonfinite"] == 1).sum())
    where = f" at update {int(post.loc[post['nonfinite'] == 1, 'update'].iloc[0])}" if bad else ""
    return Result(bad > 0, f"{bad} non-finite update(s){where}")


def post_onset(metrics: pd.DataFrame, onset: int) -> pd.DataFrame:
    return metrics[metrics["update"] >= onset]


def evaluate(metrics: pd.DataFrame, meta: dict, onset: int | None = None,
             names: list[str] | None = None) -> dict[str, Result]:
    """Every signature (or ``names``) on the rows from ``onset`` (default: the run's own)."""
    if onset is None:
        onset = meta.get("onset_update") or 0
    post = post_onset(metrics, onset)
    out = {}
    for name in names or SIGNATURES:
        if post.empty:
            out[name] = Result(False, "no updates after onset")
        else:
            out[name] = SIGNATURES[name].check(post, meta)
    return out


def fired(metrics: pd.DataFrame, meta: dict, onset: int | None = None) -> list[str]:
    return [name for name, res in evaluate(metrics, meta, onset).items() if res.fired]

"""Signatures for the PPO fault library: trends of the return, the value fit and loss scales,
the learning-rate schedule's first step, and telemetry that contradicts itself.

Trend statistics are Spearman rank correlations (scipy-free: pandas' ``rank`` then Pearson), so
they read the same on any reward scale; ratio statistics compare a run with itself, so they need
no healthy reference. The exact ones test relations that hold by definition in correct code (a
clip fraction is a fraction; some sample moved past the clip range, so the clip fraction is not 0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.signatures.base import MOST, finite, share_where, signature

MIN_ROWS = 5    # fewer post-onset updates than this cannot show a trend


def spearman(x: pd.Series, y: pd.Series) -> float:
    """Spearman's rank correlation over the rows where both are finite (NaN if < MIN_ROWS or constant)."""
    both = pd.DataFrame({"x": x, "y": y}).replace([np.inf, -np.inf], np.nan).dropna()
    if len(both) < MIN_ROWS or both["x"].nunique() < 2 or both["y"].nunique() < 2:
        return math.nan
    return float(both["x"].rank().corr(both["y"].rank()))


@signature("return_falls", "return_mean",
           "the episode return trends down after onset (Spearman rank correlation with the update below -0.5)",
           threshold=-0.5, direction="below", calibrated=True)
def return_falls(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    rho = spearman(post["update"], post["return_mean"])
    return rho, f"Spearman(update, return_mean) {rho:.2f}"


@signature("return_vs_length_anticorrelated", "return_mean",
           "the learner's return rises as episodes get shorter (Spearman(return_mean, length_mean) below -0.5): "
           "on a survival task, a reward of the wrong sign", threshold=-0.5, direction="below", calibrated=True)
def return_vs_length_anticorrelated(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    rho = spearman(post["return_mean"], post["length_mean"])
    return rho, f"Spearman(return_mean, length_mean) {rho:.2f}"


@signature("reward_diluted", "reward_mean",
           "the mean reward per trained step is below the finished episodes' reward per step "
           "(median of reward_mean x length_mean / return_mean below 0.999): transitions that are not in any "
           "episode, e.g. autoreset steps, are trained on", threshold=0.999, direction="below", calibrated=True)
def reward_diluted(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    ratio = post["reward_mean"] * post["length_mean"] / post["return_mean"].where(post["return_mean"] != 0)
    col = finite(ratio)
    if col.empty:
        return math.nan, "no updates with finished episodes and a non-zero return"
    med = float(col.median())
    return med, f"median reward_mean x length_mean / return_mean {med:.4f}"


@signature("value_loss_high_at_time_limit", "value_loss",
           "when every episode runs to the longest length seen (updates whose length_mean is the run's maximum: "
           "a time limit; at least 3), the critic still does not fit: median value_loss there above 0.5 x the "
           "run's median (a healthy critic settles once the return plateaus)", threshold=0.5, direction="above",
           calibrated=True)
def value_loss_high_at_time_limit(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    rows = post[np.isfinite(post["length_mean"]) & np.isfinite(post["value_loss"])]
    at_limit = rows[rows["length_mean"] == rows["length_mean"].max()] if len(rows) else rows
    if len(at_limit) < 3:
        return math.nan, f"{len(at_limit)} updates with every episode at the longest length (need 3)"
    overall = float(rows["value_loss"].median())
    if overall <= 0:
        return math.nan, "value_loss is 0"
    there = float(at_limit["value_loss"].median())
    return there / overall, (f"median value_loss {there:.3g} on {len(at_limit)} updates at length "
                             f"{at_limit['length_mean'].iloc[0]:.0f}, {overall:.3g} overall")


@signature("explained_variance_negative", "explained_variance",
           "the critic predicts the returns worse than their mean: median explained variance below -1",
           threshold=-1.0, direction="below", calibrated=True)
def explained_variance_negative(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["explained_variance"])
    med = float(col.median()) if len(col) else math.nan
    return med, f"median explained_variance {med:.3g}"


@signature("vf_coef_effective_high", "loss",
           "the value loss enters the total loss with a coefficient above 5 (median of (loss - policy_loss) / "
           "value_loss; CleanRL and SB3 use 0.5)", threshold=5.0, direction="above", calibrated=True)
def vf_coef_effective_high(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    coef = (post["loss"] - post["policy_loss"]) / post["value_loss"].where(post["value_loss"] > 0)
    col = finite(coef)
    if col.empty:
        return math.nan, "value_loss: no positive values"
    med = float(col.median())
    return med, f"median (loss - policy_loss) / value_loss {med:.3g}"


@signature("value_loss_huge", "value_loss", "median value_loss above 1e4: returns on a scale the critic cannot fit",
           threshold=1e4, direction="above", calibrated=True)
def value_loss_huge(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["value_loss"])
    med = float(col.median()) if len(col) else math.nan
    return med, f"median value_loss {med:.3g}"


@signature("grad_norm_small", "grad_norm", "median pre-clip gradient norm below 10 (gradients scaled down)",
           threshold=10.0, direction="below", calibrated=True)
def grad_norm_small(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["grad_norm"])
    med = float(col.median()) if len(col) else math.nan
    return med, f"median grad_norm {med:.3g}"


@signature("first_update_frozen", "param_delta",
           "the first update after onset leaves every parameter unchanged (param_delta == 0) while later updates "
           "move them: a learning rate of 0 on the first step", threshold=1.0, direction="at_least")
def first_update_frozen(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = post["param_delta"]
    if len(col) < 2 or not np.isfinite(col.iloc[0]):
        return math.nan, "param_delta: fewer than 2 updates"
    later = float(col.iloc[1:].median())
    frozen = col.iloc[0] == 0 and later > 0
    return float(frozen), f"param_delta {col.iloc[0]:.3g} at the first update, median {later:.3g} after"


@signature("clipfrac_impossible", "clipfrac", "the clip fraction exceeds 1 on some update (it is a fraction)",
           threshold=1.0, direction="above")
def clipfrac_impossible(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["clipfrac"])
    peak = float(col.max()) if len(col) else math.nan
    return peak, f"max clipfrac {peak:.3g}"


@signature("clipfrac_inconsistent", "clipfrac",
           "clip fraction exactly 0 on >= 90% of the updates where some ratio left the clip range "
           "(ratio_dev_max > clip_range), which cannot happen when it is computed from the ratio",
           threshold=MOST, direction="at_least")
def clipfrac_inconsistent(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    moved = post[post["ratio_dev_max"] > post["clip_range"]]
    if len(moved) < 3:
        return math.nan, f"{len(moved)} updates with a ratio past the clip range (need 3)"
    rate, what = share_where(moved, "clipfrac", lambda c: c == 0, "clipfrac == 0")
    return rate, f"{what} with ratio_dev_max > clip_range"

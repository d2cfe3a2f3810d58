"""Signatures of LLM-RL GRPO faults: the sampler/trainer gap, ratios against the wrong
denominator, KL to a reference that is not frozen, reward functions that never pay, and
completions cut at the length limit.

Thresholds anchored on published gates where there are some: TRL's
``sampling/sampling_logp_difference/mean`` read 0.010-0.018 healthy vs 0.201 with stale sampler
weights (trl#5312); NeMo-RL gates ``mean(gen_kl_error) < 0.01``; 3.7-7.5% of tokens outside
[0.9, 1.1] is what a healthy fp32/bf16 trainer shows in trl#6789.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.signatures.base import MOST, finite, share_where, signature
from harness.metrics import REWARD_FN_PREFIX


def _median(post: pd.DataFrame, metric: str) -> tuple[float, str]:
    col = finite(post[metric]) if metric in post else pd.Series(dtype=float)
    if col.empty:
        return math.nan, f"{metric}: no finite values"
    med = float(col.median())
    return med, f"median {metric} {med:.3g}"


@signature("sampler_mismatch_high", "sampler_logp_diff_mean",
           "GRPO: median |logp_sampler - logp_trainer| above 0.05 nats per token (trl#5312: 0.015 healthy, "
           "0.201 with stale sampler weights)", threshold=0.05, direction="above", calibrated=True)
def sampler_mismatch_high(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return _median(post, "sampler_logp_diff_mean")


@signature("sampler_mismatch_grows", "sampler_logp_diff_mean",
           "GRPO: the sampler/trainer log-prob gap grows: its mean over the last third of the updates after onset "
           "is more than 3x that over the first third (stale weights drift; numeric mismatch stays level)",
           threshold=3.0, direction="above", calibrated=True)
def sampler_mismatch_grows(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["sampler_logp_diff_mean"]) if "sampler_logp_diff_mean" in post else pd.Series(dtype=float)
    if len(col) < 6:
        return math.nan, "sampler_logp_diff_mean: fewer than 6 finite values"
    third = len(col) // 3
    first, last = float(col.iloc[:third].mean()), float(col.iloc[-third:].mean())
    growth = last / first if first > 0 else (math.inf if last > 0 else math.nan)
    return growth, f"sampler_logp_diff_mean {first:.3g} (first third) -> {last:.3g} (last third)"


@signature("sampler_ratio_tails", "sampler_ratio_oob",
           "GRPO: median share of tokens whose sampler/trainer ratio is outside [0.9, 1.1] above 10% (trl#6789: "
           "3.7% fp32, 7.5% bf16 trainer)", threshold=0.1, direction="above", calibrated=True)
def sampler_ratio_tails(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return _median(post, "sampler_ratio_oob")


@signature("kl_sampler_high", "kl_sampler",
           "GRPO: median k3 KL between sampler and trainer above 0.01 (NeMo-RL's CI gate on gen_kl_error)",
           threshold=0.01, direction="above", calibrated=True)
def kl_sampler_high(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return _median(post, "kl_sampler")


@signature("ratio_explodes", "ratio_max",
           "the importance ratio's maximum after onset above 100 (non-finite counts): a ratio against the wrong "
           "denominator, or off-policy samples with no correction", threshold=100.0, direction="above",
           calibrated=True, reads_nonfinite=True)
def ratio_explodes(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = post["ratio_max"].dropna()
    if col.empty:
        return math.nan, "ratio_max: no values"
    if not np.isfinite(col).all():
        return math.inf, "ratio_max non-finite"
    peak = float(col.max())
    return peak, f"max ratio_max {peak:.3g}"


def _token_grpo(meta: dict) -> bool:
    """GRPO on token tasks: a run that moves away from its warm-up start (a high-dimensional
    Gaussian generator at a healthy learning rate barely moves: its KL quotients are noise)."""
    return meta.get("algo") == "grpo" and (meta.get("action_space") or {}).get("type") != "box"


def _kl_quotient(post: pd.DataFrame, meta: dict, num: str, den: str) -> tuple[float, str]:
    if not _token_grpo(meta):
        return math.nan, "GRPO on token tasks only"
    if num not in post or den not in post:
        return math.nan, f"{num} or {den} not recorded"
    rows = post[np.isfinite(post[num]) & np.isfinite(post[den]) & (post[den] > 1e-9)]
    if len(rows) < 3:
        return math.nan, f"fewer than 3 updates with {den} > 0"
    q = float((rows[num] / rows[den]).median())
    return q, f"median {num} / {den} = {q:.3g} over {len(rows)} updates"


@signature("approx_kl_tracks_kl_ref", "approx_kl",
           "GRPO (tokens): the importance ratio's KL (approx_kl) is of the order of the KL to the reference (median "
           "approx_kl / kl_ref above 0.3): the ratio is taken against the reference; healthy runs move a few "
           "percent of kl_ref per update", threshold=0.3, direction="above", calibrated=True)
def approx_kl_tracks_kl_ref(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return _kl_quotient(post, meta, "approx_kl", "kl_ref")


@signature("kl_ref_tracks_update_drift", "kl_ref",
           "GRPO (tokens): the KL to the reference is no larger than one update's drift (median kl_ref / approx_kl below "
           "3): the reference moves with the policy", threshold=3.0, direction="below", calibrated=True)
def kl_ref_tracks_update_drift(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return _kl_quotient(post, meta, "kl_ref", "approx_kl")


@signature("reward_fn_zero", "reward_mean",
           "GRPO: one of the summed reward functions (reward/<fn>) is exactly 0 on >= 90% of updates while "
           "another is not (a format regex that never matches)", threshold=MOST, direction="at_least")
def reward_fn_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    cols = [c for c in post.columns if c.startswith(REWARD_FN_PREFIX)]
    if len(cols) < 2:
        return math.nan, "fewer than two reward functions recorded"
    shares = {c: share_where(post, c, lambda v: v == 0, "")[0] for c in cols}
    shares = {c: s for c, s in shares.items() if not math.isnan(s)}
    if not shares or min(shares.values()) >= MOST:      # all zero is reward_zero's business
        return 0.0, "every reward function is zero (or none is)"
    name, rate = max(shares.items(), key=lambda kv: kv[1])
    return rate, f"{name} == 0 on {rate:.0%} of updates"


@signature("completions_truncated", "response_clip_ratio",
           "GRPO: most completions are cut at the length limit (median response_clip_ratio above 0.5)",
           threshold=0.5, direction="above", calibrated=True)
def completions_truncated(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return _median(post, "response_clip_ratio")


@signature("logp_per_token_low", "logp_mean",
           "GRPO (tokens): the trainer's summed completion log-prob per generated token (logp_mean / length_mean) "
           "below -1 nat at the median: the loss mask holds tokens the policy never generates (padding after EOS); "
           "a warm-started policy sampling at T = 1 scores its own tokens at about -0.2 to -0.4",
           threshold=-1.0, direction="below", calibrated=True)
def logp_per_token_low(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    if not _token_grpo(meta):
        return math.nan, "GRPO on token tasks only"
    if "logp_mean" not in post or "length_mean" not in post:
        return math.nan, "logp_mean or length_mean not recorded"
    rows = post[np.isfinite(post["logp_mean"]) & np.isfinite(post["length_mean"]) & (post["length_mean"] > 0)]
    if rows.empty:
        return math.nan, "no update with logp_mean and a positive length_mean"
    q = float((rows["logp_mean"] / rows["length_mean"]).median())
    return q, f"median logp_mean / length_mean = {q:.3g} nats per generated token"


@signature("reward_stalls", "reward_mean",
           "GRPO (tokens): the reward does not improve: mean reward over the last third of the updates after onset at most "
           "0.02 above the first third's (a broken advantage; healthy runs from the warm-up rise by 0.2-0.3)",
           threshold=0.02, direction="at_most", calibrated=True)
def reward_stalls(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    if not _token_grpo(meta):               # a GRPO run from a warm-up checkpoint has room to improve
        return math.nan, "GRPO on token tasks only"
    col = finite(post["reward_mean"])
    if len(col) < 6:
        return math.nan, "reward_mean: fewer than 6 finite values"
    third = len(col) // 3
    first, last = float(col.iloc[:third].mean()), float(col.iloc[-third:].mean())
    return last - first, f"reward_mean {first:.3f} (first third) -> {last:.3f} (last third)"


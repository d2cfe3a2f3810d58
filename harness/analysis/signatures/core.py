"""The core signatures: ratio, KL, clipping, optimizer steps, rewards, advantages, losses,
gradients, parameters, entropy, non-finite values, and the GRPO group and reference signatures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.signatures.base import EXACT, MOST, finite, generating, share_where, signature


@signature("ratio_pinned", "ratio_dev_max", "importance ratio exactly 1 (max |r - 1| < 1e-6) on >= 90% of updates",
           threshold=MOST, direction="at_least")
def ratio_pinned(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "ratio_dev_max", lambda c: c <= EXACT, "max |r-1| <= 1e-6")


@signature("approx_kl_zero", "approx_kl", "approx_kl (k3) is 0 on >= 90% of updates", threshold=MOST,
           direction="at_least")
def approx_kl_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "approx_kl", lambda c: c.abs() <= 1e-9, "approx_kl == 0")


@signature("approx_kl_tiny", "approx_kl", "the policy moves but barely: median approx_kl below 1e-4 (and not 0)",
           threshold=1e-4, direction="below", calibrated=True)
def approx_kl_tiny(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["approx_kl"])
    if col.empty:
        return math.nan, "approx_kl: no finite values"
    med = float(col.median())
    if med <= 1e-9:      # exactly 0 is approx_kl_zero's business
        return math.nan, f"median approx_kl {med:.2e} (zero, not tiny)"
    return med, f"median approx_kl {med:.2e}"


@signature("clipfrac_zero", "clipfrac", "clip fraction exactly 0 on >= 90% of updates: clipping never acts",
           threshold=MOST, direction="at_least")
def clipfrac_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "clipfrac", lambda c: c == 0, "clipfrac == 0")


@signature("clipfrac_saturated", "clipfrac", "median clip fraction above 0.3 (post-training-toolkit rule)",
           threshold=0.3, direction="above", calibrated=True)
def clipfrac_saturated(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["clipfrac"])
    med = float(col.median()) if len(col) else math.nan
    return med, f"median clipfrac {med:.3f}"


@signature("optimizer_steps_short", "optimizer_steps",
           "fewer optimizer steps than configured epochs x minibatches on >= 50% of updates",
           threshold=0.5, direction="at_least")
def optimizer_steps_short(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    configured = meta.get("configured_optimizer_steps")
    if not configured:
        return math.nan, "configured optimizer steps unknown"
    rate, what = share_where(post, "optimizer_steps", lambda c: c < configured, f"optimizer_steps < {configured}")
    return rate, f"{what} (median {post['optimizer_steps'].median():.0f})"


@signature("reward_zero", "reward_mean", "reward is exactly 0 on every update", threshold=1.0, direction="at_least")
def reward_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "reward_mean", lambda c: c == 0, "reward_mean == 0")


@signature("reward_flat", "reward_mean", "reward exactly the same on every update (a constant reward function)",
           threshold=0.0, direction="at_most")
def reward_flat(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["reward_mean"])
    if len(col) < 2:
        return math.nan, "reward_mean: fewer than 2 finite values"
    spread = float(col.max() - col.min())
    return spread, f"reward_mean spread {spread:.3g} over {len(col)} updates"


@signature("value_to_zero", "value_mean", "critic collapses to 0: median |value_mean| over the last half below 0.01",
           threshold=0.01, direction="below", calibrated=True)
def value_to_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["value_mean"])
    if col.empty:
        return math.nan, "value_mean: no finite values"
    med = float(col.iloc[len(col) // 2:].abs().median())
    return med, f"median |value_mean| {med:.3g} over the last half"


@signature("adv_zero", "adv_mean", "advantages identically 0 (mean and std) on >= 90% of updates",
           threshold=MOST, direction="at_least")
def adv_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    std = post["adv_std"]
    if std.isna().all():      # a log with the mean only (verl logs mean, max, min)
        return share_where(post, "adv_mean", lambda c: c.abs() <= 1e-9, "adv mean == 0 (no std logged)")
    both = post["adv_mean"].abs().fillna(math.inf) + std.abs().fillna(math.inf)
    return share_where(pd.DataFrame({"a": both}), "a", lambda c: c <= 1e-9, "adv mean and std == 0")


@signature("loss_zero", "policy_loss", "policy loss exactly 0 on >= 90% of updates", threshold=MOST,
           direction="at_least")
def loss_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "policy_loss", lambda c: c.abs() <= 1e-9, "policy_loss == 0")


@signature("grad_zero", "grad_norm", "gradient norm exactly 0 on >= 90% of updates", threshold=MOST,
           direction="at_least")
def grad_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "grad_norm", lambda c: c == 0, "grad_norm == 0")


@signature("param_frozen", "param_delta", "parameters unchanged (param_delta == 0) on >= 90% of updates",
           threshold=MOST, direction="at_least")
def param_frozen(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "param_delta", lambda c: c == 0, "param_delta == 0")


@signature("kl_high", "approx_kl", "median approx_kl above 0.1 (the folk rule; RLExplorer, post-training-toolkit)",
           threshold=0.1, direction="above", calibrated=True)
def kl_high(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["approx_kl"])
    med = float(col.median()) if len(col) else math.nan
    return med, f"median approx_kl {med:.3g}"


@signature("kl_explodes", "approx_kl", "approx_kl spikes: its maximum after onset above 5 (non-finite counts)",
           threshold=5.0, direction="above", calibrated=True, reads_nonfinite=True)
def kl_explodes(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = post["approx_kl"].dropna()
    if col.empty:
        return math.nan, "approx_kl: no values"
    if not np.isfinite(col).all():
        return math.inf, "approx_kl non-finite"
    peak = float(col.max())
    return peak, f"max approx_kl {peak:.3g}"


@signature("entropy_collapse", "entropy",
           "entropy over the last 5 updates below 10% of the initial policy's (discrete: of ln n; GRPO and "
           "PPO-LM, which start from a checkpoint: of the entropy at onset); Gaussian: the per-dimension std shrank 10x from "
           "a unit Gaussian", threshold=0.1, direction="below",
           calibrated=True)
def entropy_collapse(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["entropy"])
    if col.empty:
        return math.nan, "entropy: no finite values"
    last = float(col.iloc[-5:].mean())
    space = meta.get("action_space") or {}
    if meta.get("algo") in ("grpo", "ppo_lm") and space.get("type") != "box":
        # GRPO and PPO-LM start from a supervised checkpoint whose entropy is far below ln n (an LLM's is):
        # the initial policy is the one at the first update after onset
        initial = float(col.iloc[0])
        return (last / initial if initial > 0 else math.nan), f"entropy {initial:.3g} at onset -> {last:.3g}"
    if space.get("type") == "box":
        dim = space["dim"]
        initial = dim * (0.5 + 0.5 * math.log(2 * math.pi))
        ratio = math.exp((last - initial) / dim)      # std now / std of a unit Gaussian
        return ratio, f"entropy {initial:.3f} -> {last:.3f} (std x{ratio:.3g})"
    if space.get("type") == "discrete":
        initial = math.log(space["n"])
        return last / initial, f"entropy ln({space['n']})={initial:.3f} -> {last:.3g}"
    initial = float(col.max())    # action space unknown (a user's log): against its own peak
    return (last / initial if initial > 0 else math.nan), f"entropy peak {initial:.3g} -> {last:.3g}"


@signature("adv_nonfinite_or_huge", "adv_std",
           "advantages non-finite; for GRPO also their std above 10 (group-normalised advantages have std ~1)",
           threshold=10.0, direction="above", calibrated=True, reads_nonfinite=True)
def adv_nonfinite_or_huge(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    broken = ~np.isfinite(post["adv_mean"]) | ~np.isfinite(post["adv_std"])
    went_bad = post["nonfinite"] == 1 if "nonfinite" in post else pd.Series(False, index=post.index)
    if broken.all() and not went_bad.any() and not np.isinf(post[["adv_mean", "adv_std"]]).any().any():
        return math.nan, "advantages not recorded"       # a log that does not record them
    bad = int((broken & (went_bad | np.isinf(post["adv_mean"]) | np.isinf(post["adv_std"]))).sum())
    if bad:
        return math.inf, f"{bad} update(s) with non-finite advantages"
    if meta.get("algo") != "grpo":       # raw PPO advantages carry the return's scale
        return 0.0, "advantages finite"
    peak = float(post["adv_std"].max())
    return peak, f"max adv_std {peak:.3g}"


@signature("groups_uniform", "frac_reward_zero_std",
           "GRPO: every group's rewards equal (frac_reward_zero_std == 1) on >= 90% of updates",
           threshold=MOST, direction="at_least")
def groups_uniform(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    return share_where(post, "frac_reward_zero_std", lambda c: c == 1, "frac_reward_zero_std == 1")


@signature("kl_ref_zero", "kl_ref",
           "GRPO: KL to the reference exactly 0 on >= 90% of the updates that generate (a log that reuses "
           "each generation batch, as TRL's at num_iterations > 1, is read on the generating steps: the "
           "steps between them reuse reference log-probs from before the policy moved)",
           threshold=MOST, direction="at_least")
def kl_ref_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    if meta.get("algo") == "ppo_lm":     # its KL to the reference is in the reward (kl_ref_sum); a KL loss is optional
        return math.nan, "PPO-LM: the KL to the reference is a reward term, not a loss"
    rows = generating(post)
    what = "kl_ref == 0" if len(rows) == len(post) else "kl_ref == 0 on generating steps:"
    return share_where(rows, "kl_ref", lambda c: c.abs() <= 1e-9, what)


#: |KL| summed over a completion below this is 0: the rounding of two forward passes over the same weights
#: (TRL 0.28's PPOTrainer with the policy as its own reference logs |objective/kl| <= 3.3e-7)
KL_ROUNDING = 1e-5


@signature("kl_penalty_zero", "kl_ref_sum",
           "PPO-LM: the KL to the reference in the reward (summed per completion) within 1e-5 of 0 on >= 90% "
           "of updates: the reference moves with the policy (a healthy run's KL is 0 only before its first update)",
           threshold=MOST, direction="at_least")
def kl_penalty_zero(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    if "kl_ref_sum" not in post:
        return math.nan, "kl_ref_sum: not recorded"
    return share_where(post, "kl_ref_sum", lambda c: c.abs() <= KL_ROUNDING, "|kl_ref_sum| <= 1e-5")


@signature("kl_penalty_adds_reward", "non_score_reward",
           "PPO-LM: the KL penalty adds reward: non_score_reward (-kl_coef x KL) above 0 on >= 90% of the "
           "updates whose KL to the reference is above 1e-3 (a penalty with the right sign is below 0 there)",
           threshold=MOST, direction="at_least")
def kl_penalty_adds_reward(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    if "kl_ref_sum" not in post or "non_score_reward" not in post:
        return math.nan, "kl_ref_sum or non_score_reward: not recorded"
    rows = post[post["kl_ref_sum"] > 1e-3]
    if rows.empty:
        return math.nan, "the KL to the reference never above 1e-3"
    return share_where(rows, "non_score_reward", lambda c: c > 0, "non_score_reward > 0 where KL > 1e-3:")


@signature("kl_ref_explodes", "kl_ref", "GRPO: KL to the reference above 20 per token at some update",
           threshold=20.0, direction="above", calibrated=True, reads_nonfinite=True)
def kl_ref_explodes(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = post["kl_ref"].dropna()
    if col.empty:
        return math.nan, "kl_ref: no values"
    peak = float(col.max()) if np.isfinite(col).all() else math.inf
    return peak, f"max kl_ref {peak:.3g}"


@signature("kl_ref_high_at_start", "kl_ref",
           "GRPO: KL to the reference above 0.5 per token over the first 3 updates (median): a policy that starts "
           "from its reference is at KL 0 there", threshold=0.5, direction="above", calibrated=True)
def kl_ref_high_at_start(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    col = finite(post["kl_ref"].iloc[:3])
    med = float(col.median()) if len(col) else math.nan
    return med, f"median kl_ref over the first 3 updates {med:.3g}"


@signature("nonfinite", "nonfinite", "a loss, gradient or parameter became NaN/Inf", threshold=1.0,
           direction="at_least", reads_nonfinite=True)
def nonfinite(post: pd.DataFrame, meta: dict) -> tuple[float, str]:
    bad = int((post["nonfinite"] == 1).sum())
    where = f" at update {int(post.loc[post['nonfinite'] == 1, 'update'].iloc[0])}" if bad else ""
    return float(bad), f"{bad} non-finite update(s){where}"

"""The clipped-surrogate update shared by PPO and GRPO, with every update metric.

One call runs ``n_epochs`` x ``n_minibatches`` optimizer steps over a batch and returns
the canonical update metrics (see harness/metrics.py). The algorithm supplies how to
evaluate a minibatch (log-probs, entropy, and any extra loss such as the value loss or
the KL penalty); the fault hooks act on the old log-probs, the surrogate, the loss, the
zero-grad and the step, and on the logged ratio statistics (telemetry faults).

PPO's optional extras, as SB3 / CleanRL / HF have them: ``grad_accum`` (each minibatch is split
into microbatches, each back-propagated with its loss weighted by its share of the minibatch's
normaliser: tokens under token_mean, else rows; one optimizer step) and ``target_kl`` (SB3's early stopping: the epoch loop ends at the first minibatch whose
approx_kl exceeds 1.5 x target_kl, before its optimizer step; its row is kept, not stepped).

Batch rows are what minibatches split: transitions for PPO (per-sample tensors of shape
[rows]), completions for GRPO (per-token tensors [rows, T] with a boolean ``mask`` of
real tokens and one advantage per row). Token-level losses are aggregated with
``token_mean`` (over all tokens of the minibatch) or ``seq_mean`` (per completion, then
over completions); every ratio statistic is over real tokens only.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, Protocol

import torch
from torch.nn.utils import clip_grad_norm_, parameters_to_vector

from harness.hooks import Hooks

Batch = dict[str, torch.Tensor]


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1)


def aggregate(x: torch.Tensor, mask: torch.Tensor | None, mode: str = "token_mean") -> torch.Tensor:
    """The loss aggregation of TRL/verl: ``token_mean`` or ``seq_mean`` (mean of per-row means)."""
    if mask is None or mode == "token_mean":
        return masked_mean(x, mask)
    per_row = torch.where(mask, x, 0.0).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_row.mean()


def ratio_stats(ratio: torch.Tensor, log_ratio: torch.Tensor, pg_loss1: torch.Tensor, pg_loss2: torch.Tensor,
                clip_range: float, adv: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """One minibatch's importance-ratio metrics (canonical definitions, over real tokens only);
    ``pg_loss1`` / ``pg_loss2`` are the unclipped and clipped surrogate terms, ``adv`` the
    advantages they used (broadcast to the ratio's shape)."""
    real = ratio if mask is None else ratio[mask]
    adv = adv.expand_as(ratio)
    return {
        "approx_kl": float(masked_mean((ratio - 1) - log_ratio, mask)),
        "kl_k1": float(masked_mean(-log_ratio, mask)),
        "clipfrac": float(masked_mean(((ratio - 1).abs() > clip_range).float(), mask)),
        "clipfrac_binding": float(masked_mean((pg_loss2 > pg_loss1).float(), mask)),
        "clip_low_frac": float(masked_mean(((ratio < 1 - clip_range) & (adv < 0)).float(), mask)),
        "clip_high_frac": float(masked_mean(((ratio > 1 + clip_range) & (adv > 0)).float(), mask)),
        "ratio_mean": float(masked_mean(ratio, mask)),
        "ratio_min": float(real.min()),
        "ratio_max": float(real.max()),
        "ratio_dev_max": float((real - 1).abs().max()),
    }


class MinibatchStats:
    """One update's per-minibatch rows (``steps.parquet``) and the per-update metrics derived
    from them: the mean over minibatches, except the ratio extremes (extremes over the update)
    and the per-step bookkeeping columns."""

    EXTREMES: ClassVar[dict[str, Callable[..., float]]] = {"ratio_min": min, "ratio_max": max, "ratio_dev_max": max}
    NOT_AVERAGED = ("epoch", "minibatch", "n_samples", "n_tokens", "grad_norm", "lr", "clip_range", "stepped",
                    "nonfinite")

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def add(self, row: dict[str, float]) -> dict[str, float]:
        """Record one minibatch's row; returns it (callers fill in what is known later)."""
        self.rows.append(row)
        return row

    def result(self) -> dict[str, float]:
        out: dict[str, float] = {}
        names = [k for k in self.rows[0] if k not in self.NOT_AVERAGED] if self.rows else []
        for name in names:
            values = [r[name] for r in self.rows if name in r]
            if name in self.EXTREMES:
                out[name] = self.EXTREMES[name](values)
            else:
                out[name] = sum(values) / len(values)
        for name in self.EXTREMES:
            out.setdefault(name, math.nan)
        return out


class UpdateHP(Protocol):
    n_epochs: int
    n_minibatches: int
    lr: float
    clip_range: float
    ent_coef: float
    max_grad_norm: float
    norm_adv: bool


class Evaluation(dict):
    """What ``evaluate(minibatch)`` returns: ``logp`` and ``entropy`` per sample, ``loss``
    (extra loss terms to add, e.g. ``vf_coef * value_loss``) and ``metrics`` (extra
    scalars to average over minibatches, e.g. ``value_loss``)."""


def ppo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch,
               hp: UpdateHP, hooks: Hooks, evaluate: Callable[[Batch], Evaluation],
               generator: torch.Generator) -> tuple[dict[str, float], list[dict[str, float]]]:
    params = [p for p in model.parameters() if p.requires_grad]
    for group in optimizer.param_groups:
        group["lr"] = hp.lr
    params_before = parameters_to_vector(params).detach().clone()
    n_samples = batch["adv"].shape[0]
    loss_agg = getattr(hp, "loss_agg", "token_mean")

    stats = MinibatchStats()
    grad_norms: list[float] = []
    nonfinite = False
    steps = [0]  # counts real optimizer.step() calls, whatever the hooks do
    counter = optimizer.register_step_post_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))

    grad_accum = getattr(hp, "grad_accum", 1)     # gradient accumulation: micro-batches per minibatch
    target_kl = getattr(hp, "target_kl", None)     # PPO's early stop (SB3); GRPO has none
    stop = False
    for epoch in range(hp.n_epochs):
        order = torch.randperm(n_samples, generator=generator)
        for minibatch, idx in enumerate(order.tensor_split(hp.n_minibatches)):
            if len(idx) == 0:              # more minibatches than samples: an empty slice trains nothing
                continue
            full_adv = batch["adv"][idx]
            if hp.norm_adv:
                full_adv = (full_adv - full_adv.mean()) / (full_adv.std() + 1e-8)
            full_mask = batch["mask"][idx] if "mask" in batch else None
            hooks.zero_grad(optimizer)
            n_micro = min(grad_accum, len(idx))
            parts: list[dict] = []
            for micro, rows in enumerate(torch.arange(len(idx)).tensor_split(n_micro)):
                mb = {k: v[idx[rows]] for k, v in batch.items()}
                mask = mb.get("mask")
                out = evaluate(mb)
                logp = out["logp"]
                old_logp = hooks.old_logprob(mb["logp"], logp)
                log_ratio = logp - old_logp
                if getattr(hp, "log_ratio_clamp", 0.0):      # verl clamps log r to [-20, 20]
                    log_ratio = log_ratio.clamp(-hp.log_ratio_clamp, hp.log_ratio_clamp)
                ratio = log_ratio.exp()

                adv = full_adv[rows]
                if adv.dim() < ratio.dim():
                    adv = adv.unsqueeze(-1)             # one advantage per completion, for each token
                pg_loss1 = -adv * ratio
                pg_loss2 = -adv * ratio.clamp(1 - hp.clip_range, 1 + hp.clip_range)
                policy_loss = aggregate(hooks.surrogate(pg_loss1, pg_loss2), mask, loss_agg)
                entropy = aggregate(out["entropy"], mask, loss_agg)
                loss = policy_loss - hp.ent_coef * entropy + out.get("loss", 0.0)
                loss = hooks.loss(loss, {"policy_loss": policy_loss, "entropy": entropy})
                # this micro-batch's share of the minibatch's normaliser (tokens for token_mean, rows else)
                share = (float(mask.sum()) / max(float(full_mask.sum()), 1.0)
                         if mask is not None and loss_agg == "token_mean" else len(rows) / len(idx))
                share = 1.0 if n_micro == 1 else share
                parts.append({"share": share, "loss": loss.detach(), "policy_loss": policy_loss.detach(),
                              "entropy": entropy.detach(), "ratio": ratio.detach(), "log_ratio": log_ratio.detach(),
                              "pg_loss1": pg_loss1.detach(), "pg_loss2": pg_loss2.detach(),
                              "adv": adv.expand_as(ratio).detach(), "mask": mask, "metrics": out.get("metrics", {}),
                              "weight": float(mask.sum()) / max(float(full_mask.sum()), 1.0)
                              if mask is not None else len(rows) / len(idx)})
                # SB3's early stopping: the minibatch's approx_kl, before its optimizer step
                if target_kl is not None:
                    with torch.no_grad():
                        approx_kl = float(masked_mean((ratio - 1) - log_ratio, mask))
                    if approx_kl > 1.5 * target_kl:
                        stop = True
                        break
                if hooks.microbatch_backward(micro, n_micro):
                    (share * loss).backward()

            loss_value = float(sum(p["share"] * p["loss"] for p in parts))
            stepped_before = steps[0]
            grad_norm = math.nan
            if not stop:
                grad_norm = float(clip_grad_norm_(params, hp.max_grad_norm))  # pre-clip total norm
                if not (math.isfinite(loss_value) and math.isfinite(grad_norm)):
                    nonfinite = True
                else:
                    hooks.optimizer_step(optimizer)
                grad_norms.append(grad_norm)

            with torch.no_grad():
                def joined(key: str) -> torch.Tensor:
                    return torch.cat([p[key] for p in parts]) if len(parts) > 1 else parts[0][key]

                ratio_all, log_ratio_all, adv = joined("ratio"), joined("log_ratio"), joined("adv")
                mask = joined("mask") if parts[0]["mask"] is not None else None
                ratio_row = hooks.ratio_metrics(
                    ratio_stats(ratio_all, log_ratio_all, joined("pg_loss1"), joined("pg_loss2"), hp.clip_range,
                                adv, mask),
                    ratio_all, log_ratio_all, hp.clip_range, mask)
                extra = {k: float(sum((p["weight"] if len(parts) > 1 else 1.0) * p["metrics"][k] for p in parts))
                         for k in parts[0]["metrics"]}
                stats.add({"epoch": epoch, "minibatch": minibatch, "n_samples": int(adv.shape[0]),
                           "n_tokens": int(mask.sum()) if mask is not None else int(adv.shape[0]),
                           "policy_loss": float(sum(p["share"] * p["policy_loss"] for p in parts)),
                           "entropy": float(sum(p["share"] * p["entropy"] for p in parts)), "loss": loss_value,
                           **ratio_row, **extra,
                           "grad_norm": grad_norm, "lr": hp.lr, "clip_range": hp.clip_range,
                           "stepped": int(steps[0] > stepped_before), "nonfinite": int(nonfinite)})
            if nonfinite or stop:
                break
        if nonfinite or stop:
            break

    counter.remove()
    with torch.no_grad():
        params_after = parameters_to_vector(params)
        if not bool(torch.isfinite(params_after).all()):
            nonfinite = True
        param_delta = float((params_after - params_before).norm())

    metrics = stats.result()
    metrics.update(
        grad_norm=sum(grad_norms) / max(len(grad_norms), 1),
        grad_norm_max=max(grad_norms, default=math.nan),
        optimizer_steps=steps[0],
        lr=hp.lr, clip_range=hp.clip_range, param_delta=param_delta,
        nonfinite=int(nonfinite),
    )
    return metrics, stats.rows

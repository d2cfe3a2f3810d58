"""The clipped-surrogate update shared by PPO and GRPO, with every update metric.

One call runs ``n_epochs`` x ``n_minibatches`` optimizer steps over a batch and returns
the canonical update metrics (see harness/metrics.py). The algorithm supplies how to
evaluate a minibatch (log-probs, entropy, and any extra loss such as the value loss or
the KL penalty); the fault hooks act on the old log-probs, the surrogate, the loss, the
zero-grad and the step, and on the logged ratio statistics (telemetry faults).

PPO's optional extras, as SB3 / CleanRL / HF have them: ``grad_accum`` (each minibatch is split
into microbatches, each back-propagated with its loss weighted by its share of the minibatch's
normaliser: tokens under token_mean, else rows; one optimizer step) and ``target_kl`` (SB3's early
stopping: the epoch loop ends at the first minibatch whose approx_kl exceeds 1.5 x target_kl,
before its optimizer step; its row is kept, not stepped). Every hyperparameter the update reads is
declared on :class:`UpdateHP`.

Batch rows are what minibatches split: transitions for PPO (per-sample tensors of shape
[rows]), completions for GRPO (per-token tensors [rows, T] with a boolean ``mask`` of
real tokens and one advantage per row). Token-level losses are aggregated with
``token_mean`` (over all tokens of the minibatch) or ``seq_mean`` (per completion, then
over completions); every ratio statistic is over real tokens only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

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


RATIO_STATS = ("approx_kl", "kl_k1", "clipfrac", "clipfrac_binding", "clip_low_frac", "clip_high_frac", "ratio_mean",
               "ratio_min", "ratio_max", "ratio_dev_max")


def value_loss(value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor,
               clip_range_vf: float | None) -> torch.Tensor:
    """The value loss, mean squared error to the returns; with ``clip_range_vf`` CleanRL's clipped
    form (``clip_vloss``, after OpenAI baselines' PPO2): the larger of the errors of the new value and
    of the new value clipped to ``old_value +- clip_range_vf``, so the value cannot gain by moving
    further than that from the rollout's in one update, a distance in the returns' own units."""
    unclipped = (value - returns).pow(2)
    if clip_range_vf is None:
        return unclipped.mean()
    clipped = old_value + (value - old_value).clamp(-clip_range_vf, clip_range_vf)
    return torch.max(unclipped, (clipped - returns).pow(2)).mean()


def ratio_stats(ratio: torch.Tensor, log_ratio: torch.Tensor, pg_loss1: torch.Tensor, pg_loss2: torch.Tensor,
                clip_range: float, adv: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    """One minibatch's importance-ratio metrics (canonical definitions, over real tokens only);
    ``pg_loss1`` / ``pg_loss2`` are the unclipped and clipped surrogate terms, ``adv`` the
    advantages they used (broadcast to the ratio's shape)."""
    real = ratio if mask is None else ratio[mask]
    adv = adv.expand_as(ratio)
    values = torch.stack([                  # one conversion to Python floats, not ten
        masked_mean((ratio - 1) - log_ratio, mask),
        masked_mean(-log_ratio, mask),
        masked_mean(((ratio - 1).abs() > clip_range).float(), mask),
        masked_mean((pg_loss2 > pg_loss1).float(), mask),
        masked_mean(((ratio < 1 - clip_range) & (adv < 0)).float(), mask),
        masked_mean(((ratio > 1 + clip_range) & (adv > 0)).float(), mask),
        masked_mean(ratio, mask),
        real.min(),
        real.max(),
        (real - 1).abs().max(),
    ]).tolist()
    return dict(zip(RATIO_STATS, values))


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
    """Every hyperparameter :func:`ppo_update` reads. ``PPOConfig`` and ``GRPOConfig`` provide each
    one; where an algorithm has no such setting its config holds a constant (``ClassVar``) or a
    property, never a dataclass field (the fields are a run's identity)."""

    n_epochs: int                 # passes over the batch (GRPO: num_iterations)
    n_minibatches: int            # optimizer steps per pass
    lr: float
    clip_range: float
    ent_coef: float
    max_grad_norm: float
    norm_adv: bool                # normalise advantages per minibatch (GRPO: never)
    loss_agg: str                 # token_mean | seq_mean (PPO: token_mean, one "token" per transition)
    grad_accum: int               # micro-batches per minibatch, one optimizer step
    target_kl: float | None       # SB3's early stop at approx_kl > 1.5 x target_kl (GRPO: None, off)
    log_ratio_clamp: float        # |log r| is clamped to this before exp; 0 = off (PPO: 0)


class MinibatchEval(dict):
    """What ``evaluate(mb)`` returns for a minibatch (or one micro-batch of it): ``logp`` and
    ``entropy`` per sample (per token), ``loss`` (extra loss terms to add, e.g. ``vf_coef *
    value_loss``) and ``metrics`` (extra scalars for the minibatch's row, e.g. ``value_loss``)."""


def minibatches(n_samples: int, n_epochs: int, n_minibatches: int,
                generator: torch.Generator) -> Iterator[tuple[int, int, torch.Tensor]]:
    """``(epoch, minibatch, row indices)`` of every minibatch: each epoch splits a fresh permutation
    of the batch rows into ``n_minibatches`` slices. An empty slice (more minibatches than rows)
    trains nothing and is skipped."""
    for epoch in range(n_epochs):
        order = torch.randperm(n_samples, generator=generator)
        for minibatch, idx in enumerate(order.tensor_split(n_minibatches)):
            if len(idx) > 0:
                yield epoch, minibatch, idx


def micro_shares(mask: torch.Tensor | None, full_mask: torch.Tensor | None, n_rows: int, n_minibatch_rows: int,
                 n_micro: int, loss_agg: str) -> tuple[float, float]:
    """A micro-batch's two weights in its minibatch, ``(share, weight)``; both are its part of the
    minibatch, measured differently.

    ``share`` weights its loss (the gradient, and the loss, policy_loss and entropy of the row): its
    part of the normaliser of the minibatch's loss, real tokens under token_mean, rows under
    seq_mean or without a mask; exactly 1 when the minibatch is one micro-batch.

    ``weight`` weights the extra metrics ``evaluate`` reports (value_loss, kl_ref), which are means
    over real tokens whatever ``loss_agg``: its part of the real tokens (rows without a mask)."""
    rows = n_rows / n_minibatch_rows
    tokens = float(mask.sum()) / max(float(full_mask.sum()), 1.0) if mask is not None else rows
    share = tokens if mask is not None and loss_agg == "token_mean" else rows
    return (1.0 if n_micro == 1 else share), tokens


@dataclass
class MicroBatch:
    """One micro-batch's loss terms, detached: what its minibatch's row is built from."""

    share: float                  # see :func:`micro_shares`
    weight: float
    loss: torch.Tensor
    policy_loss: torch.Tensor
    entropy: torch.Tensor
    ratio: torch.Tensor
    log_ratio: torch.Tensor
    pg_loss1: torch.Tensor        # -A r
    pg_loss2: torch.Tensor        # -A clip(r)
    adv: torch.Tensor             # broadcast to the ratio's shape
    mask: torch.Tensor | None     # real tokens (GRPO), None for per-sample rows (PPO)
    metrics: dict[str, torch.Tensor]

    def approx_kl(self) -> float:
        """The approx_kl (k3) of its ratio, the quantity SB3's early stop compares with target_kl."""
        return float(masked_mean((self.ratio - 1) - self.log_ratio, self.mask))


def micro_batch_loss(mb: Batch, adv: torch.Tensor, share: float, weight: float, hp: UpdateHP, hooks: Hooks,
                     evaluate: Callable[[Batch], MinibatchEval]) -> tuple[torch.Tensor, MicroBatch]:
    """One micro-batch's clipped-surrogate loss (with gradient) and its detached terms.

    ``mb`` holds the micro-batch's rows of the batch (its stored ``logp`` are the old log-probs);
    ``adv`` are its advantages (normalised over the whole minibatch). The importance ratio
    r = exp(logp - old_logp), |log r| clamped to ``log_ratio_clamp`` when set (verl: 20); the loss is
    ``agg(max(-A r, -A clip(r, 1 - eps, 1 + eps))) - ent_coef * agg(entropy) + evaluate's loss``."""
    mask = mb.get("mask")
    out = evaluate(mb)
    logp = out["logp"]
    old_logp = hooks.old_logprob(mb["logp"], logp)
    log_ratio = logp - old_logp
    if hp.log_ratio_clamp:
        log_ratio = log_ratio.clamp(-hp.log_ratio_clamp, hp.log_ratio_clamp)
    ratio = log_ratio.exp()

    if adv.dim() < ratio.dim():
        adv = adv.unsqueeze(-1)             # one advantage per completion, for each token
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * ratio.clamp(1 - hp.clip_range, 1 + hp.clip_range)
    policy_loss = aggregate(hooks.surrogate(pg_loss1, pg_loss2), mask, hp.loss_agg)
    entropy = aggregate(out["entropy"], mask, hp.loss_agg)
    loss = policy_loss - hp.ent_coef * entropy + out.get("loss", 0.0)
    loss = hooks.loss(loss, {"policy_loss": policy_loss, "entropy": entropy})
    return loss, MicroBatch(share=share, weight=weight, loss=loss.detach(), policy_loss=policy_loss.detach(),
                            entropy=entropy.detach(), ratio=ratio.detach(), log_ratio=log_ratio.detach(),
                            pg_loss1=pg_loss1.detach(), pg_loss2=pg_loss2.detach(),
                            adv=adv.expand_as(ratio).detach(), mask=mask, metrics=out.get("metrics", {}))


def optimizer_step(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], loss: float, hp: UpdateHP,
                   hooks: Hooks) -> tuple[float, bool]:
    """Clip the accumulated gradient to ``max_grad_norm`` and step (through the optimizer-step hook),
    as CleanRL's, SB3's and TRL's loops do: a non-finite loss or gradient is stepped like any other
    (clipping by a NaN norm makes every gradient NaN, and Adam writes NaN weights); nothing skips it.
    Returns the pre-clip gradient norm and whether the loss or the norm was non-finite."""
    grad_norm = float(clip_grad_norm_(params, hp.max_grad_norm))  # pre-clip total norm
    hooks.optimizer_step(optimizer)
    return grad_norm, not (math.isfinite(loss) and math.isfinite(grad_norm))


@torch.no_grad()
def minibatch_metrics(parts: list[MicroBatch], loss: float, hp: UpdateHP, hooks: Hooks) -> dict[str, float]:
    """A minibatch's row, from its micro-batches: sizes, the share-weighted loss terms, the ratio
    statistics over all its tokens (through the ratio-metrics hook), and ``evaluate``'s extra
    metrics weighted by each micro-batch's part of the tokens."""
    def joined(key: str) -> torch.Tensor:
        values = [getattr(p, key) for p in parts]
        return torch.cat(values) if len(parts) > 1 else values[0]

    ratio, log_ratio, adv = joined("ratio"), joined("log_ratio"), joined("adv")
    mask = joined("mask") if parts[0].mask is not None else None
    ratio_row = hooks.ratio_metrics(
        ratio_stats(ratio, log_ratio, joined("pg_loss1"), joined("pg_loss2"), hp.clip_range, adv, mask),
        ratio, log_ratio, hp.clip_range, mask)
    extra = {k: float(sum((p.weight if len(parts) > 1 else 1.0) * p.metrics[k] for p in parts))
             for k in parts[0].metrics}
    return {"n_samples": int(adv.shape[0]), "n_tokens": int(mask.sum()) if mask is not None else int(adv.shape[0]),
            "policy_loss": float(sum(p.share * p.policy_loss for p in parts)),
            "entropy": float(sum(p.share * p.entropy for p in parts)), "loss": loss,
            **ratio_row, **extra}


class StepCounter:
    """Counts the optimizer's real ``step()`` calls inside a ``with`` block, whatever the hooks do."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.count = 0

    def _count(self, *_: object) -> None:
        self.count += 1

    def __enter__(self) -> StepCounter:
        self._handle = self.optimizer.register_step_post_hook(self._count)
        return self

    def __exit__(self, *_: object) -> None:
        self._handle.remove()


def ppo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: Batch,
               hp: UpdateHP, hooks: Hooks, evaluate: Callable[[Batch], MinibatchEval],
               generator: torch.Generator) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Train ``model`` on ``batch`` for ``n_epochs`` passes of ``n_minibatches`` clipped-surrogate
    optimizer steps; returns the update's metrics and its per-minibatch rows (``steps.parquet``).

    Each minibatch (rows drawn by ``generator``): advantages normalised over it (``norm_adv``),
    gradients cleared (zero-grad hook), then each of its ``grad_accum`` micro-batches evaluated
    (:func:`micro_batch_loss`) and back-propagated with its loss weighted by its share
    (:func:`micro_shares`; the microbatch-backward hook may drop it), one optimizer step
    (:func:`optimizer_step`), and its row (:func:`minibatch_metrics`). A non-finite loss or
    gradient is stepped and the update goes on with the weights it wrote, as the frameworks' loops
    do (``nonfinite``: the run ends after this update). The update ends early only with
    ``target_kl``, at the first micro-batch whose approx_kl exceeds 1.5 x target_kl (SB3: before its backward; the
    minibatch is not stepped, its row is kept)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for group in optimizer.param_groups:
        group["lr"] = hp.lr * group.get("lr_scale", 1.0)     # a group's lr relative to hp.lr (PPO-LM's value model)
    params_before = parameters_to_vector(params).detach().clone()

    stats = MinibatchStats()
    grad_norms: list[float] = []
    nonfinite = False                       # any minibatch of the update
    with StepCounter(optimizer) as steps:
        for epoch, minibatch, idx in minibatches(batch["adv"].shape[0], hp.n_epochs, hp.n_minibatches, generator):
            adv = batch["adv"][idx]
            if hp.norm_adv:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            full_mask = batch["mask"][idx] if "mask" in batch else None
            hooks.zero_grad(optimizer)

            # ---- the minibatch's gradient, accumulated over its micro-batches -----------------
            n_micro = min(hp.grad_accum, len(idx))
            parts: list[MicroBatch] = []
            stop = False
            for micro, pos in enumerate(torch.arange(len(idx)).tensor_split(n_micro)):   # positions in idx
                mb = {k: v[idx[pos]] for k, v in batch.items()}
                share, weight = micro_shares(mb.get("mask"), full_mask, len(pos), len(idx), n_micro, hp.loss_agg)
                share = hooks.micro_share(share, n_micro)
                loss, part = micro_batch_loss(mb, adv[pos], share, weight, hp, hooks, evaluate)
                parts.append(part)
                if hp.target_kl is not None and part.approx_kl() > 1.5 * hp.target_kl:
                    stop = True             # SB3's early stopping, before this minibatch's step
                    break
                if hooks.microbatch_backward(micro, n_micro):
                    (share * loss).backward()

            # ---- one optimizer step, and the minibatch's row ---------------------------------
            loss_value = float(sum(p.share * p.loss for p in parts))
            stepped_before = steps.count
            grad_norm, bad = math.nan, not math.isfinite(loss_value)
            if not stop:
                grad_norm, bad = optimizer_step(optimizer, params, loss_value, hp, hooks)
                grad_norms.append(grad_norm)
            nonfinite = nonfinite or bad
            stats.add({"epoch": epoch, "minibatch": minibatch, **minibatch_metrics(parts, loss_value, hp, hooks),
                       "grad_norm": grad_norm, "lr": hp.lr, "clip_range": hp.clip_range,
                       "stepped": int(steps.count > stepped_before), "nonfinite": int(bad)})
            if stop:
                break

    with torch.no_grad():
        params_after = parameters_to_vector(params)
        nonfinite = nonfinite or not bool(torch.isfinite(params_after).all())
        param_delta = float((params_after - params_before).norm())

    metrics = stats.result()
    metrics.update(
        grad_norm=sum(grad_norms) / max(len(grad_norms), 1),
        grad_norm_max=max(grad_norms, default=math.nan),
        optimizer_steps=steps.count,
        lr=hp.lr, clip_range=hp.clip_range, param_delta=param_delta,
        nonfinite=int(nonfinite),
    )
    return metrics, stats.rows


def begin_update(fault: Any, cfg: Any, update: int, n_updates: int) -> tuple[Hooks, Any]:
    """The hooks and hyperparameters in force for update ``update`` of ``n_updates`` (the fault's,
    from its onset), with ``lr`` the scheduled learning rate (``cfg.lr_at``: warmup, annealing or
    decay; the scheduled-lr hook) and, for PPO with ``anneal_clip``, the scheduled clip range
    (``cfg.clip_at``). Every native trainer and SB3 start each update with it."""
    hooks, hp = fault.begin_update(update, cfg)
    hp = dataclasses.replace(hp, lr=hooks.scheduled_lr(hp, update, n_updates))
    if getattr(cfg, "anneal_clip", False):    # PPO's clip-range schedule (GRPO has none)
        hp = dataclasses.replace(hp, clip_range=cfg.clip_at(hp.clip_range, update, n_updates))
    return hooks, hp

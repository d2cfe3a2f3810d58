"""Telemetry only: the logged clip fraction and approx KL are divided by the wrong count.

Report (read): RLinf/RLinf#1471 ("actor/approx_kl and actor/clip_fraction are inflated by
action_dim x num_action_chunks (metrics only)": they "divide a sum taken over a **broadcast** tensor
by `loss_mask.count_nonzero()`, which counts the **un-broadcast** mask ... inflated by
numel(broadcast) / count_nonzero(loss_mask)"; "I measured **84x** inflation"; "Metrics only: the
loss itself is unaffected"; the issue is closed). Here each sample's clip indicator and k3 term
are broadcast against a per-dimension mask of ``width`` columns (RLinf's action_dim x chunks) and
divided by the sample count, so both read ``width`` times too high; training is untouched.
Every clip fraction and KL estimate the update computes is reduced the same way (kl_k1, the binding
clip fraction, the low / high clip fractions read ``width`` x too high as well); the ratio
statistics stay right, as RLinf's sibling ratio metrics did ("The same function already handles
this shape mismatch for its sibling metrics 20 lines below"). A log in SB3's or CleanRL's names
carries clip_fraction and approx_kl alone.

Transplanted: RLinf's policies emit action chunks (action_dim x num_action_chunks = 84 in the
report); the harness's PPO policies emit one action, so ``width`` (84 by default, the report's
measured inflation) stands for a chunked head this model does not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param


@dataclass
class ClipfracDenominatorWrong(Fault):
    width: int = param(84, "the broadcast width the denominator misses (RLinf: action_dim x chunks)", ge=2, le=10000,
                       kind=int)

    name = "clipfrac_denominator_wrong"
    version = 2            # 2: every clip fraction and KL estimate is reduced the wrong way, not two of them
    kind = "telemetry"
    description = ("the logged clipfrac and approx_kl are a sum over a broadcast tensor divided by the un-broadcast "
                   "count: both read width x too high (84x in the report); training is healthy")
    provenance = ("transplanted from a chunked-action policy: RLinf#1471 (actor/clip_fraction and approx_kl "
                  "\"inflated by numel(broadcast) / count_nonzero(loss_mask)\", \"84x\"; metrics only); the "
                  "harness's PPO has no action chunks, width=84 stands for them")
    algos = ("ppo",)
    expected = ('clipfrac_impossible',)

    def ratio_metrics(self, stats: dict[str, float], ratio: torch.Tensor, log_ratio: torch.Tensor, clip_range: float,
                      mask: torch.Tensor | None) -> dict[str, float]:
        import torch
        rows = ratio.shape[0] if mask is None else int(mask.sum())
        per_dim = torch.ones(ratio.shape[0], self.width)            # the mask the sum is broadcast against

        def reduced(x: torch.Tensor) -> float:
            """Sum over the broadcast [rows, width] tensor, divided by the un-broadcast count."""
            x = x.float()
            if mask is not None:                                     # token rows: real tokens only
                x = torch.where(mask, x, 0.0).sum(-1)
            return float((x[:, None] * per_dim).sum() / rows)

        # the siblings that also need the advantages (not passed here) come out of the same reduction as
        # ``width`` x their right value: a sum over the broadcast tensor is width x the un-broadcast sum
        siblings = {name: self.width * stats[name] for name in ("kl_k1", "clipfrac_binding", "clip_low_frac",
                                                                  "clip_high_frac")}
        return {**stats, **siblings, "clipfrac": reduced((ratio - 1).abs() > clip_range),
                "approx_kl": reduced((ratio - 1) - log_ratio)}

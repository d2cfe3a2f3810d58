"""Telemetry only: the clip fraction is computed from the already-clipped ratio, so it is always 0.

Reports (read): RLinf/RLinf#1529 ("critic/value_clip_ratio is always 0 (compares the post-clip update
against the clip bound)": "`value_pred_clipped - prev_values` *is* `(values -
prev_values).clamp(-value_clip, value_clip)` by construction, so its absolute value is `<=
value_clip` for every element. The strict `>` comparison can therefore never be true, and the
metric is identically zero no matter how far the value head moves"; "Metrics only"), fixed by
RLinf PR#1530; verl PR#972 ("Currently, `pg_clipfrac_lower` is always 0 by mistake"). The same
mistake on the policy's clip fraction: the range check runs on the clipped ratio,
``clip(r, 1 - eps, 1 + eps)`` outside ``[1 - eps, 1 + eps]``, which never holds, so clipfrac reads
exactly 0 however far the ratio moves; training is untouched.

Every range check that code makes carries the mistake: the clip fraction and its low / high parts
(TRL's clip_ratio/low_mean and high_mean) all read 0. What the report's framework computed another
way stays right: the share of samples whose clipped surrogate term is the one used
(``clipfrac_binding``, verl's pg_clipfrac, which PR#972 left correct while pg_clipfrac_lower read 0)
and the ratio statistics. A log in SB3's or CleanRL's names carries clip_fraction alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault


@dataclass
class MetricConstant(Fault):
    name = "metric_constant"
    kind = "telemetry"
    version = 2            # 2: the low / high clip fractions come from the same (wrong) range check
    description = ("clip fractions are computed on the clipped ratio, so clipfrac and its low / high parts are "
                   "identically 0 while the ratio moves past the clip range; training is healthy")
    provenance = ("RLinf#1529 (value_clip_ratio compares the post-clip update against the clip bound: \"the metric is "
                  "identically zero no matter how far the value head moves\"), fixed by RLinf PR#1530; verl PR#972 "
                  "(\"pg_clipfrac_lower is always 0 by mistake\")")
    algos = ("ppo",)
    expected = ('clipfrac_inconsistent',)

    def ratio_metrics(self, stats: dict[str, float], ratio: torch.Tensor, log_ratio: torch.Tensor, clip_range: float,
                      mask: torch.Tensor | None) -> dict[str, float]:
        import torch
        clipped_ratio = ratio.clamp(1 - clip_range, 1 + clip_range)
        high, low = clipped_ratio > 1 + clip_range, clipped_ratio < 1 - clip_range       # never true

        def share(x: torch.Tensor) -> float:
            x = x.float()
            return float(x.mean() if mask is None else torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1))

        return {**stats, "clipfrac": share(high | low), "clip_low_frac": share(low), "clip_high_frac": share(high)}

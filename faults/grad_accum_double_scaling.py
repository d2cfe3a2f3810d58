"""Under gradient accumulation the loss is divided by the accumulation count twice.

Report (read): modelscope/ms-swift#10117 (DAPO/CISPO/FIPO losses already normalised over the whole
accumulation window are divided again by ``gradient_accumulation_steps`` in
``Trainer.training_step``: "期望梯度 g，gradient_accumulation_steps=4 时实际只有 g/4" (the expected
gradient is g, with 4 accumulation steps it is g/4), "DAPO 的有效学习率随 gradient_accumulation_steps
变化 ... 日志里的 loss 也被除以 G" (the effective learning rate depends on the accumulation count
and the logged loss is divided by G too); fixed by ms-swift PR#10116.

The bug lives in a config with gradient accumulation: ``accum_steps`` (default 4) is the run's
``grad_accum`` setting, shared by the healthy twin; the fault divides each microbatch loss by it a
second time. Adam is invariant to the gradient's scale (up to its epsilon), so training is barely
changed while the logged loss and gradient norm shrink by the count and gradient clipping engages
later: expected to be faint. SB3's PPO has no gradient accumulation: not expressible there.

Transplanted: the report is ms-swift's GRPO/DAPO trainer; here the same double division runs in the
harness's PPO update (the harness's GRPO has its own accumulation fault,
``grad_accum_microbatch_dropped``), so it tests whether the PPO metrics show a loss scaled by 1/G.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param


@dataclass
class GradAccumDoubleScaling(Fault):
    accum_steps: int = param(4, "gradient-accumulation microbatches per optimizer step (the run's grad_accum)",
                             ge=2, le=64, kind=int)

    name = "grad_accum_double_scaling"
    description = ("with gradient accumulation (setting: grad_accum = accum_steps) each micro-batch's loss is divided "
                   "by the accumulation count twice: gradients, logged loss and grad norm shrink by the count; Adam "
                   "hides most of it")
    provenance = ("transplanted from GRPO/DAPO to PPO: ms-swift#10117 (loss and gradient \"g/4\" at "
                  "gradient_accumulation_steps=4, effective lr depends on it, logged loss divided by G); fixed by "
                  "ms-swift PR#10116")
    algos = ("ppo",)
    expected = ('grad_norm_small',)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"grad_accum": self.accum_steps}

    def loss(self, loss: torch.Tensor, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        return loss / self.accum_steps

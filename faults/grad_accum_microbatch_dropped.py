"""Under gradient accumulation only the last micro-batch's gradient reaches the optimizer step.

Form: code bug. The run accumulates gradients over ``accum_steps`` micro-batches per minibatch (the
fault's setting, shared by the healthy twin); under the fault the earlier micro-batches are computed
(their loss and metrics are logged) but their gradients are discarded, so each optimizer step uses
1/``accum_steps`` of the minibatch, still weighted by its share of the minibatch's tokens: the
gradient is noisier and smaller. The logged loss is the whole minibatch's, as in the reports.

Provenance (read): allenai/open-instruct PR #1498 (ZeRO-2 with ``gradient_accumulation_steps=1`` in
the DeepSpeed config treats every backward as a boundary and resets the accumulator, "so only the
last micro-batch's gradient survives to step()"); pytorch/torchtitan PR #3575 (RL trainer: zero_grad
"at the wrong place ... zeroing grad from all micro-batches except the last one, i.e. no
accumulation"); starVLA/starVLA#395 ("the optimizer update only uses the last microbatch").
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param


@dataclass
class GradAccumMicrobatchDropped(Fault):
    accum_steps: int = param(4, "gradient-accumulation micro-batches per optimizer step (the run's grad_accum)",
                             ge=2, le=64, kind=int)

    name = "grad_accum_microbatch_dropped"
    description = ("with gradient accumulation (setting: grad_accum = accum_steps) only the last micro-batch's "
                   "gradient reaches the optimizer step: the effective batch is 1/accum_steps of the configured one; "
                   "the logged loss is unchanged")
    provenance = ("open-instruct PR #1498 (ZeRO-2: 'only the last micro-batch's gradient survives to step()'), "
                  "torchtitan PR #3575 ('zeroing grad from all micro-batches except the last one'), starVLA#395")
    algos = ("grpo",)
    expected = ("grad_norm_small",)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"grad_accum": self.accum_steps}

    def microbatch_backward(self, index: int, n_micro: int) -> bool:
        return index == n_micro - 1

"""The completion mask drops the EOS token itself.

Form: code bug. The trainer's completion mask (loss, KL and attention) should cover the generated
tokens up to and including the first EOS; under the fault it stops one token short: the EOS is never
in the loss. The policy gets no gradient (and no KL pull) on the decision to stop: stopping is
neither reinforced when it pays nor discouraged when it does not, so length drifts with whatever the
other tokens' gradients do to the shared weights (real runs drift towards the length limit).
Expected to be faint: on env=toyseq (warm-started model, 10 new tokens at most) 60 updates showed no
length drift against the twin (length_mean 6.5 both, response_clip_ratio 0), so the expected
``completions_truncated`` is a hypothesis for long runs. The direct trace is in steps.parquet:
n_tokens is the generated tokens minus one per completion that ended.

Provenance (read): mll-lab-nu/RAGEN#59 ("the eos token will be masked out when use
tensor_fn.create_attention_mask ... I don't know if this will have an effect on learning when to
stop"; fixed so that the mask reaches "<im_end> which directs the model to stop output");
rasbt/reasoning-from-scratch PR #185 ("since the EOS token is not included in the gradient
calculation, it is technically possible that the LLM may unlearn generating stop tokens in very long
RL runs"); verl#535 (the same question for SFT, citing trl#1623's non-stop generation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault


@dataclass
class EosMasked(Fault):
    name = "eos_masked"
    description = ("the completion mask excludes the EOS token: the policy is never trained on when to stop, so "
                   "completion length drifts (towards the limit in long runs)")
    provenance = ("RAGEN#59 (EOS masked out of the training mask; fixed so the mask reaches <im_end>), "
                  "reasoning-from-scratch PR #185 (EOS not in the gradient: 'may unlearn generating stop tokens')")
    algos = ("grpo",)
    expected = ("completions_truncated",)

    def completion_mask(self, mask: torch.Tensor, tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
        return mask & (tokens != eos)

"""A completion that stops on a token other than the configured EOS keeps its padding in the mask.

Form: code bug. verl's ``get_response_mask`` builds the response mask from the positions of the
configured EOS alone: ``eos_mask = torch.isin(response_id, eos_token); return (eos_mask.cumsum(dim=1)
- eos_mask).eq(0)``, so a response that holds no EOS is all ones and the padding after it counts
as valid tokens. A completion ends without that EOS when generation stops on another end token:
the chat model's end of turn listed beside EOS in its generation config (TRL PR #7039: Phi-3.5
stops on ``<|end|>``), a recipe's stop token. Completions that end on the configured EOS, and those
cut at the length limit (no padding after them), are masked as before.

Here the bug needs that setting (``setting``: ``algo.stop_at_close=true``, for the run and its
healthy twin): generation also stops at ``</a>`` (kept), the trainer's mask follows every stop token
in the twin (as TRL >= PR #7039 does) and the configured EOS alone under the fault. So every well-
formed completion, which now ends at ``</a>``, carries its PAD tokens into the loss, the KL penalty
and the token-mean denominator with its advantage; completions that end on EOS are untouched.
Generation and reward are the twin's; what changes is what the update trains: log-probs of padding
the warm-up never saw, and a gradient diluted by them (signature ``logp_per_token_low``).

Provenance (read): verl-project/verl#3805 ("Padding tokens incorrectly included in response mask
when EOS is absent": "When no EOS token is present in a response, it returns all ones", so padding
enters "KL divergence computation ... GRPO group statistics, Policy loss calculation"; "This
introduces gradient noise and training instability"); huggingface/trl PR #7039 (a completion that
stopped on a secondary EOS "keeps whatever follows it (padding / continued sampling) in the loss",
and is counted as clipped: ``clipped_ratio ≈ 0.97`` at step 1 on Phi-3.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from faults.base import Fault


def response_mask_from_eos(tokens: torch.Tensor, eos: int) -> torch.Tensor:
    """verl's get_response_mask: True up to and including the first ``eos``; all True without one."""
    eos_mask = (tokens == eos).int()
    return (eos_mask.cumsum(dim=1) - eos_mask).eq(0)


@dataclass
class PostEosUnmasked(Fault):
    name = "post_eos_unmasked"
    version = 2            # 2: only completions that stop without the configured EOS (was: every completion)
    description = ("the completion mask is built from the configured EOS alone: a completion that stops on another "
                   "end token keeps its padding in the loss, the KL and the token-mean denominator; generation and "
                   "reward are untouched")
    provenance = ("verl#3805 (a response with no EOS gets an all-ones mask: padding 'contribute[s] to training loss "
                  "calculations': gradient noise and instability), trl PR #7039 (tokens after a secondary EOS kept in "
                  "the loss)")
    algos = ("grpo",)
    expected = ("logp_per_token_low",)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"stop_at_close": True}

    def completion_mask(self, mask: torch.Tensor, tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
        return response_mask_from_eos(tokens, eos)

"""Tokens after the first EOS (the padding) are kept in the completion mask.

Form: code bug. The trainer's mask should stop at the first EOS; under the fault it covers every
position of the padded batch, so the PAD tokens after a completion's EOS join the loss, the KL
penalty and the token-mean denominator with that completion's advantage. Generation is untouched
(the sampler stops at EOS), so rollouts and reward look normal; what changes is what the update
trains: log-probs of padding the warm-up never saw, and a gradient diluted by them. On toyseq the
trace is the trainer's summed completion log-prob (logp_mean -17 vs -1.4 for the twin over 60
updates; signature ``logp_per_token_low``); reward and length stayed the twin's.

Provenance (read): verl-project/verl#3805 ("Padding tokens are incorrectly treated as valid tokens in
response masks ... causing them to contribute to training loss calculations": get_response_mask
returns all ones when a response holds no EOS, so padding enters "KL divergence computation ...
GRPO group statistics, Policy loss calculation"; "This introduces gradient noise and training
instability"); huggingface/trl PR #7039 (a completion that stopped on a secondary EOS "keeps whatever
follows it (padding / continued sampling) in the loss", and is counted as clipped:
``clipped_ratio ≈ 0.97`` at step 1 on Phi-3.5).
"""

from dataclasses import dataclass

import torch

from faults.base import Fault


@dataclass
class PostEosUnmasked(Fault):
    name = "post_eos_unmasked"
    description = ("the completion mask keeps the padding after the first EOS: PAD tokens enter the loss, the KL "
                   "and the token-mean denominator; generation and reward are untouched")
    provenance = ("verl#3805 (padding in the response mask 'contribute[s] to training loss calculations': gradient "
                  "noise and instability), trl PR #7039 (tokens after a secondary EOS kept in the loss)")
    algos = ("grpo",)
    backends = ("native", "trl")
    expected = ("logp_per_token_low",)

    def completion_mask(self, mask: torch.Tensor, tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
        return torch.ones_like(mask)

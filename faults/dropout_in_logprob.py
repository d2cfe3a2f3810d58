"""Dropout stays on when the old and/or reference log-probs are computed.

Form: code bug. The policy has dropout (the fault's setting: ``dropout`` 0.1 by default, shared by
the healthy twin and its warm-up). The healthy twin computes the old and reference log-probs in eval
mode (the update's own forward pass is in training mode in both); under the fault the no-grad
passes that give the old (``passes=old``), the reference (``ref``) or both (``old_ref``) log-probs
run with dropout on, so they are a random sub-network's: the importance ratio is not 1 on the first
minibatch and the KL to the reference is noisy from the first update. The sampler generates in eval
mode, so the old pass also disagrees with the sampler's recorded log-probs (10 updates on toyseq:
sampler_logp_diff_mean 0.057 vs 5e-8, kl_sampler 0.022 vs 4e-10, approx_kl 0.075 vs 0.027 for the
twin, whose update pass has dropout too).

Provenance (read): huggingface/trl#3500 (GRPO on a GPT2-style SFT checkpoint with Dropout(p=0.1)
everywhere: "extremely large KL divergence values (thousands to tens of thousands) ... even at the
very first training step. I suspect this is due to the heavy use of Dropout"); trl PR #3234 (adds
``disable_dropout`` to GRPOTrainer, quoting the N+ implementation details of RLHF: "with dropout
activated, the log probabilities of tokens will not be reproducible, making calculating the KL
penalty unreliable while also causing the ratios of the PPO to be not 1s during the first epoch");
trl#2042 ("the added dropout causes fluctuations in [the log-probs'] calculation compared to the
reference model which ... is typically used in eval mode").
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param

PASSES = {"old": ("old",), "ref": ("ref",), "old_ref": ("old", "ref")}


@dataclass
class DropoutInLogprob(Fault):
    dropout: float = param(0.1, "the model's (attention) dropout, the run's setting (the bug needs dropout > 0)",
                           gt=0.0, lt=1.0)
    passes: str = param("old_ref", "which no-grad log-prob passes run with dropout on: old | ref | old_ref",
                        kind=str, choices=tuple(PASSES))

    name = "dropout_in_logprob"
    description = ("dropout is left on when the old and reference log-probs are computed (those no-grad passes "
                   "in training mode; setting: dropout): the ratio is not 1 on the first minibatch and the KL to the "
                   "reference is noise from the first update")
    provenance = ("trl#3500 (GPT2-style model with dropout 0.1: KL 'thousands to tens of thousands ... at the very "
                  "first training step'), trl PR #3234 (disable_dropout: 'ratios of the PPO to be not 1s during the "
                  "first epoch'), trl#2042")
    algos = ("grpo",)
    expected = ("kl_sampler_high", "sampler_mismatch_high")

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"dropout": self.dropout}

    def dropout_active(self, where: str) -> bool:
        return where in PASSES[self.passes]

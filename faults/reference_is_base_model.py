"""The KL reference is the base model, not the fine-tuned checkpoint the policy starts from.

RL usually starts from a supervised checkpoint (here the supervised warm-up), and the KL penalty
should hold the policy near *that* model. With a pretrained LoRA adapter, trainers long built the
reference by disabling the adapter, i.e. from the base model the adapter was trained on: the
policy starts far from its reference, the penalty pulls it back toward the base model, and the
run starts with a large KL.

Reports (read):
- huggingface/trl#1340 "Incorrect reference model used when using pretrained policy adapters":
  "when loading an existing peft model for use in PPOTrainer, the base_model is used as the reference
  model for PPO. This is fine if you are initialising a fresh peft model ... but when loading existing
  weights, the log_probs deviate quite significantly, leading to very high starting KL and unstable
  training" (it links trl#495, where the high starting KL was first seen).
- huggingface/trl PR #4723 (GRPO, RLOO): "Previously, the reference model was obtained by just
  disabling the adapter, which is only correct when the adapter is newly initialized - not when it
  has already been pretrained"; PR #6591: with ``target_parameters`` adapters on older PEFT "the base
  model is the wrong reference, and the trainer only warns about it, so the run silently trains
  against the wrong reference".

Form: code bug (the framework builds the reference; the config is untouched). Here the base model
is the randomly initialised transformer the warm-up started from, so the gap between policy and
reference is larger than an adapter's over a pretrained model (a louder case of the same bug).
The reference is built once, before training: onset 0 only. The bug needs a KL penalty
(``setting``: ``beta``, TRL's former default 0.04), shared by the healthy twin. TRL's GRPOTrainer
builds its reference from the model it is given: without a PEFT adapter it cannot be expressed there.
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param


@dataclass
class ReferenceIsBaseModel(Fault):
    beta: float = param(0.04, "the KL coefficient of the run's config (TRL's former default, 0.04)", gt=0, le=10)

    name = "reference_is_base_model"
    description = ("the KL penalty's reference is the base model the supervised checkpoint was trained from, not "
                   "that checkpoint: the KL to the reference is large from the first update and pulls the policy back")
    provenance = ("trl#1340 ('the base_model is used as the reference model ... leading to very high starting KL and "
                  "unstable training'); trl PR #4723 ('only correct when the adapter is newly initialized'); trl PR "
                  "#6591 ('the run silently trains against the wrong reference')")
    algos = ("grpo",)
    expected = ("kl_ref_high_at_start",)
    onset_kinds = ("0",)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"beta": self.beta}

    def reference_weights(self) -> str:
        return "base"

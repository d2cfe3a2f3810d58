"""GRPO's KL reference is the live policy (``ref_model = model``) instead of a frozen copy.

Form: code bug. The reference log-probs are taken from the policy itself. Where frameworks
compute them decides what the logs show:

- ``at_rollout`` (default; TRL >= 0.15, verl: reference log-probs are computed once per batch,
  at generation, and stored with it): the reference is the policy at the rollout weights, so
  kl_ref measures only the drift *within* one update (as small as approx_kl) and never grows
  however far the policy moves over training; the penalty only slows each update down.
- ``in_loss`` (TRL 0.14 ``GRPOTrainer.compute_loss`` computed ``ref_per_token_logps`` inside
  the loss call, at the same weights as ``per_token_logps``, read in trl v0.14.0
  trl/trainer/grpo_trainer.py): with the live model as reference, kl_ref is exactly 0.

On PPO with the KL in the reward (``algo=ppo_lm``, TRL PPOTrainer-style), the reference is read once
per batch, at the rollout, so both forms give a KL penalty of exactly 0 on every token: the policy
is never held near its start (TRL 0.28's PPOTrainer given ``ref_model=model`` logs objective/kl
within 1e-6 of 0, the rounding of two forward passes).

Provenance: synthetic (no thread read reports this exact bug): a hand-rolled GRPO that passes the
policy as its own reference. The frameworks' designs show why it is plausible: TRL builds a
separate reference with ``create_reference_model`` (or disables the PEFT adapter), verl runs a
separate reference worker; a loop that skips that step keeps working and logs a small, healthy
looking KL. (aburkov/theLMbook#8 asks why a reference "would get updated every iteration": there
it is DeepSeekMath's per-iteration reference reset, by design, not this bug.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param


@dataclass
class ReferenceNotFrozen(Fault):
    computed: str = param("at_rollout", "where the reference log-probs are taken from the live policy: at_rollout "
                          "(stored with the batch: kl_ref is the drift within an update) | in_loss (at the loss's "
                          "own weights: kl_ref exactly 0)", kind=str, choices=("at_rollout", "in_loss"))

    name = "reference_not_frozen"
    description = ("the KL reference is the live policy instead of a frozen copy: kl_ref measures only the drift "
                   "within an update (or is exactly 0) however far the policy moves, and never pulls it back")
    provenance = ("synthetic: ref_model = model in a hand-rolled GRPO loop (TRL builds a separate frozen "
                  "reference, verl a separate ref worker); TRL 0.14 computed reference log-probs inside "
                  "compute_loss, where this bug gives kl exactly 0")
    algos = ("grpo", "ppo_lm")
    expected = ("kl_ref_tracks_update_drift", "kl_ref_zero", "kl_penalty_zero")

    def refusal(self, backend: str) -> str | None:
        """TRL >= 0.15 takes the reference log-probs once, at generation (``ref_model = model`` gives the
        at_rollout form); the in_loss form is TRL 0.14's code, not the installed TRL's."""
        if backend != "trl":
            return None
        if self.computed == "in_loss":
            return ("computed=in_loss is TRL 0.14's compute_loss; the installed TRL computes reference log-probs "
                    "at generation (use computed=at_rollout)")
        return None

    def ref_logprob(self, stored: torch.Tensor, live: torch.Tensor, phase: str = "update") -> torch.Tensor:
        if phase == "rollout" or self.computed == "in_loss":
            return live.detach()
        return stored

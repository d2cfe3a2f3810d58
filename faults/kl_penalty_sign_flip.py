"""The KL penalty enters the loss with the wrong sign: the policy is pushed away from the reference."""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class KLPenaltySignFlip(Fault):
    name = "kl_penalty_sign_flip"
    description = "beta is negated: the loss rewards distance from the reference, so KL to it grows without bound"
    provenance = ("TRL PPO negative-KL reports (trl#1161, PR #1180) and KL coefficient not forwarded "
                  "(ms-swift#2330); RLExplorer / post-training-toolkit KL-too-large rules")
    acts_on = "effective hyperparameter: beta -> -beta"
    algos = ("grpo",)
    expected = ("kl_ref_explodes",)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, beta=-hp.beta)

"""The learning rate is far too high."""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class ExcessiveLR(Fault):
    factor: float = param(100.0, "multiplier applied to the intended learning rate", gt=1, le=1e9)
    form: str = form_param("misconfigured", "misconfigured", "overridden")

    name = "excessive_lr"
    description = "the learning rate is multiplied by a large factor: the ratio and KL explode, entropy collapses, values may go NaN"
    provenance = ("AutoTrainer/DeepDiagnosis exploding-gradient rules; RLExplorer KL > 0.1; "
                  "verl#1197 / #2626 (grad_norm NaN, late NaN)")
    acts_on = "hyperparameter: lr * factor (misconfigured: in the config; overridden: replaced in the update)"
    backends = ("native", "sb3")
    expected = ("kl_explodes", "kl_high", "entropy_collapse")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, lr=hp.lr * self.factor)

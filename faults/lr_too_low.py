"""The learning rate is far too low: the policy moves too little per update to learn in the budget.

Report (read): isp1tze/MAProj#3 ("The learning rate for actor and critic is too small, it takes a
very long time to converge"). AutoTrainer's slow-convergence rule and RLExplorer's stagnation
checks flag the same symptom. ``factor`` (the configured lr is divided by it) is the severity knob:
10 by default (no report gives the ratio; MAProj#3 suggests 0.01 instead of its value), 3-100x in
the dataset. At the default a short CartPole run may show no trace (measured: 12 updates, 0 of 3
seeds fire approx_kl_tiny; 100x fires on 3 of 3).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class LRTooLow(Fault):
    form: str = form_param("misconfigured", "misconfigured", "overridden")
    factor: float = param(10.0, "the intended learning rate is divided by this (the dataset draws 3-100x)", gt=1,
                          le=1e9)

    name = "lr_too_low"
    description = ("the learning rate is divided by a large factor (lr / factor): approx_kl and clip fraction stay "
                   "tiny, learning stalls")
    provenance = ("MAProj#3 (\"The learning rate ... is too small, it takes a very long time to converge\"); "
                  "AutoTrainer slow-convergence rule")
    algos = ("ppo",)
    expected = ('approx_kl_tiny',)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, lr=hp.lr / self.factor)

"""GRPO advantages divided by the group std with no epsilon floor."""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class AdvStdNoFloor(Fault):
    name = "adv_std_no_floor"
    description = ("(r - mean) / std with no epsilon: a uniform group gives 0/0 = NaN (or, with float "
                   "residue in the std, huge advantages)")
    provenance = ("NVIDIA-NeMo/RL PR 4161 (fp32 residue in the group std -> advantages x4000); "
                  "TRL and verl add 1e-4 / 1e-6 to the std for this reason")
    acts_on = "effective hyperparameter: adv_eps -> 0"
    algos = ("grpo",)
    expected = ("adv_nonfinite_or_huge", "nonfinite")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, adv_eps=0.0)

"""The healthy baseline: no fault. Every fault run is compared with its twin on this."""

from dataclasses import dataclass

from faults.base import Fault


@dataclass
class NoFault(Fault):
    name = "none"
    description = "no fault: the healthy agent"
    provenance = "-"
    algos = ("ppo", "grpo", "ppo_lm")
    expected = ()

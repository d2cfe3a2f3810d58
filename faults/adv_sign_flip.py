"""The advantages have the wrong sign (``values - returns``): the policy is pushed away from good actions.

Synthetic: a sign slip in ``advantages = returns - values`` (the value targets stay right). The
closest reports read describe other advantage slips with the same outcome: marlbenchmark/on-policy
PR#13 (advantages computed against un-normalised values: "This error collapses the performance of
the PPO"); RoboVerse PR#814 (a shifted done mask gives the action that ended an episode "+95.0
instead of -4.0", "learned the wrong sign at every episode boundary"). Normalising the advantages
keeps the flipped sign.
"""

from dataclasses import dataclass

import numpy as np

from faults.base import Fault


@dataclass
class AdvSignFlip(Fault):
    name = "adv_sign_flip"
    description = ("advantages are negated after the value targets are set (native: after GAE; SB3: in "
                   "rollout_buffer_class compute_returns_and_advantage): the policy learns to prefer worse actions")
    provenance = ("synthetic: a sign slip in advantages = returns - values; same outcome as on-policy PR#13 "
                  "(\"collapses the performance\") and RoboVerse PR#814 (\"learned the wrong sign\")")
    algos = ("ppo",)
    expected = ('return_falls',)

    def advantages(self, advantages: np.ndarray) -> np.ndarray:
        return -advantages

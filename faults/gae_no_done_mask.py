"""GAE carries the advantage across episode ends: the recursion has no done mask.

Reports (read): vietnh1009/Super-mario-bros-PPO-pytorch#21 ("The wrong implementation forgets to
reset GAE to zero when calculating GAE of s250 ... This will cause the advantage of s250 become
bigger and bigger ... the critic loss diverges ... Stuck at action that make you die. The agent does
not learn anything"); RoboVerse PR#814 (a shifted done mask: "ending an episode paid a bonus ... the
action that ended the episode gets advantage +95.0 instead of -4.0"); RLMutation's "missing terminal
state" operator (FlowSs/RLMutation, RLMT/mutated_algorithms.py) drops the done flags altogether.

``ignores="carry"`` (default, the reported bug): ``gae = delta + gamma * lam * gae`` without
``(1 - done)``, the TD error itself still masked; ``ignores="both"``: the TD error also
bootstraps from the next episode's first state. Either way the recursion runs over the real
transitions in order, as same-step-autoreset code sees them (a next-step reset step is skipped).
"""

from dataclasses import dataclass

import numpy as np

from faults.base import Fault, param


@dataclass
class GAENoDoneMask(Fault):
    ignores: str = param("carry", "which done mask is missing: carry (the GAE recursion) | both (and the TD error)",
                         kind=str, choices=("carry", "both"))

    name = "gae_no_done_mask"
    description = ("the GAE recursion is not reset at episode ends (native compute_gae; SB3: rollout_buffer_class "
                   "compute_returns_and_advantage): the next episode's advantages flow into the last steps of the "
                   "previous one")
    provenance = ("Super-mario-bros-PPO-pytorch#21 (\"forgets to reset GAE to zero\" ... \"The agent does not learn "
                  "anything\"); RoboVerse PR#814 (\"ending an episode paid a bonus\"); RLMutation "
                  "missing_terminal_state")
    algos = ("ppo",)
    expected = ('return_falls',)

    def gae(self, rewards: np.ndarray, values: np.ndarray, next_value: np.ndarray, terminated: np.ndarray,
            truncated: np.ndarray, valid: np.ndarray, gamma: float, lam: float) -> np.ndarray:
        values_next = np.concatenate([values[1:], next_value[None]])
        if self.ignores == "carry":
            deltas = rewards + gamma * values_next * (1.0 - terminated) - values
        else:                  # bootstrap from the next real transition's state, across episode ends
            deltas = np.zeros_like(rewards)
            following = next_value.copy()
            for t in reversed(range(rewards.shape[0])):
                deltas[t] = rewards[t] + gamma * following - values[t]
                following = np.where(valid[t], values[t], following)
        advantages = np.zeros_like(rewards)
        last_gae = np.zeros_like(next_value)
        for t in reversed(range(rewards.shape[0])):
            last_gae = np.where(valid[t], deltas[t] + gamma * lam * last_gae, last_gae)
            advantages[t] = last_gae
        return advantages

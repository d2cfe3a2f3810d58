"""A time-limit truncation is treated as a terminal state: the episode's last step is not bootstrapped.

Reports (read): SB3#1864 ("PPO handle TimeLimit.truncated incorrectly": "If the task is done with
`TimeLimit.truncated`, the TD target should be r_t + gamma * V(s_{t+1})"); skrl#449 ("Both settings
of `time_limit_bootstrap` are incorrect ... truncated steps are treated as terminal states, meaning
the future value is zeroed out rather than bootstrapped. This under-values every state near a time
limit"); CleanRL#457 ("both truncations and terminations are `or`'d together so both cases are
counted as the same type of done"), CleanRL#198 (a user: "disabling the timeout handling in SB3 ...
got SB3 stuck in the same suboptimum as CleanRL"); keras-rl#298 (CartPole with a 5-step limit: "Q
converges to an incorrect value" and "loss stays high").

Native: the rollout records ``terminated or truncated`` as terminated (CleanRL's ``next_done``).
SB3: an env adapter outside Monitor folds truncated into terminated, as a gym-0.21-style
compatibility wrapper's single ``done`` does, so SB3 never sees ``TimeLimit.truncated`` and does
not bootstrap. Episodes that never reach the time limit are untouched: on CartPole-v1 (limit 500)
the fault only acts once the agent balances for 500 steps.
"""

from dataclasses import dataclass

import numpy as np

from faults.base import Fault


@dataclass
class TruncationAsTermination(Fault):
    name = "truncation_as_termination"
    description = ("a time-limit truncation is recorded as termination (SB3: an env adapter outside Monitor): the "
                   "last step of a truncated episode bootstraps nothing (value 0 past the limit), so states near the "
                   "limit are under-valued")
    provenance = ("SB3#1864 (TD target at TimeLimit.truncated should be r + gamma V(s')); skrl#449 (\"the future "
                  "value is zeroed out rather than bootstrapped. This under-values every state near a time limit\"); "
                  "CleanRL#457, CleanRL#198 (terminations and truncations or'd together; SB3 without timeout "
                  "handling \"stuck in the same suboptimum\"); keras-rl#298 (\"loss stays high\")")
    algos = ("ppo",)
    expected = ('value_loss_high_at_time_limit',)

    def episode_end(self, terminated: np.ndarray, truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.logical_or(terminated, truncated), np.zeros_like(truncated)

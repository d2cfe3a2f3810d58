"""A truncated episode bootstraps from the value of the state *before* its last step.

Reports (read): DexForce/EmbodiChain PR#612 review ("Timeouts bootstrap from wrong state: When a
transition reaches its time limit, this adds values[:, t], which was computed from the state before
the action, rather than the value of the terminal next state. This produces biased advantages and
critic targets for every truncated transition"); leggedrobotics/rsl_rl#151 (the time-out bootstrap
"computes r_t + gamma V(s_t) instead of r_t + gamma V(s_{t+1})"; the maintainer: "since the next
state is not available because of the time out, this is the next best approximation").

Native: the observation handed on at a truncation (whose value the GAE bootstraps) is the one the
step acted on. SB3: an env adapter outside Monitor returns that observation at a truncation, so
SB3's ``terminal_observation`` (what collect_rollouts bootstraps from) is the pre-transition state,
as an env adapter that lost the final observation does. Only truncated episodes are affected: on
CartPole-v1 only episodes that reach 500 steps, where V(s_t) and V(s_{t+1}) are close; a quiet
fault is a result.
"""

from dataclasses import dataclass

import numpy as np

from faults.base import Fault


@dataclass
class ValueBootstrapStale(Fault):
    name = "value_bootstrap_stale"
    description = ("a truncated episode bootstraps from V(s_t), the state before its last step, instead of "
                   "V(s_{t+1}) (SB3: an env adapter outside Monitor hands it over as terminal_observation)")
    provenance = ("EmbodiChain PR#612 review (\"Timeouts bootstrap from wrong state ... values[:, t], which was "
                  "computed from the state before the action\"); rsl_rl#151 (\"r_t + gamma V(s_t) instead of "
                  "r_t + gamma V(s_{t+1})\", kept by design as \"the next best approximation\")")
    algos = ("ppo",)
    expected = ('value_loss_high_at_time_limit',)

    def final_observation(self, next_obs: np.ndarray, obs: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        where = np.asarray(truncated, dtype=bool).reshape(-1, *[1] * (np.ndim(next_obs) - 1))
        return np.where(where, obs, next_obs).astype(next_obs.dtype)

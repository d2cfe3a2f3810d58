"""The running observation statistics are frozen: normalisation stops tracking the observations.

Synthetic: no report of a user training with frozen statistics was read. The mechanism is SB3's
documented evaluation switch ``VecNormalize.training = False`` (hill-a/stable-baselines#779, a
maintainer: "You can manually simply set `env.training = False` after loading, and it will disable
updating the stats"), left off when training goes on, e.g. after an evaluation that froze the
shared env. Frozen from the start, the statistics are the initial ones (mean 0, variance 1), so
normalisation does nothing; frozen at a later onset, they describe the early policy's states. The
bug needs observation normalisation: ``norm_obs`` is the run's setting, shared by the healthy
twin. On CartPole the observations are already O(1), so the fault is expected to stay quiet.
Native: gymnasium's NormalizeObservation ``update_running_mean = False``; SB3:
``VecNormalize.training = False`` (which also freezes the reward statistics when ``norm_reward``).
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault


@dataclass
class ObsNormFrozen(Fault):
    name = "obs_norm_frozen"
    description = ("observation normalisation never updates its running mean and variance (native: "
                   "NormalizeObservation.update_running_mean; SB3: VecNormalize.training = False; setting: norm_obs): "
                   "the policy sees observations scaled by stale statistics")
    provenance = ("synthetic: SB3's evaluation switch VecNormalize.training = False (stable-baselines#779) left off "
                  "during training")
    algos = ("ppo",)
    expected = ('explained_variance_negative',)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"norm_obs": True}

    def obs_norm_training(self) -> bool:
        return False

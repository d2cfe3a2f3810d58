"""Every reward the learner sees is 0."""

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TransformReward
from gymnasium.wrappers.vector import TransformReward as VectorTransformReward

from faults.base import Fault


@dataclass
class ZeroReward(Fault):
    name = "zero_reward"
    description = "every reward is replaced by 0 (a broken reward function or a dropped reward key)"
    provenance = ("trl#3857 / trl#3452 (GRPO loss 0, reward_std 0, frac_reward_zero_std 1); "
                  "verl#2626 (reward goes to 0); RLExplorer reward-stagnation rule")
    acts_on = "env wrapper: reward -> 0"
    backends = ("native", "sb3")
    expected = ("reward_zero", "value_to_zero")

    def wrap_env(self, env: Any) -> Any:
        """A gymnasium vector env (native backend) or each single env (SB3's make_vec_env)."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorTransformReward(env, lambda r: np.zeros_like(r) if self.active else r)
        return TransformReward(env, lambda r: 0.0 if self.active else r)

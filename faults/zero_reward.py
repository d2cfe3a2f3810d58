"""Every reward the learner sees is 0.

Reports read:
- RLinf/RLinf#682 "[Troubleshoot]: the rewards are always 0.0" (a reward pipeline that returns 0
  for every rollout);
- huggingface/trl#3857: with every group's rewards equal, TRL logs "'loss': 0.0, 'grad_norm': 0.0
  ... 'reward_std': 0.0, 'frac_reward_zero_std': 1.0" at every step -- what an all-zero reward
  gives GRPO (every group uniform, advantages 0).
Injected as a reward wrapper outside the episode monitor (as a user's reward wrapper outside SB3's
Monitor): the learner gets 0 while the monitor still records the environment's own return.
"""

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
    provenance = ("RLinf#682 ('the rewards are always 0.0'); trl#3857 (uniform groups: 'loss': 0.0, "
                  "'grad_norm': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0)")
    backends = ("native", "sb3", "trl")
    expected = ("reward_zero", "value_to_zero")

    def wrap_env(self, env: Any) -> Any:
        """A gymnasium vector env (native backend) or each single env (SB3's make_vec_env)."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorTransformReward(env, lambda r: np.zeros_like(r) if self.active else r)
        return TransformReward(env, lambda r: 0.0 if self.active else r)

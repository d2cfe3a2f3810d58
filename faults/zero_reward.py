"""Every reward the learner sees is 0.

Reports read:
- huggingface/trl#3452 "GRPO reward=0 and loss=0": a user's GRPO run logged reward 0 at every step
  until they changed their own reward function ("I modified the reward function, now the reward is
  not zero");
- RLinf/RLinf#682 "[Troubleshoot]: the rewards are always 0.0" (a reward pipeline that returns 0 for
  every rollout; its cause is not established in the thread);
- unslothai/unsloth#2757 "all the rewards in the subsequent steps become zero" (GRPO; no cause given).
(huggingface/trl#3857, cited before, has non-zero rewards that are only uniform within groups: that
is ``groups_all_uniform``'s symptom, not this bug.)
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
    provenance = ("trl#3452 ('GRPO reward=0 and loss=0': the user's reward function returned 0 until changed); "
                  "RLinf#682 ('the rewards are always 0.0', cause not established); unsloth#2757 (rewards 0 after "
                  "the first step, no cause given)")
    algos = ("ppo", "grpo", "ppo_lm")
    expected = ("reward_zero", "value_to_zero")

    def wrap_env(self, env: Any) -> Any:
        """A gymnasium vector env (native backend) or each single env (SB3's make_vec_env)."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorTransformReward(env, lambda r: np.zeros_like(r) if self.active else r)
        return TransformReward(env, lambda r: 0.0 if self.active else r)

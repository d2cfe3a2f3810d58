"""The reward has the wrong sign: the agent learns to do the opposite of the task.

Reports (read): huggingface/trl#2714 / #2771 (the GRPO docs' ``reward_len`` returns
``abs(20 - len(completion))``: "Isn't the reward *minimized* when len(completion)==20?"; "this reward
function might be working opposite to what we want"; a fix proposed in PR#2777); RLMutation's
reward mutations. A gymnasium reward wrapper outside the episode monitor, as SB3's
``make_vec_env(wrapper_class=...)`` places it: the learner's returns rise while the env's own
(Monitor) returns fall.
"""

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import TransformReward
from gymnasium.wrappers.vector import TransformReward as VectorTransformReward

from faults.base import Fault


@dataclass
class RewardSignFlip(Fault):
    name = "reward_sign_flip"
    description = ("every reward is negated (a reward function written the wrong way round; a wrapper outside the "
                   "episode monitor): the learner optimises the opposite of the task")
    provenance = ("trl#2714 / trl#2771 (reward_len = abs(20 - len): \"Isn't the reward *minimized* when "
                  "len(completion)==20\"; a fix proposed in trl PR#2777)")
    algos = ("ppo",)
    expected = ('return_vs_length_anticorrelated',)

    def wrap_env(self, env: Any) -> Any:
        """A gymnasium vector env (native backend) or each single env (SB3's make_vec_env)."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorTransformReward(env, lambda r: -r if self.active else r)
        return TransformReward(env, lambda r: -r if self.active else r)

"""Rewards come out scaled by a large factor (1e3 by default) and nothing normalises them.

Reports (read): DLR-RM/stable-baselines3#2240 (large reward magnitudes, "No VecNormalize applied":
"value_loss: Still decreasing (~738k, not plateauing)", "explained_variance: ~ 5.96e-8 (effectively
zero throughout training)"); vwxyzjn/cleanrl#441 (a reward ranging from 0 to 1000 per step: "When
the reward is large, the loss from the value function is huge compared to the policy loss, and
training is unstable"); lcswillems/rl-starter-files#30 (the reverse, rewards too small to learn
until multiplied by ten). A reward wrapper outside the episode monitor, as SB3's
``make_vec_env(wrapper_class=...)`` places it; ``scale`` is the severity knob. With ``norm_reward``
in the config the scale is normalised away.
"""

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.wrappers import TransformReward
from gymnasium.wrappers.vector import TransformReward as VectorTransformReward

from faults.base import Fault, param


@dataclass
class RewardScaleWrong(Fault):
    scale: float = param(1000.0, "rewards are multiplied by this", gt=0, le=1e9)

    name = "reward_scale_wrong"
    description = ("rewards multiplied by 1e3 (a wrapper outside the episode monitor: reward -> reward * scale) with "
                   "no normalisation: the value loss and its gradient dwarf the policy's, the clipped gradient leaves "
                   "the policy almost nothing")
    provenance = ("SB3#2240 (large rewards, no VecNormalize: value_loss ~738k, explained_variance ~6e-8); "
                  "cleanrl#441 (rewards up to 1000: \"the loss from the value function is huge compared to the "
                  "policy loss, and training is unstable\")")
    algos = ("ppo",)
    expected = ('value_loss_huge', 'approx_kl_tiny')

    def wrap_env(self, env: Any) -> Any:
        """A gymnasium vector env (native backend) or each single env (SB3's make_vec_env)."""
        if isinstance(env, gym.vector.VectorEnv):
            return VectorTransformReward(env, lambda r: r * self.scale if self.active else r)
        return TransformReward(env, lambda r: r * self.scale if self.active else r)

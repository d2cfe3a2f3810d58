"""Tiny gymnasium environments with known behaviour, registered for the tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class FixedLength(gym.Env):
    """Every episode lasts exactly ``length`` steps with reward 1 per step, then terminates."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int = 5, crash_after: int | None = None):
        self.length, self.crash_after, self.t, self.total = length, crash_after, 0, 0

    def _obs(self):
        return np.array([self.t, 1.0], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        if self.crash_after is not None and self.total > self.crash_after:
            raise RuntimeError(f"simulator exploded after {self.crash_after} steps")
        return self._obs(), 1.0, self.t >= self.length, False, {}


gym.register("harness-test/FixedLength-v0", entry_point=FixedLength)
gym.register("harness-test/Crashing-v0", entry_point=FixedLength, kwargs={"crash_after": 300})


class FixedLengthTruncated(FixedLength):
    """Reward 1 per step and never terminates: every episode is cut by the time limit after ``length``
    steps (gymnasium's TimeLimit, truncated=True), so a correct learner bootstraps the last step."""

    def step(self, action):
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info


gym.register("harness-test/FixedLengthTruncated-v0", entry_point=FixedLengthTruncated, max_episode_steps=5)

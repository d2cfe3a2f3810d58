"""ToySeq: a laptop-sized stand-in for LLM fine-tuning with a verifiable reward.

A prompt of ``prompt_len`` digits is shown; the agent emits one token per step (a digit
or EOS) until EOS or ``max_len`` tokens. The completion (tokens before EOS) is scored
against the task's answer:

- tasks: ``copy`` (the prompt), ``reverse`` (the prompt reversed), ``sort`` (ascending);
- ``exact``: 1 if the completion equals the answer, else 0;
- ``partial``: matching positions / max(len(completion), len(answer)), so extra or
  missing tokens cost credit and only the exact answer scores 1.

The reward arrives on the last step of the completion; every other step gives 0. A
completion that reaches ``max_len`` without EOS is cut there and scored as is (it ends
the episode: ``terminated``, since nothing can follow). Observations are one-hot:
prompt, the tokens generated so far (PAD-filled) and the position.

The vector env is numpy throughout (no per-sample Python loop) and autoresets on the
next step like gymnasium's own vector envs. ``reset(options={"group_size": G})`` serves
each run of G consecutive envs the same prompt, as GRPO groups need; envs that autoreset
individually get fresh, independent prompts.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

TASKS = ("copy", "reverse", "sort")
REWARD_MODES = ("exact", "partial")


def answers(prompts: np.ndarray, task: str) -> np.ndarray:
    if task == "copy":
        return prompts.copy()
    if task == "reverse":
        return prompts[:, ::-1].copy()
    return np.sort(prompts, axis=1)


def score(completions: np.ndarray, lengths: np.ndarray, target: np.ndarray, mode: str) -> np.ndarray:
    """Vectorised reward: ``completions`` [n, max_len] (entries past ``lengths`` ignored)."""
    n, max_len = completions.shape
    prompt_len = target.shape[1]
    width = max(max_len, prompt_len)
    padded_target = np.full((n, width), -1)
    padded_target[:, :prompt_len] = target
    padded = np.full((n, width), -2)
    padded[:, :max_len] = completions
    in_both = np.arange(width)[None, :] < np.minimum(lengths, prompt_len)[:, None]
    matches = ((padded == padded_target) & in_both).sum(1)
    if mode == "exact":
        return ((matches == prompt_len) & (lengths == prompt_len)).astype(np.float32)
    return (matches / np.maximum(lengths, prompt_len)).astype(np.float32)


class ToySeqVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, prompt_len: int = 4, n_digits: int = 10, max_len: int = 6,
                 task: str = "copy", reward_mode: str = "partial", render_mode: str | None = None):
        if task not in TASKS:
            raise ValueError(f"env.kwargs.task={task!r}; valid choices: {', '.join(TASKS)}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"env.kwargs.reward_mode={reward_mode!r}; valid choices: {', '.join(REWARD_MODES)}")
        if not (1 <= prompt_len <= 32 and 2 <= n_digits <= 100 and prompt_len <= max_len <= 64):
            raise ValueError("env.kwargs need 1 <= prompt_len <= max_len <= 64 and 2 <= n_digits <= 100")
        self.num_envs, self.prompt_len, self.n_digits, self.max_len = num_envs, prompt_len, n_digits, max_len
        self.task, self.reward_mode, self.render_mode = task, reward_mode, render_mode
        self.eos = n_digits              # token ids: digits 0..n_digits-1, then EOS
        self.vocab = n_digits + 1
        self.pad = self.vocab            # only in observations, never emitted
        self.obs_dim = prompt_len * n_digits + max_len * (self.vocab + 1) + max_len

        self.single_action_space = gym.spaces.Discrete(self.vocab)
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (self.obs_dim,), np.float32)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)

        self._eye_prompt = np.eye(n_digits, dtype=np.float32)
        self._eye_token = np.eye(self.vocab + 1, dtype=np.float32)
        self._eye_pos = np.eye(max_len, dtype=np.float32)
        self.prompts = np.zeros((num_envs, prompt_len), dtype=np.int64)
        self.generated = np.full((num_envs, max_len), self.pad, dtype=np.int64)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.prev_done = np.zeros(num_envs, dtype=bool)

    def _new_prompts(self, n: int) -> np.ndarray:
        return self.np_random.integers(0, self.n_digits, size=(n, self.prompt_len))

    def _restart(self, idx: np.ndarray) -> None:
        self.generated[idx] = self.pad
        self.t[idx] = 0

    def _obs(self) -> np.ndarray:
        n = self.num_envs
        return np.concatenate([
            self._eye_prompt[self.prompts].reshape(n, -1),
            self._eye_token[self.generated].reshape(n, -1),
            self._eye_pos[np.minimum(self.t, self.max_len - 1)],
        ], axis=1)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        group = int((options or {}).get("group_size", 1))
        if group < 1 or self.num_envs % group:
            raise ValueError(f"group_size={group} must divide num_envs={self.num_envs}")
        self.prompts = np.repeat(self._new_prompts(self.num_envs // group), group, axis=0)
        self._restart(np.arange(self.num_envs))
        self.prev_done[:] = False
        return self._obs(), {}

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions, dtype=np.int64)
        resetting = self.prev_done
        live = ~resetting
        rows = np.flatnonzero(live)
        self.generated[rows, self.t[rows]] = actions[rows]
        self.t[rows] += 1
        eos = live & (actions == self.eos)
        cut = live & ~eos & (self.t >= self.max_len)
        done = eos | cut
        reward = np.zeros(self.num_envs, dtype=np.float32)
        if done.any():
            lengths = np.where(eos, self.t - 1, self.t)[done]   # EOS is not part of the answer
            reward[done] = score(self.generated[done], lengths, answers(self.prompts[done], self.task),
                                 self.reward_mode)
        if resetting.any():                                     # next-step autoreset
            self.prompts[resetting] = self._new_prompts(int(resetting.sum()))
            self._restart(np.flatnonzero(resetting))
        self.prev_done = done
        return self._obs(), reward, done, np.zeros(self.num_envs, dtype=bool), {}


class ToySeqEnv(gym.Env):
    """The single-env view (``gym.make``); training uses the vector env."""

    metadata = {"render_modes": []}

    def __init__(self, **kwargs: Any):
        self._vec = ToySeqVectorEnv(num_envs=1, **kwargs)
        self.action_space = self._vec.single_action_space
        self.observation_space = self._vec.single_observation_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self._vec.reset(seed=seed, options=options)
        return obs[0], info

    def step(self, action: int):
        obs, reward, terminated, truncated, info = self._vec.step(np.array([action]))
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), info


def register() -> None:
    if "harness/ToySeq-v0" not in gym.registry:
        gym.register("harness/ToySeq-v0", entry_point=ToySeqEnv, vector_entry_point=ToySeqVectorEnv)

"""ToySeq: a laptop-sized stand-in for LLM fine-tuning with verifiable rewards.

The vocabulary is a tokenizer's: ``<pad> <s> </s> <a> </a>`` and the digits ``0..n_digits-1``
(:class:`Vocab`). A prompt is ``<s>`` and 2..``prompt_len`` digits, left-padded with ``<pad>``
to one width (as a batch of LLM prompts is). The expected completion is the answer between
markers, then EOS: ``<a> answer </a> </s>``; the answer has as many digits as the prompt, so
answer lengths vary. Tasks: ``copy`` (the prompt), ``reverse``, ``sort`` (ascending).

Several reward functions, each in [0, 1], are summed with ``reward_weights`` (TRL's
``reward_funcs`` / ``reward_weights``):

- ``format``: 1 if the completion is exactly ``<a> digit+ </a>`` and then EOS, else 0;
- ``correct``: the digits between a leading ``<a>`` and the first ``</a>`` against the answer:
  ``exact`` 1/0, or ``partial`` = matching positions / max(len, answer length); an answer span
  that is never closed (e.g. cut at the length limit) scores 0, as a verifier that parses
  ``\\boxed{...}`` or ``Answer: N`` does.

A completion ends at EOS or at the batch's ``max_len`` (cut: scored as is, so a cut answer
has no format credit); with ``reset(options={"stop_at_close": True})`` also at ``</a>``, which it
keeps (a second end token, as a chat model's end of turn): ``<a> digits </a>`` closed that way is
well formed. The default weights (0.3 / 0.65) make rewards that are not dyadic
fractions, as real reward mixes are (float residue in a group std can then happen).

:class:`ToySeqVectorEnv` serves the task one token per step (the PPO view: one-hot
observations of the prompt, the tokens so far and the position; the reward on the last
step, with each reward function's value in ``info["reward/<fn>"]``); GRPO generates whole
completions with its sampler and replays them through the same env, so reward wrappers of
a fault act on both. Everything is numpy and vectorised over envs; ``reset(options=
{"group_size": G, "max_len": m})`` serves each run of G consecutive envs the same prompt
(GRPO groups) and caps completions at m tokens for this batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

TASKS = ("copy", "reverse", "sort")
REWARD_MODES = ("exact", "partial")
REWARD_FNS = ("format", "correct")
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<a>", "</a>")


@dataclass(frozen=True)
class Vocab:
    """Token ids: the special tokens first, then the digits (their strings are the numbers)."""

    n_digits: int = 10
    pad: int = 0
    bos: int = 1
    eos: int = 2
    open: int = 3
    close: int = 4
    first_digit: int = 5

    @property
    def size(self) -> int:
        return self.first_digit + self.n_digits

    def tokens(self) -> list[str]:
        """The token strings in id order (what a WordLevel tokenizer's vocabulary holds)."""
        return [*SPECIAL_TOKENS, *(str(d) for d in range(self.n_digits))]

    def decode(self, ids: np.ndarray | list[int]) -> str:
        names = self.tokens()
        return " ".join(names[int(i)] for i in ids)


def answers(digits: np.ndarray, lengths: np.ndarray, task: str) -> np.ndarray:
    """The answer digits [n, prompt_len] of each prompt (positions past ``lengths`` are -1)."""
    n, width = digits.shape
    real = np.arange(width)[None, :] < lengths[:, None]
    if task == "copy":
        out = digits.copy()
    elif task == "reverse":   # reverse the first lengths[i] digits of each row
        idx = np.clip(lengths[:, None] - 1 - np.arange(width)[None, :], 0, width - 1)
        out = np.take_along_axis(digits, idx, axis=1)
    else:
        out = np.sort(np.where(real, digits, np.iinfo(np.int64).max), axis=1)
    return np.where(real, out, -1)


def score(completions: np.ndarray, lengths: np.ndarray, ended_with_eos: np.ndarray, target: np.ndarray,
          target_len: np.ndarray, vocab: Vocab, mode: str) -> dict[str, np.ndarray]:
    """Every reward function's value (float32 arrays), vectorised.

    ``completions`` [n, L] token ids, of which the first ``lengths`` count (EOS excluded);
    ``ended_with_eos`` says whether the completion was closed by EOS (not cut); ``target``
    [n, W] the answer digits (-1 past ``target_len``)."""
    n, width = completions.shape
    pos = np.arange(width)[None, :]
    inside = pos < lengths[:, None]
    toks = np.where(inside, completions, -1)
    is_digit = (toks >= vocab.first_digit) & inside
    is_close = (toks == vocab.close) & inside
    opened = (toks[:, 0] == vocab.open) & (lengths > 0)
    # the first </a> after position 0 (or the end of the completion)
    close_after = is_close & (pos >= 1)
    closed = opened & close_after.any(1)
    first_close = np.where(close_after.any(1), close_after.argmax(1), lengths)
    region_len = np.where(opened, first_close - 1, 0)                  # digits between the markers
    well_formed = (opened & close_after.any(1) & (first_close == lengths - 1) & (region_len >= 1)
                   & ended_with_eos)
    in_region = (pos >= 1) & (pos < first_close[:, None]) & opened[:, None]
    well_formed &= ~(in_region & ~is_digit).any(1)

    # compare the region (shifted to start at 0) with the answer
    rwidth = max(width, target.shape[1])
    region = np.full((n, rwidth), -2, dtype=np.int64)
    shifted = np.where(in_region & is_digit, toks - vocab.first_digit, -3)[:, 1:]
    region[:, : shifted.shape[1]] = shifted
    region[np.arange(rwidth)[None, :] >= region_len[:, None]] = -2
    tgt = np.full((n, rwidth), -1, dtype=np.int64)
    tgt[:, : target.shape[1]] = target
    matches = (region == tgt).sum(1)
    if mode == "exact":
        correct = (matches == target_len) & (region_len == target_len)
    else:
        correct = matches / np.maximum(np.maximum(region_len, target_len), 1)
    correct = np.where(closed, correct, 0.0)          # an answer span that is never closed is not parsed
    return {"format": well_formed.astype(np.float32), "correct": np.asarray(correct, dtype=np.float32)}


def combine(scores: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    """The reward: the weighted sum of the reward functions (float32, as reward tensors are)."""
    total = np.zeros_like(next(iter(scores.values())), dtype=np.float32)
    for name, w in weights.items():
        total += np.float32(w) * scores[name]
    return total


class ToySeqVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, prompt_len: int = 5, min_prompt_len: int = 2, n_digits: int = 10,
                 max_len: int = 10, task: str = "copy", reward_mode: str = "exact",
                 reward_weights: dict[str, float] | None = None, render_mode: str | None = None):
        if task not in TASKS:
            raise ValueError(f"env.kwargs.task={task!r}; valid choices: {', '.join(TASKS)}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"env.kwargs.reward_mode={reward_mode!r}; valid choices: {', '.join(REWARD_MODES)}")
        if not (1 <= min_prompt_len <= prompt_len <= 32 and 2 <= n_digits <= 100 and 1 <= max_len <= 64):
            raise ValueError("env.kwargs need 1 <= min_prompt_len <= prompt_len <= 32, 2 <= n_digits <= 100 "
                             "and 1 <= max_len <= 64")
        weights = dict(reward_weights if reward_weights is not None else {"format": 0.3, "correct": 0.65})
        unknown = sorted(set(weights) - set(REWARD_FNS))
        if unknown or not weights:
            raise ValueError(f"env.kwargs.reward_weights has {unknown[0] if unknown else 'no function'}; "
                             f"valid reward functions: {', '.join(REWARD_FNS)}")
        if any(not isinstance(w, (int, float)) or not 0 <= w <= 10 for w in weights.values()):
            raise ValueError("env.kwargs.reward_weights must be numbers in [0, 10]")
        self.num_envs, self.prompt_len, self.min_prompt_len = num_envs, prompt_len, min_prompt_len
        self.n_digits, self.max_len, self.batch_max_len = n_digits, max_len, max_len
        self.task, self.reward_mode, self.render_mode = task, reward_mode, render_mode
        self.reward_weights = {k: float(v) for k, v in weights.items()}
        self.vocab = Vocab(n_digits)
        self.eos, self.n_tokens = self.vocab.eos, self.vocab.size
        self.prompt_width = 1 + prompt_len                  # <s> + digits, left-padded
        self.empty = self.n_tokens                           # "no token yet" in observations
        self.obs_dim = self.prompt_width * self.n_tokens + max_len * (self.n_tokens + 1) + max_len

        self.single_action_space = gym.spaces.Discrete(self.n_tokens)
        self.single_observation_space = gym.spaces.Box(0.0, 1.0, (self.obs_dim,), np.float32)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)

        self.digits = np.zeros((num_envs, prompt_len), dtype=np.int64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.prompts = np.zeros((num_envs, self.prompt_width), dtype=np.int64)
        self.generated = np.full((num_envs, max_len), self.empty, dtype=np.int64)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.prev_done = np.zeros(num_envs, dtype=bool)

    # ---- prompts -------------------------------------------------------------------------
    def sample_prompts(self, n: int, rng: np.random.Generator | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n`` fresh prompts: (token ids [n, prompt_width] left-padded, digits, lengths)."""
        rng = rng if rng is not None else self.np_random
        lengths = rng.integers(self.min_prompt_len, self.prompt_len + 1, size=n)
        digits = rng.integers(0, self.n_digits, size=(n, self.prompt_len))
        digits[np.arange(self.prompt_len)[None, :] >= lengths[:, None]] = -1
        return self.encode_prompts(digits, lengths), digits, lengths

    def encode_prompts(self, digits: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        n, width = len(lengths), self.prompt_width
        ids = np.full((n, width), self.vocab.pad, dtype=np.int64)
        start = width - 1 - lengths                              # where <s> goes
        ids[np.arange(n), start] = self.vocab.bos
        col = np.arange(width)[None, :] - start[:, None] - 1      # digit index at each column
        real = (col >= 0) & (col < lengths[:, None])
        ids[real] = np.take_along_axis(digits, np.clip(col, 0, self.prompt_len - 1), axis=1)[real] \
            + self.vocab.first_digit
        return ids

    def targets(self, digits: np.ndarray | None = None, lengths: np.ndarray | None = None) -> np.ndarray:
        digits = self.digits if digits is None else digits
        lengths = self.lengths if lengths is None else lengths
        return answers(digits, lengths, self.task)

    def demonstrations(self, n: int, rng: np.random.Generator, digit_noise: float, format_noise: float
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Noisy demonstrations for the supervised warm-up: (prompt ids, completion ids
        [n, max_len] PAD-filled, completion lengths incl. EOS). Each answer digit is replaced
        by a random one with probability ``digit_noise``; with probability ``format_noise`` the
        completion drops a digit, repeats one, or omits ``</a>``."""
        prompts, digits, lengths = self.sample_prompts(n, rng)
        ans = self.targets(digits, lengths)
        noisy = np.where(rng.random(ans.shape) < digit_noise, rng.integers(0, self.n_digits, ans.shape), ans)
        comp = np.full((n, self.max_len), self.vocab.pad, dtype=np.int64)
        out_len = np.zeros(n, dtype=np.int64)
        kinds = np.where(rng.random(n) < format_noise, rng.integers(1, 4, n), 0)
        for i in range(n):   # demonstration data, built once per warm-up (not in the training loop)
            body = [int(d) + self.vocab.first_digit for d in noisy[i, : lengths[i]]]
            if kinds[i] == 1 and len(body) > 1:
                body = body[:-1]
            elif kinds[i] == 2:
                body = body + body[-1:]
            seq = [self.vocab.open, *body] + ([] if kinds[i] == 3 else [self.vocab.close]) + [self.vocab.eos]
            seq = seq[: self.max_len]
            comp[i, : len(seq)] = seq
            out_len[i] = len(seq)
        return prompts, comp, out_len

    # ---- scoring -------------------------------------------------------------------------
    def score(self, completions: np.ndarray, lengths: np.ndarray, ended_with_eos: np.ndarray,
              rows: np.ndarray | slice = slice(None)) -> dict[str, np.ndarray]:
        target = self.targets(self.digits[rows], self.lengths[rows])
        return score(completions, lengths, ended_with_eos, target, self.lengths[rows], self.vocab,
                     self.reward_mode)

    # ---- the task as text (what a Hugging Face / TRL user has) ----------------------------
    def prompt_texts(self, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        """``n`` prompts as dataset rows: ``prompt`` (the text the tokenizer encodes, e.g.
        ``"<s> 3 1 4"``; no padding), ``answer`` (the answer digits)."""
        _, digits, lengths = self.sample_prompts(n, rng)
        target = self.targets(digits, lengths)
        return [{"prompt": self.vocab.decode([self.vocab.bos, *(digits[i, : lengths[i]] + self.vocab.first_digit)]),
                 "answer": [int(d) for d in target[i, : lengths[i]]]} for i in range(n)]

    def score_completion_ids(self, completion_ids: list[list[int]], answers: list[list[int]],
                             max_len: int | None = None, stop_at_close: bool = False) -> dict[str, list[float]]:
        """Every reward function for completions given as token-id lists (TRL's ``completion_ids``):
        a completion ends at its first EOS (or, ``stop_at_close``, at its first ``</a>``, which it
        keeps); one with neither was cut at ``max_len``."""
        n = len(completion_ids)
        width = max([len(c) for c in completion_ids] + [1])
        comp = np.full((n, width), self.vocab.pad, dtype=np.int64)
        lengths = np.zeros(n, dtype=np.int64)
        ended = np.zeros(n, dtype=bool)
        for i, ids in enumerate(completion_ids):
            ids = list(ids)
            ends = [k for k, tok in enumerate(ids) if tok == self.vocab.eos or (stop_at_close and tok == self.vocab.close)]
            if ends:                       # EOS is not part of the answer; a closing </a> is
                k = ends[0]
                ids, ended[i] = ids[: k + 1 if ids[k] == self.vocab.close else k], True
            comp[i, : len(ids)] = ids
            lengths[i] = len(ids)
        target_len = np.array([len(a) for a in answers])
        target = np.full((n, max(target_len.max(initial=1), 1)), -1, dtype=np.int64)
        for i, a in enumerate(answers):
            target[i, : len(a)] = a
        got = score(comp, lengths, ended, target, target_len, self.vocab, self.reward_mode)
        return {name: [float(v) for v in values] for name, values in got.items()}

    # ---- the per-token env ---------------------------------------------------------------
    def observe(self, prompts: np.ndarray, generated: np.ndarray, t: np.ndarray) -> np.ndarray:
        """One-hot (prompt tokens, tokens generated so far with ``empty`` after them, position)."""
        n = len(prompts)
        eye = np.eye(self.n_tokens + 1, dtype=np.float32)
        return np.concatenate([
            eye[prompts][..., : self.n_tokens].reshape(n, -1),
            eye[generated].reshape(n, -1),
            np.eye(self.max_len, dtype=np.float32)[np.minimum(t, self.max_len - 1)],
        ], axis=1)

    def _new_prompts(self, idx: np.ndarray, group: int = 1) -> None:
        ids, digits, lengths = self.sample_prompts(len(idx) // group)
        self.prompts[idx] = np.repeat(ids, group, axis=0)
        self.digits[idx] = np.repeat(digits, group, axis=0)
        self.lengths[idx] = np.repeat(lengths, group, axis=0)

    def _restart(self, idx: np.ndarray) -> None:
        self.generated[idx] = self.empty
        self.t[idx] = 0

    def _obs(self) -> np.ndarray:
        return self.observe(self.prompts, self.generated, self.t)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        group = int(options.get("group_size", 1))
        if group < 1 or self.num_envs % group:
            raise ValueError(f"group_size={group} must divide num_envs={self.num_envs}")
        self.batch_max_len = int(options.get("max_len", self.max_len))
        self.stop_at_close = bool(options.get("stop_at_close", False))
        if not 1 <= self.batch_max_len <= self.max_len:
            raise ValueError(f"max_len={self.batch_max_len} must be in [1, {self.max_len}] (env.kwargs.max_len)")
        self._new_prompts(np.arange(self.num_envs), group)
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
        stop = live & (actions == self.vocab.close) & self.stop_at_close     # a second end token, kept
        cut = live & ~eos & ~stop & (self.t >= self.batch_max_len)
        done = eos | stop | cut
        reward = np.zeros(self.num_envs, dtype=np.float32)
        info: dict[str, Any] = {}
        scores = {name: np.zeros(self.num_envs, dtype=np.float32) for name in REWARD_FNS}
        if done.any():
            idx = np.flatnonzero(done)
            lengths = np.where(eos, self.t - 1, self.t)[idx]      # EOS is not part of the answer
            got = self.score(self.generated[idx], lengths, (eos | stop)[idx], idx)
            for name in REWARD_FNS:
                scores[name][idx] = got[name]
            reward[idx] = combine(got, self.reward_weights)
        for name in REWARD_FNS:
            info[f"reward/{name}"] = scores[name]
        if resetting.any():                                     # next-step autoreset
            idx = np.flatnonzero(resetting)
            self._new_prompts(idx)
            self._restart(idx)
        self.prev_done = done
        return self._obs(), reward, done, np.zeros(self.num_envs, dtype=bool), info


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
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), \
            {k: v[0] for k, v in info.items()}


def register() -> None:
    if "harness/ToySeq-v0" not in gym.registry:
        gym.register("harness/ToySeq-v0", entry_point=ToySeqEnv, vector_entry_point=ToySeqVectorEnv)

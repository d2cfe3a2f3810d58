"""The token environment: verifiable rewards, group prompts, vectorised next-step autoreset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import harness.envs  # noqa: F401 - registers harness/ToySeq-v0
from harness.config import ConfigError
from harness.envs.toyseq import answers, score
from tests.helpers import make_experiment


def make(n: int = 4, **kwargs):
    return gym.make_vec("harness/ToySeq-v0", num_envs=n, vectorization_mode="vector_entry_point", **kwargs)


def test_scores_exact_and_partial():
    target = np.array([[1, 2, 3, 4]] * 4)
    comp = np.array([[1, 2, 3, 4, 9, 9], [1, 2, 0, 4, 9, 9], [1, 2, 3, 9, 9, 9], [1, 2, 3, 4, 5, 6]])
    lengths = np.array([4, 4, 3, 6])
    assert score(comp, lengths, target, "exact").tolist() == [1, 0, 0, 0]
    assert score(comp, lengths, target, "partial").tolist() == pytest.approx([1, 0.75, 0.75, 4 / 6])
    prompts = np.array([[3, 1, 2]])
    assert answers(prompts, "reverse").tolist() == [[2, 1, 3]]
    assert answers(prompts, "sort").tolist() == [[1, 2, 3]]


def test_group_reset_and_answering_a_prompt():
    envs = make(8, task="reverse", reward_mode="exact")
    envs.reset(seed=0, options={"group_size": 4})
    p = envs.unwrapped.prompts
    assert (p[:4] == p[0]).all() and (p[4:] == p[4]).all() and not (p[0] == p[4]).all()
    target = p[:, ::-1]
    rewards = np.zeros(8)
    for t in range(5):   # the answer, then EOS; env 1 answers wrong
        action = target[:, t] if t < 4 else np.full(8, envs.unwrapped.eos)
        if t == 0:
            action = action.copy()
            action[1] = (action[1] + 1) % 10
        _, r, term, trunc, _ = envs.step(action)
        rewards += r
    assert term.all() and not trunc.any()
    assert rewards.tolist() == [1, 0, 1, 1, 1, 1, 1, 1]
    obs, r, term, _, _ = envs.step(np.zeros(8, dtype=int))   # next-step autoreset
    assert (r == 0).all() and not term.any() and (envs.unwrapped.t == 0).all()


def test_completion_cut_at_max_len_ends_the_episode():
    envs = make(2, max_len=5)
    envs.reset(seed=1)
    for t in range(5):
        _, r, term, _, _ = envs.step(np.array([0, 0]))
        assert term.all() == (t == 4)


def test_observation_is_one_hot_and_vectorised():
    envs = make(16)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (16, envs.unwrapped.obs_dim) and obs.dtype == np.float32
    # prompt (4 one-hots), prefix (6 one-hots incl. PAD) and position (1 one-hot)
    assert (obs.sum(1) == 4 + 6 + 1).all()


@pytest.mark.parametrize("override, message", [
    ("env.kwargs.task=translate", "task='translate'; valid choices: copy, reverse, sort"),
    ("env.kwargs.reward_mode=fuzzy", "reward_mode='fuzzy'; valid choices: exact, partial"),
    ("env.kwargs.max_len=2", "prompt_len <= max_len"),
])
def test_bad_env_kwargs_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        make_experiment(["algo=grpo", "env=toyseq", override])

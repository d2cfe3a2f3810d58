"""The token tasks: vocabulary, variable-length prompts, the answer format, the reward functions,
group prompts and vectorised next-step autoreset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import harness.envs  # noqa: F401 - registers harness/ToySeq-v0
from harness.config import ConfigError
from harness.envs.toyseq import Vocab, answers, combine, score
from tests.helpers import make_experiment

V = Vocab()


def make(n: int = 4, **kwargs):
    return gym.make_vec("harness/ToySeq-v0", num_envs=n, vectorization_mode="vector_entry_point", **kwargs)


def ids(*digits: int) -> list[int]:
    return [d + V.first_digit for d in digits]


def test_vocabulary_is_a_tokenizers():
    assert V.tokens()[:5] == ["<pad>", "<s>", "</s>", "<a>", "</a>"] and V.size == 15
    assert V.decode([V.bos, *ids(3, 1), V.open]) == "<s> 3 1 <a>"


def test_answers_of_variable_length_prompts():
    digits = np.array([[3, 1, 2, -1], [5, 4, 9, 0]])
    lengths = np.array([3, 4])
    assert answers(digits, lengths, "copy").tolist() == [[3, 1, 2, -1], [5, 4, 9, 0]]
    assert answers(digits, lengths, "reverse").tolist() == [[2, 1, 3, -1], [0, 9, 4, 5]]
    assert answers(digits, lengths, "sort").tolist() == [[1, 2, 3, -1], [0, 4, 5, 9]]


def test_format_and_correctness_rewards():
    target = np.array([[1, 2, 3]] * 6)
    rows = [
        [V.open, *ids(1, 2, 3), V.close],          # right, well formed
        [V.open, *ids(1, 2, 4), V.close],          # wrong digit
        [V.open, *ids(1, 2, 3)],                   # no closing marker: the answer is not parsed
        [*ids(1, 2, 3)],                           # no markers
        [V.open, *ids(1, 2), V.close],             # one digit short
        [V.open, *ids(1, 2, 3), V.close, V.close],  # trailing junk
    ]
    comp = np.full((6, 8), V.pad)
    for i, r in enumerate(rows):
        comp[i, : len(r)] = r
    lengths = np.array([len(r) for r in rows])
    ended = np.ones(6, dtype=bool)
    exact = score(comp, lengths, ended, target, np.full(6, 3), V, "exact")
    assert exact["format"].tolist() == [1, 1, 0, 0, 1, 0]
    assert exact["correct"].tolist() == [1, 0, 0, 0, 0, 1]
    partial = score(comp, lengths, ended, target, np.full(6, 3), V, "partial")
    assert partial["correct"].tolist() == pytest.approx([1, 2 / 3, 0, 0, 2 / 3, 1])
    cut = score(comp[:1], lengths[:1], np.array([False]), target[:1], np.array([3]), V, "exact")
    assert cut["format"].tolist() == [0]                       # cut at the length limit: no EOS, no format
    total = combine(exact, {"format": 0.3, "correct": 0.65})
    assert total.dtype == np.float32 and total[0] == np.float32(0.3) + np.float32(0.65)


def test_group_reset_prompts_and_answering_them():
    envs = make(8, task="reverse", reward_mode="exact")
    envs.reset(seed=0, options={"group_size": 4})
    env = envs.unwrapped
    p = env.prompts
    assert (p[:4] == p[0]).all() and (p[4:] == p[4]).all() and not (p[0] == p[4]).all()
    target = env.targets()
    seqs = [[V.open, *ids(*target[i, : env.lengths[i]]), V.close, V.eos] for i in range(8)]
    seqs[1][1] = V.first_digit + (target[1, 0] + 1) % 10          # env 1 answers a wrong first digit
    width = max(len(q) for q in seqs)
    actions = np.array([q + [V.pad] * (width - len(q)) for q in seqs])
    rewards, fmt, correct = np.zeros(8), np.zeros(8), np.zeros(8)
    for t in range(width):            # after its EOS an env autoresets and starts an unfinished episode
        _, r, term, trunc, info = envs.step(actions[:, t])
        rewards += r
        fmt += info["reward/format"]
        correct += info["reward/correct"]
    assert fmt.tolist() == [1] * 8 and correct.tolist() == [1, 0, 1, 1, 1, 1, 1, 1]
    assert rewards == pytest.approx([0.95, 0.3, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95])


def test_completion_cut_at_the_batch_max_len_ends_the_episode():
    envs = make(2, max_len=10)
    envs.reset(seed=1, options={"max_len": 4})
    for t in range(4):
        _, r, term, _, _ = envs.step(np.array([V.open, V.open]))
        assert term.all() == (t == 3)
    with pytest.raises(ValueError, match="max_len=11 must be in"):
        envs.reset(options={"max_len": 11})


def test_left_padded_prompts_of_variable_length():
    envs = make(64, min_prompt_len=2, prompt_len=5)
    envs.reset(seed=0)
    env = envs.unwrapped
    assert set(env.lengths) == {2, 3, 4, 5}
    for row, k in zip(env.prompts, env.lengths):
        assert (row[: 5 - k] == V.pad).all() and row[5 - k] == V.bos and (row[6 - k:] >= V.first_digit).all()


def test_observation_is_one_hot_and_vectorised():
    envs = make(16)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (16, envs.unwrapped.obs_dim) and obs.dtype == np.float32
    # prompt (6 one-hot tokens incl. padding), prefix (10 one-hots incl. "empty") and position (1 one-hot)
    assert (obs.sum(1) == 6 + 10 + 1).all()


@pytest.mark.parametrize("override, message", [
    ("env.kwargs.task=translate", "task='translate'; valid choices: copy, reverse, sort"),
    ("env.kwargs.reward_mode=fuzzy", "reward_mode='fuzzy'; valid choices: exact, partial"),
    ("env.kwargs.max_len=0", "1 <= max_len <= 64"),
    ("+env.kwargs.reward_weights.length=1", "reward_weights has length; valid reward functions: format, correct"),
])
def test_bad_env_kwargs_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        make_experiment(["algo=ppo", "env=toyseq", override])

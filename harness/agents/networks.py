"""Actor-critic networks: separate tanh MLPs for policy and value (CleanRL layout).

The policy is Categorical for discrete action spaces and a diagonal Gaussian with a
state-independent log-std for Box action spaces. Distributions are written out by hand
(log-softmax / Gaussian log-density) because torch.distributions costs more per call
than the whole forward pass on these tiny networks.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

LOG_2PI = math.log(2 * math.pi)


def layer(n_in: int, n_out: int, std: float = math.sqrt(2)) -> nn.Linear:
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


def mlp(n_in: int, n_out: int, hidden: int, out_std: float) -> nn.Sequential:
    return nn.Sequential(layer(n_in, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(),
                         layer(hidden, n_out, out_std))


def sample_categorical(logp_all: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A sample from softmax over the last dimension by Gumbel-max, and its log-prob."""
    gumbel = torch.rand_like(logp_all).log_().neg_().log_().neg_()
    action = (logp_all + gumbel).argmax(-1)
    return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)


def categorical_logp_entropy(logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-prob of ``action`` under softmax(``logits``) over the last dimension, and the entropy."""
    logp_all = logits.log_softmax(-1)
    logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1)


class ActorCritic(nn.Module):
    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.Space, hidden: int = 64):
        super().__init__()
        obs_dim = int(np.prod(obs_space.shape))
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if self.discrete:
            n_out = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            n_out = int(np.prod(action_space.shape))
            self.log_std = nn.Parameter(torch.zeros(n_out))
        else:
            raise TypeError(f"unsupported action space {action_space}")
        self.actor = mlp(obs_dim, n_out, hidden, out_std=0.01)
        self.critic = mlp(obs_dim, 1, hidden, out_std=1.0)
        # the linear layers, for the forward below (a tuple: not registered twice as submodules)
        self._layers = {"actor": tuple(self.actor[::2]), "critic": tuple(self.critic[::2])}

    def _mlp(self, part: str, x: torch.Tensor) -> torch.Tensor:
        """``self.actor(x)`` / ``self.critic(x)`` with the same operations on the same parameters, without
        nn.Module's call machinery (about a tenth of a small PPO run's wall time); reads each layer's
        weight at call time, so swapped or reloaded parameters are used."""
        first, second, last = self._layers[part]
        x = torch.tanh(F.linear(x, first.weight, first.bias))
        x = torch.tanh(F.linear(x, second.weight, second.bias))
        return F.linear(x, last.weight, last.bias)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._mlp("critic", obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (action, log-prob, value)."""
        out = self._mlp("actor", obs)
        if self.discrete:
            action, logp = sample_categorical(out.log_softmax(-1))
        else:
            std = self.log_std.exp()
            action = out + std * torch.randn_like(out)
            logp = self._gaussian_logp(out, action)
        return action, logp, self.value(obs)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob and entropy of ``action`` under the current policy, and the value."""
        out = self._mlp("actor", obs)
        if self.discrete:
            logp, entropy = categorical_logp_entropy(out, action)
        else:
            logp = self._gaussian_logp(out, action)
            entropy = (0.5 + 0.5 * LOG_2PI + self.log_std).sum().expand(out.shape[0])
        return logp, entropy, self.value(obs)

    def _gaussian_logp(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        z = (action - mean) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * LOG_2PI).sum(-1)


class MLPLM(nn.Module):
    """The GRPO ``model=mlp`` policy: a tanh MLP from the one-hot (prompt, tokens generated so far,
    position) observation to next-token logits, with the same interface as the transformer
    (``forward(input_ids, attention_mask) -> logits`` for every position; prompts are
    ``prompt_width`` tokens, left-padded). It has no attention and no cache: it is the v1 policy,
    kept as a baseline."""

    def __init__(self, prompt_width: int, max_new: int, vocab: int, hidden: int = 256):
        super().__init__()
        self.prompt_width, self.max_new, self.vocab = prompt_width, max_new, vocab
        obs_dim = prompt_width * vocab + max_new * (vocab + 1) + max_new
        self.net = mlp(obs_dim, vocab, hidden, out_std=0.01)

    def observe(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Observations [B, C + 1, obs_dim] for predicting completion tokens 0..C (C = completion
        tokens present): the same one-hot layout as the per-token env's observations."""
        b, s = input_ids.shape
        p, v, m = self.prompt_width, self.vocab, self.max_new
        comp = input_ids[:, p:]
        c = comp.shape[1]
        prompt = F.one_hot(input_ids[:, :p], v).float().reshape(b, 1, p * v).expand(b, c + 1, p * v)
        j = torch.arange(c + 1)
        cols = torch.arange(m)
        padded = torch.full((b, m), v, dtype=torch.long)
        padded[:, :c] = comp[:, :m]
        prefix = torch.where(cols[None, None, :] < j[None, :, None], padded[:, None, :], v)   # [B, C+1, m]
        prefix = F.one_hot(prefix, v + 1).float().reshape(b, c + 1, m * (v + 1))
        pos = F.one_hot(j.clamp(max=m - 1), m).float().expand(b, c + 1, m)
        return torch.cat([prompt, prefix, pos], dim=-1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: None = None) -> torch.Tensor:
        b, s = input_ids.shape
        logits = torch.zeros(b, s, self.vocab)
        logits[:, self.prompt_width - 1:] = self.net(self.observe(input_ids))
        return logits

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

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions; returns (action, log-prob, value)."""
        out = self.actor(obs)
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
        out = self.actor(obs)
        if self.discrete:
            logp_all = out.log_softmax(-1)
            logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            logp = self._gaussian_logp(out, action)
            entropy = (0.5 + 0.5 * LOG_2PI + self.log_std).sum().expand(out.shape[0])
        return logp, entropy, self.value(obs)

    def _gaussian_logp(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        z = (action - mean) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * LOG_2PI).sum(-1)


class TokenPolicy(nn.Module):
    """The GRPO policy: a tanh MLP from the one-hot (prompt, prefix, position) observation to
    next-token logits. Autoregressive through the observation, which holds the prefix."""

    def __init__(self, obs_dim: int, vocab: int, hidden: int = 128):
        super().__init__()
        self.net = mlp(obs_dim, vocab, hidden, out_std=0.01)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample next tokens; returns (token, log-prob)."""
        return sample_categorical(self.net(obs).log_softmax(-1))

    @torch.no_grad()
    def logprob(self, obs: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        return self.net(obs).log_softmax(-1).gather(-1, token.unsqueeze(-1)).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-prob and entropy, with gradient; any leading shape."""
        logp_all = self.net(obs).log_softmax(-1)
        logp = logp_all.gather(-1, token.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy

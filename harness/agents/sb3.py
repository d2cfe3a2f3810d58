"""backend=sb3: stable-baselines3's PPO, unmodified, with faults and instrumentation added only
through its public extension points.

- one ``model.learn()`` call per update (``reset_num_timesteps=False`` after the first), so the
  effective hyperparameters of each update are set before it: ``n_epochs``, ``batch_size``,
  coefficients as attributes, learning rate and clip range as SB3 schedules;
- env faults wrap each single env (``make_vec_env(wrapper_class=...)``);
- the old-logprob hook acts in a subclassed rollout buffer (``rollout_buffer_class``), whose
  ``_get_samples`` runs lazily just before each minibatch is used;
- a subclassed policy records what ``evaluate_actions`` returns, a callback the rollout, and
  gradient / optimizer-step hooks the update.

Where SB3's logger has the canonical quantity it is captured (``train/policy_gradient_loss``,
``value_loss``, ``clip_fraction``, ``explained_variance``, ``learning_rate``, ``clip_range``;
``entropy`` is minus ``train/entropy_loss``). Where it differs the canonical value is measured:
SB3's ``train/approx_kl`` covers the last epoch only and ``train/loss`` is the last minibatch's.
Reading the logger right after each update also sidesteps SB3 writing ``train/*`` one
iteration late. What SB3 does not log (ratio statistics, raw advantages, pre-clip gradient
norm, optimizer steps, parameter change, non-finite values) is measured by instrumentation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.policies import ActorCriticPolicy
from torch.nn.utils import parameters_to_vector

from harness.agents.core import MinibatchStats, ratio_stats
from harness.agents.ppo import (
    updates_planned,  # the same budget as native PPO (run.agent reads it)
)
from harness.config import ConfigError, Experiment
from harness.hooks import HEALTHY, Hooks

#: the hooks SB3's PPO lets a fault reach without copying its code
EXPRESSIBLE = {"wrap_env", "hyperparams", "old_logprob"}


def check_expressible(fault: Hooks) -> None:
    overridden = sorted(name for name in ("wrap_env", "hyperparams", "old_logprob", "ref_logprob", "loss",
                                          "optimizer_step")
                        if getattr(type(fault), name) is not getattr(Hooks, name))
    missing = [name for name in overridden if name not in EXPRESSIBLE]
    if missing:
        raise ConfigError(f"fault {fault.name} cannot be expressed on backend=sb3: it acts on {missing[0]}, "
                          "which SB3's PPO does not expose (supported: env wrappers, hyperparameters, old log-probs)")


class Instrument:
    """Collects one update's per-minibatch statistics from the buffer and the policy."""

    def __init__(self) -> None:
        self.hooks: Hooks = HEALTHY
        self.hp: Any = None
        self.reset()

    def reset(self, per_epoch: int = 1) -> None:
        self.sample: Any = None
        self.stats = MinibatchStats()
        self.per_epoch = per_epoch        # minibatches per epoch, to index the rows
        self.grad_norms: list[float] = []
        self.steps = 0
        self.nonfinite = False
        self._sq, self._seen = 0.0, 0

    @torch.no_grad()
    def minibatch(self, values: torch.Tensor, log_prob: torch.Tensor, entropy: torch.Tensor | None) -> None:
        s, hp = self.sample, self.hp
        log_ratio = log_prob - s.old_log_prob
        ratio = log_ratio.exp()
        adv = s.advantages
        if hp.norm_adv and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        pg1, pg2 = -adv * ratio, -adv * ratio.clamp(1 - hp.clip_range, 1 + hp.clip_range)
        policy_loss = torch.max(pg1, pg2).mean()
        value_loss = (s.returns - values.flatten()).pow(2).mean()
        ent = entropy.mean() if entropy is not None else (-log_prob).mean()
        loss = float(policy_loss - hp.ent_coef * ent + hp.vf_coef * value_loss)
        if not math.isfinite(loss):
            self.nonfinite = True
        i = len(self.stats.rows)
        self.stats.add({"epoch": i // self.per_epoch, "minibatch": i % self.per_epoch, "n_samples": len(adv),
                        "n_tokens": len(adv), "policy_loss": float(policy_loss), "value_loss": float(value_loss),
                        "entropy": float(ent), "loss": loss,
                        **ratio_stats(ratio, log_ratio, pg1, pg2, hp.clip_range, adv),
                        "grad_norm": math.nan, "lr": hp.lr, "clip_range": hp.clip_range, "stepped": 0,
                        "nonfinite": int(not math.isfinite(loss))})

    def gradient(self, grad: torch.Tensor, n_params: int) -> None:
        """Called once per parameter after backward accumulates its gradient (before clipping)."""
        self._sq += float(grad.detach().pow(2).sum())
        self._seen += 1
        if self._seen == n_params:
            norm = math.sqrt(self._sq)
            self.grad_norms.append(norm)
            self.nonfinite |= not math.isfinite(norm)
            self._sq, self._seen = 0.0, 0
            row = self.stats.rows[-1]
            row["grad_norm"] = norm
            row["nonfinite"] = int(row["nonfinite"] or not math.isfinite(norm))

    def stepped(self) -> None:
        """Called after each optimizer.step()."""
        self.steps += 1
        self.stats.rows[-1]["stepped"] = 1

    def metrics(self) -> dict[str, float]:
        out = self.stats.result()
        out.update(grad_norm=float(np.mean(self.grad_norms)) if self.grad_norms else math.nan,
                   grad_norm_max=max(self.grad_norms, default=math.nan), optimizer_steps=self.steps)
        return out


class InstrumentedBuffer(RolloutBuffer):
    """Applies the old-logprob hook to each minibatch as SB3 draws it, and shows it to the instrument."""

    instrument: Instrument
    policy: ActorCriticPolicy

    def _get_samples(self, batch_inds: np.ndarray, env: Any = None) -> Any:
        samples = super()._get_samples(batch_inds, env)
        hooks = self.instrument.hooks
        if type(hooks).old_logprob is not Hooks.old_logprob:   # the live policy's log-probs, if needed
            discrete = isinstance(self.action_space, gym.spaces.Discrete)
            actions = samples.actions.long().flatten() if discrete else samples.actions
            with torch.no_grad():
                live = self.policy.get_distribution(samples.observations).log_prob(actions)
            samples = samples._replace(old_log_prob=hooks.old_logprob(samples.old_log_prob, live))
        self.instrument.sample = samples
        return samples


class InstrumentedPolicy(ActorCriticPolicy):
    """SB3's actor-critic, reporting what evaluate_actions returns for each minibatch."""

    instrument: Instrument

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor):
        values, log_prob, entropy = super().evaluate_actions(obs, actions)
        self.instrument.minibatch(values, log_prob, entropy)
        return values, log_prob, entropy


class RolloutRecorder(BaseCallback):
    """Rewards, finished episodes and the raw advantages of one rollout."""

    def __init__(self, num_envs: int) -> None:
        super().__init__()
        self.ep_return, self.ep_length = np.zeros(num_envs), np.zeros(num_envs, dtype=np.int64)
        self.base_step = 0     # env steps before this rollout (set by the training loop)

    def _on_rollout_start(self) -> None:
        self.rewards: list[np.ndarray] = []
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.episodes: list[dict[str, Any]] = []

    def _on_step(self) -> bool:
        rewards = np.array(self.locals["rewards"], dtype=float)   # before SB3's timeout bootstrap
        dones = self.locals["dones"]
        self.rewards.append(rewards)
        self.ep_return += rewards
        self.ep_length += 1
        self.returns += list(self.ep_return[dones])
        self.lengths += list(self.ep_length[dones])
        for i in np.flatnonzero(dones):       # Monitor (inside any fault wrapper) has the env's own return
            monitor = self.locals["infos"][i]["episode"]
            self.episodes.append({"env_step": self.base_step + len(self.rewards) * len(dones),
                                  "return": float(self.ep_return[i]), "env_return": float(monitor["r"]),
                                  "length": int(self.ep_length[i])})
        self.ep_return[dones], self.ep_length[dones] = 0.0, 0
        return True

    def metrics(self, buffer: RolloutBuffer) -> dict[str, float]:
        adv = buffer.advantages
        return {
            "reward_mean": float(np.mean(self.rewards)),
            "return_mean": float(np.mean(self.returns)) if self.returns else math.nan,
            "return_std": float(np.std(self.returns)) if self.returns else math.nan,
            "length_mean": float(np.mean(self.lengths)) if self.lengths else math.nan,
            "adv_mean": float(adv.mean()), "adv_std": float(adv.std(ddof=1)),
            "value_mean": float(buffer.values.mean()),
        }


def crosscheck(measured: dict[str, float], captured: dict[str, float], rtol: float = 1e-4) -> None:
    """The instrumentation recomputes what SB3 also logs; if they ever disagree, SB3 changed
    under us and no metric of this run can be trusted."""
    for name in ("policy_loss", "value_loss", "entropy", "clipfrac"):
        a, b = measured[name], captured[name]
        if math.isfinite(a) and math.isfinite(b) and abs(a - b) > rtol * max(1.0, abs(b)):
            raise RuntimeError(f"instrumented {name}={a!r} disagrees with SB3's logged value {b!r}")


def _schedule(instrument: Instrument, name: str):
    """An SB3 schedule (called with progress remaining) that returns this update's effective value."""
    return lambda _progress: getattr(instrument.hp, name)


def train(exp: Experiment) -> Iterator[dict]:
    cfg, fault = exp.algo, exp.fault
    check_expressible(fault)
    instrument = Instrument()
    instrument.hp = cfg
    envs = make_vec_env(exp.env.id, n_envs=cfg.num_envs, seed=exp.seed, env_kwargs=dict(exp.env.kwargs),
                        wrapper_class=fault.wrap_env)
    model = PPO(InstrumentedPolicy, envs, n_steps=cfg.n_steps, batch_size=cfg.batch_size // cfg.n_minibatches,
                n_epochs=cfg.n_epochs, learning_rate=_schedule(instrument, "lr"), gamma=cfg.gamma,
                gae_lambda=cfg.gae_lambda, clip_range=_schedule(instrument, "clip_range"),
                ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, max_grad_norm=cfg.max_grad_norm,
                normalize_advantage=cfg.norm_adv, rollout_buffer_class=InstrumentedBuffer, seed=exp.seed,
                device="cpu", policy_kwargs=dict(net_arch=dict(pi=[cfg.hidden] * 2, vf=[cfg.hidden] * 2),
                                                 activation_fn=torch.nn.Tanh))
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.policy.instrument = model.rollout_buffer.instrument = instrument
    model.rollout_buffer.policy = model.policy
    params = [p for p in model.policy.parameters() if p.requires_grad]
    n_params = len(params)
    for p in params:
        p.register_post_accumulate_grad_hook(lambda p: instrument.gradient(p.grad, n_params))
    model.policy.optimizer.register_step_post_hook(lambda *_: instrument.stepped())
    recorder = RolloutRecorder(cfg.num_envs)
    env_step = 0

    try:
        for update in range(updates_planned(exp)):
            hooks, hp = fault.begin_update(update, cfg)
            instrument.hooks, instrument.hp = hooks, hp
            minibatch_size = hp.batch_size // hp.n_minibatches
            instrument.reset(per_epoch=-(-cfg.batch_size // minibatch_size))
            model.n_epochs, model.batch_size = hp.n_epochs, minibatch_size
            model.ent_coef, model.vf_coef, model.max_grad_norm = hp.ent_coef, hp.vf_coef, hp.max_grad_norm
            model.normalize_advantage, model.gamma = hp.norm_adv, hp.gamma
            model.rollout_buffer.gamma, model.rollout_buffer.gae_lambda = hp.gamma, hp.gae_lambda

            before = parameters_to_vector(params).detach().clone()
            recorder.base_step = env_step
            model.learn(total_timesteps=cfg.batch_size, reset_num_timesteps=update == 0, callback=recorder,
                        progress_bar=False)
            after = parameters_to_vector(params).detach()
            env_step += cfg.batch_size
            logged = model.logger.name_to_value
            # captured from SB3's logger where its definition is the canonical one
            captured = {"policy_loss": logged["train/policy_gradient_loss"],
                        "value_loss": logged["train/value_loss"],
                        "entropy": -logged["train/entropy_loss"],
                        "clipfrac": logged["train/clip_fraction"],
                        "explained_variance": logged["train/explained_variance"],
                        "lr": logged["train/learning_rate"], "clip_range": logged["train/clip_range"]}
            measured = instrument.metrics()
            crosscheck(measured, captured)
            nonfinite = instrument.nonfinite or not bool(torch.isfinite(after).all())
            yield {
                "update": update, "env_step": env_step, "fault_active": fault.active,
                **recorder.metrics(model.rollout_buffer), **measured, **captured,
                "param_delta": float((after - before).norm()), "nonfinite": int(nonfinite),
                "steps": instrument.stats.rows,
                "episodes": [{"update": update, **e} for e in recorder.episodes],
            }
    finally:
        envs.close()


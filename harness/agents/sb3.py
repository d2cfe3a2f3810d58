"""backend=sb3: stable-baselines3's PPO, unmodified, with faults and instrumentation added only
through its public extension points.

- one ``model.learn()`` call per update (``reset_num_timesteps=False`` after the first), so the
  effective hyperparameters of each update are set before it: ``n_epochs``, ``batch_size``,
  ``target_kl``, coefficients as attributes, learning rate (with any warmup / annealing, the
  ``scheduled_lr`` hook) and clip range as SB3 schedules;
- env faults wrap each single env (``make_vec_env(wrapper_class=...)``, outside SB3's Monitor);
  the episode-boundary hooks act in an env adapter there too (:class:`EpisodeBoundary`), the
  way a gymnasium compatibility wrapper or a next-step-autoreset env reaches SB3; observation
  and reward normalisation is SB3's ``VecNormalize`` (the ``obs_norm_training`` hook sets its
  ``training`` flag);
- the old-logprob hook acts in a subclassed rollout buffer (``rollout_buffer_class``), whose
  ``_get_samples`` runs lazily just before each minibatch is used; the GAE and advantage hooks
  act in its ``compute_returns_and_advantage``;
- the zero-grad hook acts through ``policy_kwargs["optimizer_class"]``, an Adam whose
  ``zero_grad`` calls it (only when the fault overrides it);
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
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecNormalize
from torch.nn.utils import parameters_to_vector

from harness.agents.base import FrameworkTrainer
from harness.agents.core import MinibatchStats, begin_update, ratio_stats
from harness.agents.ppo import updates_planned
from harness.config import ConfigError, EnvConfig, Experiment
from harness.hooks import HEALTHY, Hooks, overrides

#: the hooks SB3's PPO lets a fault reach without copying its code, and where
EXPRESSIBLE = {
    "wrap_env": "env wrapper (make_vec_env wrapper_class)",
    "hyperparams": "constructor / attribute hyperparameters",
    "scheduled_lr": "learning-rate schedule callable",
    "old_logprob": "rollout_buffer_class (_get_samples)",
    "gae": "rollout_buffer_class (compute_returns_and_advantage)",
    "advantages": "rollout_buffer_class (compute_returns_and_advantage)",
    "episode_end": "env adapter outside Monitor",
    "final_observation": "env adapter outside Monitor (the terminal_observation SB3 bootstraps from)",
    "assumes_same_step_autoreset": "a next-step-autoreset env adapter (SB3 assumes same-step autoreset)",
    "obs_norm_training": "VecNormalize.training",
    "env_seeds": "the VecEnv's seeds for its first reset (VecEnv._seeds)",
    "normalization_restarts": "VecNormalize's statistics (obs_rms, ret_rms) replaced by fresh ones",
    "zero_grad": "policy_kwargs optimizer_class",
}
#: the hooks it cannot reach, and why
NOT_EXPRESSIBLE = {
    "ref_logprob": "SB3's PPO has no reference policy",
    "loss": "SB3 builds the loss inside PPO.train()",
    "surrogate": "SB3 computes the clipped surrogate inside PPO.train()",
    "optimizer_step": "SB3 steps the optimizer inside PPO.train()",
    "ratio_metrics": "SB3 computes and logs clip_fraction and approx_kl inside PPO.train()",
    "micro_share": "SB3's PPO has no gradient accumulation",
}


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
        values = values.flatten()
        if hp.clip_range_vf is not None:    # SB3's value clipping: the clipped value alone (no max, unlike CleanRL)
            values = s.old_values + (values - s.old_values).clamp(-hp.clip_range_vf, hp.clip_range_vf)
        value_loss = (s.returns - values).pow(2).mean()
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
        if overrides(hooks, "old_logprob"):   # the live policy's log-probs, if needed
            discrete = isinstance(self.action_space, gym.spaces.Discrete)
            actions = samples.actions.long().flatten() if discrete else samples.actions
            with torch.no_grad():
                live = self.policy.get_distribution(samples.observations).log_prob(actions)
            samples = samples._replace(old_log_prob=hooks.old_logprob(samples.old_log_prob, live))
        self.instrument.sample = samples
        return samples

    def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
        hooks = self.instrument.hooks
        if not overrides(hooks, "gae"):
            super().compute_returns_and_advantage(last_values, dones)
        else:
            # SB3's layout: episode_starts[t + 1] says step t ended an episode (same-step autoreset),
            # and a time limit's bootstrap is already in its reward (collect_rollouts, SB3#633)
            terminated = np.concatenate([self.episode_starts[1:], dones[None].astype(np.float32)])
            adv = hooks.gae(self.rewards, self.values, last_values.clone().cpu().numpy().flatten(), terminated,
                            np.zeros_like(terminated), np.ones(terminated.shape, dtype=bool), self.gamma,
                            self.gae_lambda)
            self.advantages = adv.astype(np.float32)
            self.returns = self.advantages + self.values
        self.advantages = hooks.advantages(self.advantages).astype(np.float32)


class InstrumentedPolicy(ActorCriticPolicy):
    """SB3's actor-critic, reporting what evaluate_actions returns for each minibatch."""

    instrument: Instrument

    def evaluate_actions(self, obs: torch.Tensor, actions: torch.Tensor):
        values, log_prob, entropy = super().evaluate_actions(obs, actions)
        self.instrument.minibatch(values, log_prob, entropy)
        return values, log_prob, entropy


class EpisodeBoundary(gym.Wrapper):
    """The env adapter between a single env (Monitor inside) and SB3, where the episode-boundary
    hooks act: the end flags SB3 sees, the observation a truncated episode hands on (SB3 puts it in
    ``terminal_observation`` and bootstraps from its value), and next-step autoreset: the episode's
    end is reported, SB3's immediate ``reset()`` gets the final observation back, and the next
    ``step()`` ignores its action and resets (reward 0), as gymnasium >= 1.0 vector envs do."""

    def __init__(self, env: gym.Env, instrument: Instrument) -> None:
        super().__init__(env)
        self.instrument = instrument
        self.last_obs: Any = None
        self.reset_pending = False

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        if self.reset_pending:       # a next-step-autoreset env has not reset yet
            return self.last_obs, {}
        self.last_obs, info = self.env.reset(**kwargs)
        return self.last_obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        hooks = self.instrument.hooks
        if self.reset_pending:       # the phantom step: the action is ignored
            self.reset_pending = False
            self.last_obs, info = self.env.reset()
            return self.last_obs, 0.0, False, False, info
        obs, reward, term, trunc, info = self.env.step(action)
        obs = hooks.final_observation(np.asarray(obs)[None], np.asarray(self.last_obs)[None],
                                      np.array([trunc]))[0]
        flags = hooks.episode_end(np.array([term]), np.array([trunc]))
        term, trunc = bool(flags[0][0]), bool(flags[1][0])
        self.reset_pending = (term or trunc) and hooks.assumes_same_step_autoreset()
        self.last_obs = obs
        return obs, reward, term, trunc, info


class HookedAdam(torch.optim.Adam):
    """Adam whose ``zero_grad`` is the fault's zero-grad hook (``policy_kwargs["optimizer_class"]``)."""

    instrument: Instrument
    _in_hook = False

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._in_hook:            # the hook clearing the gradients itself
            return super().zero_grad(set_to_none)
        self._in_hook = True
        try:
            self.instrument.hooks.zero_grad(self)
        finally:
            self._in_hook = False


class RolloutRecorder(BaseCallback):
    """Rewards, finished episodes and the raw advantages of one rollout."""

    def __init__(self, num_envs: int) -> None:
        super().__init__()
        self.ep_return = np.zeros(num_envs)
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
        for i in np.flatnonzero(dones):       # Monitor (inside any fault wrapper) has the env's own return
            monitor = self.locals["infos"][i]["episode"]
            self.returns.append(float(self.ep_return[i]))
            self.lengths.append(int(monitor["l"]))   # the env's steps (a phantom reset step is not one)
            self.episodes.append({"env_step": self.base_step + len(self.rewards) * len(dones),
                                  "return": float(self.ep_return[i]), "env_return": float(monitor["r"]),
                                  "length": int(monitor["l"])})
        self.ep_return[dones] = 0.0
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


def _schedule(instrument: Instrument, name: str):
    """An SB3 schedule (called with progress remaining) that returns this update's effective value."""
    return lambda _progress: getattr(instrument.hp, name)


def train(exp: Experiment) -> Iterator[dict]:
    """SB3's PPO on ``exp``, one row of canonical metrics per update (the same row as native PPO's).

    Set-up: SB3's vector env with the fault's wrapper (and the episode-boundary adapter when the fault
    acts there), ``VecNormalize`` when normalising, and a ``PPO`` with the instrumented policy,
    rollout buffer and (for a zero-grad fault) optimizer; the schedules read this update's values
    from the instrument. Each update: this update's hooks and hyperparameters
    (:func:`harness.agents.core.begin_update`) set on the model, one ``learn()`` call of ``batch_size``
    env steps (rollout and update), then the row: rollout metrics from the recorder, update metrics
    measured by the instrument, the values SB3 logs where they are canonical (cross-checked against
    the measured ones), the parameter change, ``steps`` (one row per minibatch) and ``episodes``."""
    cfg, fault = exp.algo, exp.fault
    TRAINER.check_expressible(fault, cfg)
    instrument = Instrument()
    instrument.hp = cfg
    boundary = any(overrides(fault, h)
                   for h in ("episode_end", "final_observation", "assumes_same_step_autoreset"))

    def wrapper(env: gym.Env) -> gym.Env:        # outside Monitor, as make_vec_env puts wrapper_class
        env = fault.wrap_env(env)
        return EpisodeBoundary(env, instrument) if boundary else env

    envs = make_vec_env(exp.env.id, n_envs=cfg.num_envs, seed=exp.seed, env_kwargs=dict(exp.env.kwargs),
                        wrapper_class=wrapper)
    if cfg.norm_obs or cfg.norm_reward:
        envs = VecNormalize(envs, norm_obs=cfg.norm_obs, norm_reward=cfg.norm_reward, gamma=cfg.gamma)
    policy_kwargs: dict[str, Any] = dict(net_arch=dict(pi=[cfg.hidden] * 2, vf=[cfg.hidden] * 2),
                                         activation_fn=torch.nn.Tanh)
    if overrides(fault, "zero_grad"):
        policy_kwargs.update(optimizer_class=HookedAdam, optimizer_kwargs=dict(eps=1e-5))  # SB3's Adam eps
    model = PPO(InstrumentedPolicy, envs, n_steps=cfg.n_steps, batch_size=cfg.batch_size // cfg.n_minibatches,
                n_epochs=cfg.n_epochs, learning_rate=_schedule(instrument, "lr"), gamma=cfg.gamma,
                gae_lambda=cfg.gae_lambda, clip_range=_schedule(instrument, "clip_range"),
                ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, max_grad_norm=cfg.max_grad_norm,
                normalize_advantage=cfg.norm_adv, target_kl=cfg.target_kl, rollout_buffer_class=InstrumentedBuffer,
                seed=exp.seed, device="cpu", policy_kwargs=policy_kwargs)
    seeds = fault.begin_update(0, cfg)[0].env_seeds(exp.seed, cfg.num_envs)
    if seeds is not None:      # what PPO(seed=...) set (seed + i per env), replaced before the first reset
        envs.unwrapped._seeds = list(seeds)
    model.set_logger(Logger(folder=None, output_formats=[]))
    model.policy.instrument = model.rollout_buffer.instrument = model.policy.optimizer.instrument = instrument
    model.rollout_buffer.policy = model.policy
    params = [p for p in model.policy.parameters() if p.requires_grad]
    n_params = len(params)
    for p in params:
        p.register_post_accumulate_grad_hook(lambda p: instrument.gradient(p.grad, n_params))
    model.policy.optimizer.register_step_post_hook(lambda *_: instrument.stepped())
    recorder = RolloutRecorder(cfg.num_envs)
    env_step = 0
    n_updates = updates_planned(exp)

    try:
        for update in range(n_updates):
            hooks, hp = begin_update(fault, cfg, update, n_updates)
            instrument.hooks, instrument.hp = hooks, hp
            model.clip_range_vf = None if hp.clip_range_vf is None else _schedule(instrument, "clip_range_vf")
            minibatch_size = hp.batch_size // hp.n_minibatches
            instrument.reset(per_epoch=-(-cfg.batch_size // minibatch_size))
            model.n_epochs, model.batch_size, model.target_kl = hp.n_epochs, minibatch_size, hp.target_kl
            if isinstance(envs, VecNormalize):
                if hooks.normalization_restarts(update):      # as a new VecNormalize(venv) starts
                    envs.obs_rms = RunningMeanStd(shape=envs.obs_rms.mean.shape)
                    envs.ret_rms = RunningMeanStd(shape=())
                    envs.returns = np.zeros(envs.num_envs)
                envs.training = hooks.obs_norm_training()
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
            TRAINER.crosscheck({k: measured[k] for k in CROSSCHECKED}, captured)
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



#: what the instrumentation measures and SB3 also logs (train/policy_gradient_loss, value_loss,
#: entropy_loss, clip_fraction): compared every update
CROSSCHECKED = ("policy_loss", "value_loss", "entropy", "clipfrac")


class SB3Trainer(FrameworkTrainer):
    """stable-baselines3's PPO (:func:`train`), faults through :data:`EXPRESSIBLE`."""

    backend, algo, framework = "sb3", "ppo", "SB3"
    cost = 2.0
    expressible = EXPRESSIBLE
    not_expressible = NOT_EXPRESSIBLE

    def updates_planned(self, exp: Experiment) -> int:
        return updates_planned(exp)        # the same budget as native PPO

    def train(self, exp: Experiment) -> Iterator[dict]:
        return train(exp)

    def check_setup(self, algo, env: EnvConfig) -> None:
        if algo.name != "ppo":
            raise ConfigError(f"backend=sb3 runs stable-baselines3's PPO; algo={algo.name} runs on backend=native")

    def check_config(self, fault: Hooks, algo) -> None:
        for hp, whose in ((algo, "the config"), (fault.hyperparams(algo), f"fault {fault.name}")):
            if hp.grad_accum > 1:
                raise ConfigError(f"{whose} cannot be expressed on backend=sb3: algo.grad_accum="
                                  f"{hp.grad_accum} (SB3's PPO takes one optimizer step per minibatch, with no "
                                  "gradient accumulation)")


TRAINER = SB3Trainer()

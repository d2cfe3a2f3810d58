"""Seed-batched native PPO: S seeds of one configuration trained as one computation.

Each seed (a *slot*) is the run :func:`harness.agents.ppo.train` trains: its own vector env with its
fault's wrappers, its own fault instance (its hooks and whatever state they keep), its own random
streams (initial weights drawn exactly as the loop draws them, action noise, minibatch permutations),
its own Adam state and its own gradient clipping. What the slots share is the arithmetic: one
batched forward pass chooses every slot's actions, and one forward and one backward pass over
stacked parameters ``[S, ...]`` serve every slot's minibatch. The per-slot part of each minibatch
runs the loop's own code on the slot's slice (:func:`harness.agents.core.micro_batch_loss` and
:func:`harness.agents.core.minibatch_metrics`: old log-probs, surrogate, loss, ratio-metric hooks),
the zero-grad and optimizer-step hooks get a per-slot optimizer (:class:`SlotOptimizer`), and SB3's
target_kl stop ends that slot's update only.

Small networks make an update cost per call, not per number: the forward and backward passes of 16
stacked 64-64 MLPs cost about what one does (benchmarks/seed_batch.py measures the gain).

Float rounding differs from the loop (batched matrix products), so a batched run is a run of its
own: ``engine=seed_batched`` is part of its identity. Within the engine, a seed's metrics do not
depend on which other seeds share its batch (tested).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers.vector import NormalizeObservation, NormalizeReward
from torch import nn
from torch.optim.adam import adam as adam_step

from harness.agents.core import (
    MicroBatch,
    MinibatchEval,
    MinibatchStats,
    begin_update,
    micro_batch_loss,
    micro_shares,
    minibatch_metrics,
    minibatches,
    value_loss,
)
from harness.agents.networks import LOG_2PI, ActorCritic, categorical_logp_entropy
from harness.agents.ppo import first_reset, updates_planned
from harness.config import ConfigError, Experiment
from harness.envs import make_vec_env, restart_normalization
from harness.hooks import overrides

ADAM_EPS = 1e-5        # as the loop's torch.optim.Adam(eps=1e-5) (CleanRL)
BETAS = (0.9, 0.999)   # torch's Adam defaults


# ---- the stacked actor-critic ---------------------------------------------------------------------

class StackedActorCritic(nn.Module):
    """S :class:`~harness.agents.networks.ActorCritic` networks as stacked parameters: each of the
    network's parameters becomes one ``[S, *shape]`` tensor (nn.Linear layout), in the network's own
    parameter order. Inputs are ``[S, B, obs_dim]``; outputs ``[S, B]`` (actions ``[S, B(, A)]``)."""

    def __init__(self, models: Sequence[ActorCritic]):
        super().__init__()
        self.discrete = models[0].discrete
        self.names = [name for name, _ in models[0].named_parameters()]
        per_model = [dict(m.named_parameters()) for m in models]
        self.stacked = nn.ParameterDict({name.replace(".", "_"): nn.Parameter(
            torch.stack([p[name].detach() for p in per_model]).contiguous()) for name in self.names})
        self.layers = {part: [int(k) for k, m in getattr(models[0], part).named_children() if isinstance(m, nn.Linear)]
                       for part in ("actor", "critic")}

    def ordered(self) -> list[nn.Parameter]:
        """The stacked parameters in the single network's ``parameters()`` order."""
        return [self.stacked[name.replace(".", "_")] for name in self.names]

    def _mlp(self, part: str, x: torch.Tensor) -> torch.Tensor:
        layers = self.layers[part]
        for i, index in enumerate(layers):
            weight, bias = self.stacked[f"{part}_{index}_weight"], self.stacked[f"{part}_{index}_bias"]
            if weight.shape[1] == 1:      # one output (the value): batched gemv rounds differently at S = 1
                x = (x * weight).sum(-1, keepdim=True) + bias.unsqueeze(1)
            else:
                x = torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))
            if i < len(layers) - 1:
                x = torch.tanh(x)
        return x

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self._mlp("critic", obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, generators: Sequence[torch.Generator]
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample every slot's actions, each slot's noise from its own generator (as the loop:
        Gumbel-max for categorical actions, mean + std x N(0, 1) for Gaussian ones)."""
        out = self._mlp("actor", obs)
        noise_shape = out.shape[1:]
        if self.discrete:
            logp_all = out.log_softmax(-1)
            uniform = torch.stack([torch.rand(noise_shape, generator=g) for g in generators])
            gumbel = uniform.log_().neg_().log_().neg_()
            action = (logp_all + gumbel).argmax(-1)
            logp = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        else:
            std = self.stacked["log_std"].exp().unsqueeze(1)
            action = out + std * torch.stack([torch.randn(noise_shape, generator=g) for g in generators])
            logp = self._gaussian_logp(out, action)
        return action, logp, self.value(obs)

    def evaluate(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-prob and entropy of ``action`` under every slot's policy, and the values."""
        out = self._mlp("actor", obs)
        if self.discrete:
            logp, entropy = categorical_logp_entropy(out, action)
        else:
            logp = self._gaussian_logp(out, action)
            log_std = self.stacked["log_std"]
            entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum(-1, keepdim=True).expand(out.shape[:2])
        return logp, entropy, self.value(obs)

    def _gaussian_logp(self, mean: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        log_std = self.stacked["log_std"].unsqueeze(1)
        z = (action - mean) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)


# ---- per-slot optimisation: Adam state, gradient clipping, the optimizer the hooks see --------------

class SeedAdam:
    """Adam over stacked parameters with one state per slot (moments, step count), as S separate
    ``torch.optim.Adam(eps=1e-5, fused=True)`` would keep them. A slot steps only when its optimizer
    is asked to (:class:`SlotOptimizer`); the requests of a minibatch run as one fused call."""

    def __init__(self, params: list[nn.Parameter], n_slots: int, lr: float):
        self.params = params
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        self.state_steps = [[torch.tensor(0.0) for _ in params] for _ in range(n_slots)]
        self.lr = [lr] * n_slots
        self.has_grad = [False] * n_slots     # torch's grad-is-None: a slot cleared and not back-propagated since
        self.step_calls = [0] * n_slots       # real step() calls (the loop's StepCounter)
        self.pending: list[int] = []
        self._cached: dict[int, list[tuple[torch.Tensor, ...]]] = {}

    def zero_grad(self, slot: int) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad[slot].zero_()
        self.has_grad[slot] = False

    def request(self, slot: int) -> None:
        self.step_calls[slot] += 1
        if self.has_grad[slot]:               # torch skips parameters without a gradient
            self.pending.append(slot)

    def _views(self, slot: int) -> list[tuple[torch.Tensor, ...]]:
        """Slot ``slot``'s (param, grad, exp_avg, exp_avg_sq, step) views, made once: the stacked
        tensors are only ever updated in place."""
        if slot not in self._cached:
            self._cached[slot] = [(p[slot], p.grad[slot], m[slot], v[slot], self.state_steps[slot][i])
                                  for i, (p, m, v) in enumerate(zip(self.params, self.exp_avg, self.exp_avg_sq))]
        return self._cached[slot]

    @torch.no_grad()
    def flush(self) -> None:
        """Apply every requested step: one fused Adam call per learning rate."""
        for lr in sorted({self.lr[s] for s in self.pending}):
            views = [view for s in self.pending if self.lr[s] == lr for view in self._views(s)]
            params, grads, avgs, sqs, steps = (list(x) for x in zip(*views))
            adam_step(params, grads, avgs, sqs, [], steps, fused=True, amsgrad=False, beta1=BETAS[0],
                      beta2=BETAS[1], lr=lr, weight_decay=0.0, eps=ADAM_EPS, maximize=False)
        self.pending = []


class SlotOptimizer:
    """What a fault's ``zero_grad`` / ``optimizer_step`` hook receives for one slot: the
    ``torch.optim.Optimizer`` calls they make (``zero_grad``, ``step``, ``param_groups``), acting on
    that slot's slice only."""

    def __init__(self, adam: SeedAdam, slot: int):
        self.adam, self.slot = adam, slot

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.adam.zero_grad(self.slot)

    def step(self, closure: Any = None) -> None:
        if closure is not None:
            raise NotImplementedError("the seed-batched engine has no closure steps")
        self.adam.request(self.slot)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [{"lr": self.adam.lr[self.slot]}]


def clip_slots(params: list[nn.Parameter], max_norms: dict[int, float]) -> dict[int, float]:
    """``clip_grad_norm_`` on each listed slot's gradients (its own max norm), slot by slot on the
    slot's own views, so that a slot's norm (and rounding) does not depend on the other slots (a
    reduction over the stacked ``[S, ...]`` gradients rounds differently with S); each slot's pre-clip
    total 2-norm."""
    if params[0].grad is None:
        return dict.fromkeys(max_norms, 0.0)
    out = {}
    for s, max_norm in max_norms.items():
        grads = [p.grad[s] for p in params]
        total = torch.nn.utils.get_total_norm(grads, 2.0)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        torch._foreach_mul_(grads, coef)
        out[s] = float(total)
    return out


def flat(params: list[nn.Parameter], slot: int) -> torch.Tensor:
    return torch.cat([p[slot].reshape(-1) for p in params])


# ---- one update of every slot ------------------------------------------------------------------------

@dataclasses.dataclass
class SlotUpdate:
    """One slot's state during :func:`ppo_update_seeds`."""

    batch: dict[str, torch.Tensor]
    hp: Any
    hooks: Any
    schedule: Iterator[tuple[int, int, torch.Tensor]]
    params_before: torch.Tensor
    stats: MinibatchStats = dataclasses.field(default_factory=MinibatchStats)
    grad_norms: list[float] = dataclasses.field(default_factory=list)
    nonfinite: bool = False
    done: bool = False


def _minibatch(model: StackedActorCritic, adam: SeedAdam, slots: list[SlotUpdate | None],
               current: dict[int, tuple[int, int, torch.Tensor]]) -> None:
    """Every current slot's minibatch: its zero-grad hook, one batched forward pass (every slot's rows,
    padded to the longest), each slot's micro-batch losses through the loop's code, one backward
    pass, then each slot's clipping and optimizer-step hook, and its row."""
    params = adam.params
    for s in current:
        slots[s].hooks.zero_grad(SlotOptimizer(adam, s))
    # rows: the configuration's largest minibatch, so that a slot's arithmetic (and float rounding)
    # does not depend on which other seeds share the batch
    # (the slots' hyperparameters differ only while a fault is on in some and not yet in others)
    largest = max(-(-slots[s].hp.n_steps * slots[s].hp.num_envs // slots[s].hp.n_minibatches) for s in current)
    rows = max(largest, *(len(idx) for _, _, idx in current.values()))
    first = slots[next(iter(current))].batch
    obs = first["obs"].new_zeros((len(slots), rows, *first["obs"].shape[1:]))    # slots not training: zeros
    actions = first["actions"].new_zeros((len(slots), rows, *first["actions"].shape[1:]))
    for s, (_, _, idx) in current.items():
        obs[s, : len(idx)] = slots[s].batch["obs"][idx]
        actions[s, : len(idx)] = slots[s].batch["actions"][idx]
    logp, entropy, value = model.evaluate(obs, actions)

    total: torch.Tensor | None = None
    outcome: dict[int, tuple[list[MicroBatch], bool]] = {}
    for s, (_, _, idx) in current.items():
        slot = slots[s]
        hp, hooks, batch = slot.hp, slot.hooks, slot.batch
        adv = batch["adv"][idx]
        if hp.norm_adv:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        n_micro = min(hp.grad_accum, len(idx))
        parts: list[MicroBatch] = []
        stop = False
        for micro, pos in enumerate(torch.arange(len(idx)).tensor_split(n_micro)):
            rows_ = idx[pos]
            mb = {"logp": batch["logp"][rows_], "returns": batch["returns"][rows_],    # what the per-slot code reads
                  "values": batch["values"][rows_]}

            def evaluate(mb: dict[str, torch.Tensor], s: int = s, pos: torch.Tensor = pos) -> MinibatchEval:
                v_loss = value_loss(value[s, pos], mb["values"], mb["returns"], slots[s].hp.clip_range_vf)
                return MinibatchEval(logp=logp[s, pos], entropy=entropy[s, pos], loss=slots[s].hp.vf_coef * v_loss,
                                     metrics={"value_loss": v_loss})

            share, weight = micro_shares(None, None, len(pos), len(idx), n_micro, hp.loss_agg)
            share = hooks.micro_share(share, n_micro)
            loss, part = micro_batch_loss(mb, adv[pos], share, weight, hp, hooks, evaluate)
            parts.append(part)
            if hp.target_kl is not None and part.approx_kl() > 1.5 * hp.target_kl:
                stop = True               # SB3's early stopping, before this minibatch's step
                break
            if hooks.microbatch_backward(micro, n_micro):
                total = share * loss if total is None else total + share * loss
                adam.has_grad[s] = True
        outcome[s] = (parts, stop)
    if total is not None:
        total.backward()

    norms = clip_slots(params, {s: slots[s].hp.max_grad_norm for s in current if not outcome[s][1]})
    for s, (epoch, minibatch, _) in current.items():
        slot, (parts, stop) = slots[s], outcome[s]
        loss_value = float(sum(p.share * p.loss for p in parts))
        calls_before = adam.step_calls[s]
        grad_norm = math.nan
        if not stop:
            grad_norm = norms[s] if adam.has_grad[s] else 0.0
            slot.hooks.optimizer_step(SlotOptimizer(adam, s))      # non-finite or not, as the loop steps
            slot.grad_norms.append(grad_norm)
        bad = not (math.isfinite(loss_value) and (stop or math.isfinite(grad_norm)))
        slot.nonfinite = slot.nonfinite or bad
        slot.stats.add({"epoch": epoch, "minibatch": minibatch,
                        **minibatch_metrics(parts, loss_value, slot.hp, slot.hooks),
                        "grad_norm": grad_norm, "lr": slot.hp.lr, "clip_range": slot.hp.clip_range,
                        "stepped": int(adam.step_calls[s] > calls_before), "nonfinite": int(bad)})
        slot.done = stop
    adam.flush()


def ppo_update_seeds(model: StackedActorCritic, adam: SeedAdam, batches: dict[int, dict[str, torch.Tensor]],
                     hps: dict[int, Any], hooks: dict[int, Any], generators: dict[int, torch.Generator]
                     ) -> dict[int, tuple[dict[str, float], list[dict[str, float]]]]:
    """:func:`harness.agents.core.ppo_update` for the slots in ``batches`` at once: each slot's
    epochs and minibatches are drawn by its own generator and advance in lockstep with the others'
    (one batched forward and backward pass per minibatch); a slot whose update ends early (target_kl)
    drops out while the others go on; a non-finite step is stepped and its slot goes on, as in the loop. Returns each slot's update metrics and
    per-minibatch rows, as ``ppo_update`` does."""
    params = adam.params
    slots: dict[int, SlotUpdate] = {}
    for s, batch in batches.items():
        adam.lr[s] = hps[s].lr
        with torch.no_grad():
            before = flat(params, s).clone()
        slots[s] = SlotUpdate(batch=batch, hp=hps[s], hooks=hooks[s], params_before=before,
                              schedule=minibatches(batch["adv"].shape[0], hps[s].n_epochs, hps[s].n_minibatches,
                                                   generators[s]))
    indexed = [slots.get(s) for s in range(len(adam.lr))]
    while True:
        current = {}
        for s, slot in slots.items():
            if not slot.done:
                step = next(slot.schedule, None)
                if step is None:
                    slot.done = True
                else:
                    current[s] = step
        if not current:
            break
        _minibatch(model, adam, indexed, current)

    out = {}
    for s, slot in slots.items():
        with torch.no_grad():
            after = flat(params, s)
            nonfinite = slot.nonfinite or not bool(torch.isfinite(after).all())
            param_delta = float((after - slot.params_before).norm())
        metrics = slot.stats.result()
        metrics.update(grad_norm=sum(slot.grad_norms) / max(len(slot.grad_norms), 1),
                       grad_norm_max=max(slot.grad_norms, default=math.nan), optimizer_steps=adam.step_calls[s],
                       lr=slot.hp.lr, clip_range=slot.hp.clip_range, param_delta=param_delta,
                       nonfinite=int(nonfinite))
        adam.step_calls[s] = 0
        out[s] = (metrics, slot.stats.rows)
    return out


# ---- the rollout and the run of every slot -------------------------------------------------------------

class SlotRun:
    """One seed's env (its fault's wrappers, normalisation outside them), fault and random streams,
    set up exactly as :func:`harness.agents.ppo.train` sets them up for its seed."""

    def __init__(self, exp: Experiment):
        cfg, self.fault = exp.algo, exp.fault
        torch.manual_seed(exp.seed)                   # the loop's initial weights, from the seed
        self.generator = torch.Generator().manual_seed(exp.seed)     # minibatch permutations
        envs = make_vec_env(exp.env, cfg.num_envs, self.fault)
        self.obs_norm = envs = NormalizeObservation(envs) if cfg.norm_obs else envs
        self.envs = NormalizeReward(envs, gamma=cfg.gamma) if cfg.norm_reward else envs
        self.model = ActorCritic(self.envs.single_observation_space, self.envs.single_action_space, cfg.hidden)
        self.noise = torch.Generator()                # action noise: the stream the loop samples from
        self.noise.set_state(torch.get_rng_state())
        self.obs = first_reset(self.envs, self.obs_norm, self.fault, cfg, exp.seed)
        self.env_step = 0
        self.finished = False                         # stopped (diverged): trains no more
        # the episode hooks, where the fault replaces them (else the loop's identity is skipped)
        self.episode_hooks = overrides(self.fault, "episode_end") or overrides(self.fault, "final_observation")


class Rollout:
    """Every slot's rollout buffers, stacked ``[T, S, N, ...]``, and the episode bookkeeping of the
    loop (:func:`harness.agents.ppo.train`) done for all slots at once."""

    def __init__(self, runs: list[SlotRun], T: int, N: int):
        S, first = len(runs), runs[0].envs
        self.runs = runs
        self.obs = torch.zeros((T, S, N, *first.single_observation_space.shape))
        self.actions = torch.zeros((T, S, N, *first.single_action_space.shape))
        self.logp, self.values = torch.zeros((T, S, N)), torch.zeros((T, S, N))
        self.rewards, self.terminated, self.truncated = np.zeros((T, S, N)), np.zeros((T, S, N)), np.zeros((T, S, N))
        self.valid = np.zeros((T, S, N), dtype=bool)
        self.reset_step = np.zeros((S, N), dtype=bool)      # True where the next step() only resets the env
        self.ep_return, self.ep_length = np.zeros((S, N)), np.zeros((S, N), dtype=np.int64)
        space = first.single_action_space
        self.bounds = (space.low, space.high) if not runs[0].model.discrete else None
        self.begin()

    def begin(self) -> None:
        S = len(self.runs)
        self.episodes: list[list[dict[str, Any]]] = [[] for _ in range(S)]
        self.finished_returns: list[list[float]] = [[] for _ in range(S)]
        self.finished_lengths: list[list[int]] = [[] for _ in range(S)]

    def step(self, t: int, update: int, live: list[int], hooks: dict[int, Any], obs: torch.Tensor,
             action: torch.Tensor, logp: torch.Tensor, value: torch.Tensor) -> None:
        """Step ``t`` of every live slot: record, act in its env, its episode-boundary hooks, then the
        episode bookkeeping of all slots at once."""
        self.obs[t], self.actions[t], self.logp[t], self.values[t] = obs, action, logp, value
        self.valid[t] = ~self.reset_step
        env_actions = np.clip(action.numpy(), *self.bounds) if self.bounds else action.numpy()
        ended = np.zeros_like(self.reset_step)
        monitors = {}
        for i in live:
            run = self.runs[i]
            next_obs, self.rewards[t, i], term, trunc, info = run.envs.step(env_actions[i])
            if run.episode_hooks:
                self.terminated[t, i], self.truncated[t, i] = hooks[i].episode_end(term, trunc)
                next_obs = hooks[i].final_observation(next_obs, self.obs[t, i].numpy(), trunc)
            else:
                self.terminated[t, i], self.truncated[t, i] = term, trunc
            run.obs = next_obs
            ended[i] = term | trunc
            if ended[i].any():
                monitors[i] = info["episode"]           # the env's own return (inside any fault wrapper)

        valid = self.valid[t]
        self.ep_return += self.rewards[t] * valid
        self.ep_length += valid
        self.reset_step = ended
        done = ended & valid
        for i in monitors:
            if not done[i].any():
                continue
            run, ends = self.runs[i], np.flatnonzero(done[i])
            self.finished_returns[i].extend(self.ep_return[i, ends])
            self.finished_lengths[i].extend(self.ep_length[i, ends])
            at_step = run.env_step + int(self.valid[: t + 1, i].sum())
            self.episodes[i] += [{"update": update, "env_step": at_step, "return": float(self.ep_return[i, j]),
                                  "env_return": float(monitors[i]["r"][j]), "length": int(self.ep_length[i, j])}
                                 for j in ends]
        self.ep_return[done], self.ep_length[done] = 0.0, 0

    def batch(self, i: int, hooks: Any, hp: Any, next_value: np.ndarray
              ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Slot ``i``'s GAE (through its GAE and advantage hooks), the batch it trains on, and the
        rollout's part of its row, as the loop computes them."""
        run = self.runs[i]
        valid, rewards = self.valid[:, i], self.rewards[:, i]
        terminated, truncated = self.terminated[:, i], self.truncated[:, i]
        run.env_step += int(valid.sum())
        trained = np.ones_like(valid) if hooks.assumes_same_step_autoreset() else valid
        rewards *= trained                    # reset steps carry no transition (in place: views)
        terminated *= trained
        truncated *= trained
        values = self.values[:, i].numpy()
        advantages = hooks.gae(rewards, values, next_value, terminated, truncated, trained, hp.gamma, hp.gae_lambda)
        returns = advantages + values
        advantages = hooks.advantages(advantages)
        v = torch.from_numpy(trained)
        batch = {"obs": self.obs[:, i][v], "actions": self.actions[:, i][v], "logp": self.logp[:, i][v],
                 "adv": torch.from_numpy(advantages[trained]).float(),
                 "returns": torch.from_numpy(returns[trained]).float(), "values": self.values[:, i][v]}
        var_returns = float(returns[trained].var())
        rets, lengths = self.finished_returns[i], self.finished_lengths[i]
        row = {"env_step": run.env_step, "fault_active": run.fault.active,
               "reward_mean": float(rewards[trained].mean()),
               "return_mean": float(np.mean(rets)) if rets else np.nan,
               "return_std": float(np.std(rets)) if rets else np.nan,
               "length_mean": float(np.mean(lengths)) if lengths else np.nan,
               "adv_mean": float(advantages[trained].mean()), "adv_std": float(advantages[trained].std(ddof=1)),
               "value_mean": float(values[trained].mean()),
               "explained_variance": (1 - float((returns - values)[trained].var()) / var_returns
                                      if var_returns > 0 else np.nan)}
        return batch, row


def check_batchable(exps: Sequence[Experiment]) -> None:
    """Raise a one-line ConfigError unless ``exps`` are native PPO runs of one configuration that
    differ only in their seeds (distinct seeds) and their fault's onset (each slot has its own fault)."""
    first = exps[0]
    for exp in exps:
        if exp.algo.name != "ppo" or exp.backend.name != "native":
            raise ConfigError(f"engine=seed_batched trains native PPO; got algo={exp.algo.name} "
                              f"backend={exp.backend.name}")
        same = dataclasses.replace(exp, seed=first.seed, fault_cfg={**exp.fault_cfg, "onset": first.fault.onset})
        if same.key() != first.key():
            raise ConfigError("engine=seed_batched trains seeds of one configuration: these runs differ in "
                              "more than their seed and their fault's onset")
    seeds = [e.seed for e in exps]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"engine=seed_batched: the seeds repeat ({seeds})")


def train_seeds(exps: Sequence[Experiment]) -> Iterator[list[dict | None]]:
    """Native PPO on every experiment of ``exps`` (one configuration, S seeds) as one computation;
    per update, one row per slot, as :func:`harness.agents.ppo.train` yields it (``None`` for a
    slot that has stopped: a row with ``nonfinite`` ends its run, as in the loop)."""
    check_batchable(exps)
    cfg = exps[0].algo
    runs = [SlotRun(exp) for exp in exps]
    model = StackedActorCritic([r.model for r in runs])
    adam = SeedAdam(model.ordered(), len(runs), cfg.lr)
    T = cfg.n_steps
    rollout = Rollout(runs, T, cfg.num_envs)
    n_updates = updates_planned(exps[0])
    try:
        for update in range(n_updates):
            live = [i for i, r in enumerate(runs) if not r.finished]
            if not live:
                return
            begun = {i: begin_update(runs[i].fault, cfg, update, n_updates) for i in live}
            hooks = {i: begun[i][0] for i in live}
            for i in live:
                if hooks[i].normalization_restarts(update):
                    restart_normalization(runs[i].envs)
            if cfg.norm_obs:
                for i in live:
                    runs[i].obs_norm.update_running_mean = hooks[i].obs_norm_training()

            # ---- rollout: one batched forward pass per step for every slot --------------------
            rollout.begin()
            for t in range(T):
                obs = torch.as_tensor(np.stack([r.obs for r in runs]), dtype=torch.float32)
                action, logp, value = model.act(obs, [r.noise for r in runs])
                rollout.step(t, update, live, hooks, obs, action, logp, value)

            # ---- GAE and each slot's batch ----------------------------------------------------------
            with torch.no_grad():
                next_value = model.value(torch.as_tensor(np.stack([r.obs for r in runs]),
                                                         dtype=torch.float32)).numpy()
            parts = {i: rollout.batch(i, hooks[i], begun[i][1], next_value[i]) for i in live}

            # ---- the clipped-surrogate update of every slot ---------------------------------------
            updated = ppo_update_seeds(model, adam, {i: parts[i][0] for i in live},
                                       {i: begun[i][1] for i in live}, hooks,
                                       {i: runs[i].generator for i in live})
            out: list[dict | None] = [None] * len(runs)
            for i in live:
                metrics, steps = updated[i]
                out[i] = {"update": update, **parts[i][1], **metrics, "steps": steps, "episodes": rollout.episodes[i]}
                runs[i].finished = bool(metrics["nonfinite"])
            yield out
    finally:
        for r in runs:
            r.envs.close()

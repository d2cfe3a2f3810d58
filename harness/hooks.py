"""Hook points the agents expose to faults.

The training loops call these methods at fixed places; :class:`Hooks` itself is the
healthy behaviour (every hook hands its input back unchanged). A fault subclasses it
and overrides only the hooks it needs, so no fault ever edits agent code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch


class Hooks:
    #: set by the training loop at the start of every update (``update >= onset``);
    #: env wrappers read it because they are built once, before training.
    active: bool = False

    def wrap_env(self, envs: Any) -> Any:
        """Wrap the vector env once, before training (reward/observation faults)."""
        return envs

    def hyperparams(self, hp: Any) -> Any:
        """The hyperparameters in effect for this update (lr, clip range, epochs...)."""
        return hp

    def old_logprob(self, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """The 'old' log-probs of the importance ratio for one minibatch.

        ``stored`` were recorded when the rollout was collected; ``live`` come from the
        policy being optimised, with gradient.
        """
        return stored

    def ref_logprob(self, stored: torch.Tensor, live: torch.Tensor, phase: str = "update") -> torch.Tensor:
        """The reference policy's log-probs for the KL penalty (GRPO).

        ``stored`` come from the frozen reference; ``live`` from the policy being optimised.
        ``phase`` is ``"rollout"`` when the reference log-probs are computed and stored with the
        batch (``live``: the policy at the rollout weights) and ``"update"`` in each minibatch
        (``stored``: what the rollout stored; ``live``: with gradient).
        """
        return stored

    def loss(self, loss: torch.Tensor, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar that is back-propagated; ``terms`` holds its parts."""
        return loss

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Apply the gradients."""
        optimizer.step()

    # ---- PPO: rollout, returns and advantages (harness/agents/ppo.py; SB3: harness/agents/sb3.py) ----

    def episode_end(self, terminated: np.ndarray, truncated: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """What the rollout loop records from the env's two end flags: ``terminated`` (no bootstrap)
        and ``truncated`` (time limit: bootstrap from the final observation's value)."""
        return terminated, truncated

    def final_observation(self, next_obs: np.ndarray, obs: np.ndarray, truncated: np.ndarray) -> np.ndarray:
        """The observation whose value bootstraps a truncated episode: the step's next observation
        (the episode's final one) where ``truncated``; ``obs`` is the observation the step acted on."""
        return next_obs

    def assumes_same_step_autoreset(self) -> bool:
        """Whether the rollout loop treats every step as a transition, as code written for
        same-step autoreset does. Gymnasium >= 1.0 vector envs autoreset on the *next* step (that
        step ignores the action and returns the reset observation), so the healthy loop does not."""
        return False

    def gae(self, rewards: np.ndarray, values: np.ndarray, next_value: np.ndarray, terminated: np.ndarray,
            truncated: np.ndarray, valid: np.ndarray, gamma: float, lam: float) -> np.ndarray:
        """GAE advantages over a [T, N] rollout (see :func:`compute_gae`); ``valid`` marks the steps
        that are transitions (False on next-step autoreset steps)."""
        return compute_gae(rewards, values, next_value, terminated, truncated, gamma, lam)

    def advantages(self, advantages: np.ndarray) -> np.ndarray:
        """The advantages the policy loss uses (after the value targets, returns = A + V, are set)."""
        return advantages

    def scheduled_lr(self, hp: Any, update: int, n_updates: int) -> float:
        """The learning rate of update ``update`` of ``n_updates`` (warmup, annealing)."""
        return hp.lr_at(update, n_updates)

    def obs_norm_training(self) -> bool:
        """Whether the running observation statistics (NormalizeObservation / VecNormalize) update."""
        return True

    def env_seeds(self, seed: int, num_envs: int) -> list[int] | None:
        """The seeds of the vector env's first reset, one per env; None: the framework's own (gymnasium
        and SB3 give env i the seed ``seed + i``)."""
        return None

    def reference_weights(self) -> str:
        """Which weights the frozen reference holds (GRPO, built once before the first update):
        ``"start"``, the checkpoint the policy starts from (the supervised warm-up), or ``"base"``,
        the model that warm-up started from."""
        return "start"

    def normalization_restarts(self, update: int) -> bool:
        """Whether the running normalisation statistics (observations, and rewards where normalised)
        start over before update ``update``'s rollout, as in a run resumed without them."""
        return False

    # ---- the clipped-surrogate update (harness/agents/core.py) -------------------------------------

    def trainer_sampling_filter(self, top_k: int, top_p: float) -> tuple[int, float]:
        """The top-k / top-p truncation the trainer replays when it scores completions the sampler drew
        under it (NeMo-RL PR #2053, DeepSeek-V3.2's "Keep Sampling Mask"; the reference is scored
        without it): the sampler's own, so trainer and sampler log-probs are of one distribution."""
        return top_k, top_p

    def micro_share(self, share: float, n_micro: int) -> float:
        """A micro-batch's weight in its minibatch's loss under gradient accumulation
        (:func:`harness.agents.core.micro_shares`: its part of the minibatch's tokens or rows)."""
        return share

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients before a minibatch's backward pass."""
        optimizer.zero_grad(set_to_none=True)

    def surrogate(self, pg_loss1: torch.Tensor, pg_loss2: torch.Tensor) -> torch.Tensor:
        """The per-sample clipped surrogate loss from its unclipped and clipped terms
        (``-A * r`` and ``-A * clip(r)``): the pessimistic bound, their maximum."""
        import torch  # here: the hooks and faults import without torch (diagnose never needs it)

        return torch.max(pg_loss1, pg_loss2)

    def ratio_metrics(self, stats: dict[str, float], ratio: torch.Tensor, log_ratio: torch.Tensor,
                      clip_range: float, mask: torch.Tensor | None) -> dict[str, float]:
        """The logged ratio statistics of a minibatch (telemetry faults compute some of them wrongly)."""
        return stats


    # ---- GRPO on token tasks: the sampler, the batch, the rewards (harness/agents/grpo.py) ----

    def sync_sampler(self, update: int, due: bool) -> bool:
        """Whether the sampler loads the trainer's weights before this update's rollout
        (``due``: the configured schedule says so)."""
        return due

    def sampler_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The sampler's next-token logits (fp32, before temperature and top-k/top-p)."""
        return logits

    def logprob_temperature(self, temperature: float, where: str) -> float:
        """The temperature that divides the logits where log-probs are computed: ``"sampler"``
        (sampling and the recorded log-probs) or ``"trainer"`` (old, reference and new log-probs)."""
        return temperature

    def dropout_active(self, where: str) -> bool:
        """Whether dropout is on in a no-grad pass: ``"rollout"``, ``"old"`` or ``"ref"`` (the
        update's own forward pass is in training mode)."""
        return False

    def logit_shift(self, shift: int) -> int:
        """How far the logits scoring a token sit before it (1: logits[t] predict token t + 1)."""
        return shift

    def completion_mask(self, mask: torch.Tensor, tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
        """The trainer's completion mask (attention and loss): ``mask`` is True on generated
        tokens up to and including the first EOS; ``tokens`` hold PAD after it."""
        return mask

    def reward_scores(self, scores: dict[str, Any]) -> dict[str, Any]:
        """Each reward function's values for the batch (numpy arrays, one per completion)."""
        return scores

    def group_advantages(self, rewards: torch.Tensor, group_size: int, healthy: torch.Tensor) -> torch.Tensor:
        """The batch's advantages, one per completion; ``healthy`` is what the configured
        estimator computed from ``rewards`` (as laid out by :meth:`group_layout`)."""
        return healthy

    def group_layout(self, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
        """The rewards in the order the advantage computation groups them (``view(-1, G)``);
        completions are stored prompt-major (the G completions of a prompt are adjacent)."""
        return rewards

    def behaviour_logprob(self, old: torch.Tensor, sources: dict[str, torch.Tensor]) -> torch.Tensor:
        """The 'old' log-probs stored with the batch (the importance ratio's denominator).
        ``old`` is what the config selects; ``sources`` holds ``sampler`` (recorded at
        generation), ``trainer`` (recomputed at the rollout weights) and ``reference``."""
        return old

    def microbatch_backward(self, index: int, n_micro: int) -> bool:
        """Whether micro-batch ``index`` of ``n_micro`` (gradient accumulation) contributes its
        gradient to the optimizer step."""
        return True


def compute_gae(rewards: np.ndarray, values: np.ndarray, next_value: np.ndarray,
                terminated: np.ndarray, truncated: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """GAE over a [T, N] rollout with next-step autoreset.

    ``values[t]`` is V(obs_t); ``next_value`` is V of the observation after the last step.
    At a terminated step there is no bootstrap; at a truncated step the bootstrap is
    V(final observation), which next-step autoreset hands back as the next observation,
    so ``values[t + 1]``. Neither lets the advantage of the next episode flow back.
    Entries of reset steps are meaningless and must be masked by the caller.
    """
    values_next = np.concatenate([values[1:], next_value[None]])
    deltas = rewards + gamma * values_next * (1.0 - terminated) - values
    carry = gamma * lam * (1.0 - np.maximum(terminated, truncated))
    advantages = np.zeros_like(rewards)
    last_gae = np.zeros_like(next_value)
    for t in reversed(range(rewards.shape[0])):
        last_gae = deltas[t] + carry[t] * last_gae
        advantages[t] = last_gae
    return advantages


HEALTHY = Hooks()


def overrides(hooks: Hooks, name: str) -> bool:
    """Whether ``hooks`` (a fault) replaces hook ``name`` (the healthy behaviour otherwise)."""
    return getattr(type(hooks), name) is not getattr(Hooks, name)


def overridden(hooks: Hooks | type[Hooks]) -> tuple[str, ...]:
    """Every hook a fault class (or instance) replaces, in the order :class:`Hooks` declares them."""
    cls = hooks if isinstance(hooks, type) else type(hooks)
    return tuple(name for name, value in vars(Hooks).items()
                 if callable(value) and not name.startswith("_") and getattr(cls, name) is not value)


#: where each hook acts, as a fault's ``acts_on`` names it (:func:`acts_on`); every hook has one
HOOK_SITES: dict[str, str] = {
    "wrap_env": "env wrapper",
    "hyperparams": "effective hyperparameter",
    "scheduled_lr": "effective hyperparameter",
    "episode_end": "rollout",
    "final_observation": "rollout",
    "assumes_same_step_autoreset": "rollout",
    "obs_norm_training": "rollout",
    "normalization_restarts": "rollout",
    "env_seeds": "env construction",
    "reference_weights": "model construction",
    "gae": "advantage estimation",
    "advantages": "advantage estimation",
    "group_layout": "advantage estimation",
    "group_advantages": "advantage estimation",
    "sync_sampler": "sampler",
    "sampler_logits": "sampler",
    "reward_scores": "reward functions",
    "old_logprob": "update-loop hook",
    "ref_logprob": "update-loop hook",
    "behaviour_logprob": "update-loop hook",
    "logprob_temperature": "update-loop hook",
    "dropout_active": "update-loop hook",
    "logit_shift": "update-loop hook",
    "completion_mask": "update-loop hook",
    "surrogate": "update-loop hook",
    "loss": "update-loop hook",
    "microbatch_backward": "update-loop hook",
    "micro_share": "update-loop hook",
    "trainer_sampling_filter": "update-loop hook",
    "zero_grad": "update-loop hook",
    "optimizer_step": "update-loop hook",
    "ratio_metrics": "logged metrics",
}


def acts_on(hooks: Hooks | type[Hooks]) -> str:
    """Where a fault class (or instance) acts: the hooks it overrides grouped by :data:`HOOK_SITES`,
    e.g. ``"effective hyperparameter: hyperparams; advantage estimation: group_advantages"``;
    ``"nothing"`` when it overrides none."""
    sites: dict[str, list[str]] = {}
    for name in overridden(hooks):
        sites.setdefault(HOOK_SITES[name], []).append(name)
    return "; ".join(f"{site}: {', '.join(names)}" for site, names in sites.items()) or "nothing"

"""Hook points the agents expose to faults.

The training loops call these methods at fixed places; :class:`Hooks` itself is the
healthy behaviour (every hook hands its input back unchanged). A fault subclasses it
and overrides only the hooks it needs, so no fault ever edits agent code.
"""

from __future__ import annotations

from typing import Any

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

    def ref_logprob(self, stored: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        """The reference policy's log-probs for the KL penalty (GRPO).

        ``stored`` come from the frozen reference; ``live`` from the policy being optimised
        (at the rollout: the policy that generated; in the update: with gradient).
        """
        return stored

    def loss(self, loss: torch.Tensor, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        """The scalar that is back-propagated; ``terms`` holds its parts."""
        return loss

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Apply the gradients."""
        optimizer.step()


HEALTHY = Hooks()

"""``optimizer.zero_grad()`` is missing: gradients accumulate across minibatches (and updates).

Reports (read), none of them from an RL trainer (a transplant: the same PyTorch mistake in a PPO
update loop): IDEA-Research/DN-DETR#19, object detection ("It looks like you forgot
optimizer.zero_grad() ... at each step you accumulate all gradients which were previously
calculated"); huggingface/transformers#340, a fine-tuning example script that never cleared
gradients between minibatches ("that's a mistake indeed ... Fixed on master"); pytorch#47175 ("It
is easy to introduce an extremely nasty bug in your code by forgetting to call `zero_grad()` or
calling it at the beginning of each epoch instead of the beginning of each iteration"); tenstorrent
tt-blacksmith PR#711 ("we forgot to do `zero_grad` on optimizer after each optimizer step"). The
nearest RL report, huggingface/trl#583, is a misplaced zero_grad under gradient accumulation in
TRL's PPO trainer ("reward/loss curves were looking way worse"), not a missing one.

``cleared="never"`` (default): the gradients are never cleared; ``"epoch"``: cleared once per epoch
(pytorch#47175's variant), ``"update"``: once per update. Gradient clipping rescales the accumulated
gradient in place, so the sum does not grow without bound: it acts like momentum on stale
gradients. The logged grad_norm is the pre-clip norm of the accumulated gradient. SB3: an Adam
subclass whose ``zero_grad`` does this (``policy_kwargs["optimizer_class"]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param
from harness.hooks import Hooks


@dataclass
class NoZeroGrad(Fault):
    cleared: str = param("never", "when the gradients are cleared at all: never | epoch | update",
                         kind=str, choices=("never", "epoch", "update"))

    name = "no_zero_grad"
    description = ("zero_grad is never called (SB3: through policy_kwargs optimizer_class): each minibatch's "
                   "gradient is added to all previous ones, so every step follows stale gradients")
    provenance = ("transplanted from non-RL training code: DN-DETR#19 (\"you forgot optimizer.zero_grad() ... you "
                  "accumulate all gradients\"), transformers#340 (an example script, \"a mistake indeed\"), "
                  "pytorch#47175 (\"an extremely nasty bug\"), tt-blacksmith PR#711; nearest RL report trl#583 "
                  "(zero_grad misplaced under gradient accumulation, not missing)")
    algos = ("ppo",)
    expected = ('kl_high',)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._calls, self._per_epoch = 0, 1

    def begin_update(self, update: int, configured: Any) -> tuple[Hooks, Any]:
        """The counting restarts at every update (not through the hyperparams hook, which it does not change)."""
        hooks, hp = super().begin_update(update, configured)
        self._calls, self._per_epoch = 0, max(getattr(hp, "n_minibatches", 1), 1)
        return hooks, hp

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        first = self._calls == 0
        if (self.cleared == "update" and first) or (self.cleared == "epoch" and self._calls % self._per_epoch == 0):
            optimizer.zero_grad(set_to_none=True)
        self._calls += 1

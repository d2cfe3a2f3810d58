"""``optimizer.zero_grad()`` is missing: gradients accumulate across minibatches (and updates).

Reports (read): IDEA-Research/DN-DETR#19 ("It looks like you forgot optimizer.zero_grad() ... at
each step you accumulate all gradients which were previously calculated"); pytorch#47175 ("It is
easy to introduce an extremely nasty bug in your code by forgetting to call `zero_grad()` or calling
it at the beginning of each epoch instead of the beginning of each iteration"); tenstorrent
tt-blacksmith PR#711 ("we forgot to do `zero_grad` on optimizer after each optimizer step");
huggingface/trl#583 (zero_grad at the wrong place under gradient accumulation: "reward/loss curves
were looking way worse").

``cleared="never"`` (default): the gradients are never cleared; ``"epoch"``: cleared once per epoch
(pytorch#47175's variant), ``"update"``: once per update. Gradient clipping rescales the accumulated
gradient in place, so the sum does not grow without bound: it acts like momentum on stale
gradients. The logged grad_norm is the pre-clip norm of the accumulated gradient. SB3: an Adam
subclass whose ``zero_grad`` does this (``policy_kwargs["optimizer_class"]``).
"""

from dataclasses import dataclass
from typing import Any

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
    provenance = ("DN-DETR#19 (\"you forgot optimizer.zero_grad() ... you accumulate all gradients\"); pytorch#47175 "
                  "(\"an extremely nasty bug\"); tt-blacksmith PR#711; trl#583 (\"curves were looking way worse\")")
    algos = ("ppo",)
    backends = ("native", "sb3")
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

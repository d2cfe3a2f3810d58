"""The learning-rate scheduler steps after the update: the first update runs at learning rate 0.

Report (read): verl#3674 ("Learning is zero for the first iteration when warmup enabled. Constant LR
with Linear warmup sets LR to 0 for the first weight update since `self.actor_lr_scheduler.step`
called after the `self.actor.update_policy`"). Here update u runs at the rate scheduled for update
u - lag (warmup: lr * (u + 1 - lag) / warmup_updates, so 0 at the first update); ``lag`` is the
severity knob. The bug needs a warmup: ``warmup_updates`` (default 10) is the run's setting, shared
by the healthy twin. Once the warmup is over the lag changes nothing, so a late onset leaves no
trace. SB3: the learning-rate schedule callable returns the lagged rate.
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param


@dataclass
class LRScheduleOffByOne(Fault):
    lag: int = param(1, "updates the scheduler runs behind", ge=1, le=100, kind=int)
    warmup_updates: int = param(10, "the run's linear warmup, in updates (its setting)", ge=1, le=10000, kind=int)

    name = "lr_schedule_off_by_one"
    description = ("the scheduler steps after the update, so update u runs at the rate meant for u - 1: the first "
                   "update at lr 0, the warmup one update late (setting: warmup_updates; SB3: the learning-rate "
                   "schedule callable)")
    provenance = ("verl#3674 (\"sets LR to 0 for the first weight update since `self.actor_lr_scheduler.step` "
                  "called after the `self.actor.update_policy`\")")
    algos = ("ppo",)
    expected = ('first_update_frozen',)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"warmup_updates": self.warmup_updates}

    def scheduled_lr(self, hp: Any, update: int, n_updates: int) -> float:
        return hp.lr_at(update - self.lag, n_updates)

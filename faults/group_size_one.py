"""GRPO with one completion per prompt: every group is its own mean, advantages are 0."""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class GroupSizeOne(Fault):
    name = "group_size_one"
    form = "misconfigured"
    description = ("one completion per prompt (effective group_size -> 1; the batch keeps its size with more "
                   "prompts): each reward is its group's mean, so every advantage is exactly 0 and the policy loss is 0")
    provenance = ("ms-swift#3980 (num_generations=1 on a single card: 'How to calculate group advantage when "
                  "num_generations=1?' - 'It is the degenerated case, should be 0'; ms-swift then rejected it); "
                  "TRL rejects num_generations < 2; verl maps a single-sample group to mean 0, std 1")
    algos = ("grpo",)
    expected = ("adv_zero", "loss_zero", "groups_uniform")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, group_size=1, n_prompts=hp.n_prompts * hp.group_size)

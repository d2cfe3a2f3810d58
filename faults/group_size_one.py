"""GRPO run with one completion per prompt (``rollout.n=1``): a group has nothing to compare against.

Form: misconfigured, in the one framework that accepts it. verl's ``actor_rollout_ref.rollout.n``
defaults to 1 ("> 1 for grpo" says only a comment), so a GRPO recipe that does not set it runs
with groups of one, and nothing validates ``n`` against the estimator (TRL and ms-swift refuse
num_generations < 2; so does the harness's own config, which is why the fault, not the config,
sets it). What the update then does depends on verl's estimator (``estimator``):

- ``grpo`` (default; verl's ``compute_grpo_outcome_advantage``): a group of one gets mean 0 and
  std 1 ("if len(id2score[idx]) == 1: id2mean[idx] = torch.tensor(0.0); id2std[idx] =
  torch.tensor(1.0)"), so the advantage is the raw reward / (1 + 1e-6): REINFORCE without a
  baseline. With rewards in [0, 1] every sampled completion is pushed up, weighted by its reward.
- ``rloo_vectorized`` (verl PR #7581): the vectorised RLOO estimator zeroes singleton rows, "so
  rloo_vectorized returns an all-zero advantage tensor and the policy receives no gradient at
  all. Nothing validates n against the estimator choice, and no error is raised - the run just
  doesn't learn" (ms-swift#3980 gives the same answer for its GRPO: "It is the degenerated case,
  should be 0").

The batch keeps its size (n_prompts x G prompts of one completion each). Provenance (read): verl
core_algos.compute_grpo_outcome_advantage (the singleton branch above); verl PR #7581 (rollout.n ==
1 with rloo_vectorized: all-zero advantages, no error); PeterGriffinJin/Search-R1#110 (a GRPO
script that does not declare rollout.n, whose default is 1, "# > 1 for grpo") and
Jiayi-Pan/TinyZero#89 (a published GRPO run whose config shows rollout.n = 1); ms-swift#3980
(num_generations=1: "the degenerated case, should be 0"; ms-swift then rejected it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from faults.base import Fault, param

#: verl's epsilon in (r - mean) / (std + epsilon)
VERL_EPSILON = 1e-6


@dataclass
class GroupSizeOne(Fault):
    estimator: str = param("grpo", "verl's advantage estimator: grpo (a singleton's mean 0, std 1: advantage = reward) "
                           "| rloo_vectorized (singletons zeroed: every advantage 0)", kind=str,
                           choices=("grpo", "rloo_vectorized"))

    name = "group_size_one"
    version = 2            # 2: verl's forms (grpo: advantage = reward; rloo_vectorized: 0); was: 0 under grpo
    form = "misconfigured"
    description = ("one completion per prompt (verl rollout.n = 1, its default; the batch keeps its size with more "
                   "prompts): no group baseline, so verl's GRPO estimator uses the raw reward as the advantage "
                   "(mean 0, std 1 for a group of one), or, with rloo_vectorized, every advantage is 0")
    provenance = ("verl compute_grpo_outcome_advantage (a group of one: mean 0, std 1); verl PR #7581 (rollout.n == 1 "
                  "with rloo_vectorized: 'an all-zero advantage tensor ... no error is raised - the run just doesn't "
                  "learn'); Search-R1#110 and TinyZero#89 (GRPO runs with rollout.n left at 1); ms-swift#3980 ('the "
                  "degenerated case, should be 0'); TRL and ms-swift reject num_generations < 2")
    algos = ("grpo",)
    expected = ("groups_uniform",)

    def refusal(self, backend: str) -> str | None:
        if backend == "trl":
            return "TRL's GRPOConfig refuses num_generations < 2, so the bug does not exist there (it is verl's)"
        return None

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, group_size=1, n_prompts=hp.n_prompts * hp.group_size)

    def group_advantages(self, rewards: torch.Tensor, group_size: int, healthy: torch.Tensor) -> torch.Tensor:
        import torch
        if group_size != 1:
            return healthy
        if self.estimator == "rloo_vectorized":
            return torch.zeros_like(rewards)
        return (rewards - 0.0) / (1.0 + VERL_EPSILON)

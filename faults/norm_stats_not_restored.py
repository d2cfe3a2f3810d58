"""A resumed run starts its observation (and reward) normalisation statistics over.

Form: code bug. Training with running normalisation (SB3's ``VecNormalize``, gymnasium's
``NormalizeObservation`` / ``NormalizeReward``) keeps the statistics in the env wrapper, not in
the model: a checkpoint that saves only the weights (and optimizer), resumed or evaluated with a
freshly built wrapper, feeds the trained policy observations normalised by statistics that start
again from mean 0 and variance 1 and re-learn from the new rollouts. Here the run is "resumed" at
``onset``: weights, optimizer state and the env's own state go on, the statistics restart and
then update as a new wrapper's would. The bug needs normalisation (``setting``: ``norm_obs``,
shared by the healthy twin); a resume happens after training started, so at onset 0 nothing
changes (a new wrapper is what every run starts with) and the fault leaves no trace by
construction.

Provenance (read): DLR-RM/stable-baselines3#1256 ("Resuming training of normalized environment
decreases dramatically": Humanoid trained with ``VecNormalize(norm_obs=True)``, "resuming the
training on my local computer shows a HUGE decrease in average episode reward 4000 down to
1000"); isaac-sim/IsaacLab#2635 (SB3 train.py "does not save VecNormalize stats; play.py starts
with new stats": "the environment is wrapped with a fresh VecNormalize instance, which starts
collecting new statistics from scratch, even with training = True. This results in mismatched
normalization distributions and degraded policy performance"); DLR-RM/rl-baselines3-zoo#386 (a
maintainer: continuing training should load vecnormalize.pkl, "In the worst case, statistics tends
to quickly converge if started from scratch").
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param


@dataclass
class NormStatsNotRestored(Fault):
    onset: int = param(4, "update at which the run is resumed with fresh normalisation statistics (0: nothing "
                       "changes)", ge=0, kind=int)

    name = "norm_stats_not_restored"
    description = ("a run resumed at its onset rebuilds its observation (and reward) normalisation with fresh "
                   "statistics instead of the saved ones: the trained policy sees re-scaled observations until "
                   "they re-converge (setting: norm_obs)")
    provenance = ("SB3#1256 (resumed VecNormalize run: 'HUGE decrease in average episode reward 4000 down to 1000'); "
                  "IsaacLab#2635 (VecNormalize stats never saved, play.py 'starts collecting new statistics from "
                  "scratch'); rl-baselines3-zoo#386 ('statistics tends to quickly converge if started from scratch')")
    algos = ("ppo",)
    onset_kinds = ("mid",)
    expected = ("explained_variance_negative",)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"norm_obs": True}

    def normalization_restarts(self, update: int) -> bool:
        return update == self.onset > 0

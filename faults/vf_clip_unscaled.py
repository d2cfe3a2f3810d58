"""The value function is clipped with a range sized for rewards of scale ~1, on returns far larger.

PPO2-style value clipping keeps the new value within ``clip_range_vf`` of the rollout's value (the
loss takes the worse of the clipped and unclipped errors: CleanRL's ``clip_vloss``; SB3 uses the
clipped value alone). The range is a distance in the returns' own units, not a ratio, so a range
that suits normalised rewards (0.2, the policy's clip range reused) lets a critic whose targets are
tens or hundreds move only that far per update: the value lags its targets for many updates, the
advantages stay poorly baselined, and learning slows.

Reports (read):
- hill-a/stable-baselines#216 "PPO2 value function clipping seems to be flawed": "It does so with the
  same clip range parameter as the probability ratios of the policies. For the value function, the
  difference between old and new predicted return is clipped, not a ratio. This difference depends
  on the reward scaling of the environment"; the maintainer: "it seems very important to have the
  possibility to deactivate the clipping on the value function, or it have a different value"
  (SB3's ``clip_range_vf``, default None, came from it; SB3's ppo.py still notes "this depends on
  the reward scaling").
- ray-project/ray PR #2921 "Add vf clipping param to fix pendulum example": "The vf clip param is
  sensitive to the scale of the rewards. This broke the pendulum tuned example when clipping was
  fixed"; a user: "this is actually probably why PPO hasn't been working for us; our rewards are on
  the wrong scale too".
- openai/baselines#1141: "the clipping code is using the same cliprange param as the ratio".

``form="misconfigured"`` (default): the config holds the small range (SB3 ``clip_range_vf=0.2``,
RLlib ``vf_clip_param``, CleanRL ``clip_vloss`` with ``clip_coef`` 0.2). ``form="code bug"``: the
config has no value clipping and the update clips with the given range anyway (baselines' PPO2,
which always clipped with the policy's range). The healthy twin has no value clipping (SB3's
default), so the bug needs a config without value clipping: a config that already clips (CleanRL's
``clip_vloss`` default) is refused, since there the fault would change nothing. Where returns are of
scale ~1 (normalised rewards) the same range is harmless: the bug exists only at the env's reward scale.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param
from harness.config import ConfigError


@dataclass
class VfClipUnscaled(Fault):
    form: str = form_param("misconfigured", "misconfigured", "code bug")
    clip_range_vf: float = param(0.2, "the value clip range, in return units (reports: the policy's clip range, "
                                 "0.2, reused)", gt=0, le=1e6)

    name = "vf_clip_unscaled"
    description = ("the value is clipped to within clip_range_vf (default 0.2, sized for normalised rewards) of the "
                   "rollout's value on returns of a larger scale: the critic lags its targets")
    provenance = ("stable-baselines#216 ('the difference between old and new predicted return is clipped, not a "
                  "ratio. This difference depends on the reward scaling'); ray PR #2921 ('The vf clip param is "
                  "sensitive to the scale of the rewards. This broke the pendulum tuned example'); baselines#1141 "
                  "('using the same cliprange param as the ratio')")
    algos = ("ppo",)
    expected = ("value_loss_huge",)     # the critic cannot follow its targets: its loss stays high

    def configure(self, algo: Any) -> Any:
        if getattr(algo, "clip_range_vf", None) is not None:
            raise ConfigError(f"fault {self.name} needs a config without value clipping (its healthy twin has none); "
                              f"the config clips at algo.clip_range_vf={algo.clip_range_vf}: set algo.clip_range_vf=null")
        return super().configure(algo)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, clip_range_vf=self.clip_range_vf)

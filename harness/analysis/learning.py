"""Does a run learn? The criterion that keeps configurations that cannot learn out of the healthy class.

A healthy run is one whose configuration trains in its setup. A healthy-labelled run that does not
(a learning rate too small for its budget, a rollout of 16 steps...) already looks like
``lr_too_low`` or ``shared_policy``; training the diagnosis on it as "healthy" teaches the model
that a suppressed update is normal. So every run's learning is measured the same way, per setup:

- PPO: the mean episode return over the last fifth of the run against the first tenth, as a share
  of the env's span from a random policy to a solved one (:data:`RETURN_SPAN`, measured or
  documented per env; the run's own env id decides). The return is the env's own (``env_return``
  of the run's episodes, what a Monitor / RecordEpisodeStatistics logs), not the learner's, which
  reward normalisation or a reward fault rescales (a run with normalised rewards was judged on
  returns of scale ~1 against the raw span, and called not learning);
- GRPO: the mean reward over the last fifth against the first tenth, as a share of the largest
  reward the task can give (the summed reward weights of the token task; 1 for the
  high-dimensional task).

A run *learns* unless its gain falls short of :data:`LEARNS` (5%) beyond its own noise: the gain plus
1.645 standard errors (from the update-to-update spread of the series) must stay below 5% for the run
to be called not learning. Without that margin the 5% bar cut the middle of the healthy GRPO runs'
gains (median 5.5% on a 1695-run sample of the 2026-11-25 dataset, unrelated to the learning rate),
labelling a third of them not_learning by noise alone; with it 16 of 173 are, and 39 of 227 healthy
PPO runs (mostly one epoch per update at a small learning rate, 20-50 updates: configurations that
do not train in their budget). A run also learns when its last fifth already sits at
:data:`SATURATED` (80%) of the way to a solved env / the task's largest reward: a run that starts
near the ceiling has little left to gain, and a flat high curve is not a configuration that cannot
learn (on a 265-run sample of the 2026-11-25 dataset, 4 of the 13 healthy GRPO runs called not
learning held 82-89% of the largest reward from start to end). The dataset marks healthy runs that do
not as ``not_learning``: they are kept (and counted in the datasheet) but neither train nor score
the diagnosis as healthy. Faulty runs keep their label whatever they learn (the bug is real).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

#: env id -> (mean return of a uniformly random policy, return of a solved policy). Random: measured
#: with gymnasium 1.4 (uniform actions, 100-300 episodes: CartPole 22.4, Acrobot -497, LunarLander -186,
#: Pendulum -1208, MountainCar -200; 30 episodes with mujoco 4.0: InvertedPendulum-v5 4.3, Hopper-v5 13.8,
#: Walker2d-v5 3.1);
#: solved: gymnasium's reward threshold where it
#: has one (CartPole-v1 475 -> its 500 cap, Acrobot-v1 -100, LunarLander-v3 200), else the return
#: rl-zoo3's tuned PPO reaches (Pendulum-v1 about -200); Walker2d-v5 has neither: 3000, the stop value of
#: DI-engine's walker2d_trex_onppo config (its walker2d_onppo config asks 6000), so 5% is a gain of 150.
RETURN_SPAN: dict[str, tuple[float, float]] = {
    "CartPole-v1": (22.0, 500.0),
    "Acrobot-v1": (-497.0, -100.0),
    "LunarLander-v3": (-186.0, 200.0),
    "Pendulum-v1": (-1208.0, -200.0),
    "MountainCar-v0": (-200.0, -110.0),
    "InvertedPendulum-v5": (4.3, 950.0),
    "Hopper-v5": (13.8, 3800.0),
    "Walker2d-v5": (3.1, 3000.0),
}
LEARNS = 0.05           # share of the span (PPO) or of the largest reward (GRPO) a learning run gains
Z_NOISE = 1.645         # one-sided 95%: a run is called not learning only when its gain is below LEARNS beyond its noise
SATURATED = 0.8         # where the run's last fifth sits on that scale, at or above which it counts as learned
HEAD, TAIL = 0.1, 0.2   # fractions of the run compared: its first tenth, its last fifth
HEALTHY = "healthy"             # the label of a run that trains, and of a log the diagnosis finds no fault in
NOT_LEARNING = "not_learning"   # the label of a healthy-configured run that does not learn


@dataclass(frozen=True)
class Learning:
    """A run's progress: ``gain`` (tail minus head of its progress metric), ``scale`` (what the
    setup can gain), ``share = gain / scale``; ``learns`` is None when the run cannot tell (no
    progress values, an env without a known span)."""

    metric: str
    gain: float
    scale: float
    learns: bool | None

    @property
    def share(self) -> float:
        return self.gain / self.scale if self.scale and math.isfinite(self.gain) else math.nan


def _ends(values: np.ndarray) -> tuple[float, float, float]:
    """The means of the run's head and tail and the standard error of their difference, from the
    update-to-update noise of the series (the spread of its successive differences / sqrt 2, which a
    steady trend does not inflate)."""
    n = len(values)
    n_head, n_tail = max(1, int(round(HEAD * n))), max(1, int(round(TAIL * n)))
    noise = float(np.std(np.diff(values)) / math.sqrt(2)) if n > 2 else 0.0
    se = noise * math.sqrt(1 / n_head + 1 / n_tail)
    return float(np.mean(values[:n_head])), float(np.mean(values[n - n_tail:])), se


def reward_scale(meta: Mapping[str, Any]) -> float:
    """The largest reward a GRPO task gives: the token task's summed reward weights, else 1."""
    weights = ((meta.get("config") or {}).get("env") or {}).get("kwargs", {}).get("reward_weights")
    if meta.get("env_id") == "harness/ToySeq-v0":
        weights = weights or {"format": 0.3, "correct": 0.65}
        return float(sum(weights.values()))
    return 1.0


def env_returns(episodes: pd.DataFrame) -> pd.Series:
    """The mean of the env's own episode return per update (the updates where episodes finished)."""
    if episodes is None or episodes.empty or "env_return" not in episodes:
        return pd.Series(dtype=float)
    return episodes.groupby("update")["env_return"].mean()


def learning(metrics: pd.DataFrame, meta: Mapping[str, Any], episodes: pd.DataFrame | None = None) -> Learning:
    """How much the run learned (see the module docstring). ``episodes``: the run's episodes.parquet
    (PPO: the env's own returns; without them, the learner's ``return_mean``)."""
    grpo = meta.get("algo") == "grpo"
    metric = "reward_mean" if grpo else "return_mean"
    own = pd.Series(dtype=float) if grpo else env_returns(episodes)
    if len(own):
        metric, series = "env_return", own
    else:
        series = metrics.get(metric, pd.Series(dtype=float))
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    # the scale runs from ``floor`` (no reward / a random policy) to ``floor + scale`` (the largest / solved)
    floor, top = (0.0, reward_scale(meta)) if grpo else RETURN_SPAN.get(str(meta.get("env_id")), (math.nan, math.nan))
    scale = top - floor
    if len(values) < 2 or not math.isfinite(scale):
        return Learning(metric, math.nan, scale, None)
    head, tail, se = _ends(values)
    gain = tail - head
    learns = gain + Z_NOISE * se >= LEARNS * scale or tail - floor >= SATURATED * scale
    return Learning(metric, gain, scale, bool(learns))

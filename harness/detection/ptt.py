"""Microsoft's post-training-toolkit (PTT) heuristics, reimplemented from its published rules so its
alarms can be scored on the same runs as the diagnosis.

Source: github.com/microsoft/post-training-toolkit (commit 7ab9855), the YAML rules under
``post_training_toolkit/heuristics/builtin/{common,grpo,ppo}/`` and their evaluation in
``heuristics/executor.py``: a rule applies once the log has ``min_steps`` rows; ``< x`` / ``> x``
compare the mean of the metric's last ``window`` values; ``drop(p%)`` compares the mean of the last
``window`` values with the mean of the first ``window`` (needs 2 x window rows); ``spike(kx)``
compares the maximum of the last 5 values with the rolling mean (``window``, at least window / 2
values) ending 5 values earlier. Only rules whose metric a PPO/GRPO log of this harness carries are
kept (PTT's names -> canonical): ``kl`` -> kl_ref, ``reward_std``, ``group_reward_std`` ->
group_reward_std_mean, ``importance_sampling_ratio`` -> ratio_mean, ``clip_fraction`` -> clipfrac,
``entropy``, ``explained_variance``, ``value_loss``, ``truncation_rate`` -> response_clip_ratio.
PTT names no fault; each alarm here names the harness fault its rule's message describes, so
attribution can be scored too (None where the message names none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.detection.base import Alarm, RunInfo, finite


@dataclass(frozen=True)
class Rule:
    name: str                 # PTT's rule name
    metric: str               # canonical metric
    kind: str                 # "<", ">", "drop", "spike"
    value: float              # threshold, drop percentage or spike multiplier
    window: int
    min_steps: int
    algos: tuple[str, ...]
    fault: str | None         # the harness fault its message describes
    severity: str


RULES: tuple[Rule, ...] = (
    Rule("yaml_kl_divergence_high", "kl_ref", ">", 0.3, 20, 30, ("ppo", "grpo"), "reference_not_frozen", "high"),
    Rule("yaml_reward_variance_spike", "reward_std", "spike", 2.5, 20, 50, ("ppo", "grpo"), None, "high"),
    Rule("yaml_grpo_group_reward_collapse", "group_reward_std_mean", "<", 0.01, 20, 40, ("grpo",), "zero_reward", "high"),
    Rule("grpo_importance_sampling_ratio_anomaly", "ratio_mean", "<", 0.5, 20, 30, ("ppo", "grpo"), "excessive_lr",
         "high"),
    Rule("yaml_clip_fraction_high", "clipfrac", ">", 0.3, 20, 30, ("ppo", "grpo"), "excessive_lr", "medium"),
    Rule("yaml_entropy_collapse", "entropy", "drop", 50.0, 30, 50, ("ppo", "grpo"), "excessive_lr", "high"),
    Rule("ppo_explained_variance_low", "explained_variance", "<", 0.1, 30, 50, ("ppo", "grpo"), None, "high"),
    Rule("yaml_value_head_divergence", "value_loss", ">", 0.5, 20, 30, ("ppo",), None, "medium"),
    Rule("response_truncation_rate_high", "response_clip_ratio", ">", 0.3, 20, 30, ("ppo", "grpo"),
         "truncation_kills_reward", "medium"),
)
SCORES = {"high": 0.8, "medium": 0.5}


def fires(rule: Rule, values: np.ndarray) -> bool:
    """PTT's evaluation of one rule on a metric's values so far (its executor's, on an array)."""
    if rule.kind in ("<", ">"):
        recent = float(values[-rule.window:].mean())
        return recent < rule.value if rule.kind == "<" else recent > rule.value
    if rule.kind == "drop":
        if len(values) < 2 * rule.window:
            return False
        base, recent = float(values[:rule.window].mean()), float(values[-rule.window:].mean())
        return base != 0 and (base - recent) / abs(base) * 100 >= rule.value
    if len(values) < rule.window:                                  # spike
        return False
    if len(values) <= rule.window + 5:
        base = float(values[:len(values) - 5].mean()) if len(values) > 5 else math.nan
    else:                      # pandas' rolling(window, min_periods=window // 2).mean(), last value
        before = values[:-5][-rule.window:]
        base = float(before.mean()) if len(before) >= rule.window // 2 else math.nan
    return not (math.isnan(base) or base == 0) and float(values[-5:].max()) >= base * rule.value


class PostTrainingToolkitDetector:
    """PTT's rules as a streaming detector (reset / update); see the module doc."""

    def reset(self, run_info: RunInfo) -> None:
        self.algo = run_info.algo
        self.rows = 0
        self.values: dict[str, list[float]] = {r.metric: [] for r in RULES}

    def update(self, update_index: int, metrics: dict[str, float]) -> list[Alarm]:
        self.rows += 1
        for metric, values in self.values.items():
            x = metrics.get(metric)
            if x is not None and finite(x):
                values.append(float(x))
        alarms = []
        for rule in RULES:
            values = self.values[rule.metric]
            if self.algo in rule.algos and self.rows >= rule.min_steps and values and fires(rule, np.asarray(values)):
                alarms.append(Alarm(rule.name, rule.fault, SCORES[rule.severity]))
        return alarms

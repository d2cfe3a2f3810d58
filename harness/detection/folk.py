"""The rules of thumb people apply to PPO/GRPO logs today, applied literally.

Each rule raises an alarm naming its symptom and the fault it most suggests; the score is
how strongly the rule is usually trusted, so a run's *named* fault is the one behind its
strongest alarm. The evaluation measures what these rules are really worth.
"""

from __future__ import annotations

import math
from collections import deque

from harness.detection.base import Alarm, RunInfo, finite
from harness.metrics import PROGRESS


class FolkDetector:
    def __init__(self, kl_high: float = 0.1, kl_low: float = 0.01, ratio_low: float = 0.5,
                 ratio_high: float = 2.0, log_ratio_max: float = 10.0, grad_norm_high: float = 10.0,
                 clipfrac_high: float = 0.3, value_spike: float = 10.0, flat_window: int = 10,
                 zero_std_share: float = 0.95):
        self.kl_high, self.kl_low = kl_high, kl_low
        self.ratio_low, self.ratio_high, self.log_ratio_max = ratio_low, ratio_high, log_ratio_max
        self.grad_norm_high, self.clipfrac_high = grad_norm_high, clipfrac_high
        self.value_spike, self.flat_window, self.zero_std_share = value_spike, flat_window, zero_std_share

    def reset(self, run_info: RunInfo) -> None:
        self.info = run_info
        self.progress: deque[float] = deque(maxlen=self.flat_window)
        self.value_losses: list[float] = []

    def update(self, update_index: int, m: dict[str, float]) -> list[Alarm]:
        alarms: list[Alarm] = []

        def fire(symptom: str, fault: str, score: float) -> None:
            alarms.append(Alarm(symptom, fault, score))

        get = m.get
        if get("nonfinite") == 1 or (get("loss") is not None and math.isinf(get("loss"))):
            fire("non-finite loss", "excessive_lr", 0.9)
        kl = get("approx_kl", math.nan)
        if kl > self.kl_high:
            fire("approx_kl > 0.1", "excessive_lr", 0.8)
        if kl < self.kl_low:
            fire("approx_kl < 0.01", "tiny_clip", 0.3)
        if get("entropy") == 0:
            fire("entropy == 0", "excessive_lr", 0.7)
        if get("adv_mean") == 0:
            fire("advantage mean == 0", "zero_reward", 0.6)
        if get("policy_loss") == 0:
            fire("policy loss == 0", "zero_reward", 0.6)
        lo, hi = get("ratio_min", math.nan), get("ratio_max", math.nan)
        if lo < self.ratio_low or hi > self.ratio_high:
            fire("ratio outside [0.5, 2]", "excessive_lr", 0.6)
        logs = [abs(math.log(r)) if r > 0 else math.inf for r in (lo, hi) if finite(r) or r == math.inf]
        if any(x > self.log_ratio_max for x in logs):
            fire("|log ratio| > 10", "excessive_lr", 0.8)
        if get("grad_norm", math.nan) > self.grad_norm_high:
            fire("grad norm > 10", "excessive_lr", 0.4)
        if get("clipfrac", math.nan) > self.clipfrac_high:
            fire("clip fraction > 0.3", "tiny_clip", 0.6)
        if get("frac_reward_zero_std", math.nan) > self.zero_std_share:
            fire("share of zero-std groups ~ 1", "zero_reward", 0.7)

        progress = get(PROGRESS.get(self.info.algo, "reward_mean"), math.nan)
        if finite(progress):
            self.progress.append(progress)
            if len(self.progress) == self.flat_window:
                if max(self.progress) - min(self.progress) == 0:
                    fire("reward flat", "zero_reward", 0.5)
                elif sum(self.progress) / len(self.progress) < 0:
                    fire("reward negative", "zero_reward", 0.3)
        value_loss = get("value_loss", math.nan)
        if finite(value_loss):
            if len(self.value_losses) >= 5:
                typical = sorted(self.value_losses)[len(self.value_losses) // 2]
                if typical > 0 and value_loss > self.value_spike * typical:
                    fire("value loss spike", "excessive_lr", 0.4)
            self.value_losses.append(value_loss)
        return alarms

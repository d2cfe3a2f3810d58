"""A detector that also reads the run's configured hyperparameters.

Knowing the configuration tells a healthy look-alike from a bug: a ratio of exactly 1 is
correct with one epoch and one minibatch and a bug with more; fewer optimizer steps than
epochs x minibatches means the loop does not do what was configured; a logged learning rate
or clip range that differs from the configured one is a value that was not honoured. Rules
whose firing depends on scale rather than on a bug (KL < 0.01, grad norm > 10) are left out.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from harness.detection.base import Alarm, RunInfo, finite

EXACT = 1e-6


class ConfigAwareDetector:
    def __init__(self, kl_high: float = 0.1, kl_window: int = 5, kl_ref_high: float = 20.0,
                 clipfrac_high: float = 0.3, flat_window: int = 10, lr_tolerance: float = 1.5):
        self.kl_high, self.kl_window, self.kl_ref_high = kl_high, kl_window, kl_ref_high
        self.clipfrac_high, self.flat_window, self.lr_tolerance = clipfrac_high, flat_window, lr_tolerance

    def reset(self, run_info: RunInfo) -> None:
        self.info = run_info
        self.cfg = run_info.configured
        self.steps = run_info.optimizer_steps_per_update
        self.kls: deque[float] = deque(maxlen=self.kl_window)
        self.rewards: deque[float] = deque(maxlen=self.flat_window)
        self.kl_ref_zero_streak = 0

    def update(self, update_index: int, m: dict[str, float]) -> list[Alarm]:
        alarms: list[Alarm] = []
        get, cfg = m.get, self.cfg

        def fire(symptom: str, fault: str, score: float) -> None:
            alarms.append(Alarm(symptom, fault, score))

        if get("nonfinite") == 1:
            adv_broken = not (finite(get("adv_mean")) and finite(get("adv_std")))
            if self.info.algo == "grpo" and adv_broken:
                fire("non-finite advantages", "adv_std_no_floor", 0.95)
            else:
                fire("non-finite loss or gradient", "excessive_lr", 0.9)

        multi_pass = self.steps is not None and self.steps > 1
        # ratio == 1 is a bug only if the policy moved (no gradient at all has other causes)
        # and is not deterministic (then every log-prob is 0 and the ratio is 1 anyway)
        moving = get("param_delta", 0) > 0 and get("entropy", 0) > 1e-3
        if multi_pass and moving and get("ratio_dev_max", math.nan) <= EXACT and get("approx_kl", math.nan) == 0:
            fire(f"ratio == 1 with {self.steps} optimizer steps per update", "shared_policy", 0.95)
        if self.steps is not None and get("optimizer_steps", math.inf) < self.steps and get("nonfinite") != 1:
            fire(f"fewer optimizer steps than the configured {self.steps}", "ppo_epochs_ignored", 0.95)

        clip, lr = get("clip_range", math.nan), get("lr", math.nan)
        if finite(clip) and "clip_range" in cfg and clip < cfg["clip_range"] * (1 - 1e-9):
            fire("clip range below the configured one", "tiny_clip", 0.9)
        elif multi_pass and get("clipfrac", math.nan) > self.clipfrac_high:
            fire("clip fraction > 0.3", "tiny_clip", 0.5)
        if finite(lr) and "lr" in cfg and lr > cfg["lr"] * self.lr_tolerance:
            fire("learning rate above the configured one", "excessive_lr", 0.9)

        kl = get("approx_kl", math.nan)
        if finite(kl):
            self.kls.append(kl)
            if len(self.kls) == self.kl_window and statistics.median(self.kls) > self.kl_high:
                fire("approx_kl > 0.1 sustained", "excessive_lr", 0.7)
        if get("entropy") == 0:
            fire("entropy == 0", "excessive_lr", 0.6)

        if self.info.algo == "grpo":
            self._grpo_rules(m, fire)
        else:
            reward = get("reward_mean", math.nan)
            if finite(reward):
                self.rewards.append(reward)
                if len(self.rewards) == self.flat_window and max(self.rewards) == min(self.rewards) == 0:
                    fire("reward exactly 0", "zero_reward", 0.9)
        return alarms

    def _grpo_rules(self, m: dict[str, float], fire) -> None:
        get, beta = m.get, self.cfg.get("beta", 0) or 0
        # every group uniform while the policy still samples (a collapsed, deterministic policy
        # also makes identical completions, hence uniform groups, without either bug)
        uniform = get("frac_reward_zero_std") == 1 and get("entropy", 0) > 1e-3
        if uniform and get("reward_std", math.nan) == 0:
            fire("every group uniform, rewards constant", "zero_reward", 0.9)
        elif uniform and get("reward_std", 0) > 0 and (self.cfg.get("group_size") or 2) > 1:
            fire("every group uniform although rewards vary: groups of one", "group_size_one", 0.9)
        # at update 0 the policy is the reference, so a single-pass update sees kl_ref == 0 once
        moved = get("kl_ref") == 0 and get("param_delta", 0) > 0
        self.kl_ref_zero_streak = self.kl_ref_zero_streak + 1 if moved else 0
        if beta > 0 and self.kl_ref_zero_streak >= 3:
            fire("kl_ref == 0 while the policy moves (3 updates)", "reference_not_frozen", 0.9)
        if beta > 0 and get("kl_ref", math.nan) > self.kl_ref_high:
            fire("kl_ref > 20", "kl_penalty_sign_flip", 0.8)

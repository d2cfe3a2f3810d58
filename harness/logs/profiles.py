"""Framework dialects as data: ``harness/conf/profile/<name>.yaml`` (names, signs, scales, step key,
cadence, what the framework logs, detection hints, hyperparameter names), loaded into
:class:`Profile`; :func:`detect` picks the dialect whose names a log uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from harness.config import ConfigError, unknown_choice
from harness.metrics import CANONICAL

PROFILE_DIR = Path(__file__).resolve().parent.parent / "conf" / "profile"
#: W&B history bookkeeping columns (run.history() / scan_history()): never metrics
WANDB_META = ("_step", "_runtime", "_timestamp", "_wandb")


@dataclass
class Profile:
    name: str
    framework: str = ""
    algos: tuple[str, ...] = ("ppo", "grpo")
    algo: str | None = None
    step_keys: tuple[str, ...] = ()
    step_kind: str = "index"              # index | env_steps | sb3_iteration
    first_step: int = 0
    columns: dict[str, str] = field(default_factory=dict)     # framework key -> canonical metric
    patterns: dict[str, str] = field(default_factory=dict)    # regex -> canonical template
    #: canonical metric, or one of the log's own keys (which wins) -> factor (log -> canonical)
    scale: dict[str, float] = field(default_factory=dict)
    episodic: dict[str, dict[str, str]] = field(default_factory=dict)
    lag: dict[str, int] = field(default_factory=dict)
    strip_prefixes: tuple[str, ...] = ()
    summary_keys: tuple[str, ...] = ()
    not_metrics: tuple[str, ...] = ()
    not_metric_prefixes: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()
    text_config: str | None = None
    hyperparameters: dict[str, str] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    derived: dict[str, list[str]] = field(default_factory=dict)
    tensorboard_exclude: tuple[str, ...] = ()
    history_step_key: str | None = None       # the step column of a W&B-style history export
    files: dict[str, str] = field(default_factory=dict)
    #: a cumulative counter the log keeps (its own column name) -> [canonical metric, config key]: the
    #: metric is the counter's increment per update times the configured value (SB3: train/n_updates
    #: counts epochs; x n_minibatches = optimizer steps)
    cumulative: dict[str, list[str]] = field(default_factory=dict)
    #: canonical metrics the framework logs only when a separate rollout engine generates (TRL:
    #: sampling/* with use_vllm=True); a view renders them for the runs it treats as such
    engine_metrics: tuple[str, ...] = ()
    #: settings the framework saves as a schedule (a pickled function, not read) when any of the listed
    #: harness settings is on: a log of such a run carries no value for them (SB3: an annealed lr or
    #: clip range is a schedule in the model zip)
    scheduled: dict[str, list[str]] = field(default_factory=dict)
    #: names other algorithms of the same framework log -> those algorithms (SB3's A2C logs
    #: train/policy_loss, PPO train/policy_gradient_loss): a log with one of them and none of the
    #: clipped-surrogate metrics (approx_kl, clip fraction, ratio) is refused unless algo= is given
    other_algos: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: names only a language model's run logs (verl: prompt_length/mean): a PPO log holding one is PPO
    #: with a value model on a language model (algo ppo_lm)
    language_model: tuple[str, ...] = ()
    #: per algorithm, canonical metrics the framework logs with another meaning there -> why (verl's
    #: critic/advantages/mean in PPO is of the whitened advantages: 0 by construction): not read
    not_read_for: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        known = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in data.items() if k in known and v is not None}
        for name in ("algos", "step_keys", "strip_prefixes", "summary_keys", "not_metrics",
                     "not_metric_prefixes", "hints", "tensorboard_exclude", "engine_metrics", "language_model"):
            if name in kwargs:
                kwargs[name] = tuple(kwargs[name])
        if "other_algos" in kwargs:
            kwargs["other_algos"] = {k: (v,) if isinstance(v, str) else tuple(v) for k, v in kwargs["other_algos"].items()}
        if "step" in data and data["step"] and "step_keys" not in kwargs:     # v1 profiles: one step key
            kwargs["step_keys"] = (data["step"],)
        profile = cls(**kwargs)
        if profile.name == "canonical" and not profile.columns:
            profile.columns = {name: name for name in CANONICAL}
        return profile

    # ---- names -----------------------------------------------------------------------------
    def strip(self, key: str) -> str:
        """The key as this profile names it (W&B / TensorBoard add TRL's ``train/`` prefix)."""
        for prefix in self.strip_prefixes:
            if key.startswith(prefix) and key not in self.columns:
                return key[len(prefix):]
        return key

    def factor(self, key: str, metric: str) -> float:
        """What a value logged under ``key`` (canonical ``metric``) is multiplied by to read in canonical
        units: the key's own factor (e.g. verl <= 0.1's ``actor/lr(1e-4)``, the lr x 1e4), else the metric's."""
        return float(self.scale.get(key, self.scale.get(metric, 1.0)))

    def canonical_name(self, key: str) -> str | None:
        """The canonical metric a (stripped) framework key maps to, or None."""
        if key in self.columns:
            return self.columns[key]
        for pattern, template in self.patterns.items():
            m = re.fullmatch(pattern, key)
            if m:
                return template.format(*m.groups())
        return None

    def is_bookkeeping(self, key: str) -> bool:
        """Step keys, summary rows and W&B columns: read, but neither metrics nor unknown."""
        return key in self.step_keys or key in WANDB_META or key in self.summary_keys

    def is_not_metric(self, key: str) -> bool:
        """Keys the framework logs that carry no canonical metric (listed as not used)."""
        return key in self.not_metrics or key.startswith(self.not_metric_prefixes)

    def known(self, key: str) -> bool:
        return self.canonical_name(key) is not None or key in self.episodic

    def logged(self) -> list[str]:
        """The canonical metrics this framework logs at all."""
        out = list(dict.fromkeys(self.columns.values()))
        for spec in self.episodic.values():
            out += [m for m in spec.values() if m not in out]
        return out


@cache
def _load(name: str) -> dict[str, Any]:
    path = PROFILE_DIR / f"{name}.yaml"
    return yaml.safe_load(path.read_text())


def names() -> list[str]:
    """The dialects (``auto`` is the choice to detect one, not a dialect)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml") if p.stem != "auto")


def load_profile(profile: str | dict[str, Any] | Profile) -> Profile:
    """A profile by name (``harness/conf/profile/<name>.yaml``), from a dict (a composed Hydra group), or as is."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, dict):
        return Profile.from_dict(profile)
    if profile not in names():
        raise ConfigError(unknown_choice("profile", profile, ["auto", *names()]))
    return Profile.from_dict(_load(profile))


def all_profiles() -> list[Profile]:
    return [load_profile(n) for n in names()]


@dataclass(frozen=True)
class Match:
    profile: str
    score: float
    mapped: int            # distinct log keys the profile maps


def score(profile: Profile, keys: set[str]) -> Match:
    """How well a profile explains a log's keys: keys it maps, plus its distinctive hints and step key."""
    stripped = {profile.strip(k) for k in keys}
    mapped = sum(1 for k in stripped if profile.known(k))
    hints = sum(1 for h in profile.hints if h in stripped)
    steps = sum(1 for s in profile.step_keys[:1] if s in stripped)
    return Match(profile.name, mapped + 2.0 * hints + steps, mapped)


def ranking(keys: set[str]) -> list[Match]:
    return sorted((score(p, keys) for p in all_profiles()), key=lambda m: (-m.score, m.profile))


def detect(keys: set[str]) -> Profile:
    """The profile whose names the log uses most (ConfigError naming what was looked for if none)."""
    best = ranking(keys)[0]
    if best.mapped == 0:
        sample = ", ".join(sorted(keys)[:8]) or "none"
        raise ConfigError(f"the log's names match no known profile ({', '.join(names())}): "
                          f"looked for e.g. losses/approx_kl, train/clip_fraction, clip_ratio/region_mean, "
                          f"actor/pg_loss, approx_kl; the log has: {sample}")
    return load_profile(best.profile)

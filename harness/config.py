"""Structured configs: the typed schema of every Hydra group, with range checks.

Hydra checks types when it composes the config (each YAML in ``conf/`` extends the
schema stored here); ``validate()`` checks ranges when the config is turned into
objects by :func:`load_experiment`. Every problem is a :class:`ConfigError` with a
one-line message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf


class ConfigError(ValueError):
    """A bad configuration value; the message is one line meant for the user."""


def check_range(owner: str, name: str, value: Any, *, gt=None, ge=None, lt=None, le=None,
                kind: type = float) -> None:
    """Raise ConfigError unless ``value`` is a finite ``kind`` within the bounds."""
    key = f"{owner}.{name}" if owner else name
    if kind is int:
        ok_type = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok_type = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok_type = isinstance(value, kind)
    if not ok_type:
        raise ConfigError(f"{key}={value!r} must be {'an integer' if kind is int else 'a number'}")
    if kind in (int, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} must be finite")
    bounds = [(value > b, f"> {b}") for b in [gt] if b is not None]
    bounds += [(value >= b, f">= {b}") for b in [ge] if b is not None]
    bounds += [(value < b, f"< {b}") for b in [lt] if b is not None]
    bounds += [(value <= b, f"<= {b}") for b in [le] if b is not None]
    if not all(ok for ok, _ in bounds):
        raise ConfigError(f"{key}={value!r} is out of range: must be {' and '.join(b for _, b in bounds)}")


def locate(path: str) -> Any:
    """The object at a dotted import path (a ``_target_``); raises ConfigError."""
    import importlib

    module_name, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"_target_ {path!r} cannot be imported (is its package on the path?)") from None


@dataclass
class PPOConfig:
    """Native PPO hyperparameters (names follow CleanRL/SB3); values live in conf/algo/*.yaml."""

    name: str = MISSING
    num_envs: int = MISSING
    n_steps: int = MISSING           # rollout length per env; batch = num_envs * n_steps
    n_epochs: int = MISSING
    n_minibatches: int = MISSING
    lr: float = MISSING
    gamma: float = MISSING
    gae_lambda: float = MISSING
    clip_range: float = MISSING
    ent_coef: float = MISSING
    vf_coef: float = MISSING
    max_grad_norm: float = MISSING
    norm_adv: bool = MISSING
    hidden: int = MISSING
    target_kl: float | None = MISSING   # SB3: stop the epoch loop at a minibatch whose approx_kl > 1.5 x target_kl
    norm_obs: bool = MISSING         # running observation normalisation (NormalizeObservation, SB3 VecNormalize)
    norm_reward: bool = MISSING      # running reward scaling (gymnasium NormalizeReward, SB3 VecNormalize)
    anneal_lr: bool = MISSING        # CleanRL: the learning rate decays linearly to 0 over the run
    warmup_updates: int = MISSING    # linear warmup: update u (from 0) runs at lr * (u + 1) / warmup_updates
    grad_accum: int = MISSING        # microbatches per minibatch, gradients accumulated into one optimizer step
    # A healthy look-alike control shows a raw fault symptom by construction (one epoch and
    # one minibatch: ratio == 1 is correct there); variant names such a configuration.
    is_control: bool = False
    variant: str = "default"

    #: what a user's config holds: the hyperparameters a detector is shown (RunInfo.configured);
    #: every field is either here or in HIDDEN (tests/test_detector_view.py keeps the two in step)
    VISIBLE: ClassVar[tuple[str, ...]] = (
        "num_envs", "n_steps", "n_epochs", "n_minibatches", "lr", "gamma", "gae_lambda", "clip_range",
        "ent_coef", "vf_coef", "max_grad_norm", "norm_adv", "hidden", "target_kl", "norm_obs", "norm_reward",
        "anneal_lr", "warmup_updates", "grad_accum")

    def validate(self) -> None:
        for name in ("num_envs", "n_steps", "n_epochs", "n_minibatches", "hidden", "grad_accum"):
            check_range("algo", name, getattr(self, name), ge=1, kind=int)
        check_range("algo", "lr", self.lr, gt=0, le=10)
        check_range("algo", "gamma", self.gamma, ge=0, le=1)
        check_range("algo", "gae_lambda", self.gae_lambda, ge=0, le=1)
        check_range("algo", "clip_range", self.clip_range, gt=0, le=10)
        check_range("algo", "ent_coef", self.ent_coef, ge=-1, le=1)
        check_range("algo", "vf_coef", self.vf_coef, ge=0, le=100)
        check_range("algo", "max_grad_norm", self.max_grad_norm, gt=0)
        if self.target_kl is not None:
            check_range("algo", "target_kl", self.target_kl, gt=0, le=100)
        check_range("algo", "warmup_updates", self.warmup_updates, ge=0, kind=int)
        if self.n_minibatches > self.num_envs * self.n_steps:
            raise ConfigError(
                f"algo.n_minibatches={self.n_minibatches} exceeds the batch of "
                f"{self.num_envs * self.n_steps} samples (num_envs * n_steps)")
        smallest = self.batch_size // self.n_minibatches
        if self.grad_accum > smallest:
            raise ConfigError(f"algo.grad_accum={self.grad_accum} exceeds the {smallest} samples of a minibatch")

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.n_steps

    def lr_at(self, update: int, n_updates: int) -> float:
        """The scheduled learning rate of update ``update`` (from 0) of ``n_updates``: linear warmup
        over ``warmup_updates`` (the first update at lr / warmup_updates), then CleanRL's annealing
        (frac = 1 - update / n_updates) when ``anneal_lr``."""
        lr = self.lr
        if self.warmup_updates:
            lr *= min(1.0, max(0, update + 1) / self.warmup_updates)
        if self.anneal_lr:
            lr *= 1.0 - update / max(n_updates, 1)
        return lr


#: schema fields that are the harness's own bookkeeping (the algorithm's name, the look-alike
#: control flag and its variant): never shown to a detector, never in an exported log
HIDDEN: tuple[str, ...] = ("name", "is_control", "variant")


def visible_config(algo: str, configured: dict[str, Any]) -> dict[str, Any]:
    """The configured hyperparameters a detector may see: the schema's documented whitelist."""
    schema = ALGO_SCHEMAS.get(algo)
    keys = schema.VISIBLE if schema is not None else ()
    return {k: configured[k] for k in keys if k in configured}


def algo_label(algo: str, variant: str = "default") -> str:
    """``ppo``, or ``ppo_single_pass`` for a named variant (as in run ids and reports)."""
    return algo if variant == "default" else f"{algo}_{variant}"


def setup_label(algo: str, variant: str, env: str, backend: str) -> str:
    """``algo[_variant]/env/backend``: one setup, as every report names it."""
    return f"{algo_label(algo, variant)}/{env}/{backend}"


GRPO_SCALES = ("group", "batch", "none")
LOSS_AGGS = ("token_mean", "seq_mean")


@dataclass
class GRPOConfig:
    """Native GRPO hyperparameters (TRL/verl names in comments); values in conf/algo/*.yaml."""

    name: str = MISSING
    n_prompts: int = MISSING         # prompts per update
    group_size: int = MISSING        # completions per prompt, G (TRL num_generations, verl rollout.n)
    num_iterations: int = MISSING    # passes over each batch (TRL num_iterations, verl ppo_epochs)
    n_minibatches: int = MISSING     # completions are split into this many minibatches
    lr: float = MISSING
    clip_range: float = MISSING      # TRL epsilon, verl clip_ratio
    beta: float = MISSING            # k3 KL penalty to the frozen reference (TRL beta, verl kl_loss_coef)
    scale: str = MISSING             # advantage scale: group | batch | none (TRL scale_rewards)
    loss_agg: str = MISSING          # token_mean | seq_mean (verl loss_agg_mode)
    adv_eps: float = MISSING         # (r - mean) / (std + adv_eps)
    ent_coef: float = MISSING
    max_grad_norm: float = MISSING
    hidden: int = MISSING
    is_control: bool = False         # see PPOConfig
    variant: str = "default"

    VISIBLE: ClassVar[tuple[str, ...]] = (
        "n_prompts", "group_size", "num_iterations", "n_minibatches", "lr", "clip_range", "beta", "scale",
        "loss_agg", "adv_eps", "ent_coef", "max_grad_norm", "hidden")

    # the shared update core reads these names
    @property
    def n_epochs(self) -> int:
        return self.num_iterations

    norm_adv = False                 # group-relative advantages are not renormalised per minibatch

    @property
    def batch_size(self) -> int:
        return self.n_prompts * self.group_size

    def validate(self) -> None:
        for name in ("n_prompts", "num_iterations", "n_minibatches", "hidden"):
            check_range("algo", name, getattr(self, name), ge=1, kind=int)
        check_range("algo", "group_size", self.group_size, ge=2, kind=int)
        check_range("algo", "lr", self.lr, gt=0, le=10)
        check_range("algo", "clip_range", self.clip_range, gt=0, le=10)
        check_range("algo", "beta", self.beta, ge=0, le=100)
        check_range("algo", "adv_eps", self.adv_eps, gt=0, le=1)
        check_range("algo", "ent_coef", self.ent_coef, ge=-1, le=1)
        check_range("algo", "max_grad_norm", self.max_grad_norm, gt=0)
        for name, choices in (("scale", GRPO_SCALES), ("loss_agg", LOSS_AGGS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"algo.{name}={getattr(self, name)!r}; valid choices: {', '.join(choices)}")
        if self.n_minibatches > self.batch_size:
            raise ConfigError(f"algo.n_minibatches={self.n_minibatches} exceeds the "
                              f"{self.batch_size} completions per batch (n_prompts * group_size)")


@dataclass
class EnvConfig:
    """A gymnasium environment and the training budget on it."""

    name: str = MISSING
    id: str = MISSING                # gymnasium id, e.g. CartPole-v1
    total_timesteps: int = MISSING   # env steps (all envs together)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        check_range("env", "total_timesteps", self.total_timesteps, ge=1, kind=int)


@dataclass
class BackendConfig:
    name: str = "native"


BACKENDS = ("native", "sb3")


@dataclass
class Config:
    """The top-level config; groups are filled by conf/<group>/<choice>.yaml."""

    algo: Any = MISSING
    env: EnvConfig = MISSING
    fault: Any = MISSING
    backend: BackendConfig = MISSING
    seed: int = 0
    results_dir: str = "results"
    twin: bool = True                # also train (or reuse) the healthy twin, fault=none
    torch_threads: int = 1
    progress: bool = True
    # set by the dataset sweep: a file of sampled runs that this one job trains in-process
    batch: Optional[str] = None


ALGO_SCHEMAS: dict[str, type] = {"ppo": PPOConfig, "grpo": GRPOConfig}


def register_configs() -> None:
    """Store the schemas so conf/*.yaml can extend them (``/schema/<group>/<name>@_here_``)."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, schema in ALGO_SCHEMAS.items():
        cs.store(group="schema/algo", name=name, node=schema)
    cs.store(group="schema/env", name="env", node=EnvConfig)
    cs.store(group="schema/backend", name="backend", node=BackendConfig)


@dataclass(frozen=True)
class Experiment:
    """A validated experiment: typed group configs plus the instantiated fault."""

    algo: PPOConfig | GRPOConfig
    env: EnvConfig
    backend: BackendConfig
    fault: Any                       # faults.base.Fault
    fault_cfg: dict[str, Any]        # the fault's config as composed (for hashing and meta)
    seed: int
    torch_threads: int
    results_dir: str
    twin: bool
    progress: bool
    sampled: dict[str, Any] | None = None   # the dataset sweep's draw (recorded in meta.json, not identity)

    def key(self) -> dict[str, Any]:
        """What identifies the run: the resolved config minus output paths and display flags."""
        from harness import __version__

        return {
            "harness": __version__,
            "algo": _plain(self.algo),
            "env": _plain(self.env),
            "backend": _plain(self.backend),
            "fault_name": self.fault.name,
            "fault": self.fault_cfg,
            "seed": self.seed,
            "torch_threads": self.torch_threads,
        }


def _plain(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def to_object(node: Any, schema: type, group: str) -> Any:
    if isinstance(node, DictConfig):
        data = OmegaConf.to_container(node, resolve=True)
    else:
        data = dict(node)
    allowed = {f.name for f in fields(schema)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"unknown key {group}.{unknown[0]}; valid keys: {', '.join(sorted(allowed))}")
    try:
        obj = schema(**data)
    except TypeError as exc:  # pragma: no cover - schema and YAML disagree
        raise ConfigError(f"{group}: {exc}") from None
    if hasattr(obj, "validate"):
        obj.validate()  # explicit, so that faults may build out-of-range effective copies
    return obj

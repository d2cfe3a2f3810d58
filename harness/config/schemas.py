"""Structured configs: the typed schema of every Hydra group, with range checks.

Hydra checks types when it composes the config (each YAML in ``harness/conf/`` extends the
schema stored here); ``validate()`` checks ranges when the config is turned into
objects by :func:`load_experiment`. Every problem is a :class:`ConfigError` with a
one-line message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness.config.errors import ConfigError, check_range, unknown_choice, unknown_key


def conf_dir() -> Path:
    """The Hydra config directory (config.yaml and one folder per config group): ``harness/conf/``,
    package data, so an installed package composes the same configs as a checkout."""
    return Path(__file__).resolve().parents[1] / "conf"



def check_warmup(algo) -> None:
    """The supervised warm-up's settings (``sft_*``), which GRPO and PPO-LM share (harness/agents/sft.py)."""
    check_range("algo", "sft_steps", algo.sft_steps, ge=0, le=100_000, kind=int)
    check_range("algo", "sft_lr", algo.sft_lr, gt=0, le=1)
    check_range("algo", "sft_digit_noise", algo.sft_digit_noise, ge=0, le=1)
    check_range("algo", "sft_format_noise", algo.sft_format_noise, ge=0, le=1)
    check_range("algo", "sft_seed", algo.sft_seed, ge=0, le=2**32 - 1, kind=int)

@dataclass
class PPOConfig:
    """Native PPO hyperparameters (names follow CleanRL/SB3); values live in harness/conf/algo/*.yaml."""

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
    clip_range_vf: float | None = None   # value clipping (SB3 clip_range_vf; CleanRL clip_vloss uses clip_coef):
                                     # the new value may move at most this far from the rollout's, in return units
    anneal_clip: bool = False        # the clip range decays linearly to 0 over the run (rl-zoo3's lin_0.2 /
                                     # lin_0.1 schedules, the PPO paper's Atari setting), as anneal_lr does
    # A healthy look-alike control shows a raw fault symptom by construction (one epoch and
    # one minibatch: ratio == 1 is correct there); variant names such a configuration.
    is_control: bool = False
    variant: str = "default"

    #: what a user's config holds: the hyperparameters a detector is shown (RunInfo.configured);
    #: every field is either here or in HIDDEN (tests/detection/test_detector_view.py keeps the two in step)
    VISIBLE: ClassVar[tuple[str, ...]] = (
        "num_envs", "n_steps", "n_epochs", "n_minibatches", "lr", "gamma", "gae_lambda", "clip_range",
        "ent_coef", "vf_coef", "max_grad_norm", "norm_adv", "hidden", "target_kl", "norm_obs", "norm_reward",
        "anneal_lr", "warmup_updates", "grad_accum", "clip_range_vf", "anneal_clip")
    #: fields added after runs were stored: left out of a run's identity (Experiment.key) at these
    #: values, so the runs stored before keep their ids
    ADDED: ClassVar[dict[str, Any]] = {"clip_range_vf": None, "anneal_clip": False}

    # what the shared update core (harness/agents/core.py UpdateHP) reads and PPO has no setting for:
    # constants, not fields (the fields are a run's identity)
    loss_agg: ClassVar[str] = "token_mean"     # per-sample losses: the mean over the minibatch
    log_ratio_clamp: ClassVar[float] = 0.0     # no clamp of log r (CleanRL, SB3)

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
        if self.clip_range_vf is not None:
            check_range("algo", "clip_range_vf", self.clip_range_vf, gt=0)
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

    def code_changes(self) -> dict[str, Any]:
        """Changes to the training code that alter only some PPO runs (part of the run's identity, as
        :meth:`GRPOConfig.code_changes`): none."""
        return {}

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

    def clip_at(self, clip_range: float, update: int, n_updates: int) -> float:
        """The clip range in force at update ``update`` (from 0) of ``n_updates``: ``clip_range`` (the
        configured one, or the fault's) decayed as the learning rate anneals (frac = 1 - update /
        n_updates) when ``anneal_clip``. SB3 evaluates a lin_<x> schedule after the rollout, one update
        later in that count; the last update's clip range is then 0 instead of x / n_updates."""
        if self.anneal_clip:
            return clip_range * (1.0 - update / max(n_updates, 1))
        return clip_range

GRPO_SCALES = ("group", "batch", "none")
GRPO_BASELINES = ("mean", "leave_one_out")
LOSS_AGGS = ("token_mean", "seq_mean")
GRPO_MODELS = ("transformer", "mlp")
SAMPLER_PRECISIONS = ("fp32", "bf16", "fp16")
#: importance-sampling correction of the sampler/trainer mismatch: TRL's vllm_importance_sampling_mode
#: (truncate = TIS, mask = MIS; per token or per sequence), or none
IS_CORRECTIONS = ("none", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
KL_ESTIMATORS = ("k1", "k2", "k3")
#: the learning-rate schedule after the warmup (transformers' schedulers, stepped per update here)
LR_DECAYS = ("constant", "linear", "cosine")


@dataclass
class ModelConfig:
    """The GRPO policy network (harness/conf/model/*.yaml; harness/conf/algo/grpo.yaml copies it into
    the algo config, where detectors see it): a Llama-architecture causal transformer or the v1 MLP."""

    name: str = "transformer"
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 172
    tie_embeddings: bool = False
    dropout: float = 0.0
    hidden: int = 256                # MLP width (model=mlp)


@dataclass
class GRPOConfig:
    """Native GRPO hyperparameters (TRL/verl names in comments); values in harness/conf/algo/*.yaml."""

    name: str = MISSING
    n_prompts: int = MISSING         # prompts per update
    group_size: int = MISSING        # completions per prompt, G (TRL num_generations, verl rollout.n)
    num_iterations: int = MISSING    # passes over each batch (TRL num_iterations, verl ppo_epochs)
    n_minibatches: int = MISSING     # completions are split into this many minibatches
    lr: float = MISSING
    clip_range: float = MISSING      # TRL epsilon, verl clip_ratio
    log_ratio_clamp: float = MISSING  # |log r| is clamped to this before exp (verl: 20; 0 = off, as TRL)
    beta: float = MISSING            # KL penalty to the frozen reference (TRL beta, verl kl_loss_coef)
    warmup_updates: int = MISSING    # linear lr warmup over this many updates (TRL warmup_steps, in updates)
    lr_decay: str = MISSING          # after the warmup: constant | linear | cosine (TRL lr_scheduler_type)
    scale: str = MISSING             # advantage scale: group | batch | none (TRL scale_rewards)
    baseline: str = MISSING          # mean (the group's) | leave_one_out (NeMo-RL use_leave_one_out_baseline)
    loss_agg: str = MISSING          # token_mean | seq_mean (verl loss_agg_mode)
    adv_eps: float = MISSING         # (r - mean) / (std + adv_eps)
    ent_coef: float = MISSING
    max_grad_norm: float = MISSING
    # the policy (harness/conf/model/): transformer (Llama architecture) or mlp
    model: str = MISSING
    n_layers: int = MISSING          # num_hidden_layers
    d_model: int = MISSING           # hidden_size
    n_heads: int = MISSING           # num_attention_heads
    d_ff: int = MISSING              # intermediate_size
    tie_embeddings: bool = MISSING   # tie_word_embeddings
    dropout: float = MISSING         # attention_dropout
    hidden: int = MISSING            # MLP width (model=mlp)
    # generation (the sampler: vLLM beside the trainer)
    max_new_tokens: int = MISSING    # TRL max_completion_length, verl response_length
    stop_at_close: bool = MISSING    # generation also stops at </a>, a second end token (a chat model's end of
                                     # turn in generation_config.eos_token_id, a recipe's stop at </answer>)
    temperature: float = MISSING
    top_p: float = MISSING
    top_k: int = MISSING             # 0 = off
    sampler_precision: str = MISSING  # fp32 | bf16 | fp16 (vLLM dtype)
    sync_every: int = MISSING        # the sampler loads the trainer's weights every k updates
    sampler_lag: int = MISSING       # asynchronous rollouts: the sampler's weights are this many updates old
    use_sampler_logprobs: bool = MISSING  # old log-probs = the sampler's (verl bypass) instead of recomputed
    is_correction: str = MISSING     # TRL vllm_importance_sampling_mode (or none)
    is_clip_max: float = MISSING     # TRL vllm_importance_sampling_clip_max (TIS cap / MIS upper bound)
    is_clip_min: float = MISSING     # TRL vllm_importance_sampling_clip_min (0 = none)
    kl_estimator: str = MISSING      # k3 (TRL, verl low_var_kl) | k2 | k1
    kl_is_weight: bool = MISSING     # multiply the KL term by the ratio (TRL use_bias_correction_kl)
    grad_accum: int = MISSING        # micro-batches per minibatch (gradient accumulation steps)
    # the supervised warm-up that makes the start checkpoint and the frozen reference
    sft_steps: int = MISSING
    sft_lr: float = MISSING
    sft_batch: int = MISSING
    sft_digit_noise: float = MISSING   # share of answer digits replaced in the demonstrations
    sft_format_noise: float = MISSING  # share of demonstrations with a format error
    sft_seed: int = MISSING
    is_control: bool = False         # see PPOConfig
    variant: str = "default"

    VISIBLE: ClassVar[tuple[str, ...]] = (
        "n_prompts", "group_size", "num_iterations", "n_minibatches", "lr", "clip_range", "log_ratio_clamp", "beta",
        "warmup_updates", "lr_decay",
        "scale", "baseline", "loss_agg", "adv_eps", "ent_coef", "max_grad_norm",
        "model", "n_layers", "d_model", "n_heads", "d_ff", "tie_embeddings", "dropout", "hidden",
        "max_new_tokens", "stop_at_close", "temperature", "top_p", "top_k", "sampler_precision", "sync_every", "sampler_lag",
        "use_sampler_logprobs", "is_correction", "is_clip_max", "is_clip_min", "kl_estimator", "kl_is_weight",
        "grad_accum")

    # what the shared update core (harness/agents/core.py UpdateHP) reads under another name, or
    # GRPO has no setting for: a property and constants, not fields (the fields are a run's identity)
    @property
    def n_epochs(self) -> int:
        return self.num_iterations

    norm_adv: ClassVar[bool] = False            # group-relative advantages are not renormalised per minibatch
    target_kl: ClassVar[float | None] = None    # no early stopping (SB3's; TRL and verl have none)

    @property
    def batch_size(self) -> int:
        return self.n_prompts * self.group_size

    def code_changes(self) -> dict[str, Any]:
        """Changes to the training code that alter the runs of this config and only them: part of the
        run's identity (:meth:`harness.config.experiment.Experiment.key`), so a run stored before the
        change is trained again while every other run keeps its id. A warmup starts at learning
        rate 0, as transformers' schedulers do (it started at lr / warmup_updates before)."""
        return {"warmup_from_zero": True} if self.warmup_updates else {}

    def lr_at(self, update: int, n_updates: int) -> float:
        """The scheduled learning rate of update ``update`` (from 0) of ``n_updates``, as transformers'
        schedulers give it per step (``get_linear_schedule_with_warmup`` and its cosine twin): linear
        warmup over ``warmup_updates`` from 0 (the scheduler starts at lr_lambda(0) = 0, so the first
        update runs, and the Trainer logs, learning rate 0), then ``lr_decay`` over the remaining
        updates (constant; linear to 0; cosine to 0)."""
        lr = self.lr
        if update < self.warmup_updates:
            return lr * max(0, update) / self.warmup_updates
        if self.lr_decay == "constant":
            return lr
        progress = (update - self.warmup_updates) / max(1, n_updates - self.warmup_updates)
        if self.lr_decay == "linear":
            return lr * max(0.0, 1.0 - progress)
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    def sft_config(self) -> dict[str, Any]:
        """What the warm-up checkpoint depends on in this config (the model and the SFT settings)."""
        names = ("model", "n_layers", "d_model", "n_heads", "d_ff", "tie_embeddings", "dropout", "hidden",
                 "sft_steps", "sft_lr", "sft_batch", "sft_digit_noise", "sft_format_noise", "sft_seed")
        return {n: getattr(self, n) for n in names}

    def validate(self) -> None:
        for name in ("n_prompts", "num_iterations", "n_minibatches", "hidden", "n_layers", "d_model", "n_heads",
                     "d_ff", "max_new_tokens", "sync_every", "grad_accum", "sft_batch"):
            check_range("algo", name, getattr(self, name), ge=1, kind=int)
        check_range("algo", "group_size", self.group_size, ge=2, kind=int)
        check_range("algo", "lr", self.lr, gt=0, le=10)
        check_range("algo", "clip_range", self.clip_range, gt=0, le=10)
        check_range("algo", "log_ratio_clamp", self.log_ratio_clamp, ge=0, le=88)
        check_range("algo", "beta", self.beta, ge=0, le=100)
        check_range("algo", "warmup_updates", self.warmup_updates, ge=0, kind=int)
        check_range("algo", "adv_eps", self.adv_eps, gt=0, le=1)
        check_range("algo", "ent_coef", self.ent_coef, ge=-1, le=1)
        check_range("algo", "max_grad_norm", self.max_grad_norm, gt=0)
        check_range("algo", "dropout", self.dropout, ge=0, lt=1)
        check_range("algo", "temperature", self.temperature, gt=0, le=10)
        check_range("algo", "top_p", self.top_p, gt=0, le=1)
        check_range("algo", "top_k", self.top_k, ge=0, kind=int)
        check_range("algo", "sampler_lag", self.sampler_lag, ge=0, le=64, kind=int)
        check_range("algo", "is_clip_max", self.is_clip_max, gt=1)
        check_range("algo", "is_clip_min", self.is_clip_min, ge=0, lt=1)
        check_warmup(self)
        for name, choices in (("scale", GRPO_SCALES), ("baseline", GRPO_BASELINES), ("loss_agg", LOSS_AGGS), ("model", GRPO_MODELS),
                              ("sampler_precision", SAMPLER_PRECISIONS), ("is_correction", IS_CORRECTIONS),
                              ("kl_estimator", KL_ESTIMATORS), ("lr_decay", LR_DECAYS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"algo.{name}={getattr(self, name)!r}; valid choices: {', '.join(choices)}")
        if self.baseline == "leave_one_out" and self.scale == "batch":
            raise ConfigError("algo.baseline=leave_one_out normalises by each completion's leave-one-out std "
                              "(algo.scale=group) or not at all (none), not by the batch's std")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"algo.d_model={self.d_model} must split into n_heads={self.n_heads} heads of an "
                              "even size (rotary embeddings rotate pairs)")
        if self.n_minibatches > self.batch_size:
            raise ConfigError(f"algo.n_minibatches={self.n_minibatches} exceeds the "
                              f"{self.batch_size} completions per batch (n_prompts * group_size)")
        if self.n_minibatches * self.grad_accum > self.batch_size:
            raise ConfigError(f"algo.grad_accum={self.grad_accum} micro-batches per minibatch leave fewer than one "
                              f"completion each ({self.batch_size} completions, {self.n_minibatches} minibatches)")


@dataclass
class PPOLMConfig:
    """Native PPO on token tasks with a value model, RLHF-style (harness/agents/ppo_lm.py); TRL
    PPOTrainer names in comments where the harness's differ (the harness's own names are kept where a
    fault replaces a value by name: ``clip_range``, ``n_epochs``, ``lr``, ``gamma``, ``gae_lambda``).
    Values in harness/conf/algo/ppo_lm.yaml."""

    name: str = MISSING
    n_prompts: int = MISSING         # prompts per update
    group_size: int = MISSING        # completions per prompt (1: PPO's norm, as TRL's PPOTrainer)
    n_epochs: int = MISSING          # passes over each batch (TRL num_ppo_epochs)
    n_minibatches: int = MISSING     # completions are split into this many minibatches (TRL num_mini_batches)
    lr: float = MISSING              # TRL learning_rate (policy and, unless vf_lr is set, value model)
    vf_lr: float | None = MISSING    # the value model's learning rate (verl critic.optim.lr); null: lr, one
                                     # optimizer for both models as TRL's; either follows the lr schedule
    warmup_updates: int = MISSING    # linear lr warmup over this many updates (TRL warmup_steps, in updates)
    lr_decay: str = MISSING          # after the warmup: constant | linear | cosine (TRL lr_scheduler_type)
    clip_range: float = MISSING      # the policy's clip range (TRL cliprange)
    clip_range_vf: float = MISSING   # the value's clip range around the rollout's value (TRL cliprange_value)
    vf_coef: float = MISSING         # TRL vf_coef: loss = policy loss + vf_coef * 0.5 * clipped value MSE
    kl_coef: float = MISSING         # the per-token KL penalty in the reward (TRL kl_coef; old TRL init_kl_coef)
    adaptive_kl: bool = MISSING      # Ziegler et al.'s adaptive KL controller (old TRL adap_kl_ctrl)
    kl_target: float = MISSING       # its target KL, summed per completion (old TRL target)
    kl_horizon: float = MISSING      # its horizon, in completions (old TRL horizon)
    gamma: float = MISSING           # discount over completion tokens (TRL gamma)
    gae_lambda: float = MISSING      # TRL lam
    whiten_advantages: bool = MISSING  # whiten the advantages over the batch's real tokens (TRL: always)
    missing_eos_penalty: float | None = MISSING  # subtracted from the score of a completion without EOS (TRL)
    max_grad_norm: float = MISSING   # over both models' gradients together (TRL's PolicyAndValueWrapper)
    # the policy (harness/conf/model/): the transformer; the value model is a copy of its trunk
    model: str = MISSING
    n_layers: int = MISSING
    d_model: int = MISSING
    n_heads: int = MISSING
    d_ff: int = MISSING
    tie_embeddings: bool = MISSING
    dropout: float = MISSING
    hidden: int = MISSING            # MLP width (model=mlp; part of the warm-up's identity)
    # generation
    max_new_tokens: int = MISSING    # TRL response_length
    temperature: float = MISSING     # TRL temperature (sampling and every log-prob)
    # the supervised warm-up: GRPO's (the same settings share its cached checkpoint)
    sft_steps: int = MISSING
    sft_lr: float = MISSING
    sft_batch: int = MISSING
    sft_digit_noise: float = MISSING
    sft_format_noise: float = MISSING
    sft_seed: int = MISSING
    is_control: bool = False         # see PPOConfig
    variant: str = "default"

    VISIBLE: ClassVar[tuple[str, ...]] = (
        "n_prompts", "group_size", "n_epochs", "n_minibatches", "lr", "vf_lr", "warmup_updates", "lr_decay",
        "clip_range", "clip_range_vf", "vf_coef", "kl_coef", "adaptive_kl", "kl_target", "kl_horizon", "gamma",
        "gae_lambda", "whiten_advantages", "missing_eos_penalty", "max_grad_norm",
        "model", "n_layers", "d_model", "n_heads", "d_ff", "tie_embeddings", "dropout", "hidden",
        "max_new_tokens", "temperature")

    # what the shared update core (harness/agents/core.py UpdateHP) reads and TRL's PPOTrainer has no
    # setting for: constants, not fields (the fields are a run's identity)
    ent_coef: ClassVar[float] = 0.0             # no entropy bonus
    norm_adv: ClassVar[bool] = False            # advantages are whitened over the whole batch, not per minibatch
    loss_agg: ClassVar[str] = "token_mean"      # TRL masked_mean over the minibatch's real tokens
    grad_accum: ClassVar[int] = 1
    target_kl: ClassVar[float | None] = None    # no early stopping
    log_ratio_clamp: ClassVar[float] = 0.0      # no clamp of log r (TRL)

    @property
    def batch_size(self) -> int:
        return self.n_prompts * self.group_size

    def code_changes(self) -> dict[str, Any]:
        """Changes to the training code that alter only some runs of this config (see GRPOConfig): none."""
        return {}

    def lr_at(self, update: int, n_updates: int) -> float:
        """The scheduled learning rate of update ``update`` (from 0) of ``n_updates``: GRPO's schedule
        (:meth:`GRPOConfig.lr_at`, transformers' schedulers stepped per update)."""
        return GRPOConfig.lr_at(self, update, n_updates)  # type: ignore[arg-type]

    def sft_config(self) -> dict[str, Any]:
        """What the warm-up checkpoint depends on: the same as GRPO's, so both share it."""
        return GRPOConfig.sft_config(self)  # type: ignore[arg-type]

    def validate(self) -> None:
        for name in ("n_prompts", "group_size", "n_epochs", "n_minibatches", "hidden", "n_layers", "d_model",
                     "n_heads", "d_ff", "max_new_tokens", "sft_batch"):
            check_range("algo", name, getattr(self, name), ge=1, kind=int)
        for name in ("lr", "vf_lr"):
            if getattr(self, name) is not None:
                check_range("algo", name, getattr(self, name), gt=0, le=10)
        check_range("algo", "warmup_updates", self.warmup_updates, ge=0, kind=int)
        check_range("algo", "clip_range", self.clip_range, gt=0, le=10)
        check_range("algo", "clip_range_vf", self.clip_range_vf, gt=0)
        check_range("algo", "vf_coef", self.vf_coef, ge=0, le=100)
        check_range("algo", "kl_coef", self.kl_coef, ge=0, le=100)
        check_range("algo", "kl_target", self.kl_target, gt=0)
        check_range("algo", "kl_horizon", self.kl_horizon, gt=0)
        check_range("algo", "gamma", self.gamma, ge=0, le=1)
        check_range("algo", "gae_lambda", self.gae_lambda, ge=0, le=1)
        if self.missing_eos_penalty is not None:
            check_range("algo", "missing_eos_penalty", self.missing_eos_penalty, ge=0)
        check_range("algo", "max_grad_norm", self.max_grad_norm, gt=0)
        check_range("algo", "dropout", self.dropout, ge=0, lt=1)
        check_range("algo", "temperature", self.temperature, gt=0, le=10)
        check_warmup(self)
        for name, choices in (("model", GRPO_MODELS), ("lr_decay", LR_DECAYS)):
            if getattr(self, name) not in choices:
                raise ConfigError(f"algo.{name}={getattr(self, name)!r}; valid choices: {', '.join(choices)}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ConfigError(f"algo.d_model={self.d_model} must split into n_heads={self.n_heads} heads of an "
                              "even size (rotary embeddings rotate pairs)")
        if self.n_minibatches > self.batch_size:
            raise ConfigError(f"algo.n_minibatches={self.n_minibatches} exceeds the "
                              f"{self.batch_size} completions per batch (n_prompts * group_size)")


#: the engines that step a vector env (benchmarks/env_engines.py measures them)
ENV_ENGINES = ("gymnasium", "envpool")


@dataclass
class EnvConfig:
    """A gymnasium environment and the training budget on it."""

    name: str = MISSING
    id: str = MISSING                # gymnasium id, e.g. CartPole-v1
    total_timesteps: int = MISSING   # env steps (all envs together)
    kwargs: dict[str, Any] = field(default_factory=dict)
    engine: str = "gymnasium"        # gymnasium (its vector envs) | envpool (pip install -e '.[envs]')

    def validate(self) -> None:
        check_range("env", "total_timesteps", self.total_timesteps, ge=1, kind=int)
        if self.engine not in ENV_ENGINES:
            raise ConfigError(f"env.engine={self.engine!r}; valid choices: {', '.join(ENV_ENGINES)}")


@dataclass
class BackendConfig:
    """Who trains: ``name`` (native, sb3, trl) and the trainer of each algorithm it runs
    (``algo name -> {_target_: dotted path of a harness.agents.base.Trainer}``)."""

    name: str = "native"
    trainers: dict[str, Any] = field(default_factory=dict)
    #: monitors attached to the framework's own training loop, as its users attach them (TRL: a
    #: Trainer callback each; ``_target_`` + arguments, e.g. harness.detection.public.live_callback);
    #: what they report is stored with the run. Not part of the run's identity: they only watch.
    callbacks: list[Any] = field(default_factory=list)


@dataclass
class Config:
    """The top-level config; groups are filled by harness/conf/<group>/<choice>.yaml."""

    algo: Any = MISSING
    env: EnvConfig = MISSING
    model: ModelConfig = MISSING     # the GRPO policy (algo=grpo reads it; PPO keeps its MLP)
    fault: Any = MISSING
    backend: BackendConfig = MISSING
    seed: int = 0
    results_dir: str = "results"
    twin: bool = True                # also train (or reuse) the healthy twin, fault=none
    torch_threads: int = 1
    progress: bool = True
    retrain: bool = False            # discard a stored run and train it again (e.g. on another machine's numerics)
    tensorboard: bool = False        # the run command also writes a TensorBoard log of the run and its twin
    seeds: int = 1                   # the run command trains seeds seed .. seed + seeds - 1 (each with its twin)
    # the fault's onset for each of the ``seeds`` seeds (a sweep's mid-run onsets, which differ per seed)
    seed_onsets: list[int] | None = None
    # set by the dataset sweep: a file of sampled runs that this one job trains in-process
    batch: str | None = None


ALGO_SCHEMAS: dict[str, type] = {"ppo": PPOConfig, "grpo": GRPOConfig, "ppo_lm": PPOLMConfig}


def group_choices(group: str) -> list[str]:
    """The choices of config group ``group``: its YAML files in harness/conf/ and what the ConfigStore
    holds under it (e.g. ``fault``: every registered fault class)."""
    names = {p.stem for p in (conf_dir() / group).glob("*.yaml")}
    try:
        names |= {n.removesuffix(".yaml") for n in ConfigStore.instance().list(group)}
    except OSError:       # no such group in the ConfigStore
        pass
    return sorted(names)


#: ``${harness_choices:GROUP}`` in a YAML (the commands' --help) is that group's choices, comma-separated
CHOICES_RESOLVER = "harness_choices"


def register_configs() -> None:
    """Store the schemas so harness/conf/*.yaml can extend them (``/schema/<group>/<name>@_here_``), and
    the ``${harness_choices:GROUP}`` resolver the commands' --help texts list a group's choices with."""
    if not OmegaConf.has_resolver(CHOICES_RESOLVER):
        OmegaConf.register_new_resolver(CHOICES_RESOLVER, lambda group: ", ".join(group_choices(str(group))))
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, schema in ALGO_SCHEMAS.items():
        cs.store(group="schema/algo", name=name, node=schema)
    cs.store(group="schema/env", name="env", node=EnvConfig)
    cs.store(group="schema/backend", name="backend", node=BackendConfig)
    cs.store(group="schema/model", name="model", node=ModelConfig)


def backend_names() -> list[str]:
    """Every backend harness/conf/backend/ holds, ``native`` first."""
    names = sorted(p.stem for p in (conf_dir() / "backend").glob("*.yaml"))
    return sorted(names, key=lambda n: n != "native")


def backend_config(name: str) -> BackendConfig:
    """A backend's config as ``backend=<name>`` composes it (harness/conf/backend/<name>.yaml)."""
    path = conf_dir() / "backend" / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(unknown_choice("backend", name, sorted(backend_names())))
    data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    return to_object({k: v for k, v in data.items() if k != "defaults"}, BackendConfig, "backend")


def to_object(node: Any, schema: type, group: str) -> Any:
    if isinstance(node, DictConfig):
        data = OmegaConf.to_container(node, resolve=True)
    else:
        data = dict(node)
    allowed = {f.name for f in fields(schema)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(unknown_key(f"{group}.{unknown[0]}", allowed))
    try:
        obj = schema(**data)
    except TypeError as exc:  # pragma: no cover - schema and YAML disagree
        raise ConfigError(f"{group}: {exc}") from None
    if hasattr(obj, "validate"):
        obj.validate()  # explicit, so that faults may build out-of-range effective copies
    return obj

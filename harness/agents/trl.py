"""backend=trl: Hugging Face TRL's ``GRPOTrainer``, unmodified, on the same token task, tokenizer
and start checkpoint as the native transformer GRPO, with faults and instrumentation added only
through TRL's own extension points.

The model is the native warm-up checkpoint (harness/agents/sft.py) exported once as a
``LlamaForCausalLM`` directory with a word-level tokenizer (harness/agents/hf.py; built offline,
``HF_HUB_OFFLINE=1``). The dataset holds the task's prompts as text (``"<s> 3 1 4"``) with their
answers; the reward functions ``format`` and ``correct`` score TRL's ``completion_ids`` with the
task's own verifier, summed with the task's ``reward_weights``. ``GRPOConfig`` gets the native
hyperparameters under TRL's names (:func:`harness.agents.hf.trl_grpo_args`), with every CPU-unsafe
default set explicitly. One harness update is one TRL generation batch: ``n_prompts x group_size``
completions, ``n_minibatches`` optimizer steps per pass, ``num_iterations`` passes.

How each kind of fault reaches TRL (a fault that acts anywhere else is refused with one line):

- misconfigured values go into ``GRPOConfig`` itself (``learning_rate``, ``epsilon``,
  ``max_completion_length``, ``beta``...); overridden values and code bugs in a value are set on
  the trainer after ``__init__`` (``self.beta``, ``self.num_iterations``, ``self.epsilon_low`` /
  ``epsilon_high``, the optimizer's learning rate), as a subclass or a patch does; a fault with a
  mid-run onset switches the value at its onset update;
- reward bugs live in the reward functions (a reward wrapper of the fault is applied to each
  function's output; a fault's ``reward_scores`` hook to the functions' values);
- a sampling temperature the log-probs do not use is ``GRPOConfig(temperature=1)`` with
  ``generation_kwargs={"temperature": T}`` (generation at T, TRL's fused log-prob head at 1);
- code bugs subclass documented methods: ``_generate_and_score_completions`` (old log-probs
  dropped, so TRL falls back to the detached current ones and the ratio is exactly 1; old
  log-probs taken from the reference; the completion mask changed, with the log-probs it feeds
  recomputed; advantages recomputed from the rewards by the fault), ``_generate_single_turn``
  (generation with weights the trainer no longer has: a skipped sampler sync), ``_compute_loss``
  (a micro-batch whose gradient is dropped), and ``trainer.ref_model = trainer.model``.

Canonical metrics: from TRL's own computation where its definition is the canonical one (its
advantages, rewards per function, the pre-clip gradient norm ``_clip_grad_norm`` returns);
measured by instrumentation where TRL does not log it (ratio statistics, raw advantages,
sampler/trainer log-prob gap, optimizer steps, parameter change) and cross-checked against
what TRL logs (``entropy``, ``kl``, ``clip_ratio/low_mean`` and ``high_mean``): if they ever
disagree, TRL changed under us and the run is not trusted. TRL's own log (``trainer_state.json``,
``log_history`` with ``logging_steps=1``) is stored beside the run, a real-framework log the
diagnosis can be validated on.

Needs the ``[trl]`` extra; without it the run ends with one line saying so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.wrappers.vector import TransformReward
from torch.nn.utils import parameters_to_vector

from harness.agents import sft
from harness.agents.base import FrameworkTrainer
from harness.agents.core import MinibatchStats, aggregate, masked_mean, ratio_stats
from harness.agents.grpo_math import (
    group_advantages,
    group_metrics,
    hooked_group_advantages,
    kl_terms,
    sampler_mismatch,
    updates_planned,
)
from harness.agents.hf import export_hf, trl_grpo_args
from harness.agents.sampler import filter_logits
from harness.config import ConfigError, EnvConfig, Experiment
from harness.hooks import HEALTHY, Hooks, overrides
from harness.store import RunStore

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EXTRA = "backend=trl needs the [trl] extra: pip install -e '.[trl]'"
TRL_ADV_EPS = 1e-4          # TRL: (r - mean) / (std + 1e-4)

#: the hooks TRL lets a fault reach without copying its code, and where
EXPRESSIBLE = {
    "wrap_env": "the reward functions (a reward wrapper applied to each function's output)",
    "reward_scores": "the reward functions",
    "hyperparams": "GRPOConfig values, or trainer attributes set after __init__",
    "logprob_temperature": "GRPOConfig(temperature) for the log-probs, generation_kwargs for sampling",
    "sync_sampler": "_generate_single_turn (generation with weights the trainer no longer has)",
    "old_logprob": "_generate_and_score_completions (old_per_token_logps dropped)",
    "behaviour_logprob": "_generate_and_score_completions (old_per_token_logps replaced)",
    "ref_logprob": "trainer.ref_model = trainer.model",
    "completion_mask": "_generate_and_score_completions (completion_mask changed)",
    "group_advantages": "_generate_and_score_completions (advantages recomputed)",
    "group_layout": "_generate_and_score_completions (advantages recomputed)",
    "microbatch_backward": "_compute_loss (a micro-batch's loss contributes no gradient)",
}
#: the hooks it cannot reach, and why
NOT_EXPRESSIBLE = {
    "logit_shift": "TRL scores completion tokens inside its fused LM head (add_fused_lm_head)",
    "dropout_active": ("TRL's disable_dropout only zeroes nn.Dropout modules; LlamaForCausalLM's attention dropout "
                       "is a float inside the attention, active in every training-mode pass, so the healthy run "
                       "would have the same dropout"),
    "sampler_logits": "TRL generates with the policy itself (no separate sampler precision without vLLM)",
    "loss": "TRL builds the loss inside GRPOTrainer._compute_loss",
    "surrogate": "TRL computes the clipped surrogate inside GRPOTrainer._compute_loss",
    "optimizer_step": "the Hugging Face Trainer steps the optimizer inside its training loop",
    "ratio_metrics": "TRL computes and logs its clip ratios inside GRPOTrainer._compute_loss",
    "zero_grad": "the Hugging Face Trainer clears gradients inside its training loop",
    "micro_share": "the Hugging Face Trainer weights accumulated micro-batches itself (num_items_in_batch)",
    "trainer_sampling_filter": "GRPOTrainer scores completions over the full vocabulary inside its own forward pass",
    "normalization_restarts": "GRPO on token tasks has no observation normalisation",
    "env_seeds": "GRPOTrainer samples prompts from a dataset, not from a vector env",
    "reference_weights": ("GRPOTrainer builds its reference from the model it is given (a base model only through a "
                          "PEFT adapter, which the harness's models have none of)"),
}
#: native settings TRL's GRPOTrainer (with transformers generation) has no counterpart for
NATIVE_ONLY = {
    "sampler_precision": ("fp32", "generation runs the policy itself, in its own dtype (no vLLM sampler)"),
    "sync_every": (1, "generation runs the policy itself, so there is no weight sync to schedule"),
    "sampler_lag": (0, "generation runs the policy itself (no asynchronous rollouts)"),
    "use_sampler_logprobs": (False, "without vLLM there are no sampler log-probs to use"),
    "is_correction": ("none", "the importance-sampling correction needs vLLM's sampling log-probs"),
    "kl_estimator": ("k3", "TRL's KL penalty is k3"),
    "baseline": ("mean", "GRPOTrainer's baseline is the group mean (no leave-one-out baseline, as NeMo-RL's)"),
    "model": ("transformer", "TRL trains a Hugging Face causal LM"),
}
#: hyperparameters the trainer reads at run time (a fault may change them at any update)
RUNTIME = ("lr", "clip_range", "beta", "num_iterations", "max_new_tokens", "temperature", "top_p", "top_k",
           "adv_eps", "log_ratio_clamp", "kl_is_weight")


def _require() -> None:
    try:
        import transformers
        import trl  # noqa: F401
    except ImportError:
        raise ConfigError(EXTRA) from None
    transformers.utils.logging.set_verbosity_error()      # no per-load progress bars in a sweep's log
    transformers.utils.logging.disable_progress_bar()


# ---- the model, the tokenizer and the data, as a TRL user has them --------------------------------
def hf_checkpoint(exp: Experiment) -> Path:
    """The warm-up checkpoint as a Hugging Face model directory (exported once, beside it)."""
    sft.load_checkpoint(exp)                    # trains and caches the warm-up if needed
    path = sft.checkpoint_dir(exp)
    out = path / "hf"
    with RunStore(exp.results_dir).lock(f"{path.name}-hf"):
        if not (out / "config.json").exists() or not (out / "tokenizer.json").exists():
            tmp = Path(tempfile.mkdtemp(dir=path, prefix="hf-"))
            export_hf(path, tmp)
            if out.exists():
                shutil.rmtree(out)
            tmp.rename(out)
    return out


def dataset_rows(exp: Experiment, n: int) -> list[dict[str, Any]]:
    """``n`` task prompts as text with their answers (drawn from the run's seed)."""
    task = sft.task_env(exp)
    return task.prompt_texts(n, np.random.default_rng(exp.seed))


def grpo_args(exp: Experiment, configured: Any, hooks0: Hooks, out_dir: str, max_steps: int,
              reward_weights: list[float]) -> Any:
    """The GRPOConfig a TRL user writes for this run: the configured values (a misconfigured fault's
    bad one included), TRL's CPU-unsafe defaults set explicitly."""
    from trl import GRPOConfig

    args = trl_grpo_args(configured)
    if configured.grad_accum > 1:
        args["per_device_train_batch_size"] = configured.batch_size // (configured.n_minibatches * configured.grad_accum)
        args["gradient_accumulation_steps"] = configured.grad_accum
        args["steps_per_generation"] = configured.n_minibatches * configured.grad_accum
    args.update(top_k=configured.top_k, entropy_coef=configured.ent_coef)
    t_train = hooks0.logprob_temperature(configured.temperature, "trainer")
    t_sample = hooks0.logprob_temperature(configured.temperature, "sampler")
    if t_train != t_sample:      # the user's generation_kwargs override the sampling temperature only
        args.update(temperature=t_train, generation_kwargs={"temperature": t_sample})
    args.pop("disable_dropout", None)
    return GRPOConfig(output_dir=out_dir, seed=exp.seed, max_steps=max_steps, logging_steps=1,
                      save_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
                      disable_dropout=True, reward_weights=reward_weights, **args)


# ---- what one update measures ----------------------------------------------------------------------
@dataclasses.dataclass
class Recorder:
    """Per-update state shared by the trainer subclass, the reward functions and the loop."""
    exp: Experiment
    weights: dict[str, float]
    hooks: Hooks = HEALTHY
    hp: Any = None
    update: int = -1
    env_step: int = 0
    rows: Any = None                   # the queue the finished update rows go to
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    returned: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    row: dict[str, Any] = dataclasses.field(default_factory=dict)
    stats: MinibatchStats = dataclasses.field(default_factory=MinibatchStats)
    grad_norms: list = dataclasses.field(default_factory=list)
    steps: int = 0
    micro: int = 0
    nonfinite: bool = False
    before: Any = None
    captured: Any = None
    sampler_state: Any = None          # the weights generation uses when a sync was skipped
    synced_state: Any = None           # the weights of the last sync (the start checkpoint at first)
    frozen_ref: Any = None             # TRL's reference model (None when beta = 0)


def _reward_fn(name: str, rec: Recorder, task: Any, reward_transform: Any) -> Any:
    """TRL reward function ``name``: the task's verifier over TRL's completion_ids, through the
    fault's reward hooks; records what it saw for the update's metrics."""

    def reward(prompts: list, completions: list, completion_ids: list, answer: list, **kwargs: Any) -> list[float]:
        raw = task.score_completion_ids(completion_ids, answer, stop_at_close=rec.exp.algo.stop_at_close)
        scores = rec.hooks.reward_scores({k: np.asarray(v, dtype=np.float32) for k, v in raw.items()})
        values = np.asarray(scores[name], dtype=np.float32)
        if reward_transform is not None and rec.hooks is not HEALTHY:
            values = np.asarray(reward_transform(values), dtype=np.float32)
        rec.returned[name] = values
        return [float(v) for v in values]

    reward.__name__ = name
    return reward


def _reward_transform(fault: Hooks, task: Any) -> Any:
    """The per-reward function a fault's env wrapper applies (a gymnasium TransformReward), or None."""
    if not overrides(fault, "wrap_env"):
        return None
    wrapped = fault.wrap_env(task)
    if not isinstance(wrapped, TransformReward):
        raise ConfigError(f"fault {fault.name} cannot be expressed on backend=trl: its env wrapper is not a reward "
                          "transform a reward function can apply")
    return wrapped.func                  # applied only while the fault is on (it reads fault.active)


@contextlib.contextmanager
def _weights(model: Any, state: dict[str, torch.Tensor] | None) -> Iterator[None]:
    """``model`` holds ``state`` inside the block (the weights a skipped sync left the sampler with),
    its own weights again after it; ``state=None`` leaves it as it is."""
    if state is None:
        yield
        return
    live = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    try:
        yield
    finally:
        model.load_state_dict(live)


def _trainer_class(rec: Recorder) -> type:
    """TRL's GRPOTrainer, subclassed to record into ``rec`` (TRL is imported only here: the extra)."""
    from trl import GRPOTrainer

    class InstrumentedGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer with the fault's code changes and the harness's instrumentation, each in a
        documented method, around the parent's own code."""

        def _generate_single_turn(self, prompt_ids, *args: Any, **kwargs: Any):
            with _weights(self.model, rec.sampler_state):       # the weights the sync never replaced
                return super()._generate_single_turn(prompt_ids, *args, **kwargs)

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            begin_update(self, rec)
            out = super()._generate_and_score_completions(inputs)
            return rollout(self, rec, out)

        def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any):
            out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
            if torch.is_grad_enabled():
                rec.captured = out          # the update pass: log-probs with gradient, entropies
            return out

        def _compute_loss(self, model: Any, inputs: Any) -> torch.Tensor:
            loss = super()._compute_loss(model, inputs)
            minibatch(self, rec, inputs, loss)
            n_micro = self.current_gradient_accumulation_steps
            index = rec.micro % n_micro
            rec.micro += 1
            if not rec.hooks.microbatch_backward(index, n_micro):
                loss = loss * 0.0           # computed, logged, but its gradient never reaches the step
            return loss

        def _clip_grad_norm(self, model: Any) -> Any:
            norm = super()._clip_grad_norm(model)
            value = float(norm) if norm is not None else math.nan
            rec.grad_norms.append(value)
            rec.nonfinite |= not math.isfinite(value)
            if rec.stats.rows:
                rec.stats.rows[-1]["grad_norm"] = value
            return norm

    return InstrumentedGRPOTrainer


def apply_hyperparams(trainer: Any, hp: Any, hooks: Hooks) -> None:
    """Put this update's effective values where the trainer reads them."""
    from trl.trainer.utils import add_fused_lm_head

    # the base rate of TRL's own schedule (warmup, decay: lr_scheduler_type), at the step it has reached
    scale = 1.0
    if trainer.lr_scheduler is not None:
        trainer.lr_scheduler.base_lrs = [hp.lr for _ in trainer.lr_scheduler.base_lrs]
        lambdas = getattr(trainer.lr_scheduler, "lr_lambdas", None)
        if lambdas:
            scale = float(lambdas[0](trainer.lr_scheduler.last_epoch))
    for group in trainer.optimizer.param_groups:
        group["lr"] = hp.lr * scale
    trainer.epsilon_low = trainer.epsilon_high = hp.clip_range
    trainer.beta = hp.beta
    trainer.args.use_bias_correction_kl = hp.kl_is_weight     # read by _compute_loss at every step
    trainer.num_iterations = hp.num_iterations
    trainer.max_completion_length = hp.max_new_tokens
    t_train = hooks.logprob_temperature(hp.temperature, "trainer")
    t_sample = hooks.logprob_temperature(hp.temperature, "sampler")
    if t_train != trainer.temperature:    # TRL's fused head divides by the temperature it was built with
        add_fused_lm_head(trainer.model, temperature=t_train, outputs=("log_probs", "entropy"))
        if trainer.ref_model is not None and trainer.ref_model is not trainer.model:
            add_fused_lm_head(trainer.ref_model, temperature=t_train)
        trainer.temperature = t_train
    gen = {"max_new_tokens": hp.max_new_tokens, "temperature": t_sample, "top_p": hp.top_p, "top_k": hp.top_k}
    for key, value in gen.items():
        setattr(trainer.generation_config, key, value)
        trainer.generation_kwargs[key] = value


def begin_update(trainer: Any, rec: Recorder) -> None:
    """A new generation batch starts a new update: close the last one, switch the fault on at its
    onset, set this update's values, and decide which weights generate."""
    finish_update(trainer, rec)
    rec.update += 1
    fault = rec.exp.fault
    rec.hooks, rec.hp = fault.begin_update(rec.update, rec.exp.algo)
    apply_hyperparams(trainer, rec.hp, rec.hooks)
    if overrides(fault, "ref_logprob"):
        frozen = rec.hooks.ref_logprob(torch.zeros(1), torch.ones(1), phase="rollout")
        trainer.ref_model = trainer.model if bool(frozen == 1) else rec.frozen_ref
    # the weights generation uses: the trainer's own after a sync, else those of the last sync
    if rec.hooks.sync_sampler(rec.update, due=True):
        rec.sampler_state = None
        if overrides(fault, "sync_sampler"):
            rec.synced_state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    else:
        rec.sampler_state = rec.synced_state
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    rec.before = parameters_to_vector(params).detach().clone()
    rec.stats, rec.grad_norms, rec.steps, rec.micro, rec.returned = MinibatchStats(), [], 0, 0, {}


def _token_logprobs(model: Any, ids: torch.Tensor, attention: torch.Tensor, completion: torch.Tensor,
                    temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Per-token log-probs of ``completion`` under ``model`` (a plain forward, logits / temperature,
    top-k / top-p filtered as generation samples)."""
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -completion.shape[1] - 1:-1].float()
    logp_all = filter_logits(logits / temperature, top_k, top_p).log_softmax(-1)
    return logp_all.gather(-1, completion.unsqueeze(-1)).squeeze(-1)


def rollout(trainer: Any, rec: Recorder, out: dict[str, Any]) -> dict[str, Any]:
    """The fault's code changes to the generation batch, then the rollout metrics."""
    hooks, hp = rec.hooks, rec.hp
    fault = rec.exp.fault
    prompts, prompt_mask = out["prompt_ids"], out["prompt_mask"]
    tokens, cmask = out["completion_ids"], out["completion_mask"]
    eos, pad = trainer.eos_token_ids[0], trainer._tokenizer.pad_token_id
    generated = cmask.bool()
    lengths = generated.sum(1)
    ended = torch.isin(tokens, torch.tensor(trainer.eos_token_ids)).any(1) & generated.any(1)

    def logps(model: Any, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            got, _, _ = trainer._get_per_token_logps_and_entropies(
                model, torch.cat([prompts, tokens], 1), torch.cat([prompt_mask, mask], 1), tokens.shape[1])
        return got

    # the completion mask a fault changes (attention and loss), with the log-probs it feeds recomputed
    mask = hooks.completion_mask(generated, tokens, eos, pad)
    if not torch.equal(mask, generated):
        out["completion_mask"] = mask.long()
        out["num_items_in_batch"] = mask.sum()
        if "old_per_token_logps" in out:
            out["old_per_token_logps"] = logps(trainer.model, mask.long())
        if "ref_per_token_logps" in out:
            ref = trainer.ref_model if trainer.ref_model is not None else trainer.model
            out["ref_per_token_logps"] = logps(ref, mask.long())
    real = mask

    # the trainer's log-probs at the rollout weights, the reference's, and the sampler's
    trainer_logp = out.get("old_per_token_logps")
    if trainer_logp is None:
        trainer_logp = logps(trainer.model, mask.long())
    ref_logp = out.get("ref_per_token_logps")
    ids = torch.cat([prompts, tokens], 1)
    attention = torch.cat([prompt_mask, generated.long()], 1)
    t_sample = trainer.generation_config.temperature
    with torch.no_grad():
        with _weights(trainer.model, rec.sampler_state):
            sampler_logp = _token_logprobs(trainer.model, ids, attention, tokens, t_sample, hp.top_k, hp.top_p)
        # the trainer's view for the gap: the same forward at the trainer's temperature, unfiltered
        trainer_view = _token_logprobs(trainer.model, ids, attention, tokens, trainer.temperature)
    log_r = (trainer_view - sampler_logp)[generated]

    # the old log-probs a fault replaces or drops (TRL falls back to the detached current ones)
    if overrides(fault, "old_logprob") and hooks is not HEALTHY:
        out.pop("old_per_token_logps", None)
    if overrides(fault, "behaviour_logprob") and hooks is not HEALTHY:
        old = out.get("old_per_token_logps", trainer_logp)
        out["old_per_token_logps"] = hooks.behaviour_logprob(
            old, {"sampler": sampler_logp, "trainer": trainer_logp,
                  "reference": ref_logp if ref_logp is not None else trainer_logp})

    # rewards (what the reward functions returned, weighted as TRL sums them) and advantages
    names = list(rec.weights)
    returned = {n: torch.from_numpy(rec.returned[n]) for n in names}
    r = sum(rec.weights[n] * returned[n] for n in names)
    G = hp.group_size
    healthy_adv = group_advantages(r, G, hp.scale, TRL_ADV_EPS)
    if not torch.allclose(healthy_adv, out["advantages"], atol=1e-4, rtol=1e-4):
        raise RuntimeError("the advantages recomputed from the rewards disagree with TRL's: TRL changed under us")
    if (overrides(fault, "group_advantages") or overrides(fault, "group_layout")) and hooks is not HEALTHY:
        out["advantages"] = hooked_group_advantages(r, hp, hooks)
    advantages = out["advantages"]
    rec.env_step += int(lengths.sum())
    terminated = lengths[ended].float()
    rec.row = {
        "update": rec.update, "env_step": rec.env_step, "fault_active": rec.exp.fault.active,
        **group_metrics(r, advantages, G),
        "length_mean": float(lengths.float().mean()),
        "terminated_length_mean": float(terminated.mean()) if len(terminated) else math.nan,
        "response_clip_ratio": float((~ended).float().mean()),
        "logp_mean": float((trainer_logp * real).sum(1).mean()),
        "logp_ref_mean": float((ref_logp * real).sum(1).mean()) if ref_logp is not None else math.nan,
        **sampler_mismatch(log_r),
        **{f"reward/{n}": float(returned[n].mean()) for n in names},
    }
    return out


def minibatch(trainer: Any, rec: Recorder, inputs: dict[str, Any], loss: torch.Tensor) -> None:
    """One micro-batch's row, from the log-probs the loss used, cross-checked with what TRL logged."""
    logp, entropies, _ = rec.captured
    hp = rec.hp
    with torch.no_grad():
        logp = logp.detach()
        mask = inputs["completion_mask"].bool()
        old = inputs.get("old_per_token_logps")
        old = logp if old is None else old
        log_ratio = logp - old
        ratio = log_ratio.exp()
        adv = inputs["advantages"]
        adv = adv.unsqueeze(1) if adv.dim() == 1 else adv
        adv = adv.expand_as(ratio)
        eps = trainer.epsilon_low
        pg1, pg2 = -adv * ratio, -adv * ratio.clamp(1 - eps, 1 + eps)
        policy_loss = float(aggregate(torch.max(pg1, pg2), mask, hp.loss_agg))
        entropy = float(masked_mean(entropies.detach(), mask))
        stats = ratio_stats(ratio, log_ratio, pg1, pg2, eps, adv, mask)
        kl = kl_logged = math.nan
        if trainer.beta != 0.0:
            d = inputs["ref_per_token_logps"] - logp
            k3 = kl_terms(d, "k3")
            kl = float(masked_mean(k3, mask))
            # TRL logs the KL term as its loss uses it: times the ratio under use_bias_correction_kl
            kl_logged = float(masked_mean(k3 * ratio, mask)) if trainer.args.use_bias_correction_kl else kl
        logged = trainer._metrics["train"]
        TRAINER.crosscheck({"entropy": entropy, "clip_low_frac": stats["clip_low_frac"],
                            "clip_high_frac": stats["clip_high_frac"], "kl_ref": kl_logged},
                           {"entropy": logged["entropy"][-1], "clip_low_frac": logged["clip_ratio/low_mean"][-1],
                            "clip_high_frac": logged["clip_ratio/high_mean"][-1],
                            "kl_ref": logged["kl"][-1] if trainer.beta != 0.0 else math.nan})
        value = float(loss) * trainer.current_gradient_accumulation_steps
        rec.nonfinite |= not math.isfinite(value)
        per_pass = max(1, trainer.args.steps_per_generation)
        i = len(rec.stats.rows)
        rec.stats.add({"epoch": i // per_pass, "minibatch": i % per_pass, "n_samples": int(mask.shape[0]),
                       "n_tokens": int(mask.sum()), "policy_loss": policy_loss, "entropy": entropy, "loss": value,
                       **stats, "kl_ref": kl, "grad_norm": math.nan, "lr": hp.lr, "clip_range": eps,
                       "stepped": 0, "nonfinite": int(not math.isfinite(value))})


def finish_update(trainer: Any, rec: Recorder) -> None:
    """The finished update's row (rollout + update metrics) onto the queue."""
    if rec.update < 0 or not rec.row:
        return
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    after = parameters_to_vector(params).detach()
    rec.nonfinite |= not bool(torch.isfinite(after).all())
    metrics = rec.stats.result()
    metrics.update(grad_norm=float(np.mean(rec.grad_norms)) if rec.grad_norms else math.nan,
                   grad_norm_max=max(rec.grad_norms, default=math.nan), optimizer_steps=rec.steps,
                   lr=rec.hp.lr, clip_range=rec.hp.clip_range,
                   param_delta=float((after - rec.before).norm()), nonfinite=int(rec.nonfinite))
    rec.rows.put({**rec.row, **metrics, "steps": rec.stats.rows})
    rec.row = {}


def train(exp: Experiment) -> Iterator[dict]:
    """TRL's GRPOTrainer on ``exp``, one row of canonical metrics per update (the native GRPO row).

    Set-up: the warm-up checkpoint as a Hugging Face model with its tokenizer, the task's prompts as
    a dataset, one reward function per task reward (through the fault's reward hooks), the
    ``GRPOConfig`` a TRL user writes (:func:`grpo_args`; ``max_steps`` covers every update's
    optimizer steps) and the instrumented trainer subclass (:func:`_trainer_class`). TRL's own
    training loop runs in a worker thread: each generation batch begins an update
    (:func:`begin_update`), :func:`rollout` and :func:`minibatch` measure it, and
    :func:`finish_update` puts its row on a queue this generator yields from. The last row also
    carries TRL's ``trainer_state.json`` (``files``); a training error is raised here."""
    _require()
    from datasets import Dataset
    from hydra.utils import instantiate
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    cfg, fault = exp.algo, exp.fault
    TRAINER.check_expressible(fault, cfg)
    torch.manual_seed(exp.seed)
    task = sft.task_env(exp)
    hf_dir = hf_checkpoint(exp)
    n_updates = updates_planned(exp)
    configured = fault.user_config(cfg)
    hooks0, _ = fault.begin_update(0, cfg)
    fault.active = False
    passes = max(configured.num_iterations, fault.hyperparams(cfg).num_iterations)
    max_steps = n_updates * configured.n_minibatches * passes

    rec = Recorder(exp=exp, weights=dict(task.reward_weights), rows=queue.Queue())
    transform = _reward_transform(fault, task)
    reward_funcs = [_reward_fn(name, rec, task, transform) for name in rec.weights]
    data = Dataset.from_list(dataset_rows(exp, n_updates * configured.n_prompts))
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(hf_dir))
    model = LlamaForCausalLM.from_pretrained(str(hf_dir))
    if cfg.stop_at_close:      # a second end token in the generation config; TRL stops and masks at both
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, task.vocab.close]
    out_dir = tempfile.mkdtemp(prefix="trl-run-")

    class Control(TrainerCallback):
        def on_optimizer_step(self, args, state, control, **kwargs):
            rec.steps += 1
            if rec.stats.rows:
                rec.stats.rows[-1]["stepped"] = 1

        def on_step_end(self, args, state, control, **kwargs):
            generate_every = trainer.args.steps_per_generation * trainer.num_iterations
            done = rec.update + 1 >= n_updates and trainer._step % generate_every == 0
            if done or rec.nonfinite or rec.stop.is_set():
                control.should_training_stop = True

    args = grpo_args(exp, configured, hooks0, out_dir, max_steps, list(rec.weights.values()))
    watching = [instantiate(spec) for spec in exp.backend.callbacks]     # the user's monitors, their own callbacks
    trainer = _trainer_class(rec)(model=model, processing_class=tokenizer, args=args,
                                  reward_funcs=reward_funcs, train_dataset=data, callbacks=[Control(), *watching])
    trainer.remove_callback(PrinterCallback)
    rec.frozen_ref = trainer.ref_model
    if overrides(fault, "sync_sampler"):      # the sampler starts with the start checkpoint
        rec.synced_state = {k: v.detach().clone() for k, v in model.state_dict().items()}

    error: list[BaseException] = []

    def run() -> None:
        try:
            trainer.train()
            finish_update(trainer, rec)
        except BaseException as exc:  # handed to the consumer
            error.append(exc)
        finally:
            rec.rows.put(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        while True:
            row = rec.rows.get()
            if row is None:
                break
            last = row["update"] == n_updates - 1 or row["nonfinite"]
            if last:
                worker.join()
                state = Path(out_dir) / "trainer_state.json"
                trainer.state.save_to_json(str(state))      # what a TRL checkpoint holds
                row["files"] = {"trl/trainer_state.json": state.read_bytes()}
                for callback in watching:        # what each monitor reported (its harness_files, if any)
                    row["files"].update(getattr(callback, "harness_files", dict)())
            yield row
            if last:
                break
        if error:
            raise error[0]
    finally:
        rec.stop.set()
        worker.join()
        shutil.rmtree(out_dir, ignore_errors=True)


#: how each fault's TRL form differs from its native form, beyond the shared mechanism (what explains a
#: native-vs-TRL disagreement in the catalogue); a fault not listed acts the same way on both
_DIFFERENCES = {
    "zero_reward": ("TRL's reward functions themselves return 0, so TRL's per-function reward columns are 0 too; "
                    "natively a reward wrapper zeroes the learner's reward while reward/<fn> keep the verifier's "
                    "scores"),
    "ppo_epochs_ignored": ("TRL's sampler still repeats each prompt batch num_iterations=2 times (it is built from "
                           "the config), so with self.num_iterations=1 TRL generates fresh completions for the same "
                           "prompts twice; natively the second pass is simply skipped (half the optimizer steps "
                           "per update on both)"),
    "grad_accum_microbatch_dropped": ("TRL divides each micro-batch's token-mean loss by the accumulation steps "
                                      "(bnpo); natively each micro-batch is weighted by its share of the "
                                      "minibatch's tokens: the dropped share of the gradient differs slightly"),
    "untempered_logprobs": ("TRL samples through generation_kwargs' temperature and scores with its fused "
                            "log-prob head at 1.0; natively the sampler records its own log-probs at T, so the "
                            "sampler/trainer gap is measured the same way but TRL itself never logs it "
                            "(sampling/* metrics exist only with vLLM)"),
    "stale_sampler_weights": ("TRL without vLLM generates with the policy itself: the stale weights are swapped "
                              "in for generation only (_generate_single_turn), as a skipped vLLM sync leaves them"),
    "truncation_kills_reward": ("TRL's max_completion_length cuts completions exactly as the native sampler does; "
                                "TRL's logged completions/clipped_ratio is the canonical response_clip_ratio"),
}
#: what differs between the backends for every run, healthy ones included
_COMMON_DIFFERENCES = ("TRL does not clamp log-ratios (native: |log r| <= 20, verl's clamp); a warmup or decay "
                       "schedule steps per optimizer step in TRL, per update natively; TRL computes the old "
                      "log-probs with its fused LM head and the metrics' sampler log-probs with a plain forward "
                      "(float differences ~1e-6); TRL draws prompts with its own RepeatSampler, so the prompts "
                      "of a seed differ from the native run's.")


class TRLTrainer(FrameworkTrainer):
    """Hugging Face TRL's GRPOTrainer (:func:`train`) on the token task, faults through
    :data:`EXPRESSIBLE`."""

    backend, algo, framework = "trl", "grpo", "TRL"
    expressible = EXPRESSIBLE
    not_expressible = NOT_EXPRESSIBLE
    crosscheck_rtol = 1e-3
    takes_callbacks = True
    cost = 16.0
    trains_the_model = False        # TRL-backend logs are a test set (benchmarks/realworld/trl_backend_logs.py)
    differences = _DIFFERENCES
    common_differences = _COMMON_DIFFERENCES

    def updates_planned(self, exp: Experiment) -> int:
        return updates_planned(exp)

    def train(self, exp: Experiment) -> Iterator[dict]:
        return train(exp)

    def check_setup(self, algo: Any, env: EnvConfig) -> None:
        if algo.name != "grpo" or env.id != "harness/ToySeq-v0":
            raise ConfigError(f"backend=trl runs TRL's GRPOTrainer on token tasks (algo=grpo env=toyseq), not "
                              f"algo={algo.name} env={env.name}")

    def check_config(self, fault: Hooks, algo: Any) -> None:
        for hp, whose in ((algo, "the config"), (fault.hyperparams(algo), f"fault {fault.name}")):
            for name, (value, why) in NATIVE_ONLY.items():
                if getattr(hp, name) != value:
                    raise ConfigError(f"{whose} cannot be expressed on backend=trl: algo.{name}={getattr(hp, name)!r} "
                                      f"({why}; it must be {value!r})")
        effective = fault.hyperparams(algo)
        for f in dataclasses.fields(algo):
            if f.name in RUNTIME or not f.init:
                continue
            if getattr(effective, f.name) != getattr(algo, f.name):
                raise ConfigError(f"fault {fault.name} cannot be expressed on backend=trl: it changes algo.{f.name}, "
                                  "which TRL's GRPOTrainer fixes when it is built")
        if algo.beta == 0 and effective.beta != 0:
            raise ConfigError(f"fault {fault.name} cannot be expressed on backend=trl: it turns the KL penalty on while "
                              "the config has beta=0 (TRL builds no reference model then)")


TRAINER = TRLTrainer()

"""The sampler (the rollout engine) stops receiving the trainer's weights.

Form: overridden. The config says the weights are synced every update (``sync_every=1``), but
the sync silently does nothing (``every=0``, the default: the sampler generates with the start
checkpoint for the whole run) or happens only every ``every`` updates. The trainer recomputes
the old log-probs with its current weights, so the importance ratio starts each update at 1 and
nothing looks off in the update metrics; the sampler/trainer log-prob gap grows as the policy
moves, and the rollouts (hence the reward) stay those of the old weights.

Provenance (read): huggingface/trl#5312 ("vLLM weights are not synchronized with
vllm_enable_sleep_mode=True"; a reproduction on TRL 1.9.0 uses sampling_logp_difference/mean as
the detector: 0.015 with sleep off vs 0.201 with sleep on at step 3, Qwen2.5-1.5B, lr 1e-4);
trl PR #5313 (the fix: "sleep level 2 drops vLLM weights, so waking the engine alone is not
enough for the next generate()"); trl PR #5355 ("This causes vLLM to always generate with base
weights whenever sleep mode is enabled"); ms-swift PR #7017 (sleep_level 2 "causes gibberish
outputs" when weights are not fully restored); verl PR #3461 (sleep level 2 with LoRA: "model
weights will not be loaded").
"""

from dataclasses import dataclass

from faults.base import Fault, param


@dataclass
class StaleSamplerWeights(Fault):
    every: int = param(0, "the sampler actually loads the trainer's weights every this many updates "
                       "(0 = never: it keeps the start checkpoint, as TRL#5312)", ge=0, le=1000, kind=int)

    name = "stale_sampler_weights"
    form = "overridden"
    description = ("the weight sync to the sampler is skipped: rollouts come from old (or the start) weights while "
                   "the trainer recomputes old log-probs with its own; the sampler/trainer log-prob gap grows and "
                   "the reward stays that of the old weights")
    provenance = ("trl#5312 (sampling_logp_difference/mean 0.015 vs 0.201 with vLLM sleep mode: weights not "
                  "synced), trl PR #5313 / #5355 ('always generate with base weights'), ms-swift PR #7017, "
                  "verl PR #3461")
    algos = ("grpo",)
    expected = ("sampler_mismatch_high", "sampler_mismatch_grows")
    needs_rollout_engine = True

    def sync_sampler(self, update: int, due: bool) -> bool:
        return self.every > 0 and update % self.every == 0

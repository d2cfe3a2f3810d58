"""The rollout engine samples in bf16 beside an fp32 trainer and nothing corrects for the gap.

Form: misconfigured. vLLM (or SGLang) generates in bf16 while the trainer computes log-probs in
fp32 (FSDP): the two policies differ by rounding, the completions are slightly off-policy, and
an update that treats them as on-policy has no correction for it. The fix is an importance-
sampling correction on the sampler's log-probs (verl PR #2953's truncated importance sampling,
TRL's ``vllm_importance_sampling_correction``). The bug's setting, shared by the healthy twin: a
bf16 sampler, and the twin's truncated importance sampling (token level, cap 3, as the
``grpo_bf16_tis`` control); the fault's config has no correction. Both runs log the same sampler
gap; what differs is the update. On a 2-layer model over a short run the uncorrected gap is small,
so the trace may be faint; the reports describe it growing until training collapses.

Provenance (read): verl-project/verl PR #2953 ("Rollout-Training Mismatch Fix -- Truncated
importance sampling": ``tis_imp_ratio_cap`` on the rollout log-probs); verl-project/verl#2996
("Differences between old_log_prob and log_prob in grpo on-policy setting ... (serious
problem)"; the difference grows with model size, "the diff of moe-vl model is significantly
larger"); huggingface/transformers#31267 ("bf16 is more unstable than fp16, when looking at the
difference of generation logprobs and forward logprobs").
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class RolloutPrecisionUncorrected(Fault):
    name = "rollout_precision_uncorrected"
    form = "misconfigured"
    description = ("a bf16 sampler beside an fp32 trainer with no importance-sampling correction for the gap (the "
                   "twin applies verl's truncated importance sampling): off-policy completions trained as on-policy")
    provenance = ("verl PR #2953 (truncated importance sampling as the rollout-training mismatch fix); verl#2996 "
                  "(old_log_prob vs log_prob on-policy: 'serious problem'); transformers#31267 (bf16 generation vs "
                  "forward log-probs)")
    algos = ("grpo",)
    expected = ("sampler_mismatch_grows",)

    def refusal(self, backend: str) -> str | None:
        if backend == "trl":
            return ("TRL's GRPOTrainer generates with the policy itself here (no vLLM): no bf16 sampler beside the "
                    "trainer, so no gap to leave uncorrected")
        return None

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"sampler_precision": "bf16", "is_correction": "token_truncate", "is_clip_max": 3.0}

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, is_correction="none")

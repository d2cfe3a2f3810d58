"""The trainer scores the full vocabulary while the sampler's log-probs are top-k / top-p truncated.

Form: code bug. With top-p (or top-k) sampling the rollout engine draws each token from the
truncated, renormalised distribution, and the log-probs it returns (vLLM's
``processed_logprobs``) are those of that distribution; a trainer that recomputes log-probs over the
full vocabulary and mixes them with the sampler's (old log-probs taken from the sampler, an
importance-sampling correction, the mismatch metrics) compares two different distributions: every
ratio carries log(S), S the probability mass the truncation kept. The fix replays the truncation in
the trainer (DeepSeek-V3.2's "Keep Sampling Mask"; NeMo-RL PR #2053 computes the current and previous
log-probs with filtering, the reference's without). The bug needs that mix (``setting``:
``top_p=0.9`` and ``use_sampler_logprobs=true``, verl's bypass mode), shared by the healthy twin,
whose trainer replays the truncation; the fault's does not. TRL's trainer recomputes both old and
new log-probs over the full vocabulary without vLLM, so the mix does not arise there (with vLLM
it does: trl#6789).

Provenance (read): verl-project/verl#6240 (vLLM returns processed log-probs "after temperature and
top-k/p" while "the trainer ones don't apply temperature nor top-k/p"); PrimeIntellect-ai/prime-rl
PR #2979 ("the trainer normalizes over the full vocabulary - so every importance ratio is biased,
and runs with truncated sampling collapse"); modelscope/ms-swift PR #8442 (processed log-probs "are
also affected by top_k and top_p filtering ... causing a significant discrepancy between rollout
logprobs and training logprobs"); vllm-project/vllm#42259 (trl#6789: the difference "silently
carries log(S) (S = surviving probability mass) into the importance-sampling ratio").
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault


@dataclass
class SamplingFilterNotReplayed(Fault):
    name = "sampling_filter_not_replayed"
    description = ("the sampler samples and scores tokens under top-p / top-k truncation, the trainer scores the full "
                   "vocabulary, and the two are mixed (old log-probs from the sampler): every ratio carries the kept "
                   "mass (setting: top_p 0.9, use_sampler_logprobs)")
    provenance = ("verl#6240 (processed vs trainer log-probs); prime-rl PR #2979 ('every importance ratio is biased, "
                  "and runs with truncated sampling collapse'); ms-swift PR #8442 ('significant discrepancy between "
                  "rollout logprobs and training logprobs'); vllm#42259 / trl#6789 (log(S) in the ratio)")
    algos = ("grpo",)
    expected = ("sampler_mismatch_high",)

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"top_p": 0.9, "use_sampler_logprobs": True}

    def trainer_sampling_filter(self, top_k: int, top_p: float) -> tuple[int, float]:
        return 0, 1.0

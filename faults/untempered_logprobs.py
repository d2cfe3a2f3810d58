"""The sampler samples at temperature T != 1 but the trainer computes its log-probs at T = 1.

Form: code bug. The config's ``temperature`` (the fault's setting, 0.7 by default, shared by the
healthy twin) is applied where the sampler draws tokens and records their log-probs, but the
trainer's old, reference and new log-probs divide the logits by 1. The importance ratio still starts
at 1 and the KL to the reference is computed consistently (both untempered), so the update metrics
look normal; what disagrees is the sampler's log-prob and the trainer's for the same token, from the
first update, and the gradient is that of the untempered policy, not of the one that sampled.

Provenance (read): OpenRLHF PR #853 ("the log_probs used for KL-div calculation are directly
calculated based on logits and ignores the temperature, which incurs misalignment" between rollout
sampling and training log-probs); modelscope/ms-swift PR #8427 ("Apply temperature scaling to
training-side logits to ensure consistent logps computation with vLLM's processed_logprobs for
rollout importance sampling"); unslothai/unsloth-zoo PR #832 (the MLX GRPO path "computed untempered
log-probs, so at temperature != 1.0 the policy-gradient magnitude ... and the k3 KL term diverged
from TRL. They agreed exactly only at the default temperature=1.0, but GRPO runs commonly set
temperature in 0.6-1.0").
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param
from harness.config import ConfigError


@dataclass
class UntemperedLogprobs(Fault):
    temperature: float = param(0.7, "the sampling temperature the run is configured with (the bug needs T != 1)",
                               gt=0.0, le=5.0)

    name = "untempered_logprobs"
    description = ("the sampler samples at the configured temperature (setting: temperature) but the trainer's "
                   "log-probs divide the logits by 1: sampler and trainer disagree on every token's log-prob from "
                   "the start")
    provenance = ("OpenRLHF PR #853 (KL log-probs 'ignore the temperature' used for rollout sampling), ms-swift "
                  "PR #8427 (training-side logits not temperature-scaled vs vLLM's processed_logprobs), "
                  "unsloth-zoo PR #832 (untempered MLX GRPO log-probs, 'agreed exactly only at temperature=1.0')")
    algos = ("grpo",)
    expected = ("sampler_mismatch_high", "kl_sampler_high")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.temperature == 1.0:
            raise ConfigError("fault.temperature=1.0 leaves nothing to forget; use a temperature != 1")

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"temperature": self.temperature}

    def logprob_temperature(self, temperature: float, where: str) -> float:
        return 1.0 if where == "trainer" else temperature

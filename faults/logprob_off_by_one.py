"""The trainer pairs logits with the wrong tokens: logits at position t score token t instead of
token t + 1 (or a silent gather misalignment).

Form: code bug. The sampler generates correctly; the trainer's old, reference and new log-probs
all come from the misaligned computation, so the importance ratio starts at 1 and KL to the
reference at 0, but the log-probs the loss trains are those of the wrong (token, context) pairs:
the trainer's log-probs disagree with the sampler's from the first step, and nothing learns.
Knob: ``shift`` (0: logits[t] score token t; 2: two positions back).

Provenance (read): opendilab/LightRFT PR #53 review (a VLM expanded image tokens, so
``log_probs_from_logits(logits[:, :-1], sequences[:, 1:])`` silently gathered log-probs from the
wrong positions: "K3 = 11 ... after the alignment fix the real K3 is only 0.037 (1/275 of the
misaligned value)"; the policy was healthy, the computation path was wrong). The report's
misalignment is a gather truncated by expanded image tokens (hundreds of positions), not a shift
of one; ``shift`` (0 by default: logits at t score token t, the commonest hand-written slip) is
the harness's stand-in for it, not the report's value.
"""

from dataclasses import dataclass

from faults.base import Fault, param
from harness.config import ConfigError


@dataclass
class LogprobOffByOne(Fault):
    shift: int = param(0, "how far before the token its scoring logits sit (correct: 1)", ge=0, le=4, kind=int)

    name = "logprob_off_by_one"
    description = ("the trainer scores each token with the logits of the wrong position: its log-probs disagree "
                   "with the sampler's from the start and the policy learns nothing useful")
    provenance = ("LightRFT PR #53 (a silent gather misalignment: K3 = 11, against 0.037 once aligned: 275x); "
                  "partial: its misalignment is a truncated gather, the default shift 0 is a stand-in")
    algos = ("grpo",)
    expected = ("sampler_mismatch_high", "kl_sampler_high")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shift == 1:
            raise ConfigError("fault.shift=1 is the correct alignment; use 0 or >= 2")

    def logit_shift(self, shift: int) -> int:
        return self.shift

"""Under gradient accumulation each micro-batch's token-mean loss counts equally.

Form: code bug. With ``loss_agg=token_mean`` a minibatch's loss is the mean over its real tokens.
Split into micro-batches for gradient accumulation, each micro-batch's part must be weighted by
its share of the minibatch's tokens; the bug takes each micro-batch's own token mean and averages
those means (divides their sum by the accumulation count), so a micro-batch of short completions
weighs as much as one of long completions: the update leans toward short completions and depends
on how completions fall into micro-batches. Nothing in the loss curve shows it. The bug needs
gradient accumulation over completions of different lengths (``setting``: ``grad_accum`` =
``accum_steps``, and token-mean loss), shared by the healthy twin, which weights by tokens.

Provenance (read): huggingface/blog PR #2414 ("Gradient accumulation is *supposed* to be
mathematically equivalent to full batch training; however, losses did not match between training
runs where the setting was toggled on and off": the Trainer averaged per-micro-batch mean losses);
ml-explore/mlx-lm PR #1413 / #1544 ("each micro-batch gradient is already normalized by its own
token count, dividing the sum by K does not equal the gradient of the token-mean loss over the
combined effective batch unless every micro-batch has the same number of trained tokens. With
variable-length completions the accumulated update is biased toward shorter examples");
MakazhanAlpamys/Soup#932 (per-microbatch mean "weights microbatches, not tokens": "nothing about it
is visible at runtime. The loss curve looks normal with the bug and without it").
"""

from dataclasses import dataclass
from typing import Any

from faults.base import Fault, param


@dataclass
class GradAccumMeanOfMeans(Fault):
    accum_steps: int = param(4, "gradient-accumulation micro-batches per optimizer step (the run's grad_accum)",
                             ge=2, le=64, kind=int)

    name = "grad_accum_mean_of_means"
    description = ("with gradient accumulation (setting: grad_accum = accum_steps, token-mean loss) the minibatch loss "
                   "is the mean of the micro-batches' own token means, not the token mean: short completions weigh more")
    provenance = ("huggingface/blog PR #2414 (accumulated losses 'did not match' full-batch training); mlx-lm PR #1413 / "
                  "#1544 ('biased toward shorter examples'); Soup#932 ('weights microbatches, not tokens ... The loss "
                  "curve looks normal with the bug and without it')")
    algos = ("grpo",)
    expected = ()
    no_trace_expected = ("the reports find nothing in the loss curve (Soup#932: 'nothing about it is visible at "
                         "runtime'); the gradient's weighting changes, not its scale")

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"grad_accum": self.accum_steps, "loss_agg": "token_mean"}

    def micro_share(self, share: float, n_micro: int) -> float:
        return 1.0 / n_micro

"""The KL penalty's estimator is differentiated as a loss on sampled tokens: its gradient is not the KL's.

With ``beta > 0`` GRPO adds ``beta * KL(pi || pi_ref)``, estimated per sampled token from
``d = log pi_ref - log pi``: k3 = e^d - d - 1 (DeepSeek's GRPO, TRL, verl's ``low_var_kl``) or
k1 = -d. Both are fine *values* of the KL on samples of pi, but differentiating them does not give
the KL's gradient: E[grad k3] = -E[(pi_ref / pi) grad log pi] and E[grad k1] = E[grad log pi] = 0,
while grad KL = E[-d grad log pi]. Multiplying the estimate by the importance ratio pi / pi_old
(value 1 on-policy, but differentiable) recovers the KL's gradient for either estimator; that is
the healthy twin (TRL's ``use_bias_correction_kl``, our ``kl_is_weight``).

Reports (read):
- verl PR #2953 (Truncated importance sampling; the comment on the KL estimator): "we point out that
  this [k3] provides invalid (i.e., biased) gradient signal for model training", with the derivation
  above, and a fix in the same PR.
- allenai/open-instruct#534: with the k1 estimator as a loss, "kl1 looks wrong (larger beta induces
  larger KL...???)"; the answer: "while kl1 estimator is a 'decent' estimator of kl divergence, its
  gradient is not the 'correct' estimator of the gradient of kl divergence", fixed by multiplying by
  the ratio; a later comment shows k3's gradient is biased too.
- OpenRLHF PR #1309: "k1 and k3 are biased in both regimes: k1's gradient vanishes in expectation, and
  k3's gradient descends the forward KL rather than the reverse one".
- huggingface/trl PR #4638 (the ratio-corrected KL as an option, from DeepSeek-V3.2's "unbiased KL
  estimate") and PR #6503 (``use_bias_correction_kl`` made the default; the review measured "about 21%
  relative difference on-policy, and the corrected gradient matching reverse-KL to ~1e-8").
  (trl#3104, also about "wrong KL divergence term", asks why the KL is taken on sampled tokens rather
  than full distributions: not this bug; not cited.)

``form="code bug"`` (default): the framework differentiates the estimate directly (TRL before PR
#6503's default, verl's ``low_var_kl`` loss, OpenRLHF before PR #1309); the config holds the
healthy ``kl_is_weight=true``. ``form="misconfigured"``: the config holds ``kl_is_weight=false`` (TRL's
``use_bias_correction_kl=False``). ``estimator="k1"`` (open-instruct's case) needs the native trainer:
TRL's penalty is k3. The bug needs a KL penalty (``setting``: ``beta``, and the ratio correction the
twin keeps). Only the penalty's gradient changes, not the logged KL's definition: the reports measured
gradients, not a logged symptom, so a trace is at most the KL to the reference drifting from the twin's.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class KLGradientBiased(Fault):
    form: str = form_param("code bug", "code bug", "misconfigured")
    estimator: str = param("k3", "the KL estimate differentiated as a loss: k3 (TRL, verl low_var_kl) or k1 "
                           "(open-instruct)", choices=("k3", "k1"), kind=str)
    beta: float = param(0.04, "the KL coefficient of the run's config (TRL's former default, 0.04)",
                        gt=0, le=10)

    name = "kl_gradient_biased"
    description = ("the KL penalty's per-token estimate (k3 or k1) is differentiated as a loss without the "
                   "importance ratio, so its gradient is not the KL's (k1's vanishes in expectation)")
    provenance = ("verl PR #2953 ('[k3] provides invalid (i.e., biased) gradient signal'); open-instruct#534 ('kl1 "
                  "looks wrong (larger beta induces larger KL...???)', 'its gradient is not the correct estimator'); "
                  "OpenRLHF PR #1309 ('k1's gradient vanishes in expectation, and k3's gradient descends the forward "
                  "KL'); trl PR #6503 (use_bias_correction_kl made the default: 'about 21% relative difference "
                  "on-policy')")
    algos = ("grpo",)
    expected = ()
    no_trace_expected = ("the reports measured the gradient, not a logged symptom; only the penalty's direction "
                         "changes, so at most the KL to the reference drifts from the twin's")

    def refusal(self, backend: str) -> str | None:
        if backend == "trl" and self.estimator != "k3":
            return "TRL's KL penalty is k3; fault.estimator=k1 runs on backend=native"
        return None

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"beta": self.beta, "kl_is_weight": True}

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, kl_is_weight=False, kl_estimator=self.estimator)

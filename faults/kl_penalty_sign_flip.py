"""The KL penalty enters the loss with the wrong sign: the loss rewards distance from the reference.

Form: code bug. The config's coefficient is positive (and logged as such: verl's
``actor/kl_coef``), but the loss subtracts it: ``policy_loss = pg_loss - kl_loss * kl_loss_coef``.

Provenance (read): verl PR #179 (commit a65c9157, 2025-02-01, "[misc] fix: grpo kl loss should
be add when do minimization") changed ``policy_loss - kl_loss * self.config.kl_loss_coef`` to
``+`` in verl/workers/actor/dp_actor.py. Projects that vendored verl before it kept the bug:
Unakar/Logic-RL#58 ("There is a kl loss bug in verl where the kl loss is maximized", the user
then asks why training "would still work"), qiancheng0/ToolRL#52 ("Incorrect KL Loss Sign Causes
Policy Training Collapse": "when use_kl_loss=True, the training becomes unstable and eventually
collapses"; ToolRL's vendored dp_actor.py still has the minus sign at HEAD).
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class KLPenaltySignFlip(Fault):
    name = "kl_penalty_sign_flip"
    description = ("the KL term is subtracted from the loss instead of added (beta -> -beta in the loss): the policy "
                   "is pushed away from the reference and KL to it grows; the configured and logged coefficient stay "
                   "positive")
    provenance = ("verl PR #179 (commit a65c9157: policy_loss - kl_loss * kl_loss_coef, 'the kl loss is "
                  "maximized'); Logic-RL#58; ToolRL#52 ('training becomes unstable and eventually collapses')")
    algos = ("grpo",)
    backends = ("native", "trl")
    expected = ("kl_ref_explodes",)

    def inert(self, configured: Mapping[str, Any]) -> str | None:
        if float(configured.get("beta", 0.0)) == 0.0:
            return "beta = 0: the loss has no KL term whose sign could flip (the run is its healthy twin)"
        return None

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, beta=-hp.beta)

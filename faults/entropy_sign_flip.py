"""The entropy bonus enters the loss with the wrong sign: entropy is penalised, not rewarded.

Reports (read): PKU-Alignment/omnisafe PR#133 ("PPO should maximize entropy when updating the
policy, while currently PPO on the main branch minimizes entropy ... Since the default value of
entropy_coef in the ppo.yaml file is 0, it does not affect the experimental performance");
nebuly-ai/optimate PR#250 ("fix the sign error for maximizing entropy bonus"); rlworkgroup/garage#628
(a missing minus in the entropy estimate "might explain why we had to turn off
entropy-regularization"). As omnisafe notes, the sign only matters with a non-zero coefficient, so
the bug lives in a config with an entropy bonus: ``ent_coef`` (default 0.01) is the run's setting,
shared by the healthy twin.

``form="code bug"`` (default): the config holds +ent_coef and the loss adds ``ent_coef * entropy``.
``form="misconfigured"``: the config itself holds -ent_coef (SB3's ``entropy_loss`` is -entropy,
an easy sign to copy wrongly). SB3 builds its loss inside PPO.train(), so there only the
misconfigured form is expressible (a negative ``ent_coef``).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class EntropySignFlip(Fault):
    form: str = form_param("code bug", "code bug", "misconfigured")
    ent_coef: float = param(0.01, "the entropy coefficient the config holds (its magnitude)", gt=0, le=1)

    name = "entropy_sign_flip"
    description = ("the entropy bonus becomes a penalty (ent_coef -> -ent_coef in the update; form code bug: the "
                   "config keeps +ent_coef): exploration collapses")
    provenance = ("omnisafe PR#133 (\"currently PPO on the main branch minimizes entropy\"); optimate PR#250 (\"the "
                  "sign error for maximizing entropy bonus\"); garage#628 (\"why we had to turn off "
                  "entropy-regularization\")")
    algos = ("ppo",)
    expected = ('entropy_collapse',)

    def refusal(self, backend: str) -> str | None:
        if backend != "sb3":
            return None
        if self.form == "code bug":
            return ("in form 'code bug' the sign slip is in the loss, which SB3 builds inside PPO.train(); "
                    "fault.form=misconfigured (a negative ent_coef) runs there")
        return None

    def setting(self, algo: str = "") -> dict[str, Any]:
        return {"ent_coef": self.ent_coef}

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, ent_coef=-abs(hp.ent_coef))

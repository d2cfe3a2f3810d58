"""SB3-style KL early stopping with a target so small that each update stops after one minibatch.

SB3 checks each minibatch before its optimizer step and ends the whole epoch loop once
``approx_kl > 1.5 * target_kl``. The first minibatch of an update is on-policy (approx_kl 0), so it
always steps; with a tiny target the second already stops it: one optimizer step per update
instead of n_epochs x n_minibatches. Synthetic: no report of a user meeting this was found; the
mechanism is SB3's (SB3#1229: "it is possible to not update due to high `approx_kl_div`"), and
sb3-contrib#292's reproduction sets ``target_kl=0.0003  # set low to ensure early stop``.
``target_kl`` is the severity knob. A healthy target (e.g. 0.02) also stops some updates early:
that is the look-alike control ``algo=ppo_target_kl``.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, form_param, param


@dataclass
class TargetKLTooStrict(Fault):
    form: str = form_param("misconfigured", "misconfigured", "overridden")
    target_kl: float = param(1e-4, "the KL target in effect (early stop above 1.5 x this)", gt=0, le=1)

    name = "target_kl_too_strict"
    description = ("target_kl so small that SB3's early stopping ends every update after its first minibatch: one "
                   "optimizer step per update")
    provenance = ("synthetic: SB3's early stopping (SB3#1229: \"possible to not update due to high approx_kl_div\"); "
                  "sb3-contrib#292 reproduces early stops with target_kl=0.0003 (\"set low to ensure early stop\")")
    algos = ("ppo",)
    expected = ('optimizer_steps_short',)

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, target_kl=self.target_kl)

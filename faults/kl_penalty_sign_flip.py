"""The KL penalty enters the loss with the wrong sign: the loss rewards distance from the reference.

``form="code bug"`` (default, the reported form): the config's coefficient is positive (and logged as
such: verl's ``actor/kl_coef``), but the loss subtracts it: ``policy_loss = pg_loss - kl_loss * kl_loss_coef``.

``form="misconfigured"``: the same sign slip made in the config, ``GRPOConfig(beta=-0.04)`` (TRL
1.16's GRPOConfig and GRPOTrainer accept a negative beta without a warning and add
``beta * per_token_kl`` to the loss). This is how a user of an unmodified TRL meets the bug: TRL's
loss cannot be edited without a subclass. Provenance of this form: synthetic (no report found of a
negative beta in a config; slime's PPO writes ``kl_coef = -args.kl_coef`` in its own code, the kind
of sign convention that invites the slip).

The bug needs a KL term (``setting``: ``beta``, TRL's former default 0.04, shared by the healthy
twin): with beta = 0 the flipped sign multiplies nothing and the run is its healthy twin
(:meth:`inert`; dataset runs drawn that way before version 2 are labelled ``inert``).

On PPO with the KL in the reward (``algo=ppo_lm``, TRL PPOTrainer-style: each token's reward is
``-kl_coef x KL``): the penalty becomes a bonus, ``+kl_coef x KL``; code bug: the configured and logged
``kl_coef`` stay positive; misconfigured: ``PPOConfig(kl_coef=-0.05)``, which TRL 0.28's PPOConfig and
PPOTrainer accept without a warning. The run's own ``kl_coef`` is the magnitude (``beta`` is GRPO's);
the adaptive controller is refused (its coefficient is not the config's). Provenance of the PPO-LM
forms: synthetic (the same slip in the reward instead of the loss).

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

from faults.base import Fault, form_param, param
from harness.config import ConfigError


@dataclass
class KLPenaltySignFlip(Fault):
    form: str = form_param("code bug", "code bug", "misconfigured")
    beta: float = param(0.04, "the KL coefficient's magnitude in the run's config (TRL's former default, 0.04)",
                        gt=0, le=10)

    name = "kl_penalty_sign_flip"
    version = 2            # 2: beta is the fault's setting (the bug needs a KL term); form misconfigured added
    description = ("the KL term is subtracted from the loss instead of added (beta -> -beta in the loss): the policy "
                   "is pushed away from the reference and KL to it grows; form code bug: the configured and logged "
                   "coefficient stay positive; misconfigured: the config holds the negative beta")
    provenance = ("verl PR #179 (commit a65c9157: policy_loss - kl_loss * kl_loss_coef, 'the kl loss is "
                  "maximized'); Logic-RL#58; ToolRL#52 ('training becomes unstable and eventually collapses'); "
                  "form misconfigured (a negative beta in GRPOConfig, which TRL accepts): synthetic")
    algos = ("grpo", "ppo_lm")
    expected = ("kl_ref_explodes", "kl_penalty_adds_reward")

    def setting(self, algo: str = "") -> dict[str, Any]:
        """GRPO: ``beta``. PPO-LM: none (its own ``kl_coef`` is the magnitude)."""
        return {} if algo == "ppo_lm" else {"beta": self.beta}

    def configure(self, algo: Any) -> Any:
        if getattr(algo, "adaptive_kl", False):
            raise ConfigError(f"fault {self.name} flips the configured kl_coef; algo.adaptive_kl=true sets the "
                              "coefficient by its controller (use algo.adaptive_kl=false)")
        return super().configure(algo)

    def inert(self, configured: Mapping[str, Any]) -> str | None:
        coef = configured.get("beta", configured.get("kl_coef", 0.0))
        if float(coef or 0.0) == 0.0:
            return "beta = 0: the loss has no KL term whose sign could flip (the run is its healthy twin)"
        return None

    def hyperparams(self, hp: Any) -> Any:
        if hasattr(hp, "beta"):
            return replace(hp, beta=-abs(hp.beta))
        return replace(hp, kl_coef=-abs(hp.kl_coef))

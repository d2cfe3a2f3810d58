"""Advantage whitening on one-sample minibatches: std() of one sample is NaN and so is the loss.

Reports (read): WeihaoTan/TWOSOME#3 (a CleanRL-style PPO with ``policy_num_minibatches == num_envs *
num_steps``, so ``policy_minibatch_size=1``: "After the first epoch update ... obtains an `NAN`");
SB3#440 ("PPO fails with `batch_size=1`": NaNs "originated in ... `advantages.std()`"); SB3#265
(n_steps = n_envs = 1: "Silent NaNs", "RuntimeError: invalid multinomial distribution"); SB3#325
("`advantages.std()` over a batch of size 1 is not defined"); Popular-RL-Algorithms#45 ("invalid
multinomial distribution", fixed there); wheatley PR#93 (a last minibatch of size 1: "a nan loss is
backpropagated"); TinyZero#101 (batch 1 per GPU: critic/vf_loss, actor/pg_loss, actor/grad_norm all
nan).

The misconfiguration: as many minibatches as samples (``n_minibatches = num_envs * n_steps``, so
every minibatch holds one transition). Native PPO normalises advantages without a guard, as CleanRL
and SB3 before PR#1028 do, so the first minibatch goes NaN and the run diverges at its onset
update. Not expressible on SB3: since PR#1028 (v1.6) SB3 skips normalisation for a one-sample
minibatch, so the bug no longer exists there (the config would only train on single samples).
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault


@dataclass
class WhitenTinyBatch(Fault):
    name = "whiten_tiny_batch"
    form = "misconfigured"
    description = ("one sample per minibatch (n_minibatches = batch size): normalising its advantage divides by "
                   "the std of one sample, NaN, and the loss and gradients go NaN")
    provenance = ("TWOSOME#3 (minibatch size 1: \"obtains an NAN\"), SB3#440 (\"PPO fails with batch_size=1\"), "
                  "SB3#265 "
                  "(\"invalid multinomial distribution\"), SB3#325, wheatley PR#93, TinyZero#101 (pg_loss, grad_norm "
                  "nan); fixed in SB3 by PR#1028")
    algos = ("ppo",)
    expected = ('nonfinite',)

    def refusal(self, backend: str) -> str | None:
        if backend != "sb3":
            return None
        return ("SB3 skips advantage normalisation for a one-sample minibatch since PR#1028 (v1.6), so the bug "
                "does not exist there")

    def hyperparams(self, hp: Any) -> Any:
        return replace(hp, n_minibatches=hp.batch_size)

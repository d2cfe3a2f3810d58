"""Advantage whitening on a one-sample minibatch: std() of one sample is NaN and so is the loss.

Reports (read): SB3#325 ("PPO can run into nan values whenever it samples a batch size of size 1 ...
`advantages.std()` over a batch of size 1 is not defined"; "a rollout_buffer of size batch_size +
1"); SB3#265 (n_steps = n_envs = 1: "Silent NaNs", "RuntimeError: invalid multinomial distribution");
SB3#440; wheatley PR#93 ("Last minibatch size is 1, so `mb_advantages.std()` is nan and a nan loss is
backpropagated"); Popular-RL-Algorithms#45 ("invalid multinomial distribution" from the same std);
TinyZero#101 (batch 1 per GPU: critic/vf_loss, actor/pg_loss, actor/grad_norm all nan).

The misconfiguration: an SB3-style minibatch size that leaves one sample over in each epoch
(``minibatch_size`` with ``batch % minibatch_size == 1``; the default picks the largest such size
not above batch / n_minibatches, e.g. 89 for a 2048-sample batch: 23 minibatches of 89 and one of
1). Native PPO normalises without a guard, as SB3 did before PR#1028, so the first epoch ends in
NaN. SB3 itself has skipped normalisation for a one-sample minibatch since PR#1028 (v1.6): there
the same config trains one raw-advantage step per epoch and the fault is expected to stay quiet.
"""

from dataclasses import dataclass, replace
from typing import Any

from faults.base import Fault, param
from harness.config import ConfigError


def tiny_remainder_size(batch: int, at_most: int) -> int:
    """The largest minibatch size <= at_most that leaves exactly one sample over (0 if none)."""
    return next((m for m in range(min(at_most, batch - 1), 1, -1) if batch % m == 1), 0)


@dataclass
class WhitenTinyBatch(Fault):
    minibatch_size: int = param(0, "minibatch size leaving one sample over (0: the largest <= batch / n_minibatches)",
                                ge=0, kind=int)

    name = "whiten_tiny_batch"
    form = "misconfigured"
    description = ("a minibatch size that leaves a one-sample minibatch; normalising its advantages divides by the "
                   "std of one sample (NaN), and the loss goes NaN")
    provenance = ("SB3#325 (\"PPO can run into nan values whenever it samples a batch size of size 1\"), SB3#265 "
                  "(\"invalid multinomial distribution\"), SB3#440, wheatley PR#93, TinyZero#101 (pg_loss, grad_norm "
                  "nan); fixed in SB3 by PR#1028")
    acts_on = "hyperparameters minibatch_size, n_minibatches (SB3 batch_size)"
    algos = ("ppo",)
    backends = ("native", "sb3")
    expected = ("nonfinite",)

    def size(self, hp: Any) -> int:
        return self.minibatch_size or tiny_remainder_size(hp.batch_size, hp.batch_size // hp.n_minibatches)

    def configure(self, algo: Any) -> Any:
        size = self.size(algo)
        if size < 2 or algo.batch_size % size != 1:
            raise ConfigError(f"fault.minibatch_size={size} does not leave one sample over of the "
                              f"{algo.batch_size}-sample batch (batch % minibatch_size must be 1)")
        return super().configure(algo)

    def hyperparams(self, hp: Any) -> Any:
        size = self.size(hp)
        return replace(hp, minibatch_size=size, n_minibatches=-(-hp.batch_size // size))

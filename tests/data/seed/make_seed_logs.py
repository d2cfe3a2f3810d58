"""The seed symptoms this project was created from, rebuilt as logs from their descriptions (issue 55):

- ``verl_grpo_zeros.csv``: a verl GRPO run's metrics (verl's names) where ``actor/pg_loss``,
  ``actor/entropy`` and ``critic/advantages/mean`` are exactly 0 on every one of 40 steps,
  ``critic/score/mean`` is flat at -0.1 and ``actor/kl_loss`` sits near 0.053.
- ``grpo_ratio_explodes.csv``: a custom GRPO log in the harness's canonical names whose importance
  ratio climbs to 4.85e8, the KL to the reference to 1.98e5 and the mean sequence log-prob to -8.3e5,
  with the advantage mean exactly 0 on every step (40 steps).

Synthetic shapes (no framework wrote them): ``python tests/data/seed/make_seed_logs.py`` rewrites both,
bit for bit (a fixed seed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
STEPS = 40


def verl_zeros(rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({
        "step": np.arange(1, STEPS + 1),
        "actor/pg_loss": 0.0,
        "actor/entropy": 0.0,
        "critic/advantages/mean": 0.0,
        "critic/score/mean": -0.1,
        "actor/kl_loss": np.round(0.053 + rng.normal(0, 0.002, STEPS), 6),
    })


def ratio_explodes(rng: np.random.Generator) -> pd.DataFrame:
    t = np.arange(STEPS)
    grow = np.clip((t - 8) / (STEPS - 9), 0, 1)          # healthy-looking for 8 steps, then runs away
    ratio = np.exp(grow * np.log(4.85e8)) * np.exp(rng.normal(0, 0.02, STEPS))
    ratio[-1] = 4.85e8
    kl_ref = 0.01 + grow ** 2 * 1.98e5
    logp = -12.0 - grow ** 2 * 8.3e5
    return pd.DataFrame({
        "update": t,
        "reward_mean": np.round(0.25 + rng.normal(0, 0.05, STEPS) - 0.2 * grow, 4),
        "reward_std": np.round(0.4 + rng.normal(0, 0.03, STEPS), 4),
        "adv_mean": 0.0,
        "adv_std": np.round(0.9 + rng.normal(0, 0.03, STEPS), 4),
        "policy_loss": np.round(rng.normal(0, 0.02, STEPS) - grow * 50, 4),
        "entropy": np.round(1.2 - 0.9 * grow + rng.normal(0, 0.02, STEPS), 4),
        "approx_kl": 0.002 + grow ** 2 * 950.0,
        "clipfrac": np.round(0.05 + 0.9 * grow, 4),
        "ratio_mean": ratio,
        "kl_ref": kl_ref,
        "logp_mean": logp,
        "grad_norm": np.round(0.8 + grow * 400 + rng.normal(0, 0.05, STEPS), 4),
    })


def main() -> None:
    rng = np.random.default_rng(4)
    verl_zeros(rng).to_csv(HERE / "verl_grpo_zeros.csv", index=False)
    ratio_explodes(rng).to_csv(HERE / "grpo_ratio_explodes.csv", index=False)


if __name__ == "__main__":
    main()

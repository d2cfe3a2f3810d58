"""Correctness first: the healthy agent must learn, or no signature means anything."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import train


@pytest.mark.slow
def test_healthy_ppo_solves_cartpole_within_100k_steps(tmp_path):
    """Mean episode return >= 400 within 100k env steps for at least 2 of 3 seeds."""
    finals = []
    for seed in range(3):
        res = train(["fault=none", f"seed={seed}", f"results_dir={tmp_path}"])
        m = res.metrics
        assert res.meta["status"] == "ok"
        assert m["env_step"].iloc[-1] <= 100_000
        finals.append(float(np.nanmean(m["return_mean"].iloc[-5:])))
    assert sum(f >= 400 for f in finals) >= 2, f"mean return over the last 5 updates: {finals}"

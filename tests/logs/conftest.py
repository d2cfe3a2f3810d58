"""Fixtures of the log tests: stored runs to render in every framework's view."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

#: the short PPO run of the view tests: tiny_clip (clipping acts on every update), 4 updates of 16 envs x 64 steps
TINY_CLIP = ["fault=tiny_clip", "env.total_timesteps=4096", "algo.n_steps=64"]
#: the healthy GRPO run of the view tests: a run of the tiny ``catalogue`` fixture (toyseq, beta 0.04, 24 updates)
GRPO_RUN = "grpo-toyseq-native-none-s0-4ef41ee582d8"


@dataclass(frozen=True)
class Runs:
    ppo_store: Path
    ppo: str
    grpo_store: Path
    grpo: str


@pytest.fixture(scope="session")
def runs(store_dir, tiny) -> Runs:
    """A short PPO run (tiny clip: clipping acts), trained once per session in the shared store, and a
    short healthy GRPO run of the checked-in ``catalogue`` fixture."""
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    ppo = get_or_train(make_experiment([*TINY_CLIP, f"results_dir={store_dir}", "twin=false", "progress=false"]))
    catalogue = tiny("catalogue")
    assert (catalogue / "runs" / GRPO_RUN / "meta.json").is_file(), f"{GRPO_RUN} is no run of the catalogue fixture"
    return Runs(store_dir, ppo.run_id, catalogue, GRPO_RUN)

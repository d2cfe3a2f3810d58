"""The dataset sweeper: a Hydra sweeper that trains the diverse labelled dataset.

It samples ``size`` runs from the space in its config (:mod:`harness.pipeline.sample`), drops the runs
already stored, deals the rest into jobs of ``chunk`` runs and hands those jobs to the configured
Hydra launcher (joblib, ray, submitit): each job trains its runs one after the other in one
process (``batch=<file>``), so the per-run cost is training, not process and Hydra start-up.
"""

# No ``from __future__ import annotations``: see catalogue_sweeper.py.
from dataclasses import dataclass, field
from typing import Any, List, Sequence, Tuple

from hydra.core.config_store import ConfigStore

from hydra_plugins.harness_sweeper.base import StoreSweeper, plain


@dataclass
class DatasetSweeperConf:
    _target_: str = "hydra_plugins.harness_sweeper.dataset_sweeper.DatasetSweeper"
    size: int = 640                  # runs to sample
    seed: int = 0                    # the sampler's seed (the same seed samples the same dataset)
    chunk: int = 8                   # runs per launched job (trained in one process)
    space: Any = field(default_factory=dict)
    progress_every_s: float = 10.0


ConfigStore.instance().store(group="hydra/sweeper", name="dataset", node=DatasetSweeperConf,
                             provider="rl-fault-harness")


class DatasetSweeper(StoreSweeper):
    kind = "dataset"

    def __init__(self, size: int, seed: int, chunk: int, space: Any, progress_every_s: float) -> None:
        super().__init__()
        self.size, self.seed, self.chunk, self.space = size, seed, chunk, space
        self.progress_every_s = progress_every_s

    def plan(self, arguments: List[str]) -> Tuple[List[Any], str]:
        from harness.pipeline.sweep import plan_dataset

        runs = plan_dataset(plain(self.space), self.size, self.seed, self.chunk, arguments, self.compose)
        return runs, f"{len(runs)} sampled runs (seed {self.seed})"

    def jobs(self, todo: Sequence[Any], arguments: List[str]) -> List[List[str]]:
        from harness.pipeline.sweep import write_chunks
        from harness.store import RunStore

        assert self.config is not None
        root = RunStore(self.config.results_dir).root / ".multirun" / "dataset"
        return write_chunks([spec for spec, _ in todo], self.chunk, root, arguments)


__all__ = ["DatasetSweeper", "DatasetSweeperConf"]

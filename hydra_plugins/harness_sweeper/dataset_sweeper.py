"""The dataset sweeper: a Hydra sweeper that trains the diverse labelled dataset.

It samples ``size`` runs from the space in its config (:mod:`harness.pipeline.sample`), drops the runs
already stored, deals the rest into jobs of ``chunk`` runs and hands those jobs to the configured
Hydra launcher (joblib, ray, submitit): each job trains its runs one after the other in one
process (``batch=<file>``), so the per-run cost is training, not process and Hydra start-up.
Heavy imports happen in ``sweep`` only: Hydra imports every plugin module at start-up.
"""

# No ``from __future__ import annotations``: see catalogue_sweeper.py.
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


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


class DatasetSweeper(Sweeper):
    def __init__(self, size: int, seed: int, chunk: int, space: Any, progress_every_s: float) -> None:
        super().__init__()
        self.size, self.seed, self.chunk, self.space = size, seed, chunk, space
        self.progress_every_s = progress_every_s
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        from harness.config import ConfigError
        from harness.pipeline.compose import one_line
        from harness.pipeline.sweep import StoreProgress, plan_dataset, write_chunks
        from harness.store import RunStore

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader

        def compose(overrides: List[str]) -> DictConfig:
            try:
                return loader.load_sweep_config(self.config, overrides)
            except Exception as exc:
                raise ConfigError(one_line(exc)) from None

        space = OmegaConf.to_container(self.space, resolve=True) if isinstance(self.space, DictConfig) else self.space
        try:
            runs = plan_dataset(space, self.size, self.seed, self.chunk, arguments, compose)
        except ConfigError as exc:   # before anything is launched or stored
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        store = RunStore(self.config.results_dir)
        todo = [(spec, rid) for spec, rid in runs if store.load_meta(rid) is None]
        launcher = OmegaConf.select(self.config, "hydra.launcher._target_", default="?").rsplit(".", 1)[-1]
        jobs = write_chunks([spec for spec, _ in todo], self.chunk, store.root / ".multirun" / "dataset", arguments)
        print(f"[sweep] dataset: {len(runs)} sampled runs (seed {self.seed}), {len(runs) - len(todo)} already stored "
              f"in {store.runs}, {len(todo)} to train in {len(jobs)} jobs of <= {self.chunk} with {launcher}",
              flush=True)
        if not todo:
            return []
        with StoreProgress(store, [rid for _, rid in todo], every_s=self.progress_every_s) as progress:
            returns = list(self.launcher.launch(jobs, initial_job_idx=0))
        print(progress.line().replace("[sweep]", "[sweep] done:"), flush=True)
        return [returns]


__all__ = ["DatasetSweeper", "DatasetSweeperConf"]

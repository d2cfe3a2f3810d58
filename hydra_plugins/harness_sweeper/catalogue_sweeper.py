"""The catalogue sweeper: a Hydra sweeper that runs the harness's fault catalogue.

Hydra's basic sweeper takes a cartesian product; the catalogue is not one (GRPO-only faults
do not run on PPO, controls run healthy only). This sweeper builds the job list with
``harness.pipeline.sweep.plan``, drops the runs already stored, and hands the rest to the configured
Hydra launcher (joblib, ray, submitit) in one batch, printing progress as runs land.
Heavy imports happen in ``sweep`` only: Hydra imports every plugin module at start-up.
"""

# No ``from __future__ import annotations`` here: Hydra executes plugin modules without
# registering them in sys.modules, and dataclasses then cannot resolve string annotations.
import logging
import sys
from dataclasses import dataclass, field
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


@dataclass
class CatalogueSweeperConf:
    _target_: str = "hydra_plugins.harness_sweeper.catalogue_sweeper.CatalogueSweeper"
    seeds: int = 10
    faults: Any = "all"                       # "all" or a list of fault names
    onsets: Any = field(default_factory=lambda: ["0", "mid"])   # onset 0 and a mid-run onset per seed
    setups: Any = field(default_factory=list)    # [{algo, env, backend}], faults run on these
    controls: Any = field(default_factory=list)  # [{algo, env, backend}], run with fault=none
    progress_every_s: float = 10.0


ConfigStore.instance().store(group="hydra/sweeper", name="catalogue", node=CatalogueSweeperConf,
                             provider="rl-fault-harness")


class CatalogueSweeper(Sweeper):
    def __init__(self, seeds: int, faults: Any, onsets: Any, setups: Any, controls: Any,
                 progress_every_s: float) -> None:
        super().__init__()
        self.seeds, self.faults, self.onsets = seeds, faults, onsets
        self.setups, self.controls = setups, controls
        self.progress_every_s = progress_every_s
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: List[str]) -> Any:
        from harness.config import ConfigError
        from harness.pipeline.compose import one_line
        from harness.pipeline.sweep import StoreProgress, plan_runs

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None

        loader = self.hydra_context.config_loader

        def compose(overrides: List[str]) -> DictConfig:
            try:
                return loader.load_sweep_config(self.config, overrides)
            except Exception as exc:
                raise ConfigError(one_line(exc)) from None

        try:
            runs = plan_runs(self.sweeper_settings(), arguments, compose=compose)
        except ConfigError as exc:   # before anything is launched or stored
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        from harness.store import RunStore

        store = RunStore(self.config.results_dir)
        todo = [(job, rid) for job, rid in runs if store.load_meta(rid) is None]
        launcher = OmegaConf.select(self.config, "hydra.launcher._target_", default="?").rsplit(".", 1)[-1]
        print(f"[sweep] catalogue: {len(runs)} runs, {len(runs) - len(todo)} already stored in "
              f"{store.runs}, {len(todo)} to train with {launcher}", flush=True)
        if not todo:
            return []
        with StoreProgress(store, [rid for _, rid in todo], every_s=self.progress_every_s) as progress:
            returns: List[JobReturn] = list(self.launcher.launch([job for job, _ in todo], initial_job_idx=0))
        print(progress.line().replace("[sweep]", "[sweep] done:"), flush=True)
        return [returns]

    def sweeper_settings(self) -> Any:
        def plain(value: Any) -> Any:
            return OmegaConf.to_container(value) if isinstance(value, DictConfig) or OmegaConf.is_list(value) else value

        return {"seeds": self.seeds, "faults": plain(self.faults), "onsets": plain(self.onsets),
                "setups": plain(self.setups), "controls": plain(self.controls)}


__all__ = ["CatalogueSweeper", "CatalogueSweeperConf"]

"""The catalogue sweeper: a Hydra sweeper that runs the harness's fault catalogue.

Hydra's basic sweeper takes a cartesian product; the catalogue is not one (GRPO-only faults
do not run on PPO, controls run healthy only). This sweeper builds the job list with
``harness.pipeline.sweep.plan``, drops the runs already stored, and hands the rest to the configured
Hydra launcher (joblib, ray, submitit) in one batch, one job a run, printing progress as runs land.
"""

# No ``from __future__ import annotations`` here: Hydra executes plugin modules without
# registering them in sys.modules, and dataclasses then cannot resolve string annotations.
from dataclasses import dataclass, field
from typing import Any, List, Tuple

from hydra.core.config_store import ConfigStore

from hydra_plugins.harness_sweeper.base import StoreSweeper, plain


@dataclass
class CatalogueSweeperConf:
    _target_: str = "hydra_plugins.harness_sweeper.catalogue_sweeper.CatalogueSweeper"
    seeds: int = 10
    faults: Any = "all"                       # "all" or a list of fault names
    onsets: Any = field(default_factory=lambda: ["0", "mid"])   # onset 0 and a mid-run onset per seed
    setups: Any = field(default_factory=list)    # [{algo, env, backend}], faults run on these
    controls: Any = field(default_factory=list)  # [{algo, env, backend}], run with fault=none
    progress_every_s: float = 10.0
    setups_only: Any = None                   # [algo/env/backend, ...]: these setups and their controls (a part)


ConfigStore.instance().store(group="hydra/sweeper", name="catalogue", node=CatalogueSweeperConf,
                             provider="rl-fault-harness")


class CatalogueSweeper(StoreSweeper):
    kind = "catalogue"

    def __init__(self, seeds: int, faults: Any, onsets: Any, setups: Any, controls: Any,
                 progress_every_s: float, setups_only: Any = None) -> None:
        super().__init__()
        self.setups_only = setups_only
        self.seeds, self.faults, self.onsets = seeds, faults, onsets
        self.setups, self.controls = setups, controls
        self.progress_every_s = progress_every_s

    def plan(self, arguments: List[str]) -> Tuple[List[Any], str]:
        from harness.pipeline.sweep import plan_runs

        runs = plan_runs(self.sweeper_settings(), arguments, compose=self.compose)
        return runs, f"{len(runs)} runs"

    def sweeper_settings(self) -> Any:
        return {"seeds": self.seeds, "faults": plain(self.faults), "onsets": plain(self.onsets),
                "setups": plain(self.setups), "controls": plain(self.controls),
                "setups_only": plain(self.setups_only) if self.setups_only else None}


__all__ = ["CatalogueSweeper", "CatalogueSweeperConf"]

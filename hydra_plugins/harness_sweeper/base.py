"""What both harness sweepers share: the launcher they hand jobs to, composing a job's config with
Hydra's own loader (errors made one line), and launching the runs not yet stored while a progress
line reports the store filling up. Heavy imports happen inside methods: Hydra imports every plugin
module at each start-up of any command."""

# No ``from __future__ import annotations``: see catalogue_sweeper.py.
import sys
from typing import Any, List, Optional, Sequence, Tuple

from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


class StoreSweeper(Sweeper):
    """A sweeper whose jobs train runs into ``results_dir``: a subclass plans the runs
    (``(job overrides, run id)`` pairs) in :meth:`plan`; this class drops the runs already stored and
    launches the rest."""

    #: the sweep's name in its progress lines
    kind = "sweep"
    progress_every_s: float = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.config: Optional[DictConfig] = None
        self.launcher: Optional[Launcher] = None
        self.hydra_context: Optional[HydraContext] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def compose(self, overrides: List[str]) -> DictConfig:
        """A job's config as the launcher's worker will compose it; raises ConfigError (one line)."""
        from harness.config import ConfigError
        from harness.pipeline.compose import one_line

        assert self.hydra_context is not None and self.config is not None
        try:
            return self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        except Exception as exc:  # Hydra composition errors, made one line
            raise ConfigError(one_line(exc)) from None

    def plan(self, arguments: List[str]) -> Tuple[List[Any], str]:
        """The runs to train, as ``(item, run_id)`` pairs, and a one-line description of the sweep."""
        raise NotImplementedError

    def jobs(self, todo: Sequence[Any], arguments: List[str]) -> List[List[str]]:
        """The launcher's job override lists for the runs still to train (default: one job a run)."""
        return [item for item, _ in todo]

    def sweep(self, arguments: List[str]) -> Any:
        from harness.config import ConfigError
        from harness.pipeline.sweep import StoreProgress
        from harness.store import RunStore

        assert self.config is not None and self.launcher is not None
        try:
            runs, what = self.plan(arguments)
        except ConfigError as exc:      # before anything is launched or stored
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
        store = RunStore(self.config.results_dir)
        todo = [(item, rid) for item, rid in runs if store.load_meta(rid) is None]
        jobs = self.jobs(todo, arguments)
        launcher = OmegaConf.select(self.config, "hydra.launcher._target_", default="?").rsplit(".", 1)[-1]
        print(f"[sweep] {self.kind}: {what}, {len(runs) - len(todo)} already stored in {store.runs}, "
              f"{len(todo)} to train in {len(jobs)} job(s) with {launcher}", flush=True)
        if not todo:
            return []
        with StoreProgress(store, [rid for _, rid in todo], every_s=self.progress_every_s) as progress:
            returns = list(self.launcher.launch(jobs, initial_job_idx=0))
        print(progress.line().replace("[sweep]", "[sweep] done:"), flush=True)
        return [returns]


def plain(value: Any) -> Any:
    """A sweeper setting as plain Python (OmegaConf containers to dicts and lists)."""
    if isinstance(value, DictConfig) or OmegaConf.is_list(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


__all__: List[str] = ["StoreSweeper", "plain"]

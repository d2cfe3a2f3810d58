"""``rlfh`` (``python -m harness``): train a faulty agent and its healthy twin, then compare them.

Before Hydra runs anything, :func:`harness.pipeline.compose.preflight` composes and validates
every job the command line asks for, so a bad override ends with one line naming the valid
choices and nothing stored is touched.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from harness.commands.app import run_app
from harness.config import CONF_DIR, ConfigError
from harness.pipeline.assemble import load_experiment
from harness.pipeline.compose import CONFIG_NAME, with_default_env
from harness.pipeline.experiment import run_batch, run_experiment


def _is_multirun() -> bool:
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


@hydra.main(config_path=str(CONF_DIR), config_name=CONFIG_NAME, version_base=None)
def app(cfg: DictConfig) -> None:
    if cfg.get("batch"):          # a dataset-sweep job: many sampled runs in this one process
        run_batch(cfg.batch, cfg.results_dir, cfg.torch_threads)
        return
    try:
        exp = load_experiment(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    if cfg.seeds < 1:
        print(f"error: seeds={cfg.seeds}: train at least one seed", file=sys.stderr)
        sys.exit(2)
    onsets = list(cfg.seed_onsets) if cfg.get("seed_onsets") is not None else None
    code = run_experiment(exp, multirun=_is_multirun(), seeds=cfg.seeds, onsets=onsets)
    if code and not _is_multirun():
        sys.exit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """The command; ``argv`` defaults to the process's arguments (``main(["fault=none"])`` runs it in-process)."""
    run_app(app, argv=with_default_env(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()

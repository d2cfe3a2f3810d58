"""What every command does before Hydra runs: validate the whole command line first."""

from __future__ import annotations

import sys
from collections.abc import Callable

from omegaconf import DictConfig

from harness.config import ConfigError
from harness.pipeline.assemble import load_experiment
from harness.pipeline.compose import CONFIG_NAME, preflight


def run_app(hydra_app: Callable[[], None], config_name: str = CONFIG_NAME,
            validate: Callable[[DictConfig], object] = load_experiment,
            argv: list[str] | None = None) -> None:
    """Validate the command line (one-line error, exit 2), then hand it to the Hydra app."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        preflight(argv, config_name, validate)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    hydra_app()

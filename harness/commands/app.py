"""What every command does before Hydra runs: validate the whole command line first; and the old names
of renamed keys, which keep working (with a one-line note)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, read_write

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


def renamed(cfg: DictConfig, aliases: dict[str, tuple[str, Any]]) -> list[str]:
    """Old key -> (new key, its default): an old key given on the command line (its YAML default is
    null) sets the new one, as it did before the rename; returns one note per old key used. Both
    given with different values is a ConfigError."""
    notes = []
    for old, (new, default) in aliases.items():
        value = cfg.get(old)
        if value is None:
            continue
        if cfg.get(new) not in (default, value):
            raise ConfigError(f"{old}={value} and {new}={cfg.get(new)}: {old}= is the old name of {new}=, give one")
        with read_write(cfg):
            cfg[new] = value
        notes.append(f"note: {old}= is now {new}= (the old name still works)")
    return notes

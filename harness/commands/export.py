"""``rlfh-export`` (``python -m harness.export``) ``run=ID|all profile=NAME format=tensorboard|csv|jsonl|native
out=DIR``: write stored runs as that framework logs them (see :mod:`harness.logs.exporter`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import hydra
from omegaconf import DictConfig

from harness.commands.app import run_app
from harness.config import CONF_DIR, ConfigError
from harness.logs.exporter import check, check_out, export, select
from harness.store import RunStore


def validate(cfg: DictConfig) -> None:
    if cfg.run is None:
        raise ConfigError("run=ID or run=all is required")
    if cfg.out is None:
        raise ConfigError("out=DIR is required (the exported logs and labels.json go there)")
    check(cfg.profile.name, cfg.format)
    check_out(cfg.out, bool(cfg.overwrite))
    select(RunStore(cfg.results_dir), str(cfg.run), cfg.profile.name, warn=lambda _: None)


@hydra.main(config_path=str(CONF_DIR), config_name="export", version_base=None)
def app(cfg: DictConfig) -> None:
    written = export(cfg.results_dir, str(cfg.run), cfg.profile.name, cfg.format, cfg.out,
                     warn=lambda msg: print(msg, file=sys.stderr), overwrite=bool(cfg.overwrite))
    files = sum(len(lab["files"]) for lab in written.values())
    print(f"wrote {len(written)} run(s) as profile={cfg.profile.name} format={cfg.format}: {files} file(s) under "
          f"{cfg.out}/<opaque id>/, labels in {cfg.out}/labels.json")
    for oid, lab in list(written.items())[:5]:
        print(f"  {oid}: {', '.join(lab['files'][:3])}")
    if len(written) > 5:
        print(f"  ... {len(written) - 5} more")


def main(argv: Sequence[str] | None = None) -> None:
    """The command; ``argv`` defaults to the process's arguments (in-process: ``main([...])``)."""
    run_app(app, config_name="export", validate=validate, argv=argv)


if __name__ == "__main__":
    main()

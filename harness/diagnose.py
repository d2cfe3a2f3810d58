"""``python -m harness.diagnose log=PATH [profile=auto] [run=NAME]``: which known bug does my run look like?

Reading (every log format, the dialect detected from its names) lives in :mod:`harness.logs`;
the ranking in :mod:`harness.detection.diagnosis`; this module is the command.
"""

from __future__ import annotations

import json
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.cli import CONF_DIR, run_app
from harness.config import ConfigError
from harness.detection.diagnosis import diagnose_log, load_catalogue
from harness.logs import LoadedLog, load_log


def hyperparameters(cfg: DictConfig) -> dict[str, Any]:
    return dict(OmegaConf.to_container(cfg.hp, resolve=True) or {})


def read(cfg: DictConfig) -> LoadedLog:
    return load_log(cfg.log, cfg.profile.name, run=None if cfg.run is None else str(cfg.run),
                    config=hyperparameters(cfg), algo=cfg.algo)


def validate(cfg: DictConfig) -> None:
    if cfg.log is None:
        raise ConfigError("log=PATH is required (a TensorBoard run directory or event file, trainer_state.json, "
                          "progress.csv, a W&B export, a verl console log, or a CSV / JSON-lines log)")
    if cfg.format not in ("text", "json"):
        raise ConfigError(f"format={cfg.format!r}; valid choices: text, json")
    if cfg.algo not in (None, "ppo", "grpo"):
        raise ConfigError(f"algo={cfg.algo!r}; valid choices: ppo, grpo (default: from the profile)")
    log = read(cfg)
    diagnose_log(log, load_catalogue(cfg.catalogue), cfg.n_actions, cfg.optimizer_steps)


def describe(log: LoadedLog, cfg: DictConfig) -> list[str]:
    how = "detected from its names" if log.detected else "given"
    lines = [f"{cfg.log}: {log.source}",
             f"dialect: {log.profile} ({how}); {len(log.metrics)} training steps; compared with the {log.algo} "
             f"catalogue ({cfg.catalogue})",
             "mapped: " + ", ".join(f"{src} -> {dst}" for dst, src in log.used.items())]
    if log.unused:
        lines.append(f"not used ({len(log.unused)}): {', '.join(log.unused[:15])}"
                     + (" ..." if len(log.unused) > 15 else ""))
    if log.config:
        lines.append("config: " + ", ".join(f"{k}={v}" for k, v in log.config.items()))
    lines += [f"note: {n}" for n in log.notes]
    return lines


@hydra.main(config_path=str(CONF_DIR), config_name="diagnose", version_base=None)
def app(cfg: DictConfig) -> None:
    log = read(cfg)
    ranking = diagnose_log(log, load_catalogue(cfg.catalogue), cfg.n_actions, cfg.optimizer_steps)
    top = ranking[: cfg.top]
    if cfg.format == "json":     # the machine-readable answer (a stable contract for scripts)
        print(json.dumps({"log": str(cfg.log), "profile": log.profile, "detected": log.detected, "algo": log.algo,
                          "answer": ranking[0].fault,
                          "ranking": [{"fault": c.fault, "setup": c.setup, "score": c.score, "evidence": c.evidence}
                                      for c in top]}, indent=2))
        return
    print("\n".join(describe(log, cfg)))
    print("\nmost likely (score = log-likelihood ratio against a healthy run; > 0 favours the fault):")
    for i, c in enumerate(top, 1):
        print(f"{i:2d}. {c.fault:22s} {c.score:+7.2f}  {c.setup}")
        for e in c.evidence[:4]:
            state = "fired" if e["fired"] else "did not fire"
            print(f"      {e['weight']:+.2f} {e['signature']} {state} ({e['seen']}); in the catalogue it fires "
                  f"on {e['rate_faulty']:.0%} of {c.fault} seeds and {e['rate_healthy']:.0%} of healthy ones")


def main() -> None:
    run_app(app, config_name="diagnose", validate=validate)


if __name__ == "__main__":
    main()

"""``python -m harness.diagnose log=PATH``: which known bug does my run look like?

The reading and ranking live in :mod:`harness.detection.diagnosis`; this module is the command.
"""

from __future__ import annotations

import json

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.cli import CONF_DIR, run_app
from harness.config import ConfigError
from harness.detection.diagnosis import diagnose, load_catalogue, map_log, read_log


def profile_cfg(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg.profile, resolve=True)


def validate(cfg: DictConfig) -> None:
    if cfg.log is None:
        raise ConfigError("log=PATH is required (a CSV or JSON-lines training log)")
    if cfg.format not in ("text", "json"):
        raise ConfigError(f"format={cfg.format!r}; valid choices: text, json")
    if cfg.algo not in (None, "ppo", "grpo"):
        raise ConfigError(f"algo={cfg.algo!r}; valid choices: ppo, grpo (default: from the profile)")
    map_log(read_log(cfg.log), profile_cfg(cfg), cfg.algo)
    load_catalogue(cfg.catalogue)


@hydra.main(config_path=str(CONF_DIR), config_name="diagnose", version_base=None)
def app(cfg: DictConfig) -> None:
    log, ranking = diagnose(cfg.log, profile_cfg(cfg), load_catalogue(cfg.catalogue), cfg.algo,
                            cfg.n_actions, cfg.optimizer_steps)
    top = ranking[: cfg.top]
    if cfg.format == "json":
        print(json.dumps([{"fault": c.fault, "setup": c.setup, "score": c.score, "evidence": c.evidence}
                          for c in top], indent=2))
        return
    print(f"{cfg.log}: {len(log.metrics)} steps, profile {cfg.profile.name}, compared with the {log.algo} "
          f"catalogue ({cfg.catalogue})")
    print("mapped: " + ", ".join(f"{src} -> {dst}" for dst, src in log.used.items()))
    if log.unknown:
        print(f"not used ({len(log.unknown)}): {', '.join(log.unknown[:15])}" + (" ..." if len(log.unknown) > 15 else ""))
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

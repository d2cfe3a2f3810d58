"""``python -m harness.diagnose log=PATH [profile=auto] [run=NAME]``: which known bug does my run look like?

Reading (every log format, the dialect detected from its names) lives in :mod:`harness.logs`;
the ranking in :mod:`harness.detection.diagnosis`; this module is the command.
"""

from __future__ import annotations

import json
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.analysis.model import load_models
from harness.commands.app import run_app
from harness.config import CONF_DIR, ConfigError
from harness.detection.diagnosis import UNKNOWN, Diagnosis, diagnose_log, model_path
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
    diagnose_log(log, load_models(model_path(cfg.catalogue)), cfg.n_actions, cfg.optimizer_steps)


def describe(log: LoadedLog, cfg: DictConfig) -> list[str]:
    how = "detected from its names" if log.detected else "given"
    lines = [f"{cfg.log}: {log.source}",
             f"dialect: {log.profile} ({how}); {len(log.metrics)} training steps; algorithm {log.algo}",
             "mapped: " + ", ".join(f"{src} -> {dst}" for dst, src in log.used.items())]
    if log.unused:
        lines.append(f"not used ({len(log.unused)}): {', '.join(log.unused[:15])}"
                     + (" ..." if len(log.unused) > 15 else ""))
    lines.append("config: " + (", ".join(f"{k}={v}" for k, v in log.config.items()) if log.config else
                               "none found (the diagnosis works without it; +hp.KEY=VALUE adds context)"))
    lines += [f"note: {n}" for n in log.notes]
    return lines


def verdict(d: Diagnosis) -> str:
    if d.answer == UNKNOWN:
        return (f"anomalous, cause unknown (P(anomalous) = {d.anomalous:.2f}; no known fault reaches "
                f"{d.model.unknown_threshold:.2f})")
    return f"{d.answer} (P = {d.probability:.2f}; P(anomalous) = {d.anomalous:.2f})"


def report(d: Diagnosis, top: int) -> list[str]:
    card = d.model.info
    oos = card.get("out_of_sample") or {}
    lines = ["", f"answer: {verdict(d)}",
             f"model: {d.model.algo} in the {d.view} view, fitted on {card.get('n_runs', '?')} runs (the diverse "
             f"dataset and the catalogue's calibration seeds)" + (f"; out of sample (held-out runs): top-1 {oos['top1_faulty']:.0%} on faulty logs, "
                           f"{oos['healthy_called_healthy']:.0%} of healthy logs called healthy, calibration "
                           f"error {oos['ece']:.3f}" if oos else ""),
             "probabilities:"]
    lines += [f"  {name:28s} {p:6.3f}" for name, p in list(d.probabilities.items())[:top]]
    if d.expected:
        lines.append(f"{d.answer}'s expected signature in this log:")
        lines += [f"  - {name}: {what}" for name, what in d.expected.items()]
    lines.append("signatures that fire in this log (default thresholds): "
                 + (", ".join(f"{n} ({r.evidence})" for n, r in d.fired.items()) or "none"))
    return lines


@hydra.main(config_path=str(CONF_DIR), config_name="diagnose", version_base=None)
def app(cfg: DictConfig) -> None:
    log = read(cfg)
    d = diagnose_log(log, load_models(model_path(cfg.catalogue)), cfg.n_actions, cfg.optimizer_steps)
    if cfg.format == "json":     # the machine-readable answer (a stable contract for scripts)
        ranking = [{"fault": k, "probability": v, "score": v} for k, v in list(d.probabilities.items())[: cfg.top]]
        print(json.dumps({"log": str(cfg.log), "profile": log.profile, "detected": log.detected, "algo": log.algo,
                          "view": d.view, "answer": d.answer, "probability": d.probability,
                          "anomalous": d.anomalous,
                          "probabilities": d.probabilities, "ranking": ranking,
                          "expected_signature": d.expected,
                          "fired": {n: r.evidence for n, r in d.fired.items()}}, indent=2))
        return
    print("\n".join(describe(log, cfg) + report(d, cfg.top)))


def main() -> None:
    run_app(app, config_name="diagnose", validate=validate)


if __name__ == "__main__":
    main()

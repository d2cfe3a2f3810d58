"""``rlfh-watch log=PATH [profile=auto] [interval=5] [idle=600] [output=text|json]``: follow a training
log while another process writes it, and print an alarm when the diagnosis names a known bug.

Each read gives the log so far in canonical form (:func:`harness.logs.load_log`, as diagnose reads
it); when it has grown, the answers on its new prefixes (at most the last ``hold`` of them) (:class:`harness.monitor.core.Monitor`, the alarm policy
of the in-process monitors) is printed as one line, and an alarm in full when an answer naming a
fault (or class) holds for ``patience`` reads. A log that does not exist yet, or has no complete row
yet, is waited for. The command ends when the log has not grown for ``idle`` seconds, or on Ctrl-C.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.commands.app import check_algorithm, run_app
from harness.config import CONF_DIR, ConfigError, did_you_mean
from harness.logs import AnotherAlgorithm, LoadedLog, load_log
from harness.monitor.core import Alarm, Monitor

OUTPUTS = ("text", "json")


def validate(cfg: DictConfig) -> None:
    if cfg.log is None:
        raise ConfigError("log=PATH is required (the log to follow: a TensorBoard run directory or event file, "
                          "trainer_state.json, progress.csv, a W&B export, a verl console log, CSV / JSON lines)")
    if cfg.output not in OUTPUTS:
        raise ConfigError(f"output={cfg.output!r}; {did_you_mean(cfg.output, OUTPUTS)}valid choices: text, json")
    if not float(cfg.interval) > 0:
        raise ConfigError(f"interval={cfg.interval}; seconds between reads must be > 0")
    if float(cfg.idle) < 0:
        raise ConfigError(f"idle={cfg.idle}; seconds without growth before stopping must be >= 0 (0: never stop)")
    check_algorithm(cfg.algorithm)
    make_monitor(cfg)


def make_monitor(cfg: DictConfig) -> Monitor:
    return Monitor(cfg.profile.name, algo=cfg.algorithm, results_dir=cfg.results_dir, patience=int(cfg.patience),
                   budget=1.0, emit=None, detector=cfg.get("detector"))


def read(cfg: DictConfig) -> LoadedLog | None:
    """The log so far, or None while it does not exist or holds no complete row yet."""
    if not Path(cfg.log).exists():
        return None
    try:
        return load_log(cfg.log, cfg.profile.name, run=None if cfg.select is None else str(cfg.select),
                        config=dict(OmegaConf.to_container(cfg.hp, resolve=True) or {}), algo=cfg.algorithm)
    except AnotherAlgorithm:      # no row to come changes whose log it is
        raise
    except ConfigError:
        return None


def show(cfg: DictConfig, log: LoadedLog, monitor: Monitor, alarms: list[Alarm]) -> None:
    answer = monitor.last
    if cfg.output == "json":
        for alarm in alarms:
            print(json.dumps({"log": str(cfg.log), **alarm.as_dict()}, default=float), flush=True)
        return
    if monitor.detector is not None:
        print(f"{len(log.metrics)} steps: {type(monitor.detector).__name__}, {len(monitor.alarms)} alarm(s) so far",
              flush=True)
    elif answer is not None:
        name = answer.answer if answer.kind != "class" else f"one of {', '.join(answer.members)}"
        print(f"{len(log.metrics)} steps: {name} (P(anomalous) = {answer.anomalous:.2f}, threshold "
              f"{answer.threshold:.2f})", flush=True)
    for alarm in alarms:
        print(alarm.message(), flush=True)


def new_prefixes(seen: int, rows: int, monitor: Monitor) -> range:
    """The prefixes of a log grown from ``seen`` to ``rows`` rows to answer on: every new one, at most
    as many as the alarm policy needs to see an answer hold (``patience`` answers over ``hold`` rows),
    so a log read once, already complete, is judged as a monitor that saw it grow would judge it."""
    need = max(monitor.policy.patience, monitor.policy.hold)
    return range(max(seen + 1, rows - need + 1, 1), rows + 1)


def follow(cfg: DictConfig, sleep: Any = time.sleep, clock: Any = time.monotonic) -> Monitor:
    """Read the log every ``interval`` seconds until it has not grown for ``idle`` seconds."""
    monitor = make_monitor(cfg)
    seen, grew = -1, clock()
    waiting_said = False
    while True:
        log = read(cfg)
        if log is None and not waiting_said and cfg.output == "text":
            print(f"waiting for {cfg.log} (no complete row yet)", flush=True)
            waiting_said = True
        if log is not None and len(log.metrics) != seen:
            if len(log.metrics) < seen:          # rewritten from the start (a new run in the same place)
                monitor = make_monitor(cfg)
                seen = 0
            alarms = []
            for rows in new_prefixes(seen, len(log.metrics), monitor):
                alarms += monitor.assess(dataclasses.replace(log, metrics=log.metrics.iloc[:rows]))
            seen, grew = len(log.metrics), clock()
            show(cfg, log, monitor, alarms)
        if float(cfg.idle) > 0 and clock() - grew > float(cfg.idle):
            if cfg.output == "text":
                names = ", ".join(a.answer for a in monitor.alarms) or "none"
                print(f"stopped: {cfg.log} has not grown for {float(cfg.idle):g} s; alarms: {names}", flush=True)
            return monitor
        sleep(float(cfg.interval))


@hydra.main(config_path=str(CONF_DIR), config_name="watch", version_base=None)
def app(cfg: DictConfig) -> None:
    try:
        follow(cfg)
    except KeyboardInterrupt:
        print("stopped (Ctrl-C)", file=sys.stderr)
    except AnotherAlgorithm as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def main(argv: Sequence[str] | None = None) -> None:
    """The command; ``argv`` defaults to the process's arguments (in-process: ``main([...])``)."""
    run_app(app, config_name="watch", validate=validate, positional="log", spellings={"algo": "algorithm"}, argv=argv)


if __name__ == "__main__":
    main()

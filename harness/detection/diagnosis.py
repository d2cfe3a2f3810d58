"""``python -m harness.diagnose log=PATH [profile=auto]``: which known bug does my run look like?

The log is read and put in canonical form by :mod:`harness.logs` (every format a PPO/GRPO user
has, the dialect detected from its names); this module evaluates the signatures the log's
metrics allow and ranks the catalogue's faults by how well their measured signature rates explain what fired
and what did not (a smoothed likelihood ratio against healthy runs of the same algorithm;
a signature that did not fire counts half, since a log is partial). Prints the evidence;
``format=json`` prints the ranking as JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import signatures
from harness.config import ConfigError
from harness.logs import LoadedLog, load_log

SMOOTH = 0.05        # added to firing rates: no rate is trusted as exactly 0 or 1
ABSENT_WEIGHT = 0.5  # a signature that did not fire is weaker evidence than one that did
HEALTHY = "healthy"


def log_signatures(log: LoadedLog, meta: dict[str, Any]) -> dict[str, signatures.Result]:
    """The signatures this log can show: those whose metric it has."""
    readable = {name: sig for name, sig in signatures.SIGNATURES.items()
                if log.metrics[sig.metric].notna().any()}
    if "configured_optimizer_steps" not in meta:
        readable.pop("optimizer_steps_short", None)
    return signatures.evaluate(log.metrics, meta, onset=0, names=list(readable))


@dataclass
class Candidate:
    fault: str
    setup: str
    score: float
    evidence: list[dict[str, Any]]


def rank(fired: dict[str, signatures.Result], catalogue: pd.DataFrame, algo: str) -> list[Candidate]:
    sigs = catalogue[(catalogue["kind"] == "signature") & (catalogue["algo"] == algo)]
    if sigs.empty:
        raise ConfigError(f"the catalogue has no {algo} cells to compare with")
    candidates = [Candidate(HEALTHY, "-", 0.0, [])]
    for cell, rows in sigs.groupby("cell", sort=True):
        rows = rows.set_index("name")
        score, evidence = 0.0, []
        for name, result in fired.items():
            if name not in rows.index:
                continue
            p_f, p_h = float(rows.at[name, "rate_faulty"]), float(rows.at[name, "rate_healthy"])
            if math.isnan(p_f) or math.isnan(p_h):
                continue
            if result.fired:
                weight = math.log((p_f + SMOOTH) / (p_h + SMOOTH))
            else:
                weight = ABSENT_WEIGHT * math.log((1 - p_f + SMOOTH) / (1 - p_h + SMOOTH))
            score += weight
            if abs(weight) >= 0.1:
                evidence.append({"signature": name, "fired": result.fired, "weight": round(weight, 2),
                                 "rate_faulty": p_f, "rate_healthy": p_h, "seen": result.evidence})
        evidence.sort(key=lambda e: -abs(e["weight"]))
        candidates.append(Candidate(rows["fault"].iloc[0], cell.split(" | ")[1], round(score, 3), evidence))
    candidates.sort(key=lambda c: -c.score)
    return candidates


def load_catalogue(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if p.is_dir():
        p = p / "catalogue.parquet" if (p / "catalogue.parquet").exists() else p / "catalogue" / "catalogue.parquet"
    if not p.exists():
        raise ConfigError(f"no catalogue at {path}: run the sweep and python -m harness.catalogue, "
                          "or pass catalogue=PATH")
    return pd.read_parquet(p)


def context(log: LoadedLog, n_actions: int | None = None, optimizer_steps: int | None = None) -> dict[str, Any]:
    """What the signatures may know besides the metrics: the algorithm, the action-space size and the
    configured optimizer steps per update (given, or from the log's hyperparameters when it has them)."""
    meta: dict[str, Any] = {"algo": log.algo, "configured": dict(log.config)}
    if n_actions:
        meta["action_space"] = {"type": "discrete", "n": int(n_actions)}
    epochs = log.config.get("n_epochs", log.config.get("num_iterations"))
    if not optimizer_steps and epochs and log.config.get("n_minibatches") and log.profile != "trl":
        optimizer_steps = int(epochs) * int(log.config["n_minibatches"])
    if optimizer_steps:
        meta["configured_optimizer_steps"] = int(optimizer_steps)
    return meta


def diagnose_log(log: LoadedLog, catalogue: pd.DataFrame, n_actions: int | None = None,
                 optimizer_steps: int | None = None) -> list[Candidate]:
    """Rank the catalogue's faults for a log already in canonical form."""
    fired = log_signatures(log, context(log, n_actions, optimizer_steps))
    if not fired:
        raise ConfigError("none of the log's mapped metrics feeds a signature: nothing to diagnose")
    return rank(fired, catalogue, log.algo)


def diagnose(log_path: str | Path, profile: str | dict[str, Any] = "auto", catalogue: pd.DataFrame | None = None,
             algo: str | None = None, n_actions: int | None = None, optimizer_steps: int | None = None,
             run: str | None = None, config: dict[str, Any] | None = None) -> tuple[LoadedLog, list[Candidate]]:
    """Read any supported log (:func:`harness.logs.load_log`) and rank the catalogue's faults."""
    log = load_log(log_path, profile, run=run, config=config, algo=algo)
    return log, diagnose_log(log, catalogue, n_actions, optimizer_steps)

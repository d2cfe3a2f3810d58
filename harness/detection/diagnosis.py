"""``python -m harness.diagnose log=PATH profile=NAME``: which known bug does my run look like?

Reads a training log (CSV or JSON lines, one row per step) written under a framework's
metric names, maps them to the canonical names through a naming profile (conf/profile/:
canonical, sb3, cleanrl, trl, verl), evaluates the signatures the log's columns allow, and
ranks the catalogue's faults by how well their measured signature rates explain what fired
and what did not (a smoothed likelihood ratio against healthy runs of the same algorithm;
a signature that did not fire counts half, since a log is partial). Prints the evidence;
``format=json`` prints the ranking as JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis import signatures
from harness.config import ConfigError
from harness.metrics import CANONICAL, GRPO_ONLY, PPO_ONLY

SMOOTH = 0.05        # added to firing rates: no rate is trusted as exactly 0 or 1
ABSENT_WEIGHT = 0.5  # a signature that did not fire is weaker evidence than one that did
HEALTHY = "none (healthy)"


@dataclass
class MappedLog:
    metrics: pd.DataFrame                          # canonical columns, one row per step
    used: dict[str, str]                           # canonical name <- log column
    unknown: list[str]                             # log columns the profile does not map
    algo: str
    notes: list[str] = field(default_factory=list)


def read_log(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"log={path}: no such file")
    try:
        if p.suffix in (".jsonl", ".json", ".ndjson") or p.read_text(errors="ignore")[:1] == "{":
            df = pd.read_json(p, lines=True)
        else:
            df = pd.read_csv(p)
    except ValueError as exc:
        raise ConfigError(f"log={path} is neither CSV nor JSON lines: {exc}") from None
    if df.empty:
        raise ConfigError(f"log={path} has no rows")
    return df


def map_log(df: pd.DataFrame, profile: dict[str, Any], algo: str | None = None) -> MappedLog:
    columns = dict(profile.get("columns") or {})
    if profile["name"] == "canonical":
        columns = {name: name for name in CANONICAL}
    step = profile.get("step")
    used: dict[str, str] = {}
    for source, target in columns.items():
        if source in df.columns and target not in used:
            used[target] = source
    if not used:
        raise ConfigError(f"the log has none of the metrics profile={profile['name']} knows "
                          f"(e.g. {', '.join(list(columns)[:4])}); its columns: {', '.join(map(str, df.columns[:12]))}")
    if step in df.columns:
        df = df.sort_values(step, kind="stable")
    out = pd.DataFrame({"update": np.arange(len(df))})
    for name in CANONICAL:
        if name in used:
            values = pd.to_numeric(df[used[name]], errors="coerce").to_numpy(dtype=float)
            out[name] = values * float((profile.get("scale") or {}).get(name, 1.0))
        else:
            out[name] = np.nan
    # non-finite: an infinity anywhere, or a metric that was finite and then became NaN
    watched = [c for c in ("loss", "policy_loss", "grad_norm", "approx_kl", "kl_k1", "entropy") if c in used]
    went_bad = np.zeros(len(out), dtype=bool)
    for col in watched:
        values = out[col].to_numpy()
        seen = np.maximum.accumulate(np.isfinite(values))
        went_bad |= np.isinf(values) | (np.isnan(values) & np.concatenate([[False], seen[:-1]]))
    out["nonfinite"] = went_bad.astype(float) if watched else np.nan
    out["fault_active"] = True
    unknown = [str(c) for c in df.columns if c not in used.values() and c != step]
    if algo is None:
        algo = profile.get("algo") or ("grpo" if any(m in used for m in GRPO_ONLY) or
                                       not any(m in used for m in PPO_ONLY) and profile["name"] in ("trl", "verl")
                                       else "ppo")
    return MappedLog(out, used, unknown, algo)


def log_signatures(log: MappedLog, meta: dict[str, Any]) -> dict[str, signatures.Result]:
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


def diagnose(log_path: str | Path, profile: dict[str, Any], catalogue: pd.DataFrame, algo: str | None = None,
             n_actions: int | None = None, optimizer_steps: int | None = None) -> tuple[MappedLog, list[Candidate]]:
    log = map_log(read_log(log_path), profile, algo)
    meta: dict[str, Any] = {"algo": log.algo}
    if n_actions:
        meta["action_space"] = {"type": "discrete", "n": int(n_actions)}
    if optimizer_steps:
        meta["configured_optimizer_steps"] = int(optimizer_steps)
    fired = log_signatures(log, meta)
    if not fired:
        raise ConfigError("none of the log's mapped metrics feeds a signature: nothing to diagnose")
    return log, rank(fired, catalogue, log.algo)

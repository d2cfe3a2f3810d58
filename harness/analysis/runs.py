"""Reading the run store as a whole: one table of runs, their metrics, and how they pair up.

A *cell* is what the catalogue compares: the runs of one fault (with its parameters and
onset) on one base configuration (algorithm, env, backend and every hyperparameter, i.e.
the run's config minus fault and seed), over seeds. Its healthy runs are fault=none on the
same base configuration; its controls are the healthy look-alike runs (is_control) of the
same algorithm, env and backend.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import setup_label
from harness.store import RunStore


def run_labels(meta: dict[str, Any]) -> dict[str, Any]:
    """A run's labels from its meta.json: what it is (fault, setup, seed) and how it ended."""
    return {
        "fault": meta["fault"],
        "fault_params": json.dumps(meta["fault_params"], sort_keys=True),
        "onset": meta["onset_update"] if meta["onset_update"] is not None else 0,
        "algo": meta["algo"],
        "algo_variant": meta.get("algo_variant", "default"),
        "env": meta["env"],
        "backend": meta["backend"],
        "seed": meta["seed"],
        "is_control": bool(meta["is_control"]),
        "status": meta["status"],
        "n_updates": meta["n_updates"],
    }


def base_key(meta: dict[str, Any]) -> str:
    """Hash of the run's config minus fault and seed: runs that differ only there are twins."""
    config = {k: v for k, v in meta["config"].items() if k not in ("fault", "fault_name", "seed")}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class RunSet:
    """Every complete run under a results_dir: ``runs`` (one row per run) and ``metrics``."""

    runs: pd.DataFrame
    metas: dict[str, dict[str, Any]]
    metrics: dict[str, pd.DataFrame] = field(repr=False)

    @classmethod
    def load(cls, results_dir: str | Path) -> RunSet:
        store = RunStore(results_dir)
        metas = {m["run_id"]: m for m in store.iter_metas()}
        rows = [{"run_id": rid, **run_labels(m), "base": base_key(m)} for rid, m in metas.items()]
        runs = pd.DataFrame(rows, columns=["run_id", "fault", "fault_params", "onset", "algo", "algo_variant",
                                           "env", "backend", "seed", "is_control", "status", "n_updates",
                                           "base"])
        metrics = {rid: store.load_metrics(rid) for rid in metas}
        return cls(runs=runs, metas=metas, metrics=metrics)

    def cells(self) -> list[Cell]:
        """One cell per fault (x parameters x onset) per base configuration that has healthy runs
        to compare with (or not: then the cell says so)."""
        faulty = self.runs[(self.runs["fault"] != "none")]
        cells = []
        keys = ["fault", "fault_params", "onset", "algo", "algo_variant", "env", "backend", "base"]
        for key, group in faulty.groupby(keys, sort=True):
            info = dict(zip(keys, key))
            healthy = self.runs[(self.runs["fault"] == "none") & (self.runs["base"] == info["base"])]
            controls = self.runs[(self.runs["fault"] == "none") & self.runs["is_control"]
                                 & (self.runs["algo"] == info["algo"]) & (self.runs["env"] == info["env"])
                                 & (self.runs["backend"] == info["backend"])]
            cells.append(Cell(info, list(group["run_id"]), list(healthy["run_id"]), list(controls["run_id"])))
        labels = [c.label for c in cells]
        for cell in cells:   # the same fault on two base configs (e.g. two budgets): tell them apart
            if labels.count(cell.label) > 1:
                cell.suffix = f" [config {cell.info['base'][:6]}]"
        return cells


@dataclass
class Cell:
    info: dict[str, Any]
    faulty: list[str]
    healthy: list[str]
    controls: list[str]
    suffix: str = ""

    @property
    def label(self) -> str:
        i = self.info
        params = json.loads(i["fault_params"])
        extra = "".join(f" {k}={v}" for k, v in params.items())
        onset = f" onset={i['onset']}" if i["onset"] else ""
        setup = setup_label(i["algo"], i["algo_variant"], i["env"], i["backend"])
        return f"{i['fault']}{extra}{onset} | {setup}{self.suffix}"

    @property
    def slug(self) -> str:
        text = f"{self.label.replace(' | ', '__')}-{self.info['base'][:6]}"
        return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)

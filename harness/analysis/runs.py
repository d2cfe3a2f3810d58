"""Reading the run store as a whole: one table of runs, their metrics, and how they pair up.

A *cell* is what the catalogue compares: the runs of one fault (with its parameters) switched
on at update 0 or mid-run (``onset`` = "0" or "mid"; each mid-run seed has its own onset) on
one base configuration (algorithm, env, backend and every hyperparameter, i.e. the run's
config minus fault and seed), over seeds. Its healthy runs are fault=none on the same base
configuration (the twin of a faulty seed is the healthy run with the same seed); its controls
are the healthy look-alike runs (is_control) of the same algorithm, env and backend.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from harness.config import ConfigError, setup_label
from harness.store import RunStore


def origin(meta: dict[str, Any]) -> str:
    """``diverse`` for a run drawn by the dataset sweep (its meta.json records the draw), else
    ``catalogue`` (the catalogue sweep, or any run command)."""
    return "diverse" if meta.get("sampled") else "catalogue"


def run_labels(meta: dict[str, Any]) -> dict[str, Any]:
    """A run's labels from its meta.json: what it is (fault, setup, seed) and how it ended."""
    onset = meta["onset_update"] if meta["onset_update"] is not None else 0
    return {
        "origin": origin(meta),
        "fault": meta["fault"],
        "fault_params": json.dumps(meta["fault_params"], sort_keys=True),
        "fault_form": meta.get("fault_form"),
        "fault_kind": meta.get("fault_kind"),
        "onset": onset,
        "onset_kind": "mid" if onset > 0 else "0",
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
    """Hash of the run's config minus fault (its name, parameters and code version) and seed: runs that
    differ only there are twins."""
    config = {k: v for k, v in meta["config"].items() if k not in ("fault", "fault_name", "fault_version", "seed")}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]


RUN_COLUMNS = ["run_id", "origin", "fault", "fault_params", "fault_form", "fault_kind", "onset", "onset_kind", "algo",
               "algo_variant", "env", "backend", "seed", "is_control", "status", "n_updates", "base"]


@dataclass
class RunSet:
    """Every complete run under a results_dir: ``runs`` (one row per run) and ``metrics``.

    Corrupt runs (a stored file missing, truncated or changed) are skipped with a one-line
    warning on stderr."""

    runs: pd.DataFrame
    metas: dict[str, dict[str, Any]]
    metrics: dict[str, pd.DataFrame] = field(repr=False)
    root: Path | None = None

    @classmethod
    def load(cls, results_dir: str | Path) -> RunSet:
        store = RunStore(results_dir)
        metas = {m["run_id"]: m for m in store.iter_metas(warn=lambda line: print(line, file=sys.stderr))}
        rows = [{"run_id": rid, **run_labels(m), "base": base_key(m)} for rid, m in metas.items()]
        runs = pd.DataFrame(rows, columns=RUN_COLUMNS)
        metrics = {rid: store.load_metrics(rid) for rid in metas}
        return cls(runs=runs, metas=metas, metrics=metrics, root=Path(results_dir))

    @cached_property
    def canonical(self) -> Callable[[str], pd.DataFrame]:
        """A run's canonical metrics as stored, as one function for the run set (the catalogue's
        protocol keeps what it computed from a run under the function it read the run through)."""
        metrics = self.metrics
        return lambda rid: metrics[rid]

    def cells(self) -> list[Cell]:
        """One cell per fault (x parameters x onset kind) per base configuration, with its healthy
        runs and controls (possibly none: then the cell says so). Runs of the diverse dataset (each
        its own configuration) are not compared in cells: they train the diagnosis model."""
        ours = self.runs[self.runs["origin"] == "catalogue"]
        faulty = ours[(ours["fault"] != "none")]
        cells = []
        keys = ["fault", "fault_params", "onset_kind", "algo", "algo_variant", "env", "backend", "base"]
        for key, group in faulty.groupby(keys, sort=True):
            info = dict(zip(keys, key))
            healthy = ours[(ours["fault"] == "none") & (ours["base"] == info["base"])]
            controls = ours[(ours["fault"] == "none") & ours["is_control"]
                            & (ours["algo"] == info["algo"]) & (ours["env"] == info["env"])
                            & (ours["backend"] == info["backend"])]
            cells.append(Cell(info, _by_seed(group), _by_seed(healthy), _by_seed(controls)))
            _one_run_per_seed(cells[-1], group, "faulty")
            _one_run_per_seed(cells[-1], healthy, "healthy")
        labels = [c.label for c in cells]
        for cell in cells:   # the same fault on two base configs (e.g. two budgets): tell them apart
            if labels.count(cell.label) > 1:
                cell.suffix = f" [config {cell.info['base'][:6]}]"
        return cells


def _one_run_per_seed(cell: Cell, runs: pd.DataFrame, what: str) -> None:
    """A cell compares one faulty run and its twin per seed: two runs of one seed (a store filled by two
    plans, e.g. a mid-run fault trained at two onsets for the same seed) would be counted as two seeds."""
    twice = runs[runs.duplicated("seed", keep=False)].sort_values(["seed", "run_id"])
    if not twice.empty:
        seed = twice["seed"].iloc[0]
        ids = list(twice[twice["seed"] == seed]["run_id"])
        raise ConfigError(f"cell {cell.label} holds {len(ids)} {what} runs of seed {seed} ({', '.join(ids)}): "
                          f"the store holds two plans' runs for one cell; move all but one of them out of the "
                          f"store's runs/ and build again")


def _by_seed(runs: pd.DataFrame) -> list[str]:
    return list(runs.sort_values(["seed", "run_id"])["run_id"])


def cell_slug(label: str, base: str) -> str:
    """A cell's name in file names (its trace plot ``traces_<slug>.png``), from its label and base
    configuration hash, both columns of catalogue.parquet (``cell``, ``base``)."""
    text = f"{label.replace(' | ', '__')}-{base[:6]}"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in text)


@dataclass
class Cell:
    info: dict[str, Any]
    faulty: list[str]
    healthy: list[str]
    controls: list[str]
    suffix: str = ""

    @property
    def setup(self) -> str:
        i = self.info
        return setup_label(i["algo"], i["algo_variant"], i["env"], i["backend"])

    @property
    def label(self) -> str:
        i = self.info
        params = dict(json.loads(i["fault_params"]))
        extra = "".join(f" {k}={v}" for k, v in params.items())
        onset = " onset=mid" if i["onset_kind"] == "mid" else ""
        return f"{i['fault']}{extra}{onset} | {self.setup}{self.suffix}"

    @property
    def slug(self) -> str:
        return cell_slug(self.label, self.info["base"])

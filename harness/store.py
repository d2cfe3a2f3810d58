"""The run store: ``<results_dir>/runs/<run_id>/{meta.json, metrics.parquet}``.

A run is complete when its meta.json exists and parses; it is written last, and every
file is written to a temporary name and renamed, so a killed process leaves either a
complete run or an unfinished directory that is redone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config import algo_label
from harness.metrics import COLUMNS

META = "meta.json"
METRICS = "metrics.parquet"


def run_id(key: dict[str, Any]) -> str:
    """A readable prefix and a stable hash of the run's identifying config."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    algo = algo_label(key["algo"]["name"], key["algo"]["variant"])
    return (f"{algo}-{key['env']['name']}-{key['backend']['name']}-"
            f"{key['fault_name']}-s{key['seed']}-{digest}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode())


def atomic_write_parquet(path: Path, df: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    return str(obj)


def metrics_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> a frame with every canonical column, in order (NaN where absent)."""
    df = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    df["update"] = df["update"].astype("int64")
    df["env_step"] = df["env_step"].astype("int64")
    df["fault_active"] = df["fault_active"].astype(bool)
    for col in COLUMNS[3:]:
        df[col] = df[col].astype("float64")
    return df


class RunStore:
    def __init__(self, results_dir: str | Path):
        self.root = Path(results_dir)
        self.runs = self.root / "runs"

    def run_dir(self, rid: str) -> Path:
        return self.runs / rid

    def load_meta(self, rid: str) -> dict[str, Any] | None:
        """The run's meta, or None when the run is absent or unfinished."""
        try:
            meta = json.loads((self.run_dir(rid) / META).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return meta if isinstance(meta, dict) and meta.get("status") else None

    def load_metrics(self, rid: str) -> pd.DataFrame:
        return pd.read_parquet(self.run_dir(rid) / METRICS)

    def save(self, rid: str, meta: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        run_dir = self.run_dir(rid)
        atomic_write_parquet(run_dir / METRICS, metrics_frame(rows))
        atomic_write_json(run_dir / META, meta)  # last: its presence marks the run complete

    def discard_unfinished(self, rid: str) -> None:
        run_dir = self.run_dir(rid)
        if run_dir.exists() and self.load_meta(rid) is None:
            shutil.rmtree(run_dir)

    @contextlib.contextmanager
    def lock(self, rid: str) -> Iterator[None]:
        """Serialise work on one run across processes (e.g. parallel jobs sharing a twin)."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{rid}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def iter_metas(self) -> Iterator[dict[str, Any]]:
        """Every complete run's meta, in run_id order."""
        if not self.runs.is_dir():
            return
        for run_dir in sorted(self.runs.iterdir()):
            meta = self.load_meta(run_dir.name)
            if meta is not None:
                yield meta

"""The run store: ``<results_dir>/runs/<run_id>/{meta.json, metrics.parquet, steps.parquet,
episodes.parquet}``.

A run is complete when its meta.json exists, parses, and every file it lists is present with
the size and SHA-256 recorded there; meta.json is written last, and every file is written to a
temporary name and renamed, so a killed process leaves either a complete run or an unfinished
directory that is redone. A file truncated or changed afterwards (a full disk, a bad copy)
makes the run corrupt: it counts as unfinished, the run command retrains it, and readers skip
it with a one-line warning.

Files are created with the user's umask (``0o666 & ~umask``, as ``open()`` would), so a store on a
shared file system is readable by whoever the umask lets read it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.config import algo_label
from harness.metrics import COLUMNS, EPISODE_COLUMNS, REWARD_FN_PREFIX, STEP_COLUMNS

META = "meta.json"
METRICS = "metrics.parquet"
STEPS = "steps.parquet"          # one row per optimizer step (framework views are derived from it)
EPISODES = "episodes.parquet"    # one row per finished episode (PPO)


def run_id(key: dict[str, Any]) -> str:
    """A readable prefix and a stable hash of the run's identifying config."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:12]
    algo = algo_label(key["algo"]["name"], key["algo"]["variant"])
    return (f"{algo}-{key['env']['name']}-{key['backend']['name']}-"
            f"{key['fault_name']}-s{key['seed']}-{digest}")


def umask() -> int:
    """The process's umask (read from /proc where it can be, so no thread sees it changed)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temp_file(path: Path) -> tuple[int, str]:
    """A temporary file beside ``path`` with the mode ``open()`` would give it (mkstemp makes 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = _temp_file(path)
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
    fd, tmp = _temp_file(path)
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


def file_digest(path: Path) -> dict[str, Any]:
    """Size and SHA-256 of a stored file, as meta.json records them."""
    data = path.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def table_frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows -> a frame with exactly ``columns`` (NaN where absent), numeric."""
    df = pd.DataFrame(rows).reindex(columns=list(columns))
    return df.astype({c: "int64" if c == "update" else "float64" for c in columns})


def metrics_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows -> a frame with every canonical column, in order (NaN where absent), then the
    dynamic per-reward-function columns ``reward/<fn>`` the rows hold, sorted."""
    extra = sorted({k for row in rows for k in row if k.startswith(REWARD_FN_PREFIX)})
    df = pd.DataFrame(rows).reindex(columns=[*COLUMNS, *extra])
    df["update"] = df["update"].astype("int64")
    df["env_step"] = df["env_step"].astype("int64")
    df["fault_active"] = df["fault_active"].astype(bool)
    for col in [*COLUMNS[3:], *extra]:
        df[col] = df[col].astype("float64")
    return df


class RunStore:
    def __init__(self, results_dir: str | Path):
        self.root = Path(results_dir)
        self.runs = self.root / "runs"

    def run_dir(self, rid: str) -> Path:
        return self.runs / rid

    def problem(self, rid: str) -> str | None:
        """Why the run is not complete (absent, unfinished, or a file missing, truncated or
        changed since it was written), or None when it is complete."""
        run_dir = self.run_dir(rid)
        try:
            meta = json.loads((run_dir / META).read_text())
        except FileNotFoundError:
            return "absent" if not run_dir.exists() else "unfinished: no meta.json"
        except (json.JSONDecodeError, UnicodeDecodeError):
            return "meta.json is not valid JSON"
        if not (isinstance(meta, dict) and meta.get("status")):
            return "meta.json has no status"
        for name, expected in (meta.get("files") or {}).items():
            path = run_dir / name
            if not path.exists():
                return f"{name} is missing"
            size = path.stat().st_size
            if size != expected["bytes"]:
                return f"{name} has {size} bytes, {expected['bytes']} were written"
            if file_digest(path)["sha256"] != expected["sha256"]:
                return f"{name} does not match the checksum recorded in meta.json"
        return None

    def load_meta(self, rid: str) -> dict[str, Any] | None:
        """The run's meta, or None when the run is absent, unfinished or corrupt."""
        if self.problem(rid) is not None:
            return None
        return json.loads((self.run_dir(rid) / META).read_text())

    def load_metrics(self, rid: str) -> pd.DataFrame:
        return pd.read_parquet(self.run_dir(rid) / METRICS)

    def load_steps(self, rid: str) -> pd.DataFrame:
        path = self.run_dir(rid) / STEPS
        return pd.read_parquet(path) if path.exists() else table_frame([], STEP_COLUMNS)

    def load_episodes(self, rid: str) -> pd.DataFrame:
        path = self.run_dir(rid) / EPISODES
        return pd.read_parquet(path) if path.exists() else table_frame([], EPISODE_COLUMNS)

    def save(self, rid: str, meta: dict[str, Any], rows: list[dict[str, Any]],
             steps: list[dict[str, Any]] | None = None, episodes: list[dict[str, Any]] | None = None,
             files: dict[str, bytes] | None = None) -> dict[str, Any]:
        """Write the run's tables and any extra ``files`` (e.g. a framework's own log, by relative
        path), then meta.json with every file's checksum (last: its presence marks the run complete);
        returns that meta."""
        run_dir = self.run_dir(rid)
        tables = {METRICS: metrics_frame(rows), STEPS: table_frame(steps or [], STEP_COLUMNS),
                  EPISODES: table_frame(episodes or [], EPISODE_COLUMNS)}
        for name, frame in tables.items():
            atomic_write_parquet(run_dir / name, frame)
        for name, data in (files or {}).items():
            (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(run_dir / name, data)
        meta = {**meta, "files": {name: file_digest(run_dir / name) for name in [*tables, *(files or {})]}}
        atomic_write_json(run_dir / META, meta)  # last: its presence marks the run complete
        return meta

    def discard(self, rid: str) -> None:
        """Remove the run, complete or not (``retrain=true`` replaces a stored run)."""
        if self.run_dir(rid).exists():
            shutil.rmtree(self.run_dir(rid))

    def discard_unfinished(self, rid: str) -> None:
        run_dir = self.run_dir(rid)
        if run_dir.exists() and self.problem(rid) is not None:
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

    def iter_metas(self, warn: Callable[[str], None] | None = None) -> Iterator[dict[str, Any]]:
        """Every complete run's meta, in run_id order. A corrupt run (a file missing, truncated
        or changed) is skipped with a one-line ``warn``; an unfinished one (no meta.json yet:
        being trained, or killed) silently."""
        if not self.runs.is_dir():
            return
        for run_dir in sorted(p for p in self.runs.iterdir() if p.is_dir()):
            problem = self.problem(run_dir.name)
            if problem is None:
                yield json.loads((run_dir / META).read_text())
            elif warn is not None and not problem.startswith("unfinished"):
                warn(f"warning: skipping run {run_dir.name}: {problem} (re-run its command to redo it)")

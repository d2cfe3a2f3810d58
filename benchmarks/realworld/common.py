"""What the real-framework generators share: opaque run names, the label file, and a process pool
that runs many jobs per worker (imports paid once per worker, one torch thread each).

This module never imports the harness's agents or faults: the runs are an independent
implementation, and the logs are a TEST SET for ``python -m harness.diagnose`` (see
benchmarks/realworld/README.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from benchmarks.realworld.labels import FAULTS

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "realworld"     # git-ignored (/results/*)
LABELS = "labels.json"


def opaque_name(*parts: Any) -> str:
    """A directory name that says nothing about the bug: a hash of what defines the run."""
    return "run-" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:10]


# Variants only cleanrl_runs.py has (code edits with no SB3/TRL twin), with the harness's fault names.
# The one table is labels.py's FAULTS; these extend it until they move there (fault_of reads both).
MORE_FAULTS: dict[str, str] = {
    "zero_grad_missing": "no_zero_grad",
    "adv_neg": "adv_sign_flip",
    "gae_ignores_dones": "gae_no_done_mask",
}


def fault_of(variant: str) -> str:
    """The harness's name for a variant (labels.py's FAULTS, extended by MORE_FAULTS)."""
    names = {**MORE_FAULTS, **FAULTS}
    if variant not in names:
        raise KeyError(f"variant {variant!r} has no entry in benchmarks/realworld/labels.py FAULTS nor "
                       f"common.py MORE_FAULTS; valid: {', '.join(names)}")
    return names[variant]


def read_labels(root: Path) -> dict[str, dict[str, Any]]:
    path = root / LABELS
    return json.loads(path.read_text()) if path.exists() else {}


def write_labels(root: Path, labels: dict[str, dict[str, Any]]) -> None:
    """labels.json beside the logs: {log path relative to this file: label}; written atomically."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{LABELS}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(dict(sorted(labels.items())), indent=1) + "\n")
    tmp.replace(root / LABELS)


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """An exclusive lock on ``root`` (two generators may write into one directory at once, e.g. the
    TRL script-settings set and the TRL-defaults set)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def add_labels(root: Path, new: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Merge ``new`` into labels.json under the lock (what another process added meanwhile is kept)."""
    with locked(root):
        labels = read_labels(root)
        labels.update(new)
        write_labels(root, labels)
    return labels


def write_generation(root: Path, jobs: list[dict[str, Any]], failures: list[dict[str, Any]], wall: float,
                     n_jobs: int, key: str | None = None, **extra: Any) -> dict[str, Any]:
    """generation.json: runs, failures, this invocation's wall time and the summed per-run wall and CPU
    seconds of the planned runs. With ``key`` the summary is stored under ``sets[key]`` (one entry per
    set of runs sharing the directory) and the top level sums every labelled run."""
    labels = read_labels(root)
    names = {j["name"] for j in jobs}
    mine = [v for v in labels.values() if v["name"] in names]
    summary = {"runs": len(jobs), "labelled": len(mine), "failed": len(failures), "wall_s": round(wall, 1),
               "jobs": n_jobs, "run_wall_s_sum": round(sum(v["wall_s"] for v in mine), 1),
               "run_cpu_s_sum": round(sum(v.get("cpu_s", 0) for v in mine), 1), **extra}
    path = root / "generation.json"
    with locked(root):
        if key is None:
            out = summary
        else:
            old = json.loads(path.read_text()) if path.exists() else {}
            sets = {**old.get("sets", {}), key: summary}
            out = {"labelled": len(labels), "run_wall_s_sum": round(sum(v["wall_s"] for v in labels.values()), 1),
                   "run_cpu_s_sum": round(sum(v.get("cpu_s", 0) for v in labels.values()), 1), "sets": sets}
        path.write_text(json.dumps(out, indent=1) + "\n")
    return summary


def _init_worker() -> None:
    import torch
    torch.set_num_threads(1)


def cpu_seconds() -> float:
    """CPU time of this process plus its finished children (CleanRL runs as a subprocess)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _call(fn: Callable[..., dict[str, Any]], job: dict[str, Any], root: str) -> dict[str, Any]:
    start, cpu = time.perf_counter(), cpu_seconds()
    try:
        out = fn(job, Path(root))
    except Exception:  # a crashed run is reported, the others go on
        return {"error": traceback.format_exc(), "job": job, "wall_s": time.perf_counter() - start}
    for label in out.values():        # CPU time (one torch thread): the cost on a free core
        label["cpu_s"] = round(cpu_seconds() - cpu, 2)
    return out


def run_jobs(fn: Callable[[dict[str, Any], Path], dict[str, Any]], jobs: Iterable[dict[str, Any]], root: Path,
             n_jobs: int) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], float]:
    """Run ``fn(job, root) -> {log path: label}`` for every job not already labelled, in ``n_jobs``
    worker processes; labels.json is merged (under a lock) after every finished run, so an interrupted
    generation resumes and two generators can share a directory. Returns (labels, failures, wall seconds)."""
    root.mkdir(parents=True, exist_ok=True)
    labels = read_labels(root)
    done = {v["name"] for v in labels.values()}
    todo = [j for j in jobs if j["name"] not in done]
    failures: list[dict[str, Any]] = []
    start = time.perf_counter()
    print(f"{len(todo)} runs to do ({len(done)} already labelled) in {root}, {n_jobs} worker(s)", flush=True)
    if n_jobs <= 1:                          # in this process, its torch threads untouched
        results = (_call(fn, j, str(root)) for j in todo)
        futures = None
    else:
        pool = ProcessPoolExecutor(max_workers=n_jobs, mp_context=get_context("spawn"), initializer=_init_worker)
        futures = [pool.submit(_call, fn, j, str(root)) for j in todo]
        results = (f.result() for f in as_completed(futures))
    for i, out in enumerate(results, 1):
        if "error" in out:
            failures.append(out)
            print(f"[{i}/{len(todo)}] FAILED {out['job']['name']}: {out['error'].strip().splitlines()[-1]}",
                  file=sys.stderr, flush=True)
            continue
        labels = add_labels(root, out)
        label = next(iter(out.values()))
        print(f"[{i}/{len(todo)}] {label['name']} {label['env']} {label['variant']} seed {label['seed']}: "
              f"{label['wall_s']:.1f} s, {label['cpu_s']:.1f} s CPU "
              f"({time.perf_counter() - start:.0f} s elapsed)", flush=True)
    if futures is not None:
        pool.shutdown()
    return labels, failures, time.perf_counter() - start

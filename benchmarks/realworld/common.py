"""What the real-framework generators share: opaque run names, the label file, and a process pool
that runs many jobs per worker (imports paid once per worker, one torch thread each).

This module never imports the harness's agents or faults: the runs are an independent
implementation, and the logs are a TEST SET for ``python -m harness.diagnose`` (see
benchmarks/realworld/README.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from benchmarks.realworld.evaluate import FAULTS

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "results" / "realworld"     # git-ignored (/results/*)
LABELS = "labels.json"


def opaque_name(*parts: Any) -> str:
    """A directory name that says nothing about the bug: a hash of what defines the run."""
    return "run-" + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:10]


def fault_of(variant: str) -> str:
    """The harness's name for a variant (the one name table lives in evaluate.py: FAULTS)."""
    if variant not in FAULTS:
        raise KeyError(f"variant {variant!r} has no entry in benchmarks/realworld/evaluate.py FAULTS; "
                       f"valid: {', '.join(FAULTS)}")
    return FAULTS[variant]


def read_labels(root: Path) -> dict[str, dict[str, Any]]:
    path = root / LABELS
    return json.loads(path.read_text()) if path.exists() else {}


def write_labels(root: Path, labels: dict[str, dict[str, Any]]) -> None:
    """labels.json beside the logs: {log path relative to this file: label}; written atomically."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{LABELS}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(dict(sorted(labels.items())), indent=1) + "\n")
    tmp.replace(root / LABELS)


def _init_worker() -> None:
    import torch
    torch.set_num_threads(1)


def _call(fn: Callable[..., dict[str, Any]], job: dict[str, Any], root: str) -> dict[str, Any]:
    start, cpu = time.perf_counter(), time.process_time()
    try:
        out = fn(job, Path(root))
    except Exception:  # a crashed run is reported, the others go on
        return {"error": traceback.format_exc(), "job": job, "wall_s": time.perf_counter() - start}
    for label in out.values():        # this process's CPU time (one torch thread): the cost on a free core
        label["cpu_s"] = round(time.process_time() - cpu, 2)
    return out


def run_jobs(fn: Callable[[dict[str, Any], Path], dict[str, Any]], jobs: Iterable[dict[str, Any]], root: Path,
             n_jobs: int) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], float]:
    """Run ``fn(job, root) -> {log path: label}`` for every job not already labelled, in ``n_jobs``
    worker processes; labels.json is rewritten after every finished run (an interrupted generation
    resumes). Returns (labels, failures, wall seconds)."""
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
        labels.update(out)
        write_labels(root, labels)
        label = next(iter(out.values()))
        print(f"[{i}/{len(todo)}] {label['name']} {label['env']} {label['variant']} seed {label['seed']}: "
              f"{label['wall_s']:.1f} s, {label['cpu_s']:.1f} s CPU "
              f"({time.perf_counter() - start:.0f} s elapsed)", flush=True)
    if futures is not None:
        pool.shutdown()
    return labels, failures, time.perf_counter() - start

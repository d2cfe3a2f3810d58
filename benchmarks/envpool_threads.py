"""EnvPool's worker threads beside a learner: native PPO with ``env.engine=envpool``, run
alone and as a sweep runs it (one process per core, side by side), with EnvPool's default thread pool
and with one worker thread per env made (what ``harness.envs.EnvPoolVectorEnv`` uses).

    python benchmarks/envpool_threads.py [--env hopper] [--seeds 10] [--updates 4] [--procs 2] [--record]

Each job trains ``--seeds`` seeds of ``algo=ppo env=ENV`` (16 envs x 128 steps per update) for
``--updates`` updates, one after the other, in a fresh results_dir, one torch thread;
the wall time of each job is measured, and the metrics of both thread settings are compared (they must
be identical: the thread count changes no episode). ``--record`` writes
benchmarks/results/envpool_threads.json. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {"default pool": 0, "one thread": 1}     # EnvPool's num_threads (0: its own default)


def job(args: tuple[int, str, int, int]) -> dict[str, Any]:
    """Train the seeds with EnvPool's ``num_threads``; the wall time and a hash of every seed's metrics."""
    threads, env, seeds, updates = args
    os.environ["OMP_NUM_THREADS"] = "1"
    import harness.envs as envs
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    envs.ENVPOOL_THREADS = threads
    with tempfile.TemporaryDirectory() as tmp:
        common = ["algo=ppo", f"env={env}", "env.engine=envpool", "progress=false",
                  f"env.total_timesteps={16 * 128 * updates}", f"results_dir={tmp}"]
        exps = [make_experiment([*common, f"seed={s}"]) for s in range(seeds)]
        start = time.perf_counter()
        results = [get_or_train(exp) for exp in exps]
        wall = time.perf_counter() - start
        digest = hashlib.sha256(b"".join(r.metrics.to_csv(index=False).encode() for r in results)).hexdigest()
    return {"threads": threads, "wall_s": round(wall, 2), "metrics_sha256": digest[:16]}


def measure(env: str, seeds: int, updates: int, procs: int) -> list[dict[str, Any]]:
    """Every setting alone and with ``procs`` jobs side by side (spawned processes)."""
    rows = []
    ctx = mp.get_context("spawn")
    for side_by_side in (1, procs):
        for name, threads in SETTINGS.items():
            with ctx.Pool(side_by_side) as pool:
                out = pool.map(job, [(threads, env, seeds, updates)] * side_by_side)
            wall = max(o["wall_s"] for o in out)
            steps = side_by_side * seeds * 16 * 128 * updates
            rows.append({"setting": name, "num_threads": threads, "processes": side_by_side, "wall_s": wall,
                         "env_steps_per_s": round(steps / wall), "metrics_sha256": out[0]["metrics_sha256"]})
            print(f"{name:13s} {side_by_side} process(es): {wall:6.1f} s, {rows[-1]['env_steps_per_s']} env steps/s",
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="hopper", help="an env config the harness has (default hopper)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds per job, as a catalogue cell (10)")
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 2, help="jobs side by side (a sweep: one per core)")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/envpool_threads.json")
    args = parser.parse_args()
    rows = measure(args.env, args.seeds, args.updates, args.procs)
    if len({r["metrics_sha256"] for r in rows}) != 1:
        raise SystemExit("the thread settings gave different metrics: EnvPool's episodes depend on its threads")
    ratio = {p: next(r["wall_s"] for r in rows if r["processes"] == p and r["num_threads"] == 0)
             / next(r["wall_s"] for r in rows if r["processes"] == p and r["num_threads"] == 1)
             for p in sorted({r["processes"] for r in rows})}
    print("one thread vs the default pool, wall-time ratio: " + ", ".join(f"{p} process(es) x{v:.2f}"
                                                                         for p, v in ratio.items()))
    if args.record:
        import envpool

        out = {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "command": "python benchmarks/envpool_threads.py " + " ".join(sys.argv[1:]),
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "envpool": envpool.__version__},
               "env": args.env, "seeds": args.seeds, "updates": args.updates, "rows": rows,
               "speedup_one_thread": {str(p): round(v, 2) for p, v in ratio.items()}, "metrics_identical": True}
        path = ROOT / "benchmarks" / "results" / "envpool_threads.json"
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"recorded -> {path}")


if __name__ == "__main__":
    main()

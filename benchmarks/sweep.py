"""Sweep speed: the default catalogue sweep's wall time, and the speed-up from 1 to 2 workers.

    python benchmarks/sweep.py [--skip-full] [--record]

1. The default catalogue sweep (``python -m harness -m +sweep=catalogue``, all local cores
   through joblib) into a fresh results_dir: wall time, imports included.
2. A fixed sub-sweep (4 faults incl. none on both setups + controls, 2 seeds: 20 runs) with
   ``hydra.launcher.n_jobs=1`` and then ``=2``, each into a fresh results_dir: the speed-up.

``--record`` writes the figures to benchmarks/results/sweep.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

SUBSET = ["hydra.sweeper.seeds=2", "hydra.sweeper.faults=[none,shared_policy,tiny_clip,zero_reward]"]


def sweep(results_dir: str, *extra: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness", "-m", "+sweep=catalogue", f"results_dir={results_dir}",
                    *extra], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-full", action="store_true", help="skip the full default sweep")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/sweep.json")
    args = parser.parse_args()
    figures: dict[str, float | int | str] = {"cores": os.cpu_count() or 1}

    if not args.skip_full:
        with tempfile.TemporaryDirectory() as tmp:
            figures["full_sweep_s"] = round(sweep(tmp), 1)
            figures["full_sweep_runs"] = len(list(Path(tmp, "runs").iterdir()))
        print(f"default catalogue sweep: {figures['full_sweep_runs']} runs in {figures['full_sweep_s']} s "
              f"on {figures['cores']} cores", flush=True)
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            figures[f"subset_{workers}_worker_s"] = round(sweep(tmp, *SUBSET, f"hydra.launcher.n_jobs={workers}"), 1)
        print(f"sub-sweep (20 runs), {workers} worker(s): {figures[f'subset_{workers}_worker_s']} s", flush=True)
    figures["speedup_1_to_2"] = round(figures["subset_1_worker_s"] / figures["subset_2_worker_s"], 2)
    print(f"speedup_1_to_2_workers={figures['speedup_1_to_2']}"
          + (f" full_sweep_s={figures['full_sweep_s']}" if "full_sweep_s" in figures else ""))
    if args.record:
        figures.update(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       python=platform.python_version(), machine=platform.machine())
        out = Path(__file__).parent / "results" / "sweep.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

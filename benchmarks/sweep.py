"""Sweep speed: the default catalogue sweep's wall time, and its speed-up from 1 to 2 workers.

    python benchmarks/sweep.py [--quick] [--record]

Runs the catalogue sweep (``python -m harness -m +sweep=catalogue``) into a fresh results_dir with
``hydra.launcher.n_jobs=1`` and then ``=2``, imports included, and prints both wall times and the
speed-up. The preset itself is 4,320 runs (hours on 2 cores, twice); ``--quick`` uses a
sub-sweep instead: 4 faults incl. none, 2 seeds, onset 0, on native PPO on CartPole and native GRPO
with their controls. ``--record`` writes the figures to benchmarks/results/sweep.json.
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

SUBSET = ["hydra.sweeper.seeds=2", "hydra.sweeper.faults=[none,shared_policy,tiny_clip,zero_reward]",
          "hydra.sweeper.onsets=[0]",
          "hydra.sweeper.setups=[{algo:ppo,env:cartpole,backend:native},{algo:grpo,env:toyseq,backend:native}]",
          "hydra.sweeper.controls=[{algo:ppo_single_pass,env:cartpole,backend:native},"
          "{algo:grpo_single_pass,env:toyseq,backend:native}]"]


def sweep(results_dir: str, *extra: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness", "-m", "+sweep=catalogue", f"results_dir={results_dir}",
                    *extra], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small sub-sweep instead of the preset")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/sweep.json")
    args = parser.parse_args()
    extra = SUBSET if args.quick else []
    figures: dict[str, float | int | str] = {"sweep": "quick" if args.quick else "default", "cores": os.cpu_count() or 1}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            figures[f"wall_s_{workers}_worker"] = round(sweep(tmp, *extra, f"hydra.launcher.n_jobs={workers}"), 1)
            figures["runs"] = len(list(Path(tmp, "runs").iterdir()))
        print(f"{figures['sweep']} catalogue sweep, {figures['runs']} runs, {workers} worker(s): "
              f"{figures[f'wall_s_{workers}_worker']} s", flush=True)
    figures["speedup_1_to_2"] = round(figures["wall_s_1_worker"] / figures["wall_s_2_worker"], 2)
    print(f"sweep_wall_s_2_workers={figures['wall_s_2_worker']} speedup_1_to_2_workers={figures['speedup_1_to_2']}")
    if args.record:
        figures.update(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       python=platform.python_version(), machine=platform.machine())
        out = Path(__file__).parent / "results" / "sweep.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

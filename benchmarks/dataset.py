"""Dataset sweep speed: the default diverse dataset's wall time on this machine's cores.

    python benchmarks/dataset.py [--size N] [--keep DIR] [--record]

Runs ``python -m harness -m +sweep=dataset`` (imports included) into a fresh results_dir (or
``--keep DIR``, which is then reused as the published store), with the joblib launcher on every
core, and prints the wall time, the number of runs per env / backend / fault, and the distinct
values of every sampled hyperparameter (issue 12's "done when"). ``--record`` writes the figures to
benchmarks/results/dataset.json. Run it on an otherwise idle machine.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=None, help="runs to sample (default: the sweep's own, 600)")
    parser.add_argument("--keep", default=None, help="train into this results_dir and keep it")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/dataset.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        extra = [f"hydra.sweeper.size={args.size}"] if args.size else []
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "harness", "-m", "+sweep=dataset", f"results_dir={root}", *extra],
                       check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        metas = [json.loads(p.read_text()) for p in root.glob("runs/*/meta.json")]
    diverse = [m for m in metas if m.get("sampled")]
    values: dict[str, set] = {}
    for m in diverse:
        for k, v in m["sampled"]["algo"].items():
            values.setdefault(f"{m['algo']}.{k}", set()).add(v)
    count = lambda key: dict(sorted({v: sum(1 for m in diverse if key(m) == v) for v in {key(m) for m in diverse}}.items()))  # noqa: E731
    figures = {
        "runs": len(diverse), "cores": os.cpu_count() or 1, "wall_s": round(wall, 1),
        "runs_per_minute": round(len(diverse) / wall * 60, 1),
        "status": count(lambda m: m["status"]),
        "healthy_share": round(sum(m["fault"] == "none" for m in diverse) / max(len(diverse), 1), 3),
        "mid_onset_runs": sum(1 for m in diverse if (m.get("onset_update") or 0) > 0),
        "setups": count(lambda m: f"{m['algo']}/{m['env']}/{m['backend']}"),
        "faults": count(lambda m: m["fault"]),
        "distinct_values": {k: len(v) for k, v in sorted(values.items())},
        "train_seconds_median": sorted(m["wall_s"] for m in diverse)[len(diverse) // 2] if diverse else None,
    }
    print(json.dumps(figures, indent=2))
    print(f"dataset_runs={figures['runs']} dataset_wall_s={figures['wall_s']} on {figures['cores']} cores")
    if args.record:
        figures.update(date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       python=platform.python_version(), machine=platform.machine())
        out = Path(__file__).parent / "results" / "dataset.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

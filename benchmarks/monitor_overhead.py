"""What the live monitor costs: stable-baselines3's PPO at its own defaults (CartPole-v1, 2048 x 1 env,
10 epochs of batch 64, lr 3e-4) trained for the same updates with and without
``callback=HarnessMonitor()`` (default options: checks kept under 3% of the wall time), same seed,
one torch thread, alternately (``--repeats`` pairs); the overhead is the time the monitor spent in
its checks over the plain run's wall time (the wall-time difference is printed too, but on a shared
machine it is within the noise); and the cost of one check (the diagnosis on the log so far) at
several log lengths.

    python benchmarks/monitor_overhead.py [--updates 12] [--repeats 2] [--record]

The last line is ``overhead=X% per_update_s=S check_ms=M``; ``--record`` writes
benchmarks/results/monitor_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def train(updates: int, monitored: bool, seed: int = 0) -> tuple[float, int, float]:
    """Seconds for ``updates`` PPO updates at SB3's defaults, the monitor's checks and the seconds it
    spent in them (0 without)."""
    from stable_baselines3 import PPO

    from harness.monitor.sb3 import HarnessMonitor

    model = PPO("MlpPolicy", "CartPole-v1", seed=seed, device="cpu", verbose=0)
    callback = HarnessMonitor(emit=None) if monitored else None
    start = time.perf_counter()
    model.learn(2048 * updates, callback=callback)
    wall = time.perf_counter() - start
    return wall, (callback.monitor.checks if callback else 0), (callback.monitor.spent if callback else 0.0)


def check_cost(lengths: tuple[int, ...] = (20, 100, 400)) -> dict[int, float]:
    """Milliseconds per check on a real CleanRL log (tests/data) repeated to each length."""
    import pandas as pd

    from harness.logs import load_log
    from harness.monitor.core import Monitor

    log = load_log(ROOT / "tests" / "data" / "cleanrl_pair" / "healthy")
    monitor = Monitor("cleanrl", emit=None, budget=1.0)
    out = {}
    for n in lengths:
        frame = pd.concat([log.metrics] * (n // len(log.metrics) + 1), ignore_index=True).iloc[:n]
        sized = type(log)(**{**log.__dict__, "metrics": frame})
        monitor.assess(sized)
        start = time.perf_counter()
        for _ in range(5):
            monitor.assess(sized)
        out[n] = (time.perf_counter() - start) / 5 * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    train(1, True)                      # imports, model load
    plain, watched, checks, spent = [], [], [], []
    for _ in range(args.repeats):
        plain.append(train(args.updates, False)[0])
        wall, n, s = train(args.updates, True)
        watched.append(wall)
        checks.append(n)
        spent.append(s)
    base, mon = min(plain), min(watched)
    overhead = max(spent) / base          # the time inside the monitor's checks, measured by the monitor
    costs = check_cost()
    for n, ms in costs.items():
        print(f"one check on a log of {n} updates: {ms:.0f} ms")
    print(f"SB3 PPO defaults, {args.updates} updates: {base:.1f} s plain, {mon:.1f} s with the monitor "
          f"({checks[-1]} checks taking {max(spent):.2f} s), best of {args.repeats}; the wall-time difference "
          f"({mon / base - 1:+.1%}) is within the run-to-run noise on a shared machine, the time in checks is not")
    print(f"overhead={overhead:.1%} per_update_s={base / args.updates:.2f} check_ms={costs[100]:.0f}")
    if args.record:
        out = ROOT / "benchmarks" / "results" / "monitor_overhead.json"
        out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "updates": args.updates, "repeats": args.repeats, "plain_s": plain,
                                   "monitored_s": watched, "checks": checks, "check_s": spent, "overhead": overhead,
                                   "check_ms": {str(k): v for k, v in costs.items()}}, indent=2) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

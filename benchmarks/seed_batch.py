"""Seed-batched native PPO (engine=seed_batched) against the loop, per framework setting.

For each setting (the catalogue's CartPole cells, CleanRL's ppo.py on CartPole, SB3's PPO() defaults on
CartPole, CleanRL's ppo_continuous_action.py defaults on Pendulum) and each batch size S, S healthy seeds train
``--updates`` updates one after the other (the loop: harness.agents.ppo.train) and as one batch
(harness.agents.ppo_seeds.train_seeds), one torch thread, in this process. Reported: seconds per run
(S seeds' wall time / S) and the speed-up, the algorithm alone (no run store). Run it on an idle
machine: it measures wall time. One short run of each engine goes first, untimed (first-call costs).

    python benchmarks/seed_batch.py [--updates N] [--sizes 1,4,16] [--out benchmarks/results/seed_batch.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

SETTINGS = {
    # the catalogue sweep's CartPole cells (harness defaults: 16 envs x 128 steps, 10 epochs x 4 minibatches)
    "catalogue_cartpole": ("cartpole", dict(num_envs=16, n_steps=128, n_epochs=10, n_minibatches=4, lr=1e-3,
                                            anneal_lr=False, ent_coef=0.0)),
    "cleanrl_cartpole": ("cartpole", dict(num_envs=4, n_steps=128, n_epochs=4, n_minibatches=4, lr=2.5e-4,
                                          anneal_lr=True, ent_coef=0.01)),
    "sb3_cartpole": ("cartpole", dict(num_envs=1, n_steps=2048, n_epochs=10, n_minibatches=32, lr=3e-4,
                                      anneal_lr=False, ent_coef=0.0)),
    "cleanrl_pendulum": ("pendulum", dict(num_envs=1, n_steps=2048, n_epochs=10, n_minibatches=32, lr=3e-4,
                                          anneal_lr=True, ent_coef=0.0)),
}


def experiments(setting: str, updates: int, size: int, results: str) -> list:
    from harness.pipeline.compose import make_experiment

    env, hp = SETTINGS[setting]
    batch = hp["num_envs"] * hp["n_steps"]
    base = make_experiment(["algo=ppo", f"env={env}", "fault=none", f"results_dir={results}", "twin=false",
                            "progress=false", f"env.total_timesteps={batch * updates}",
                            *(f"algo.{k}={v}" for k, v in hp.items())])
    return [dataclasses.replace(base, seed=s) for s in range(size)]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--sizes", default="1,4,16")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--out", default="benchmarks/results/seed_batch.json")
    args = parser.parse_args()
    from harness.agents import ppo
    from harness.agents.ppo_seeds import train_seeds

    torch.set_num_threads(1)
    warm = experiments("cleanrl_cartpole", 1, 2, "/tmp/seed_batch_bench")   # imports, first-call costs: untimed
    list(ppo.train(warm[0]))
    list(train_seeds(warm))
    rows = []
    for setting in args.settings.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            exps = experiments(setting, args.updates, size, "/tmp/seed_batch_bench")
            loop = timed(lambda: [list(ppo.train(e)) for e in exps])
            batched = timed(lambda: list(train_seeds(exps)))
            row = {"setting": setting, "seeds": size, "updates": args.updates,
                   "loop_s_per_run": round(loop / size, 3), "batched_s_per_run": round(batched / size, 3),
                   "speedup": round(loop / batched, 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "torch": torch.__version__, "threads": 1,
           "command": "python benchmarks/seed_batch.py " + " ".join(f"--{k} {v}" for k, v in vars(args).items()
                                                                    if k != "out"),
           "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"{r['setting']:18s} S={r['seeds']:2d}: loop {r['loop_s_per_run']:.2f} s/run, "
              f"batched {r['batched_s_per_run']:.2f} s/run, x{r['speedup']:.2f}")


if __name__ == "__main__":
    main()

"""Throughput: native PPO (full metric recording, run store) vs stable-baselines3 PPO.

Also the harness's ``backend=sb3`` path (SB3's PPO with the instrumentation that measures the
canonical metrics), to show what the instrumentation costs, and GRPO on the default token task (env=toyseq): generated tokens per second, generation and
update together, and how the time splits between them.

PPO: identical hyperparameters: CartPole-v1, 16 envs x 128 steps, 4 epochs, 4 minibatches
(batch 2048, minibatch 512), lr 2.5e-4, gamma 0.99, GAE 0.95, clip 0.2, 64-64 tanh MLPs,
Adam eps 1e-5, grad clip 0.5, 100k env steps, one torch thread. Both run in this
process, one after the other. Peak memory is measured separately, each trainer in a
forked child (ru_maxrss), so the two do not mask each other.

    python benchmarks/throughput.py [--steps N] [--skip-cli] [--record]

The last line is ``native_sps=N sb3_sps=N ratio=R``; ``--record`` writes every figure to
benchmarks/results/throughput.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import torch

STEPS = 100_000
HP = dict(num_envs=16, n_steps=128, n_epochs=4, n_minibatches=4, lr=2.5e-4, gamma=0.99,
          gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5)


def native(steps: int, backend: str = "native") -> float:
    """The harness path (run store included) on a backend: native PPO, or SB3's PPO with the
    harness's instrumentation (backend=sb3)."""
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    overrides = [f"algo.{k}={v}" for k, v in HP.items()] + [f"env.total_timesteps={steps}", "fault=none",
                                                             f"backend={backend}"]
    with tempfile.TemporaryDirectory() as tmp:
        exp = make_experiment([*overrides, f"results_dir={tmp}"])
        start = time.perf_counter()
        res = get_or_train(exp)
        wall = time.perf_counter() - start
    assert res.meta["status"] == "ok"
    return int(res.metrics["env_step"].iloc[-1]) / wall


def sb3(steps: int) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=HP["num_envs"], seed=0)
    batch = HP["num_envs"] * HP["n_steps"]
    model = PPO("MlpPolicy", env, n_steps=HP["n_steps"], batch_size=batch // HP["n_minibatches"],
                n_epochs=HP["n_epochs"], learning_rate=HP["lr"], gamma=HP["gamma"],
                gae_lambda=HP["gae_lambda"], clip_range=HP["clip_range"], ent_coef=HP["ent_coef"],
                vf_coef=HP["vf_coef"], max_grad_norm=HP["max_grad_norm"], seed=0, device="cpu",
                policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh))
    n = (steps // batch) * batch
    start = time.perf_counter()
    model.learn(total_timesteps=n)
    return n / (time.perf_counter() - start)


def grpo(tokens: int | None = None) -> tuple[float, float]:
    """GRPO on the default token task: (generated tokens per second, share of time in the update)."""
    from harness.agents import grpo as grpo_agent
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import get_or_train

    update_s = [0.0]
    shared_update = grpo_agent.ppo_update

    def timed_update(*args, **kwargs):
        start = time.perf_counter()
        out = shared_update(*args, **kwargs)
        update_s[0] += time.perf_counter() - start
        return out

    overrides = ["algo=grpo", "env=toyseq", "fault=none"]
    if tokens:
        overrides.append(f"env.total_timesteps={tokens}")
    with tempfile.TemporaryDirectory() as tmp:
        exp = make_experiment([*overrides, f"results_dir={tmp}"])
        from harness.agents import sft
        sft.load_checkpoint(exp)               # the shared warm-up checkpoint is not part of the run
        grpo_agent.ppo_update = timed_update   # measure how the time splits, nothing else changes
        try:
            start = time.perf_counter()
            res = get_or_train(exp)
            wall = time.perf_counter() - start
        finally:
            grpo_agent.ppo_update = shared_update
    assert res.meta["status"] == "ok"
    return int(res.metrics["env_step"].iloc[-1]) / wall, update_s[0] / wall


def peak_rss_mb(fn, steps: int) -> float:
    """Peak resident memory of a forked child that imports and runs ``fn``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        fn(steps)
        os.write(write, str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).encode())
        os._exit(0)
    os.close(write)
    data = os.read(read, 64)
    os.waitpid(pid, 0)
    return int(data) / 1024


def cli_wall() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "harness", "fault=shared_policy", f"results_dir={tmp}"],
                       check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--skip-cli", action="store_true", help="skip timing python -m harness")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/throughput.json")
    args = parser.parse_args()
    figures: dict[str, float | int | str] = {}
    torch.set_num_threads(1)
    # Both trainers build an Adam optimizer, whose first construction imports torch._dynamo
    # (~1.3 s); pay that once here so neither timing includes it.
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])

    figures["native_rss_mb"], figures["sb3_rss_mb"] = peak_rss_mb(native, args.steps), peak_rss_mb(sb3, args.steps)
    print(f"peak RSS, native PPO: {figures['native_rss_mb']:.0f} MB", flush=True)
    print(f"peak RSS, SB3 PPO:    {figures['sb3_rss_mb']:.0f} MB", flush=True)
    if not args.skip_cli:
        figures["main_job_s"] = cli_wall()
        print(f"python -m harness fault=shared_policy (fault + twin, fresh store): {figures['main_job_s']:.1f} s wall",
              flush=True)
    tokens_per_s, update_share = grpo()
    print(f"grpo_tokens_per_s={tokens_per_s:.0f} (generation + update; {update_share:.0%} of the time "
          f"in the update)", flush=True)
    native_sps = native(args.steps)
    sb3_sps = sb3(args.steps)
    harness_sb3_sps = native(args.steps, backend="sb3")
    print(f"harness backend=sb3 (SB3's PPO + instrumentation + run store): {harness_sb3_sps:.0f} env steps/s, "
          f"{harness_sb3_sps / sb3_sps:.0%} of bare SB3", flush=True)
    print(f"native_sps={native_sps:.0f} sb3_sps={sb3_sps:.0f} ratio={native_sps / sb3_sps:.2f}")
    if args.record:
        import json
        import platform
        from datetime import datetime, timezone
        from pathlib import Path

        figures.update(native_sps=native_sps, sb3_sps=sb3_sps, ratio=native_sps / sb3_sps,
                       harness_sb3_sps=harness_sb3_sps, grpo_tokens_per_s=tokens_per_s, grpo_update_share=update_share)
        out = Path(__file__).resolve().parent / "results" / "throughput.json"
        out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "command": "python benchmarks/throughput.py " + " ".join(sys.argv[1:]),
                                   "machine": platform.machine(), "cpus": os.cpu_count(), "torch": torch.__version__,
                                   "steps": args.steps, **{k: round(v, 3) if isinstance(v, float) else v
                                                           for k, v in figures.items()}}, indent=1) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

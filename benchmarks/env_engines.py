"""Env engines side by side: gymnasium's vector envs (what the harness uses: an env's own vectorised
class where it has one, else SyncVectorEnv), gymnasium's AsyncVectorEnv and EnvPool, in env steps per
second of uniformly random actions, and whether each engine's episode semantics match what the
harness's rollout loops and faults assume.

    python benchmarks/env_engines.py [--envs CartPole-v1 ...] [--num-envs 1 8 32] [--steps 20000] [--record]

Semantics compared against gymnasium's (the reference the faults are written for), per env:
- autoreset: the step after an episode ends returns the reset observation with reward 0 and no
  done flag (gymnasium's NEXT_STEP mode, which harness.envs requires; the done step itself carries
  the episode's final observation, which value_bootstrap_stale and truncation_as_termination use);
- time limit: the step cap and that reaching it sets ``truncated``, not ``terminated``;
- spaces: observation and action shapes, dtypes and bounds;
- dynamics: under the same random policy, the mean episode length and mean reward per step (within
  a tolerance: the two engines draw different initial states).

Every engine runs in this process with one torch/OpenMP thread (AsyncVectorEnv: one subprocess per
env). ``--record`` writes benchmarks/results/env_engines.json and .md. EnvPool is optional
(``pip install -e '.[envs]'``: envpool, mujoco, imageio); a missing engine or env is a row saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ENVS = ["CartPole-v1", "Acrobot-v1", "LunarLander-v3", "Pendulum-v1", "HalfCheetah-v5", "Hopper-v5"]
ENGINES = ["gymnasium", "gymnasium_async", "envpool"]
TOLERANCE = 0.15          # relative difference in mean episode length / reward per step called a match


def make(engine: str, env_id: str, num_envs: int, seed: int = 0) -> Any:
    """A vector env of ``num_envs`` copies, reset with ``seed``; raises ImportError / gym.error.Error."""
    import gymnasium as gym

    if engine == "envpool":
        import envpool

        return envpool.make_gymnasium(env_id, num_envs=num_envs, seed=seed)
    if engine == "gymnasium_async":
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="async")
    from harness.envs import gymnasium_vector

    return gymnasium_vector(env_id, num_envs)


def random_actions(space: Any, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` uniformly random actions of a single env's action space, batched."""
    if hasattr(space, "n"):
        return rng.integers(0, int(space.n), size=n)
    low, high = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
    return rng.uniform(low, high, size=(n, *space.shape)).astype(space.dtype)


def single_spaces(envs: Any) -> tuple[Any, Any]:
    obs = getattr(envs, "single_observation_space", None) or envs.observation_space
    act = getattr(envs, "single_action_space", None) or envs.action_space
    return obs, act


def throughput(engine: str, env_id: str, num_envs: int, steps: int) -> float:
    """Env steps per second (``steps`` of them, after a warm-up) with random actions."""
    envs = make(engine, env_id, num_envs)
    try:
        _, act = single_spaces(envs)
        rng = np.random.default_rng(0)
        envs.reset(**({} if engine == "envpool" else {"seed": 0}))     # EnvPool: seeded when made
        actions = [random_actions(act, num_envs, rng) for _ in range(64)]
        for i in range(32):
            envs.step(actions[i % 64])
        calls = max(1, steps // num_envs)
        start = time.perf_counter()
        for i in range(calls):
            envs.step(actions[i % 64])
        return calls * num_envs / (time.perf_counter() - start)
    finally:
        envs.close()


def semantics(engine: str, env_id: str, steps: int = 20000, num_envs: int = 8) -> dict[str, Any]:
    """What an engine does at episode ends and time limits, and its dynamics under a random policy."""
    envs = make(engine, env_id, num_envs, seed=1)
    try:
        obs_space, act = single_spaces(envs)
        rng = np.random.default_rng(1)
        obs, _ = envs.reset(**({} if engine == "envpool" else {"seed": 1}))
        lengths, length = [], np.zeros(num_envs, dtype=int)
        rewards, after_done = [], []
        done_prev = np.zeros(num_envs, dtype=bool)
        trunc_lengths, term_lengths = [], []
        for _ in range(max(1, steps // num_envs)):
            obs, reward, term, trunc, _ = envs.step(random_actions(act, num_envs, rng))
            reward, term, trunc = np.asarray(reward, float), np.asarray(term, bool), np.asarray(trunc, bool)
            for i in np.flatnonzero(done_prev):          # the step after a done: a reset, or a real step?
                after_done.append((float(reward[i]), bool(term[i] or trunc[i])))
            live = ~done_prev
            rewards.extend(reward[live].tolist())
            length += live
            done = (term | trunc) & live
            for i in np.flatnonzero(done):
                lengths.append(int(length[i]))
                (trunc_lengths if trunc[i] and not term[i] else term_lengths).append(int(length[i]))
                length[i] = 0
            done_prev = done
        return {
            "next_step_autoreset": bool(after_done) and all(r == 0.0 and not d for r, d in after_done),
            "episodes": len(lengths),
            "mean_length": float(np.mean(lengths)) if lengths else None,
            "reward_per_step": float(np.mean(rewards)) if rewards else None,
            "truncated_at": sorted(set(trunc_lengths))[:3],
            "terminated_share": len(term_lengths) / max(1, len(lengths)),
            "obs": [list(obs_space.shape), str(obs_space.dtype)],
            "action": [int(act.n)] if hasattr(act, "n") else [list(act.shape), str(act.dtype),
                                                               float(np.min(act.low)), float(np.max(act.high))],
        }
    finally:
        envs.close()


def compare(ref: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """How ``other``'s semantics differ from gymnasium's (empty: they match)."""
    out = []
    if other["next_step_autoreset"] != ref["next_step_autoreset"]:
        out.append("autoreset differs")
    if other["truncated_at"] != ref["truncated_at"]:
        out.append(f"truncated at {other['truncated_at']} vs {ref['truncated_at']}")
    for key in ("obs", "action"):
        if other[key] != ref[key]:
            out.append(f"{key} space {other[key]} vs {ref[key]}")
    for key in ("mean_length", "reward_per_step"):
        a, b = ref[key], other[key]
        if a is None or b is None:
            continue
        if abs(a - b) > TOLERANCE * max(abs(a), abs(b), 1e-9):
            out.append(f"{key} {b:.3g} vs {a:.3g}")
    return out


def measure(envs: list[str], sizes: list[int], steps: int, progress=print) -> dict[str, Any]:
    """Throughput rows (env, engine, num_envs, steps/s or the error) and per-env semantics."""
    rows, sem = [], {}
    for env_id in envs:
        found: dict[str, dict[str, Any]] = {}
        for engine in ENGINES:
            try:
                found[engine] = semantics(engine, env_id)
            except Exception as exc:        # a missing package or env: say so, measure the rest
                found[engine] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
                progress(f"{env_id} {engine}: {found[engine]['error']}")
                continue
            for n in sizes:
                if engine == "gymnasium_async" and n == 1:
                    continue
                sps = throughput(engine, env_id, n, steps)
                rows.append({"env": env_id, "engine": engine, "num_envs": n, "sps": round(sps)})
                progress(f"{env_id:16s} {engine:16s} num_envs {n:3d}: {sps:10.0f} env steps/s")
        ref = found.get("gymnasium", {})
        for engine, result in found.items():
            if engine != "gymnasium" and "error" not in result and "error" not in ref:
                result["differs"] = compare(ref, result)
        sem[env_id] = found
    return {"rows": rows, "semantics": sem}


def markdown(result: dict[str, Any]) -> str:
    """benchmarks/results/env_engines.md."""
    meta = result["meta"]
    sizes = sorted({r["num_envs"] for r in result["rows"]})
    lines = ["# Env engines", "",
             f"Generated by `{meta['command']}` on {meta['date']} ({meta['cpus']} CPUs, one thread; "
             f"gymnasium {meta['versions'].get('gymnasium')}, envpool {meta['versions'].get('envpool')}, "
             f"mujoco {meta['versions'].get('mujoco')}). Env steps per second of random actions.", "",
             "| env | engine | " + " | ".join(f"{n} envs" for n in sizes) + " | semantics vs gymnasium |",
             "|---|---|" + "---|" * (len(sizes) + 1)]
    for env_id, found in result["semantics"].items():
        for engine, sem in found.items():
            if "error" in sem:
                lines.append(f"| {env_id} | {engine} | " + " | ".join("-" for _ in sizes) + f" | not run: {sem['error']} |")
                continue
            sps = {r["num_envs"]: r["sps"] for r in result["rows"] if r["env"] == env_id and r["engine"] == engine}
            if engine == "gymnasium":
                verdict = "reference"
            elif "differs" not in sem:
                verdict = "not compared (no gymnasium reference)"
            else:
                verdict = "; ".join(sem["differs"]) or "match"
            lines.append(f"| {env_id} | {engine} | " + " | ".join(f"{sps[n]:,}" if n in sps else "-" for n in sizes)
                         + f" | {verdict} |")
    lines += ["", "Semantics measured under a random policy (8 envs, 20,000 steps): autoreset on the step after a "
              "done (NEXT_STEP), the step cap at which `truncated` is set, spaces, mean episode length and reward "
              f"per step within {TOLERANCE:.0%} (initial states are drawn differently by the two engines)."]
    return "\n".join(lines) + "\n"


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("gymnasium", "envpool", "mujoco", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--num-envs", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--steps", type=int, default=20000, help="env steps timed per engine and size")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    warnings.filterwarnings("ignore", message=".*precision lowered.*")
    result = measure(args.envs, args.num_envs, args.steps)
    result["meta"] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "versions": versions(),
                      "command": "python benchmarks/env_engines.py " + " ".join(sys.argv[1:])}
    if args.record:
        out = ROOT / "benchmarks" / "results" / "env_engines.json"
        out.write_text(json.dumps(result, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown(result))
        print(f"recorded in {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

"""Real stable-baselines3 PPO logs, healthy and with bugs introduced the way SB3 users introduce them.

    python benchmarks/realworld/sb3_runs.py [--jobs 2] [--out results/realworld/sb3] [--list]

**A test set.** These logs measure how ``python -m harness.diagnose`` does on logs it never saw,
written by a real framework at its own defaults. Nobody may tune the diagnosis' thresholds,
features or model to them; other real logs nobody here produced will judge the result too.
This script is an independent implementation: it imports neither ``faults`` nor
``harness.agents`` (nor anything of the harness).

What runs: stable-baselines3's ``PPO("MlpPolicy", env)``, unmodified, at **SB3's own defaults**
(n_steps 2048, batch_size 64, n_epochs 10, learning_rate 3e-4, gamma 0.99, gae_lambda 0.95,
clip_range 0.2, ent_coef 0, vf_coef 0.5, max_grad_norm 0.5, one env from ``make_vec_env``, which
wraps it in ``Monitor``), on CartPole-v1, Acrobot-v1, LunarLander-v3 and Pendulum-v1, for
``TIMESTEPS`` env steps each. The logger is SB3's own: CSV + JSON (``progress.csv`` /
``progress.json``) in the run directory and TensorBoard events in ``tb/PPO_1/`` (what
``tensorboard_log=<run>/tb`` names; the constructor gets that argument too), plus
``model.save("model.zip")`` beside the CSV (its "data" member carries the hyperparameters).

How each bug is introduced (``VARIANTS``; each has one or more ways, cycled over env and seed):
- constructor hyperparameters: ``learning_rate`` x100 / /100, ``clip_range=0.002``,
  ``ent_coef`` < 0, a tiny ``max_grad_norm``, a tiny ``target_kl``, a huge ``vf_coef``, a bad ``gamma``;
- gymnasium reward wrappers (``TransformReward``) inside ``Monitor`` (the callable given to
  ``make_vec_env`` wraps the env before SB3's Monitor: the logged episode return is the modified one)
  or outside it (``wrapper_class=``: Monitor records the env's true return, the learner gets the
  modified one): reward 0, sign flipped, scaled x1000;
- an env wrapper that reports time-limit truncation as termination (no bootstrap);
- ``VecNormalize(venv, training=False)``: statistics frozen at their initial values;
- code bugs as an SB3 user patches: a ``PPO`` subclass whose ``train()`` runs one epoch whatever
  ``n_epochs`` says; a ``RolloutBuffer`` subclass that recomputes the "old" log-probs with the
  current policy each minibatch, so the ratio is exactly 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.realworld.common import DEFAULT_OUT, fault_of, opaque_name, run_jobs

ENVS = ["CartPole-v1", "Acrobot-v1", "LunarLander-v3", "Pendulum-v1"]
# env steps per run: 16 rollouts of SB3's default n_steps=2048 (rl-zoo trains CartPole for 1e5; the
# whole generation must fit ~25 minutes on 2 cores, see README.md)
TIMESTEPS = {"CartPole-v1": 32768, "Acrobot-v1": 32768, "LunarLander-v3": 32768, "Pendulum-v1": 32768}
HEALTHY_SEEDS = [0, 1, 2, 3, 4]
FAULT_SEEDS = [0]

# variant -> the ways it is introduced: (how, spec). spec keys: "ppo" (constructor kwargs),
# "reward" ("zero" | "neg" | "x1000") with "monitor" ("inside" | "outside"), "trunc_as_term",
# "vecnorm_frozen", "algo" ("one_epoch"), "buffer" ("recompute_old_logp").
VARIANTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "healthy": [("PPO('MlpPolicy', env) at SB3's defaults", {})],
    "lr_high": [("PPO(learning_rate=3e-2): 100x SB3's default 3e-4", {"ppo": {"learning_rate": 3e-2}})],
    "clip_tiny": [("PPO(clip_range=0.002)", {"ppo": {"clip_range": 0.002}})],
    "lr_low": [("PPO(learning_rate=3e-6): SB3's default 3e-4 / 100", {"ppo": {"learning_rate": 3e-6}})],
    "ent_neg": [("PPO(ent_coef=-0.01): the entropy bonus given the wrong sign", {"ppo": {"ent_coef": -0.01}}),
                ("PPO(ent_coef=-0.05)", {"ppo": {"ent_coef": -0.05}})],
    "gradclip_tiny": [("PPO(max_grad_norm=1e-4)", {"ppo": {"max_grad_norm": 1e-4}}),
                      ("PPO(max_grad_norm=1e-5)", {"ppo": {"max_grad_norm": 1e-5}})],
    "targetkl_tiny": [("PPO(target_kl=1e-4): early stop after a minibatch or two", {"ppo": {"target_kl": 1e-4}}),
                      ("PPO(target_kl=5e-4)", {"ppo": {"target_kl": 5e-4}})],
    "vf_huge": [("PPO(vf_coef=50)", {"ppo": {"vf_coef": 50.0}}), ("PPO(vf_coef=200)", {"ppo": {"vf_coef": 200.0}})],
    "gamma_off": [("PPO(gamma=0.5)", {"ppo": {"gamma": 0.5}}), ("PPO(gamma=0.8)", {"ppo": {"gamma": 0.8}})],
    "reward_zero": [("TransformReward(env, lambda r: 0.0) inside Monitor (logged returns are 0)",
                     {"reward": "zero", "monitor": "inside"}),
                    ("TransformReward(env, lambda r: 0.0) outside Monitor (make_vec_env wrapper_class: "
                     "logged returns are the env's)", {"reward": "zero", "monitor": "outside"})],
    "reward_neg": [("TransformReward(env, lambda r: -r) outside Monitor", {"reward": "neg", "monitor": "outside"}),
                   ("TransformReward(env, lambda r: -r) inside Monitor", {"reward": "neg", "monitor": "inside"})],
    "reward_x1000": [("TransformReward(env, lambda r: 1000 * r) inside Monitor",
                      {"reward": "x1000", "monitor": "inside"}),
                     ("TransformReward(env, lambda r: 1000 * r) outside Monitor",
                      {"reward": "x1000", "monitor": "outside"})],
    "trunc_as_term": [("a wrapper returning terminated=terminated or truncated, truncated=False (wrapper_class)",
                       {"trunc_as_term": True})],
    "vecnorm_frozen": [("VecNormalize(venv, training=False): running statistics never updated",
                        {"vecnorm_frozen": True})],
    "one_epoch": [("a PPO subclass whose train() sets n_epochs=1 around super().train() (the saved model "
                   "says n_epochs=10)", {"algo": "one_epoch"})],
    "old_logp_recomputed": [("a RolloutBuffer subclass whose minibatches carry old log-probs recomputed with "
                             "the current policy (ratio exactly 1)", {"buffer": "recompute_old_logp"})],
}


def plan(envs: list[str] = ENVS, healthy_seeds: list[int] = HEALTHY_SEEDS, fault_seeds: list[int] = FAULT_SEEDS,
         variants: list[str] | None = None, timesteps: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Every run: healthy ones on each env and seed, each bug once per env and fault seed (its ways
    cycled over env and seed so each placement meets several envs)."""
    timesteps = {**TIMESTEPS, **(timesteps or {})}
    jobs = []
    for variant, ways in VARIANTS.items():
        if variants is not None and variant not in variants:
            continue
        for e, env in enumerate(envs):
            for seed in (healthy_seeds if variant == "healthy" else fault_seeds):
                how, spec = ways[(e + seed) % len(ways)]
                jobs.append({"name": opaque_name("sb3", env, variant, how, seed, timesteps[env]), "env": env,
                             "variant": variant, "how": how, "spec": spec, "seed": seed,
                             "timesteps": timesteps[env]})
    return jobs


# ---- the user's code: wrappers and subclasses ---------------------------------------------------
def make_classes() -> dict[str, Any]:
    """The user-side patches (defined lazily so ``--list`` needs no torch)."""
    import gymnasium as gym
    import torch as th
    from gymnasium import spaces
    from stable_baselines3 import PPO
    from stable_baselines3.common.buffers import RolloutBuffer

    class TimeLimitAsTermination(gym.Wrapper):
        """Treats the time limit as a terminal state: the episode 'ends', nothing is bootstrapped."""

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            return obs, reward, terminated or truncated, False, info

    class OneEpochPPO(PPO):
        """Speed hack left in: one pass over the rollout whatever n_epochs says."""

        def train(self) -> None:
            configured = self.n_epochs
            self.n_epochs = 1
            try:
                super().train()
            finally:
                self.n_epochs = configured

    class RecomputedOldLogProbBuffer(RolloutBuffer):
        """'Fresh' old log-probs: recomputed with the current policy for each minibatch."""

        policy = None

        def _get_samples(self, batch_inds, env=None):
            samples = super()._get_samples(batch_inds, env)
            actions = samples.actions
            if isinstance(self.action_space, spaces.Discrete):
                actions = actions.long().flatten()
            with th.no_grad():
                _, log_prob, _ = self.policy.evaluate_actions(samples.observations, actions)
            return samples._replace(old_log_prob=log_prob.flatten())

    return {"TimeLimitAsTermination": TimeLimitAsTermination, "OneEpochPPO": OneEpochPPO,
            "RecomputedOldLogProbBuffer": RecomputedOldLogProbBuffer}


REWARDS = {"zero": lambda r: 0.0, "neg": lambda r: -r, "x1000": lambda r: 1000.0 * r}


def build_env(env_id: str, spec: dict[str, Any], seed: int, classes: dict[str, Any]):
    import gymnasium as gym
    from gymnasium.wrappers import TransformReward
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env_fn: Any = env_id
    wrapper_class = None
    if "reward" in spec:
        fn = REWARDS[spec["reward"]]
        if spec["monitor"] == "inside":        # make_vec_env puts Monitor around what the callable returns
            def env_fn():
                return TransformReward(gym.make(env_id), fn)
        else:                                  # make_vec_env applies wrapper_class around Monitor
            def wrapper_class(env):
                return TransformReward(env, fn)
    if spec.get("trunc_as_term"):
        wrapper_class = classes["TimeLimitAsTermination"]
    venv = make_vec_env(env_fn, n_envs=spec.get("n_envs", 1), seed=seed, wrapper_class=wrapper_class)
    if spec.get("vecnorm_frozen"):
        venv = VecNormalize(venv, training=False)
    elif spec.get("normalize"):            # rl-zoo3's normalize: true (probe_runs.py; the test set never sets it)
        venv = VecNormalize(venv, gamma=spec.get("ppo", {}).get("gamma", 0.99))
    return venv


def train(job: dict[str, Any], root: Path, overrides: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """One run into ``root/<opaque name>/``; returns its label {log path: label}. ``overrides``
    (tests only) shrinks the run, e.g. {"n_steps": 64, "batch_size": 32}."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger, make_output_format

    start = time.perf_counter()
    spec = job["spec"]
    classes = make_classes()
    run_dir = root / job["name"]
    tb_dir = run_dir / "tb"
    venv = build_env(job["env"], spec, job["seed"], classes)
    kwargs: dict[str, Any] = {**spec.get("ppo", {}), **(overrides or {})}
    if spec.get("buffer") == "recompute_old_logp":
        kwargs["rollout_buffer_class"] = classes["RecomputedOldLogProbBuffer"]
    algo = classes["OneEpochPPO"] if spec.get("algo") == "one_epoch" else PPO
    model = algo("MlpPolicy", venv, seed=job["seed"], device="cpu", verbose=0, tensorboard_log=str(tb_dir), **kwargs)
    if spec.get("buffer") == "recompute_old_logp":
        model.rollout_buffer.policy = model.policy
    # SB3's own writers: CSV + JSON beside the model, TensorBoard where tensorboard_log would put it
    model.set_logger(Logger(str(run_dir), [make_output_format("csv", str(run_dir)),
                                           make_output_format("json", str(run_dir)),
                                           make_output_format("tensorboard", str(tb_dir / "PPO_1"))]))
    model.learn(total_timesteps=job["timesteps"])
    model.save(run_dir / "model.zip")
    model.logger.close()
    venv.close()
    label = {"framework": "sb3", "env": job["env"], "variant": job["variant"], "fault": fault_of(job["variant"]),
             "how": job["how"], "seed": job["seed"], "name": job["name"], "timesteps": job["timesteps"],
             "hyperparameters": {k: v for k, v in kwargs.items() if isinstance(v, (int, float, str, bool))},
             "tensorboard": f"{job['name']}/tb/PPO_1", "model": f"{job['name']}/model.zip",
             "wall_s": round(time.perf_counter() - start, 2)}
    return {f"{job['name']}/progress.csv": label}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "sb3", help="where the logs and labels.json go")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    parser.add_argument("--envs", nargs="+", default=ENVS)
    parser.add_argument("--variants", nargs="+", default=None, help=f"default: all of {', '.join(VARIANTS)}")
    parser.add_argument("--healthy-seeds", type=int, nargs="+", default=HEALTHY_SEEDS)
    parser.add_argument("--fault-seeds", type=int, nargs="+", default=FAULT_SEEDS)
    parser.add_argument("--timesteps", type=int, default=None, help="env steps per run (default: TIMESTEPS per env)")
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    args = parser.parse_args()
    ts = dict.fromkeys(args.envs, args.timesteps) if args.timesteps else None
    jobs = plan(args.envs, args.healthy_seeds, args.fault_seeds, args.variants, ts)
    if args.list:
        for j in jobs:
            print(f"{j['name']}  {j['env']:15s} seed {j['seed']}  {j['variant']:20s} {j['how']}")
        print(f"{len(jobs)} runs, {sum(j['timesteps'] for j in jobs)} env steps")
        return
    labels, failures, wall = run_jobs(train, jobs, args.out, args.jobs)
    summary = {"runs": len(jobs), "failed": len(failures), "wall_s": round(wall, 1), "jobs": args.jobs,
               "run_wall_s_sum": round(sum(v["wall_s"] for v in labels.values()), 1),
               "run_cpu_s_sum": round(sum(v.get("cpu_s", 0) for v in labels.values()), 1)}
    (args.out / "generation.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary))
    for f in failures:
        print(f"FAILED {f['job']['name']} {f['job']['variant']} {f['job']['env']}:\n{f['error']}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

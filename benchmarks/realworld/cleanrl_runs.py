"""Real CleanRL PPO logs, healthy and with bugs introduced the way CleanRL users introduce them.

    python benchmarks/realworld/cleanrl_runs.py --cleanrl-dir PATH --python PATH [--jobs 1]
        [--out results/realworld/cleanrl] [--list]

**A test set.** These logs measure how ``python -m harness.diagnose`` does on logs it never saw,
written by a real framework. Nobody may tune the diagnosis' thresholds, features or model to them;
other real logs nobody here produced will judge the result too. This script is an independent
implementation: it imports nothing of the harness (not ``harness``, not ``faults``).

What runs: CleanRL's own single-file scripts, ``cleanrl/ppo.py`` (discrete, CartPole-v1) and
``cleanrl/ppo_continuous_action.py`` (continuous, InvertedPendulum-v4), from a CleanRL checkout
(``--cleanrl-dir``; ``git clone https://github.com/vwxyzjn/cleanrl``, measured at fe8d8a03) in an
interpreter that has CleanRL's dependencies (``--python``: torch, gymnasium 0.29.1, tyro,
tensorboard; mujoco + imageio for InvertedPendulum-v4). No CleanRL code is in this repository. Each
run copies the script, unchanged or with the bug's exact text substitutions (each anchor must occur
exactly once, else the run fails), into the run's working directory, runs it there with CleanRL's
own command-line flags and ``OMP_NUM_THREADS=1``, and deletes the copy: what stays is what CleanRL
writes, the TensorBoard run directory ``runs/<env>__<exp_name>__<seed>__<unix time>/``
(``charts/*``, ``losses/*``, the ``hyperparameters`` text summary), plus its console output
(``console.out``).

How each bug is introduced (``VARIANTS``; ways cycled over seeds):
- command-line flags: ``--learning-rate`` x100 and /100, ``--clip-coef 0.002``, ``--ent-coef``
  negative, ``--vf-coef 50``, ``--max-grad-norm 1e-4``, ``--gamma 0.5``, ``--target-kl 1e-4``;
- code edits in the copy: old log-probs = the freshly computed ones (``newlogprob.detach()``: ratio
  exactly 1), no ``optimizer.zero_grad()``, the minibatch advantages negated, GAE without done
  masks, the epoch loop run once (``update_epochs`` still in the hyperparameters), and a
  ``gym.wrappers.TransformReward`` inserted in ``make_env`` inside ``RecordEpisodeStatistics``
  (the logged ``charts/episodic_return`` is the modified reward's) or outside it (after every other
  wrapper: the logged return is the env's own, only the learner sees the change).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.realworld.common import DEFAULT_OUT, REPO, fault_of, opaque_name, run_jobs, write_generation

DEFAULT_CLEANRL_DIR = REPO.parent / "cleanrl"                       # a sibling checkout
DEFAULT_PYTHON = REPO.parent / "cleanrl-venv" / "bin" / "python"    # its throwaway venv
COMMIT_MEASURED = "fe8d8a03c41a7ef5b523e2e354bd01c363e786bb"

# script -> env, CleanRL's defaults that the bugs scale, and the flags every run gets (the budget).
# ppo.py: CleanRL's defaults (4 envs x 128 steps, 4 minibatches, 4 epochs), 100 iterations.
# ppo_continuous_action.py: rollouts of 512 steps in 8 minibatches of 64 (CleanRL's default minibatch
# size; its default 2048 x 32 minibatches x 10 epochs costs ~6.5 CPU-s per iteration here), 40 iterations.
SCRIPTS: dict[str, dict[str, Any]] = {
    "ppo": {"env": "CartPole-v1", "defaults": {"learning_rate": 2.5e-4, "ent_coef": 0.01, "update_epochs": 4},
            "budget": ["--total-timesteps", "51200"], "iterations": 100},
    "ppo_continuous_action": {"env": "InvertedPendulum-v4",
                              "defaults": {"learning_rate": 3e-4, "ent_coef": 0.0, "update_epochs": 10},
                              "budget": ["--num-steps", "512", "--num-minibatches", "8",
                                         "--total-timesteps", "20480"], "iterations": 40},
}
# seed 1 (CleanRL's default) is left to the fixtures in tests/data/: no log of this set duplicates one
HEALTHY_SEEDS = [2, 3, 4, 5, 6]
FAULT_SEEDS = [2, 3]

# the exact anchors, shared by both scripts at fe8d8a03
RES_LINE = "        env = gym.wrappers.RecordEpisodeStatistics(env)\n"
RETURN_LINE = "        return env\n\n    return thunk\n"
REWARD_FN = {"zero": "lambda r: 0.0", "neg": "lambda r: -r", "x1000": "lambda r: 1000.0 * r"}


def reward_edit(reward: str, place: str) -> list[tuple[str, str]]:
    """A TransformReward inserted in make_env: 'inside' RecordEpisodeStatistics (just before it: the logged
    episodic return is the modified one) or 'outside' (the last wrapper: the logged return is the env's)."""
    line = f"        env = gym.wrappers.TransformReward(env, {REWARD_FN[reward]})\n"
    if place == "inside":
        return [(RES_LINE, line + RES_LINE)]
    return [(RETURN_LINE, line + RETURN_LINE)]


EDITS: dict[str, list[tuple[str, str]]] = {
    "shared_logprobs": [("logratio = newlogprob - b_logprobs[mb_inds]", "logratio = newlogprob - newlogprob.detach()")],
    "no_zero_grad": [("                optimizer.zero_grad()\n", "")],
    "adv_neg": [("mb_advantages = b_advantages[mb_inds]", "mb_advantages = -b_advantages[mb_inds]")],
    "gae_no_mask_both": [("nextnonterminal = 1.0 - next_done", "nextnonterminal = 1.0"),
                         ("nextnonterminal = 1.0 - dones[t + 1]", "nextnonterminal = 1.0")],
    "gae_no_mask_carry": [("delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam",
                           "delta + args.gamma * args.gae_lambda * lastgaelam")],
    "one_epoch": [("for epoch in range(args.update_epochs):", "for epoch in range(1):")],
}

# variant -> ways: (how, spec). spec: "flags" {flag: value} (values "lr_x100" / "lr_div100" are scaled
# from the script's default), "edit" (a key of EDITS), "reward" + "place" (a reward wrapper).
VARIANTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "healthy": [("the script at its defaults (budget flags only)", {})],
    "lr_high": [("--learning-rate 100x the script's default", {"flags": {"--learning-rate": "lr_x100"}})],
    "lr_low": [("--learning-rate the script's default / 100", {"flags": {"--learning-rate": "lr_div100"}})],
    "clip_tiny": [("--clip-coef 0.002", {"flags": {"--clip-coef": "0.002"}})],
    "ent_neg": [("--ent-coef -0.01: the entropy bonus with the wrong sign", {"flags": {"--ent-coef": "-0.01"}}),
                ("--ent-coef -0.05", {"flags": {"--ent-coef": "-0.05"}})],
    "vf_huge": [("--vf-coef 50", {"flags": {"--vf-coef": "50"}})],
    "gradclip_tiny": [("--max-grad-norm 1e-4", {"flags": {"--max-grad-norm": "1e-4"}})],
    "gamma_off": [("--gamma 0.5", {"flags": {"--gamma": "0.5"}})],
    "targetkl_tiny": [("--target-kl 1e-4: the epoch loop breaks after the first epoch whose last minibatch's "
                       "approx_kl exceeds it", {"flags": {"--target-kl": "1e-4"}})],
    "old_logp_recomputed": [("edit: logratio = newlogprob - newlogprob.detach() (the minibatch's b_logprobs[mb_inds] "
                             "replaced by the fresh log-probs): ratio exactly 1, approx_kl and clipfrac 0",
                             {"edit": "shared_logprobs"})],
    "zero_grad_missing": [("edit: optimizer.zero_grad() deleted: gradients accumulate over every minibatch of "
                           "the run (clip_grad_norm_ rescales the sum)", {"edit": "no_zero_grad"})],
    "adv_neg": [("edit: mb_advantages = -b_advantages[mb_inds]: the advantages enter the loss with the wrong sign "
                 "(normalisation keeps it; the value targets are right)", {"edit": "adv_neg"})],
    "gae_ignores_dones": [("edit: nextnonterminal = 1.0 in both branches of the GAE loop: no done mask in the TD "
                           "error nor the recursion", {"edit": "gae_no_mask_both"}),
                          ("edit: the GAE recursion without '* nextnonterminal' (the TD error still masked): "
                           "advantages carried across episode ends", {"edit": "gae_no_mask_carry"})],
    "one_epoch": [("edit: for epoch in range(1): the epoch loop runs once while the hyperparameters text says "
                   "update_epochs 4 (ppo.py) / 10 (ppo_continuous_action.py)", {"edit": "one_epoch"})],
    "reward_zero": [("TransformReward(env, lambda r: 0.0) inside RecordEpisodeStatistics: logged returns are 0",
                     {"reward": "zero", "place": "inside"}),
                    ("TransformReward(env, lambda r: 0.0) outside RecordEpisodeStatistics (last wrapper): logged "
                     "returns are the env's", {"reward": "zero", "place": "outside"})],
    "reward_neg": [("TransformReward(env, lambda r: -r) inside RecordEpisodeStatistics: logged returns negated",
                    {"reward": "neg", "place": "inside"}),
                   ("TransformReward(env, lambda r: -r) outside RecordEpisodeStatistics (last wrapper): logged "
                    "returns are the env's", {"reward": "neg", "place": "outside"})],
    "reward_x1000": [("TransformReward(env, lambda r: 1000.0 * r) inside RecordEpisodeStatistics: logged returns "
                      "x1000 (ppo_continuous_action.py: NormalizeReward, later in make_env, rescales what the "
                      "learner gets)", {"reward": "x1000", "place": "inside"}),
                     ("TransformReward(env, lambda r: 1000.0 * r) outside RecordEpisodeStatistics (last wrapper, "
                      "after ppo_continuous_action.py's normalisation and clip): logged returns are the env's",
                      {"reward": "x1000", "place": "outside"})],
}


def flags_of(script: str, spec: dict[str, Any]) -> dict[str, str]:
    lr = SCRIPTS[script]["defaults"]["learning_rate"]
    scaled = {"lr_x100": f"{lr * 100:g}", "lr_div100": f"{lr / 100:g}"}
    return {k: scaled.get(v, v) for k, v in spec.get("flags", {}).items()}


def edits_of(spec: dict[str, Any]) -> list[tuple[str, str]]:
    if "edit" in spec:
        return EDITS[spec["edit"]]
    if "reward" in spec:
        return reward_edit(spec["reward"], spec["place"])
    return []


def plan(scripts: list[str] | None = None, healthy_seeds: list[int] = HEALTHY_SEEDS,
         fault_seeds: list[int] = FAULT_SEEDS, variants: list[str] | None = None,
         budget: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Every run: healthy on each script and healthy seed, each bug on each script and fault seed (its
    ways cycled over seeds). ``budget`` replaces a script's budget flags (tests)."""
    jobs = []
    for variant, ways in VARIANTS.items():
        if variants is not None and variant not in variants:
            continue
        for script in scripts or list(SCRIPTS):
            info = SCRIPTS[script]
            flags_budget = (budget or {}).get(script, info["budget"])
            for seed in healthy_seeds if variant == "healthy" else fault_seeds:
                how, spec = ways[seed % len(ways)]
                flags = flags_of(script, spec)
                args = ["--env-id", info["env"], *flags_budget, "--no-cuda", "--seed", str(seed)]
                for k, v in flags.items():
                    args += [k, v]
                edits = edits_of(spec)
                jobs.append({"name": opaque_name("cleanrl", script, variant, how, json.dumps(args), json.dumps(edits)),
                             "script": script, "env": info["env"], "variant": variant, "how": how, "seed": seed,
                             "args": args, "flags": flags, "edits": edits,
                             "reward": ({"reward": spec["reward"], "place": spec["place"]} if "reward" in spec
                                        else None)})
    return jobs


def apply_edits(text: str, edits: list[tuple[str, str]], where: str = "script") -> str:
    """Each (old, new) substituted where ``old`` occurs exactly once; anything else fails loudly."""
    for old, new in edits:
        n = text.count(old)
        if n != 1:
            raise ValueError(f"{where}: the edit's anchor {old!r} occurs {n} times (expected once): "
                             "the CleanRL checkout differs from the one these edits were written for")
        text = text.replace(old, new)
    return text


def script_path(cleanrl_dir: Path, script: str) -> Path:
    path = Path(cleanrl_dir) / "cleanrl" / f"{script}.py"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: --cleanrl-dir must be a CleanRL checkout "
                                "(git clone https://github.com/vwxyzjn/cleanrl)")
    return path


def checkout_commit(cleanrl_dir: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(cleanrl_dir), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.strip() or None


def train(job: dict[str, Any], root: Path, cleanrl_dir: Path = DEFAULT_CLEANRL_DIR,
          python: Path = DEFAULT_PYTHON, timeout: float | None = None) -> dict[str, dict[str, Any]]:
    """One run into ``root/<opaque name>/``: the (edited) script copied there, run, copy deleted; returns
    its label {TensorBoard run directory: label}."""
    start = time.perf_counter()
    source = script_path(cleanrl_dir, job["script"])
    text = apply_edits(source.read_text(), [tuple(e) for e in job["edits"]], str(source))
    run_dir = root / job["name"]
    if run_dir.exists():                       # what an interrupted attempt left
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    copy = run_dir / source.name               # same file name: CleanRL's exp_name is the script's name
    copy.write_text(text)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        with open(run_dir / "console.out", "w") as out:
            proc = subprocess.run([str(python), source.name, *job["args"]], cwd=run_dir, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=timeout)
    finally:
        copy.unlink()
    if proc.returncode != 0:
        tail = (run_dir / "console.out").read_text().strip().splitlines()[-15:]
        raise RuntimeError(f"{python} {source.name} exited {proc.returncode}:\n" + "\n".join(tail))
    tb_dirs = sorted((run_dir / "runs").iterdir()) if (run_dir / "runs").exists() else []
    if len(tb_dirs) != 1 or not list(tb_dirs[0].glob("events.out.tfevents*")):
        raise RuntimeError(f"expected one TensorBoard run directory with an event file under {run_dir / 'runs'}")
    info = SCRIPTS[job["script"]]
    label = {"framework": "cleanrl", "env": job["env"], "variant": job["variant"], "fault": fault_of(job["variant"]),
             "how": job["how"], "seed": job["seed"], "name": job["name"], "script": f"cleanrl/{source.name}",
             "cleanrl_commit": checkout_commit(cleanrl_dir), "command": ["python", source.name, *job["args"]],
             "flags": job["flags"], "edits": [list(e) for e in job["edits"]], "reward_wrapper": job["reward"],
             "cleanrl_defaults": info["defaults"], "tensorboard": str(tb_dirs[0].relative_to(root)),
             "console": str((run_dir / "console.out").relative_to(root)),
             "wall_s": round(time.perf_counter() - start, 2)}
    return {str(tb_dirs[0].relative_to(root)): label}


class Runner:
    """``train`` with the checkout and interpreter bound (picklable, for worker processes)."""

    def __init__(self, cleanrl_dir: Path, python: Path) -> None:
        self.cleanrl_dir, self.python = Path(cleanrl_dir), Path(python)

    def __call__(self, job: dict[str, Any], root: Path) -> dict[str, dict[str, Any]]:
        return train(job, root, self.cleanrl_dir, self.python)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "cleanrl", help="where the logs and labels.json go")
    parser.add_argument("--cleanrl-dir", type=Path, default=DEFAULT_CLEANRL_DIR,
                        help=f"a CleanRL checkout (default {DEFAULT_CLEANRL_DIR})")
    parser.add_argument("--python", type=Path, default=DEFAULT_PYTHON,
                        help=f"an interpreter with CleanRL's dependencies (default {DEFAULT_PYTHON})")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (each a subprocess with one torch thread)")
    parser.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=list(SCRIPTS))
    parser.add_argument("--variants", nargs="+", default=None, help=f"default: all of {', '.join(VARIANTS)}")
    parser.add_argument("--healthy-seeds", type=int, nargs="+", default=HEALTHY_SEEDS)
    parser.add_argument("--fault-seeds", type=int, nargs="+", default=FAULT_SEEDS)
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    args = parser.parse_args()
    jobs = plan(args.scripts, args.healthy_seeds, args.fault_seeds, args.variants)
    if args.list:
        for j in jobs:
            print(f"{j['name']}  {j['script']:22s} seed {j['seed']}  {j['variant']:20s} {j['how']}")
        print(f"{len(jobs)} runs")
        return
    for script in args.scripts:                 # every anchor found before anything runs
        text = script_path(args.cleanrl_dir, script).read_text()
        for j in jobs:
            if j["script"] == script:
                apply_edits(text, [tuple(e) for e in j["edits"]], f"cleanrl/{script}.py ({j['variant']})")
    if not args.python.exists():
        sys.exit(f"--python {args.python} does not exist: an interpreter with CleanRL's dependencies is needed")
    commit = checkout_commit(args.cleanrl_dir)
    if commit and commit != COMMIT_MEASURED:
        print(f"note: CleanRL checkout at {commit[:8]}, the edits were written for {COMMIT_MEASURED[:8]}",
              file=sys.stderr)
    labels, failures, wall = run_jobs(Runner(args.cleanrl_dir, args.python), jobs, args.out, args.jobs)
    summary = write_generation(args.out, jobs, failures, wall, args.jobs, cleanrl_commit=commit,
                               python=str(args.python))
    print(json.dumps(summary))
    for f in failures:
        print(f"FAILED {f['job']['name']} {f['job']['script']} {f['job']['variant']}:\n{f['error']}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()

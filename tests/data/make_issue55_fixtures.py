"""Build the issue-55 test fixtures by training with the frameworks themselves; keep only small logs.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python tests/data/make_issue55_fixtures.py [--only NAME]   # from the repo

NAME is one of ``trl_pinned_ratio``, ``sb3_nan``, ``sb3_zoo_cartpole`` (default: all three). Each set is
written into ``tests/data/<NAME>/`` (replaced), and a README fragment describing it is printed.

Versions used to build the committed fixtures (the project venv, CPU only):
    python 3.11.7, torch 2.13.0+cpu, trl 1.16.0, transformers 5.24.0, accelerate 1.16.0, datasets 5.2.0,
    tokenizers 0.23.3, stable-baselines3 2.9.2, gymnasium 1.4.0, numpy 2.4.6.
``sb3_nan`` runs in a throwaway venv of its own (outside the repo) holding the old, released
stable-baselines3 1.6.0 (see ``SB3_OLD``); ``--sb3-old-venv`` says where (created there with pip, by
``SB3_OLD_INSTALL``, when missing). Its versions when the fixture was built: python 3.11.7,
stable-baselines3 1.6.0, gym 0.21.0, torch 2.13.0+cpu, numpy 2.4.6, pandas 3.1.1, cloudpickle 3.1.3
(``sb3_nan/run_info.json`` records them too).

Sets:
- ``trl_pinned_ratio/{healthy,pinned}``: TRL GRPOTrainer via ``benchmarks/realworld/trl_runs.py`` (its
  ``train()``, ``base_model``, ``make_trainer``, ``make_dataset``, reward functions), learning_rate 1e-4,
  num_iterations 2, beta 0, loss_type grpo, rewards [correct], seed 11, logging_steps 1. ``pinned`` is that
  file's ``old_logp_recomputed`` variant (patch ``drop_old_logps``: old_per_token_logps dropped, so the
  loss uses the detached current log-probs and the ratio is exactly 1); ``healthy`` the same, unpatched.
  Kept: ``trainer_state.json`` (from the final checkpoint), ``training_args.bin`` (no label beside a log: what is what is said here).
- ``sb3_nan``: SB3 PPO whose last minibatch holds one sample -> NaN advantage std -> NaN loss at the first
  update (the released bug, see ``SB3_OLD``). Kept: progress.csv, progress.json, model.zip, run_info.json.
- ``sb3_zoo_cartpole/seed{0..3}``: healthy SB3 PPO on CartPole-v1 at rl-zoo3's tuned hyperparameters
  (``ZOO_CARTPOLE``). Kept: progress.csv, model.zip (and seed0's progress.json).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent          # tests/data
REPO = HERE.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# ---- 1. TRL: the ratio pinned to 1 ----------------------------------------------------------------
TRL_SEED = 11                                   # not one of trl_runs.py's plan seeds (0-7)
TRL_MAX_STEPS = 300
TRL_CONFIG = {"learning_rate": 1e-4, "num_iterations": 2, "beta": 0.0, "loss_type": "grpo"}
TRL_REWARDS = ["correct"]


def trl_jobs(max_steps: int) -> list[dict[str, Any]]:
    """Job dicts in the form benchmarks/realworld/trl_runs.py's train() takes (setting "script")."""
    base = {"env": "sort5", "seed": TRL_SEED, "rewards": TRL_REWARDS, "config": dict(TRL_CONFIG),
            "max_steps": max_steps, "setting": "script"}
    return [{**base, "name": f"healthy-s{TRL_SEED}-{max_steps}", "variant": "healthy", "patch": None,
             "how": "GRPOTrainer as configured, unpatched"},
            {**base, "name": f"pinned-s{TRL_SEED}-{max_steps}", "variant": "old_logp_recomputed",
             "patch": "drop_old_logps",
             "how": "trl_runs.make_trainer patch drop_old_logps: a GRPOTrainer subclass whose "
                    "_generate_and_score_completions drops old_per_token_logps; the loss uses the detached "
                    "current log-probs, ratio exactly 1"}]


def build_trl_pinned_ratio(work: Path, max_steps: int, jobs: int) -> str:
    from benchmarks.realworld import trl_runs
    from benchmarks.realworld.common import run_jobs

    root = work / "trl"
    trl_runs.base_model(root)                   # once, before the workers need it
    todo = trl_jobs(max_steps)
    labels, failures, wall = run_jobs(trl_runs.train, todo, root, jobs)
    if failures:
        raise RuntimeError("TRL runs failed:\n" + "\n".join(f["error"] for f in failures))
    dest = HERE / "trl_pinned_ratio"
    shutil.rmtree(dest, ignore_errors=True)
    report = []
    for job in todo:
        short = job["name"].split("-")[0]
        ckpt = root / job["name"] / f"checkpoint-{max_steps}"
        out = dest / short
        out.mkdir(parents=True)
        shutil.copy2(ckpt / "trainer_state.json", out / "trainer_state.json")
        shutil.copy2(ckpt / "training_args.bin", out / "training_args.bin")
        report.append(f"{short}: " + trl_summary(out / "trainer_state.json"))
    sft = json.loads((root / "base-model" / "sft.json").read_text())
    return textwrap.dedent(f"""\
        ### trl_pinned_ratio/
        TRL {_version('trl')} GRPOTrainer (transformers {_version('transformers')}, torch {_version('torch')}, CPU),
        built by `benchmarks/realworld/trl_runs.py`'s `train()` (sort-5-digits task, 2-layer Llama warmed up by
        SFT: {sft}), {max_steps} steps, seed {TRL_SEED}, {TRL_CONFIG}, rewards {TRL_REWARDS},
        logging_steps=1, warm-up 10 steps then linear decay. `healthy/`: unpatched. `pinned/`: patch
        `drop_old_logps` (the `old_logp_recomputed` variant): old_per_token_logps dropped, so the importance
        ratio is exactly 1 and clipping never fires. Each holds the final checkpoint's `trainer_state.json`,
        `training_args.bin`.
        """) + "\n".join(f"- {r}" for r in report) + "\n"


def trl_summary(path: Path) -> str:
    hist = [h for h in json.loads(path.read_text())["log_history"] if "step" in h and "loss" in h]
    clip_keys = sorted({k for h in hist for k in h if k.startswith("clip_ratio/")})
    parts = [f"{len(hist)} logged steps"]
    for k in clip_keys:
        have = [h for h in hist if k in h]
        odd_nz = sum(h[k] != 0 for h in have if h["step"] % 2)
        even_nz = sum(h[k] != 0 for h in have if not h["step"] % 2)
        parts.append(f"{k} == 0 on {sum(h[k] == 0 for h in have)}/{len(have)} (non-zero on {odd_nz} odd, "
                     f"{even_nz} even steps)")
    rsteps = [h["step"] for h in hist if "reward" in h]
    odd = rsteps == list(range(1, len(hist) + 1, 2))
    parts.append(f"reward keys on {len(rsteps)} steps ({'every odd step 1, 3, 5, ...' if odd else rsteps})")
    return "; ".join(parts)


def _version(name: str) -> str:
    from importlib.metadata import version
    return version(name)


# ---- 2. SB3: NaN loss at the first update (a released SB3 bug) -----------------------------------
# stable-baselines3 <= 1.6.0 normalised the advantages of every minibatch with
#     advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
# (stable_baselines3/ppo/ppo.py). torch's std() is unbiased: for a minibatch of ONE sample it is NaN, so the
# advantages, the policy loss and train/loss are NaN (and the gradient step writes NaN into the weights).
# A rollout buffer of n_steps * n_envs = 65 with batch_size=64 ends every epoch on a 1-sample minibatch.
# Reported as DLR-RM/stable-baselines3 issues #265, #325, #440; fixed by PR #1028 ("if self.normalize_advantage
# and len(advantages) > 1"), released in 1.6.1. 1.6.0 is the last release with the bug; it pins gym==0.21.
SB3_OLD = "1.6.0"
SB3_OLD_VENV = Path("/work/sb3old-venv")
SB3_OLD_INSTALL = [                              # gym 0.21's setup.py needs an old pip/setuptools/wheel to build
    ["pip", "install", "torch==2.13.0"],
    ["pip", "install", "pip<24.1", "setuptools==65.5.0", "wheel<0.40"],
    ["pip", "install", "--no-build-isolation", "gym==0.21.0"],
    ["pip", "install", f"stable-baselines3=={SB3_OLD}"],
]
SB3_NAN_KW = {"n_steps": 65, "batch_size": 64, "n_epochs": 1, "seed": 0}
SB3_NAN_CHILD = r"""
import json, sys, tempfile, time, traceback
from pathlib import Path
import gym, numpy, torch, stable_baselines3
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.utils import safe_mean

out = Path(sys.argv[1])
kw = json.loads(sys.argv[2])
torch.set_num_threads(1)

def last_line(exc):
    return "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[0][:300]

model = PPO("MlpPolicy", "CartPole-v1", **kw)
model.set_logger(configure(str(out), ["csv", "json"]))
# The first update: one rollout of n_steps, then train(). SB3's learn() dumps its log BEFORE each train(), so
# the first update's train/* would only reach the file at the next iteration's dump, which never comes (the
# NaN weights fail the next rollout). log_interval=None, then the same records learn() makes at a dump
# (time/iterations, rollout/ep_*_mean, time/*) and one dump: the first row is the first update.
model.learn(total_timesteps=kw["n_steps"], log_interval=None)
model.logger.record("time/iterations", 1, exclude="tensorboard")
model.logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in model.ep_info_buffer]))
model.logger.record("rollout/ep_len_mean", safe_mean([ep["l"] for ep in model.ep_info_buffer]))
model.logger.record("time/fps", int(model.num_timesteps / max(time.time() - model.start_time, 1e-9)))
model.logger.record("time/time_elapsed", int(time.time() - model.start_time), exclude="tensorboard")
model.logger.record("time/total_timesteps", model.num_timesteps, exclude="tensorboard")
model.logger.dump(step=model.num_timesteps)
model.save(str(out / "model.zip"))
info = {"stable_baselines3": stable_baselines3.__version__, "gym": gym.__version__, "torch": torch.__version__,
        "numpy": numpy.__version__, "python": sys.version.split()[0], "ppo_kwargs": kw,
        "weights_nan_after_first_update": bool(any(torch.isnan(p).any().item() for p in model.policy.parameters()))}
# carrying on, as a user would: the NaN weights fail the next rollout
try:
    model.learn(total_timesteps=3 * kw["n_steps"], reset_num_timesteps=False, log_interval=None)
    info["continue_learning"] = "ran"
except Exception as exc:
    info["continue_learning"] = last_line(exc)
# SB3's default n_epochs=10 (nothing kept): the 2nd epoch of the first update already fails, before any train/*
with tempfile.TemporaryDirectory() as tmp:
    m = PPO("MlpPolicy", "CartPole-v1", **{**kw, "n_epochs": 10})
    m.set_logger(configure(tmp, ["csv"]))
    try:
        m.learn(total_timesteps=3 * kw["n_steps"])
        info["default_n_epochs_10"] = "ran"
    except Exception as exc:
        info["default_n_epochs_10"] = last_line(exc)
    info["default_n_epochs_10_progress_csv"] = (Path(tmp) / "progress.csv").read_text()
print(json.dumps(info))
"""


def sb3_old_python(venv: Path) -> Path:
    py = venv / "bin" / "python"
    ok = py.exists() and subprocess.run(
        [str(py), "-c", f"import stable_baselines3 as s; assert s.__version__ == '{SB3_OLD}'"],
        capture_output=True).returncode == 0
    if not ok:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for cmd in SB3_OLD_INSTALL:
            subprocess.run([str(py), "-m", *cmd], check=True)
    return py


def build_sb3_nan(work: Path, venv: Path) -> str:
    py = sb3_old_python(venv)
    dest = HERE / "sb3_nan"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    res = subprocess.run([str(py), "-c", SB3_NAN_CHILD, str(dest), json.dumps(SB3_NAN_KW)], capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if res.returncode != 0:
        raise RuntimeError(f"old SB3 run failed:\n{res.stderr}")
    info = json.loads(res.stdout.strip().splitlines()[-1])
    (dest / "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
    rows = list(csv.DictReader(open(dest / "progress.csv")))
    first = rows[0]["train/loss"]
    if not math.isnan(float(first)):
        raise RuntimeError(f"train/loss in the first row is {first}, not NaN")
    return textwrap.dedent(f"""\
        ### sb3_nan/
        stable-baselines3 {info['stable_baselines3']} (gym {info['gym']}, torch {info['torch']}, numpy {info['numpy']}),
        the last release whose PPO normalises a one-sample minibatch's advantages by a NaN std (fixed in 1.6.1,
        DLR-RM/stable-baselines3 PR #1028, issues #265/#325/#440). `PPO("MlpPolicy", "CartPole-v1", {SB3_NAN_KW})`:
        the rollout buffer holds 65 samples, batch_size 64, so the epoch ends on a 1-sample minibatch and
        `train/loss` is NaN at the first update (first row of progress.csv: train/loss = {first}). Logger
        `configure(DIR, ["csv", "json"])`, `learn(65, log_interval=None)` then one `logger.dump()` so the first
        update's train/* is the first row; `model.zip` from `model.save` (weights NaN: {info['weights_nan_after_first_update']}).
        Continuing to train fails: `{info['continue_learning'][:200]}`. With SB3's default n_epochs=10 the
        first update itself fails in its 2nd epoch, before anything under train/ is logged: `{info['default_n_epochs_10'][:200]}`.
        Only the first row's time/ and rollout/ records are written by this script (the same records SB3's
        `learn()` makes at each dump), since `learn()` dumps before `train()`. `run_info.json` records
        versions and these outcomes.
        """)


# ---- 3. SB3: healthy PPO at rl-zoo3's tuned CartPole-v1 hyperparameters ---------------------------
# rl_zoo3 2.9.2, rl_zoo3/hyperparams/ppo.yml, "CartPole-v1" (checked against the file, see zoo_hyperparams)
ZOO_CARTPOLE: dict[str, Any] = {
    "n_envs": 8, "n_timesteps": 1e5, "policy": "MlpPolicy", "n_steps": 32, "batch_size": 256,
    "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0,
    "learning_rate": "lin_0.001", "clip_range": "lin_0.2"}
ZOO_SEEDS = [0, 1, 2, 3]


def zoo_hyperparams() -> dict[str, Any]:
    """ZOO_CARTPOLE, checked against an installed rl_zoo3's ppo.yml when there is one (found without
    importing rl_zoo3, whose __init__ pulls in huggingface_sb3, sb3_contrib, optuna)."""
    import importlib.util
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is not None and spec.submodule_search_locations:
        import yaml
        yml = Path(list(spec.submodule_search_locations)[0]) / "hyperparams" / "ppo.yml"
        found = yaml.load(yml.read_text(), Loader=yaml.UnsafeLoader)["CartPole-v1"]
        if found != ZOO_CARTPOLE:
            raise RuntimeError(f"rl_zoo3's {yml} says {found}, not {ZOO_CARTPOLE}")
    return dict(ZOO_CARTPOLE)


def zoo_schedule(value: Any) -> Any:
    """rl-zoo3's ExpManager._preprocess_schedules: "lin_X" -> SimpleLinearSchedule(X), i.e.
    progress_remaining * X. rl_zoo3.utils cannot be imported without its heavy deps, so this uses SB3's
    own LinearSchedule(start=X, end=0, end_fraction=1), the same function of progress_remaining (and a
    class SB3 can unpickle from model.zip)."""
    from stable_baselines3.common.utils import LinearSchedule
    if isinstance(value, str):
        kind, initial = value.split("_")
        assert kind == "lin", value
        return LinearSchedule(float(initial), 0.0, 1.0)
    return value


def train_zoo_seed(seed: int, out: str) -> dict[str, Any]:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    torch.set_num_threads(1)
    start, cpu = time.perf_counter(), time.process_time()
    hp = zoo_hyperparams()
    n_envs, n_timesteps, policy = hp.pop("n_envs"), int(hp.pop("n_timesteps")), hp.pop("policy")
    hp = {k: zoo_schedule(v) for k, v in hp.items()}
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)      # DummyVecEnv + Monitor, as rl-zoo3
    model = PPO(policy, env, seed=seed, verbose=0, **hp)
    model.set_logger(configure(out, ["csv", "json"]))
    model.learn(total_timesteps=n_timesteps)
    model.save(str(Path(out) / "model.zip"))
    return {"seed": seed, "wall_s": round(time.perf_counter() - start, 1), "cpu_s": round(time.process_time() - cpu, 1)}


def build_sb3_zoo_cartpole(jobs: int) -> str:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    dest = HERE / "sb3_zoo_cartpole"
    shutil.rmtree(dest, ignore_errors=True)
    dirs = {s: dest / f"seed{s}" for s in ZOO_SEEDS}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        timings = list(pool.map(train_zoo_seed, ZOO_SEEDS, [str(d) for d in dirs.values()]))
    lines = []
    for t in timings:
        rows = list(csv.DictReader(open(dirs[t["seed"]] / "progress.csv")))
        clip = [float(r["train/clip_range"]) for r in rows if r.get("train/clip_range")]
        lines.append(f"- seed{t['seed']}: {len(rows)} rows, final rollout/ep_rew_mean "
                     f"{float(rows[-1]['rollout/ep_rew_mean']):.1f}, train/clip_range {clip[0]:.4f} -> {clip[-1]:.4f} "
                     f"({t['cpu_s']:.0f} s CPU)")
    return textwrap.dedent(f"""\
        ### sb3_zoo_cartpole/
        Healthy stable-baselines3 {_version('stable-baselines3')} PPO (gymnasium {_version('gymnasium')}, torch
        {_version('torch')}) on CartPole-v1 at rl-zoo3 {'2.9.2'}'s tuned hyperparameters (hyperparams/ppo.yml):
        {ZOO_CARTPOLE}. "lin_X" is rl-zoo3's linear schedule (X * progress_remaining), built here as SB3's
        `LinearSchedule(X, 0, 1)`; `make_vec_env("CartPole-v1", n_envs=8, seed=k)`, `PPO(..., seed=k)`, logger
        `configure(DIR, ["csv", "json"])`, log_interval 1, `model.save`. Seeds {ZOO_SEEDS}, one folder each.
        """) + "\n".join(lines) + "\n"


# ---- main ------------------------------------------------------------------------------------------
SETS = ["trl_pinned_ratio", "sb3_nan", "sb3_zoo_cartpole"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=SETS, help="build one set (default: all)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/issue55-work"),
                        help="scratch dir for models and full run outputs (not kept)")
    parser.add_argument("--trl-max-steps", type=int, default=TRL_MAX_STEPS)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for the TRL pair / zoo seeds")
    parser.add_argument("--sb3-old-venv", type=Path, default=SB3_OLD_VENV,
                        help=f"venv holding stable-baselines3=={SB3_OLD} (created there when missing)")
    args = parser.parse_args()
    fragments = []
    for name in [args.only] if args.only else SETS:
        start = time.perf_counter()
        if name == "trl_pinned_ratio":
            fragments.append(build_trl_pinned_ratio(args.work, args.trl_max_steps, args.jobs))
        elif name == "sb3_nan":
            fragments.append(build_sb3_nan(args.work, args.sb3_old_venv))
        else:
            fragments.append(build_sb3_zoo_cartpole(args.jobs))
        print(f"[{name}] done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print("\n".join(fragments))


if __name__ == "__main__":
    main()

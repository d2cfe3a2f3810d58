"""Assembling an experiment from a composed config: the checks that need several parts
(algorithm, env, backend, fault) happen here, above the low-level config schemas."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from faults import FAULTS, build_fault
from harness.agents.base import trainer_for, trainers_of
from harness.config import (
    ALGO_SCHEMAS,
    BackendConfig,
    ConfigError,
    EnvConfig,
    Experiment,
    check_range,
    to_object,
)
from harness.detection import public
from harness.envs import check_env


def load_experiment(cfg: DictConfig) -> Experiment:
    """Validate a composed config and build the experiment; raises ConfigError."""
    check_range("", "seed", cfg.seed, ge=0, le=2**32 - 1, kind=int)
    check_range("", "torch_threads", cfg.torch_threads, ge=1, le=256, kind=int)
    algo_name = cfg.algo.get("name")
    if algo_name not in ALGO_SCHEMAS:
        raise ConfigError(f"unknown algo {algo_name!r}; valid choices: {', '.join(ALGO_SCHEMAS)}")
    algo = to_object(cfg.algo, ALGO_SCHEMAS[algo_name], "algo")
    env = to_object(cfg.env, EnvConfig, "env")
    check_env(env)
    backend = to_object(cfg.backend, BackendConfig, "backend")
    trainers = trainers_of(backend)
    if not trainers:
        raise ConfigError(f"backend={backend.name} names no trainer (backend.trainers in harness/conf/backend/{backend.name}.yaml)")
    trainer = next((t for t in trainers if t.algo == algo.name), trainers[0])
    if env.engine not in trainer.env_engines:
        raise ConfigError(f"env.engine={env.engine} steps the native trainers' envs; backend={backend.name} makes its "
                          "own (use env.engine=gymnasium)")
    trainer.check_setup(algo, env)                   # one line naming why this backend cannot run it
    check_callbacks(backend.callbacks, backend.name, trainer.takes_callbacks)
    trainer_for(backend, algo.name)
    fault_cfg = OmegaConf.to_container(cfg.fault, resolve=True)
    fault = checked_fault(fault_cfg, algo.name, backend)
    trainer.check_fault_on_env(fault, env)
    check_results_dir(cfg.results_dir)
    exp = Experiment(algo=configured_algo(fault, algo, backend), env=env, backend=backend, fault=fault,
                     fault_cfg=fault_cfg, seed=cfg.seed, torch_threads=cfg.torch_threads,
                     results_dir=cfg.results_dir, twin=cfg.twin, progress=cfg.progress,
                     retrain=bool(cfg.get("retrain", False)), tensorboard=bool(cfg.get("tensorboard", False)))
    check_budget(exp)
    check_seed_onsets(exp, cfg.get("seeds", 1), cfg.get("seed_onsets"))
    return exp


def with_onset(exp: Experiment, onset: int) -> Experiment:
    """``exp`` with its fault switching on at update ``onset`` (the run's identity follows)."""
    return dataclasses.replace(exp, fault=dataclasses.replace(exp.fault, onset=onset),
                               fault_cfg={**exp.fault_cfg, "onset": onset})


def check_seed_onsets(exp: Experiment, seeds: int, onsets: Sequence[int] | None) -> None:
    """``seed_onsets`` (one fault onset per seed, a sweep's mid-run onsets) must name a fault, give one
    onset per seed, and switch the fault on within the run; raises ConfigError."""
    if onsets is None:
        return
    onsets = list(onsets)
    if exp.fault.name == "none":
        raise ConfigError("seed_onsets is the fault's onset per seed: it means nothing with fault=none")
    if len(onsets) != seeds:
        raise ConfigError(f"seed_onsets has {len(onsets)} onsets for seeds={seeds}: give one per seed")
    for onset in onsets:
        if not isinstance(onset, int) or onset < 0:
            raise ConfigError(f"seed_onsets: {onset!r} is not an update index (an integer >= 0)")
    planned = trainer_for(exp.backend, exp.algo.name).updates_planned(exp)
    late = [o for o in onsets if o >= planned]
    if late:
        raise ConfigError(f"seed_onsets={onsets}: onset {late[0]} is beyond the run: env.total_timesteps="
                          f"{exp.env.total_timesteps} plans {planned} updates (0-{planned - 1}), so fault="
                          f"{exp.fault.name} would never switch on; choose onsets < {planned}")


def check_callbacks(callbacks: list[Any], backend: str, takes_callbacks: bool) -> None:
    """``backend.callbacks``: each a ``{_target_: ..., ...}`` that imports, on a backend whose training loop
    takes callbacks; a public monitor's (harness.detection.public.live_callback) names a tool that has one."""
    if not callbacks:
        return
    if not takes_callbacks:
        raise ConfigError(f"backend.callbacks: backend={backend} has no framework training loop to attach them to "
                          "(backend=trl does)")
    from hydra.utils import get_object

    for spec in callbacks:
        target = spec.get("_target_") if isinstance(spec, dict) else None
        if not target:
            raise ConfigError(f"backend.callbacks: {spec!r} is not {{_target_: a.dotted.callable, ...}}")
        try:
            get_object(target)
        except Exception:  # Hydra's import errors, in one line
            raise ConfigError(f"backend.callbacks: _target_={target} cannot be imported") from None
        if target == f"{public.__name__}.live_callback":
            public.check_live(spec.get("tool"))


def check_results_dir(results_dir: str) -> None:
    """Raise ConfigError unless ``results_dir`` is (or can be made) a directory this user can write."""
    path = Path(results_dir).expanduser()
    for p in (path / "runs", path, *path.absolute().parents):
        if p.exists():
            if not p.is_dir():
                what = f"results_dir={results_dir}" if p == path else f"{p} (in results_dir={results_dir})"
                raise ConfigError(f"{what} is a file, not a directory: runs are stored in <results_dir>/runs/")
            if not os.access(p, os.W_OK | os.X_OK):
                raise ConfigError(f"results_dir={results_dir}: {p} is not writable by this user")
            return


def _smallest_budget(exp: Experiment) -> int:
    """The smallest env.total_timesteps that buys one update (searched on the trainer's own count)."""
    def planned(total: int) -> int:
        return trainer_for(exp.backend, exp.algo.name).updates_planned(
            dataclasses.replace(exp, env=dataclasses.replace(exp.env, total_timesteps=total)))
    lo, hi = 1, max(2, exp.env.total_timesteps)
    while planned(hi) < 1 and hi < 2**40:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if planned(mid) < 1 else (lo, mid)
    return lo


def check_budget(exp: Experiment) -> None:
    """Refuse, before anything trains, a run with no update, a fault whose onset is beyond the run
    (it would never switch on), and an onset without a fault (a duplicate of the healthy run)."""
    planned = trainer_for(exp.backend, exp.algo.name).updates_planned(exp)
    total = exp.env.total_timesteps
    if planned < 1:
        need = _smallest_budget(exp)
        raise ConfigError(f"env.total_timesteps={total} buys no update (one update of algo={exp.algo.name} here "
                          f"takes {need}): raise env.total_timesteps to at least {need}")
    onset = exp.fault.onset
    if exp.fault.name == "none" and onset:
        raise ConfigError(f"fault.onset={onset} means nothing with fault=none (there is no fault to switch on): "
                          "drop fault.onset or choose a fault")
    if exp.fault.name != "none" and onset >= planned:
        raise ConfigError(f"fault.onset={onset} is beyond the run: env.total_timesteps={total} plans {planned} "
                          f"updates (0-{planned - 1}), so fault={exp.fault.name} would never switch on; "
                          f"choose fault.onset < {planned} or a larger env.total_timesteps")


def checked_fault(fault_cfg: dict, algo: str, backend: BackendConfig):
    """Build a fault from its config and check it applies to the algorithm and can be expressed on
    the backend; raises ConfigError."""
    fault = build_fault(fault_cfg)
    if algo in fault.algos and algo in backend.trainers:
        trainer_for(backend, algo).check_expressible(fault)   # one line naming why, before the generic refusal
    fault.check_applicable(algo=algo)
    return fault


def configured_algo(fault: Any, algo: Any, backend: BackendConfig) -> Any:
    """The algorithm config with the setting the fault's bug lives in (e.g. gradient accumulation),
    which its healthy twin shares; and whether the backend can run that config; raises ConfigError."""
    if algo.name in fault.algos:
        algo = fault.configure(algo)
    trainer_for(backend, algo.name).check_expressible(fault, algo)
    return algo


def fault_config(name: str) -> dict:
    """A fault's config as ``fault=<name>`` composes it (its class's defaults, Fault.default_config)."""
    if name not in FAULTS:
        raise ConfigError(f"unknown fault {name!r}; valid choices: {', '.join(sorted(FAULTS))}")
    return FAULTS[name].default_config()


def with_fault(exp: Experiment, name: str, **params: Any) -> Experiment:
    """``exp`` with fault ``name`` at its defaults (as composing ``fault=<name>`` would give),
    ``params`` (e.g. ``form``) replacing some of them."""
    cfg = {**fault_config(name), **params}
    fault = checked_fault(cfg, exp.algo.name, exp.backend)
    return dataclasses.replace(exp, fault=fault, fault_cfg=cfg, algo=configured_algo(fault, exp.algo, exp.backend))

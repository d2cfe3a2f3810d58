"""Assembling an experiment from a composed config: the checks that need several parts
(algorithm, env, backend, fault) happen here, above the low-level config schemas."""

from __future__ import annotations

import dataclasses
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
    trainer.check_setup(algo, env)                   # one line naming why this backend cannot run it
    trainer_for(backend, algo.name)
    fault_cfg = OmegaConf.to_container(cfg.fault, resolve=True)
    fault = checked_fault(fault_cfg, algo.name, backend)
    return Experiment(algo=configured_algo(fault, algo, backend), env=env, backend=backend, fault=fault,
                      fault_cfg=fault_cfg, seed=cfg.seed, torch_threads=cfg.torch_threads,
                      results_dir=cfg.results_dir, twin=cfg.twin, progress=cfg.progress)


def checked_fault(fault_cfg: dict, algo: str, backend: BackendConfig):
    """Build a fault from its config and check it applies to the algorithm and can be expressed on
    the backend; raises ConfigError."""
    fault = build_fault(fault_cfg)
    if algo in fault.algos and algo in backend.trainers:
        trainer_for(backend, algo).check_expressible(fault)   # one line naming why, before the generic refusal
    fault.check_applicable(algo=algo, backend=backend.name)
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

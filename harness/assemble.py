"""Assembling an experiment from a composed config: the checks that need several parts
(algorithm, env, backend, fault) happen here, above the low-level config schemas."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from faults import build_fault
from harness.config import (
    ALGO_SCHEMAS,
    BACKENDS,
    BackendConfig,
    ConfigError,
    EnvConfig,
    Experiment,
    check_range,
    to_object,
)
from harness.envs import check_env


GRPO_ENVS = {"harness/ToySeq-v0": "toyseq", "harness/HighDim-v0": "highdim"}


def check_grpo_env(algo, env: EnvConfig) -> None:
    """GRPO generates token sequences (env=toyseq) or high-dimensional samples (env=highdim);
    completions must fit in what the token env accepts."""
    if env.id not in GRPO_ENVS:
        raise ConfigError(f"algo=grpo generates token sequences or high-dimensional samples: it needs "
                          f"env={' or env='.join(GRPO_ENVS.values())}, not env={env.name}")
    if env.id == "harness/ToySeq-v0":
        capacity = env.kwargs.get("max_len", 10)
        if algo.max_new_tokens > capacity:
            raise ConfigError(f"algo.max_new_tokens={algo.max_new_tokens} exceeds the longest completion the "
                              f"task accepts (env.kwargs.max_len={capacity})")


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
    if backend.name not in BACKENDS:
        raise ConfigError(f"unknown backend {backend.name!r}; valid choices: {', '.join(BACKENDS)}")
    if backend.name == "sb3" and algo.name != "ppo":
        raise ConfigError(f"backend=sb3 runs stable-baselines3's PPO; algo={algo.name} runs on backend=native")
    if backend.name == "trl" and (algo.name != "grpo" or env.id != "harness/ToySeq-v0"):
        raise ConfigError(f"backend=trl runs TRL's GRPOTrainer on token tasks (algo=grpo env=toyseq), not "
                          f"algo={algo.name} env={env.name}")
    if algo.name == "grpo":
        check_grpo_env(algo, env)
    elif env.id == "harness/HighDim-v0":
        raise ConfigError(f"env=highdim scores whole high-dimensional samples: it runs with algo=grpo, not algo={algo.name}")
    fault_cfg = OmegaConf.to_container(cfg.fault, resolve=True)
    fault = checked_fault(fault_cfg, algo.name, backend.name)
    return Experiment(algo=configured_algo(fault, algo, backend.name), env=env, backend=backend, fault=fault,
                      fault_cfg=fault_cfg, seed=cfg.seed, torch_threads=cfg.torch_threads,
                      results_dir=cfg.results_dir, twin=cfg.twin, progress=cfg.progress)


def checked_fault(fault_cfg: dict, algo: str, backend: str):
    """Build a fault from its config and check it applies to the algorithm and can be expressed on
    the backend; raises ConfigError."""
    fault = build_fault(fault_cfg)
    if backend == "sb3" and algo in fault.algos:
        from harness.agents.sb3 import check_expressible

        check_expressible(fault)     # one line naming why, before the generic refusal below
    if backend == "trl" and algo in fault.algos:
        from harness.agents.trl import check_expressible as check_trl

        check_trl(fault)
    fault.check_applicable(algo=algo, backend=backend)
    return fault


def configured_algo(fault: Any, algo: Any, backend: str) -> Any:
    """The algorithm config with the setting the fault's bug lives in (e.g. gradient accumulation),
    which its healthy twin shares; on SB3 and TRL, also whether that config can run; raises ConfigError."""
    if algo.name in fault.algos:
        algo = fault.configure(algo)
    if backend == "sb3":
        from harness.agents.sb3 import check_expressible

        check_expressible(fault, algo)
    elif backend == "trl":
        from harness.agents.trl import check_expressible as check_trl

        check_trl(fault, algo)
    return algo


def fault_config(name: str) -> dict:
    """A fault's config as ``fault=<name>`` composes it (conf/fault/<name>.yaml)."""
    from harness.cli import CONF_DIR

    path = CONF_DIR / "fault" / f"{name}.yaml"
    if not path.exists():
        from faults import FAULTS

        raise ConfigError(f"unknown fault {name!r}; valid choices: {', '.join(sorted(FAULTS))}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


class SampledBases:
    """The base experiment of each sampled run (the dataset sweep's plan and its batch jobs use the
    same one, so their run ids agree): the run's setup composed once by ``compose_setup`` (a
    ``{algo, env, backend}`` dict -> the fault-free experiment), with the drawn fault in its drawn
    form added by :func:`with_fault`, cached per setup, fault and form."""

    def __init__(self, compose_setup: Any):
        self.compose_setup = compose_setup
        self.setups: dict[tuple[str, str, str], Experiment] = {}
        self.bases: dict[tuple[str, ...], Experiment] = {}

    def __call__(self, spec: Any) -> Experiment:
        s = spec.setup
        where = (s["algo"], s["env"], s["backend"])
        if where not in self.setups:
            self.setups[where] = self.compose_setup(s)
            if self.setups[where].algo.name != s["algo_name"]:
                raise ConfigError(f"hydra.sweeper.space.setups: algo={s['algo']} is a "
                                  f"{self.setups[where].algo.name} config, not {s['algo_name']}")
        form = {"form": spec.fault_params["form"]} if "form" in spec.fault_params else {}
        key = (*where, spec.fault, *form.values())
        if key not in self.bases:
            self.bases[key] = with_fault(self.setups[where], spec.fault, **form)
        return self.bases[key]


def with_fault(exp: Experiment, name: str, **params: Any) -> Experiment:
    """``exp`` with fault ``name`` at its defaults (as composing ``fault=<name>`` would give),
    ``params`` (e.g. ``form``) replacing some of them."""
    import dataclasses

    cfg = {**fault_config(name), **params}
    fault = checked_fault(cfg, exp.algo.name, exp.backend.name)
    return dataclasses.replace(exp, fault=fault, fault_cfg=cfg,
                               algo=configured_algo(fault, exp.algo, exp.backend.name))

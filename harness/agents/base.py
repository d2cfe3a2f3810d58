"""What every trainer provides, and what the framework backends (SB3, TRL) share.

A backend (``harness/conf/backend/<name>.yaml``) names one :class:`Trainer` class per algorithm it runs
(``trainers: {ppo: {_target_: harness.agents.ppo.PPOTrainer}}``); :func:`trainer_for` builds it, as every
part is built (:func:`harness.config.instantiate`). A trainer
yields one row of canonical metrics per update (:mod:`harness.metrics`), says how many updates a
budget buys, refuses a fault or configuration it cannot run with one line, and, where a framework
logs a quantity the harness also measures, checks that the two agree.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any, ClassVar

from harness.config import BackendConfig, ConfigError, EnvConfig, Experiment, instantiate
from harness.config.schemas import backend_config, backend_names
from harness.hooks import HOOK_SITES, Hooks, overrides


class Trainer(ABC):
    """Trains one algorithm on one backend."""

    #: the backend (``backend=<name>``) and algorithm (``algo.name``) this trainer runs
    backend: ClassVar[str]
    algo: ClassVar[str]
    #: how a fault's form on this backend differs from the native one, beyond the shared mechanism
    #: (explains a native-vs-this-backend disagreement in the catalogue); a fault not listed acts alike
    differences: ClassVar[Mapping[str, str]] = {}
    #: what differs from the native backend for every run, healthy ones included
    common_differences: ClassVar[str] = ""
    #: whether its training loop takes a framework's callbacks (``backend.callbacks``)
    takes_callbacks: ClassVar[bool] = False
    #: a run's wall time relative to a native run's at the same budget (sweeps start the longest first)
    cost: ClassVar[float] = 1.0
    #: the env engines (``env.engine``) it steps; a framework's trainer makes its own envs
    env_engines: ClassVar[tuple[str, ...]] = ("gymnasium", "envpool")
    #: whether its catalogue runs may train the diagnosis model (no: a framework whose own logs are a test set)
    trains_the_model: ClassVar[bool] = True

    @abstractmethod
    def updates_planned(self, exp: Experiment) -> int:
        """How many updates the experiment's budget (``env.total_timesteps``) buys."""

    @abstractmethod
    def train(self, exp: Experiment) -> Iterator[dict[str, Any]]:
        """One row of canonical metrics per update (with ``steps``, ``episodes`` and ``files``
        entries the run store writes beside them)."""

    def check_setup(self, algo: Any, env: EnvConfig) -> None:
        """Raise a one-line ConfigError if this trainer cannot run ``algo`` on ``env``."""

    def check_expressible(self, fault: Hooks, algo: Any = None) -> None:
        """Raise a one-line ConfigError if this backend cannot run ``fault`` (with ``algo``, if given): here,
        when the fault itself says why (its ``refusal``)."""
        refusal = fault.refusal(self.backend) if hasattr(fault, "refusal") else None
        if refusal:
            name = getattr(fault, "name", type(fault).__name__)
            raise ConfigError(f"fault {name} cannot be expressed on backend={self.backend}: {refusal}")

    def check_fault_on_env(self, fault: Hooks, env: EnvConfig) -> None:
        """Raise a one-line ConfigError if ``fault`` acts where this trainer's loop on ``env`` never
        reaches (it would run silently unapplied)."""

    def crosscheck(self, measured: Mapping[str, float], logged: Mapping[str, float]) -> None:
        """Raise if a metric the harness measures disagrees with the framework's own logged value."""


class FrameworkTrainer(Trainer):
    """A trainer that runs a framework's own code unmodified: faults reach it only through the
    framework's extension points, listed in ``expressible`` (hook -> where); the hooks in
    ``not_expressible`` (hook -> why) refuse the fault, and so does a hook in neither (this trainer
    never calls it: the fault would run silently unapplied). Instrumentation recomputes what the
    framework logs and :meth:`crosscheck` compares them."""

    #: the framework's name in messages ("SB3", "TRL")
    framework: ClassVar[str]
    expressible: ClassVar[Mapping[str, str]]
    not_expressible: ClassVar[Mapping[str, str]]
    #: relative tolerance of :meth:`crosscheck`
    crosscheck_rtol: ClassVar[float] = 1e-4
    env_engines: ClassVar[tuple[str, ...]] = ("gymnasium",)

    def check_expressible(self, fault: Hooks, algo: Any = None) -> None:
        name = getattr(fault, "name", type(fault).__name__)
        for hook in sorted(self.not_expressible):
            if overrides(fault, hook):
                raise ConfigError(f"fault {name} cannot be expressed on backend={self.backend}: it acts on {hook} "
                                  f"({self.not_expressible[hook]})")
        unreached = [h for h in HOOK_SITES if overrides(fault, h) and h not in self.expressible]
        if unreached:
            raise ConfigError(f"fault {name} cannot be expressed on backend={self.backend}: it acts on {unreached[0]}, "
                              f"which {self.framework}'s trainer never reaches")
        super().check_expressible(fault)
        if algo is not None:
            self.check_config(fault, algo)

    def check_config(self, fault: Hooks, algo: Any) -> None:
        """Raise a one-line ConfigError if the configuration (or the fault's change to it) cannot run."""

    def crosscheck(self, measured: Mapping[str, float], logged: Mapping[str, float]) -> None:
        """The instrumentation recomputes what the framework also logs; if they ever disagree, the
        framework changed under us and no metric of this run can be trusted."""
        for metric, a in measured.items():
            b = logged[metric]
            if math.isfinite(a) and math.isfinite(b) and abs(a - b) > self.crosscheck_rtol * max(1.0, abs(b)):
                raise RuntimeError(f"instrumented {metric}={a!r} disagrees with {self.framework}'s logged value {b!r}")


@functools.cache
def _trainer(spec: str, algo: str) -> Trainer:
    """One trainer per config (``spec`` as JSON): trainers hold no state, and :func:`backends_of` asks
    for each one once per fault."""
    return instantiate(json.loads(spec), f"backend.trainers.{algo}", Trainer)


def trainer_for(backend: BackendConfig, algo: str) -> Trainer:
    """The trainer backend ``backend`` names for ``algo`` (``backend.trainers.<algo>``, a ``_target_``);
    raises a one-line ConfigError when it has none (each backend's own trainer says why, e.g. SB3 runs
    PPO only) or it cannot be built."""
    spec = backend.trainers.get(algo)
    if spec is None:
        raise ConfigError(f"backend={backend.name} has no trainer for algo={algo}; it trains "
                          f"{', '.join(sorted(backend.trainers)) or 'nothing'}")
    return _trainer(json.dumps(spec, sort_keys=True), algo)


def forms_of(cls: type) -> list[Any]:
    """The fault at its defaults, then with each other value of each parameter that has choices (its
    ``form``, ``variant``, estimator, ...): the forms a backend may express."""
    out = [cls()]
    for f in fields(cls):
        for value in (f.metadata.get("bounds") or {}).get("choices") or ():
            if value != f.default:
                with contextlib.suppress(ConfigError, TypeError, ValueError):
                    out.append(cls(**{f.name: value}))
    return out


@functools.cache
def backends_of(cls: type) -> tuple[str, ...]:
    """The backends that can run fault ``cls``: those with a trainer for one of its algorithms that
    expresses it in some form (:func:`forms_of`; each trainer's ``check_expressible`` and the fault's own
    ``refusal``). Derived, never declared: a new backend needs no change to any fault."""
    out = []
    for name in backend_names():
        backend = backend_config(name)
        for algo in cls.algos:
            if algo not in backend.trainers:
                continue
            trainer = trainer_for(backend, algo)
            if any(expresses(trainer, fault) for fault in forms_of(cls)):
                out.append(name)
                break
    return tuple(out)


def expresses(trainer: Trainer, fault: Any) -> bool:
    """Whether ``trainer`` runs ``fault`` (its ``check_expressible`` raises no ConfigError)."""
    try:
        trainer.check_expressible(fault)
    except ConfigError:
        return False
    return True


def trainers_of(backend: BackendConfig) -> list[Trainer]:
    """Every trainer the backend names."""
    return [trainer_for(backend, algo) for algo in backend.trainers]

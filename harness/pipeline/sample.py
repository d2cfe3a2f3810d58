"""Sampled configurations for the diverse labelled dataset (``python -m harness -m +sweep=dataset``).

The *space* (``hydra.sweeper.space`` in harness/conf/sweep/dataset.yaml) says, as data, what is drawn per
run: a setup (algorithm config, env, backend, budget) by weight; every hyperparameter from a
distribution covering CleanRL's, SB3/rl-zoo's, TRL's and verl's defaults and common tuned values;
healthy (a share of the runs) or a fault applicable to the setup (the one drawn least often so far for
the setup's algorithm, so every fault gets about as many runs of each algorithm as the others), with its severity drawn from its
own range; a share of all runs (healthy or with another fault) configured in the setting one of the
setup's faults needs (gradient accumulation, a sampler in bf16, top-p with sampler log-probs...:
``Fault.setting``), so that the configuration alone does not name the fault, as the catalogue's
twins ensure there; an onset (0, or a mid-run update in the first third of training); a seed. Constraints
(a batch that leaves enough updates in the budget, minibatches of at least 2 samples) are met
by redrawing.

A :class:`Spec` is one drawn run. :func:`specialise` turns a base experiment (composed once per
setup and fault, as the CLI does) into the spec's experiment without composing again, so
planning hundreds of unique runs is fast; the run id is the same as composing the spec's
overrides would give (a test checks).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from faults import FAULTS
from harness.agents.base import backends_of
from harness.config import ConfigError, Experiment
from harness.pipeline.assemble import with_fault
from harness.pipeline.compose import override_value

DISTRIBUTIONS = ("const", "choice", "uniform", "loguniform", "int", "logint", "either")


def draw(spec: Any, rng: np.random.Generator) -> Any:
    """One value from ``[kind, ...]``: ``[const, v]``, ``[choice, [a, b, ...]]``, ``[uniform, lo, hi]``,
    ``[loguniform, lo, hi]``, ``[int, lo, hi]`` (inclusive), ``[logint, lo, hi]`` (inclusive,
    log-uniform), ``[either, p, A, B]`` (a draw from A with probability p, else from B); a bare
    value is a constant."""
    if not isinstance(spec, (list, tuple)) or not spec or spec[0] not in DISTRIBUTIONS:
        return spec
    kind, *args = spec
    if kind == "const":
        return args[0]
    if kind == "either":
        p, first, second = args
        return draw(first, rng) if rng.random() < p else draw(second, rng)
    if kind == "choice":
        options = list(args[0])
        value = options[int(rng.integers(len(options)))]
        return value.item() if isinstance(value, np.generic) else value
    lo, hi = args
    if kind == "uniform":
        return float(rng.uniform(lo, hi))
    if kind == "loguniform":
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    if kind == "int":
        return int(rng.integers(lo, hi + 1))
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 0.999))) - 0.499))


def check_distribution(where: str, spec: Any) -> None:
    if isinstance(spec, (list, tuple)) and spec and isinstance(spec[0], str) and spec[0] not in DISTRIBUTIONS:
        raise ConfigError(f"{where}={list(spec)}: unknown distribution {spec[0]!r}; valid: {', '.join(DISTRIBUTIONS)}")


@dataclass(frozen=True)
class Spec:
    """One sampled run: its setup, hyperparameters, fault (with severity and onset) and seed."""

    setup: dict[str, Any]                 # {algo, env, backend, ...} from the space's setups
    algo: dict[str, Any]                  # sampled algorithm hyperparameters (schema names)
    env: dict[str, Any]                   # sampled env settings (total_timesteps, kwargs)
    fault: str
    fault_params: dict[str, Any]
    onset: int
    seed: int
    index: int

    def overrides(self) -> list[str]:
        """The command line that trains this run alone (``python -m harness ...``)."""
        out = [f"algo={self.setup['algo']}", f"env={self.setup['env']}", f"backend={self.setup['backend']}",
               f"fault={self.fault}", f"seed={self.seed}"]
        out += [f"algo.{k}={override_value(v)}" for k, v in self.algo.items()]
        out += [f"env.{k}={override_value(v)}" for k, v in self.env.items() if k != "kwargs"]
        out += [f"env.kwargs.{k}={override_value(v)}" for k, v in self.env.get("kwargs", {}).items()]
        out += [f"fault.{k}={override_value(v)}" for k, v in self.fault_params.items()]
        if self.onset:
            out.append(f"fault.onset={self.onset}")
        return out

    def record(self) -> dict[str, Any]:
        """What meta.json records of the draw (every sampled value)."""
        return {"index": self.index, "setup": self.setup, "algo": self.algo, "env": self.env,
                "fault": self.fault, "fault_params": self.fault_params, "onset": self.onset, "seed": self.seed}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Spec:
        return cls(**json.loads(text))


def specialise(base: Experiment, spec: Spec) -> Experiment:
    """The spec's experiment from a base composed with the spec's setup and fault: the sampled
    hyperparameters, budget, fault parameters, onset and seed replaced and validated."""
    fault = dataclasses.replace(base.fault, **spec.fault_params, onset=spec.onset)
    algo = dataclasses.replace(base.algo, **spec.algo)
    algo.validate()
    if algo.name in fault.algos:
        algo = fault.configure(algo)    # the setting the fault's bug lives in, at its sampled severity
    env_changes = dict(spec.env)
    if "kwargs" in env_changes:
        env_changes["kwargs"] = {**base.env.kwargs, **env_changes["kwargs"]}
    env = dataclasses.replace(base.env, **env_changes)
    env.validate()
    fault_cfg = {**base.fault_cfg, **spec.fault_params, "onset": spec.onset}
    return dataclasses.replace(base, algo=algo, env=env, fault=fault, fault_cfg=fault_cfg, seed=spec.seed,
                               sampled=spec.record())


class Space:
    """The sampling space of harness/conf/sweep/dataset.yaml, validated."""

    def __init__(self, space: Mapping[str, Any]):
        self.setups = [dict(s) for s in space.get("setups") or []]
        if not self.setups:
            raise ConfigError("hydra.sweeper.space.setups is empty: nothing to sample")
        self.hyperparameters = {k: dict(v) for k, v in (space.get("hyperparameters") or {}).items()}
        self.faults = {k: dict(v or {}) for k, v in (space.get("faults") or {}).items()}
        self.healthy_share = float(space.get("healthy_share", 0.3))
        self.setting_share = float(space.get("setting_share", 0.5))
        self.mid_onset_share = float(space.get("mid_onset_share", 0.5))
        self.min_updates = int(space.get("min_updates", 15))
        self.updates = space.get("updates", ["int", 20, 50])
        self.max_batch = int(space.get("max_batch", 4096))
        self.min_batch = int(space.get("min_batch", 1))
        self.max_cost = float(space.get("max_cost", 20.0))
        if not 0.2 <= self.healthy_share < 1:
            raise ConfigError(f"hydra.sweeper.space.healthy_share={self.healthy_share} must be in [0.2, 1)")
        if not 0 <= self.setting_share <= 1:
            raise ConfigError(f"hydra.sweeper.space.setting_share={self.setting_share} must be in [0, 1]")
        self.only = [str(f) for f in space.get("only") or []]
        self.setups_only = [str(n) for n in space.get("setups_only") or []]
        named = {str(s.get("name")) for s in self.setups if s.get("name")}
        unknown_setups = sorted(set(self.setups_only) - named)
        if unknown_setups:
            raise ConfigError(f"unknown setup {unknown_setups[0]!r} in hydra.sweeper.space.setups_only; valid: "
                              f"{', '.join(sorted(named)) or 'none (no setup has a name)'}")
        unknown = sorted((set(self.faults) | set(self.only)) - set(FAULTS))
        if unknown:
            raise ConfigError(f"unknown fault {unknown[0]!r} in hydra.sweeper.space.faults or .only; valid: "
                              f"{', '.join(sorted(FAULTS))}")
        for name, params in self.faults.items():
            valid = set(FAULTS[name].param_docs()) - {"onset"}
            for p, dist in params.items():
                if p not in valid:
                    raise ConfigError(f"unknown parameter {p!r} of fault {name} in hydra.sweeper.space.faults; "
                                      f"valid: {', '.join(sorted(valid)) or 'none'}")
                check_distribution(f"hydra.sweeper.space.faults.{name}.{p}", dist)
        for algo, dists in self.hyperparameters.items():
            for k, dist in dists.items():
                check_distribution(f"hydra.sweeper.space.hyperparameters.{algo}.{k}", dist)
        for s in self.setups:
            for key in ("algo", "env", "backend", "algo_name"):
                if key not in s:
                    raise ConfigError(f"hydra.sweeper.space.setups entry {s} needs {key}")

    def _drawn_setup(self, setup: dict[str, Any]) -> bool:
        """Whether a targeted sample draws ``setup``: with ``setups_only``, only the named setups; with
        ``only`` (some faults), only setups one of them applies to (healthy-only controls left out)."""
        if self.setups_only and setup.get("name") not in self.setups_only:
            return False
        return not self.only or bool(self.applicable_faults(setup) and not setup.get("healthy_only", False))

    def applicable_faults(self, setup: dict[str, Any]) -> list[str]:
        return sorted(n for n, cls in FAULTS.items() if n != "none" and setup["algo_name"] in cls.algos
                      and setup["backend"] in backends_of(cls) and (not self.only or n in self.only))

    def _hyperparameters(self, setup: dict[str, Any], rng: np.random.Generator) -> tuple[dict, dict]:
        """Draw the hyperparameters and the number of updates until the run fits: a batch no larger
        than ``max_batch`` and (PPO) no smaller than ``min_batch`` (a setup may set its own), minibatches of at least 2
        samples (SB3 refuses 1), and an estimated cost (seconds on one
        core, :func:`estimated_cost`) no more than ``max_cost``."""
        dists = {**self.hyperparameters.get(setup["algo_name"], {}), **(setup.get("hyperparameters") or {})}
        for _ in range(10000):
            hp = {k: draw(v, rng) for k, v in dists.items()}
            batch, per_update = batch_of(setup["algo_name"], hp, setup)
            updates = int(draw(setup.get("updates", self.updates), rng))
            min_batch = int(setup.get("min_batch", self.min_batch if setup["algo_name"] == "ppo" else 1))
            if (min_batch <= batch <= self.max_batch and batch // hp.get("n_minibatches", 1) >= 2
                    and updates >= self.min_updates
                    and estimated_cost(setup, hp, updates) <= float(setup.get("max_cost", self.max_cost))):
                env = {"total_timesteps": per_update * updates}
                kwargs = {k: draw(v, rng) for k, v in (setup.get("env_kwargs") or {}).items()}
                if kwargs:
                    env["kwargs"] = kwargs
                return hp, env
        raise ConfigError(f"hydra.sweeper.space: no draw of {setup['algo']} hyperparameters on {setup['env']} fits "
                          f"max_cost={self.max_cost} s with >= {self.min_updates} updates (widen the ranges)")

    @staticmethod
    def _expressible_form(fault: str, params: dict[str, Any], backend: str) -> dict[str, Any]:
        """The fault in a form ``backend`` can run (e.g. a code bug inside SB3's PPO.train() is met there
        as the misconfigured value a user would type): the drawn form if the backend takes it, else the
        first that works (the fault's ``refusal`` says)."""
        cls = FAULTS[fault]
        for form in dict.fromkeys([params.get("form", None), *cls.forms()]):
            trial = {**params, "form": form} if form is not None and len(cls.forms()) > 1 else params
            if cls(**trial).refusal(backend) is None:
                return trial
        return params

    def _least_drawn(self, algo: str, faults: list[str], rng: np.random.Generator) -> str:
        """One of the applicable faults drawn least often so far for this algorithm (ties at random), so
        every fault gets about as many runs of each algorithm it applies to as any other (a fault of
        PPO and GRPO is not split between them: each framework view needs its own runs)."""
        fewest = min(self.drawn[algo, f] for f in faults)
        tied = [f for f in faults if self.drawn[algo, f] == fewest]
        return tied[int(rng.integers(len(tied)))]

    def _fault_params(self, fault: str, setup: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        params = {k: draw(v, rng) for k, v in self.faults.get(fault, {}).items()}
        if fault != "none":
            params = self._expressible_form(fault, params, setup["backend"])
        return params

    def _other_setting(self, setup: dict[str, Any], faults: list[str], rng: np.random.Generator) -> dict[str, Any]:
        """The setting (``Fault.setting``) of one of ``faults`` that needs one, drawn uniformly
        with that fault's drawn severity: the configuration its bug lives in, without the bug (what
        the fault's catalogue twin runs)."""
        settings = []
        for name in faults:
            try:
                setting = FAULTS[name](**self._fault_params(name, setup, rng)).setting(setup.get("algo", ""))
            except ConfigError:
                continue
            if setting:
                settings.append(setting)
        return settings[int(rng.integers(len(settings)))] if settings else {}

    def _draw(self, index: int, rng: np.random.Generator, weights: np.ndarray,
              unrunnable: frozenset[str] = frozenset()) -> Spec:
        setup = self.setups[int(rng.choice(len(self.setups), p=weights / weights.sum()))]
        hp, env = self._hyperparameters(setup, rng)
        faults = self.applicable_faults(setup)
        choosable = [f for f in faults if f not in unrunnable]
        healthy = rng.random() < self.healthy_share or not choosable or setup.get("healthy_only", False)
        fault = "none" if healthy else self._least_drawn(setup["algo_name"], choosable, rng)
        params = self._fault_params(fault, setup, rng)
        if faults and not setup.get("healthy_only", False) and rng.random() < self.setting_share:
            hp = {**hp, **self._other_setting(setup, [f for f in faults if f != fault], rng)}
        run_seed = int(rng.integers(0, 2**31 - 1))
        return Spec(setup=setup, algo=hp, env=env, fault=fault, fault_params=params, onset=0, seed=run_seed,
                    index=index)

    def _unrunnable(self, refused: Mapping[str, set[int]], weights: np.ndarray) -> frozenset[str]:
        """Faults that every drawn setup they apply to has refused before any draw of them ran (``refused``
        holds only those; e.g. vf_clip_unscaled where every setup of a targeted sample clips the value, as
        CleanRL's do): left out of the least-drawn choice, else such a fault would stay the least drawn and
        turn every later draw healthy. A fault that has run is never left out (the full sample draws as
        before)."""
        drawable = [i for i, w in enumerate(weights) if w > 0]
        return frozenset(f for f, where in refused.items()
                         if all(i in where for i in drawable if f in self.applicable_faults(self.setups[i])))

    def sample(self, size: int, seed: int, n_updates) -> list[Spec]:
        """``size`` specs; ``n_updates(spec_without_onset)`` gives a run's planned updates (for the
        mid-run onset) and raises ConfigError for a draw that cannot run (it is drawn again).
        The draws depend on the fault registry: adding a fault changes the sample."""
        rng = np.random.default_rng(seed)
        weights = np.array([float(s.get("weight", 1.0)) if self._drawn_setup(s) else 0.0 for s in self.setups])
        if not weights.sum():
            raise ConfigError(f"hydra.sweeper.space.only={self.only} setups_only={self.setups_only}: no setup of the "
                              "space can run these faults")
        self.drawn: collections.Counter[tuple[str, str]] = collections.Counter()
        refused: dict[str, set[int]] = collections.defaultdict(set)   # fault not run yet -> setups that refused it
        specs = []
        for index in range(size):
            for _ in range(1000):       # a draw the fault's setting cannot run with is drawn again
                spec = self._draw(index, rng, weights, self._unrunnable(refused, weights))
                try:
                    n = n_updates(spec)
                except ConfigError:
                    if spec.fault != "none" and not self.drawn[spec.setup["algo_name"], spec.fault]:
                        refused[spec.fault].add(next(i for i, s in enumerate(self.setups) if s is spec.setup))
                    continue
                break
            else:
                raise ConfigError(f"hydra.sweeper.space: no valid draw for run {index} in 1000 tries "
                                  "(a fault's setting clashes with the hyperparameter ranges)")
            self.drawn[spec.setup["algo_name"], spec.fault] += 1
            refused.pop(spec.fault, None)       # it ran: a later refusal is that draw's, not the fault's
            kinds = FAULTS[spec.fault].onset_kinds
            if spec.fault != "none" and "mid" in kinds and ("0" not in kinds or rng.random() < self.mid_onset_share):
                spec = dataclasses.replace(spec, onset=int(rng.integers(1, max(2, n // 3 + 1))))
            specs.append(spec)
        return specs


#: seconds on one core per vector-env step call, per env step, per optimizer step, per update and per run
#: (fitted to an 80-run pilot of the dataset space, 2 jobs on 2 cores; a setup's ``cost`` multiplies the
#: env terms: slower envs, SB3, GRPO's generation)
COST = {"call": 6.6e-4, "env_step": 9e-6, "opt_step": 1.3e-3, "update": 4.4e-3, "run": 1.5}


def estimated_cost(setup: Mapping[str, Any], hp: Mapping[str, Any], updates: int) -> float:
    """A run's rough training time in seconds on one core (to keep the dataset sweep's runs short)."""
    factor = float(setup.get("cost", 1.0))
    if setup["algo_name"] == "grpo":
        batch, _ = batch_of("grpo", hp, setup)
        tokens = int(setup.get("tokens_per_completion", 1))
        generate = tokens * (COST["call"] + batch * COST["env_step"] * 4)
        train = int(hp.get("num_iterations", 1)) * int(hp.get("n_minibatches", 1)) * COST["opt_step"] * 4
        return COST["run"] + updates * factor * (generate + train + batch * tokens * COST["env_step"] * 8)
    n_steps, num_envs = int(hp.get("n_steps", 128)), int(hp.get("num_envs", 16))
    rollout = n_steps * COST["call"] + n_steps * num_envs * COST["env_step"]
    train = int(hp.get("n_epochs", 1)) * int(hp.get("n_minibatches", 1)) * COST["opt_step"]
    return COST["run"] + updates * (factor * rollout + train + COST["update"])


def batch_of(algo: str, hp: Mapping[str, Any], setup: Mapping[str, Any]) -> tuple[int, int]:
    """(samples per batch, env steps per update) of a draw."""
    if algo == "grpo":
        batch = int(hp.get("n_prompts", setup.get("n_prompts", 16))) * int(hp.get("group_size", setup.get("group_size", 8)))
        return batch, batch * int(setup.get("tokens_per_completion", 1))
    batch = int(hp.get("num_envs", setup.get("num_envs", 16))) * int(hp.get("n_steps", setup.get("n_steps", 128)))
    return batch, batch


def digest(specs: Sequence[Spec]) -> str:
    return hashlib.sha256("\n".join(s.to_json() for s in specs).encode()).hexdigest()[:12]


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


__all__ = ["SampledBases", "Space", "Spec", "batch_of", "draw", "specialise"]

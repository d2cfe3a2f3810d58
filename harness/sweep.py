"""The catalogue sweep: every registered fault x every setup it applies to x seeds, plus the
healthy runs and the healthy look-alike controls.

``plan`` turns the sweep's settings (``hydra.sweeper.*`` in conf/sweep/catalogue.yaml) into
job override lists; the Hydra sweeper plugin (hydra_plugins/harness_sweeper) launches them
through whatever Hydra launcher is configured (joblib, ray, submitit), skipping runs already
in the store and reporting progress while they run.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from faults import FAULTS
from harness.assemble import load_experiment
from harness.config import ConfigError
from harness.store import RunStore, run_id


@dataclass(frozen=True)
class Setup:
    """An (algorithm config, env config, backend) to run faults on."""

    algo: str
    env: str
    backend: str = "native"

    def overrides(self) -> list[str]:
        return [f"algo={self.algo}", f"env={self.env}", f"backend={self.backend}"]


def as_setups(items: Sequence[Any]) -> list[Setup]:
    return [Setup(**dict(item)) for item in items]


def plan(setups: Sequence[Setup], controls: Sequence[Setup], faults: Sequence[str] | str,
         seeds: int, algo_name: Callable[[Setup], str], extra: Sequence[str] = ()) -> list[list[str]]:
    """Job override lists: each fault on every setup whose algorithm and backend it applies to
    (fault=none is the healthy run; a fault that lives in a setting of its own, e.g. gradient
    accumulation, also gets healthy runs in that setting), and fault=none on every control;
    ``seeds`` seeds each, longest jobs first."""
    names = sorted(FAULTS) if faults == "all" else list(faults)
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ConfigError(f"unknown fault {unknown[0]!r} in hydra.sweeper.faults; valid choices: "
                          f"{', '.join(sorted(FAULTS))}")
    if seeds < 1:
        raise ConfigError(f"hydra.sweeper.seeds={seeds} must be >= 1")
    cases: list[tuple[Setup, str, tuple[str, ...]]] = []
    for setup in setups:
        algo = algo_name(setup)
        for name in names:
            cls = FAULTS[name]
            if algo in cls.algos and setup.backend in cls.backends and _expressible(cls, setup.backend):
                cases.append((setup, name, ()))
                setting = tuple(f"algo.{k}={_yaml(v)}" for k, v in sorted(cls().setting().items()))
                if setting and (setup, "none", setting) not in cases:
                    cases.append((setup, "none", setting))
    cases += [(control, "none", ()) for control in controls]
    cases.sort(key=lambda case: _cost_rank(algo_name(case[0]), case[0]))
    return [[*setup.overrides(), f"fault={fault}", *setting, f"seed={seed}", "twin=false", "progress=false", *extra]
            for setup, fault, setting in cases for seed in range(seeds)]


def _expressible(cls: type, backend: str) -> bool:
    """Whether the fault in its default form runs on this backend (e.g. a form SB3 cannot take)."""
    if backend != "sb3":
        return True
    from harness.agents.sb3 import check_expressible
    try:
        check_expressible(cls())
    except ConfigError:
        return False
    return True


def _yaml(value: Any) -> str:
    """A value as a Hydra override writes it."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def plan_runs(settings: dict[str, Any], arguments: Sequence[str],
              compose: Callable[[list[str]], Any]) -> list[tuple[list[str], str]]:
    """The sweep's jobs with their run ids, every job validated; raises ConfigError.

    ``compose`` turns overrides into a config (Hydra's loader in the sweeper, the compose
    API in the CLI's preflight). One config is composed per (setup, fault); seeds only
    change the run's seed.
    """
    if any(a.split("=", 1)[0].lstrip("+") == "seed" for a in arguments):
        raise ConfigError("the catalogue sweep sets the seeds itself: use hydra.sweeper.seeds=N")
    algo_names: dict[Setup, str] = {}

    def algo_name(setup: Setup) -> str:
        if setup not in algo_names:
            algo_names[setup] = load_experiment(compose([*setup.overrides(), *arguments])).algo.name
        return algo_names[setup]

    jobs = plan(as_setups(settings["setups"]), as_setups(settings["controls"]), settings["faults"],
                int(settings["seeds"]), algo_name, extra=arguments)
    experiments: dict[tuple[str, ...], Any] = {}
    runs = []
    for job in jobs:
        seed = int(next(o for o in job if o.startswith("seed="))[len("seed="):])
        case = tuple(o for o in job if not o.startswith("seed="))
        if case not in experiments:
            experiments[case] = load_experiment(compose([*case, "seed=0"]))
        runs.append((job, run_id(dataclasses.replace(experiments[case], seed=seed).key())))
    return runs


def _cost_rank(algo: str, setup: Setup) -> int:
    """Longest jobs first (GRPO, then SB3's PPO, then native PPO), which balances the workers."""
    return 0 if algo == "grpo" else 1 if setup.backend == "sb3" else 2


class StoreProgress:
    """Prints a progress line while jobs run elsewhere, by watching their runs appear in the
    store (works for any launcher whose workers share the file system)."""

    def __init__(self, store: RunStore, run_ids: Sequence[str], every_s: float = 10.0,
                 echo: Callable[[str], None] = print):
        self.store, self.run_ids, self.every_s, self.echo = store, list(run_ids), every_s, echo
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.start = time.monotonic()

    def counts(self) -> dict[str, int]:
        counts = {"ok": 0, "diverged": 0, "crashed": 0}
        for rid in self.run_ids:
            meta = self.store.load_meta(rid)
            if meta is not None:
                counts[meta["status"]] = counts.get(meta["status"], 0) + 1
        return counts

    def line(self) -> str:
        counts = self.counts()
        done = sum(counts.values())
        elapsed = time.monotonic() - self.start
        eta = f", ETA {_clock(elapsed / done * (len(self.run_ids) - done))}" if 0 < done < len(self.run_ids) else ""
        return (f"[sweep] {done}/{len(self.run_ids)} runs stored ({counts['diverged']} diverged, "
                f"{counts['crashed']} crashed), {_clock(elapsed)} elapsed{eta}")

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.echo(self.line())

    def __enter__(self) -> StoreProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"

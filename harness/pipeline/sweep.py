"""The catalogue sweep: every registered fault x every setup it applies to x onsets x seeds, plus
the healthy runs and the healthy look-alike controls.

Each fault runs with onset 0 and with a mid-run onset (``onsets``): a seed's mid-run onset is
drawn (deterministically from the fault and the seed) from the first third of its training, so
"alarms before onset" and "detection delay" are real measurements.

``plan`` turns the sweep's settings (``hydra.sweeper.*`` in harness/conf/sweep/catalogue.yaml) into
job override lists; the Hydra sweeper plugin (hydra_plugins/harness_sweeper) launches them
through whatever Hydra launcher is configured (joblib, ray, submitit), skipping runs already
in the store and reporting progress while they run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faults import FAULTS
from harness.agents.base import expresses, trainer_for
from harness.catalogue.progress import clock
from harness.config import ConfigError, backend_config
from harness.pipeline.assemble import load_experiment, with_onset
from harness.pipeline.compose import override_value
from harness.pipeline.sample import SampledBases, Space, digest, specialise
from harness.pipeline.train import n_updates_planned
from harness.store import RunStore, run_id


@dataclass(frozen=True)
class Setup:
    """An (algorithm config, env config, backend) to run faults on; ``onsets``: this setup's onset
    kinds when they differ from the sweep's (e.g. onset 0 alone where runs are expensive); ``extra``:
    overrides of this setup's runs alone (e.g. ``env.engine=envpool`` where that engine is faster)."""

    algo: str
    env: str
    backend: str = "native"
    onsets: tuple[str, ...] | None = None
    extra: tuple[str, ...] = ()

    def overrides(self) -> list[str]:
        return [f"algo={self.algo}", f"env={self.env}", f"backend={self.backend}", *self.extra]


def as_setups(items: Sequence[Any]) -> list[Setup]:
    """Setups from the sweep's YAML entries ({algo, env[, backend, onsets, extra]}); ConfigError for an
    unknown key or a missing one."""
    out = []
    known = [f.name for f in dataclasses.fields(Setup)]
    for item in items:
        fields = dict(item)
        unknown = [k for k in fields if k not in known]
        if unknown or not {"algo", "env"} <= set(fields):
            raise ConfigError(f"setup {fields}: " + (f"unknown key {unknown[0]!r}" if unknown else "needs algo and env")
                              + f"; valid keys: {', '.join(known)}")
        if fields.get("onsets") is not None:
            fields["onsets"] = tuple(str(o) for o in fields["onsets"])   # Hydra reads a bare 0 as an integer
        fields["extra"] = tuple(str(o) for o in fields.get("extra") or ())
        out.append(Setup(**fields))
    return out


def only_setups(setups: list[Setup], controls: list[Setup], only: Sequence[str]) -> tuple[list[Setup], list[Setup]]:
    """A part of the sweep (docs/catalogue.md, "Building it in parts"): the setups named in ``only``
    (``algo/env/backend``, e.g. ``ppo/acrobot/sb3``) and the controls on their env and backend; a
    ConfigError naming the valid setups for a name no setup has."""
    names = {f"{s.algo}/{s.env}/{s.backend}": s for s in setups}
    unknown = [n for n in only if n not in names]
    if unknown:
        raise ConfigError(f"hydra.sweeper.setups_only: no setup {unknown[0]!r}; the sweep's setups: {', '.join(names)}")
    chosen = [names[n] for n in dict.fromkeys(only)]
    places = {(s.env, s.backend) for s in chosen}
    return chosen, [c for c in controls if (c.env, c.backend) in places]


ONSETS = ("0", "mid")


def mid_onset(fault: str, seed: int, n_updates: int) -> int:
    """A mid-run onset in the first third of training, fixed by the fault and the seed."""
    digest = int(hashlib.sha256(f"onset/{fault}/{seed}".encode()).hexdigest()[:8], 16)
    return 1 + digest % max(1, n_updates // 3)


def plan(setups: Sequence[Setup], controls: Sequence[Setup], faults: Sequence[str] | str,
         seeds: int, algo_name: Callable[[Setup], str], extra: Sequence[str] = (),
         onsets: Sequence[str] = ("0",), n_updates: Callable[[Setup], int] | None = None) -> list[list[str]]:
    """Job override lists: each fault on every setup whose algorithm and backend it applies to,
    at each onset kind (fault=none is the healthy run, once, whether or not ``faults`` names it; a fault that lives in a setting of its own,
    e.g. gradient accumulation, also gets healthy runs in that setting), and fault=none on every control;
    ``seeds`` seeds each, longest jobs first: one job a run."""
    # the healthy runs are every cell's twins: planned whatever the faults asked for
    names = sorted(FAULTS) if faults == "all" else list(dict.fromkeys(["none", *faults]))
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise ConfigError(f"unknown fault {unknown[0]!r} in hydra.sweeper.faults; valid choices: "
                          f"{', '.join(sorted(FAULTS))}")
    if seeds < 1:
        raise ConfigError(f"hydra.sweeper.seeds={seeds} must be >= 1")
    onsets = [str(o) for o in onsets]        # Hydra reads a bare 0 as an integer
    for kinds, where in [(onsets, "hydra.sweeper.onsets"),
                         *((list(s.onsets), f"the onsets of setup {s.algo}/{s.env}/{s.backend}")
                           for s in setups if s.onsets is not None)]:
        bad = [o for o in kinds if o not in ONSETS]
        if bad or not kinds:
            raise ConfigError(f"{where}={list(kinds)}; valid values: {', '.join(ONSETS)}")
    cases: list[tuple[Setup, str, tuple[str, ...]]] = []
    for setup in setups:
        algo = algo_name(setup)
        for name in names:
            cls = FAULTS[name]
            if algo in cls.algos and expresses(trainer_for(backend_config(setup.backend), algo), cls()):
                cases.append((setup, name, ()))
                setting = tuple(f"algo.{k}={override_value(v)}" for k, v in sorted(cls().setting(algo).items()))
                if setting and (setup, "none", setting) not in cases:
                    cases.append((setup, "none", setting))
    cases += [(control, "none", ()) for control in controls]
    cases.sort(key=lambda case: _cost_rank(algo_name(case[0]), case[0]))
    jobs = []
    for setup, fault, setting in cases:
        # the onset kinds the fault can take among those asked for; a fault that exists mid-run only (a
        # resume's bug) asked for at onset 0 alone runs at the per-seed mid-run onsets a sweep of both
        # onsets draws, so an onset-0 part and a later mid-run one train the same runs (at its default
        # onset instead, both sweeps' runs of one seed landed in one cell)
        kinds = FAULTS[fault].onset_kinds
        wanted = onsets if setup.onsets is None else setup.onsets
        chosen = [o for o in wanted if o in kinds] or (["mid"] if "0" in wanted and "mid" in kinds else [])
        for onset in (chosen if fault != "none" else ("0",)):
            for seed in range(seeds):
                at = [] if onset == "0" else [f"fault.onset={mid_onset(fault, seed, n_updates(setup))}"]
                jobs.append([*setup.overrides(), f"fault={fault}", *setting, *at, f"seed={seed}", "twin=false",
                             "progress=false", *extra])
    return jobs


def plan_runs(settings: dict[str, Any], arguments: Sequence[str],
              compose: Callable[[list[str]], Any]) -> list[tuple[list[str], str]]:
    """The sweep's jobs with their run ids, every job validated; raises ConfigError.

    ``compose`` turns overrides into a config (Hydra's loader in the sweeper, the compose
    API in the CLI's preflight). One config is composed per (setup, fault); seeds only
    change the run's seed.
    """
    if any(a.split("=", 1)[0].lstrip("+") == "seed" for a in arguments):
        raise ConfigError("the catalogue sweep sets the seeds itself: use hydra.sweeper.seeds=N")
    base: dict[Setup, Any] = {}

    def healthy(setup: Setup) -> Any:
        if setup not in base:
            base[setup] = load_experiment(compose([*setup.overrides(), *arguments]))
        return base[setup]

    setups, controls = as_setups(settings["setups"]), as_setups(settings["controls"])
    if settings.get("setups_only"):
        setups, controls = only_setups(setups, controls, [str(n) for n in settings["setups_only"]])
    jobs = plan(setups, controls, settings["faults"],
                int(settings["seeds"]), lambda s: healthy(s).algo.name, extra=arguments,
                onsets=list(settings.get("onsets") or ("0",)),
                n_updates=lambda s: n_updates_planned(healthy(s)))
    experiments: dict[tuple[str, ...], Any] = {}
    runs = []
    for job in jobs:
        seed = int(next(o for o in job if o.startswith("seed="))[len("seed="):])
        onset = next((int(o.split("=")[1]) for o in job if o.startswith("fault.onset=")), 0)
        case = tuple(o for o in job if not o.startswith(("seed=", "fault.onset=")))
        if case not in experiments:
            experiments[case] = load_experiment(compose([*case, "seed=0"]))
        exp = experiments[case]
        exp = with_onset(dataclasses.replace(exp, seed=seed), onset)
        runs.append((job, run_id(exp.key())))
    return runs


#: an algorithm's run cost relative to PPO's at the same budget
ALGO_COST = {"grpo": 4.0}


@functools.cache
def run_cost(algo: str, backend: str) -> float:
    """A run's relative cost: the backend trainer's (``Trainer.cost``) times the algorithm's."""
    try:
        factor = trainer_for(backend_config(backend), algo).cost
    except ConfigError:           # no trainer for it: planning refuses it with its own message
        factor = 1.0
    return factor * ALGO_COST.get(algo, 1.0)


def _cost_rank(algo: str, setup: Setup) -> float:
    """Longest jobs first (TRL's GRPO, GRPO, then SB3's PPO, then native PPO), which balances the workers."""
    return -run_cost(algo, setup.backend)


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
        eta = f", ETA {clock(elapsed / done * (len(self.run_ids) - done))}" if 0 < done < len(self.run_ids) else ""
        return (f"[sweep] {done}/{len(self.run_ids)} runs stored ({counts['diverged']} diverged, "
                f"{counts['crashed']} crashed), {clock(elapsed)} elapsed{eta}")

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.echo(self.line())

    def __enter__(self) -> StoreProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


# ---- the diverse dataset (hydra/sweeper=dataset) -------------------------------------------

#: the only overrides the dataset sweep passes through to its jobs (the rest is sampled)
DATASET_ARGUMENTS = ("results_dir", "torch_threads", "sweep")


def plan_dataset(space: dict[str, Any], size: int, seed: int, chunk: int, arguments: Sequence[str],
                 compose: Callable[[list[str]], Any]) -> list[tuple[Any, str]]:
    """The sampled runs with their run ids, every one validated; raises ConfigError.

    One config is composed per setup (``compose``: Hydra's loader in the sweeper); faults are
    added from their YAML, hyperparameters by :func:`harness.pipeline.sample.specialise`."""
    bad = [a for a in arguments if a.split("=", 1)[0].lstrip("+~") not in DATASET_ARGUMENTS
           and not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    if bad:
        raise ConfigError(f"the dataset sweep samples its runs itself: {bad[0]!r} is not allowed (only "
                          f"results_dir, torch_threads; change hydra.sweeper.space instead)")
    if size < 1 or chunk < 1:
        raise ConfigError(f"hydra.sweeper.size={size} and hydra.sweeper.chunk={chunk} must be >= 1")
    sampler = Space(space)
    base = SampledBases(lambda s: load_experiment(compose([f"algo={s['algo']}", f"env={s['env']}",
                                                           f"backend={s['backend']}", "fault=none", *arguments])))

    specs = sampler.sample(size, seed, lambda spec: n_updates_planned(specialise(base(spec), spec)))
    return [(spec, run_id(specialise(base(spec), spec).key())) for spec in specs]


#: the dataset sweep trains its plan in this many slices, each a stratified share of it
SLICES = 20


def dealing_order(specs: Sequence[Any]) -> list[Any]:
    """``specs`` in the order they are trained: in :data:`SLICES` slices, each holding the same share
    of every (algorithm, fault) group's runs (healthy included), so a sweep stopped early (or still
    running) has stored a sample of the whole plan, not its costliest setups; the longest runs first
    within a slice, so the workers finish together."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, spec in enumerate(specs):
        groups.setdefault((spec.setup["algo_name"], spec.fault), []).append(i)
    slice_of = {i: SLICES * rank // len(members) for members in groups.values() for rank, i in enumerate(members)}
    return [specs[i] for i in sorted(range(len(specs)), key=lambda i: (slice_of[i], -_spec_cost(specs[i]), i))]


def write_chunks(specs: Sequence[Any], chunk: int, directory: Any, arguments: Sequence[str]) -> list[list[str]]:
    """Deal ``specs`` (:func:`dealing_order`) into jobs of ``chunk`` runs; each job's runs go to a file
    the job reads (``batch=<file>``). Returns the jobs' override lists."""
    ordered = dealing_order(specs)
    root = Path(directory) / digest(ordered)
    root.mkdir(parents=True, exist_ok=True)
    jobs = []
    for i in range(0, len(ordered), chunk):
        path = root / f"chunk_{i // chunk:04d}.jsonl"
        path.write_text("".join(s.to_json() + "\n" for s in ordered[i:i + chunk]))
        jobs.append([f"batch={path}", *arguments])
    return jobs


def _spec_cost(spec: Any) -> float:
    """A rough relative cost, to start the longest runs first."""
    return run_cost(spec.setup["algo_name"], spec.setup["backend"]) * float(spec.env.get("total_timesteps", 1))

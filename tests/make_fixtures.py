"""The tests' checked-in fixtures: small stores of short real runs and what the catalogue builds from them.

    python -m tests.make_fixtures            # every fixture under tests/data/tiny/
    python -m tests.make_fixtures catalogue  # one of them

Run it when ``harness.TRAINING_VERSION`` changes or when the catalogue, the dataset or the diagnosis model
are built differently: ``tests/test_fixtures.py`` fails until the checked-in files are what this script
makes. A run already stored under the same identity (config and training version) is reused, so after a
change to the build only the build runs again; after a version bump every run is trained anew (about ten
minutes on two cores).

Each fixture is a results_dir: ``runs/`` (the runs of its plan, nothing else), ``catalogue/`` and
``dataset/`` (what ``python -m harness.catalogue`` writes from them), and ``fixture.json`` (the plan, the
training version, and the run ids). The warm-up checkpoints, locks and sweep directories are left out.

- ``catalogue``: the catalogue protocol in small: six seeds of shared_policy and zero_reward (ten of
  zero_reward at onset 0 and of their healthy runs), zero_reward at a mid-run onset, a look-alike control,
  GRPO with a fault that diverges, and runs that crash; built with every part (views, plots, dataset).
- ``diverse``: a 60-run dataset sweep over five faults on three setups plus two catalogue-style runs (one
  calibration seed, one held out), built into the diagnosis model that ``rlfh-diagnose catalogue=`` reads.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import tests.toy_envs  # noqa: F401 - registers harness-test/* gymnasium ids (the crashing runs)
from harness import TRAINING_VERSION
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import get_or_train
from harness.store import RunStore, run_id
from tests.commands import run, working_dir

TINY = Path(__file__).resolve().parent / "data" / "tiny"
MANIFEST = "fixture.json"
#: what a build leaves in a results_dir that is not part of the fixture
TRANSIENT = ("checkpoints", "locks", ".multirun")


@dataclass(frozen=True)
class Fixture:
    """A results_dir made by training ``runs`` (override lists) and ``sweeps`` (``python -m harness -m``
    command lines), then ``python -m harness.catalogue`` with ``build``."""

    runs: tuple[tuple[str, ...], ...] = ()
    sweeps: tuple[tuple[str, ...], ...] = ()
    build: tuple[str, ...] = field(default_factory=tuple)

    def plan(self) -> dict:
        return {"runs": [list(r) for r in self.runs], "sweeps": [list(s) for s in self.sweeps],
                "build": list(self.build)}


def _catalogue_runs() -> list[tuple[str, ...]]:
    ppo = ("env.total_timesteps=12288", "algo.n_steps=64")
    # groups of 16 make a group of equal rewards (0/0 under adv_std_no_floor zero_std) rarer, so the six
    # faulty seeds diverge at different updates, not all within the first one
    grpo = ("algo=grpo", "env=toyseq", "algo.group_size=16", "algo.n_prompts=8", "env.total_timesteps=30720")
    crashing = ("env.id=harness-test/Crashing-v0", "algo.num_envs=2", "algo.n_steps=32", "env.total_timesteps=2000")
    runs: list[tuple[str, ...]] = []
    for seed in range(6, 10):
        runs += [(f"fault={fault}", *ppo, f"seed={seed}") for fault in ("none", "zero_reward")]
    for seed in range(6):
        runs += [(f"fault={fault}", *ppo, f"seed={seed}") for fault in ("none", "shared_policy", "zero_reward")]
        runs.append(("fault=zero_reward", f"fault.onset={3 + seed % 2}", *ppo, f"seed={seed}"))
        runs.append(("algo=ppo_single_pass", *ppo, f"seed={seed}"))
        runs.append(("fault=none", *grpo, f"seed={seed}"))
        runs.append(("fault=adv_std_no_floor", "fault.variant=zero_std", *grpo, f"seed={seed}"))   # 0/0: diverges
        runs += [(f"fault={fault}", *crashing, f"seed={seed}") for fault in ("none", "tiny_clip")]
    return runs


#: a small diverse dataset for the diagnosis model: five faults on cheap setups, short runs
DIVERSE_SWEEP = (
    "-m", "+sweep=dataset", "hydra.sweeper.size=60", "hydra.sweeper.chunk=10", "hydra.sweeper.space.updates=[int,15,18]",
    "hydra.sweeper.space.max_cost=3",
    "hydra.sweeper.space.only=[zero_reward,shared_policy,excessive_lr,adv_sign_flip,entropy_sign_flip]",
    "hydra.sweeper.space.setups=[{algo:ppo,algo_name:ppo,env:cartpole,backend:native,weight:3},"
    "{algo:ppo,algo_name:ppo,env:cartpole,backend:sb3,weight:1,cost:2.0},"
    "{algo:grpo,algo_name:grpo,env:toyseq,backend:native,weight:2,tokens_per_completion:6}]")

FIXTURES = {
    "catalogue": Fixture(runs=tuple(_catalogue_runs()), build=("n_mc=2000",)),
    # catalogue-style runs (each with its healthy twin): a calibration seed (even) trains the model beside
    # the diverse runs, a held-out seed (odd) never does
    "diverse": Fixture(
        runs=tuple((f"fault={fault}", f"seed={seed}", "env.total_timesteps=6144", "algo.n_steps=64", *twin)
                   for fault, seed in (("zero_reward", 0), ("shared_policy", 1)) for twin in ((), ("fault=none",))),
        sweeps=(DIVERSE_SWEEP,),
        build=("plots=false", "views=false", "left_out=false")),
}


def _experiment(overrides: tuple[str, ...], root: Path):
    return make_experiment([*overrides, f"results_dir={root}", "twin=false", "progress=false"])


def planned_runs(fixture: Fixture, root: Path) -> set[str]:
    """The run ids of ``fixture``'s explicit runs (the sweeps' runs are planned by their sweepers)."""
    return {run_id(_experiment(r, root).key()) for r in fixture.runs}


def sweep_summary(fixture: Fixture, root: Path, *launcher: str) -> list[str]:
    """Each sweep's one-line plan as the sweeper prints it (``N runs, K already stored ...``), training
    what is not stored (with ``launcher`` overrides, e.g. ``hydra/launcher=basic``, in this process)."""
    lines = []
    for sweep in fixture.sweeps:
        out = run("harness", *sweep, f"results_dir={root}", *launcher)
        if out.returncode:
            raise RuntimeError(f"sweep {' '.join(sweep)} failed: {out.stderr[-2000:]}")
        lines += [ln for ln in out.stdout.splitlines() if ln.startswith("[sweep]") and "to train" in ln]
    return lines


def build(fixture: Fixture, root: Path) -> None:
    out = run("harness.catalogue", f"results_dir={root}", *fixture.build)
    if out.returncode:
        raise RuntimeError(f"catalogue build failed: {out.stderr[-3000:]}")


def make(name: str, parent: Path = TINY) -> Path:
    """Train (or reuse) the fixture's runs into ``parent/name`` (default: its place under tests/data/tiny/),
    build the catalogue, and write its manifest. Everything runs in ``parent`` with ``results_dir=name``, so
    the commands the catalogue's pages quote hold no path of this machine."""
    fixture = FIXTURES[name]
    with working_dir(parent):
        return _make(name, fixture, Path(name))


def _make(name: str, fixture: Fixture, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    stale = [m["run_id"] for m in RunStore(root).iter_metas() if (m.get("versions") or {}).get("training") != TRAINING_VERSION]
    for rid in stale:                                   # a bump makes new run ids: drop the old runs
        shutil.rmtree(RunStore(root).runs / rid)
    for i, overrides in enumerate(fixture.runs, 1):
        res = get_or_train(_experiment(overrides, root))
        print(f"[{name}] {i}/{len(fixture.runs)} {res.run_id} {res.meta['status']}{' (reused)' if res.reused else ''}",
              flush=True)
    sweep_summary(fixture, root)
    for part in ("catalogue", "dataset"):
        shutil.rmtree(root / part, ignore_errors=True)
    build(fixture, root)
    for part in TRANSIENT:
        shutil.rmtree(root / part, ignore_errors=True)
    runs = sorted(m["run_id"] for m in RunStore(root).iter_metas())
    from tests.agents.test_pinned_metrics import numerics

    manifest = {"training_version": TRAINING_VERSION, "plan": fixture.plan(), "runs": runs,
                "numerics": numerics()}           # the fitted model's scores hold only where the kernels are these
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return root.resolve()


def main(argv: list[str]) -> None:
    names = argv or sorted(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        raise SystemExit(f"error: unknown fixture {unknown[0]!r}; valid choices: {', '.join(sorted(FIXTURES))}")
    sys.argv[0] = "tests/make_fixtures.py"        # what each run's meta.json records as its command
    for name in names:
        print(f"wrote {make(name)}")


if __name__ == "__main__":
    main(sys.argv[1:])

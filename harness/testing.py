"""Regression-test a detector against runs with known bugs::

    from harness.testing import assert_detects

    def test_my_detector_catches_zero_reward():
        assert_detects(MyDetector(), fault="zero_reward", min_recall=0.9, max_false_alarm_rate=0.05)

The labelled dataset is the one packaged with the harness (:data:`PACKAGED`: the published dataset's
test split, nothing to train), or the pytest plugin's ``--harness-dataset=PATH`` (a results_dir or
its ``dataset/`` directory), or ``--harness-dataset=small``: a small one generated on first use and
cached (pytest's cache under pytest, else ``$RL_FAULT_HARNESS_CACHE`` or ``~/.cache/rl-fault-harness``).
On failure the message lists the faulty runs the detector missed and the healthy runs and
controls it flagged, with the first alarm.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

import pandas as pd

from faults import FAULTS
from faults.base import Fault
from harness import TRAINING_VERSION
from harness.agents.base import backends_of, expresses, trainer_for
from harness.analysis import dataset, signatures
from harness.analysis.runs import RunSet
from harness.analysis.signatures import SIGNATURES
from harness.config.schemas import backend_config
from harness.detection.base import Detector
from harness.detection.scoring import evaluate, load_dataset, setup_of
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import get_or_train, healthy_twin
from harness.store import atomic_write_parquet

#: the small dataset: (overrides shared by a setup, faults, seeds)
SMALL = {
    "ppo": (["algo=ppo", "env=cartpole", "env.total_timesteps=12288", "algo.n_steps=64"],
            ["none", "shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward", "excessive_lr"]),
    "ppo_single_pass": (["algo=ppo_single_pass", "env=cartpole", "env.total_timesteps=12288", "algo.n_steps=64"],
                        ["none"]),
    "grpo": (["algo=grpo", "env=toyseq", "env.total_timesteps=30720"],
             ["none", "shared_policy", "ppo_epochs_ignored", "tiny_clip", "zero_reward", "excessive_lr",
              "reference_not_frozen", "group_size_one", "adv_std_no_floor", "kl_penalty_sign_flip"]),
    "grpo_single_pass": (["algo=grpo_single_pass", "env=toyseq", "env.total_timesteps=30720"], ["none"]),
}
SMALL_SEEDS = (0, 1, 2)
#: the labelled dataset packaged with the harness (``python -m harness.testing package`` makes it)
PACKAGED = Path(__file__).resolve().parent / "data" / "regression"
#: ``--harness-dataset=small``: generate the small dataset instead
GENERATE = "small"

_settings: dict[str, Path | None] = {"dataset": None, "cache": None}


@dataclass
class LabelledDataset:
    path: Path
    data: pd.DataFrame
    runs: pd.DataFrame

    @classmethod
    def load(cls, path: str | Path) -> LabelledDataset:
        data, runs = load_dataset(path)
        return cls(Path(path), data, runs)


def configure(dataset: str | Path | None = None, cache_dir: str | Path | None = None) -> None:
    """Where assert_detects finds its default dataset (the pytest plugin calls this)."""
    _settings["dataset"] = Path(dataset) if dataset else None
    _settings["cache"] = Path(cache_dir) if cache_dir else None


def _cache_dir() -> Path:
    if _settings["cache"] is not None:
        return _settings["cache"]
    return Path(os.environ.get("RL_FAULT_HARNESS_CACHE", Path.home() / ".cache" / "rl-fault-harness"))


def small_dataset(cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Generate the small labelled dataset once (real runs, about a minute) and return its
    results_dir; later calls reuse it. Safe to call from parallel processes."""

    key = hashlib.sha256(json.dumps([TRAINING_VERSION, SMALL, SMALL_SEEDS]).encode()).hexdigest()[:10]
    root = Path(cache_dir or _cache_dir()) / f"small-dataset-{key}"
    if (root / "dataset" / "runs.parquet").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock, contextlib.ExitStack():
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "dataset" / "runs.parquet").exists():
            _generate(root, progress)
    return root


def _generate(root: Path, progress: bool) -> None:
    jobs = [(common, fault, seed) for common, faults in SMALL.values() for fault in faults for seed in SMALL_SEEDS]
    for i, (common, fault, seed) in enumerate(jobs, 1):
        res = get_or_train(make_experiment([*common, f"fault={fault}", f"seed={seed}", f"results_dir={root}"]))
        if progress:
            print(f"[rl-fault-harness] small dataset {i}/{len(jobs)}: {res.run_id} {res.meta['status']}",
                  flush=True)
    dataset.write(RunSet.load(root), root / "dataset", "harness.testing.small_dataset()")


def default_dataset() -> LabelledDataset:
    """The configured dataset: ``--harness-dataset`` (a path, or ``small`` to generate one), else the packaged one."""
    chosen = _settings["dataset"]
    if chosen is not None and str(chosen) == GENERATE:
        return LabelledDataset.load(small_dataset())
    return LabelledDataset.load(chosen or PACKAGED)


def package(results: str | Path, out: Path = PACKAGED) -> Path:
    """The packaged regression dataset from a published dataset (``results``: a results_dir or its
    ``dataset/``): its test split by seed (seed % 5 == 4, splits.parquet ``by_seed``), keeping the runs
    whose label is what was injected (a fault that manifested as itself, a healthy run or control that
    learns); written as a dataset directory (data.parquet, runs.parquet) with a README of its counts."""
    root = Path(results)
    root = root / "dataset" if (root / "dataset" / "runs.parquet").exists() else root
    data, runs = load_dataset(root)
    split = pd.read_parquet(root / "splits.parquet")[["run_id", "by_seed"]]
    runs = runs.merge(split, on="run_id")
    keep = (runs["by_seed"] == "test") & ((runs["label"] == runs["fault"]) |
                                           ((runs["fault"] == "none") & (runs["label"] == "healthy")))
    runs = runs[keep].drop(columns="by_seed").reset_index(drop=True)
    data = data[data["run_id"].isin(set(runs["run_id"]))].reset_index(drop=True)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(out / "data.parquet", data)
    atomic_write_parquet(out / "runs.parquet", runs)
    setups = runs.groupby(["algo", "backend"]).size()
    faults = runs[runs["fault"] != "none"]
    lines = ["# The regression dataset packaged with the harness", "",
             "`harness.testing.assert_detects` reads it by default: nothing is trained. Made by "
             f"`python -m harness.testing package {results}` from the published dataset's test split by seed "
             "(seed % 5 == 4), keeping runs whose label is what was injected. The published diagnosis model is "
             "fitted on another split (held-out runs, 30% stratified by fault), so some of these runs trained it.",
             "", f"{len(runs)} runs, {len(data)} rows: {int((runs['fault'] == 'none').sum())} healthy "
             f"({int(runs['is_control'].sum())} of them look-alike controls), {len(faults)} faulty of "
             f"{faults['fault'].nunique()} faults.", "", "| algorithm | backend | runs |", "|---|---|---|",
             *(f"| {a} | {b} | {n} |" for (a, b), n in setups.items())]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    """``python -m harness.testing package [RESULTS_DIR]``: make the packaged regression dataset."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.testing", description=main.__doc__)
    parser.add_argument("command", choices=["package"])
    parser.add_argument("results", nargs="?", default="results")
    args = parser.parse_args(argv)
    out = package(args.results)
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.1f} MB)")


def assert_detects(detector: Detector, fault: str, min_recall: float = 1.0,
                   max_false_alarm_rate: float = 0.0, dataset: LabelledDataset | str | Path | None = None,
                   require_cause: bool = False) -> None:
    """Assert that ``detector`` raises an alarm after the onset on at least ``min_recall`` of the
    runs with ``fault`` injected, and on at most ``max_false_alarm_rate`` of the healthy runs and
    look-alike controls of the same algorithms and envs. With ``require_cause`` a detection
    counts only if the strongest alarm names ``fault``."""

    ds = dataset if isinstance(dataset, LabelledDataset) else (
        LabelledDataset.load(dataset) if dataset is not None else default_dataset())
    runs = ds.runs
    faulty = runs[runs["fault"] == fault]
    if faulty.empty:
        raise ValueError(f"the dataset at {ds.path} has no runs with fault {fault!r}; it has: "
                         f"{', '.join(sorted(set(runs['fault']) - {'none'}))}")
    scope = runs[runs[["algo", "env", "backend"]].apply(tuple, axis=1).isin(
        set(faulty[["algo", "env", "backend"]].apply(tuple, axis=1)))]
    scope = scope[(scope["fault"] == fault) | (scope["fault"] == "none")]
    ev = evaluate(detector, (ds.data[ds.data["run_id"].isin(scope["run_id"])], scope))
    out = ev.runs.merge(scope[["run_id", "algo", "algo_variant", "env", "backend"]], on="run_id")
    hit = out["alarmed_after_onset"] & ((out["named_fault"] == fault) if require_cause else True)
    fault_rows = out[out["fault"] == fault]
    clean_rows = out[out["fault"] == "none"]
    recall = float(hit[out["fault"] == fault].mean())
    false_alarm = float(clean_rows["alarmed"].mean()) if len(clean_rows) else 0.0

    problems = []
    if recall < min_recall:
        missed = fault_rows[~hit[out["fault"] == fault]]
        problems.append(f"recall {recall:.2f} < {min_recall:.2f} on {fault}: missed {len(missed)} of "
                        f"{len(fault_rows)} runs:")
        for _, r in missed.iterrows():
            why = (f"strongest alarm named {r['named_fault']} ({r['named_symptom']})" if r["alarmed_after_onset"]
                   else f"no alarm at or after onset update {r['onset']}")
            problems.append(f"  - {r['run_id']} ({setup_of(r)}, seed {r['seed']}): {why}")
    if false_alarm > max_false_alarm_rate:
        flagged = clean_rows[clean_rows["alarmed"]]
        problems.append(f"false-alarm rate {false_alarm:.2f} > {max_false_alarm_rate:.2f}: flagged "
                        f"{len(flagged)} of {len(clean_rows)} healthy runs and controls:")
        alarms = ev.alarms.groupby("run_id").first()
        for _, r in flagged.iterrows():
            first = alarms.loc[r["run_id"]]
            kind = "control" if r["is_control"] else "healthy"
            problems.append(f"  - {r['run_id']} ({kind}, {setup_of(r)}, seed {r['seed']}): "
                            f"'{first['symptom']}' at update {int(first['update'])}")
    if problems:
        name = getattr(detector, "name", type(detector).__name__)
        raise AssertionError(f"{name} on {fault} (dataset {ds.path}):\n" + "\n".join(problems))


if __name__ == "__main__":
    main()


# ---- conformance of a fault ----------------------------------------------------------------------

#: the short pair ``check_fault`` trains per (algorithm, backend): a few updates, enough to act and log
CHECK_BUDGETS = {
    "ppo": ["env=cartpole", "algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=2048"],     # 16 updates
    "grpo": ["env=toyseq", "env.total_timesteps=10240"],                                           # 8 updates
    "ppo_lm": ["env=toyseq", "env.total_timesteps=5120"],                                          # 8 updates
}


@dataclass
class FaultCheck:
    """What :func:`check_fault` found: the registry rules a fault breaks, and per ``algo/backend`` pair
    trained, the runs' statuses, whether anything logged differs from the twin, and the first expected
    signature on the faulty run (fired, or why it could not be read)."""

    fault: str
    broken: list[str]
    pairs: dict[str, dict[str, object]]

    @property
    def ok(self) -> bool:
        return not self.broken and all(p["status"] in ("ok", "diverged") for p in self.pairs.values())

    def report(self) -> str:
        lines = [f"check_fault {self.fault}: {'passes' if self.ok else 'FAILS'}"]
        lines += [f"  rule broken: {b}" for b in self.broken]
        for where, p in self.pairs.items():
            lines.append(f"  {where}: faulty run {p['status']}, twin {p['twin_status']}; "
                         f"{'metrics differ from the twin' if p['changed'] else 'nothing logged differs from the twin'}; "
                         f"{p['signature'] or 'no expected signature'}: {p['signature_shows']}"
                         + (f"\n    error: {str(p['error']).strip().splitlines()[-1]}" if p.get("error") else ""))
        return "\n".join(lines)


def registry_rules(cls: type) -> list[str]:
    """The rules every registered fault keeps (what ``register`` cannot check at class creation)."""

    broken = []
    if not (isinstance(cls, type) and issubclass(cls, Fault)):
        return [f"{cls!r} is not a faults.base.Fault subclass"]
    if FAULTS.get(cls.name) is not cls:
        broken.append(f"{cls.name!r} is not registered as this class (faults.register(cls), or a module under faults/)")
    for attr in ("description", "provenance"):
        if not getattr(cls, attr):
            broken.append(f"{attr} is empty (provenance: the reports it mimics, or 'synthetic: <why plausible>')")
    if cls.name != "none" and cls.acts_on == "nothing":
        broken.append("it overrides no hook of harness.hooks.Hooks: it changes nothing")
    undocumented = [f.name for f in fields(cls) if not f.metadata.get("doc")]
    if undocumented:
        broken.append(f"parameters without a doc (make them with param(default, doc)): {', '.join(undocumented)}")
    unknown = [s for s in cls.expected if s not in SIGNATURES]
    if unknown:
        broken.append(f"expected signatures that do not exist: {', '.join(unknown)}")
    if cls.name != "none" and bool(cls.expected) == bool(cls.no_trace_expected):
        broken.append("give the expected signatures, or no_trace_expected saying why its reports expect none (not both)")
    return broken


def expressible_on(cls: type) -> list[tuple[str, str]]:
    """The (algorithm, backend) pairs whose trainer runs this fault in its default form."""
    configs = {name: backend_config(name) for name in backends_of(cls)}
    return [(algo, name) for algo in cls.algos for name, backend in configs.items()
            if algo in backend.trainers and expresses(trainer_for(backend, algo), cls())]


def check_fault(fault: str | type, results_dir: str | Path | None = None, backends: list[str] | None = None,
                seed: int = 0) -> FaultCheck:
    """A fault's conformance, in the spirit of scikit-learn's ``check_estimator``: the registry rules
    (:func:`registry_rules`), then on each algorithm and backend that can express it (``backends``: only
    these) a short faulty run and its healthy twin (:data:`CHECK_BUDGETS`; stored in ``results_dir``,
    default a temporary directory), each ending ok or diverged, and its first expected signature read on
    the faulty run. Raises AssertionError with the report when a rule is broken or a run crashes; returns
    the :class:`FaultCheck` otherwise (a signature that a short run does not show is reported, not failed:
    the catalogue decides manifestation on 10 seeds)."""

    cls = FAULTS[fault] if isinstance(fault, str) and fault in FAULTS else fault
    if isinstance(cls, str):
        raise AssertionError(f"check_fault: no fault named {cls!r} is registered")
    broken = registry_rules(cls)
    pairs: dict[str, dict[str, object]] = {}
    with contextlib.ExitStack() as stack:
        root = Path(results_dir) if results_dir else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for algo, backend in expressible_on(cls) if not broken else []:
            if backends is not None and backend not in backends:
                continue
            exp = make_experiment([f"algo={algo}", f"backend={backend}", f"fault={cls.name}", f"seed={seed}",
                                   *CHECK_BUDGETS.get(algo, []), f"results_dir={root}", "progress=false"])
            run, twin = get_or_train(exp), get_or_train(healthy_twin(exp))
            shared = [c for c in run.metrics.columns if c in twin.metrics.columns and c not in ("wall_s", "fault_active")]
            changed = not run.metrics[shared].reset_index(drop=True).equals(twin.metrics[shared].reset_index(drop=True))
            first = cls.expected[0] if cls.expected else ""
            shows = "-"
            if first:
                res = signatures.evaluate(run.metrics, run.meta, names=[first])[first]
                shows = ("fired: " if res.fired else "did not fire: " if res.evaluable else "not readable: ") + res.evidence
            pairs[f"{algo}/{backend}"] = {"status": run.meta["status"], "twin_status": twin.meta["status"],
                                         "changed": changed, "signature": first, "signature_shows": shows,
                                         "error": run.meta.get("error")}
    check = FaultCheck(cls.name, broken, pairs)
    if not check.ok:
        raise AssertionError(check.report())
    return check

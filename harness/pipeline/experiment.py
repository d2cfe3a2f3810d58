"""One experiment: the faulty run and its healthy twin, then the comparison."""

from __future__ import annotations

import dataclasses
import math
import shutil
import sys
import textwrap
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from harness.analysis.plots import run_traces
from harness.config import INTERRUPTED, ConfigError, Experiment
from harness.logs.views import StoredRun, render
from harness.logs.writers import write
from harness.metrics import PROGRESS
from harness.pipeline.assemble import with_onset
from harness.pipeline.compose import make_experiment
from harness.pipeline.report import print_signatures, side_by_side, traced_metrics
from harness.pipeline.sample import SampledBases, Spec, specialise
from harness.pipeline.train import (
    RunResult,
    get_or_train,
    healthy_twin,
    n_updates_planned,
    numerics_difference,
)
from harness.store import RunStore, run_id

TRACES = "traces.png"
TENSORBOARD = "tensorboard"


def describe(exp: Experiment) -> str:
    params = ", ".join(f"{k}={v}" for k, v in exp.fault.params().items())
    fault = exp.fault.name + (f"({params})" if params else "")
    onset = f", onset update {exp.fault.onset}" if exp.fault.name != "none" else ""
    algo = exp.algo.name + ("" if exp.algo.variant == "default" else f" ({exp.algo.variant}"
                            + (", healthy look-alike control)" if exp.algo.is_control else ")"))
    return (f"{algo} on {exp.env.name} ({exp.env.id}), backend {exp.backend.name}, "
            f"seed {exp.seed}: fault {fault}{onset}")


def _train_with_progress(exp: Experiment, label: str, console: Console, show_bar: bool) -> RunResult:
    total = n_updates_planned(exp)
    if not show_bar:   # one line per run, e.g. in a sweep
        res = get_or_train(exp)
        outcome = "reused" if res.reused else f"{res.meta['status']} in {res.meta['wall_s']:.1f} s"
        console.print(f"{label} ({exp.algo.name}/{exp.env.name}/{exp.backend.name} seed {exp.seed}): "
                      f"{outcome} -> {res.run_id}", soft_wrap=True)
        return res
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("updates"), TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                        console=console, transient=False)
    task = progress.add_task(label, total=total, info="")

    def on_start(rid: str, reused: bool) -> None:
        if not reused:
            progress.start()

    metric = PROGRESS[exp.algo.name]

    def on_update(row: dict) -> None:
        value = row[metric]
        info = f"env_step {row['env_step']}  {metric} {value:.3g}" if not math.isnan(value) else ""
        progress.update(task, completed=row["update"] + 1, info=info)

    try:
        res = get_or_train(exp, on_update=on_update, on_start=on_start)
    finally:
        progress.stop()
    if res.reused:
        console.print(f"{label}: reused {res.run_id}")
    elif res.meta["status"] != "ok":
        console.print(f"{label}: [bold red]{res.meta['status']}[/] after {res.meta['n_updates']} updates")
    return res


def run_experiment(exp: Experiment, multirun: bool = False, seeds: int = 1, onsets: Sequence[int] | None = None) -> int:
    """Train (or reuse) the run and its twin, print the comparison; returns an exit code. ``seeds``
    > 1 trains seeds ``exp.seed`` .. ``exp.seed + seeds - 1`` of both, one by one; ``onsets``
    (``seed_onsets``, checked by :func:`harness.pipeline.assemble.load_experiment`): the fault's onset
    for each seed (a sweep's mid-run onsets differ per seed); the table compares the first
    seed, a summary line each group. Ctrl-C stops with one line (exit code 130; in a sweep, the
    whole sweep): the run being trained is not stored, and nothing already stored is touched."""
    width = max(110, Console().width)
    console = Console(width=width, highlight=False)
    err = Console(stderr=True, width=width, highlight=False)
    show_bar = exp.progress and not multirun
    if not multirun:
        more = f" (and {seeds - 1} more seeds)" if seeds > 1 else ""
        console.print(f"[bold]rl-fault-harness[/]: {describe(exp)}{more}", soft_wrap=True)
    groups: list[tuple[str, list[RunResult]]] = []
    try:
        for label, shown, job in _jobs(exp):
            jobs = [dataclasses.replace(job, seed=job.seed + k) for k in range(seeds)]
            if onsets is not None and job.fault.name != "none":
                jobs = [with_onset(j, onset) for j, onset in zip(jobs, onsets)]
            groups.append((label, _train_group(jobs, shown, err if show_bar else console, show_bar)))
        runs = [(label, results[0]) for label, results in groups]
        note = numerics_note([res for _, results in groups for res in results if res.reused], exp)
        if note:
            print(note, file=sys.stderr)
        if not multirun:
            _compare(exp, runs, console)
            if seeds > 1:
                for label, results in groups:
                    console.print(seed_summary(label, results, exp.algo.name), soft_wrap=True)
    except KeyboardInterrupt:
        pending = _jobs(exp)[len(groups):]
        what = (f"run {run_id(pending[0][2].key())} ({pending[0][0]}) was not stored" if pending
                else "the runs are stored, the comparison was not finished")
        print(f"interrupted: {what}; nothing stored before was changed (run the command again to "
              f"{'train it' if pending else 'compare them'})", file=sys.stderr)
        sys.stdout.flush()
        if multirun:                   # stop the sweep, not just this job
            raise SystemExit(INTERRUPTED) from None
        return INTERRUPTED
    crashed = [r for _, results in groups for r in results if r.meta["status"] == "crashed"]
    for res in crashed:
        err.print(f"[bold red]run {res.run_id} crashed[/]:\n{res.meta['error']}")
    sys.stdout.flush()
    return 1 if crashed else 0


def _train_group(exps: list[Experiment], label: str, console: Console, show_bar: bool) -> list[RunResult]:
    """The runs of ``exps`` (seeds of one configuration), one by one."""
    return [_train_with_progress(e, label if len(exps) == 1 else f"{label} seed {e.seed}", console, show_bar)
            for e in exps]


def _jobs(exp: Experiment) -> list[tuple[str, str, Experiment]]:
    """The runs the command trains, as (table label, progress label, experiment): the faulty run, then
    (unless twin=false or fault=none) its healthy twin."""
    jobs = [(exp.fault.name, exp.fault.name, exp)]
    if exp.twin and exp.fault.name != "none":
        jobs.append(("none (twin)", "none (healthy twin)", healthy_twin(exp)))
    return jobs


def seed_summary(label: str, results: list[RunResult], algo: str) -> str:
    """One line: the progress metric's last value over the seeds (mean, min..max) and their statuses."""
    metric = PROGRESS[algo]
    last = [float(r.metrics[metric].dropna().iloc[-1]) for r in results
            if metric in r.metrics and r.metrics[metric].notna().any()]
    if not last:
        return f"{label}: {len(results)} seeds, no {metric} logged"
    statuses = ", ".join(f"{n} {st}" for st, n in Counter(r.meta["status"] for r in results).items())
    return (f"{label}: last {metric} over {len(results)} seeds: mean {sum(last) / len(last):.4g} "
            f"(min {min(last):.4g}, max {max(last):.4g}); {statuses}")


def _compare(exp: Experiment, runs: list[tuple[str, RunResult]], console: Console) -> None:
    """The side-by-side table, the signatures that fired, where the runs are, and their picture."""
    onset = exp.fault.onset if exp.fault.name != "none" else 0
    console.print(side_by_side(runs, onset, exp.algo.name))
    fired = print_signatures(console, runs, onset)
    console.print(f"stored in {exp.results_dir}/runs/:")
    for _, res in runs:
        console.print(f"  {res.run_id}", soft_wrap=True)
    run_dir = RunStore(exp.results_dir).run_dir(runs[0][1].run_id)
    picture = write_traces(exp, runs, fired, run_dir / TRACES)
    console.print(f"traces (faulty run vs twin, the metrics whose signatures fired): {picture}", soft_wrap=True)
    if exp.tensorboard:
        logdir = write_tensorboard(exp, runs, run_dir / TENSORBOARD)
        console.print(f"TensorBoard: tensorboard --logdir {logdir}", soft_wrap=True)


def write_traces(exp: Experiment, runs: list[tuple[str, RunResult]], fired: dict[str, list[str]], path: Path) -> Path:
    """The runs' traces of the progress metric and of each metric a fired signature reads, as a PNG."""
    onset = exp.fault.onset if exp.fault.name != "none" else 0
    labels = {exp.fault.name: f"fault={exp.fault.name}", "none (twin)": "healthy twin (fault=none)"}
    title = "\n".join(textwrap.wrap(describe(exp), 120))
    run_traces([(labels.get(label, label), res.metrics) for label, res in runs],
               traced_metrics(exp.algo.name, fired), onset, title, path)
    return path


def write_tensorboard(exp: Experiment, runs: list[tuple[str, RunResult]], logdir: Path) -> Path:
    """Each run's metrics (the canonical view) as a TensorBoard run under ``logdir`` (replacing an
    earlier one: event files do not pile up)."""
    store = RunStore(exp.results_dir)
    for label, res in runs:
        sub = logdir / ("healthy_twin" if label == "none (twin)" else f"fault={label}")
        if sub.exists():
            shutil.rmtree(sub)
        write(render(StoredRun.load(store, res.run_id), "canonical"), "canonical", "tensorboard", sub)
    return logdir


def numerics_note(reused: list[RunResult], exp: Experiment) -> str | None:
    """One line when a reused run was trained with other numerics (torch build, CPU kernels, threads)
    than this machine's, or None."""
    differ = {res.run_id: numerics_difference(res.meta, exp) for res in reused}
    differ = {rid: d for rid, d in differ.items() if d}
    if not differ:
        return None
    first = next(iter(differ.values()))
    what = ", ".join(f"{k} {old} (here {new})" for k, (old, new) in first.items())
    runs = " and ".join(differ)
    return (f"note: reused {runs}, trained with {what}: float rounding may differ from a run trained here; "
            f"retrain=true discards and retrains {'it' if len(differ) == 1 else 'them'}")


def run_batch(path: str, results_dir: str, torch_threads: int = 1) -> None:
    """Train every sampled run listed in ``path`` (one :class:`harness.pipeline.sample.Spec` per line) in this
    process: a base experiment is composed once per setup and fault, then specialised per run.
    Runs already stored are reused. One line per run."""
    console = Console(width=max(110, Console().width), highlight=False)
    base = SampledBases(lambda s: make_experiment([
        f"algo={s['algo']}", f"env={s['env']}", f"backend={s['backend']}", "fault=none", f"results_dir={results_dir}",
        f"torch_threads={torch_threads}", "twin=false", "progress=false"]))
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
    try:
        _run_specs(lines, base, results_dir, console)
    except KeyboardInterrupt:
        print("interrupted: the run being trained was not stored; runs already stored are kept "
              "(run the job again to train the rest)", file=sys.stderr)
        raise SystemExit(INTERRUPTED) from None


def _run_specs(lines: list[str], base: SampledBases, results_dir: str, console: Console) -> None:
    for line in lines:
        spec = Spec.from_json(line)
        try:
            exp = dataclasses.replace(specialise(base(spec), spec), results_dir=results_dir)
        except ConfigError as err:          # one bad draw is reported; the job's other runs still train
            console.print(f"[dataset {spec.index}] {spec.fault}: not run: {err}", soft_wrap=True)
            continue
        res = get_or_train(exp)
        outcome = "reused" if res.reused else f"{res.meta['status']} in {res.meta['wall_s']:.1f} s"
        console.print(f"[dataset {spec.index}] {exp.fault.name} ({exp.algo.name}/{exp.env.name}/"
                      f"{exp.backend.name}): {outcome} -> {res.run_id}", soft_wrap=True)

"""One experiment: the faulty run and its healthy twin, then the comparison."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from harness.config import ConfigError, Experiment
from harness.metrics import PROGRESS
from harness.pipeline.compose import make_experiment
from harness.pipeline.report import print_signatures, side_by_side
from harness.pipeline.sample import SampledBases, Spec, specialise
from harness.pipeline.train import RunResult, get_or_train, healthy_twin, n_updates_planned


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


def run_experiment(exp: Experiment, multirun: bool = False) -> int:
    """Train (or reuse) the run and its twin, print the comparison; returns an exit code."""
    width = max(110, Console().width)
    console = Console(width=width, highlight=False)
    err = Console(stderr=True, width=width, highlight=False)
    show_bar = exp.progress and not multirun
    if not multirun:
        console.print(f"[bold]rl-fault-harness[/]: {describe(exp)}", soft_wrap=True)
    runs: list[tuple[str, RunResult]] = []
    faulty = _train_with_progress(exp, exp.fault.name, err if show_bar else console, show_bar)
    runs.append((exp.fault.name, faulty))
    if exp.twin and exp.fault.name != "none":
        twin = _train_with_progress(healthy_twin(exp), "none (healthy twin)", err if show_bar else console,
                                    show_bar)
        runs.append(("none (twin)", twin))

    onset = exp.fault.onset if exp.fault.name != "none" else 0
    if not multirun:
        console.print(side_by_side(runs, onset, exp.algo.name))
        print_signatures(console, runs, onset)
        console.print(f"stored in {exp.results_dir}/runs/:")
        for _, res in runs:
            console.print(f"  {res.run_id}", soft_wrap=True)
    crashed = [r for _, r in runs if r.meta["status"] == "crashed"]
    for res in crashed:
        err.print(f"[bold red]run {res.run_id} crashed[/]:\n{res.meta['error']}")
    sys.stdout.flush()
    return 1 if crashed else 0


def run_batch(path: str, results_dir: str, torch_threads: int = 1) -> None:
    """Train every sampled run listed in ``path`` (one :class:`harness.pipeline.sample.Spec` per line) in this
    process: a base experiment is composed once per setup and fault, then specialised per run.
    Runs already stored are reused. One line per run."""
    console = Console(width=max(110, Console().width), highlight=False)
    base = SampledBases(lambda s: make_experiment([
        f"algo={s['algo']}", f"env={s['env']}", f"backend={s['backend']}", "fault=none", f"results_dir={results_dir}",
        f"torch_threads={torch_threads}", "twin=false", "progress=false"]))
    lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()]
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

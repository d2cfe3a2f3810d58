"""The diagnosis model's training examples for the model benchmarks, built exactly as
``python -m harness.catalogue`` builds them (the diverse dataset plus the catalogue's calibration
seeds, cached beside the published model), and the command-line options those benchmarks share."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from harness.analysis.examples import fault_settings, training_examples
from harness.analysis.runs import RunSet
from harness.catalogue.protocol import extra_training_runs
from harness.detection.stream import baseline_verdicts
from harness.store import RunStore

ROOT = Path(__file__).resolve().parent.parent


def arguments(description: str) -> argparse.ArgumentParser:
    """A parser with the options every model benchmark takes (--results, --jobs, --record)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--examples", default=None,
                        help="a build's examples.parquet (with its model_card.json beside it) instead of the "
                             "runs under --results, e.g. results/catalogue/model/examples.parquet: no run is read")
    return parser


def examples_and_settings(args: argparse.Namespace) -> tuple[pd.DataFrame, dict[str, tuple[str, ...]]]:
    """The training examples and the settings to check per fault: from ``--examples`` (a build's table
    and the model card beside it, as ``python -m harness.catalogue refit=`` reads them), else rendered
    from the runs under ``--results``."""
    if args.examples:
        from harness.catalogue.build import read_examples

        path = Path(args.examples)
        examples, settings = read_examples(path, option="--examples ")
        if "testable" not in examples:        # a build without the catalogue's runs: every run is a diverse one
            examples = examples.assign(testable=True)
        print(f"examples: {len(examples)} of {examples['run_id'].nunique()} runs from {path}")
        return examples, settings
    examples = load_examples(args.results, args.jobs)
    return examples, load_settings(args.results, sorted(examples["run_id"].unique()))


def inputs(parser: argparse.ArgumentParser, args: argparse.Namespace
           ) -> tuple[pd.DataFrame, dict[str, tuple[str, ...]]]:
    """:func:`examples_and_settings`, a bad ``--examples`` ending the command with one error line."""
    from harness.config import ConfigError

    try:
        return examples_and_settings(args)
    except ConfigError as exc:
        parser.error(str(exc))


def load_examples(results: str | Path, jobs: int) -> pd.DataFrame:
    """The examples of every diverse run and calibration seed under ``results`` (rendered in ``jobs``
    processes where the cache lacks them), with a line saying how many and how long."""
    root = Path(results)
    rs = RunSet.load(root)
    diverse = rs.runs.loc[rs.runs["origin"] == "diverse", "run_id"].tolist()
    extra = extra_training_runs(rs)
    start = time.perf_counter()
    examples = training_examples(root, diverse, extra, root / "catalogue" / "model" / "examples.parquet",
                                 n_jobs=jobs, progress=print, verdicts=baseline_verdicts)
    print(f"examples: {len(examples)} from {len(diverse)} diverse + {len(extra)} catalogue runs "
          f"in {time.perf_counter() - start:.0f} s")
    return examples


def load_settings(results: str | Path, run_ids: list[str] | None = None) -> dict[str, tuple[str, ...]]:
    """What to check per fault (the settings each fault changes, which make the fitted setting evidence
    evidence for it), from the stored runs as ``python -m harness.catalogue`` derives them."""
    store = RunStore(Path(results))
    metas = store.iter_metas() if run_ids is None else (store.load_meta(r) for r in run_ids)
    return fault_settings([m for m in metas if m is not None])

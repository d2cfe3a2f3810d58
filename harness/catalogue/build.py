"""Building the catalogue from a store: the stages in order, and the files they write.

:func:`build` runs the protocol on every cell (:mod:`~harness.catalogue.protocol`) and scores the
reference detectors (:mod:`~harness.catalogue.detectors`); :func:`write` also fits the diagnosis
model, re-evaluates each cell per framework view (:mod:`~harness.catalogue.views`), measures the
backends' agreement (:mod:`~harness.catalogue.agreement`) and the healthy baselines
(:mod:`~harness.catalogue.baselines`), draws the plots, and writes catalogue.parquet,
views.parquet, baselines.parquet, backends.parquet, CATALOGUE.md and FAULTS.md
(:mod:`~harness.catalogue.report`) under ``<results_dir>/catalogue``, and the labelled dataset.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import dataset
from harness.analysis import plots as plotting
from harness.analysis.protocols import fit_and_evaluate
from harness.analysis.runs import RunSet
from harness.catalogue.agreement import backend_agreement, backend_notes
from harness.catalogue.baselines import healthy_baselines
from harness.catalogue.detectors import detector_rows
from harness.catalogue.protocol import Frames, evaluate_cell, extra_training_runs
from harness.catalogue.report import catalogue_markdown, faults_markdown
from harness.catalogue.rows import Catalogue, CatalogueTables, agreement_frame, baselines_frame
from harness.catalogue.settings import CatalogueSettings
from harness.catalogue.views import view_manifestation, views_frame
from harness.config import ConfigError
from harness.store import atomic_write_bytes, atomic_write_parquet


def build(rs: RunSet, n_mc: int = 20000, seed: int = 0, detectors: bool = True, frames: Frames | None = None,
          catalogue_dir: Path | None = None) -> Catalogue:
    """The protocol on every cell of ``rs`` (one random generator seeded ``seed`` for the Monte
    Carlo tests, drawn from in cell order), and the reference detectors' scores per cell."""
    rng = np.random.default_rng(seed)
    catalogue = Catalogue([evaluate_cell(cell, rs, rng, n_mc, frames) for cell in rs.cells()])
    if detectors and catalogue.cells:
        catalogue.detectors = detector_rows(rs, catalogue_dir)
    return catalogue


def fit_model(settings: CatalogueSettings, rs: RunSet, out_dir: Path, written: dict[str, Path]) -> pd.DataFrame:
    """Fit and score the diagnosis model on the diverse runs (and the catalogue's calibration seeds)
    when asked and there are any; returns its scores (empty when none was fitted)."""
    diverse = rs.runs.loc[rs.runs["origin"] == "diverse", "run_id"].tolist()
    if not settings.model:
        return pd.DataFrame()
    if not diverse:
        print("no runs of the diverse dataset (python -m harness -m +sweep=dataset): no diagnosis model fitted")
        return pd.DataFrame()
    model_file = out_dir / "model" / "diagnosis.joblib"
    extra = extra_training_runs(rs) if settings.model_catalogue_runs else []
    scores = fit_and_evaluate(settings.results_dir, diverse, model_file, left_out=settings.left_out,
                              kind=settings.model_kind, extra_ids=extra)
    atomic_write_parquet(out_dir / "model" / "scores.parquet",
                         scores.assign(per_class=scores.get("per_class", pd.Series(dtype=object)).map(
                             lambda v: json.dumps(v) if isinstance(v, dict) else None)))
    written["model"] = model_file
    return scores


def write(settings: CatalogueSettings) -> dict[str, Path]:
    """Build and write the catalogue (and dataset, and the diagnosis model); returns the paths written."""
    rs = RunSet.load(settings.results_dir)
    if rs.runs.empty:
        raise ConfigError(f"no complete runs under {settings.results_dir}/runs")
    out_dir = settings.results_dir / "catalogue"
    written: dict[str, Path] = {}
    scores = fit_model(settings, rs, out_dir, written)
    catalogue = build(rs, settings.n_mc, catalogue_dir=out_dir)
    cat = catalogue.frame()
    tables = CatalogueTables.of(cat)
    views = pd.DataFrame()
    if settings.views and not cat.empty:
        views = views_frame(tables.cells, view_manifestation(rs, settings.n_mc))
        atomic_write_parquet(out_dir / "views.parquet", views)
        written["views"] = out_dir / "views.parquet"
    baselines = baselines_frame(healthy_baselines(rs))
    plots: dict[str, str] = {}
    if settings.plots and not cat.empty:
        plots = plotting.write_all(tables.signatures, tables.metrics, rs, out_dir / "plots", settings.trace_metrics)
    if not cat.empty:
        atomic_write_parquet(out_dir / "catalogue.parquet", cat)
        written["catalogue"] = out_dir / "catalogue.parquet"
    atomic_write_parquet(out_dir / "baselines.parquet", baselines)
    agreement_rows = backend_agreement(catalogue.cells)
    agreement = agreement_frame(agreement_rows)
    if not agreement.empty:
        atomic_write_parquet(out_dir / "backends.parquet", agreement)
        written["backends"] = out_dir / "backends.parquet"
    notes = backend_notes(sorted({b for r in agreement_rows for b in r.rates} - {"native"})) if agreement_rows else {}
    atomic_write_bytes(out_dir / "CATALOGUE.md",
                       catalogue_markdown(tables, baselines, agreement, notes, plots, str(settings.results_dir),
                                          views=views, model_scores=scores).encode())
    written["markdown"] = out_dir / "CATALOGUE.md"
    atomic_write_bytes(out_dir / "FAULTS.md", faults_markdown(tables.cells, str(settings.results_dir)).encode())
    written["faults"] = out_dir / "FAULTS.md"
    if settings.dataset:
        command = f"python -m harness.catalogue results_dir={settings.results_dir}"
        written.update(dataset.write(rs, settings.results_dir / "dataset", command))
    return written

"""Building the catalogue from a store: the stages in order, and the files they write.

:func:`build` runs the protocol on every cell (:mod:`~harness.catalogue.protocol`) and scores the
reference detectors (:mod:`~harness.catalogue.detectors`); :func:`write` also fits the diagnosis
model, re-evaluates each cell per framework view (:mod:`~harness.catalogue.views`), measures the
backends' agreement (:mod:`~harness.catalogue.agreement`) and the healthy baselines
(:mod:`~harness.catalogue.baselines`), draws the plots, and writes catalogue.parquet,
views.parquet, baselines.parquet, backends.parquet, CATALOGUE.md and FAULTS.md
(:mod:`~harness.catalogue.report`) and a page per fault (:mod:`~harness.catalogue.pages`) under
``<results_dir>/catalogue``, and the labelled dataset. :func:`render` rewrites the pages and the
summary plots (verdict map, heatmaps) from those files alone (no run read: the trace plots stay as they were drawn).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import dataset
from harness.analysis import plots as plotting
from harness.analysis.protocols import KeptModels, evaluate_and_save, fit_and_evaluate
from harness.analysis.reference import directions
from harness.analysis.runs import RunSet, cell_slug
from harness.catalogue.agreement import backend_agreement, backend_notes
from harness.catalogue.baselines import healthy_baselines
from harness.catalogue.detectors import detector_rows
from harness.catalogue.pages import fault_pages
from harness.catalogue.parts import PARTS_FILE, build_record, read_parts, write_build_record
from harness.catalogue.progress import progress
from harness.catalogue.protocol import Frames, evaluate_cell, extra_training_runs
from harness.catalogue.report import FAULT_PAGES, catalogue_markdown, commands, faults_markdown
from harness.catalogue.rows import Catalogue, CatalogueTables, agreement_frame, baselines_frame, read_table
from harness.catalogue.settings import CatalogueSettings
from harness.catalogue.views import view_manifestation, views_frame
from harness.config import ConfigError
from harness.detection.diagnosis import DIRECTIONS_FILE
from harness.detection.stream import baseline_verdicts
from harness.store import atomic_write_bytes, atomic_write_json, atomic_write_parquet


def build(rs: RunSet, n_mc: int = 20000, seed: int = 0, detectors: bool = True, frames: Frames | None = None,
          catalogue_dir: Path | None = None) -> Catalogue:
    """The protocol on every cell of ``rs`` (one random generator seeded ``seed`` for the Monte
    Carlo tests, drawn from in cell order), and the reference detectors' scores per cell."""
    rng = np.random.default_rng(seed)
    frames = frames or rs.canonical      # one for every cell: what a cell reads is kept for the next
    cells = rs.cells()
    catalogue = Catalogue([evaluate_cell(cell, rs, rng, n_mc, frames)
                           for cell in progress(cells, len(cells), "the canonical metrics")])
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
                              kind=settings.model_kind, extra_ids=extra, verdicts=baseline_verdicts)
    write_scores(out_dir / "model" / "scores.parquet", scores)
    written["model"] = model_file
    return scores


def write_scores(path: Path, scores: pd.DataFrame) -> None:
    atomic_write_parquet(path, scores.assign(per_class=scores.get("per_class", pd.Series(dtype=object)).map(
        lambda v: json.dumps(v) if isinstance(v, dict) else None)))


def check_examples(examples_path: Path, option: str = "refit=") -> None:
    """A one-line :class:`ConfigError` unless ``examples_path`` is a table of training examples a build
    wrote, with its ``model_card.json`` beside it."""
    import pyarrow.parquet as pq

    if not examples_path.is_file():
        raise ConfigError(f"{option}{examples_path}: no such file (the examples.parquet a build wrote beside its "
                          "model, e.g. results/catalogue/model/examples.parquet)")
    try:
        names = set(pq.read_schema(examples_path).names)
    except Exception as exc:  # pyarrow's errors for a truncated or foreign file
        raise ConfigError(f"{option}{examples_path} is unreadable ({type(exc).__name__})") from None
    missing = [c for c in ("run_id", "view", "label", "algo", "prefix") if c not in names]
    if missing:
        raise ConfigError(f"{option}{examples_path} is not a table of training examples (no {', '.join(missing)} column)")
    if not examples_path.with_name("model_card.json").is_file():
        raise ConfigError(f"{option}{examples_path}: no model_card.json beside it (it holds the settings to check per "
                          "fault)")


def read_examples(examples_path: Path, option: str = "refit=") -> tuple[pd.DataFrame, dict[str, tuple[str, ...]]]:
    """A build's table of training examples (checked by :func:`check_examples`; ``option`` is how the
    caller's user named the file, for the error) and the settings to check per fault from the
    ``model_card.json`` beside it."""
    check_examples(examples_path, option)
    card = json.loads(examples_path.with_name("model_card.json").read_text())
    return pd.read_parquet(examples_path), {k: tuple(v) for k, v in card.get("settings", {}).items()}


def refit(results_dir: Path, examples_path: Path, kind: str = "logistic", left_out: bool = True,
          algos: tuple[str, ...] = ()) -> dict[str, Path]:
    """Score and fit the diagnosis model on a table of training examples alone (``examples.parquet``
    as a build writes it, with the ``model_card.json`` written beside it for the settings to check per
    fault), reading no run: the model, its card and scores, and the examples under
    ``results_dir/catalogue/model/``; the catalogue's pages are re-rendered when it has a catalogue.
    For a change of the model or its fitted evidence; a change of the features or views needs the runs.
    ``algos``: refit only these algorithms' models from ``examples_path``; every other algorithm's
    models stay as they are in ``results_dir``'s model (:class:`KeptModels`; the card says, per
    algorithm, what its models were fitted on)."""
    examples, settings = read_examples(examples_path)
    out_dir = results_dir / "catalogue" / "model"
    kept = KeptModels.read(out_dir / "diagnosis.joblib", algos) if algos else None
    if kept is not None:
        examples = examples[examples["algo"].isin(algos)].reset_index(drop=True)
        if examples.empty:
            raise ConfigError(f"refit={examples_path} has no examples of {', '.join(algos)}")
    if "testable" not in examples:           # written before builds kept it: a build without the catalogue's runs
        print(f"note: {examples_path} does not say which runs are the diverse dataset's: every run is scored as one "
              "(as a build with model_catalogue_runs=false wrote it)")
    model_file = out_dir / "diagnosis.joblib"
    if kept is None and examples_path.resolve() != (out_dir / "examples.parquet").resolve():
        atomic_write_parquet(out_dir / "examples.parquet", examples)
    scores = evaluate_and_save(examples, settings, model_file, left_out=left_out, kind=kind)
    if kept is not None:                     # writes the examples of both parts
        scores = kept.merge(model_file, examples, scores)
    write_scores(out_dir / "scores.parquet", scores)
    written = {"model": model_file, "scores": out_dir / "scores.parquet"}
    if (results_dir / "catalogue" / "catalogue.parquet").is_file():
        written.update(render(results_dir))
    return written


def write_pages(out_dir: Path, tables: CatalogueTables, baselines: pd.DataFrame, agreement: pd.DataFrame,
                views: pd.DataFrame, scores: pd.DataFrame, plots: dict[str, str], results_dir: str) -> dict[str, Path]:
    """CATALOGUE.md, FAULTS.md and ``faults/<fault>.md`` for each fault of the catalogue (a page of a
    fault no longer in it is removed); returns the paths written."""
    backends = sorted(c.removeprefix("rate_faulty_") for c in agreement.columns if c.startswith("rate_faulty_"))
    notes = backend_notes([b for b in backends if b != "native"]) if backends else {}
    atomic_write_bytes(out_dir / "CATALOGUE.md",
                       catalogue_markdown(tables, baselines, agreement, notes, plots, results_dir,
                                          views=views, model_scores=scores, parts=read_parts(out_dir)).encode())
    atomic_write_bytes(out_dir / "FAULTS.md", faults_markdown(tables.cells, results_dir).encode())
    written = {"markdown": out_dir / "CATALOGUE.md", "faults": out_dir / "FAULTS.md"}
    pages = fault_pages(tables, agreement, notes, plots, views, results_dir) if not tables.cells.empty else {}
    for stale in sorted((out_dir / FAULT_PAGES).glob("*.md")):
        if f"{FAULT_PAGES}/{stale.name}" not in pages:
            stale.unlink()
    for rel, text in pages.items():
        atomic_write_bytes(out_dir / rel, text.encode())
    if pages:
        written["pages"] = out_dir / FAULT_PAGES
    return written


def write(settings: CatalogueSettings) -> dict[str, Path]:
    """Build and write the catalogue (and dataset, and the diagnosis model); returns the paths written."""
    rs = RunSet.load(settings.results_dir)
    if rs.runs.empty:
        raise ConfigError(f"no complete runs under {settings.results_dir}/runs")
    out_dir = settings.results_dir / "catalogue"
    record = build_record(rs)
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
    build_command, render_command = commands(str(settings.results_dir))
    if settings.plots and not cat.empty:
        print(f"[catalogue] drawing the verdict map, the heatmaps and the trace plots of {len(tables.cells)} cells ...",
              flush=True)
        plots = plotting.write_all(tables.cells, tables.signatures, tables.metrics, rs, out_dir / "plots",
                                   settings.trace_metrics, commands=(render_command, build_command))
    if not cat.empty:
        atomic_write_parquet(out_dir / "catalogue.parquet", cat)
        written["catalogue"] = out_dir / "catalogue.parquet"
        written["directions"] = write_directions(out_dir, cat)
    atomic_write_parquet(out_dir / "baselines.parquet", baselines)
    agreement = agreement_frame(backend_agreement(catalogue.cells))
    if not agreement.empty:
        atomic_write_parquet(out_dir / "backends.parquet", agreement)
        written["backends"] = out_dir / "backends.parquet"
    written["build"] = write_build_record(record, out_dir)
    (out_dir / PARTS_FILE).unlink(missing_ok=True)      # built whole: no part of an earlier merge is left
    written.update(write_pages(out_dir, tables, baselines, agreement, views, scores, plots, str(settings.results_dir)))
    if settings.dataset:
        written.update(dataset.write(rs, settings.results_dir / "dataset", build_command))
    return written


def write_directions(out_dir: Path, cat: pd.DataFrame) -> Path:
    """Write ``model/directions.json``: per algorithm and fault, the direction in which the fault moves each
    metric against its healthy twin (:func:`harness.analysis.reference.directions`), what ``rlfh-diagnose
    reference=PATH`` ranks faults by; published into the package with the model."""
    path = out_dir / DIRECTIONS_FILE
    atomic_write_json(path, directions(cat))
    return path


def render(results_dir: Path) -> dict[str, Path]:
    """Rewrite the catalogue's pages (CATALOGUE.md, FAULTS.md, ``faults/<fault>.md``) and its summary plots
    from the files a build wrote under ``results_dir/catalogue`` (catalogue.parquet; views.parquet,
    backends.parquet, baselines.parquet and model/scores.parquet where present), reading no run: the
    trace plots already in plots/ are linked, not redrawn. Returns the paths written."""
    out_dir = results_dir / "catalogue"
    build_command, render_command = commands(str(results_dir))
    cat = read_table(out_dir / "catalogue.parquet", required=f"no catalogue under {out_dir} (no catalogue.parquet): build "
                f"it from the runs first ({build_command})")
    tables = CatalogueTables.of(cat)
    views = read_table(out_dir / "views.parquet")
    baselines = read_table(out_dir / "baselines.parquet")
    agreement = read_table(out_dir / "backends.parquet")
    scores = read_table(out_dir / "model" / "scores.parquet")
    if scores is not None and "per_class" in scores:
        scores["per_class"] = scores["per_class"].map(lambda v: json.loads(v) if isinstance(v, str) else None)
    written: dict[str, Path] = {"directions": write_directions(out_dir, cat)}
    plots: dict[str, str] = {}
    if not tables.signatures.empty:
        plots.update(plotting.summary_plots(tables.cells, tables.signatures, out_dir / "plots", render_command))
        written.update({key: out_dir / path for key, path in plots.items()})
    for _, c in tables.cells.iterrows():
        trace = f"plots/traces_{cell_slug(c['cell'], c['base'])}.png"
        if (out_dir / trace).exists():
            plots[c["cell"]] = trace
    written.update(write_pages(out_dir, tables, baselines_frame([]) if baselines is None else baselines,
                               pd.DataFrame() if agreement is None else agreement,
                               pd.DataFrame() if views is None else views,
                               pd.DataFrame() if scores is None else scores, plots, str(results_dir)))
    return written

"""Per-framework-view re-evaluation: each cell decided again on what SB3, CleanRL, TRL, verl ...
would have logged of its runs (:mod:`harness.logs.views`), with the same protocol."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.examples import VIEWS
from harness.analysis.runs import RunSet
from harness.catalogue.progress import progress
from harness.catalogue.protocol import Frames, evaluate_cell
from harness.config import ConfigError
from harness.logs import to_canonical
from harness.logs.views import StoredRun, applies, render
from harness.metrics import COLUMNS

VIEW_COLUMNS = ["cell", "view", "manifested", "manifested_by"]


def view_frames(rs: RunSet, view: str) -> Frames:
    """A run's metrics as ``view``'s framework would have logged them (:mod:`harness.logs.views`), with
    each row's training update (TRL logs once per optimizer step: its rows map to updates through
    steps.parquet)."""
    cache: dict[str, pd.DataFrame] = {}

    def frame(rid: str) -> pd.DataFrame:
        if rid not in cache:
            run = StoredRun.load(rs.root, rid)
            try:
                f = to_canonical(render(run, view), view).metrics.copy()
            except ConfigError:     # nothing but timing rows (a run that diverged in its first update): the
                f = pd.DataFrame({"update": run.metrics["update"].to_numpy()}).reindex(
                    columns=list(COLUMNS))                                        # view logged no metric
            if len(f) == len(run.steps) and len(f) != len(run.metrics):
                f["update"] = run.steps["update"].to_numpy()
            if "nonfinite" not in f or f["nonfinite"].isna().all():
                last = run.metrics.set_index("update")["nonfinite"]
                f["nonfinite"] = f["update"].map(last).fillna(0.0).to_numpy()
            cache[rid] = f
        return cache[rid]
    return frame


def view_manifestation(rs: RunSet, n_mc: int, seed: int = 0) -> pd.DataFrame:
    """Each cell's verdict in each framework view that applies to it (columns :data:`VIEW_COLUMNS`):
    did the fault manifest on held-out seeds in the metrics that framework logs? Only cells run on
    the native and SB3 backends are re-rendered (a view needs the native run's stored metrics)."""
    rows = []
    cells = rs.cells()
    for view in sorted({v for views in VIEWS.values() for v in views} - {"canonical"}):
        frames = view_frames(rs, view)
        rng = np.random.default_rng(seed)
        ours = [c for c in cells if applies(view, c.info["algo"]) and c.info["backend"] in ("native", "sb3")]
        for cell in progress(ours, len(ours), f"the {view} view"):
            summary = evaluate_cell(cell, rs, rng, n_mc, frames).summary
            rows.append({"cell": cell.label, "view": view, "manifested": summary.manifested,
                         "manifested_by": summary.manifested_by})
    return pd.DataFrame(rows, columns=VIEW_COLUMNS)


def views_frame(canonical: pd.DataFrame, others: pd.DataFrame) -> pd.DataFrame:
    """views.parquet: the canonical verdicts (``canonical``: one row per cell with ``cell``,
    ``manifested``, ``manifested_by``), then every other view's (:func:`view_manifestation`)."""
    return pd.concat([canonical[["cell", "manifested", "manifested_by"]].assign(view="canonical"), others],
                     ignore_index=True)

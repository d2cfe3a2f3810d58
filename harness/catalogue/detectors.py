"""Reference detector scoring per cell: each rule of thumb in :data:`harness.detection.REFERENCE`
(and the learned detector once a diagnosis model is fitted) run over the catalogue's runs and
scored on each cell, so the detectors are measured next to the signatures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.analysis import dataset, signatures
from harness.analysis.runs import RunSet
from harness.catalogue.rows import DetectorRow
from harness.config import ConfigError, locate
from harness.detection import REFERENCE
from harness.detection.scoring import evaluate


def reference_detectors(catalogue_dir: Path | None) -> dict[str, Any]:
    """The reference detectors to score; ``learned`` when a diagnosis model has been fitted."""
    out = {}
    for name, target in REFERENCE.items():
        if name == "learned":
            try:
                out[name] = locate(target)(catalogue=str(catalogue_dir)) if catalogue_dir else None
            except ConfigError:
                out[name] = None
        else:
            out[name] = locate(target)()
    return {k: v for k, v in out.items() if v is not None}


def detector_rows(rs: RunSet, catalogue_dir: Path | None = None) -> list[DetectorRow]:
    """Each reference detector's scores per cell: recall, right cause, false alarms on healthy
    runs and controls, alarms before the onset, and delays (to the first alarm and to the first
    alarm that names the fault)."""
    runs = dataset.runs_table(rs)
    runs = runs[runs["origin"] == "catalogue"]
    data = dataset.data_table(rs, runs)
    cells = {c.label: c for c in rs.cells()}
    rows = []
    for name, detector in reference_detectors(catalogue_dir).items():
        out = evaluate(detector, (data, runs), name=name).runs.set_index("run_id")
        for label, cell in cells.items():
            # a fitted detector is scored on the runs it was not fitted on (its scorer leaves them out)
            faulty, healthy, controls = (out.loc[out.index.intersection(ids)]
                                         for ids in (cell.faulty, cell.healthy, cell.controls))
            rows.append(DetectorRow(
                cell=label, name=name, recall=signatures.share(faulty["alarmed_after_onset"]),
                correct_cause=signatures.share(faulty["named_fault"] == cell.info["fault"]),
                before_onset=signatures.share(faulty["alarmed_before_onset"]),
                delay_median=float(faulty["delay"].dropna().median()),
                delay_right_median=float(faulty["delay_right"].dropna().median()),
                false_alarm_healthy=signatures.share(healthy["alarmed"]),
                false_alarm_control=signatures.share(controls["alarmed"])))
    return rows

"""The catalogue's typed rows, and the columns they become in the files written.

Every stage hands the next one these dataclasses; they turn into DataFrames only at the edges
(:func:`catalogue_frame`, :func:`baselines_frame`, :func:`agreement_frame`), whose columns are
what catalogue.parquet, baselines.parquet and backends.parquet hold and what other code and the
published results read (``calibration_k_faulty``, ``held-out_n_healthy``, ``rate_faulty``,
``p_value``, ``kind`` ...). The catalogue frame always has every column of every row kind (NaN
where a row kind has none), so a store whose cells yield no metric row still has ``p_value``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis import stats
from harness.config import ConfigError

SPLITS = ("calibration", "held-out")       # even seeds calibrate, odd seeds are held out
GROUPS = ("faulty", "healthy", "control")  # a cell's faulty seeds, its healthy runs, its look-alike controls


@dataclass(frozen=True)
class Counts:
    """Runs of one group in one split on which a signature fired (``k``) among the ``n`` on which it
    could be evaluated."""

    k: int
    n: int

    @property
    def rate(self) -> float:
        """``k / n`` (NaN when no run was evaluable)."""
        return stats.rate(self.k, self.n)

    @property
    def interval(self) -> tuple[float, float]:
        """The rate's Wilson 95% interval."""
        return stats.wilson(self.k, self.n)


@dataclass(frozen=True)
class GroupCounts:
    """One split's :class:`Counts` per group."""

    faulty: Counts
    healthy: Counts
    control: Counts

    def items(self) -> Iterator[tuple[str, Counts]]:
        """(group, counts) in :data:`GROUPS` order."""
        return ((g, getattr(self, g)) for g in GROUPS)


@dataclass(frozen=True)
class SignatureRow:
    """A signature on one cell: its threshold (calibrated on the calibration healthy runs), its
    firing counts per split and group, whether it separates on the calibration half, the held-out
    Fisher p-value, and (for an expected signature) the verdict."""

    name: str
    expected: bool
    calibrated: bool
    threshold: float
    default_threshold: float
    direction: str
    calibration: GroupCounts
    held_out: GroupCounts
    separates_calibration: bool
    heldout_p: float
    verdict: str | None

    def record(self) -> dict[str, Any]:
        """The row's catalogue.parquet columns (rates and intervals are the held-out ones)."""
        out: dict[str, Any] = {"kind": "signature", "name": self.name, "expected": self.expected,
                               "calibrated": self.calibrated, "threshold": self.threshold,
                               "default_threshold": self.default_threshold, "direction": self.direction}
        for split, counts in zip(SPLITS, (self.calibration, self.held_out)):
            for group, c in counts.items():
                out[f"{split}_k_{group}"], out[f"{split}_n_{group}"] = c.k, c.n
        for group, c in self.held_out.items():
            out[f"rate_{group}"] = c.rate
            out[f"ci_low_{group}"], out[f"ci_high_{group}"] = c.interval
            out[f"cal_rate_{group}"] = getattr(self.calibration, group).rate
        out.update(separates_calibration=self.separates_calibration, heldout_p=self.heldout_p, verdict=self.verdict)
        return out


@dataclass(frozen=True)
class HeldOutTest:
    """A metric selected on the calibration half, tested on the held-out half (one-sided, in the
    calibrated direction)."""

    auroc: float
    p: float


@dataclass(frozen=True)
class MetricRow:
    """A metric on one cell: the AUROC of its per-run summary faulty vs healthy over all seeds, the
    permutation p-value (paired when every faulty seed has its twin) and its Holm adjustment over
    the cell's metrics, the calibration AUROC, and the held-out test when it was selected."""

    name: str
    auroc: float
    direction: str                 # "higher" or "lower": the faulty runs' side
    p_value: float
    paired: bool
    cal_auroc: float
    faulty_median: float
    healthy_median: float
    n_faulty_finite: int
    n_healthy_finite: int
    p_holm: float = math.nan
    separates_all_seeds: bool = False
    held_out: HeldOutTest | None = None

    def record(self) -> dict[str, Any]:
        """The row's catalogue.parquet columns (``heldout_*`` only when it was tested)."""
        out: dict[str, Any] = {"kind": "metric", "name": self.name, "expected": False, "auroc": self.auroc,
                               "direction": self.direction, "p_value": self.p_value, "paired": self.paired,
                               "cal_auroc": self.cal_auroc, "faulty_median": self.faulty_median,
                               "healthy_median": self.healthy_median, "n_faulty_finite": self.n_faulty_finite,
                               "n_healthy_finite": self.n_healthy_finite, "p_holm": self.p_holm,
                               "separates_all_seeds": self.separates_all_seeds}
        if self.held_out is not None:
            out.update(heldout_auroc=self.held_out.auroc, heldout_p=self.held_out.p)
        return out


@dataclass(frozen=True)
class CellSummary:
    """What the catalogue says about a cell as a whole (repeated on each of its rows)."""

    fault: str
    fault_params: str
    onset_kind: str
    algo: str
    algo_variant: str
    env: str
    backend: str
    cell: str
    setup: str
    base: str
    onsets: str                    # the faulty seeds' onset updates, "3, 4"
    n_faulty: int
    n_healthy: int
    n_control: int
    n_diverged: int
    n_crashed: int
    n_unchanged: int               # faulty seeds whose every tested metric equals its twin's over the window:
                                   # the bug changed nothing the run logs (e.g. no episode reached the cap)
    diverged_updates: str          # updates each diverged faulty seed completed, "2, 5"
    n_evidence: int                # items selected on the calibration half
    manifested: bool
    manifested_by: str             # the items that passed on the held-out half, in test order
    progress_metric: str
    progress_faulty: float
    progress_healthy: float
    fault_form: str | None
    fault_kind: str | None
    fault_version: int             # the fault's code version its runs trained with (faults/base.py)
    min_p: float                   # the smallest p-value the held-out seeds could give
    decidable: bool                # min_p < alpha: the cell could manifest at all

    def record(self) -> dict[str, Any]:
        """The summary columns, in catalogue.parquet order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class CellResult:
    """The protocol's output for one cell."""

    summary: CellSummary
    signatures: list[SignatureRow]
    metrics: list[MetricRow]


@dataclass(frozen=True)
class DetectorRow:
    """A reference detector's scores on one cell's runs (shares of runs; delays in updates)."""

    cell: str
    name: str
    recall: float
    correct_cause: float
    before_onset: float
    delay_median: float
    delay_right_median: float
    false_alarm_healthy: float
    false_alarm_control: float

    def record(self) -> dict[str, Any]:
        """The row's catalogue.parquet columns (the cell's summary is joined at the edge)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"cell": out.pop("cell"), "kind": "detector", **out}


@dataclass(frozen=True)
class BaselineRow:
    """How often a signature fires, at its default threshold, on one setup's healthy runs (or its
    controls) over the whole run."""

    algo: str
    algo_variant: str
    env: str
    backend: str
    is_control: bool
    signature: str
    n_runs: int
    rate: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class AgreementRow:
    """One signature on one fault run on several backends: the held-out rates per backend
    (faulty, healthy) and whether they disagree."""

    key: dict[str, Any]            # fault, fault_params, onset_kind, algo, algo_variant, env
    signature: str
    expected: bool
    rates: dict[str, tuple[float, float]] = field(default_factory=dict)   # backend -> (faulty, healthy)
    disagree: bool = False

    def record(self) -> dict[str, Any]:
        """The row's backends.parquet columns (``rate_faulty_<backend>``, ``rate_healthy_<backend>``)."""
        out = {**self.key, "signature": self.signature, "expected": self.expected}
        for backend, (faulty, healthy) in self.rates.items():
            out[f"rate_faulty_{backend}"], out[f"rate_healthy_{backend}"] = faulty, healthy
        out["disagree"] = self.disagree
        return out


# ---- the edges: DataFrames, with the columns the written files have -------------------------

SUMMARY_COLUMNS = tuple(f.name for f in fields(CellSummary))
SIGNATURE_COLUMNS = ("kind", "name", "expected", "calibrated", "threshold", "default_threshold", "direction",
                     *(f"{s}_{x}_{g}" for s in SPLITS for g in GROUPS for x in ("k", "n")),
                     *(f"{x}_{g}" for g in GROUPS for x in ("rate", "ci_low", "ci_high", "cal_rate")),
                     "separates_calibration", "heldout_p", "verdict")
METRIC_COLUMNS = ("kind", "name", "expected", "auroc", "direction", "p_value", "paired", "cal_auroc",
                  "faulty_median", "healthy_median", "n_faulty_finite", "n_healthy_finite", "p_holm",
                  "separates_all_seeds", "heldout_auroc", "heldout_p")
DETECTOR_COLUMNS = ("cell", "kind", *(f.name for f in fields(DetectorRow) if f.name != "cell"))
#: catalogue.parquet: each cell's summary, then the signature, metric and detector columns
CATALOGUE_COLUMNS = tuple(dict.fromkeys((*SUMMARY_COLUMNS, *SIGNATURE_COLUMNS, *METRIC_COLUMNS,
                                         *DETECTOR_COLUMNS)))
BASELINE_COLUMNS = tuple(f.name for f in fields(BaselineRow))


@dataclass
class Catalogue:
    """Every cell's result and the reference detectors' rows."""

    cells: list[CellResult]
    detectors: list[DetectorRow] = field(default_factory=list)

    def frame(self) -> pd.DataFrame:
        """catalogue.parquet: one row per signature, metric and detector of each cell, each with its
        cell's summary columns; every column of :data:`CATALOGUE_COLUMNS`, in that order."""
        cat = pd.DataFrame([{**c.summary.record(), **row.record()} for c in self.cells
                            for row in (*c.signatures, *c.metrics)])
        if self.detectors and not cat.empty:
            summary = cat.drop_duplicates("cell")[list(SUMMARY_COLUMNS)].set_index("cell")
            detectors = pd.DataFrame([d.record() for d in self.detectors], columns=list(DETECTOR_COLUMNS))
            cat = pd.concat([cat, detectors.join(summary, on="cell")], ignore_index=True)
        unknown = set(cat.columns) - set(CATALOGUE_COLUMNS)
        if unknown:
            raise AssertionError(f"catalogue rows have columns missing from CATALOGUE_COLUMNS: {sorted(unknown)}")
        return cat.reindex(columns=list(CATALOGUE_COLUMNS))


@dataclass(frozen=True)
class CatalogueTables:
    """The catalogue frame as the report and the plots read it: one row per cell (its summary
    columns) and the signature, metric and detector rows apart."""

    cells: pd.DataFrame
    signatures: pd.DataFrame
    metrics: pd.DataFrame
    detectors: pd.DataFrame

    @classmethod
    def of(cls, cat: pd.DataFrame) -> CatalogueTables:
        """Split a catalogue frame (as :meth:`Catalogue.frame` builds it) by row kind."""
        sig_or_metric = cat[cat["kind"].isin(["signature", "metric"])]
        return cls(cells=sig_or_metric.drop_duplicates("cell"), signatures=cat[cat["kind"] == "signature"],
                   metrics=cat[cat["kind"] == "metric"], detectors=cat[cat["kind"] == "detector"])


def baselines_frame(rows: list[BaselineRow]) -> pd.DataFrame:
    """baselines.parquet (its columns even when no setup has healthy runs)."""
    return pd.DataFrame([{f.name: getattr(r, f.name) for f in fields(r)} for r in rows],
                        columns=list(BASELINE_COLUMNS))


def agreement_frame(rows: list[AgreementRow]) -> pd.DataFrame:
    """backends.parquet: one row per signature per fault run on several backends (its rate columns
    are per backend, so it has no columns when no fault ran on two)."""
    return pd.DataFrame([r.record() for r in rows])


def read_table(path: Path, required: str = "") -> pd.DataFrame | None:
    """A file the catalogue wrote (None when absent); a one-line :class:`ConfigError` when it is
    unreadable, or absent and ``required`` (the error then says ``required``)."""
    if not path.exists():
        if required:
            raise ConfigError(required)
        return None
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow's errors for a truncated or foreign file
        raise ConfigError(f"{path} is unreadable ({type(exc).__name__}): rebuild the catalogue") from None

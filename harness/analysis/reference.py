"""A run against a healthy reference run: which metrics differ beyond seed noise, and which known faults
move those metrics that way in the catalogue.

One log alone cannot show a fault that only shrinks or shifts a quantity within the range healthy runs
of other configurations cover (one PPO epoch instead of four, gradients never zeroed): the catalogue sees
them because it compares each faulty run with its healthy twin. A user often has that twin: the run
before the change, a baseline of the same configuration. This module makes that comparison for two logs
in canonical form (:class:`harness.logs.LoadedLog`):

- each metric both logs carry (at least :data:`MIN_VALUES` finite values over the updates both cover) is
  compared by the AUROC of the run's per-update values against the reference's (P(run > reference));
  a metric *differs* when ``|2 * AUROC - 1| >= threshold`` (:data:`THRESHOLD`: the smallest level at
  which at most 10% of pairs of healthy harness runs of one configuration, different seeds, show any
  difference; fitted and reported by ``benchmarks/reference_pairs.py``);
- each fault's *effects* come from the catalogue (:func:`directions`): per setup and metric, ``2 * AUROC -
  1`` of the fault's onset-0 seeds against their healthy twins;
- when a metric differs, faults are ranked by the distance between the run's effects and theirs
  (:func:`rank`), over every metric compared; a fault none of whose strong effects shows here is left out.

The configurations the two logs carry are compared as well: a setting that differs is itself a cause
the comparison names first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.stats import auroc

MIN_VALUES = 5              # finite values each log needs in the shared span for a metric to be compared
#: |2 AUROC - 1| at or above which a metric differs from the reference's (benchmarks/reference_pairs.py)
THRESHOLD = 0.85
DIRECTION_MIN = 0.5         # |catalogue effect| at which a fault's metric is listed as agreeing / opposite / absent
#: not compared as metrics: settings (compared as configuration) and bookkeeping
NOT_COMPARED = frozenset({"update", "step", "env_step", "fault_active", "lr", "clip_range", "optimizer_steps"})


@dataclass(frozen=True)
class MetricDifference:
    """One metric of the run against the reference over the updates both logs cover."""

    metric: str
    auroc: float                # P(run's value > reference's), over pairs of per-update values
    run_median: float
    reference_median: float
    differs: bool

    @property
    def effect(self) -> float:
        return 2.0 * self.auroc - 1.0

    @property
    def sign(self) -> int:
        return (1 if self.effect > 0 else -1) if self.differs else 0

    def describe(self) -> str:
        side = "higher" if self.effect > 0 else "lower"
        return (f"{self.metric} {side} (median {self.run_median:.4g} vs {self.reference_median:.4g}; "
                f"AUROC {self.auroc:.2f})")


@dataclass(frozen=True)
class FaultMatch:
    """How a fault's catalogue directions match the differences."""

    fault: str
    score: float                # RMS distance of the run's effects from its nearest cell's
    setup: str                  # that cell's setup (algo/env/backend)
    agree: tuple[str, ...]
    disagree: tuple[str, ...]
    absent: tuple[str, ...]     # the fault moves these in the catalogue; here they do not differ


@dataclass
class Comparison:
    """The run against its reference."""

    metrics: list[MetricDifference]
    config: dict[str, tuple[Any, Any]]          # setting -> (run's, reference's), where both logs carry it
    ranking: list[FaultMatch]
    span: int                                   # updates both logs cover
    threshold: float = THRESHOLD
    notes: list[str] = field(default_factory=list)

    @property
    def differing(self) -> list[MetricDifference]:
        return [m for m in self.metrics if m.differs]

    @property
    def healthy_distance(self) -> float:
        """The distance of a pattern with no effect at all (a healthy pair's) from the run's effects."""
        return _rms(np.array([m.effect for m in self.metrics])) if self.metrics else math.nan

    @property
    def alike(self) -> bool:
        return not self.differing and not self.config


def _rms(x: np.ndarray) -> float:
    """Root mean square: the distance of an effect pattern from another (of their difference) or from none."""
    return float(np.sqrt(np.mean(x ** 2)))


def _same(a: Any, b: Any) -> bool:
    try:
        fa, fb = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    return math.isclose(fa, fb, rel_tol=1e-9, abs_tol=0.0) or (math.isnan(fa) and math.isnan(fb))


def config_differences(run: Mapping[str, Any], reference: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The settings both configurations carry with different values (one carried by a single log is not
    a difference: a reader may find it in one format and not the other)."""
    return {k: (run[k], reference[k]) for k in sorted(set(run) & set(reference)) if not _same(run[k], reference[k])}


def metric_differences(run: pd.DataFrame, reference: pd.DataFrame, metrics: Iterable[str],
                       threshold: float = THRESHOLD) -> tuple[list[MetricDifference], int]:
    """Each of ``metrics`` compared over the updates both logs cover; returns them and that span."""
    last = min(run["update"].max(), reference["update"].max())
    a_rows, b_rows = run[run["update"] <= last], reference[reference["update"] <= last]
    out = []
    for m in metrics:
        if m in NOT_COMPARED or m not in a_rows or m not in b_rows:
            continue
        a = pd.to_numeric(a_rows[m], errors="coerce").to_numpy(float)
        b = pd.to_numeric(b_rows[m], errors="coerce").to_numpy(float)
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        if len(a) < MIN_VALUES or len(b) < MIN_VALUES:
            continue
        p = auroc(a, b)             # P(run's value > reference's), ties half, over pairs of per-update values
        out.append(MetricDifference(m, p, float(np.median(a)), float(np.median(b)), abs(2 * p - 1) >= threshold))
    return out, int(min(len(a_rows), len(b_rows)))


def directions(catalogue: pd.DataFrame, algo: str | None = None) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Per algorithm, fault and setup (algo/env/backend), per metric: how the fault moves the metric against
    its healthy twin, from the catalogue's metric rows (``kind == "metric"``) of onset-0 cells: ``2 * AUROC -
    1`` of its seeds against their twins (-1: every faulty seed below every twin, +1: above). Kept per setup:
    one fault moves a metric up on one env and down on another (Acrobot's episodes get longer as the agent
    fails, CartPole's shorter)."""
    rows = catalogue[(catalogue["kind"] == "metric") & (catalogue["onset_kind"].astype(str) == "0")
                     & catalogue["auroc"].notna() & ~catalogue["name"].isin(sorted(NOT_COMPARED))]
    if algo is not None:
        rows = rows[rows["algo"] == algo]
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (a, fault, setup), g in rows.groupby(["algo", "fault", "setup"]):
        effects = g.groupby("name")["auroc"].median()
        out.setdefault(str(a), {}).setdefault(str(fault), {})[str(setup)] = {
            str(m): round(float(2.0 * v - 1.0), 3) for m, v in effects.items()}
    return out


def _match(fault: str, differences: list[MetricDifference], run: np.ndarray,
           cells: Mapping[str, Mapping[str, float]]) -> FaultMatch | None:
    """The fault's cell nearest the run's effects (see :func:`rank`), or None when no cell measured any
    metric compared here."""
    names = [d.metric for d in differences]
    best: tuple[float, str, np.ndarray] | None = None
    for setup, effects in cells.items():
        if not any(n in effects for n in names):
            continue
        f = np.array([float(effects.get(n, 0.0)) for n in names])
        dist = _rms(run - f)
        if best is None or dist < best[0]:
            best = (dist, setup, f)
    if best is None:
        return None
    dist, setup, f = best
    strong = [(d, v) for d, v in zip(differences, f, strict=True) if abs(v) >= DIRECTION_MIN]
    return FaultMatch(fault, dist, setup,
                      agree=tuple(d.metric for d, v in strong if d.differs and d.effect * v > 0),
                      disagree=tuple(d.metric for d, v in strong if d.differs and d.effect * v < 0),
                      absent=tuple(d.metric for d, v in strong if not d.differs))


def rank(differences: list[MetricDifference],
         fault_cells: Mapping[str, Mapping[str, Mapping[str, float]]]) -> list[FaultMatch]:
    """Faults ranked by the distance between the run's effects against the reference (``2 AUROC - 1`` of
    every compared metric) and the effects of the fault's nearest catalogue cell against its twins: the
    root mean square difference over the metrics compared here (a metric the cell never measured counts
    0, as a healthy pair sits near 0 on every metric). The lists name the metrics where that cell's effect
    reaches :data:`DIRECTION_MIN`: those that differ on its side (agree), on the other (opposite), and
    those that do not differ here (expected but alike). A fault whose nearest cell is no closer than no
    effect at all (the origin, where a healthy pair sits), or none of whose strong effects is among the
    differences (nothing agrees), explains nothing and is left out."""
    run = np.array([d.effect for d in differences])
    none = _rms(run) if len(run) else 0.0
    matches = [m for fault, cells in fault_cells.items()
               if (m := _match(fault, differences, run, cells)) and m.score < none and m.agree]
    return sorted(matches, key=lambda m: (m.score, m.fault))


def compare(run: pd.DataFrame, reference: pd.DataFrame,
            fault_directions: Mapping[str, Mapping[str, Mapping[str, float]]],
            run_config: Mapping[str, Any] | None = None, reference_config: Mapping[str, Any] | None = None,
            threshold: float = THRESHOLD) -> Comparison:
    """The run's canonical metrics against the reference's (both with an ``update`` column), ranked
    against ``fault_directions`` (one algorithm's part of :func:`directions`)."""
    metrics = [c for c in run.columns if c in reference.columns]
    diffs, span = metric_differences(run, reference, metrics, threshold)
    notes = []
    if span < MIN_VALUES:
        notes.append(f"the two logs share {span} updates: too few to compare (>= {MIN_VALUES} needed)")
    longer, shorter = max(len(run), len(reference)), min(len(run), len(reference))
    if shorter < 0.5 * longer:
        notes.append(f"compared over the first {shorter} of {longer} updates (the shorter log's length)")
    return Comparison(diffs, config_differences(run_config or {}, reference_config or {}),
                      rank(diffs, fault_directions), span, threshold, notes)     # empty unless a metric differs


__all__ = ["DIRECTION_MIN", "MIN_VALUES", "THRESHOLD", "Comparison", "FaultMatch", "MetricDifference", "compare",
           "config_differences", "directions", "metric_differences", "rank"]

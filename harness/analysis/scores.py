"""Scores of a diagnosis on labelled logs, split the way users need them, each beside trivial baselines.

Detection (healthy logs against faulty ones):
- ``auroc``: of the anomaly score (P(anomalous) for the diagnosis; 0/1 for a rule set);
- ``healthy_called_healthy``: healthy logs answered healthy;
- ``tpr``: faulty logs called anything but healthy (``unknown`` included);
- ``tpr_at_10_fpr``: faulty logs scored above the 90th percentile of the healthy logs' scores (a point
  of this set's ROC curve, reported to compare detectors at one false-alarm rate; not a threshold the
  diagnosis uses).

Attribution (faulty logs of faults the model knows):
- ``top1``: the answer is the fault; ``class_level``: the fault is in the answer's class (the faults
  the log cannot tell apart); ``top3``: the fault is among the three most probable classes;
  ``right_when_detected``: top-1 among the faulty logs called anomalous.

Baselines: ``always_healthy``, ``flag_everything`` (alarms on every log, names nothing), and the rule
sets ``folk``, ``config_aware`` and ``ptt`` (post-training-toolkit's heuristics) streamed over the same logs (alarmed at all; the fault their
strongest alarm names).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.analysis.learning import HEALTHY
from harness.analysis.stats import auroc

#: answers that do not call the log anomalous
NOT_ANOMALOUS = (HEALTHY, "too_short")
#: the rule sets streamed over the same logs (harness.detection.stream.BASELINES, by name: analysis
#: sits below detection): the folk rules, the config-aware rules, post-training-toolkit's heuristics
RULE_SETS = ("folk", "config_aware", "ptt")
BASELINES = ("always_healthy", "flag_everything", *RULE_SETS)


@dataclass(frozen=True)
class Judged:
    """One labelled log and what a detector said of it."""

    label: str                                  # healthy or the true fault
    answer: str                                 # healthy | a fault | unknown | too_short
    score: float                                # the anomaly score (higher: more anomalous)
    members: tuple[str, ...] = ()               # the answer's class
    top3: tuple[str, ...] = ()
    known: bool = True                          # the detector's model knows the true fault


@dataclass
class Scores:
    n_healthy: int = 0
    n_faulty: int = 0
    auroc: float = math.nan
    healthy_called_healthy: float = math.nan
    tpr: float = math.nan
    tpr_at_10_fpr: float = math.nan
    top1: float = math.nan
    class_level: float = math.nan
    top3: float = math.nan
    right_when_detected: float = math.nan
    per_fault: dict[str, dict[str, float]] = field(default_factory=dict)

    def row(self) -> dict[str, float]:
        return {k: v for k, v in self.__dict__.items() if k != "per_fault"}


def _mean(mask: Iterable[bool]) -> float:
    values = np.asarray(list(mask), dtype=float)
    return float(values.mean()) if len(values) else math.nan


def score(judged: Sequence[Judged]) -> Scores:
    """Detection and attribution scores of one detector on one set of logs."""
    healthy = [j for j in judged if j.label == HEALTHY]
    faulty = [j for j in judged if j.label != HEALTHY]
    h_scores = np.array([j.score for j in healthy], dtype=float)
    f_scores = np.array([j.score for j in faulty], dtype=float)
    out = Scores(n_healthy=len(healthy), n_faulty=len(faulty))
    out.auroc = auroc(f_scores, h_scores)
    out.healthy_called_healthy = _mean(j.answer == HEALTHY for j in healthy)
    out.tpr = _mean(j.answer not in NOT_ANOMALOUS for j in faulty)
    if len(h_scores) and len(f_scores):
        out.tpr_at_10_fpr = float((f_scores > np.quantile(h_scores, 0.9)).mean())
    known = [j for j in faulty if j.known]
    out.top1 = _mean(j.answer == j.label for j in known)
    out.class_level = _mean(j.answer == j.label or j.label in j.members for j in known)
    out.top3 = _mean(j.label in j.top3 for j in known)
    detected = [j for j in known if j.answer not in NOT_ANOMALOUS]
    out.right_when_detected = _mean(j.answer == j.label for j in detected)
    for label in sorted({j.label for j in judged}):
        mine = [j for j in judged if j.label == label]
        out.per_fault[label] = {"n": len(mine), "right": _mean(j.answer == j.label for j in mine),
                                "class_level": _mean(j.answer == j.label or j.label in j.members for j in mine)}
    return out


def trivial(labels: Sequence[str], name: str, known: Sequence[bool] | None = None) -> list[Judged]:
    """What ``always_healthy`` (answers healthy, score 0) and ``flag_everything`` (answers unknown,
    score 1) say of logs with these labels."""
    known = known if known is not None else [True] * len(labels)
    if name == "always_healthy":
        return [Judged(lab, HEALTHY, 0.0, known=k) for lab, k in zip(labels, known)]
    return [Judged(lab, "unknown", 1.0, known=k) for lab, k in zip(labels, known)]


def from_rules(labels: Sequence[str], alarmed: Sequence[float], faults: Sequence[str],
               known: Sequence[bool] | None = None) -> list[Judged]:
    """A rule set's verdicts: alarmed (the score) and the fault its strongest alarm names ("" none)."""
    known = known if known is not None else [True] * len(labels)
    out = []
    for lab, a, f, k in zip(labels, alarmed, faults, known):
        answer = HEALTHY if not a else (f or "unknown")
        out.append(Judged(lab, answer, float(a), members=(f,) if f else (), top3=(f,) if f else (), known=k))
    return out


def table(rows: dict[str, Scores]) -> pd.DataFrame:
    """Detector name -> scores, as one frame (a row per detector)."""
    return pd.DataFrame([{"detector": name, **s.row()} for name, s in rows.items()])

"""Stream a detector over a log: what a monitor attached to the run would have said, update by update."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.detection.base import Alarm, Detector, RunInfo, alarms_from
from harness.detection.config_aware import ConfigAwareDetector
from harness.detection.folk import FolkDetector
from harness.detection.ptt import PostTrainingToolkitDetector
from harness.metrics import CANONICAL

#: the rule-based baselines every diagnosis score stands beside
BASELINES: dict[str, type] = {"folk": FolkDetector, "config_aware": ConfigAwareDetector,
                              "ptt": PostTrainingToolkitDetector}


@dataclass(frozen=True)
class Alarmed:
    """A detector's verdict on a log (or a prefix of it): the first alarm's step (None: never), and the
    fault named by the strongest alarm up to the end (None: an alarm that names no fault, or none)."""

    first: int | None
    fault: str | None
    strongest: float = math.nan


def stream(detector: Detector, frame: pd.DataFrame, run_info: RunInfo,
           ends: tuple[int, ...] | None = None) -> dict[int, Alarmed]:
    """Feed ``frame``'s rows (canonical names) to ``detector`` in order; the verdict at each of ``ends``
    (row counts; default: the whole log)."""
    detector.reset(run_info)
    ends = ends or (len(frame),)
    names = [c for c in CANONICAL if c in frame.columns]
    records = frame[names].to_dict("records")
    first: int | None = None
    best: Alarm | None = None
    out: dict[int, Alarmed] = {}
    for i, row in enumerate(records):
        metrics = {k: float(v) for k, v in row.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
        for alarm in alarms_from(detector, i, metrics):
            first = i if first is None else first
            if best is None or alarm.score > best.score:
                best = alarm
        if i + 1 in ends:
            out[i + 1] = Alarmed(first, best.fault if best else None, best.score if best else math.nan)
    for end in ends:
        out.setdefault(end, Alarmed(first, best.fault if best else None, best.score if best else math.nan))
    return out


def baseline_verdicts(frame: pd.DataFrame, algo: str, configured: Mapping[str, Any],
                      ends: tuple[int, ...]) -> dict[str, dict[int, Alarmed]]:
    """Every baseline detector's verdict on the log at each of ``ends``."""
    info = RunInfo(run_id="log", algo=algo, env="", backend="", configured=dict(configured))
    return {name: stream(cls(), frame, info, ends) for name, cls in BASELINES.items()}

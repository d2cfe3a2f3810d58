"""``detector=learned``: the diagnosis model as a streaming detector.

At every ``every``-th update (and the first ones) it asks the diagnosis (the model fitted by
``python -m harness.catalogue``, with the exact evidence it combines: :func:`harness.detection.diagnosis.
answer_frame`) about the updates seen so far, in the canonical view (what
:func:`harness.detection.scoring.evaluate` hands a detector), with the run's configured
hyperparameters and action space as context. It raises an alarm once the answer has been anything
but healthy (or too short to judge) on ``patience`` consecutive checks; the alarm names the answer's
fault (none for "anomalous, cause unknown") with P(anomalous) as the score.

The runs the model was fitted on are listed in ``trained_on``: the scorer leaves them out, so this
detector is only ever scored out of sample.
"""

from __future__ import annotations

import pandas as pd

from harness.analysis.model import HEALTHY, TOO_SHORT, UNKNOWN, load_models
from harness.detection.base import Alarm, RunInfo
from harness.detection.diagnosis import answer_frame, model_path
from harness.metrics import CANONICAL


class LearnedDetector:
    name = "learned"

    def __init__(self, catalogue: str = "results/catalogue", patience: int = 2, every: int = 3, warmup: int = 3):
        self.models = load_models(model_path(catalogue))
        self.patience, self.every, self.warmup = patience, every, warmup
        self.trained_on: frozenset[str] = frozenset(
            rid for m in self.models.values() for rid in m.info.get("run_ids", ()))

    def reset(self, run_info: RunInfo) -> None:
        self.model = self.models.get((run_info.algo, "canonical"))
        self.config = dict(run_info.configured)
        self.space = dict(run_info.action_space) or None
        self.rows: list[dict[str, float]] = []
        self.streak = 0
        self.raised = False

    def update(self, update_index: int, metrics: dict[str, float]) -> list[Alarm]:
        self.rows.append({**metrics, "update": update_index})
        n = len(self.rows)
        if self.model is None or n < self.warmup or (n % self.every and n > self.warmup):
            return []
        frame = pd.DataFrame(self.rows, columns=["update", *CANONICAL])
        result = answer_frame(self.model, frame, self.config, self.space)
        self.streak = self.streak + 1 if result.answer not in (HEALTHY, TOO_SHORT) else 0
        if self.streak < self.patience:
            return []
        fault = None if result.answer == UNKNOWN else result.answer
        # one symptom name per kind of answer (the evaluation groups false alarms by symptom); P(anomalous)
        # is the alarm's score
        symptom = "model: anomalous, cause unknown" if fault is None else f"model: looks like {fault}"
        return [Alarm(symptom, fault, result.anomalous)]


__all__ = ["LearnedDetector"]

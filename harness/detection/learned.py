"""``detector=learned``: the diagnosis model as a streaming detector.

At every ``every``-th update (and the first ones) it computes the window features of the updates
seen so far, in the canonical view (what :func:`harness.detection.scoring.evaluate` hands a
detector), with the run's configured hyperparameters and action space as context, and asks the
model fitted by ``python -m harness.catalogue``. It raises an alarm once the model has said "not
healthy" (P(healthy) < ``threshold``) on ``patience`` consecutive checks; the alarm names the most
probable fault (none for "anomalous, cause unknown") with its probability as the score.

The runs the model was fitted on are listed in ``trained_on``: the scorer leaves them out, so this
detector is only ever scored out of sample.
"""

from __future__ import annotations

import pandas as pd

from harness.analysis.features import features
from harness.analysis.model import HEALTHY, UNKNOWN, load_models
from harness.detection.base import Alarm, RunInfo
from harness.detection.diagnosis import model_path
from harness.metrics import CANONICAL


class LearnedDetector:
    name = "learned"

    def __init__(self, catalogue: str = "results/catalogue", threshold: float = 0.5, patience: int = 2,
                 every: int = 3, warmup: int = 3):
        self.models = load_models(model_path(catalogue))
        self.threshold, self.patience, self.every, self.warmup = threshold, patience, every, warmup
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
        row = pd.DataFrame([features(frame, CANONICAL, self.model.algo, self.config, self.space)])
        probs, anomalous, answers = self.model.diagnose(row)
        self.streak = self.streak + 1 if anomalous[0] >= self.threshold or answers[0] not in (HEALTHY,) else 0
        if self.streak < self.patience or answers[0] == HEALTHY:
            return []
        fault = None if answers[0] == UNKNOWN else answers[0]
        score = float(probs.iloc[0][fault]) if fault else float(anomalous[0])
        # one symptom name per kind of answer (the evaluation groups false alarms by symptom); the
        # probability is the alarm's score
        symptom = "model: anomalous, cause unknown" if fault is None else f"model: looks like {fault}"
        return [Alarm(symptom, fault, score)]


__all__ = ["LearnedDetector"]

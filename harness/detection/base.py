"""The detector protocol."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Alarm:
    """One alarm: the symptom seen, optionally the fault suspected (a registry name), a score."""

    symptom: str
    fault: str | None = None
    score: float = 1.0


@dataclass(frozen=True)
class RunInfo:
    """What a detector may know about a run before it starts: no labels."""

    run_id: str
    algo: str
    env: str
    backend: str
    configured: dict[str, Any] = field(default_factory=dict)   # configured hyperparameters

    @property
    def optimizer_steps_per_update(self) -> int | None:
        """Configured epochs (GRPO: num_iterations) x minibatches, if known."""
        epochs = self.configured.get("n_epochs", self.configured.get("num_iterations"))
        minibatches = self.configured.get("n_minibatches")
        return int(epochs * minibatches) if epochs and minibatches else None


def finite(x: float | None) -> bool:
    """A metric value that is present and finite."""
    return x is not None and math.isfinite(x)


def is_detector(obj: Any) -> bool:
    """Whether ``obj`` has the protocol's two methods."""
    return callable(getattr(obj, "reset", None)) and callable(getattr(obj, "update", None))


@runtime_checkable
class Detector(Protocol):
    def reset(self, run_info: RunInfo) -> None: ...

    def update(self, update_index: int, metrics: dict[str, float]) -> list[Alarm]: ...

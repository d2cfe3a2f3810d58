"""The detector protocol."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from harness.config import CONF_DIR, ConfigError, instantiate, opaque_id, visible_config


@dataclass(frozen=True)
class Alarm:
    """One alarm: the symptom seen, optionally the fault suspected (a registry name), a score."""

    symptom: str
    fault: str | None = None
    score: float = 1.0


@dataclass(frozen=True)
class RunInfo:
    """What a monitor attached to a real run knows before it starts, and nothing else.

    - ``run_id``: an opaque handle (:func:`opaque_id`), not the store's run id, which names the fault;
    - ``algo``, ``env``, ``backend`` and the ``action_space`` (``{"type": "discrete", "n": ..}`` or
      ``{"type": "box", "dim": ..}``);
    - ``configured``: the hyperparameters the run's config holds, restricted to the documented
      whitelist (``PPOConfig.VISIBLE`` / ``GRPOConfig.VISIBLE`` in harness/config/schemas.py). A
      misconfigured fault's bad value is there, because the user's config holds it; nothing
      derived from the label, the onset, the fault or its parameters, the control flag or the
      variant is.
    """

    run_id: str
    algo: str
    env: str
    backend: str
    configured: dict[str, Any] = field(default_factory=dict)   # configured hyperparameters
    action_space: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def for_run(cls, run_id: str, algo: str, env: str, backend: str, configured: dict[str, Any],
                action_space: dict[str, Any] | None = None) -> RunInfo:
        """The view of a stored run a detector gets: opaque id, whitelisted configuration."""
        return cls(run_id=opaque_id(run_id), algo=algo, env=env, backend=backend,
                   configured=visible_config(algo, configured), action_space=dict(action_space or {}))

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


def alarms_from(detector: Any, update_index: int, metrics: dict[str, float]) -> list[Alarm]:
    """``detector.update(update_index, metrics)``, checked against the protocol: a list (or tuple) of
    :class:`Alarm`, or None for none. Anything else raises ConfigError in one line naming the detector,
    what it returned and the protocol (a dict alarm would otherwise fail deep in the scoring)."""
    raised = detector.update(update_index, metrics)
    if raised is None:
        return []
    items = list(raised) if isinstance(raised, (list, tuple)) else None
    wrong = [raised] if items is None else [a for a in items if not isinstance(a, Alarm)]
    if wrong:
        bad = wrong[0]
        what = "returned" if items is None else "returned a list holding"
        raise ConfigError(f"{type(detector).__name__}.update {what} {type(bad).__name__} {bad!r:.60}; a detector's "
                          "update returns a list of Alarm objects: from harness.detection import Alarm; "
                          "return [Alarm(symptom, fault=None, score=1.0)] (or [] for none)")
    return items


def build_detector(spec: Any) -> Any:
    """A detector from an instance (returned as it is), a mapping with ``_target_`` and keyword
    arguments, a reference detector's name (``folk``, ``config_aware``, ``ptt``, ``learned``:
    harness/conf/detector/<name>.yaml) or a dotted class path; built as every part is
    (:func:`harness.config.instantiate`). A one-line ConfigError for anything else."""
    from omegaconf import OmegaConf

    if is_detector(spec):
        return spec
    if isinstance(spec, str):
        path = CONF_DIR / "detector" / f"{spec}.yaml"
        spec = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {"_target_": spec}
    if not (isinstance(spec, Mapping) and spec.get("_target_")):
        raise ConfigError(f"detector={spec!r}: give a reference detector's name, a _target_ or a detector")
    detector = instantiate(spec, "detector")
    if not is_detector(detector):
        raise ConfigError(f"detector._target_={spec['_target_']!r} is not a detector: it needs reset(run_info) and "
                          "update(update_index, metrics)")
    return detector

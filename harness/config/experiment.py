"""A validated experiment and what identifies its run."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from harness import TRAINING_VERSION
from harness.config.schemas import BackendConfig, EnvConfig, GRPOConfig, PPOConfig


@dataclass(frozen=True)
class Experiment:
    """A validated experiment: typed group configs plus the instantiated fault."""

    algo: PPOConfig | GRPOConfig
    env: EnvConfig
    backend: BackendConfig
    fault: Any                       # faults.base.Fault
    fault_cfg: dict[str, Any]        # the fault's config as composed (for hashing and meta)
    seed: int
    torch_threads: int
    results_dir: str
    twin: bool
    progress: bool
    sampled: dict[str, Any] | None = None   # the dataset sweep's draw (recorded in meta.json, not identity)
    retrain: bool = False            # train even when the run is stored, replacing it (not identity)
    tensorboard: bool = False        # the run command also writes a TensorBoard log of both runs (not identity)

    def key(self) -> dict[str, Any]:
        """What identifies the run: the resolved config minus output paths and display flags, and the
        training-code changes that alter this config's runs (the algorithm config's ``code_changes``;
        absent when none does, so other runs keep their ids)."""
        changes = self.algo.code_changes()
        return {
            **({"code_changes": changes} if changes else {}),
            "training": TRAINING_VERSION,   # the training code's version (harness/__init__.py)
            "algo": {k: v for k, v in _plain(self.algo).items()
                     if k not in getattr(self.algo, "ADDED", {}) or v != self.algo.ADDED[k]},  # ids kept
            "env": {k: v for k, v in _plain(self.env).items() if (k, v) != ("engine", "gymnasium")},  # ids kept
            "backend": {"name": self.backend.name},   # its trainers follow from the name
            "fault_name": self.fault.name,
            "fault_version": getattr(self.fault, "version", 1),   # the fault's own code version (faults/base.py)
            "fault": self.fault_cfg,
            "seed": self.seed,
            "torch_threads": self.torch_threads,
        }


def _plain(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


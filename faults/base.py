"""The Fault base class: a named, parameterised override of some agent hooks."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from harness.config import ConfigError, check_range
from harness.hooks import HEALTHY, Hooks


def param(default: Any, doc: str, **bounds: Any) -> Any:
    """A fault parameter with its default, a one-line doc and validated bounds
    (``gt``, ``ge``, ``lt``, ``le``; ``kind`` defaults to float)."""
    return field(default=default, metadata={"doc": doc, "bounds": bounds})


@dataclass
class Fault(Hooks):
    """Base of every fault. Subclasses are dataclasses whose fields are the parameters."""

    onset: int = param(0, "update index at which the fault switches on (0 = from the start)",
                       ge=0, kind=int)

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    provenance: ClassVar[str] = ""
    #: where it acts: "env wrapper", "effective hyperparameter" or "update-loop hook"
    acts_on: ClassVar[str] = ""
    algos: ClassVar[tuple[str, ...]] = ("ppo", "grpo")
    backends: ClassVar[tuple[str, ...]] = ("native",)
    #: the expected signature (a hypothesis the catalogue tests); the first is the primary one
    expected: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            bounds = dict(f.metadata.get("bounds", {}))
            kind = bounds.pop("kind", float)
            check_range("fault", f.name, getattr(self, f.name), kind=kind, **bounds)
        self.active = False

    def begin_update(self, update: int, configured: Any) -> tuple[Hooks, Any]:
        """Switch on from the onset update; the hooks and hyperparameters in force for this update."""
        self.active = update >= self.onset
        hooks = self if self.active else HEALTHY
        return hooks, hooks.hyperparams(configured)

    def params(self) -> dict[str, Any]:
        """The fault's own parameters (everything but onset)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "onset"}

    @classmethod
    def param_docs(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("doc", "") for f in fields(cls)}

    def check_applicable(self, algo: str, backend: str) -> None:
        if algo not in self.algos:
            raise ConfigError(f"fault {self.name} does not apply to algo={algo}; it applies to: "
                              f"{', '.join(self.algos)}")
        if backend not in self.backends:
            raise ConfigError(f"fault {self.name} cannot be expressed on backend={backend}; it runs on: "
                              f"{', '.join(self.backends)}")

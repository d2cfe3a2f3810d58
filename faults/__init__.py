"""The fault registry: one module per fault in this package, discovered on import.

A fault is selected by name (``fault=<name>``, conf/fault/<name>.yaml) and built from
its config through the ``_target_`` class path, so a fault outside this package plugs
in the same way.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from faults.base import Fault
from harness.config import ConfigError, locate


def _discover() -> dict[str, type[Fault]]:
    found: dict[str, type[Fault]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Fault) and obj.__module__ == module.__name__:
                found[obj.name] = obj
    return dict(sorted(found.items()))


FAULTS: dict[str, type[Fault]] = _discover()


def build_fault(cfg: dict[str, Any]) -> Fault:
    """Instantiate a fault from its config (``_target_`` + parameters); raises ConfigError."""
    cfg = dict(cfg)
    target = cfg.pop("_target_", None)
    if target is None:
        raise ConfigError("fault config has no _target_")
    cls = locate(target)
    if not (isinstance(cls, type) and issubclass(cls, Fault)):
        raise ConfigError(f"fault _target_ {target!r} is not a faults.base.Fault subclass")
    valid = set(cls.param_docs())
    for key in cfg:
        if key not in valid:
            raise ConfigError(f"unknown parameter fault.{key} for fault {cls.name}; "
                              f"valid: {', '.join(sorted(valid))}")
    return cls(**cfg)


__all__ = ["FAULTS", "Fault", "build_fault"]

"""The fault registry: one module per fault in this package, discovered on import.

A fault is one class: its dataclass fields are its parameters (defaults, docs, bounds), the hooks it
overrides say where it acts. Registering it (:func:`register`; every module of this package is
registered on import) adds it to :data:`FAULTS` and stores its config, :meth:`Fault.default_config`,
in Hydra's ConfigStore as ``fault=<name>``; there is no YAML to keep in step. A fault outside this
package is added the same way: ``@register`` on its class, in a module imported before composing::

    @register
    @dataclass
    class MyFault(Fault):
        factor: float = param(10.0, "what it multiplies", gt=1)
        name = "my_fault"
        ...

The run's fault is built from the composed config through its ``_target_`` class path, as trainers and
detectors are (:func:`build_fault`: :func:`harness.config.instantiate`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Mapping
from typing import Any

from hydra.core.config_store import ConfigStore

from faults.base import FORMS, Fault, form_param, param
from harness.config import instantiate

#: every registered fault by name, sorted by name (the package's own and any :func:`register` added)
FAULTS: dict[str, type[Fault]] = {}

#: the Hydra config group faults are stored in
GROUP = "fault"
_PLAIN = (bool, int, float, str, type(None))


def _store(cls: type[Fault]) -> None:
    ConfigStore.instance().store(group=GROUP, name=cls.name, node=cls.default_config(), provider="faults")


def register(cls: type[Fault]) -> type[Fault]:
    """Add fault class ``cls`` to :data:`FAULTS` and to Hydra's ``fault`` config group (so
    ``fault=<cls.name>`` composes its defaults); returns ``cls``, so it also works as a decorator.
    Registering the same class again is a no-op; raises TypeError or ValueError for a class that
    could not be selected and built by name."""
    if not (isinstance(cls, type) and issubclass(cls, Fault)):
        raise TypeError(f"{cls!r} is not a faults.base.Fault subclass")
    if "__dataclass_fields__" not in vars(cls):
        raise TypeError(f"{cls.__qualname__} must be a @dataclass (its fields are its parameters)")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", cls.name or ""):
        raise ValueError(f"{cls.__qualname__}.name={cls.name!r}: a fault needs a lower-case identifier as its name")
    target = f"{cls.__module__}.{cls.__qualname__}"
    if "." in cls.__qualname__:          # its _target_ would not import back to it
        raise ValueError(f"fault {cls.name}: define {cls.__qualname__} at the top level of an importable module")
    taken = FAULTS.get(cls.name)
    if taken is not None and taken is not cls and f"{taken.__module__}.{taken.__qualname__}" != target:
        raise ValueError(f"fault name {cls.name!r} is taken by {taken.__module__}.{taken.__qualname__}")
    cfg = cls.default_config()          # raises TypeError for a parameter without a default
    odd = sorted(k for k, v in cfg.items() if not isinstance(v, _PLAIN))
    if odd:
        raise TypeError(f"fault {cls.name}: parameter defaults must be bool, int, float, str or None: {odd}")
    FAULTS[cls.name] = cls
    ordered = sorted(FAULTS.items())
    FAULTS.clear()
    FAULTS.update(ordered)
    _store(cls)
    return cls


def unregister(name: str) -> None:
    """Remove fault ``name`` from :data:`FAULTS` and from the ``fault`` config group (tests)."""
    FAULTS.pop(name, None)
    ConfigStore.instance().repo.get(GROUP, {}).pop(f"{name}.yaml", None)


def register_configs() -> None:
    """Store every registered fault's config in Hydra's ConfigStore (group ``fault``); idempotent.
    :func:`register` already stores each one: this is the call at the place the configs are
    registered before composing (harness.pipeline.compose)."""
    for cls in FAULTS.values():
        _store(cls)


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Fault) and obj.__module__ == module.__name__:
                register(obj)


_discover()


def build_fault(cfg: Mapping[str, Any]) -> Fault:
    """A fault from its config (``_target_`` + parameters), built as every part is
    (:func:`harness.config.instantiate`); raises a one-line ConfigError."""
    return instantiate(cfg, "fault", Fault)


__all__ = ["FAULTS", "FORMS", "Fault", "build_fault", "form_param", "param", "register", "register_configs",
           "unregister"]

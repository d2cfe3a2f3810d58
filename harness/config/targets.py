"""Building a part from its config, the one way for every pluggable part: ``{_target_: a.dotted.Class,
**arguments}``, instantiated by Hydra. A backend's trainers (``backend.trainers.<algo>``), the fault
(``fault``) and a detector (``detector``) are all built by :func:`instantiate`."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate as hydra_instantiate

from harness.config.errors import ConfigError, did_you_mean, locate

#: the keys Hydra reads itself, which are no argument of the target
HYDRA_KEYS = ("_target_", "_recursive_", "_convert_", "_partial_", "_args_")


def instantiate(spec: Any, what: str, kind: type | None = None) -> Any:
    """``hydra.utils.instantiate(spec)``, where ``spec`` is ``{_target_: a.dotted.path, **arguments}`` and
    ``what`` the config key holding it, as messages name it (``fault``, ``detector``,
    ``backend.trainers.ppo``). Raises a one-line ConfigError naming the ``_target_`` when there is none,
    it cannot be imported, it is not a ``kind`` subclass, an argument is none of its parameters, or its
    constructor fails; a ConfigError the constructor raises is passed on as it is."""
    target = spec.get("_target_") if isinstance(spec, Mapping) else None
    if not target:
        raise ConfigError(f"{what}: {spec!r:.100} is not {{_target_: a.dotted.Class, ...}}")
    try:
        obj = locate(target)
    except ConfigError:
        raise ConfigError(f"{what}._target_={target!r} cannot be imported (is its package on the path?)") from None
    if kind is not None and not (isinstance(obj, type) and issubclass(obj, kind)):
        raise ConfigError(f"{what}._target_={target!r} is not a {kind.__module__}.{kind.__qualname__} subclass")
    check_arguments(obj, spec, what)
    try:
        return hydra_instantiate(spec)
    except InstantiationException as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"{what} {target}: {str(cause).splitlines()[0][:200]}") from None


def check_arguments(obj: Any, spec: Mapping[str, Any], what: str) -> None:
    """Raise a one-line ConfigError, with its "did you mean", for a key of ``spec`` that names none of
    ``obj``'s parameters (nothing is checked for a target that takes ``**kwargs``)."""
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):          # no signature to read (a builtin)
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    valid = sorted(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    for key in spec:
        if key not in valid and key not in HYDRA_KEYS:
            name = getattr(obj, "name", None)
            label = name if isinstance(name, str) and name else getattr(obj, "__qualname__", spec["_target_"])
            raise ConfigError(f"unknown parameter {what}.{key} for {what} {label}; "
                              f"{did_you_mean(key, valid, f'{what}.')}valid: {', '.join(valid) or 'none'}")

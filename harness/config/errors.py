"""The one error type every config problem raises, and the checks that raise it."""

from __future__ import annotations

import difflib
import importlib
import math
from collections.abc import Iterable
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value; the message is one line meant for the user."""


INTERRUPTED = 130      # the exit code of a command stopped by Ctrl-C (128 + SIGINT)


def did_you_mean(value: object, choices: Iterable[object], prefix: str = "") -> str:
    """``"did you mean <prefix>X? "`` for the choice X closest to a misspelled ``value`` (difflib), else ``""``."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"did you mean {prefix}{close[0]}? " if close else ""


def unknown_choice(kind: str, value: object, choices: Iterable[object]) -> str:
    """The one line for a name that is not one of ``choices``: ``unknown fault 'shared_polcy'; did you
    mean shared_policy? valid choices: ...`` (``kind`` names what was asked for)."""
    choices = [str(c) for c in choices]
    return f"unknown {kind} {value!r}; {did_you_mean(value, choices)}valid choices: {', '.join(choices) or 'none'}"


def unknown_key(key: str, valid: Iterable[str]) -> str:
    """The one line for a config key that does not exist: ``unknown key algo.clip_rnge; did you mean
    algo.clip_range? valid keys: ...`` (``key`` is the full dotted key, ``valid`` its siblings' names)."""
    parent, _, leaf = key.rpartition(".")
    valid = sorted(valid)
    hint = did_you_mean(leaf, valid, prefix=f"{parent}." if parent else "")
    return f"unknown key {key}; {hint}valid keys: {', '.join(valid) or 'none'}"


def check_range(owner: str, name: str, value: Any, *, gt=None, ge=None, lt=None, le=None,
                kind: type = float) -> None:
    """Raise ConfigError unless ``value`` is a finite ``kind`` within the bounds."""
    key = f"{owner}.{name}" if owner else name
    if kind is int:
        ok_type = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok_type = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok_type = isinstance(value, kind)
    if not ok_type:
        raise ConfigError(f"{key}={value!r} must be {'an integer' if kind is int else 'a number'}")
    if kind in (int, float) and not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} must be finite")
    bounds = [(value > b, f"> {b}") for b in [gt] if b is not None]
    bounds += [(value >= b, f">= {b}") for b in [ge] if b is not None]
    bounds += [(value < b, f"< {b}") for b in [lt] if b is not None]
    bounds += [(value <= b, f"<= {b}") for b in [le] if b is not None]
    if not all(ok for ok, _ in bounds):
        raise ConfigError(f"{key}={value!r} is out of range: must be {' and '.join(b for _, b in bounds)}")


def locate(path: str) -> Any:
    """The object at a dotted import path (a ``_target_``); raises ConfigError."""
    module_name, _, name = str(path).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        raise ConfigError(f"_target_ {path!r} cannot be imported (is its package on the path?)") from None



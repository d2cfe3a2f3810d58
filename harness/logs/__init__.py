"""Framework dialects in one place: profiles (harness/conf/profile/*.yaml, :mod:`.profiles`), readers for
every log a PPO/GRPO user has (:mod:`.readers`), the mapping to canonical names and cadence
(:mod:`.canonical`), the framework views of stored runs (:mod:`.views`), writers
(:mod:`.writers`) and the export of stored runs (:mod:`.export`).

Adding a framework: a ``harness/conf/profile/<name>.yaml`` (names, signs, scales, step key, cadence,
hints, hyperparameter names), a ``render_<name>`` view in views.py, and, if it writes a file
format of its own, a reader in readers.py and a writer in writers.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.logs.canonical import (
    AnotherAlgorithm,
    LoadedLog,
    MappedLog,
    map_config,
    map_log,
    to_canonical,
)
from harness.logs.profiles import Profile, detect, load_profile, names
from harness.logs.readers import RawLog, read


def load_log(path: str | Path, profile: str | dict | Profile = "auto", run: str | None = None,
             config: dict[str, Any] | None = None, algo: str | None = None) -> LoadedLog:
    """Read any supported log (file or directory; ``run`` picks one of several runs) and map it to
    canonical form under ``profile`` (``auto``: detected from its names)."""
    return to_canonical(read(path, run), profile, config, algo)


__all__ = ["AnotherAlgorithm", "LoadedLog", "MappedLog", "Profile", "RawLog", "detect", "load_log", "load_profile", "map_config",
           "map_log", "names", "read", "to_canonical"]

"""Export stored runs as a framework would have logged them, with the labels kept beside the logs.

``out/<opaque id>/...``: the log (names, signs, scales, cadence of the profile's framework); the
directory name is :func:`harness.config.opaque_id` of the run id, and nothing in the log or
its config context names the fault, the onset, the control flag or the variant.
``out/labels.json``: opaque id -> run_id, fault, fault parameters and form, onset, seed, setup,
status, is_control, ... so an exported dataset can still be scored.

``out`` must be new or empty; ``overwrite=True`` replaces an earlier export there (a directory holding
labels.json), so event files never pile up; anything else in it is left alone and refused.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config import ConfigError, algo_label, opaque_id, setup_label
from harness.logs.profiles import load_profile, names
from harness.logs.views import StoredRun, render
from harness.logs.writers import FORMATS, write
from harness.store import RunStore

LABELS = "labels.json"


def label(meta: dict[str, Any], files: list[str], profile: str, fmt: str) -> dict[str, Any]:
    variant = meta.get("algo_variant", "default")
    return {"run_id": meta["run_id"], "fault": meta["fault"], "fault_params": meta.get("fault_params", {}),
            "fault_form": meta.get("fault_form"), "fault_kind": meta.get("fault_kind"),
            "onset_update": meta.get("onset_update"), "seed": meta.get("seed"),
            "setup": setup_label(meta["algo"], variant, meta["env"], meta["backend"]),
            "algo": algo_label(meta["algo"], variant), "env": meta["env"], "backend": meta["backend"],
            "status": meta.get("status"), "is_control": bool(meta.get("is_control")), "variant": variant,
            "n_updates": meta.get("n_updates"), "profile": profile, "format": fmt, "files": files}


def check(profile: str, fmt: str) -> None:
    if profile not in names():
        raise ConfigError(f"unknown profile {profile!r}; valid choices: {', '.join(names())}")
    if fmt not in FORMATS:
        raise ConfigError(f"format={fmt!r}; valid choices: {', '.join(FORMATS)}")


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """Raise ConfigError unless ``out`` is a new or empty directory, or (with ``overwrite``) an earlier
    export: a directory whose every entry labels.json lists."""
    path = Path(out)
    for p in (path, *path.absolute().parents):
        if p.exists() and not p.is_dir():
            where = f"out={out}" if p == path else f"{p} (in out={out})"
            raise ConfigError(f"{where} is a file, not a directory: the exported logs and labels.json go in a directory")
        if p.exists():
            break
    if not path.is_dir() or not any(path.iterdir()):
        return
    if not overwrite:
        raise ConfigError(f"out={out} is not empty: choose a new directory, or add overwrite=true to replace "
                          "the export in it")
    stray = sorted({p.name for p in path.iterdir()} - set(_exported(path)))
    if stray:
        raise ConfigError(f"out={out} holds files that are not an export ({', '.join(stray[:3])}"
                          f"{' ...' if len(stray) > 3 else ''}): overwrite=true replaces only an earlier export; "
                          "choose a new directory")


def _exported(out: Path) -> list[str]:
    """The entries an earlier export wrote in ``out`` (labels.json and its runs' directories)."""
    try:
        labels = json.loads((out / LABELS).read_text())
    except (OSError, ValueError):
        return []
    return [LABELS, *labels] if isinstance(labels, dict) else []


def select(store: RunStore, run: str, profile: str, warn: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The metas to export: one run (ConfigError if absent, corrupt, or of an algorithm the
    framework does not run) or every complete run the framework applies to."""
    algos = load_profile(profile).algos
    if run != "all":
        meta = store.load_meta(run)
        if meta is None:
            problem = store.problem(run)
            known = sorted(p.name for p in store.runs.iterdir()) if store.runs.is_dir() else []
            hint = f"; e.g. {', '.join(known[:3])}" if known and problem == "absent" else ""
            raise ConfigError(f"run={run}: {problem} in {store.runs}{hint}")
        if meta["algo"] not in algos:
            raise ConfigError(f"profile={profile} logs {'/'.join(a.upper() for a in algos)} runs only; "
                              f"run {run} is {meta['algo'].upper()}")
        return [meta]
    metas = list(store.iter_metas(warn=warn))
    keep = [m for m in metas if m["algo"] in algos]
    if not keep:
        raise ConfigError(f"no stored {'/'.join(algos)} run in {store.runs} to export as profile={profile}")
    skipped = len(metas) - len(keep)
    if skipped:
        warn(f"skipped {skipped} run(s) of another algorithm: profile={profile} logs "
             f"{'/'.join(a.upper() for a in algos)} runs only")
    return keep


def export(results_dir: str | Path, run: str, profile: str, fmt: str, out: str | Path,
           warn: Callable[[str], None] = print, overwrite: bool = False) -> dict[str, dict[str, Any]]:
    """Write the selected runs under ``out`` (new or empty; ``overwrite``: replacing an earlier export
    there) and their labels in out/labels.json; returns the labels."""
    check(profile, fmt)
    check_out(out, overwrite)
    store = RunStore(results_dir)
    metas = select(store, run, profile, warn)
    out = Path(out)
    for name in _exported(out) if out.is_dir() else []:       # overwrite: the earlier export goes first
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    written = {}
    # in opaque-id order: file names and wall times of event files must not follow run ids (which name the fault)
    for meta in sorted(metas, key=lambda m: opaque_id(m["run_id"])):
        oid = opaque_id(meta["run_id"])
        raw = render(StoredRun.load(store, meta["run_id"]), profile)
        files = write(raw, profile, fmt, out / oid)
        written[oid] = label(meta, [str(f.relative_to(out)) for f in files], profile, fmt)
    out.mkdir(parents=True, exist_ok=True)
    (out / LABELS).write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    return written

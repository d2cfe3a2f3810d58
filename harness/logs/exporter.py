"""Export stored runs as a framework would have logged them, with the labels kept beside the logs.

``out/<opaque id>/...``: the log (names, signs, scales, cadence of the profile's framework); the
directory name is :func:`harness.detection.base.opaque_id` of the run id, and nothing in the log or
its config context names the fault, the onset, the control flag or the variant.
``out/labels.json``: opaque id -> run_id, fault, fault parameters and form, onset, seed, setup,
status, is_control, ... so an exported dataset can still be scored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config import ConfigError, algo_label, setup_label
from harness.detection.base import opaque_id
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
           warn: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """Write the selected runs under ``out``; returns (and merges into out/labels.json) their labels."""
    check(profile, fmt)
    store = RunStore(results_dir)
    out = Path(out)
    labels_path = out / LABELS
    labels = json.loads(labels_path.read_text()) if labels_path.exists() else {}
    written = {}
    # in opaque-id order: file names and wall times of event files must not follow run ids (which name the fault)
    for meta in sorted(select(store, run, profile, warn), key=lambda m: opaque_id(m["run_id"])):
        oid = opaque_id(meta["run_id"])
        raw = render(StoredRun.load(store, meta["run_id"]), profile)
        files = write(raw, profile, fmt, out / oid)
        written[oid] = label(meta, [str(f.relative_to(out)) for f in files], profile, fmt)
    labels.update(written)
    out.mkdir(parents=True, exist_ok=True)
    labels_path.write_text(json.dumps(labels, indent=2, sort_keys=True) + "\n")
    return written

"""A catalogue assembled from parts: the catalogue sweep is too long for one sitting on 2 cores (about
8 hours for every setup), so it is trained and built a few setups at a time, each in its own results
directory (a *part*), and ``rlfh-catalogue merge=PART_DIR`` puts a part's cells into the published
catalogue.

A part is an ordinary build (``python -m harness.catalogue results_dir=PART_DIR``) of the runs of the
setups it trained; its ``catalogue/build.json`` (:func:`build_record`) says when it was built, by which
code, from how many runs, and with which sweep commands. Merging replaces the catalogue's cells of the
same name or of an earlier form of the same fault on the same setup and onset kind (the rows of every
kind, their per-view verdicts and trace plots) and the healthy baselines
of the part's setups, recomputes the backends' agreement over the merged cells (a part's SB3 cells are
compared with native cells of another part), records the part in ``catalogue/parts.json`` with the
commands that regenerate it, and re-renders the pages. Cells a merge finds without a part (a catalogue
built whole, before parts) are recorded as one part named after the commit that last wrote them, when
the catalogue is in a git checkout."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.dataset import as_module_command
from harness.analysis.runs import RunSet, cell_slug
from harness.catalogue.agreement import frame_agreement
from harness.catalogue.rows import BASELINE_COLUMNS, CATALOGUE_COLUMNS, agreement_frame, read_table
from harness.config import ConfigError
from harness.store import atomic_write_bytes, atomic_write_json, atomic_write_parquet

#: what a build writes about itself, and what a merged catalogue says of its parts
BUILD_FILE, PARTS_FILE = "build.json", "parts.json"
#: a setup's columns in catalogue.parquet and baselines.parquet
SETUP_KEYS = ["algo", "algo_variant", "env", "backend"]
#: what a cell measures whatever its fault's settings: a part's cell replaces an old cell with these values
CELL_KEYS = ["fault", "setup", "onset_kind"]


def _git(*args: str, cwd: Path) -> str:
    """A git command's output in ``cwd`` ('' when git or the checkout is missing)."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def code_version() -> str:
    """The commit of the harness's source checkout (``+changes`` when its code, the tracked files of
    harness/, faults/ and hydra_plugins/, differs from it), or ``unknown`` for an installed copy
    outside git."""
    root = Path(__file__).resolve().parents[2]
    commit = _git("rev-parse", "--short=7", "HEAD", cwd=root)
    if not commit:
        return "unknown"
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", "harness", "faults", "hydra_plugins", cwd=root)
    return commit + ("+changes" if changed else "")


def build_record(rs: RunSet) -> dict[str, Any]:
    """``build.json``: when and by which code a catalogue was built, from how many runs, and the
    commands its runs were trained by as stored (in order of first appearance; :attr:`Part.commands`
    shows them as a user types them)."""
    commands = list(dict.fromkeys(str(m["command"]) for m in rs.metas.values() if m.get("command")))
    return {"built": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "code": code_version(),
            "runs": len(rs.runs), "results_dir": str(rs.root) if rs.root is not None else "",
            "sweep_commands": commands}


@dataclass(frozen=True)
class Part:
    """One part of a merged catalogue: its setups and cells, and how it was made."""

    name: str
    setups: list[str]
    cells: list[str] = field(default_factory=list)
    runs: int = 0
    code: str = "unknown"
    built: str = ""
    results_dir: str = ""
    sweep_commands: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def commands(self) -> list[str]:
        """The commands that regenerate the part and merge it (none for a part built before parts)."""
        if not self.results_dir:
            return []
        return [*map(as_module_command, self.sweep_commands), f"python -m harness.catalogue results_dir={self.results_dir} "
                "fit_model=false dataset=false", f"python -m harness.catalogue merge={self.results_dir}"]


def read_parts(catalogue_dir: Path) -> list[Part]:
    """The parts a merged catalogue records (empty for a catalogue built whole)."""
    path = catalogue_dir / PARTS_FILE
    if not path.exists():
        return []
    try:
        return [Part(**p) for p in json.loads(path.read_text())]
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path} is unreadable ({type(exc).__name__}): merge the parts again") from None


def _read_part(part_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame | None, dict[str, Any]]:
    """A part's catalogue, views, baselines and build record; a one-line error when it has none."""
    cat_dir = part_dir / "catalogue"
    for name in ("catalogue.parquet", BUILD_FILE):
        if not (cat_dir / name).is_file():
            raise ConfigError(f"merge={part_dir}: no {name} under {cat_dir} (build the part first: python -m "
                              f"harness.catalogue results_dir={part_dir} fit_model=false dataset=false)")
    return (read_table(cat_dir / "catalogue.parquet"), read_table(cat_dir / "views.parquet"),
            read_table(cat_dir / "baselines.parquet"), json.loads((cat_dir / BUILD_FILE).read_text()))


def _earlier_part(cat: pd.DataFrame, catalogue_dir: Path) -> Part:
    """The cells of a catalogue built whole, as a part named after the commit that last wrote them."""
    commit = _git("log", "-1", "--format=%h %cs", "--", "catalogue.parquet", cwd=catalogue_dir)
    name = f"built whole ({commit.split()[0]})" if commit else "built whole"
    note = (f"cells of the catalogue as built whole, before it was assembled from parts (catalogue.parquet last "
            f"committed in {commit}); the protocol and the fault forms of that code apply to them (git log)"
            if commit else "cells of the catalogue as built whole, before it was assembled from parts")
    cells = list(dict.fromkeys(cat["cell"]))
    return Part(name=name, setups=sorted(cat["setup"].dropna().unique()), cells=cells,
                built=commit.split()[1] if commit else "", note=note)


def _replace(old: pd.DataFrame | None, new: pd.DataFrame | None, drop: pd.Series | None) -> pd.DataFrame | None:
    """``old`` without the rows ``drop`` marks, then ``new`` (None when both are absent)."""
    frames = [f for f in ((old[~drop] if old is not None and drop is not None else old), new) if f is not None]
    return pd.concat(frames, ignore_index=True) if frames else None


def replaced_cells(old: pd.DataFrame | None, part: pd.DataFrame) -> set[str]:
    """The cells of ``old`` that a part's cells replace: those of the same name, and those of the same
    fault, setup and onset kind under another name (the fault's settings or form changed since they
    were built, e.g. excessive_lr's factor 100 -> 3): a catalogue never holds two forms of one cell."""
    if old is None:
        return set()
    keys = set(map(tuple, part[CELL_KEYS].astype(str).values))
    same_kind = old[CELL_KEYS].astype(str).apply(tuple, axis=1).isin(keys)
    return set(old.loc[same_kind, "cell"]) | (set(old["cell"]) & set(part["cell"]))


def retired_cells(old: pd.DataFrame | None, part: pd.DataFrame, gone: set[str],
                  refused: Callable[[dict[str, Any]], str | None] | None) -> dict[str, str]:
    """The cells of ``old`` on the part's setups that neither the part nor :func:`replaced_cells` covers
    and that today's code refuses to train there (``refused``: a cell's row -> the one-line reason, or
    None), cell -> reason: e.g. adv_std_no_floor's leave-one-out form on TRL, built whole before TRL
    refused it. A part of a setup retires them; other setups' cells are left alone."""
    if old is None or refused is None:
        return {}
    mine = old[old["setup"].isin(set(part["setup"].dropna())) & ~old["cell"].isin(gone | set(part["cell"]))]
    reasons = {row["cell"]: refused(row) for row in mine.drop_duplicates("cell").to_dict("records")}
    return {cell: why for cell, why in reasons.items() if why}


def _retired_note(parts: list[Part], part_dir: Path, retired: dict[str, str]) -> str:
    """The part's note: the cells it retired, with those an earlier merge of the same part retired (a part
    merged again finds them gone already and keeps saying so)."""
    earlier = [p.note for p in parts if p.results_dir == str(part_dir) and p.note]
    entries = [e for note in earlier for e in note.split("; ")] + [f"retired {c}: {w}" for c, w in sorted(retired.items())]
    return "; ".join(dict.fromkeys(entries))


def merge(results_dir: Path, part_dir: Path,
          refused: Callable[[dict[str, Any]], str | None] | None = None) -> list[Part]:
    """Merge the part built under ``part_dir`` into ``results_dir``'s catalogue (created when absent):
    the part's cells replace cells of the same name or of an earlier form (:func:`replaced_cells`) and
    retire its setups' cells that today's code refuses (:func:`retired_cells`; the part's note says
    which and why),
    its setups' healthy baselines replace theirs, its
    trace plots are copied (replaced cells' plots removed), the backends' agreement is recomputed, and
    parts.json records the part (last, so an interrupted merge is repaired by running it again: merging
    a part twice changes nothing). Returns the parts of the merged catalogue. The pages are not
    rendered here (:func:`harness.catalogue.build.render`)."""
    if part_dir.resolve() == results_dir.resolve():
        raise ConfigError(f"merge={part_dir} is results_dir itself: merge a part built in its own results_dir")
    part_cat, part_views, part_base, record = _read_part(part_dir)
    out_dir = results_dir / "catalogue"
    old_path = out_dir / "catalogue.parquet"
    old = read_table(old_path)
    parts = read_parts(out_dir)
    if old is not None and not parts:
        parts = [_earlier_part(old, out_dir)]
    new_cells = set(part_cat["cell"])
    gone = replaced_cells(old, part_cat)
    retired = retired_cells(old, part_cat, gone, refused)
    gone |= set(retired)
    setups = sorted(part_cat["setup"].dropna().unique())
    for stale in (old.drop_duplicates("cell") if old is not None else pd.DataFrame(columns=["cell", "base"])).itertuples():
        if stale.cell in gone:
            (out_dir / "plots" / f"traces_{cell_slug(stale.cell, stale.base)}.png").unlink(missing_ok=True)
    cat = _replace(old, part_cat, old["cell"].isin(gone) if old is not None else None)
    # cells built before a summary column existed have it empty (NaN); the columns keep the build's order
    cat = cat.reindex(columns=[c for c in CATALOGUE_COLUMNS if c in cat] + [c for c in cat if c not in CATALOGUE_COLUMNS])
    old_views = read_table(out_dir / "views.parquet")
    views = _replace(old_views, part_views, old_views["cell"].isin(gone) if old_views is not None else None)
    old_base = read_table(out_dir / "baselines.parquet")
    part_keys = set(map(tuple, part_base[SETUP_KEYS].astype(str).values)) if part_base is not None else set()
    baselines = _replace(old_base, part_base, old_base[SETUP_KEYS].astype(str).apply(tuple, axis=1).isin(part_keys)
                         if old_base is not None else None)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    for plot in sorted((part_dir / "catalogue" / "plots").glob("traces_*.png")):
        shutil.copyfile(plot, out_dir / "plots" / plot.name)
    atomic_write_parquet(old_path, cat)
    if views is not None:
        atomic_write_parquet(out_dir / "views.parquet", views)
    atomic_write_parquet(out_dir / "baselines.parquet",
                         baselines if baselines is not None else pd.DataFrame(columns=list(BASELINE_COLUMNS)))
    agreement = agreement_frame(frame_agreement(cat))
    if agreement.empty:
        (out_dir / "backends.parquet").unlink(missing_ok=True)
    else:
        atomic_write_parquet(out_dir / "backends.parquet", agreement)
    part = Part(name=", ".join(setups), setups=setups, cells=sorted(new_cells), runs=int(record.get("runs", 0)),
                code=str(record.get("code", "unknown")), built=str(record.get("built", "")),
                results_dir=str(part_dir), sweep_commands=list(record.get("sweep_commands", [])),
                note=_retired_note(parts, part_dir, retired))
    kept = []
    for p in parts:           # an earlier part keeps the cells no later part replaced
        left = [c for c in p.cells if c not in gone]
        if left:
            kept.append(Part(**{**asdict(p), "cells": left,
                                "setups": sorted(cat.loc[cat["cell"].isin(left), "setup"].dropna().unique())}))
    parts = [*kept, part]
    atomic_write_bytes(out_dir / PARTS_FILE, (json.dumps([asdict(p) for p in parts], indent=1) + "\n").encode())
    return parts


def write_build_record(record: dict[str, Any], out_dir: Path) -> Path:
    """Write ``build.json`` (:func:`build_record`, taken when the build started: the code a build ran
    is the code it imported then) beside the catalogue a build wrote; returns its path."""
    path = out_dir / BUILD_FILE
    atomic_write_json(path, record)
    return path

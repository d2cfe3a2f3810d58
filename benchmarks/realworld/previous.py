"""The previous published figures: ``benchmarks/results/realworld.json`` as committed at a git revision
(``--previous``), and what changed since, per report row and log kind.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from benchmarks.realworld.labels import REPO

PUBLISHED = "benchmarks/results/realworld.json"      # the published figures, in git


def previous_figures(revision: str, published: str = PUBLISHED) -> dict[str, Any] | None:
    """The overall figures of ``published`` (the JSON this run writes, relative to the repository;
    ``benchmarks/results/realworld.json`` by default) as committed at ``revision`` (read before anything
    is overwritten), with where they come from; None when git has none (a set of logs other than the
    test set, e.g. probe_runs.py's, is compared only with its own earlier figures)."""
    show = subprocess.run(["git", "show", f"{revision}:{published}"], cwd=REPO, capture_output=True, text=True)
    sha = subprocess.run(["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True)
    if show.returncode != 0:
        return None
    old = json.loads(show.stdout)
    meta = old.get("meta", {})
    return {"revision": revision, "revision_commit": sha.stdout.strip(), "file": published,
            "date": meta.get("date"), "harness_commit": meta.get("commit"), "catalogue": meta.get("catalogue"),
            "logs": meta.get("logs"), "runs": meta.get("runs"), "overall": old.get("overall", {})}


def changes(now: dict[str, dict[str, Any]], previous: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The published figures at the previous revision against these, per "<report row>/<log>" present in
    either: healthy called healthy and top-1 on all faults (the measures both report alike)."""
    if not previous:
        return []
    before = previous.get("overall") or {}
    out = []
    for key in [*before, *(k for k in now if k not in before)]:
        b, a = before.get(key), now.get(key)
        row: dict[str, Any] = {"scope": key}
        for measure, n_key in (("healthy_called_healthy", "healthy_n"), ("top1_all", "faulty_all_n")):
            old = b.get(measure) if b else None
            new = a.get(measure) if a else None
            row[measure] = {"before": old, "before_n": b.get(n_key) if b else None, "now": new,
                            "now_n": a.get(n_key) if a else None,
                            "change": None if old is None or new is None else round(new - old, 4)}
        row["top1_can_show_now"] = a.get("top1_can_show") if a else None
        out.append(row)
    return out

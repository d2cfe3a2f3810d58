"""Each feature family's effect on the diagnosis, measured on held-out runs.

    python benchmarks/feature_families.py [--results results | --examples results/catalogue/model/examples.parquet]
                                          [--jobs 2] [--record]

Builds (or reads from the cache beside the published model) the diagnosis model's training examples
exactly as ``python -m harness.catalogue`` does, then, for the "held-out runs" protocol (30% of the
diverse runs, stratified by fault, never trained on), fits the model with every feature and with
each family left out, per algorithm and view, and scores the held-out runs' full logs: detection
(AUROC, healthy called healthy, faulty called anomalous) and attribution (top-1, class-level). The
families (:mod:`harness.analysis.features`):

- ``log-scale``: log10 of small positive quantities (``<metric>:log_*``, ``cfg:log_*``);
- ``exact``: shares of exactly-zero values and of steps repeating the previous value (``:zero``, ``:const``);
- ``config-relative``: how the log relates to the configuration (``rel:*``);
- ``windows``: the head / middle / tail windows and the trend (``:head``, ``:mid``, ``:tail``, ``:trend``);
- ``signatures``: every signature's statistic (``sig:*``);
- ``config``: the configured hyperparameters themselves (``cfg:*``);
- ``setting evidence``: the fitted evidence items of a configured setting outside every training log's
  range where it was not the bug (the features stay; no fault owns a setting, so no item is kept).

Nothing here looks at the real-framework test logs. ``--record`` writes
benchmarks/results/feature_families.json.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FAMILIES = {
    "log-scale": lambda c: ":log_" in c or c.startswith("cfg:log"),
    "exact": lambda c: c.endswith((":zero", ":const")),
    "config-relative": lambda c: c.startswith("rel:"),
    "windows": lambda c: c.endswith((":head", ":mid", ":tail", ":trend", ":log_head", ":log_tail")),
    "signatures": lambda c: c.startswith("sig:"),
    "config": lambda c: c.startswith("cfg:"),
    "setting evidence": lambda c: False,
}
REPORTED = ("auroc", "healthy_called_healthy", "tpr", "top1", "class_level")


def main() -> None:
    from joblib import Parallel, delayed

    from benchmarks.model_examples import arguments, inputs
    from harness.analysis.examples import VIEWS, feature_columns
    from harness.analysis.protocols import protocols, run_protocol

    parser = arguments(__doc__.split("\n")[0])
    parser.add_argument("--kind", default="logistic")
    args = parser.parse_args()
    start = time.perf_counter()
    examples, settings = inputs(parser, args)
    diverse = examples.loc[examples["testable"], "run_id"].unique()
    columns = feature_columns(examples)
    held_out = {algo: protocols(examples, algo, left_out=False)[0] for algo in VIEWS}

    def one(family: str, algo: str, view: str) -> dict | None:
        data = examples
        if family != "all":
            dropped = [c for c in columns if FAMILIES[family](c)]
            data = examples.drop(columns=dropped)
        rows = run_protocol(data, algo, view, held_out[algo], kind=args.kind,
                            settings={} if family == "setting evidence" else settings)
        mine = None if rows is None else next(r for r in rows if r["detector"] == "diagnosis")
        return None if mine is None else {"family_left_out": family, "algo": algo, "view": view,
                                          **{k: mine[k] for k in REPORTED}}

    jobs = [(f, algo, view) for f in ("all", *FAMILIES) for algo, views in VIEWS.items() for view in views]
    rows = [r for r in Parallel(n_jobs=args.jobs)(delayed(one)(*j) for j in jobs) if r]
    base = {(r["algo"], r["view"]): r for r in rows if r["family_left_out"] == "all"}
    print(f"{'left out':16s} {'algo':5s} {'view':10s} " + " ".join(f"{k[:10]:>10s}" for k in REPORTED))
    for r in rows:
        b = base.get((r["algo"], r["view"]))
        cells = [f"{r[k]:10.3f}" if r["family_left_out"] == "all" or b is None else f"{r[k] - b[k]:+10.3f}"
                 for k in REPORTED]
        print(f"{r['family_left_out']:16s} {r['algo']:5s} {r['view']:10s} " + " ".join(cells))
    summary = {}
    for family in FAMILIES:
        deltas = [{k: r[k] - base[(r["algo"], r["view"])][k] for k in REPORTED} for r in rows
                  if r["family_left_out"] == family and (r["algo"], r["view"]) in base]
        summary[family] = {k: round(sum(d[k] for d in deltas) / len(deltas), 4) for k in REPORTED} if deltas else {}
        print(f"without {family:16s} mean change over views: {summary[family]}")
    print(f"{time.perf_counter() - start:.0f} s")
    if args.record:
        out = ROOT / "benchmarks" / "results" / "feature_families.json"
        out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "kind": args.kind,
                                   "command": "python benchmarks/feature_families.py " + " ".join(sys.argv[1:]),
                                   "diverse_runs": len(diverse), "examples": len(examples),
                                   "mean_change_without": summary, "rows": rows}, indent=2, default=float) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

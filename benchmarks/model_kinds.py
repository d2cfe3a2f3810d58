"""Which model family the diagnosis uses: each of harness.analysis.model.KINDS scored out of sample.

    python benchmarks/model_kinds.py [--results results] [--kinds logistic:0.03,logistic:0.1,boosting] [--jobs 2] [--record]

Builds the diagnosis model's training examples exactly as ``python -m harness.catalogue`` does
(the diverse dataset plus the catalogue's calibration seeds; the examples are cached beside the
published model), then fits each kind on the training part of the "held-out runs" protocol and
scores it on the held-out diverse runs (``logistic:C`` sets the logistic's strength), per algorithm and
view: class-level and top-1 attribution on faulty logs, healthy logs called healthy, detection AUROC,
calibration error, and the fit time. The catalogue's ``model_kind`` should be the kind with the best
held-out class-level attribution at >= 90% healthy called healthy; nothing here looks at the
real-framework test logs. ``--record`` writes benchmarks/results/model_kinds.json.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from joblib import Parallel, delayed

    from benchmarks.model_examples import arguments, inputs
    from harness.analysis.examples import VIEWS
    from harness.analysis.model import check_kind
    from harness.analysis.protocols import protocols, run_protocol

    parser = arguments(__doc__.split("\n")[0])
    parser.add_argument("--kinds", default="logistic:0.03,logistic:0.1,logistic:0.5,boosting,extratrees")
    args = parser.parse_args()
    examples, settings = inputs(parser, args)
    diverse = examples.loc[examples["testable"], "run_id"].unique()
    extra = examples.loc[~examples["testable"], "run_id"].unique()
    kinds = [check_kind(k) for k in args.kinds.split(",") if k]

    def one(kind: str, algo: str, view: str, protocol):
        t = time.perf_counter()
        out = run_protocol(examples, algo, view, protocol, kind=kind, settings=settings)
        mine = None if out is None else next(r for r in out if r["detector"] == "diagnosis")
        return None if mine is None else {**{k: v for k, v in mine.items() if k != "per_class"},
                                          "fit_s": round(time.perf_counter() - t, 1)}

    held_out = {algo: protocols(examples, algo, left_out=False)[0] for algo in VIEWS}   # the held-out-runs split
    jobs = [(kind, algo, view, held_out[algo]) for kind in kinds for algo, views in VIEWS.items() for view in views]
    rows = [r for r in Parallel(n_jobs=args.jobs)(delayed(one)(*j) for j in jobs) if r]
    print(f"{'kind':14s} {'algo':5s} {'view':10s} {'class':>6s} {'top-1':>6s} {'healthy':>8s} {'AUROC':>6s} "
          f"{'ECE':>6s} {'fit s':>6s}")
    for r in rows:
        print(f"{r['model_kind']:14s} {r['algo']:5s} {r['view']:10s} {r['class_level']:6.1%} {r['top1']:6.1%} "
              f"{r['healthy_called_healthy']:8.1%} {r['auroc']:6.3f} {r['ece']:6.3f} {r['fit_s']:6.1f}")
    summary = {}
    for kind in kinds:
        mine = [r for r in rows if r["model_kind"] == kind]
        summary[kind] = {k: round(sum(r[k] for r in mine) / len(mine), 4) for k in
                         ("class_level", "top1", "healthy_called_healthy", "auroc", "ece")} if mine else {}
        print(f"{kind:14s} mean over views: {summary[kind]}")
    if args.record:
        out = ROOT / "benchmarks" / "results" / "model_kinds.json"
        out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "diverse_runs": len(diverse), "extra_runs": len(extra),
                                   "examples": len(examples), "mean_over_views": summary, "rows": rows}, indent=2, default=float) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

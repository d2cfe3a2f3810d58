"""Which faults the diagnosis folds into "healthy, or a fault this log cannot show": the rule scored out of sample.

    python benchmarks/answer_rules.py [--results results | --examples results/catalogue/model/examples.parquet]
        [--invisible 0.5,0.7,never] [--splits 5] [--jobs 2] [--record]

A fault whose training logs the model's out-of-fold answers take for healthy at least ``INVISIBLE``
of the time (harness.analysis.identifiability) is one "this view cannot show": its probability counts
as healthy-looking, so it cannot raise an alarm (unless an evidence item in the log shows it). A
higher share folds fewer faults (``never``: none), which trades healthy logs called healthy for
faulty logs called anomalous. For each value, the diagnosis is fitted on the training part of the
"held-out runs" protocol and scored on its held-out diverse runs, on ``--splits`` different splits
(the split's seed), per algorithm and view, exactly as the catalogue scores the published model:
detection AUROC, healthy called healthy, faulty called anomalous (TPR), top-1 and class-level
attribution. The published rule should keep >= 90% of held-out healthy logs healthy; nothing here
looks at the real-framework test logs. ``--record`` writes benchmarks/results/answer_rules.json.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEASURES = ("auroc", "healthy_called_healthy", "tpr", "top1", "class_level")


def scored(examples, algo: str, view: str, split: int, invisible: str, settings: dict) -> dict:
    """One view's held-out scores on one split with the invisibility share ``invisible``."""
    from harness.analysis import identifiability
    from harness.analysis.model import LOGISTIC_C
    from harness.analysis.protocols import protocols, run_protocol

    data = examples[(examples["algo"] == algo) & (examples["view"] == view)]
    default = identifiability.INVISIBLE
    identifiability.INVISIBLE = 2.0 if invisible == "never" else float(invisible)    # > 1: no fault is folded
    try:
        protocol = protocols(data, algo, seed=split, left_out=False)[0]
        rows = run_protocol(data, algo, view, protocol, kind=f"logistic:{LOGISTIC_C}", settings=settings)
    finally:
        identifiability.INVISIBLE = default
    mine = next(r for r in rows if r["detector"] == "diagnosis")
    return {"invisible": invisible, "algo": algo, "view": view, "split": split, **{k: mine[k] for k in MEASURES}}


def main() -> None:
    import pandas as pd
    from joblib import Parallel, delayed

    from benchmarks.model_examples import arguments, inputs
    from harness.analysis.examples import VIEWS

    parser = arguments(__doc__.split("\n")[0])
    parser.add_argument("--invisible", default="0.5,0.7,never", help="shares to compare (never: fold no fault)")
    parser.add_argument("--splits", type=int, default=5)
    args = parser.parse_args()
    values = [v for v in args.invisible.split(",") if v]
    for v in values:
        if v != "never" and not 0 < float(v) <= 1:
            parser.error(f"--invisible {v}: a share in (0, 1] or never")
    examples, settings = inputs(parser, args)
    jobs = [(algo, view, split, v) for algo, views in VIEWS.items() for view in views
            for split in range(args.splits) for v in values]
    rows = pd.DataFrame(Parallel(n_jobs=args.jobs)(delayed(scored)(examples, *j, settings) for j in jobs))
    per_view = rows.groupby(["algo", "view", "invisible"], sort=False)[list(MEASURES)].mean().round(4)
    overall = rows.groupby("invisible", sort=False)[list(MEASURES)].mean().round(4)
    print(per_view.to_string())
    print(overall.to_string())
    if args.record:
        out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "command": "python benchmarks/answer_rules.py " + " ".join(sys.argv[1:]),
               "examples": len(examples), "runs": int(examples["run_id"].nunique()), "splits": args.splits,
               "mean_over_views": overall.reset_index().to_dict("records"),
               "per_view": per_view.reset_index().to_dict("records")}
        path = ROOT / "benchmarks" / "results" / "answer_rules.json"
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"recorded -> {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

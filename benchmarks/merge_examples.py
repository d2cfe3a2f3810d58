"""A build's training examples plus a supplement's, as one table a refit or a held-out comparison reads.

    python benchmarks/merge_examples.py --base results/catalogue/model/examples.parquet \\
        --supplement SUPP [--algo ppo] [--jobs 2] --out DIR

``--supplement`` is a results directory holding a supplement sweep's runs (e.g.
``python -m harness -m +sweep=dataset results_dir=SUPP hydra.sweeper.seed=5 ...setups_only=[...]``): its
examples are rendered exactly as ``python -m harness.catalogue`` renders a build's (cached in
``SUPP/catalogue/model/examples.parquet``, so a sweep that grew is rendered only for its new runs).
``--algo`` keeps one algorithm's rows of both (a refit of that
algorithm's models: ``rlfh-catalogue refit=DIR/examples.parquet refit_algos=[ppo]``). The base's runs
keep their ``testable`` flag; the supplement's are diverse runs too, so a held-out comparison that should
judge on the base's split alone takes ``--split-of BASE`` (benchmarks/heldout_answers.py). Writes
``DIR/examples.parquet`` and ``DIR/model_card.json`` (the base card, its settings to check per fault
joined with the supplement runs'; ``merged_from`` says what was merged).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from benchmarks.model_examples import load_examples, load_settings
    from harness.store import atomic_write_json, atomic_write_parquet

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a build's examples.parquet (model_card.json beside)")
    parser.add_argument("--supplement", type=Path, required=True, help="a results directory with the supplement's runs")
    parser.add_argument("--algo", default=None, choices=("ppo", "grpo"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    card_path = args.base.with_name("model_card.json")
    if not args.base.is_file() or not card_path.is_file():
        parser.error(f"--base {args.base}: not a build's examples.parquet with its model_card.json beside it")
    if not (args.supplement / "runs").is_dir():
        parser.error(f"--supplement {args.supplement}: no runs/ directory (a results directory a sweep wrote)")
    base = pd.read_parquet(args.base)
    extra = load_examples(args.supplement, args.jobs)
    if args.algo:
        base, extra = base[base["algo"] == args.algo], extra[extra["algo"] == args.algo]
    overlap = set(base["run_id"]) & set(extra["run_id"])
    if overlap:
        parser.error(f"{len(overlap)} runs are in both (e.g. {sorted(overlap)[0]}): not a supplement of this base")
    merged = pd.concat([base, extra], ignore_index=True)
    card = json.loads(card_path.read_text())
    settings = {k: set(v) for k, v in card.get("settings", {}).items()}
    for fault, names in load_settings(args.supplement, sorted(extra["run_id"].unique())).items():
        settings.setdefault(fault, set()).update(names)
    card["settings"] = {k: sorted(v) for k, v in sorted(settings.items())}
    card["merged_from"] = {"base": str(args.base), "base_runs": int(base["run_id"].nunique()),
                           "supplement": str(args.supplement), "supplement_runs": int(extra["run_id"].nunique()),
                           "algo": args.algo or "all"}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_parquet(args.out / "examples.parquet", merged)
    atomic_write_json(args.out / "model_card.json", card)
    print(f"{len(base)} base examples ({base['run_id'].nunique()} runs) + {len(extra)} supplement examples "
          f"({extra['run_id'].nunique()} runs) -> {args.out / 'examples.parquet'}")


if __name__ == "__main__":
    main()

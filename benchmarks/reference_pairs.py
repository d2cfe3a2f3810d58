"""``rlfh-diagnose log=RUN reference=HEALTHY`` scored: a run against a healthy run of the same
configuration (harness/analysis/reference.py).

    python benchmarks/reference_pairs.py --runs PAIRS/runs [--sb3 results/realworld/sb3]
                                         [--cleanrl results/realworld/cleanrl] [--record]

Two sets of pairs, neither used to build the catalogue the faults are ranked against:

- **Harness pairs** (``--runs``): native PPO runs of seeds 100-103, beyond the catalogue's seeds 0-9,
  trained by the commands below. Healthy pairs: every two seeds of one env. Faulty pairs: a fault's
  seed s against its healthy twin (seed s: the same seed, as after a code change) and against seed
  s+1 (another seed). The threshold (harness.analysis.reference.THRESHOLD) is fitted here: the
  smallest level on a 0.05 grid at which at most 10% of the healthy pairs of the fitting envs show a
  difference; the fitting envs are every env but Acrobot, whose healthy and faulty pairs are the
  held-out ones. Faults are ranked three times: against every catalogue cell (Acrobot's cells were
  built from other seeds of the same configuration), against the cells of the other envs only (a
  configuration the catalogue never saw), and against the run's env's cells only (an alternative
  diagnose does not use: measured here and not adopted, docs/diagnose.md).
- **The frameworks' own logs** (``--sb3``: benchmarks/realworld/sb3_runs.py's output, SB3's
  progress.csv; ``--cleanrl``: cleanrl_runs.py's, the TensorBoard run directory): each bug's log against
  the healthy log of its env (and script) with the same seed and with the first healthy seed no bug log
  has (SB3: seed 0 and seed 1; CleanRL: seed 2 or 3, and seed 4); healthy pairs: every healthy log
  against the smallest healthy seed's. Ranked against every cell and, for comparison, against the run's
  env's cells only (the env from labels.json). A test set: nothing here is fitted on it.

Beside the comparison, in the same table: always "alike" and always "differs" (detection), a random
ranking (expected top-1 1/K, top-3 3/K over the K faults ranked) and, on the frameworks' logs, the single-log
diagnosis of the faulty log alone (its answer, or the answer's class, is the fault).

Training the harness pairs (about 70 s per fault on 2 busy cores; twins once per env):

    python -m harness -m fault=<every native PPO fault> env=acrobot env.engine=envpool seed=100 seeds=4 \\
        results_dir=PAIRS progress=false hydra/launcher=joblib
    python -m harness fault=none env=cartpole seed=100 seeds=4 twin=false results_dir=PAIRS
    (and env=lunarlander env.engine=envpool, env=pendulum, env=hopper env.engine=envpool)

``--record`` writes benchmarks/results/reference_pairs.json and .md (docs/diagnose.md quotes them).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.reference import compare, directions, metric_differences  # noqa: E402

HELD_OUT_ENV = "acrobot"
FALSE_ALARMS = 0.10
GRID = [round(x, 2) for x in np.arange(0.30, 1.0001, 0.05)]


def env_key(name: str) -> str:
    """An env's name without namespace, version or case (``CartPole-v1`` -> ``cartpole``)."""
    return re.sub(r"-v\d+$", "", str(name).rsplit("/", 1)[-1]).lower()


def cells_of_env(cells: dict[str, Any], env: str | None) -> dict[str, Any]:
    """Each fault's catalogue cells (setups ``algo/env/backend``) of ``env`` only, a fault with none left
    out; every cell when ``env`` is None or the catalogue has no cell of it. The ranking diagnose does not
    make (measured here, not adopted: docs/diagnose.md)."""
    if env is None:
        return cells
    kept = {f: {s: e for s, e in c.items() if env_key(s.split("/")[1]) == env_key(env)} for f, c in cells.items()}
    return {f: c for f, c in kept.items() if c} or cells


def harness_runs(runs: Path) -> pd.DataFrame:
    """One row per stored complete run: run_id, fault, env, seed, setting (the algorithm's and env's
    configuration: a fault and its healthy twins share it), path."""
    rows = []
    for meta_path in sorted(runs.glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        if meta.get("status") != "ok" or meta.get("algo") != "ppo" or not (meta_path.parent / "metrics.parquet").exists():
            continue
        setting = json.dumps({k: meta["config"].get(k) for k in ("algo", "env")}, sort_keys=True)
        rows.append({"run_id": meta["run_id"], "fault": meta["fault"], "env": meta["env"], "seed": int(meta["seed"]),
                     "setting": setting, "onset": meta.get("onset_update", 0), "path": meta_path.parent})
    return pd.DataFrame(rows)


def max_effect(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """The largest |2 AUROC - 1| over the metrics both logs carry (threshold 2: none flagged)."""
    diffs, _ = metric_differences(a, b, [c for c in a.columns if c in b.columns], threshold=2.0)
    return max((abs(d.effect) for d in diffs), default=0.0)


def fit_threshold(healthy_max: list[float]) -> float:
    """The smallest grid level with at most FALSE_ALARMS of the healthy pairs reaching it."""
    for t in GRID:
        if np.mean([m >= t for m in healthy_max]) <= FALSE_ALARMS:
            return t
    return 1.0


def scored_pair(run: pd.DataFrame, ref: pd.DataFrame, fault: str, cells: dict[str, Any], threshold: float,
                kind: str, env: str | None = None) -> dict[str, Any]:
    cells = cells_of_env(cells, env)
    c = compare(run, ref, cells, threshold=threshold)
    ranked = [m.fault for m in c.ranking]
    return {"fault": fault, "pair": kind, "detected": bool(c.differing), "n_differ": len(c.differing),
            "rank": ranked.index(fault) + 1 if fault in ranked else None, "ranked": len(ranked),
            "top": ranked[:3], "k": len(cells)}


def harness_pairs(runs: Path, cells: dict[str, Any]) -> tuple[float, list[dict[str, Any]], dict[str, Any]]:
    """The threshold fitted on the fitting envs' healthy pairs, then every held-out pair scored."""
    table = harness_runs(runs)
    healthy = table[table.fault == "none"]
    frames = {r.run_id: pd.read_parquet(r.path / "metrics.parquet") for r in table.itertuples()}
    per_env: dict[str, list[float]] = defaultdict(list)
    for (env, _), g in healthy.groupby(["env", "setting"]):       # pairs of one configuration
        for a, b in itertools.combinations(g.sort_values("seed").itertuples(), 2):
            per_env[str(env)].append(max_effect(frames[a.run_id], frames[b.run_id]))
    fitting = [m for env, ms in per_env.items() if env != HELD_OUT_ENV for m in ms]
    threshold = fit_threshold(fitting)
    other_env = {f: {s: e for s, e in c.items() if f"/{HELD_OUT_ENV}/" not in s} for f, c in cells.items()}
    records = []
    for m in per_env.get(HELD_OUT_ENV, []):
        records.append({"fault": "healthy", "pair": "healthy", "detected": m >= threshold})
    twins_of = {(r.setting, int(r.seed)): r.run_id for r in healthy.itertuples()}
    for r in table[(table.env == HELD_OUT_ENV) & (table.fault != "none")].itertuples():
        twins = {seed: run_id for (setting, seed), run_id in twins_of.items() if setting == r.setting}
        if not twins:
            continue
        for kind, seed in (("same seed", r.seed), ("another seed", r.seed + 1 if r.seed + 1 in twins else min(twins))):
            if seed not in twins:
                continue
            for cat_name, cat, env in (("all cells", cells, None), ("other envs' cells", other_env, None),
                                       ("the run's env's cells (not used by diagnose)", cells, HELD_OUT_ENV)):
                rec = scored_pair(frames[r.run_id], frames[twins[seed]], r.fault, cat, threshold, kind, env)
                records.append({**rec, "cells": cat_name})
    fit = {"threshold": threshold, "fitting_pairs": len(fitting),
           "fitting_false_alarms": float(np.mean([m >= threshold for m in fitting])) if fitting else None,
           "healthy_pairs_per_env": {k: len(v) for k, v in per_env.items()},
           "healthy_max_effect_quantiles": {k: [round(float(q), 3) for q in np.quantile(v, [0.5, 0.9, 1.0])]
                                             for k, v in per_env.items() if v}}
    return threshold, records, fit


def framework_pairs(root: Path, cells: dict[str, Any], threshold: float, model_file: Path) -> list[dict[str, Any]]:
    """A framework's own logs (benchmarks/realworld's layout: labels.json with env, seed, fault and, for
    CleanRL, script): each bug's log against the healthy log of its env and script with the same seed and
    with the first healthy seed no bug log has; healthy pairs: every healthy log against the smallest
    healthy seed's; the single-log diagnosis of each faulty log beside."""
    from harness.analysis.model import load_models
    from harness.detection.diagnosis import diagnose_log
    from harness.logs import load_log

    labels = json.loads((root / "labels.json").read_text())
    models = load_models(model_file)
    logs = {rel: load_log(root / rel) for rel in labels}

    def group(v: dict[str, Any]) -> tuple[str, str]:
        return (v["env"], v.get("script", ""))

    healthy = {(*group(v), int(v["seed"])): rel for rel, v in labels.items() if v["fault"] == "healthy"}
    fault_seeds = {int(v["seed"]) for v in labels.values() if v["fault"] != "healthy"}
    records = []
    for (env, script, _seed), rel in sorted(healthy.items()):
        base = healthy[(env, script, min(s for e, sc, s in healthy if (e, sc) == (env, script)))]
        if rel != base:
            c = compare(logs[rel].metrics, logs[base].metrics, cells, logs[rel].config, logs[base].config, threshold)
            records.append({"fault": "healthy", "pair": "healthy", "detected": bool(c.differing), "env": env})
    for rel, v in sorted(labels.items()):
        if v["fault"] == "healthy":
            continue
        d = diagnose_log(logs[rel], models)
        single = {"answer": d.result.answer, "members": list(d.result.members)}
        others = sorted(s for e, sc, s in healthy if (e, sc) == group(v) and s not in fault_seeds)
        for kind, seed in (("same seed", int(v["seed"])), ("another seed", others[0] if others else None)):
            ref = healthy.get((*group(v), seed)) if seed is not None else None
            if ref is None:
                continue
            named = v["fault"] == single["answer"] or v["fault"] in single["members"]
            for cat_name, cat_env in (("all cells", None), ("the run's env's cells (not used by diagnose)", v["env"])):
                rec = scored_pair(logs[rel].metrics, logs[ref].metrics, v["fault"], cells, threshold, kind, cat_env)
                records.append({**rec, "cells": cat_name, "env": v["env"], "variant": v["variant"],
                                "single_log": single, "single_log_named": named})
    return records


def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair kind and cell set: detection, top-1 and top-3 of the fault among the ranked, beside the
    baselines."""
    out = []
    healthy = [r for r in records if r["pair"] == "healthy"]
    faulty = [r for r in records if r["pair"] != "healthy"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in faulty:
        groups[(r["pair"], r["cells"])].append(r)
    for (pair, cells), rs in sorted(groups.items()):
        k = float(np.median([r["k"] for r in rs]))
        row = {"pair": pair, "cells": cells, "faulty": len(rs), "healthy": len(healthy),
               "healthy_called_alike": float(np.mean([not r["detected"] for r in healthy])) if healthy else None,
               "faulty_differs": float(np.mean([r["detected"] for r in rs])),
               "top1": float(np.mean([r["rank"] == 1 for r in rs])),
               "top3": float(np.mean([r["rank"] is not None and r["rank"] <= 3 for r in rs])),
               "random_top1": 1.0 / k, "random_top3": min(1.0, 3.0 / k), "k": k}
        if any("single_log_named" in r for r in rs):
            row["single_log_top1"] = float(np.mean([r["single_log_named"] for r in rs]))
        out.append(row)
    return out


def per_fault(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["pair"] == "healthy" or r.get("cells") != "all cells":
            continue
        row = rows.setdefault(r["fault"], {"fault": r["fault"], "pairs": 0, "differs": 0, "top1": 0, "top3": 0,
                                           "answers": defaultdict(int)})
        row["pairs"] += 1
        row["differs"] += r["detected"]
        row["top1"] += r["rank"] == 1
        row["top3"] += r["rank"] is not None and r["rank"] <= 3
        row["answers"][r["top"][0] if r["top"] else "-"] += 1
    return [{**v, "answers": dict(v["answers"])} for _, v in sorted(rows.items())]


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def markdown(meta: dict[str, Any], sets: dict[str, dict[str, Any]]) -> str:
    lines = ["# A run against a healthy reference run (`rlfh-diagnose log=RUN reference=HEALTHY`)", "",
             f"Generated by `python benchmarks/reference_pairs.py` on {meta['generated']} (harness commit "
             f"`{meta['commit']}`) in {meta['seconds']:.0f} s. What is compared and how: "
             "harness/analysis/reference.py; the pairs: this script's docstring.", "",
             f"**Threshold.** A metric differs when |2 AUROC - 1| >= {meta['threshold']:.2f} (AUROC of the run's "
             "per-update values against the reference's): the smallest level at which at most 10% of the healthy "
             f"harness pairs of the fitting envs differ ({meta['fit']['fitting_pairs']} pairs; their false alarms "
             f"{_pct(meta['fit']['fitting_false_alarms'])}). Everything below is on pairs it was not fitted on. "
             "Largest |2 AUROC - 1| of healthy pairs per env (median, 90th percentile, max): "
             + "; ".join(f"{k} {v}" for k, v in meta["fit"]["healthy_max_effect_quantiles"].items()) + ".", "",
             "**Columns.** healthy called alike: healthy pairs where no metric differs; faulty differs: faulty pairs "
             "where some metric does (always-alike scores 100% / 0%, always-differs 0% / 100%); top-1 / top-3: "
             "the fault first / among the first three of the ranking (a fault the ranking leaves out counts as a "
             "miss); random: the expected top-1 / top-3 of a random order of the K faults with catalogue cells; "
             "single log: the diagnosis of the faulty log alone names the fault (or a class holding it).", ""]
    for name, s in sets.items():
        lines += [f"## {name}", "", s["about"], "",
                  "| pair | faults ranked against | faulty pairs | healthy pairs | healthy called alike | faulty differs "
                  "| top-1 | top-3 | random top-1 | random top-3 | single log |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in s["summary"]:
            lines.append(f"| {r['pair']} | {r['cells']} | {r['faulty']} | {r['healthy']} | {_pct(r['healthy_called_alike'])} "
                         f"| {_pct(r['faulty_differs'])} | {_pct(r['top1'])} | {_pct(r['top3'])} | {_pct(r['random_top1'])} "
                         f"| {_pct(r['random_top3'])} | {_pct(r.get('single_log_top1'))} |")
        lines += ["", "Per fault (every pair kind, all cells): pairs, differs, top-1, top-3, first in the ranking.", "",
                  "| fault | pairs | differs | top-1 | top-3 | ranked first |", "|---|---|---|---|---|---|"]
        for r in s["per_fault"]:
            first = ", ".join(f"{k} {v}" for k, v in sorted(r["answers"].items(), key=lambda kv: -kv[1]))
            lines.append(f"| {r['fault']} | {r['pairs']} | {r['differs']} | {r['top1']} | {r['top3']} | {first} |")
        lines.append("")
    return "\n".join(lines)


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="the harness pairs' run store (PAIRS/runs)")
    parser.add_argument("--sb3", type=Path, help="benchmarks/realworld/sb3_runs.py's output directory")
    parser.add_argument("--cleanrl", type=Path, help="benchmarks/realworld/cleanrl_runs.py's output directory")
    parser.add_argument("--catalogue", type=Path, default=ROOT / "results" / "catalogue" / "catalogue.parquet")
    parser.add_argument("--model", type=Path, default=ROOT / "harness" / "data" / "model" / "diagnosis.joblib")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    start = time.time()
    if not args.runs.is_dir():
        parser.error(f"--runs {args.runs}: no such directory (train the pairs first: see the docstring)")
    cells = directions(pd.read_parquet(args.catalogue), "ppo").get("ppo", {})
    threshold, records, fit = harness_pairs(args.runs, cells)
    sets = {"Harness pairs (native PPO, Acrobot, seeds 100-103)": {
        "about": f"Held-out env: {HELD_OUT_ENV} (the threshold was fitted on the other envs' healthy pairs).",
        "summary": summary(records), "per_fault": per_fault(records)}}
    print(f"threshold {threshold:.2f} ({fit['fitting_pairs']} fitting pairs)")
    about = {"sb3": ("stable-baselines3's own logs (benchmarks/realworld, progress.csv)",
                     "A test set: SB3 2.9's PPO at its defaults on CartPole, Acrobot, LunarLander and Pendulum, bugs "
                     "introduced as users do (benchmarks/realworld/README.md); nothing was fitted on these logs."),
             "cleanrl": ("CleanRL's own logs (benchmarks/realworld, the TensorBoard run directory)",
                         "A test set: CleanRL's ppo.py on CartPole at its defaults, bugs introduced as users do "
                         "(flags and code edits: benchmarks/realworld/README.md); nothing was fitted on these logs.")}
    for key, root in (("sb3", args.sb3), ("cleanrl", args.cleanrl)):
        if root is None:
            continue
        recs = framework_pairs(root, cells, threshold, args.model)
        sets[about[key][0]] = {"about": about[key][1], "summary": summary(recs), "per_fault": per_fault(recs)}
    for name, s in sets.items():
        print(name)
        for r in s["summary"]:
            print("  ", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()})
    meta = {"generated": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
            "seconds": time.time() - start, "threshold": threshold, "fit": fit}
    if args.record:
        out = ROOT / "benchmarks" / "results"
        (out / "reference_pairs.json").write_text(json.dumps({"meta": meta, "sets": sets}, indent=1, default=str) + "\n")
        (out / "reference_pairs.md").write_text(markdown(meta, sets) + "\n")
        print(f"wrote {out / 'reference_pairs.md'}")


if __name__ == "__main__":
    main()

"""TRL's own logs of the harness's ``backend=trl`` runs, as a second set of real-framework logs.

    python benchmarks/realworld/trl_backend_logs.py [--results results] [--out results/realworld/trl-harness]

Every stored ``grpo/*/trl`` run keeps the ``trainer_state.json`` TRL's ``GRPOTrainer`` wrote
(``<run>/trl/trainer_state.json``: its ``log_history``, one entry per optimizer step). This copies
each into ``<out>/<opaque name>/checkpoint-<steps>/trainer_state.json`` (a directory name that says
nothing about the bug, laid out as a TRL checkpoint) and writes ``labels.json`` beside them, so
``benchmarks/realworld/evaluate.py`` diagnoses them like the other real logs (framework
``trl-harness``). The diagnosis model is fitted on the diverse dataset only (native and SB3 runs), so
none of these runs was seen in training; they are a test set like the others. Unlike trl_runs.py
(an independent implementation), the bugs here are the harness's own injections through TRL's
extension points (harness/agents/trl.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.realworld.common import opaque_name, write_labels
from harness.store import RunStore

REPO = Path(__file__).resolve().parents[2]


def collect(results: Path, out: Path) -> dict[str, dict]:
    store = RunStore(results)
    labels = {}
    if out.exists():
        shutil.rmtree(out)
    for meta in store.iter_metas(warn=lambda line: print(line, file=sys.stderr)):
        if meta["backend"] != "trl" or "trl/trainer_state.json" not in meta.get("files", {}):
            continue
        state = store.run_dir(meta["run_id"]) / "trl" / "trainer_state.json"
        steps = json.loads(state.read_text()).get("global_step", 0)
        name = opaque_name("trl-harness", meta["run_id"])
        dest = out / name / f"checkpoint-{steps}" / "trainer_state.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(state, dest)
        fault = meta["fault"] if meta["fault"] != "none" else "healthy"
        labels[str(dest.relative_to(out))] = {
            "framework": "trl-harness", "env": meta["env"], "variant": fault, "fault": fault,
            "how": f"harness backend=trl, fault={meta['fault']} {meta['fault_params']} onset {meta['onset_update']}",
            "seed": meta["seed"], "name": name, "status": meta["status"], "origin": "harness backend=trl",
            "is_control": meta["is_control"], "tensorboard": None}
    write_labels(out, labels)
    return labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=REPO / "results")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "realworld" / "trl-harness")
    args = parser.parse_args()
    labels = collect(args.results, args.out)
    print(f"{len(labels)} TRL logs of backend=trl runs in {args.out}")


if __name__ == "__main__":
    main()

"""The live monitor scored like a detector: per fault, how often it alarms, how late after the bug's
onset, and how often on healthy runs, beside the rule sets (folk, config_aware, post-training-
toolkit's heuristics) streamed over the same logs.

    python benchmarks/monitor_detection.py --realworld results/realworld [--results results] [--jobs 2] [--record]

The logs stable-baselines3, CleanRL and TRL wrote themselves (benchmarks/realworld; the primary log of
each run), bugs from the start (onset 0), each read as the monitor would have seen it grow, with the
model diagnose uses (``--results``' catalogue model, else the package's; these logs were never used to
fit it). Not yet here: the dataset's held-out runs with mid-run onsets (a model fitted without them),
which would measure the delay after a mid-run onset.

The monitor's answers are computed at checkpoints of each log (every row up to 80 rows, then a stride
that keeps 80 checkpoints), through the alarm policy of harness.monitor.core with its defaults; a
rule set sees every row. Per framework and fault: detected (an alarm at or after the onset), named
(an alarm naming the fault, or a class holding it), the median delay in rows after the onset to
each, alarms before the onset; on healthy logs, alarms per 1000 rows and the share of logs with any.
``--record`` writes benchmarks/results/monitor_detection.json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHECKPOINTS = 80


def checkpoints(n: int) -> list[int]:
    """The prefix lengths a monitor is checked at: every row up to CHECKPOINTS, else a stride."""
    stride = max(1, math.ceil(n / CHECKPOINTS))
    rows = list(range(stride, n + 1, stride))
    return rows if rows and rows[-1] == n else [*rows, n]


def monitor_alarms(model: Any, frame: Any, config: dict[str, Any]) -> list[tuple[int, str, tuple[str, ...]]]:
    """(row, answer, members) of each alarm the monitor's policy raises as the log grows."""
    from harness.detection.diagnosis import answer_frame
    from harness.monitor.core import RECENT, AlarmPolicy

    policy = AlarmPolicy()
    out = []
    for rows in checkpoints(len(frame)):
        alarm = policy.see(answer_frame(model, frame.iloc[:rows], config, recent=RECENT), rows, float(rows))
        if alarm is not None:
            out.append((rows, alarm.answer, alarm.members or (alarm.answer,)))
    return out


def rule_alarms(frame: Any, algo: str, config: dict[str, Any]) -> dict[str, list[tuple[int, str | None]]]:
    """For each rule set: (row, fault named) of every row on which it alarmed (the strongest alarm)."""
    import numpy as np

    from harness.detection.base import RunInfo
    from harness.detection.stream import BASELINES
    from harness.metrics import CANONICAL

    info = RunInfo(run_id="log", algo=algo, env="", backend="", configured=dict(config))
    names = [c for c in CANONICAL if c in frame.columns]
    records = frame[names].to_dict("records")
    out = {}
    for name, cls in BASELINES.items():
        detector = cls()
        detector.reset(info)
        hits = []
        for i, row in enumerate(records):
            metrics = {k: float(v) for k, v in row.items() if v is not None and np.isfinite(v)}
            alarms = detector.update(i, metrics) or []
            if alarms:
                hits.append((i + 1, max(alarms, key=lambda a: a.score).fault))
        out[name] = hits
    return out


def score_log(model: Any, frame: Any, config: dict[str, Any], algo: str, fault: str, onset: int,
              group: str) -> dict[str, Any]:
    """One log's alarms, by the monitor and each rule set, as rows relative to its onset."""
    rec: dict[str, Any] = {"group": group, "fault": fault, "onset": onset, "rows": len(frame)}
    mon = monitor_alarms(model, frame, config)
    rec["monitor"] = [(r, fault == "none" or fault in members) for r, _, members in mon]
    for name, hits in rule_alarms(frame, algo, config).items():
        first = {}
        for r, named in hits:
            first.setdefault(r, fault == "none" or named == fault)
        rec[name] = list(first.items())
    return rec


def summarise(records: list[dict[str, Any]], detectors: list[str]) -> list[dict[str, Any]]:
    """Per group, fault and detector: detection, naming, delays, early alarms; healthy: alarms per 1000 rows."""
    by = defaultdict(list)
    for r in records:
        by[(r["group"], r["fault"])].append(r)
    rows = []
    for (group, fault), logs in sorted(by.items()):
        for det in detectors:
            row: dict[str, Any] = {"group": group, "fault": fault, "detector": det, "logs": len(logs)}
            if fault == "none":
                alarms = sum(len(r[det]) for r in logs)
                total = sum(r["rows"] for r in logs)
                row.update(alarms_per_1000=1000 * alarms / max(total, 1),
                           any_alarm=sum(bool(r[det]) for r in logs) / len(logs))
            else:
                after = [[(row_, named) for row_, named in r[det] if row_ > r["onset"]] for r in logs]
                det_delay = [a[0][0] - r["onset"] for a, r in zip(after, logs) if a]
                named = [[x for x in a if x[1]] for a in after]
                name_delay = [n[0][0] - r["onset"] for n, r in zip(named, logs) if n]
                row.update(detected=len(det_delay) / len(logs), named=len(name_delay) / len(logs),
                           delay_detect=statistics.median(det_delay) if det_delay else None,
                           delay_named=statistics.median(name_delay) if name_delay else None,
                           before_onset=sum(any(row_ <= r["onset"] for row_, _ in r[det]) for r in logs) / len(logs))
            rows.append(row)
    return rows


def realworld_logs(root: Path) -> list[tuple[str, str, Path]]:
    """(group, fault, primary log path) of every labelled real-framework run under ``root``."""
    from benchmarks.realworld import evaluate

    out = []
    for framework in ("sb3", "cleanrl", "trl"):
        labels = root / framework / "labels.json"
        if not labels.exists():
            continue
        for rel, label in json.loads(labels.read_text()).items():
            fault = evaluate.fault_label(label)
            out.append((framework, "none" if fault == "healthy" else fault, root / framework / rel))
    return out


def one_realworld(group: str, fault: str, path: Path, model_file: Path) -> dict[str, Any] | None:
    from harness.analysis.model import load_models
    from harness.detection.diagnosis import pick_model
    from harness.logs import load_log

    try:
        log = load_log(path)
    except Exception:  # an unreadable log is left out (realworld.md lists them)
        return None
    model = pick_model(load_models(model_file), log.algo, log.profile)
    return score_log(model, log.metrics, dict(log.config), log.algo, fault, 0, group)


def main() -> None:
    from joblib import Parallel, delayed

    from harness.detection.diagnosis import find_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--realworld", type=Path, default=None)
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="at most this many logs (a quick look)")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    detectors = ["monitor", "folk", "config_aware", "ptt"]
    records: list[dict[str, Any]] = []
    if args.realworld is not None:
        logs = realworld_logs(args.realworld)[: args.limit or None]
        model_file = find_model(args.results)
        done = Parallel(n_jobs=args.jobs)(delayed(one_realworld)(g, f, p, model_file) for g, f, p in logs)
        records += [r for r in done if r is not None]
        print(f"realworld: {len(records)} logs in {time.perf_counter() - start:.0f} s")
    rows = summarise(records, detectors)
    for r in rows:
        if r["fault"] == "none":
            print(f"{r['group']:8s} healthy {r['detector']:13s} logs {r['logs']:3d}  alarms/1000 rows "
                  f"{r['alarms_per_1000']:6.1f}  any alarm {r['any_alarm']:.0%}")
        else:
            print(f"{r['group']:8s} {r['fault']:28s} {r['detector']:13s} logs {r['logs']:3d}  detected "
                  f"{r['detected']:.0%} named {r['named']:.0%}  delay {r['delay_detect']} / {r['delay_named']}  "
                  f"before onset {r['before_onset']:.0%}")
    if args.record:
        out = ROOT / "benchmarks" / "results" / "monitor_detection.json"
        out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "logs": len(records), "seconds": round(time.perf_counter() - start),
                                   "rows": rows}, indent=1, default=float) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

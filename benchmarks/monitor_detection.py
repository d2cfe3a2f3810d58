"""The live monitor scored like a detector: per fault, how often it alarms, how late after the bug's
onset, and how often on healthy runs, beside the rule sets (folk, config_aware, post-training-
toolkit's heuristics) streamed over the same logs.

    python benchmarks/monitor_detection.py [--realworld results/realworld] [--dataset] [--results results]
                                           [--jobs 2] [--limit N] [--save FILE] [--load FILE ...] [--record]

Two sets of logs. ``--dataset``: the published dataset's runs (results/dataset) held out by the
catalogue's protocol "held-out runs (30%, stratified by fault)", diagnosed by canonical-view models
fitted here on the other 70% (the published model's examples and settings), so a bug switched on
mid-run measures the delay after its onset. ``--realworld``: the logs stable-baselines3, CleanRL and
TRL wrote themselves (benchmarks/realworld; the primary log of each run, bugs from the start, onset
0), with the model diagnose uses (``--results``' catalogue model, else the package's; these logs
were never used to fit it).

The monitor's answers are computed at checkpoints of each log (every row up to 80 rows, then a stride
that keeps 80 checkpoints), through the alarm policy of harness.monitor.core with its defaults; a
rule set sees every row. Per framework and fault: detected (an alarm at or after the onset), named
(an alarm naming the fault, or a class holding it), the median delay in rows after the onset to
each, alarms before the onset; on healthy logs, alarms per 1000 rows and the share of logs with any.
``--record`` writes benchmarks/results/monitor_detection.json and .md (docs/monitor.md quotes it).
``--save FILE`` keeps the per-log records of this run (``FILE.partial.jsonl`` holds them as they land, so
the same command started again after an interruption resumes; a progress line every 25 logs) and
``--load`` adds records saved earlier, so the two
sets may be scored at different times (e.g. the dataset while the realworld logs are still being
generated) and recorded together.
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


def monitor_alarms(model: Any, frame: Any, config: dict[str, Any], space: dict[str, Any] | None = None
                   ) -> list[tuple[int, str, tuple[str, ...]]]:
    """(row, answer, members) of each alarm the monitor's policy raises as the log grows."""
    from harness.detection.diagnosis import answer_frame
    from harness.monitor.core import RECENT, AlarmPolicy

    policy = AlarmPolicy()
    out = []
    for rows in checkpoints(len(frame)):
        alarm = policy.see(answer_frame(model, frame.iloc[:rows], config, space, recent=RECENT), rows, float(rows))
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
              group: str, space: dict[str, Any] | None = None) -> dict[str, Any]:
    """One log's alarms, by the monitor and each rule set, as rows relative to its onset."""
    from harness.analysis import invariants
    from harness.monitor.core import RECENT

    rec: dict[str, Any] = {"group": group, "fault": fault, "onset": onset, "rows": len(frame)}
    decisive = invariants.decisive()      # does a decisive invariant break in the log (as the monitor reads it)?
    rec["proven"] = any(b.invariant in decisive for b in invariants.broken(invariants.check(frame, config, (RECENT,))))
    if rec["proven"]:           # the row at which the monitor, reading every row, could first see the break
        from benchmarks.invariants import first_break
        got = first_break(frame, config, onset, decisive, invariants.trailing())
        rec["break_row"] = None if got is None else max(onset, 0) + got[0]
    mon = monitor_alarms(model, frame, config, space)
    rec["monitor"] = [(r, fault == "none" or fault in members) for r, _, members in mon]
    for name, hits in rule_alarms(frame, algo, config).items():
        rec[name] = [(r, fault == "none" or named == fault) for r, named in alarm_events(hits)]
    return rec


def alarm_events(hits: list[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    """A rule set's alarms as events, comparable with the monitor's (which alarms once per answer):
    a row alarmed when the row before was not, or naming another fault than the row before."""
    out, last = [], (None, None)
    for row, named in hits:
        if last[0] is None or row != last[0] + 1 or named != last[1]:
            out.append((row, named))
        last = (row, named)
    return out


def after_onset(logs: list[dict[str, Any]], det: str) -> dict[str, Any]:
    """Of faulty logs: the share with an alarm after the onset (any, and naming the fault) and the
    median rows from the onset to the first of each."""
    after = [[a for a in r[det] if a[0] > r["onset"]] for r in logs]
    named = [[a for a in x if a[1]] for x in after]
    det_delay = [x[0][0] - r["onset"] for x, r in zip(after, logs) if x]
    name_delay = [x[0][0] - r["onset"] for x, r in zip(named, logs) if x]
    return {"detected": len(det_delay) / len(logs), "named": len(name_delay) / len(logs),
            "delay_detect": statistics.median(det_delay) if det_delay else None,
            "delay_named": statistics.median(name_delay) if name_delay else None}


def after_break(logs: list[dict[str, Any]], det: str) -> float | None:
    """Of logs breaking a decisive invariant: the median rows from the row at which the break is first
    visible (``break_row``) to the first alarm at or after it (None when no log has both)."""
    delays = []
    for r in logs:
        if r.get("break_row") is None:
            continue
        later = [a[0] for a in r[det] if a[0] >= r["break_row"]]
        if later:
            delays.append(later[0] - r["break_row"])
    return statistics.median(delays) if delays else None


def false_alarms(logs: list[dict[str, Any]], det: str) -> dict[str, Any]:
    """Of healthy logs: alarms per 1000 rows and the share of logs with any."""
    return {"alarms_per_1000": 1000 * sum(len(r[det]) for r in logs) / max(1, sum(r["rows"] for r in logs)),
            "any_alarm": sum(bool(r[det]) for r in logs) / len(logs)}


def alarmed_before_onset(log: dict[str, Any], det: str) -> bool:
    return any(a[0] <= log["onset"] for a in log[det])


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
                row.update(false_alarms(logs, det))
            else:
                row.update(after_onset(logs, det),
                           before_onset=sum(alarmed_before_onset(r, det) for r in logs) / len(logs))
            rows.append(row)
    return rows


def pooled(records: list[dict[str, Any]], detectors: list[str]) -> list[dict[str, Any]]:
    """Per group and detector, over all its faults: faulty logs detected and named after the onset,
    median delays, logs alarmed before the onset; the healthy logs of its family (the same logs with
    no bug: a framework's, or the dataset's of one algorithm): alarms per 1000 rows, logs with any."""
    rows = []
    groups = {r["group"]: r["family"] for r in records if r["fault"] != "none"}
    groups.update({r["family"]: r["family"] for r in records if r["family"] not in groups.values()})
    for group, family in sorted(groups.items()):
        faulty = [r for r in records if r["group"] == group and r["fault"] != "none"]
        healthy = [r for r in records if r["family"] == family and r["fault"] == "none"]
        mid = [r for r in faulty if r["onset"] > 0]
        for det in detectors:
            row: dict[str, Any] = {"group": group, "detector": det, "faulty": len(faulty), "healthy": len(healthy)}
            if faulty:
                row.update(after_onset(faulty, det),
                           before_onset=sum(alarmed_before_onset(r, det) for r in mid) / len(mid) if mid else None)
                proven = [r for r in faulty if r.get("proven")]
                row.update(proven=len(proven), delay_proven=after_onset(proven, det)["delay_detect"] if proven else None,
                           after_break=after_break(proven, det))
            if healthy:
                row.update(false_alarms(healthy, det), healthy_rows=sum(r["rows"] for r in healthy))
            rows.append(row)
    return rows


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.0%}"


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:g}"


def markdown(meta: dict[str, Any], pooled_rows: list[dict[str, Any]], rows: list[dict[str, Any]],
             detectors: list[str]) -> str:
    """benchmarks/results/monitor_detection.md: the pooled table, then per group and fault."""
    lines = [
        "# The live monitor scored like a detector",
        "",
        f"Generated by `{meta['command']}` on {meta['date']} (harness commit `{meta['commit']}`), "
        f"{meta['logs']} logs in {meta['seconds']} s.",
        "",
        "Each log is read as the monitor would have seen it grow: at checkpoints (every row up to 80 rows, then a "
        "stride keeping 80), the monitor's answer (the diagnosis model of the log's view and its exact evidence, "
        "the last 10 rows read apart) goes through its alarm policy with the defaults of harness.monitor.core "
        "(patience 2 checks; an answer a decisive broken invariant gives and evidence-backed answers at once, "
        "model-only answers after 25 rows and 10 rows of holding; one alarm per answer). The rule sets (`folk`, `config_aware`, `ptt`: post-training-toolkit's "
        "heuristics reimplemented from its published rules, harness/detection/ptt.py) see every row; their "
        "alarms count as events like the monitor's (a row alarmed after one that was not, or naming another fault).",
        "",
        "**Logs.** " + meta["sources"],
        "",
        "Columns: *detected*: an alarm after the onset (any answer); *named*: an alarm after the onset naming the "
        "fault (or a class of faults the log cannot tell apart that holds it; for the rules, the fault their "
        "strongest alarm names); *delay*: median rows from the onset to that first alarm (rows are updates for "
        "native PPO/GRPO, CleanRL and SB3, optimizer steps for TRL); *before onset*: mid-run-onset logs alarmed on "
        "their healthy prefix; *false alarms*: alarms per 1000 rows of healthy logs, and the share of healthy logs "
        "with any alarm; *faulty logs breaking a decisive invariant*: those in which an invariant that rules out "
        "healthy (harness.analysis.invariants.decisive) breaks, and the median delay to the first alarm on them "
        "(a decisive break alarms at the first check that sees it), and the median rows from the row at which the "
        "break is first visible (read on every row as the monitor reads it; onset-0 bugs such as an entropy "
        "collapse under a too-high learning rate take tens of rows to produce it) to the first alarm. Rows that "
        "reach no log's onset count nothing.",
        "",
        "## Pooled per set of logs",
        "",
        "| logs | detector | faulty | detected | named | delay to detect | delay to name | before onset | healthy "
        "| false alarms / 1000 rows | healthy logs alarmed | faulty logs breaking a decisive invariant | their delay to detect "
        "| their delay after the break is visible |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in pooled_rows:
        det = f"**{r['detector']}**" if r["detector"] == "monitor" else r["detector"]
        false = "-" if r.get("alarms_per_1000") is None else f"{r['alarms_per_1000']:.1f}"
        lines.append(f"| {r['group']} | {det} | {r['faulty']} | {_pct(r.get('detected'))} | {_pct(r.get('named'))} | "
                     f"{_num(r.get('delay_detect'))} | {_num(r.get('delay_named'))} | {_pct(r.get('before_onset'))} | "
                     f"{r['healthy']} | {false} | {_pct(r.get('any_alarm'))} | {r.get('proven', '-')} | "
                     f"{_num(r.get('delay_proven'))} | {_num(r.get('after_break'))} |")
    lines += ["", "## Per fault", "",
              "Each cell: detected / named, median delay to name (rows after the onset); healthy rows: false alarms "
              "per 1000 rows, share of logs alarmed.", "",
              "| logs | fault | n | " + " | ".join(detectors) + " |", "|---|---|---|" + "---|" * len(detectors)]
    cells: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["group"], r["fault"])
        counts[key] = r["logs"]
        if r["fault"] == "none":
            cells[key][r["detector"]] = f"{r['alarms_per_1000']:.1f} / {r['any_alarm']:.0%}"
        else:
            cells[key][r["detector"]] = (f"{r['detected']:.0%} / {r['named']:.0%}, "
                                         f"{_num(r['delay_named'])}")
    for key in sorted(cells, key=lambda k: (k[0], k[1] != "none", k[1])):
        name = "healthy (false alarms)" if key[1] == "none" else key[1]
        lines.append(f"| {key[0]} | {name} | {counts[key]} | " + " | ".join(cells[key].get(d, "-") for d in detectors) + " |")
    return "\n".join(lines) + "\n"


def realworld_logs(root: Path) -> list[tuple[str, str, Path]]:
    """(group, fault, primary log path) of every labelled real-framework run under ``root`` (a group
    per framework, TRL's per setting as benchmarks/realworld/evaluate.py reports them)."""
    from benchmarks.realworld import evaluate

    out = []
    for framework in ("sb3", "cleanrl", "trl"):
        labels = root / framework / "labels.json"
        if not labels.exists():
            continue
        for rel, label in json.loads(labels.read_text()).items():
            fault = evaluate.fault_label(label)
            group = evaluate.group_of(framework, label.get("setting"))      # TRL per setting
            out.append((group, "none" if fault == "healthy" else fault, root / framework / rel))
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
    if model is None:      # no model fitted for the log's algorithm (PPO-LM): the monitor's model-free answers
        return None        # are not what this benchmark measures
    return {**score_log(model, log.metrics, dict(log.config), log.algo, fault, 0, group), "family": group}


def held_out_models(results: Path, seed: int = 0) -> tuple[dict[str, Any], dict[str, frozenset[str]]]:
    """Per algorithm, the canonical-view model fitted without the catalogue's held-out runs (the
    protocol ``held-out runs (30%, stratified by fault)``: their seeds and sampled configurations are
    never trained on) from the examples and settings the published model was built with, and the
    held-out run ids."""
    import pandas as pd

    from harness.analysis.model import fit
    from harness.analysis.protocols import protocols

    model_dir = results / "catalogue" / "model"
    examples = pd.read_parquet(model_dir / "examples.parquet")
    card = json.loads((model_dir / "model_card.json").read_text())
    settings = {k: tuple(v) for k, v in card.get("settings", {}).items()}
    models, held = {}, {}
    for algo in sorted(set(examples["algo"])):
        protocol = next(p for p in protocols(examples, algo, seed=seed, left_out=False) if p.kind == "held-out runs")
        train = examples[(examples["algo"] == algo) & ~examples["run_id"].isin(protocol.test)]
        models[algo] = fit(train, algo, "canonical", seed=seed, settings=settings)
        held[algo] = protocol.test
    return models, held


def dataset_logs(results: Path, held: dict[str, frozenset[str]]) -> list[dict[str, Any]]:
    """The held-out diverse runs of the published dataset (results/dataset) a model is scored on
    (healthy runs that do not learn are left out, as the protocol leaves them): per run its metrics,
    configuration as the run's own log carries it, action space, fault and onset."""
    import pandas as pd

    from harness.analysis.labels import UNLABELLED
    from harness.config import visible_config
    from harness.metrics import CANONICAL

    runs = pd.read_parquet(results / "dataset" / "runs.parquet")
    data = pd.read_parquet(results / "dataset" / "data.parquet")
    ids = set().union(*held.values())
    runs = runs[runs["run_id"].isin(ids) & ~runs["label"].isin(UNLABELLED)]
    metrics = [c for c in ["update", *CANONICAL] if c in data.columns]
    by_run = {rid: g.sort_values("update")[metrics].reset_index(drop=True)
              for rid, g in data[data["run_id"].isin(set(runs["run_id"]))].groupby("run_id")}
    out = []
    for run in runs.to_dict("records"):
        configured = {k.split(".", 1)[1]: v for k, v in run.items()
                      if k.startswith("configured.") and v is not None and not (isinstance(v, float) and math.isnan(v))}
        fault = "none" if run["fault"] in (None, "none", "healthy") else run["fault"]
        onset = int(run["onset"]) if fault != "none" and pd.notna(run["onset"]) else 0
        family = f"dataset {run['algo']}"
        group = family if fault == "none" else f"{family}, {'mid-run onset' if onset > 0 else 'onset 0'}"
        out.append({"run_id": run["run_id"], "group": group, "family": family, "algo": run["algo"], "fault": fault,
                    "onset": onset,
                    "config": visible_config(run["algo"], configured), "frame": by_run.get(run["run_id"]),
                    "space": json.loads(run["action_space"]) if run.get("action_space") else None})
    return [r for r in out if r["frame"] is not None and len(r["frame"])]


def one_dataset(log: dict[str, Any], model: Any) -> dict[str, Any]:
    rec = score_log(model, log["frame"], log["config"], log["algo"], log["fault"], log["onset"], log["group"],
                    log["space"])
    return {**rec, "family": log["family"]}


def scored(name: str, items: list[Any], keys: list[str], score: Any, jobs: int, journal: Path | None) -> list[Any]:
    """``score(item)`` of every item on ``jobs`` processes, in order, with a progress line every 25. With
    ``journal`` each result is appended there as it lands (JSON lines), and a run started again skips the
    items already there: hours of scoring survive an interrupted process."""
    from joblib import Parallel, delayed

    done: dict[str, Any] = {}
    kept = journal.read_text() if journal is not None and journal.exists() else ""
    if kept:
        for line in kept.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:          # a line cut short when the process was stopped
                continue
            done[entry["key"]] = entry["record"]
        print(f"{name}: {len(done)} of {len(items)} logs already scored in {journal}", flush=True)
    todo = [(k, item) for k, item in zip(keys, items) if k not in done]
    start = time.perf_counter()
    sink = journal.open("a") if journal is not None else None
    if sink is not None and kept and not kept.endswith("\n"):
        sink.write("\n")               # after a line cut short: start a line of its own
    try:
        results = Parallel(n_jobs=jobs, return_as="generator")(delayed(score)(item) for _, item in todo)
        for i, ((key, _), record) in enumerate(zip(todo, results), 1):
            done[key] = record
            if sink is not None:
                sink.write(json.dumps({"key": key, "record": record}, default=float) + "\n")
                sink.flush()
            if i % 25 == 0 or i == len(todo):
                print(f"{name}: {len(done)}/{len(items)} logs ({time.perf_counter() - start:.0f} s this run)", flush=True)
    finally:
        if sink is not None:
            sink.close()
    return [done[k] for k in keys]


def main() -> None:
    from harness.detection.diagnosis import find_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--realworld", type=Path, default=None)
    parser.add_argument("--dataset", action="store_true",
                        help="the published dataset's held-out runs, with a model fitted without them")
    parser.add_argument("--results", default=str(ROOT / "results"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="at most this many logs (a quick look)")
    parser.add_argument("--save", type=Path, default=None,
                        help="write this run's per-log records here (JSON); FILE.partial.jsonl keeps them as they land, "
                             "so the same command started again resumes")
    parser.add_argument("--load", type=Path, nargs="*", default=[], help="add per-log records saved by --save")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    detectors = ["monitor", "folk", "config_aware", "ptt"]
    journal = args.save.with_suffix(".partial.jsonl") if args.save is not None else None
    records: list[dict[str, Any]] = []
    if args.realworld is not None:
        logs = realworld_logs(args.realworld)[: args.limit or None]
        model_file = find_model(args.results)
        done = scored("realworld", logs, [str(p) for _, _, p in logs], lambda log: one_realworld(*log, model_file),
                      args.jobs, journal)
        records += [r for r in done if r is not None]
        print(f"realworld: {len(records)} logs in {time.perf_counter() - start:.0f} s")
    if args.dataset:
        models, held = held_out_models(Path(args.results))
        print(f"dataset: models fitted without the held-out runs in {time.perf_counter() - start:.0f} s")
        logs = dataset_logs(Path(args.results), held)[: args.limit or None]
        records += scored("dataset", logs, [log["run_id"] for log in logs],
                          lambda log: one_dataset(log, models[log["algo"]]), args.jobs, journal)
        print(f"dataset: {len(logs)} held-out runs in {time.perf_counter() - start:.0f} s")
    sets = {"realworld": args.realworld is not None, "dataset": args.dataset}
    command = "python benchmarks/monitor_detection.py " + " ".join(sys.argv[1:])
    if args.save is not None:
        args.save.write_text(json.dumps({**sets, "command": command, "seconds": round(time.perf_counter() - start),
                                         "records": records},
                                        default=float) + "\n")
        print(f"saved {len(records)} records in {args.save}")
        journal.unlink(missing_ok=True)
    records, sets, commands, earlier = with_saved(records, sets, args.load)
    rows, pooled_rows = summarise(records, detectors), pooled(records, detectors)
    for r in pooled_rows:
        print(f"{r['group']:34s} {r['detector']:13s} faulty {r['faulty']:4d}  detected {_pct(r.get('detected')):>4s} "
              f"named {_pct(r.get('named')):>4s}  delay {_num(r.get('delay_detect'))} / {_num(r.get('delay_named'))}  "
              f"before onset {_pct(r.get('before_onset'))}  healthy {r['healthy']:3d}: "
              f"{r.get('alarms_per_1000', float('nan')):.1f} alarms / 1000 rows, {_pct(r.get('any_alarm'))} alarmed")
    if args.record:
        meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
                "command": "`, then `".join([*commands, command]),
                "logs": len(records), "seconds": round(time.perf_counter() - start + earlier),
                "sources": sources(records, sets["realworld"], sets["dataset"])}
        out = ROOT / "benchmarks" / "results" / "monitor_detection.json"
        out.write_text(json.dumps({**meta, "pooled": pooled_rows, "rows": rows}, indent=1, default=float) + "\n")
        out.with_suffix(".md").write_text(markdown(meta, pooled_rows, rows, detectors))
        print(f"recorded in {out} and {out.with_suffix('.md')}")


def with_saved(records: list[dict[str, Any]], sets: dict[str, bool], paths: list[Path]
               ) -> tuple[list[dict[str, Any]], dict[str, bool], list[str], float]:
    """``records`` with those saved by ``--save`` at ``paths`` added: the records, which sets they
    cover, the commands that scored the saved ones and the seconds those took."""
    commands, earlier = [], 0.0
    for path in paths:
        saved = json.loads(path.read_text())
        earlier += saved.get("seconds", 0)
        commands += [saved["command"]] if saved.get("command") else []
        records = [*records, *saved["records"]]
        sets = {k: v or bool(saved.get(k)) for k, v in sets.items()}
        print(f"loaded {len(saved['records'])} records from {path}")
    return records, sets, commands, earlier


def git_commit() -> str:
    import subprocess

    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def sources(records: list[dict[str, Any]], realworld: bool, dataset: bool) -> str:
    """Where the logs come from, with their counts, for the published table."""
    counts = defaultdict(lambda: [0, 0])
    for r in records:
        counts[r["group"]][r["fault"] == "none"] += 1
    parts = [f"{g}: {f} faulty, {h} healthy" for g, (f, h) in sorted(counts.items())]
    text = []
    if dataset:
        text.append("`dataset ...`: the published dataset's (results/dataset) runs held out by the catalogue's protocol "
                    "'held-out runs (30%, stratified by fault)' (their seeds and sampled configurations), diagnosed by "
                    "canonical-view models fitted here on the other 70% with the published model's examples and "
                    "settings (healthy runs that do not learn left out, as the protocol leaves them); mid-run-onset runs "
                    "measure the delay after a bug switched on mid-run.")
    if realworld:
        text.append("`sb3` / `cleanrl` / `trl`: logs stable-baselines3, CleanRL and TRL wrote themselves "
                    "(benchmarks/realworld, the primary log of each run; bugs from the first update, so the delay is "
                    "counted from row 0), diagnosed by the published model, which never saw them.")
    return " ".join(text) + " Counts: " + "; ".join(parts) + "."


if __name__ == "__main__":
    main()

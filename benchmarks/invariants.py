"""False alarms of the diagnosis' invariants (harness.analysis.invariants), and invariants mined from
the healthy runs.

    python benchmarks/invariants.py [--dataset results/dataset] [--realworld results/realworld] [--record]

Two sets of healthy logs, neither used to write the invariants' thresholds:
- **harness**: every run of the published dataset with no fault (healthy and not-learning alike: the
  code is healthy) in the ``by_seed`` val and test splits, each read at 25%, 50% and all of its rows
  (a monitor sees the prefixes), in the canonical view (every metric) and as a log that has only clip
  fractions and no exact ratio quantities (TRL's; PPO: SB3's and CleanRL's metrics), configuration
  as the run was configured. A run counts as a false alarm when any of its readings breaks the invariant.
- **realworld**: every healthy log of benchmarks/realworld (SB3, CleanRL and TRL wrote them), read as
  ``diagnose`` reads it.

Each healthy log is also read as a live monitor reads it: every window of the monitor's evidence
window (``WINDOW_ROWS`` rows) and every window of ``TRAILING_ROWS`` rows (``alarms_window``,
``alarms_trailing``: logs with a break in any such window). An invariant is decisive only within the
bar on the whole log and on its windows; it is read on the last TRAILING_ROWS rows (so a bug begun
mid-run is proven that soon) only within the bar on those windows too.

For the faulty logs of both sets it also counts which faults break each invariant (how much it finds).

Mining (TrainCheck-style): on the dataset's ``train`` split, for every canonical metric and three
templates (never exactly 0 on every step; never constant on every step; never beyond 1000x the largest
|value| any healthy train run logs), which hold on every healthy train run and break under some fault;
each mined candidate is then scored on the held-out healthy runs like the hand-written ones.

``--record`` writes harness/data/invariants.json (what :func:`harness.analysis.invariants.decisive`
reads: an invariant rules out ``healthy`` only with <= 1% false alarms on both sets) and
benchmarks/results/invariants.{json,md} (docs/diagnose.md quotes it).
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.reference_pairs import git_commit  # noqa: E402
from harness.analysis import invariants  # noqa: E402
from harness.metrics import CANONICAL  # noqa: E402

PREFIXES = (0.25, 0.5, 1.0)
READINGS = ("alarms", "alarms_window", "alarms_trailing")       # whole log; every monitor window; every trailing one
EXACT = ("ratio_dev_max", "approx_kl", "kl_k1", "ratio_mean", "ratio_min", "ratio_max")
RESULTS = ROOT / "benchmarks" / "results"


def run_config(run: pd.Series) -> dict[str, Any]:
    out = {}
    for key, value in run.items():
        if key.startswith("configured.") and value is not None and not (isinstance(value, float) and np.isnan(value)):
            out[key.removeprefix("configured.")] = value
    return out


def readings(frame: pd.DataFrame, algo: str) -> list[pd.DataFrame]:
    """The frames a run is read as: its prefixes, each in the canonical view and without the exact ratio
    quantities (a log with clip fractions only)."""
    out = []
    for prefix in PREFIXES:
        cut = frame.iloc[:max(1, int(round(len(frame) * prefix)))]
        out.append(cut)
        out.append(cut.drop(columns=[c for c in EXACT if c in cut]))
    return out


def window_breaks(frame: pd.DataFrame, config: dict[str, Any]) -> dict[str, set[str]]:
    """Per reading ("alarms_window": every window of the monitor's WINDOW_ROWS rows; "alarms_trailing": every
    window of TRAILING_ROWS rows), the invariants some window of ``frame`` breaks."""
    out: dict[str, set[str]] = {}
    for reading, rows in (("alarms_window", invariants.WINDOW_ROWS), ("alarms_trailing", invariants.TRAILING_ROWS)):
        broke: set[str] = set()
        for end in range(rows, len(frame) + 1):
            part = frame.iloc[end - rows:end]
            for name, inv in invariants.INVARIANTS.items():
                if name not in broke and isinstance(inv.check(part, config), invariants.Break):
                    broke.add(name)
        out[reading] = broke
    return out


def dataset_runs(dataset: Path, splits: tuple[str, ...]) -> list[tuple[pd.Series, pd.DataFrame]]:
    runs = pd.read_parquet(dataset / "runs.parquet")
    split = pd.read_parquet(dataset / "splits.parquet")[["run_id", "by_seed"]]
    runs = runs.merge(split, on="run_id")
    runs = runs[runs["by_seed"].isin(splits)]
    data = pd.read_parquet(dataset / "data.parquet")
    data = data[data["run_id"].isin(set(runs["run_id"]))]
    frames = {rid: g.sort_values("update").reset_index(drop=True) for rid, g in data.groupby("run_id")}
    return [(run, frames[run["run_id"]]) for _, run in runs.iterrows() if run["run_id"] in frames]


def harness_rates(dataset: Path) -> dict[str, Any]:
    """Per invariant: false alarms on held-out runs with no fault, and the faults whose held-out runs break it."""
    alarms: dict[str, int] = defaultdict(int)
    windowed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    examples: dict[str, list[str]] = defaultdict(list)
    breaks: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    n_healthy = 0
    setups: dict[str, int] = defaultdict(int)
    for run, frame in dataset_runs(dataset, ("val", "test")):
        config = run_config(run)
        broke = set()
        for reading in readings(frame, run["algo"]):
            broke |= {b.invariant for b in invariants.broken(invariants.check(reading, config))}
        if run["fault"] == "none":
            n_healthy += 1
            setups[f"{run['algo']}/{run['env']}/{run['backend']}"] += 1
            for name in broke:
                alarms[name] += 1
                if len(examples[name]) < 5:
                    examples[name].append(run["run_id"])
            seen: dict[str, set[str]] = defaultdict(set)
            for view in readings(frame, run["algo"])[-2:]:          # the whole run, both views
                for reading, names in window_breaks(view, config).items():
                    seen[reading] |= names
            for reading, names in seen.items():
                for name in names:
                    windowed[reading][name] += 1
                    if len(examples[f"{name} ({reading})"]) < 5:
                        examples[f"{name} ({reading})"].append(run["run_id"])
        else:
            for name in invariants.INVARIANTS:
                breaks[name][run["fault"]][1] += 1
                breaks[name][run["fault"]][0] += int(name in broke)
    return {"logs": n_healthy, "setups": dict(setups), "alarms": dict(alarms), "examples": dict(examples),
            **{reading: dict(v) for reading, v in windowed.items()},
            "faults": {n: {f: c for f, c in per.items() if c[0]} for n, per in breaks.items()}}


def realworld_rates(root: Path) -> dict[str, Any]:
    """Per invariant: false alarms on the real frameworks' healthy logs (primary logs, read as diagnose
    reads them), per framework; and which faults' logs break it."""
    from benchmarks.realworld.evaluate import tasks
    from harness.logs import load_log

    alarms: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    windowed: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    examples: dict[str, list[str]] = defaultdict(list)
    logs: dict[str, int] = defaultdict(int)
    breaks: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    errors = []
    for task in tasks(root, tensorboard="none"):
        label = task["label"]
        framework = label["framework"] + (f" ({label['setting']})" if label.get("setting") else "")
        try:
            log = load_log(task["path"])
        except Exception as exc:  # an unreadable log is reported, not counted
            errors.append(f"{task['path']}: {exc}")
            continue
        broke = {b.invariant for b in invariants.broken(invariants.check(log.metrics, log.config))}
        if label["fault"] == "healthy":
            logs[framework] += 1
            for name in broke:
                alarms[name][framework] += 1
                if len(examples[name]) < 5:
                    examples[name].append(str(task["path"].relative_to(root)))
            for reading, names in window_breaks(log.metrics, dict(log.config)).items():
                for name in names:
                    windowed[reading][name] += 1
                    if len(examples[f"{name} ({reading})"]) < 5:
                        examples[f"{name} ({reading})"].append(str(task["path"].relative_to(root)))
        else:
            for name in invariants.INVARIANTS:
                breaks[name][label["fault"]][1] += 1
                breaks[name][label["fault"]][0] += int(name in broke)
    return {"logs": sum(logs.values()), "per_framework": dict(logs),
            "alarms": {n: sum(v.values()) for n, v in alarms.items()},
            "alarms_per_framework": {n: dict(v) for n, v in alarms.items()}, "examples": dict(examples),
            **{reading: dict(v) for reading, v in windowed.items()},
            "faults": {n: {f: c for f, c in per.items() if c[0]} for n, per in breaks.items()}, "errors": errors}


def first_break(frame: pd.DataFrame, config: dict[str, Any], onset: int, names: frozenset[str],
                trailing: frozenset[str]) -> tuple[int, str] | None:
    """Rows after ``onset`` until one of ``names`` breaks as a live monitor reads the log (checked on
    every row: the log so far, its last WINDOW_ROWS rows and, for the trailing invariants, its last
    TRAILING_ROWS rows), and which; None when none breaks."""
    for rows in range(max(onset, 0) + 1, len(frame) + 1):
        got = invariants.broken(invariants.check(frame.iloc[:rows], config, (invariants.WINDOW_ROWS,), trailing))
        hit = [b.invariant for b in got if b.invariant in names]
        if hit:
            return rows - max(onset, 0), hit[0]
    return None


def onset_delays(dataset: Path, names: frozenset[str], trailing: frozenset[str]) -> dict[str, Any]:
    """On the held-out faulty runs (val and test) whose bug began mid-run: per decisive invariant, how
    many rows after the onset it first breaks as a monitor reads it (the least delay any alarm resting
    on it can have)."""
    delays: dict[str, list[int]] = defaultdict(list)
    faults: dict[str, set[str]] = defaultdict(set)
    for run, frame in dataset_runs(dataset, ("val", "test")):
        if run["fault"] == "none" or not (pd.notna(run["onset"]) and run["onset"] > 0):
            continue
        got = first_break(frame, run_config(run), int(run["onset"]), names, trailing)
        if got is not None:
            delays[got[1]].append(got[0])
            faults[got[1]].add(run["fault"])
    return {name: {"logs": len(d), "median_rows": float(np.median(d)), "max_rows": int(max(d)),
                   "faults": sorted(faults[name])} for name, d in sorted(delays.items())}


# ---- mining --------------------------------------------------------------------------------------------
TEMPLATES = ("not_all_zero", "not_constant", "within_1000x")


def _broken(template: str, values: np.ndarray, bound: float) -> bool:
    values = values[np.isfinite(values)]
    if len(values) < invariants.MIN_ROWS:
        return False
    if template == "not_all_zero":
        return bool((values == 0).all())
    if template == "not_constant":
        return bool(np.unique(values).size == 1)
    return bool(np.abs(values).max() > bound)


def mine(dataset: Path) -> list[dict[str, Any]]:
    """Candidates that hold on every healthy train run and break on some faulty train run, scored on
    the held-out runs."""
    train = dataset_runs(dataset, ("train",))
    held = dataset_runs(dataset, ("val", "test"))
    metrics = [m for m in CANONICAL if m not in ("nonfinite", "optimizer_steps", "lr", "clip_range")]
    out = []
    for algo in sorted({run["algo"] for run, _ in train}):
        mine_train = [(r, f) for r, f in train if r["algo"] == algo]
        mine_held = [(r, f) for r, f in held if r["algo"] == algo]
        for metric in metrics:
            healthy = [f[metric].to_numpy(dtype=float) for r, f in mine_train if r["fault"] == "none" and metric in f]
            healthy = [v[np.isfinite(v)] for v in healthy]
            healthy = [v for v in healthy if len(v) >= invariants.MIN_ROWS]
            if len(healthy) < 10:
                continue
            bound = 1000 * max(float(np.abs(v).max()) for v in healthy)
            for template in TEMPLATES:
                if any(_broken(template, v, bound) for v in healthy):
                    continue
                faults: dict[str, int] = defaultdict(int)
                for r, f in mine_train:
                    if r["fault"] != "none" and metric in f and _broken(template, f[metric].to_numpy(dtype=float), bound):
                        faults[r["fault"]] += 1
                if not faults:
                    continue
                held_h = [f for r, f in mine_held if r["fault"] == "none" and metric in f]
                fa = sum(_broken(template, f[metric].to_numpy(dtype=float), bound) for f in held_h)
                out.append({"algo": algo, "metric": metric, "template": template,
                            "bound": bound if template == "within_1000x" else None,
                            "healthy_train_runs": len(healthy), "breaks_under": dict(sorted(faults.items())),
                            "heldout_healthy": len(held_h), "heldout_false_alarms": int(fa)})
    return out


# ---- report --------------------------------------------------------------------------------------------
def table(harness: dict[str, Any], realworld: dict[str, Any] | None) -> dict[str, Any]:
    out = {}
    for name in invariants.INVARIANTS:
        sets = {}
        for which, data in (("harness", harness), ("realworld", realworld)):
            if data is not None and data["logs"]:
                sets[which] = {"logs": data["logs"], **{reading: data.get(reading, {}).get(name, 0) for reading in READINGS}}
        out[name] = sets
    return out


def fraction(k: int, n: int) -> str:
    return f"{k}/{n} ({k / n:.1%})" if n else "-"


def readings_cell(data: dict[str, Any] | None, name: str) -> str:
    """False alarms of one invariant on one set: whole log / monitor windows / trailing windows."""
    if not data or not data["logs"]:
        return "-"
    return " / ".join(fraction(data.get(reading, {}).get(name, 0), data["logs"]) for reading in READINGS)


def render(summary: dict[str, Any]) -> str:
    h, rw = summary["harness"], summary.get("realworld")
    decisive = set(summary["decisive"])
    lines = ["# Invariants: false alarms on healthy runs", "",
             f"Generated by `python benchmarks/invariants.py --record` on {summary['when']} (harness commit "
             f"`{summary['commit']}`) in {summary['wall_s']:.0f} s.", "",
             f"- **harness**: {h['logs']} held-out runs with no fault (`by_seed` val and test of results/dataset; "
             "each read at 25%, 50% and 100% of its rows, with every metric and with clip fractions only); "
             "setups: " + ", ".join(f"{k} {v}" for k, v in sorted(h["setups"].items())) + ".",
             ("- **realworld**: " + f"{rw['logs']} healthy logs written by the frameworks themselves ("
              + ", ".join(f"{k} {v}" for k, v in sorted(rw["per_framework"].items())) + ")." if rw and rw["logs"]
              else "- **realworld**: not measured (no logs under the given root): no invariant is decisive."),
             "", f"An invariant rules out `healthy` (decisive) only with at most "
             f"{invariants.MAX_FALSE_ALARMS:.0%} false alarms on both sets, on the whole log and on every window of "
             f"{invariants.WINDOW_ROWS} rows (what a monitor reads); a monitor also reads it on its last {invariants.TRAILING_ROWS} rows "
             f"only within the same bar on every window of {invariants.TRAILING_ROWS} rows. Each cell: whole log / "
             f"windows of {invariants.WINDOW_ROWS} rows / windows of {invariants.TRAILING_ROWS} rows.", "",
             "| invariant | class | holds on every healthy run | harness false alarms | realworld false alarms "
             f"| decisive | read on the last {invariants.TRAILING_ROWS} rows | faults whose held-out runs break it "
             "(harness) | faulty real logs breaking it |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, inv in invariants.INVARIANTS.items():
        found = ", ".join(f"{f} {k}/{n}" for f, (k, n) in sorted(h["faults"].get(name, {}).items())) or "-"
        found_rw = ", ".join(f"{f} {k}/{n}" for f, (k, n) in sorted((rw or {}).get("faults", {}).get(name, {}).items())) \
            or "-"
        lines.append(f"| {name} | {inv.fault_class} | {inv.holds} | {readings_cell(h, name)} | {readings_cell(rw, name)} "
                     f"| {'yes' if name in decisive else 'no'} | {'yes' if name in summary['trailing'] else 'no'} "
                     f"| {found} | {found_rw} |")
    lines += ["", "## How soon after a mid-run onset", "",
              "Held-out faulty runs (val and test) whose bug began mid-run, read as a live monitor reads them on "
              "every row: rows from the onset until a decisive invariant first breaks (the least delay an alarm "
              f"resting on it can have). An invariant read on the last {invariants.TRAILING_ROWS} rows needs that "
              f"many; the others need the monitor's {invariants.WINDOW_ROWS}-row window to hold the break throughout.", "",
              "| invariant | logs it breaks first | median rows after the onset | most rows | faults |",
              "|---|---|---|---|---|"]
    for name, d in summary["onset_delays"].items():
        lines.append(f"| {name} | {d['logs']} | {d['median_rows']:g} | {d['max_rows']} | {', '.join(d['faults'])} |")
    lines += ["", "Where each comes from: " + "; ".join(f"`{n}`: {i.source}" for n, i in invariants.INVARIANTS.items())
              + ".", ""]
    for label, data in (("harness", h), ("realworld", rw or {})):
        for name, ex in (data.get("examples") or {}).items():
            lines.append(f"- {label} false alarms of `{name}` (up to 5): {', '.join(ex)}")
    lines += ["", "## Mined (TrainCheck-style)", "",
              "Held on every healthy `train` run with no fault and broke on some faulty `train` run; scored on the "
              "held-out healthy runs. They are reported, not used: every mined candidate that matters is already "
              "one of the invariants above or an exact-evidence item (harness/analysis/evidence.py) except where "
              "noted by its false alarms.", "",
              "| algo | metric | holds | healthy train runs | breaks under (train runs) | held-out false alarms |",
              "|---|---|---|---|---|---|"]
    for m in summary["mined"]:
        holds = ({"not_all_zero": "not exactly 0 on every step", "not_constant": "not constant on every step"}
                 .get(m["template"]) or f"|value| <= {m['bound']:.3g}")
        lines.append(f"| {m['algo']} | {m['metric']} | {holds} | {m['healthy_train_runs']} | "
                     + ", ".join(f"{f} {k}" for f, k in m["breaks_under"].items())
                     + f" | {fraction(m['heldout_false_alarms'], m['heldout_healthy'])} |")
    return "\n".join(lines) + "\n"


DOCS = ROOT / "docs" / "diagnose.md"
BEGIN = "<!-- invariants table: python benchmarks/invariants.py --record -->"
END = "<!-- end of invariants table -->"


def docs_table(summary: dict[str, Any]) -> str:
    """The table docs/diagnose.md shows (between BEGIN and END; --record rewrites it)."""
    h, rw = summary["harness"], summary.get("realworld") or {"logs": 0, "alarms": {}}
    lines = [BEGIN, "",
             f"| invariant | class | holds on every healthy run | false alarms: harness ({h['logs']} runs) | "
             f"false alarms: real frameworks ({rw['logs']} logs) | decisive | read on the last "
             f"{invariants.TRAILING_ROWS} rows |", "|---|---|---|---|---|---|---|"]
    for name, inv in invariants.INVARIANTS.items():
        lines.append(f"| `{name}` | {inv.fault_class} | {inv.holds} | {readings_cell(h, name)} | {readings_cell(rw, name)} | "
                     f"{'yes' if name in summary['decisive'] else 'no'} | "
                     f"{'yes' if name in summary['trailing'] else 'no'} |")
    lines += ["", f"Each false-alarm cell: on the whole log / on any window of {invariants.WINDOW_ROWS} rows (the monitor's evidence "
              f"window) / on any window of {invariants.TRAILING_ROWS} rows.", "",
              "Which faults break each invariant, when the table was measured, and the invariants mined from the "
              "healthy runs: [benchmarks/results/invariants.md](../benchmarks/results/invariants.md).", "", "", END]
    return "\n".join(lines)


def write_docs(summary: dict[str, Any]) -> None:
    text = DOCS.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0:
        raise SystemExit(f"{DOCS}: no '{BEGIN}' ... '{END}' block to rewrite")
    DOCS.write_text(text[:start] + docs_table(summary) + text[end + len(END):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=ROOT / "results" / "dataset")
    ap.add_argument("--realworld", type=Path, default=ROOT / "results" / "realworld")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    start = time.perf_counter()
    harness = harness_rates(args.dataset)
    realworld = realworld_rates(args.realworld) if (args.realworld / "sb3").exists() or any(
        args.realworld.glob("*/labels.json")) else None
    rates = table(harness, realworld)
    decisive = sorted(invariants.decisive_in(rates))
    summary = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
               "harness": harness, "realworld": realworld, "rates": rates, "decisive": decisive,
               "trailing": sorted(invariants.trailing_in(rates)),
               "mined": mine(args.dataset), "onset_delays": onset_delays(args.dataset, invariants.decisive_in(rates),
                                                                         invariants.trailing_in(rates))}
    summary["wall_s"] = time.perf_counter() - start
    text = render(summary)
    print(text)
    if args.record:
        (RESULTS / "invariants.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
        (RESULTS / "invariants.md").write_text(text)
        invariants.RATES_FILE.write_text(json.dumps(
            {"measured_by": "python benchmarks/invariants.py --record", "commit": summary["commit"],
             "when": summary["when"], "max_false_alarms": invariants.MAX_FALSE_ALARMS, "invariants": rates},
            indent=1) + "\n")
        write_docs(summary)


if __name__ == "__main__":
    main()

"""``python -m harness.evaluate detector=NAME``: score a detector against labelled runs.

Each run of the dataset is streamed through the detector (``reset`` with what is known
before training, then ``update`` once per update). Per fault and overall it reports:
run-level recall (an alarm at or after the onset), the rate of naming the injected fault
(the fault of the run's strongest alarm after onset), false-alarm rates on healthy runs
and on healthy look-alike controls separately, alarms before the onset, the detection delay
in updates after onset (median, p90), a confusion matrix of injected x named fault, and how
often each symptom fires on faulty, healthy and control runs.

Python API: ``evaluate(detector, "results")`` returns an :class:`Evaluation`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.signatures import share
from harness.config import ConfigError, setup_label
from harness.detection.base import Alarm, Detector, RunInfo, alarms_from, is_detector
from harness.markdown import num, table
from harness.metrics import CANONICAL
from harness.store import atomic_write_bytes, atomic_write_parquet

NO_ALARM = "(no alarm)"
#: the columns of the score table, as printed and reported
SCORE_COLUMNS = ["group", "setup", "n", "recall", "correct_cause", "false_alarm_rate", "before_onset",
                 "delay_median", "delay_p90", "delay_right_median"]
UNNAMED = "(unnamed)"


def load_dataset(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(data, runs) from a dataset directory or a results_dir holding ``dataset/``."""
    root = Path(path)
    if not (root / "data.parquet").exists() and (root / "dataset" / "data.parquet").exists():
        root = root / "dataset"
    if not (root / "data.parquet").exists():
        raise ConfigError(f"no labelled dataset at {path} (expected data.parquet and runs.parquet): "
                          "run python -m harness.catalogue first")
    return pd.read_parquet(root / "data.parquet"), pd.read_parquet(root / "runs.parquet")


def run_info(run: pd.Series) -> RunInfo:
    """What a detector is handed about a labelled run (RunInfo.for_run: no label in any field)."""
    configured = {k.split(".", 1)[1]: v for k, v in run.items()
                  if k.startswith("configured.") and not (isinstance(v, float) and math.isnan(v))}
    space = json.loads(run["action_space"]) if isinstance(run.get("action_space"), str) else None
    return RunInfo.for_run(run["run_id"], algo=run["algo"], env=run["env"], backend=run["backend"],
                           configured=configured, action_space=space)


def stream(detector: Detector, info: RunInfo, metrics: pd.DataFrame) -> list[tuple[int, Alarm]]:
    """Feed one run's rows to the detector; every alarm with the update it was raised at."""
    detector.reset(info)
    alarms = []
    rows = metrics.reindex(columns=list(CANONICAL))        # a metric the dataset predates is NaN
    for update, row in zip(metrics["update"].to_numpy(), rows.to_dict("records")):
        for alarm in alarms_from(detector, int(update), row):
            alarms.append((int(update), alarm))
    return alarms


def setup_of(run: pd.Series) -> str:
    return setup_label(run["algo"], run.get("algo_variant", "default"), run["env"], run["backend"])


def outcome(run: pd.Series, alarms: list[tuple[int, Alarm]]) -> dict[str, Any]:
    onset = int(run["onset"]) if run["fault"] != "none" else 0
    after = [(u, a) for u, a in alarms if u >= onset]
    named = max(after, key=lambda ua: (ua[1].score, -ua[0]))[1] if after else None
    right = [u for u, a in after if a.fault is not None and a.fault == run["fault"]]
    return {
        "run_id": run["run_id"], "fault": run["fault"], "is_control": bool(run["is_control"]),
        "setup": setup_of(run), "seed": run["seed"], "onset": onset, "status": run["status"],
        "alarmed": bool(alarms), "alarmed_after_onset": bool(after),
        "alarmed_before_onset": any(u < onset for u, _ in alarms),
        "first_alarm_update": alarms[0][0] if alarms else None,
        "delay": (after[0][0] - onset) if after else None,
        "delay_right": (right[0] - onset) if right else None,
        "named_fault": (named.fault or UNNAMED) if named else NO_ALARM,
        "named_symptom": named.symptom if named else None,
        "symptoms": sorted({a.symptom for _, a in alarms}),
    }


@dataclass
class Evaluation:
    detector: str
    runs: pd.DataFrame        # one row per run: outcome
    alarms: pd.DataFrame      # every alarm
    scores: pd.DataFrame      # per fault x setup, healthy and control rows, overall
    confusion: pd.DataFrame   # injected fault x named fault (run counts)
    symptoms: pd.DataFrame    # per symptom: share of faulty / healthy / control runs it fired on
    excluded: list[str] = field(default_factory=list)   # runs the detector was fitted on (not scored)

    def score(self, fault: str, setup: str | None = None) -> pd.Series:
        rows = self.scores[(self.scores["group"] == fault)
                           & ((self.scores["setup"] == setup) if setup else (self.scores["setup"] == "all"))]
        if rows.empty:
            raise KeyError(f"no scores for fault {fault!r} (setup {setup or 'all'})")
        return rows.iloc[0]

    def summary(self) -> str:
        return self.scores[SCORE_COLUMNS].to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.2f}")


def _score_rows(out: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    faulty = out[out["fault"] != "none"]
    for (fault, setup), g in faulty.groupby(["fault", "setup"]):
        rows.append(_faulty_row(fault, setup, g))
    for fault, g in faulty.groupby("fault"):
        rows.append(_faulty_row(fault, "all", g))
    for label, mask in (("healthy", (out["fault"] == "none") & ~out["is_control"]),
                        ("control", (out["fault"] == "none") & out["is_control"])):
        for setup, g in out[mask].groupby("setup"):
            rows.append(_healthy_row(label, setup, g))
        if mask.any():
            rows.append(_healthy_row(label, "all", out[mask]))
    if len(faulty):
        rows.append({**_faulty_row("all faults", "all", faulty),
                     "false_alarm_healthy": share(out[(out["fault"] == "none") & ~out["is_control"]]["alarmed"]),
                     "false_alarm_control": share(out[(out["fault"] == "none") & out["is_control"]]["alarmed"])})
    return rows


def _faulty_row(fault: str, setup: str, g: pd.DataFrame) -> dict[str, Any]:
    delays = g["delay"].dropna().astype(float)
    right = g["delay_right"].dropna().astype(float)
    return {"group": fault, "setup": setup, "n": len(g), "recall": share(g["alarmed_after_onset"]),
            "correct_cause": share(g["named_fault"] == g["fault"]),
            "before_onset": share(g["alarmed_before_onset"]), "false_alarm_rate": math.nan,
            "delay_median": float(delays.median()) if len(delays) else math.nan,
            "delay_p90": float(np.percentile(delays, 90)) if len(delays) else math.nan,
            "delay_right_median": float(right.median()) if len(right) else math.nan}


def _healthy_row(label: str, setup: str, g: pd.DataFrame) -> dict[str, Any]:
    return {"group": label, "setup": setup, "n": len(g), "recall": math.nan, "correct_cause": math.nan,
            "before_onset": math.nan, "false_alarm_rate": share(g["alarmed"]),
            "delay_median": math.nan, "delay_p90": math.nan, "delay_right_median": math.nan}


def evaluate(detector: Detector, dataset: str | Path | tuple[pd.DataFrame, pd.DataFrame] = "results",
             name: str | None = None) -> Evaluation:
    """Stream every run of ``dataset`` (a path, or ``(data, runs)``) through ``detector``."""
    if not is_detector(detector):
        raise ConfigError(f"{type(detector).__name__} is not a detector: it needs reset(run_info) and "
                          "update(update_index, metrics)")
    data, runs = load_dataset(dataset) if isinstance(dataset, (str, Path)) else dataset
    trained_on = set(getattr(detector, "trained_on", ()) or ())
    excluded = runs[runs["run_id"].isin(trained_on)]["run_id"].tolist()
    runs = runs[~runs["run_id"].isin(trained_on)]     # a fitted detector is scored out of sample only
    if runs.empty:
        raise ConfigError(f"no runs to score: the detector was fitted on all {len(excluded)} runs of the dataset "
                          "(score it on runs it has not seen, e.g. the catalogue sweep's)")
    by_run = dict(tuple(data[data["run_id"].isin(runs["run_id"])].sort_values(["run_id", "update"])
                        .groupby("run_id", sort=False)))
    outcomes, alarm_rows = [], []
    for _, run in runs.iterrows():
        # a run that crashed or diverged before logging a row hands the detector nothing
        alarms = stream(detector, run_info(run), by_run.get(run["run_id"], data.iloc[:0]))
        outcomes.append(outcome(run, alarms))
        alarm_rows += [{"run_id": run["run_id"], "update": u, "symptom": a.symptom, "fault": a.fault,
                        "score": a.score} for u, a in alarms]
    out = pd.DataFrame(outcomes)
    injected = np.where(out["fault"] != "none", out["fault"],
                        np.where(out["is_control"], "none (control)", "none (healthy)"))
    confusion = pd.crosstab(pd.Series(injected, name="injected"), out["named_fault"].rename("named"))
    kinds = np.where(out["fault"] != "none", "faulty", np.where(out["is_control"], "control", "healthy"))
    symptom_rows = []
    for symptom in sorted({s for ss in out["symptoms"] for s in ss}):
        fired = out["symptoms"].map(lambda ss, s=symptom: s in ss)
        symptom_rows.append({"symptom": symptom, **{f"rate_{k}": share(fired[kinds == k]) for k in
                                                    ("faulty", "healthy", "control")}})
    return Evaluation(detector=name or getattr(detector, "name", type(detector).__name__), runs=out, excluded=excluded,
                      alarms=pd.DataFrame(alarm_rows, columns=["run_id", "update", "symptom", "fault", "score"]),
                      scores=pd.DataFrame(_score_rows(out)), confusion=confusion,
                      symptoms=pd.DataFrame(symptom_rows, columns=["symptom", "rate_faulty", "rate_healthy",
                                                                  "rate_control"]))


# ---- report ------------------------------------------------------------------------------

def _fmt(x: Any) -> str:
    return num(x, ".2f")


def markdown(ev: Evaluation, dataset: str) -> str:
    lines = [f"# Detector evaluation: {ev.detector}", "", f"Dataset: `{dataset}`; {len(ev.runs)} runs"
             + (f" ({len(ev.excluded)} runs the detector was fitted on are left out: scored out of sample only)"
                if ev.excluded else "") + ".", "",
             "Recall: faulty runs with an alarm at or after the onset. Correct cause: faulty runs whose "
             "strongest alarm names the injected fault. False alarm rate: healthy runs (or look-alike "
             "controls) with any alarm. Before onset: faulty runs alarmed before the fault switched on. "
             "Delay: updates from onset to the first alarm; delay right: to the first alarm naming the "
             "injected fault.", "",
             ]
    lines += table(SCORE_COLUMNS, [[_fmt(r[c]) for c in SCORE_COLUMNS] for _, r in ev.scores.iterrows()])
    lines += ["", "![scores](scores.png)", "", "## Confusion (runs): injected fault x named fault", ""]
    lines += table(["injected \\ named", *ev.confusion.columns],
                   [[injected, *(int(v) for v in row)] for injected, row in ev.confusion.iterrows()])
    lines += ["", "## Symptoms: share of runs each fired on", ""]
    lines += table(["symptom", "faulty", "healthy", "control"], [
        [r["symptom"], _fmt(r["rate_faulty"]), _fmt(r["rate_healthy"]), _fmt(r["rate_control"])]
        for _, r in ev.symptoms.iterrows()])
    return "\n".join(lines) + "\n"


def plot(ev: Evaluation, path: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = ev.scores[(ev.scores["setup"] == "all")]
    faults = s[~s["group"].isin(["healthy", "control", "all faults"])]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 0.5 + 0.35 * max(len(faults), 4)),
                                   gridspec_kw={"width_ratios": [2, 1]})
    y = np.arange(len(faults))
    ax1.barh(y - 0.2, faults["recall"], 0.4, label="recall", color="tab:green")
    ax1.barh(y + 0.2, faults["correct_cause"], 0.4, label="correct cause", color="tab:olive")
    ax1.set_yticks(y, faults["group"], fontsize=8)
    ax1.set_xlim(0, 1)
    ax1.legend(fontsize=8)
    ax1.set_title(f"{ev.detector}: per fault", fontsize=9)
    fa = s[s["group"].isin(["healthy", "control"])]
    ax2.bar(fa["group"], fa["false_alarm_rate"], color=["tab:blue", "tab:orange"][: len(fa)])
    ax2.set_ylim(0, 1)
    ax2.set_title("false-alarm rate (runs with any alarm)", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def write(ev: Evaluation, out_dir: Path, dataset: str) -> None:
    atomic_write_parquet(out_dir / "scores.parquet", ev.scores)
    atomic_write_parquet(out_dir / "runs.parquet", ev.runs.assign(symptoms=ev.runs["symptoms"].map("; ".join)))
    atomic_write_parquet(out_dir / "alarms.parquet", ev.alarms)
    atomic_write_parquet(out_dir / "confusion.parquet", ev.confusion.reset_index())
    atomic_write_parquet(out_dir / "symptoms.parquet", ev.symptoms)
    plot(ev, out_dir / "scores.png")
    atomic_write_bytes(out_dir / "REPORT.md", markdown(ev, dataset).encode())

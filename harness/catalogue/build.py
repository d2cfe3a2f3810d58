"""The catalogue: which bug leaves which metric signature, measured over seeds, out of sample.

Protocol (every rate in the published catalogue follows it):

- **Matched windows.** A faulty run is read from its onset over the updates it completed (a
  diverged run stops part-way through an update; that partial row is read only by the
  non-finite signatures). Its healthy twin (same seed and config) and the controls of the same
  seed are read over exactly the same updates, so a short diverged run is never compared with
  a whole healthy run. Healthy seeds without a faulty counterpart use the cell's median window.
- **Calibration and held-out seeds.** Even seeds calibrate, odd seeds are held out. On the
  calibration half, every scale signature's threshold is moved out from its default to the edge
  of the healthy runs where they cross it (so it never fires on a healthy calibration run), and
  the verdicts are decided: a
  signature *separates* when it fires on >= 80% of faulty, <= 20% of healthy and <= 20% of
  control runs (a signature that fires on the look-alike controls is not specific). The rates
  reported are the held-out ones, with Wilson 95% intervals.
- **Manifested** is decided out of sample too: the calibration half selects the evidence (the
  separating signatures and up to three metrics whose per-run summary reaches AUROC >= 0.9 or
  <= 0.1), and the held-out half tests each selected item (Fisher's exact test for a signature,
  an exact permutation test for a metric, one-sided in the calibrated direction) in a fixed
  sequence: strongest on calibration first, each at 0.05, stopping at the first that fails (the
  family-wise error rate stays <= 0.05). A fault manifested when the first item passes.
- **Metrics over all seeds**: each metric's per-run summary (its median over the window) gives
  an AUROC faulty vs healthy, with a permutation p-value that exchanges labels within twin pairs
  (exact: 2^n permutations), Holm-corrected over the metrics of the cell.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from faults import FAULTS
from harness.agents.base import trainers_of
from harness.analysis import signatures, stats
from harness.analysis.runs import Cell, RunSet
from harness.analysis.signatures import DIRECTIONS, Result
from harness.config import ConfigError, backend_config, check_range, locate, setup_label
from harness.detection import REFERENCE
from harness.markdown import num, pct, table
from harness.metrics import CANONICAL, PROGRESS, applicable
from harness.store import atomic_write_bytes, atomic_write_parquet

SEPARATES = (0.8, 0.2)     # fires on >= 80% of faulty runs and <= 20% of healthy runs and controls
SELECT_AUROC = 0.9         # calibration AUROC (or 1 - AUROC) for a metric to be selected as evidence
MAX_METRICS = 3            # metrics selected per cell on the calibration half
ALPHA = 0.05
MIN_RUNS = 3               # evaluable runs a side below which no separation is claimed
SPLITS = ("calibration", "held-out")


def split_of(seed: int) -> str:
    """Even seeds calibrate, odd seeds are held out."""
    return "calibration" if seed % 2 == 0 else "held-out"


@dataclass(frozen=True)
class CatalogueSettings:
    results_dir: Path
    n_mc: int
    trace_metrics: tuple[str, ...]
    plots: bool
    dataset: bool
    model: bool = True
    left_out: bool = True
    model_kind: str = "logistic"
    views: bool = True
    model_catalogue_runs: bool = True

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> CatalogueSettings:
        check_range("", "n_mc", cfg.n_mc, ge=100, le=1_000_000, kind=int)
        trace = tuple(cfg.trace_metrics or ())
        unknown = [m for m in trace if m not in CANONICAL]
        if unknown:
            raise ConfigError(f"unknown metric {unknown[0]!r} in trace_metrics; valid: {', '.join(CANONICAL)}")
        root = Path(cfg.results_dir)
        if not (root / "runs").is_dir():
            raise ConfigError(f"no runs under {root}/runs: train some first (python -m harness ...)")
        from harness.analysis.model import check_kind

        kind = check_kind(str(cfg.get("model_kind", "logistic")))
        return cls(root, int(cfg.n_mc), trace, bool(cfg.plots), bool(cfg.dataset), bool(cfg.get("fit_model", True)),
                   bool(cfg.get("left_out", True)), kind, bool(cfg.get("views", True)),
                   bool(cfg.get("model_catalogue_runs", True)))


# ---- windows ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """The updates a run is read over: ``length`` updates from ``onset``."""

    onset: int
    length: int


def completed_after(metrics: pd.DataFrame, onset: int) -> int:
    """How many complete updates a run has from ``onset`` on (a diverged update is partial)."""
    return len(signatures.usable(signatures.post_onset(metrics, onset)))


def cell_windows(cell: Cell, rs: RunSet) -> dict[str, Window]:
    """Each run's window: a faulty run's own; its twin's and same-seed controls' the same."""
    own = {}
    for rid in cell.faulty:
        onset = int(rs.runs.set_index("run_id").at[rid, "onset"])
        own[rid] = Window(onset, completed_after(rs.metrics[rid], onset))
    by_seed = {rs.metas[r]["seed"]: w for r, w in own.items()}
    fallback = Window(int(np.median([w.onset for w in own.values()])),
                      int(np.median([w.length for w in own.values()])))
    windows = dict(own)
    for rid in cell.healthy + cell.controls:
        windows[rid] = by_seed.get(rs.metas[rid]["seed"], fallback)
    return windows


def window_rows(metrics: pd.DataFrame, window: Window) -> pd.DataFrame:
    """The rows of the window's updates (a framework may log several rows per update), plus a
    diverged run's partial update right after it (read only by the non-finite signatures)."""
    rows = metrics[metrics["update"] >= window.onset]
    end = window.onset + window.length
    usable = signatures.usable(rows[rows["update"] < end])
    partial = rows[(rows["update"] == end) & (rows["nonfinite"] == 1)]
    return pd.concat([usable, partial]) if len(partial) else usable


# ---- per-cell evaluation ------------------------------------------------------------------

def signature_results(cell: Cell, rs: RunSet, windows: dict[str, Window],
                      frames: Callable[[str], pd.DataFrame]) -> dict[str, dict[str, Result]]:
    """Every signature's statistic on every run of the cell, over its window (default thresholds)."""
    out = {}
    for rid in cell.faulty + cell.healthy + cell.controls:
        rows = window_rows(frames(rid), windows[rid])
        meta = rs.metas[rid]
        out[rid] = {name: (Result(False, "empty window", evaluable=False) if rows.empty
                           else sig.check(rows, meta)) for name, sig in signatures.SIGNATURES.items()}
    return out


def calibrate(name: str, healthy_values: list[float]) -> float:
    """A scale signature's threshold: its default (the folk rule), moved out to the edge of the
    healthy calibration runs where they cross it, so it never fires on one of them. It is never
    moved inwards: a signature keeps its meaning (kl_explodes stays "KL at least as large as the
    folk rule says"), calibration only makes it stricter where healthy runs need it."""
    sig = signatures.SIGNATURES[name]
    values = [v for v in healthy_values if math.isfinite(v)]
    if not sig.calibrated or not values:
        return sig.threshold
    if sig.direction in ("above", "at_least"):
        return max(sig.threshold, max(values))
    return min(sig.threshold, min(values))


def _count(results: dict[str, dict[str, Result]], ids: list[str], name: str, threshold: float
           ) -> tuple[int, int]:
    """(fired, evaluable) among ``ids``."""
    fired = evaluable = 0
    direction = DIRECTIONS[signatures.SIGNATURES[name].direction]
    for rid in ids:
        res = results[rid][name]
        if res.evaluable:
            evaluable += 1
            fired += bool(direction(res.value, threshold))
    return fired, evaluable


def _rate(k: int, n: int) -> float:
    return k / n if n else math.nan


def separates(rf: float, rh: float, rc: float, n_f: int, n_h: int, n_c: int) -> bool:
    return (n_f >= MIN_RUNS and n_h >= MIN_RUNS and rf >= SEPARATES[0] and rh <= SEPARATES[1]
            and (n_c < MIN_RUNS or rc <= SEPARATES[1]))


def verdict(cal: dict[str, Any], heldout_p: float) -> str:
    if cal["n_faulty"] < MIN_RUNS or cal["n_healthy"] < MIN_RUNS:
        return "no data"
    if cal["separates"]:
        return "confirmed" if heldout_p < ALPHA else "calibration only (not confirmed on held-out seeds)"
    if cal["rate_faulty"] >= SEPARATES[0] and cal["n_control"] >= MIN_RUNS and cal["rate_control"] > SEPARATES[1]:
        return "not specific (fires on the look-alike controls)"
    if cal["rate_faulty"] >= SEPARATES[0] and cal["rate_healthy"] > SEPARATES[1]:
        return "not specific (fires on healthy runs)"
    return "refuted" if cal["rate_faulty"] < 0.5 else "partly (fires on 50-80% of faulty seeds)"


def run_summary(rows: pd.DataFrame, names: list[str]) -> dict[str, float]:
    """A run's summary per metric: its median over the window's complete updates."""
    rows = signatures.usable(rows)
    out = {}
    for name in names:
        col = rows[name].replace([np.inf, -np.inf], np.nan).dropna() if name in rows else pd.Series(dtype=float)
        out[name] = float(col.median()) if len(col) else math.nan
    return out


def _split_ids(ids: list[str], rs: RunSet, split: str) -> list[str]:
    return [r for r in ids if split_of(rs.metas[r]["seed"]) == split]


def cell_rows(cell: Cell, rs: RunSet, rng: np.random.Generator, n_mc: int,
              frames: Callable[[str], pd.DataFrame] | None = None) -> list[dict[str, Any]]:
    frames = frames or (lambda rid: rs.metrics[rid])
    windows = cell_windows(cell, rs)
    results = signature_results(cell, rs, windows, frames)
    fault_cls = FAULTS.get(cell.info["fault"])
    expected = list(fault_cls.expected) if fault_cls else []
    groups = {"faulty": cell.faulty, "healthy": cell.healthy, "control": cell.controls}
    split = {s: {g: _split_ids(ids, rs, s) for g, ids in groups.items()} for s in SPLITS}

    # ---- signatures: thresholds and verdicts on the calibration half, rates on the held-out half
    sig_rows, evidence = [], []
    for name, sig in signatures.SIGNATURES.items():
        threshold = calibrate(name, [results[r][name].value for r in split["calibration"]["healthy"]
                                     if results[r][name].evaluable])
        row: dict[str, Any] = {"kind": "signature", "name": name, "expected": name in expected,
                               "calibrated": sig.calibrated, "threshold": threshold,
                               "default_threshold": sig.threshold, "direction": sig.direction}
        for s in SPLITS:
            for g, ids in split[s].items():
                k, n = _count(results, ids, name, threshold)
                row[f"{s}_k_{g}"], row[f"{s}_n_{g}"] = k, n
        cal = {"rate_faulty": _rate(row["calibration_k_faulty"], row["calibration_n_faulty"]),
               "rate_healthy": _rate(row["calibration_k_healthy"], row["calibration_n_healthy"]),
               "rate_control": _rate(row["calibration_k_control"], row["calibration_n_control"]),
               "n_faulty": row["calibration_n_faulty"], "n_healthy": row["calibration_n_healthy"],
               "n_control": row["calibration_n_control"]}
        cal["separates"] = separates(cal["rate_faulty"], cal["rate_healthy"], cal["rate_control"],
                                     cal["n_faulty"], cal["n_healthy"], cal["n_control"])
        for g in groups:
            k, n = row[f"held-out_k_{g}"], row[f"held-out_n_{g}"]
            row[f"rate_{g}"] = _rate(k, n)
            row[f"ci_low_{g}"], row[f"ci_high_{g}"] = stats.wilson(k, n)
            row[f"cal_rate_{g}"] = cal[f"rate_{g}"]
        row["separates_calibration"] = cal["separates"]
        row["heldout_p"] = stats.fisher_greater(row["held-out_k_faulty"], row["held-out_n_faulty"],
                                                row["held-out_k_healthy"], row["held-out_n_healthy"])
        if cal["separates"]:       # strength on calibration: how far the faulty rate clears the others
            evidence.append((name, row["heldout_p"],
                             cal["rate_faulty"] - max((r for r in (cal["rate_healthy"], cal["rate_control"])
                                                       if math.isfinite(r)), default=0.0)))
        row["verdict"] = verdict(cal, row["heldout_p"]) if name in expected else None
        sig_rows.append(row)

    # ---- metrics: AUROC over all seeds (paired permutation p, Holm over the cell's metrics),
    # selection on the calibration half, one test each on the held-out half
    names = [m for m in applicable(cell.info["algo"]) if m not in ("nonfinite",)]
    summaries = {rid: run_summary(window_rows(frames(rid), windows[rid]), names)
                 for rid in cell.faulty + cell.healthy}
    metric_rows = []
    twin = {rs.metas[h]["seed"]: h for h in cell.healthy}
    for name in names:
        pairs = [(summaries[f][name], summaries[twin[rs.metas[f]["seed"]]][name]) for f in cell.faulty
                 if rs.metas[f]["seed"] in twin]
        pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
        pos = np.array([summaries[r][name] for r in cell.faulty])
        neg = np.array([summaries[r][name] for r in cell.healthy])
        pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
        if len(pos) < 2 or len(neg) < 2 or np.ptp(np.concatenate([pos, neg])) == 0:
            continue         # not recorded, not finite, or constant: nothing to test
        a = stats.auroc(pos, neg)
        paired = len(pairs) == len(pos) == len(neg)
        p = stats.auroc_pvalue(*(np.array(list(zip(*pairs))) if paired else (pos, neg)), paired=paired,
                               rng=rng, n_mc=n_mc)
        cal_pos = np.array([summaries[r][name] for r in split["calibration"]["faulty"]])
        cal_neg = np.array([summaries[r][name] for r in split["calibration"]["healthy"]])
        cal_auroc = stats.auroc(cal_pos[np.isfinite(cal_pos)], cal_neg[np.isfinite(cal_neg)])
        metric_rows.append({"kind": "metric", "name": name, "expected": False, "auroc": a,
                            "direction": "higher" if a >= 0.5 else "lower", "p_value": p, "paired": paired,
                            "cal_auroc": cal_auroc,
                            "faulty_median": float(np.median(pos)), "healthy_median": float(np.median(neg)),
                            "n_faulty_finite": len(pos), "n_healthy_finite": len(neg)})
    for row, adj in zip(metric_rows, stats.holm([r["p_value"] for r in metric_rows])):
        row["p_holm"] = adj
        row["separates_all_seeds"] = bool(adj < ALPHA)
    selected = sorted((r for r in metric_rows if math.isfinite(r["cal_auroc"])
                       and abs(r["cal_auroc"] - 0.5) >= SELECT_AUROC - 0.5), key=lambda r: -abs(r["cal_auroc"] - 0.5))
    for row in selected[:MAX_METRICS]:
        pos = np.array([summaries[r][row["name"]] for r in split["held-out"]["faulty"]])
        neg = np.array([summaries[r][row["name"]] for r in split["held-out"]["healthy"]])
        pos, neg = pos[np.isfinite(pos)], neg[np.isfinite(neg)]
        sign = 1 if row["cal_auroc"] >= 0.5 else -1
        row["heldout_auroc"] = stats.auroc(pos, neg)
        row["heldout_p"] = one_sided_perm_p(sign * pos, sign * neg, rng, n_mc)
        evidence.append((f"{row['name']} (AUROC)", row["heldout_p"], 2 * abs(row["cal_auroc"] - 0.5)))

    # fixed-sequence testing: the items in the order the calibration half ranks them (strongest first),
    # each at ALPHA, stopping at the first that fails; the family-wise error stays <= ALPHA without
    # dividing ALPHA by the number of items (which 4 vs 4 held-out seeds could never pass)
    revealed = []
    for item, p, _ in sorted(evidence, key=lambda e: -e[2]):
        if not p < ALPHA:
            break
        revealed.append(item)
    held = split["held-out"]
    # the smallest p-value the held-out seeds could give (every faulty seed fires, no healthy one):
    # when it is not below ALPHA the cell cannot manifest whatever the fault does -- undecided, not "no trace"
    min_p = stats.fisher_greater(len(held["faulty"]), len(held["faulty"]), 0, len(held["healthy"]))
    summary = cell_summary(cell, rs, windows, revealed, evidence)
    summary["min_p"] = float(min_p)
    summary["decidable"] = bool(min_p < ALPHA)
    return [{**summary, **row} for row in sig_rows + metric_rows]


def one_sided_perm_p(pos: np.ndarray, neg: np.ndarray, rng: np.random.Generator, n_mc: int) -> float:
    """P(AUROC >= observed) under exchanging faulty and healthy labels (unpaired)."""
    if len(pos) < 2 or len(neg) < 2:
        return math.nan
    observed = stats.auroc(pos, neg)
    values = np.concatenate([pos, neg])
    n = len(values)
    if math.comb(n, len(pos)) <= stats.EXACT_LIMIT:
        import itertools

        labels = np.zeros((math.comb(n, len(pos)), n), dtype=bool)
        for i, chosen in enumerate(itertools.combinations(range(n), len(pos))):
            labels[i, list(chosen)] = True
        null = stats._auroc_batch(values, labels)
        return float((null >= observed - 1e-12).mean())
    labels = np.argsort(rng.random((n_mc, n)), axis=1) < len(pos)
    null = stats._auroc_batch(values, labels)
    return float(((null >= observed - 1e-12).sum() + 1) / (n_mc + 1))


def cell_summary(cell: Cell, rs: RunSet, windows: dict[str, Window], revealed: list[str],
                 evidence: list[tuple[str, float, float]]) -> dict[str, Any]:
    statuses = [rs.metas[r]["status"] for r in cell.faulty]
    diverged_updates = [windows[r].length for r in cell.faulty if rs.metas[r]["status"] == "diverged"]
    progress = PROGRESS[cell.info["algo"]]

    def final(rid: str) -> float:
        rows = signatures.usable(window_rows(rs.metrics[rid], windows[rid]))[progress].dropna()
        return float(rows.iloc[-5:].mean()) if len(rows) else math.nan

    faulty_final = np.nanmedian([final(r) for r in cell.faulty]) if cell.faulty else math.nan
    healthy_final = np.nanmedian([final(r) for r in cell.healthy]) if cell.healthy else math.nan
    onsets = sorted({windows[r].onset for r in cell.faulty})
    return {
        **{k: cell.info[k] for k in ("fault", "fault_params", "onset_kind", "algo", "algo_variant", "env",
                                     "backend")},
        "cell": cell.label, "setup": cell.setup, "base": cell.info["base"],
        "onsets": ", ".join(map(str, onsets)),
        "n_faulty": len(cell.faulty), "n_healthy": len(cell.healthy), "n_control": len(cell.controls),
        "n_diverged": statuses.count("diverged"), "n_crashed": statuses.count("crashed"),
        "diverged_updates": ", ".join(map(str, diverged_updates)),
        "n_evidence": len(evidence),
        "manifested": bool(revealed), "manifested_by": ", ".join(revealed),
        "progress_metric": progress, "progress_faulty": float(faulty_final), "progress_healthy": float(healthy_final),
        "fault_form": rs.metas[cell.faulty[0]].get("fault_form"), "fault_kind": rs.metas[cell.faulty[0]].get("fault_kind"),
    }


SUMMARY_COLUMNS = ("fault", "fault_params", "onset_kind", "algo", "algo_variant", "env", "backend", "cell", "setup",
                   "base", "onsets", "n_faulty", "n_healthy", "n_control", "n_diverged", "n_crashed",
                   "diverged_updates", "n_evidence", "manifested", "manifested_by", "min_p", "decidable",
                   "progress_metric",
                   "progress_faulty", "progress_healthy", "fault_form", "fault_kind")


def build(rs: RunSet, n_mc: int = 20000, seed: int = 0, detectors: bool = True,
          frames: Callable[[str], pd.DataFrame] | None = None, catalogue_dir: Path | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cat = pd.DataFrame([row for cell in rs.cells() for row in cell_rows(cell, rs, rng, n_mc, frames)])
    if detectors and not cat.empty:
        cat = pd.concat([cat, detector_rows(rs, cat, catalogue_dir)], ignore_index=True)
    return cat


def view_frames(rs: RunSet, view: str) -> Callable[[str], pd.DataFrame]:
    """A run's metrics as ``view``'s framework would have logged them (:mod:`harness.logs.views`), with
    each row's training update (TRL logs once per optimizer step: its rows map to updates through
    steps.parquet)."""
    from harness.logs import to_canonical
    from harness.logs.views import StoredRun, render

    cache: dict[str, pd.DataFrame] = {}

    def frame(rid: str) -> pd.DataFrame:
        if rid not in cache:
            run = StoredRun.load(rs.root, rid)
            f = to_canonical(render(run, view), view).metrics.copy()
            if len(f) == len(run.steps) and len(f) != len(run.metrics):
                f["update"] = run.steps["update"].to_numpy()
            if "nonfinite" not in f or f["nonfinite"].isna().all():
                last = run.metrics.set_index("update")["nonfinite"]
                f["nonfinite"] = f["update"].map(last).fillna(0.0).to_numpy()
            cache[rid] = f
        return cache[rid]
    return frame


def view_manifestation(rs: RunSet, n_mc: int, seed: int = 0) -> pd.DataFrame:
    """Each cell's verdict in each framework view that applies to it: did the fault manifest on
    held-out seeds in the metrics that framework logs?"""
    from harness.analysis.model import VIEWS
    from harness.logs.views import applies

    rows = []
    cells = rs.cells()
    for view in sorted({v for views in VIEWS.values() for v in views} - {"canonical"}):
        frames = view_frames(rs, view)
        rng = np.random.default_rng(seed)
        for cell in cells:
            if not applies(view, cell.info["algo"]) or cell.info["backend"] not in ("native", "sb3"):
                continue
            summary = cell_rows(cell, rs, rng, n_mc, frames)[0]
            rows.append({"cell": cell.label, "view": view, "manifested": summary["manifested"],
                         "manifested_by": summary["manifested_by"]})
    return pd.DataFrame(rows, columns=["cell", "view", "manifested", "manifested_by"])


def reference_detectors(catalogue_dir: Path | None) -> dict[str, Any]:
    """The reference detectors to score; ``learned`` when a diagnosis model has been fitted."""
    out = {}
    for name, target in REFERENCE.items():
        if name == "learned":
            try:
                out[name] = locate(target)(catalogue=str(catalogue_dir)) if catalogue_dir else None
            except ConfigError:
                out[name] = None
        else:
            out[name] = locate(target)()
    return {k: v for k, v in out.items() if v is not None}


def detector_rows(rs: RunSet, cat: pd.DataFrame, catalogue_dir: Path | None = None) -> pd.DataFrame:
    """Each reference detector's scores per cell: recall, right cause, false alarms on healthy
    runs and controls, alarms before the onset, and delays (to the first alarm and to the first
    alarm that names the fault), so the rules of thumb are measured next to the signatures."""
    from harness.analysis import dataset
    from harness.detection.scoring import evaluate

    runs = dataset.runs_table(rs)
    runs = runs[runs["origin"] == "catalogue"]
    data = dataset.data_table(rs, runs)
    cells = {c.label: c for c in rs.cells()}
    rows = []
    for name, detector in reference_detectors(catalogue_dir).items():
        out = evaluate(detector, (data, runs), name=name).runs.set_index("run_id")
        for label, cell in cells.items():
            # a fitted detector is scored on the runs it was not fitted on (its scorer leaves them out)
            faulty, healthy, controls = (out.loc[out.index.intersection(ids)]
                                         for ids in (cell.faulty, cell.healthy, cell.controls))
            rows.append({"cell": label, "kind": "detector", "name": name,
                         "recall": signatures.share(faulty["alarmed_after_onset"]),
                         "correct_cause": signatures.share(faulty["named_fault"] == cell.info["fault"]),
                         "before_onset": signatures.share(faulty["alarmed_before_onset"]),
                         "delay_median": float(faulty["delay"].dropna().median()),
                         "delay_right_median": float(faulty["delay_right"].dropna().median()),
                         "false_alarm_healthy": signatures.share(healthy["alarmed"]),
                         "false_alarm_control": signatures.share(controls["alarmed"])})
    summary = cat.drop_duplicates("cell")[list(SUMMARY_COLUMNS)].set_index("cell")
    return pd.DataFrame(rows).join(summary, on="cell")


def backend_agreement(cat: pd.DataFrame) -> pd.DataFrame:
    """For faults run on more than one backend (same algorithm, env, parameters and onset kind):
    each signature's held-out firing rates side by side, and whether the backends disagree: the rate
    on faulty or on healthy runs differs by >= 0.5. (Whether a signature "separates" is not compared:
    it counts the look-alike controls, which one backend may not have.)"""
    sigs = cat[cat["kind"] == "signature"]
    keys = ["fault", "fault_params", "onset_kind", "algo", "algo_variant", "env"]
    rows = []
    for key, group in sigs.groupby(keys):
        backends = sorted(group["backend"].unique())
        if len(backends) < 2:
            continue
        rates = group.set_index(["name", "backend"])
        for name in group["name"].unique():
            row = {**dict(zip(keys, key)), "signature": name,
                   "expected": bool(group[group["name"] == name]["expected"].iloc[0])}
            for b in backends:
                r = rates.loc[(name, b)]
                row[f"rate_faulty_{b}"], row[f"rate_healthy_{b}"] = r["rate_faulty"], r["rate_healthy"]

            def spread(kind: str) -> float:
                values = [row[f"rate_{kind}_{b}"] for b in backends if not math.isnan(row[f"rate_{kind}_{b}"])]
                return max(values) - min(values) if values else 0.0
            row["disagree"] = bool(spread("faulty") >= 0.5 or spread("healthy") >= 0.5)
            rows.append(row)
    return pd.DataFrame(rows)


def healthy_baselines(rs: RunSet) -> pd.DataFrame:
    """How often each signature fires, at its default threshold, on healthy runs and controls per
    setup, from update 0 over the whole run (descriptive: what a rule of thumb does on healthy runs)."""
    healthy = rs.runs[(rs.runs["fault"] == "none") & (rs.runs["origin"] == "catalogue")]
    rows = []
    for (algo, variant, env, backend, control), group in healthy.groupby(
            ["algo", "algo_variant", "env", "backend", "is_control"]):
        fired = [signatures.fired(rs.metrics[r], rs.metas[r], 0) for r in group["run_id"]]
        for name in signatures.SIGNATURES:
            k = sum(name in f for f in fired)
            lo, hi = stats.wilson(k, len(group))
            rows.append({"algo": algo, "algo_variant": variant, "env": env, "backend": backend,
                         "is_control": control, "signature": name, "n_runs": len(group),
                         "rate": k / len(group), "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


# ---- the report ------------------------------------------------------------------------

def _ci(rate: float, lo: float, hi: float) -> str:
    return "-" if math.isnan(rate) else f"{pct(rate)} [{pct(lo)}, {pct(hi)}]"


def _change(c: pd.Series) -> str:
    f, h = c["progress_faulty"], c["progress_healthy"]
    if not (math.isfinite(f) and math.isfinite(h)):
        return "-"
    rel = f"{(f - h) / abs(h):+.0%}" if h else ""
    return f"{num(f)} vs {num(h)} ({rel})" if rel else f"{num(f)} vs {num(h)}"


def backend_notes(backends: list[str]) -> dict[str, tuple[dict[str, str], str]]:
    """Per backend, how each fault's form there differs from the native one and what differs for
    every run (the trainer's ``differences`` / ``common_differences``), for explaining disagreements."""
    notes = {}
    for name in backends:
        try:
            trainers = trainers_of(backend_config(name))
        except ConfigError:        # a backend no longer configured: its runs stay, unexplained
            continue
        per_fault = {k: v for t in trainers for k, v in t.differences.items()}
        notes[name] = (per_fault, " ".join(t.common_differences for t in trainers if t.common_differences))
    return notes


def agreement_markdown(agree: pd.DataFrame) -> list[str]:
    if agree.empty:
        return []
    notes = backend_notes(sorted({c.removeprefix("rate_faulty_") for c in agree.columns
                                  if c.startswith("rate_faulty_")} - {"native"}))
    out = ["## Across implementations", "",
           "Faults run on several backends: each signature that fires on either, held-out firing rate on "
           "faulty seeds (healthy seeds in brackets). **Disagreements** (the rate on faulty or on healthy seeds "
           "differs by >= 50 points) are marked and explained below each table; the backends' seed counts "
           "differ (see the summary), so a gap of one seed can be 50 points.",
           ""]
    for algo, part in agree.groupby("algo"):
        rate_cols = sorted(c for c in part.columns if c.startswith("rate_faulty_") and part[c].notna().any())
        backends = [c.removeprefix("rate_faulty_") for c in rate_cols]
        out += [f"### {algo}: {' vs '.join(backends)}", ""]
        shown = part[(part[rate_cols].fillna(0) > 0).any(axis=1) | part["expected"]]
        out += table(["fault", "setup", "onset", "signature", *backends, ""], [
            [r["fault"], f"{r['algo']}/{r['env']}", r["onset_kind"],
             f"{r['signature']} (expected)" if r["expected"] else r["signature"],
             *[f"{pct(r[f'rate_faulty_{b}'])} ({pct(r[f'rate_healthy_{b}'])})" for b in backends],
             "**disagree**" if r["disagree"] else ""] for _, r in shown.iterrows()])
        n = int(part["disagree"].sum())
        out += ["", f"{n} disagreement(s) over {len(part)} fault x signature pairs.", ""]
        faults = sorted(part.loc[part["disagree"], "fault"].unique())
        for b in backends:
            if b not in notes or not faults:
                continue
            per_fault, common = notes[b]
            out += [f"Why {b} disagrees with native ({common}):", ""]
            unexplained = ("the same mechanism on both backends, so not explained by the implementation: the seeds "
                           "differ (with few TRL seeds a 50-point gap is one run)")
            out += [f"- `{f}`: {per_fault.get(f, unexplained)}" for f in faults]
            out.append("")
    return out


PROTOCOL = """Protocol: every faulty run is read from its onset over the updates it completed; its healthy
twin (same seed, same config) and the look-alike controls are read over the same updates, so a
diverged run is never compared with a longer healthy one. **Even seeds calibrate, odd seeds are held
out**: on the calibration half each scale signature's threshold is moved out from its default (the
folk rule) to the edge of the healthy runs where they cross it, and the verdicts are decided (a
signature separates when it fires on >= 80% of faulty and <= 20% of healthy and control runs); the rates shown are the held-out ones with Wilson 95%
intervals. A fault *manifested* when evidence selected on the calibration half (separating
signatures, and up to 3 metrics with calibration AUROC >= 0.9 or <= 0.1) is significant on the
held-out half (Fisher exact / exact permutation test, one-sided, alpha 0.05, in a fixed sequence:
strongest on calibration first, stopping at the first item that fails). Metric AUROCs use all seeds, with a permutation p-value that exchanges labels
within twin pairs, Holm-corrected over the metrics of the cell."""


def markdown(cat: pd.DataFrame, baselines: pd.DataFrame, plots: dict[str, str], results_dir: str,
             views: pd.DataFrame | None = None, model_scores: pd.DataFrame | None = None) -> str:
    out = ["# Fault catalogue", "",
           "Which training bug leaves which metric signature, measured over seeds against healthy twins "
           "and healthy look-alike controls. Regenerate with (the sweep skips stored runs):", "",
           "```", f"python -m harness -m +sweep=catalogue results_dir={results_dir}",
           f"python -m harness.catalogue results_dir={results_dir}", "```", "", PROTOCOL, ""]
    if "heatmap" in plots:
        out += [f"![faults x signatures]({plots['heatmap']})", ""]
    sig_cat = cat[cat["kind"].isin(["signature", "metric"])] if "kind" in cat else cat
    cells = sig_cat.drop_duplicates("cell") if len(sig_cat) else sig_cat
    if cells.empty:
        out += ["No fault cells: the store holds no catalogue-sweep runs (python -m harness -m +sweep=catalogue).", ""]
        if model_scores is not None:
            out += model_markdown(model_scores)
        return "\n".join(out)
    out += ["## Summary", ""]
    out += table(["fault", "setup", "onset", "seeds", "diverged (updates completed)", "manifested (held-out)",
                  "revealed by", "progress: faulty vs healthy"], [
        [c["fault"] + ("".join(f" {k}={v}" for k, v in json.loads(c["fault_params"]).items())),
         c["setup"], "0" if c["onset_kind"] == "0" else f"mid ({c['onsets']})", c["n_faulty"],
         f"{c['n_diverged']} ({c['diverged_updates']})" if c["n_diverged"] else "0",
         "yes" if c["manifested"] else "**no**" if c["decidable"] else f"undecided (min p {c['min_p']:.2f})",
         c["manifested_by"] or "-", _change(c)]
        for _, c in cells.iterrows()])
    undecided = cells[~cells["manifested"] & ~cells["decidable"]]
    if not undecided.empty:
        out += ["", f"**Undecided** ({len(undecided)} cells): too few held-out seeds for the one-sided test to reach "
                f"p < {ALPHA} even if every faulty seed showed the evidence and no healthy one did (e.g. 2 vs 2 "
                "seeds: min p = 0.17). They are neither manifested nor \"no trace\"; their rates are in the "
                "cell sections and the agreement table.", ""]
    quiet = cells[~cells["manifested"] & cells["decidable"]]
    out += ["", "### Faults that left no trace", ""]
    if quiet.empty:
        out += ["Every fault cell manifested on its held-out seeds.", ""]
    else:
        out += ["No calibration-selected evidence survived on the held-out seeds for these cells (a result, "
                "not hidden): a monitor reading these metrics cannot tell them from healthy runs here.", ""]
        out += [f"- `{c['cell']}`: {c['progress_metric']} {_change(c)}; "
                f"{c['n_evidence']} item(s) selected on calibration" for _, c in quiet.iterrows()]
        out.append("")
    if views is not None and not views.empty:
        out += view_markdown(views)
    if model_scores is not None:
        out += model_markdown(model_scores)

    for _, c in cells.iterrows():
        rows = cat[cat["cell"] == c["cell"]]
        sigs = rows[rows["kind"] == "signature"]
        mets = rows[rows["kind"] == "metric"]
        mets = mets.sort_values("p_value") if "p_value" in mets else mets
        cls = FAULTS.get(c["fault"])
        out += [f"## {c['cell']}", ""]
        if cls is not None:
            out += [f"- **Injected**: {cls.description}", f"- **Form**: {c['fault_form']}"
                    + (" (telemetry only: training is healthy, a logged metric is wrong)"
                       if c["fault_kind"] == "telemetry" else ""),
                    f"- **Acts on**: {cls.acts_on}", f"- **Provenance**: {cls.provenance}"]
        out += [f"- **Runs**: {c['n_faulty']} faulty seeds ({c['n_diverged']} diverged"
                + (f", completing {c['diverged_updates']} updates after onset" if c["n_diverged"] else "")
                + f", {c['n_crashed']} crashed), {c['n_healthy']} healthy, {c['n_control']} look-alike controls; "
                f"onset update {c['onsets']}",
                f"- **Manifested** (held-out): {'yes, revealed by ' + c['manifested_by'] if c['manifested'] else 'no'}",
                f"- **{c['progress_metric']}** over the last 5 updates: {_change(c)}", ""]
        exp = sigs[sigs["expected"]]
        if len(exp):
            out += ["Expected signature (a hypothesis; decided on calibration seeds, rates on held-out seeds):", ""]
            out += table(["signature", "threshold", "faulty", "healthy", "controls", "verdict"], [
                [r["name"], num(r["threshold"]), _ci(r["rate_faulty"], r["ci_low_faulty"], r["ci_high_faulty"]),
                 _ci(r["rate_healthy"], r["ci_low_healthy"], r["ci_high_healthy"]),
                 _ci(r["rate_control"], r["ci_low_control"], r["ci_high_control"]), r["verdict"]]
                for _, r in exp.iterrows()])
            out.append("")
        fired = sigs[(sigs["rate_faulty"].fillna(0) > 0) | (sigs["rate_healthy"].fillna(0) > 0)
                     | sigs["separates_calibration"]]
        fired = fired.assign(gap=fired["rate_faulty"].fillna(0) - fired["rate_healthy"].fillna(0)).sort_values(
            "gap", ascending=False)
        if len(fired):
            out += ["Signatures that fired (held-out rates; separates = on the calibration half):", ""]
            out += table(["signature", "threshold", "faulty", "healthy", "controls", "separates"], [
                [r["name"], num(r["threshold"]), pct(r["rate_faulty"]), pct(r["rate_healthy"]),
                 pct(r["rate_control"]), "yes" if r["separates_calibration"] else ""] for _, r in fired.iterrows()])
            out.append("")
        top = mets.head(6)
        if len(top):
            out += ["Metrics that separate it best (median over the window, all seeds):", ""]
            out += table(["metric", "AUROC", "faulty is", "p (perm.)", "p (Holm)", "faulty median",
                          "healthy median"], [
                [r["name"], num(r["auroc"]), r["direction"], num(r["p_value"]), num(r["p_holm"]),
                 num(r["faulty_median"]), num(r["healthy_median"])] for _, r in top.iterrows()])
            out.append("")
        dets = rows[rows["kind"] == "detector"]
        if len(dets):
            out += ["Reference detectors (python -m harness.evaluate):", ""]
            out += table(["detector", "recall", "names the fault", "before onset", "delay", "delay to right cause",
                          "false alarms: healthy", "controls"], [
                [r["name"], pct(r["recall"]), pct(r["correct_cause"]), pct(r["before_onset"]),
                 num(r["delay_median"]), num(r["delay_right_median"]), pct(r["false_alarm_healthy"]),
                 pct(r["false_alarm_control"])] for _, r in dets.iterrows()])
            out.append("")
        mimic = sigs[(sigs["rate_faulty"] >= 0.5) & (sigs["rate_control"] >= 0.5)]
        if c["n_control"]:
            names = ", ".join(f"{r['name']} ({pct(r['rate_control'])})" for _, r in mimic.iterrows())
            out += [f"Healthy controls that mimic it: {names or 'none of its signatures fire on the controls'}", ""]
        if c["cell"] in plots:
            out += [f"![traces]({plots[c['cell']]})", ""]

    out += agreement_markdown(backend_agreement(sig_cat))
    out += ["## Healthy baselines", "",
            "Signatures at their default thresholds on healthy runs and look-alike controls, from update 0 "
            "(descriptive: how often a rule of thumb fires on runs with no bug):", ""]
    out += table(["setup", "control", "runs", "signatures that fired (rate)"], [
        [setup_label(algo, variant, env, backend), "yes" if control else "no", g["n_runs"].iloc[0],
         ", ".join(f"{r['signature']} ({pct(r['rate'])})" for _, r in g[g["rate"] > 0].iterrows()) or "none"]
        for (algo, variant, env, backend, control), g in baselines.groupby(
            ["algo", "algo_variant", "env", "backend", "is_control"])])
    out.append("")
    return "\n".join(out)


def faults_markdown(cat: pd.DataFrame, results_dir: str) -> str:
    """Every registered fault: where it applies, its form(s), what it injects, its provenance, the
    expected signature, and what the catalogue found for it on each setup (held-out seeds)."""
    sig_cat = cat[cat["kind"].isin(["signature", "metric"])] if "kind" in cat else cat
    cells = sig_cat.drop_duplicates("cell") if len(sig_cat) else pd.DataFrame(columns=["fault"])
    rows = []
    for name, cls in sorted(FAULTS.items()):
        if name == "none":
            continue
        found = []
        for _, c in cells[cells["fault"] == name].iterrows():
            onset = "" if c["onset_kind"] == "0" else " (mid-run onset)"
            found.append(f"{c['setup']}{onset}: " + (f"manifested by {c['manifested_by']}" if c["manifested"]
                                                     else "**no trace** on held-out seeds" if c.get("decidable", True)
                                                     else f"undecided ({c['n_faulty']} seeds: too few to test)")
                         + (f"; diverged {c['n_diverged']}/{c['n_faulty']}" if c["n_diverged"] else ""))
        rows.append([f"`{name}`", "/".join(cls.algos), "/".join(cls.backends), " or ".join(cls.forms()), cls.kind,
                     cls.description, cls.provenance, ", ".join(cls.expected) or "-",
                     "<br>".join(found) or "not in this catalogue run"])
    out = ["# Faults", "",
           f"Every fault in the registry (`faults/`), with what the catalogue in `{results_dir}/catalogue` found "
           "for it (regenerated by `python -m harness.catalogue`). Form: how users meet the bug (the first is the "
           "default; `fault.form=` picks another). Provenance cites only reports read that describe the bug; "
           "`synthetic` says none was found. Expected signatures are hypotheses the catalogue tests.", ""]
    out += table(["fault", "algos", "backends", "form", "kind", "what is injected", "provenance", "expected signature",
                  "catalogue finding"], [[str(v).replace("|", "\\|") for v in row] for row in rows])
    return "\n".join(out) + "\n"


def view_markdown(views: pd.DataFrame) -> list[str]:
    """Which cells manifested in which framework view (the metrics that framework logs)."""
    cols = sorted(views["view"].unique(), key=lambda v: (v != "canonical", v))
    pivot = views.pivot_table(index="cell", columns="view", values="manifested", aggfunc="first")
    out = ["### Per framework view", "",
           "The same protocol, evaluated on what each framework would have logged of these runs (its "
           "metric names, estimators, cadence; a metric it does not log is absent): yes = manifested on "
           "held-out seeds, no = no trace in that view, blank = the view does not apply.", ""]
    out += table(["cell", *cols], [[cell, *["" if pd.isna(row.get(v)) else ("yes" if row.get(v) else "**no**")
                                            for v in cols]] for cell, row in pivot.iterrows()])
    out.append("")
    return out


def extra_training_runs(rs: RunSet) -> list[str]:
    """Catalogue runs that train the diagnosis model beside the diverse dataset: its calibration
    seeds (never scored by the model's protocols: one configuration per setup). Its held-out seeds
    stay out, so `evaluate detector=learned` scores them out of sample, and so do TRL-backend runs
    (their TRL logs are a test set: benchmarks/realworld/trl_backend_logs.py)."""
    runs = rs.runs
    return runs.loc[(runs["origin"] == "catalogue") & (runs["backend"] != "trl")
                    & (runs["seed"].map(split_of) == "calibration"), "run_id"].tolist()


def model_markdown(scores: pd.DataFrame) -> list[str]:
    """The diagnosis model's out-of-sample scores."""
    if scores.empty:
        return []
    out = ["## Diagnosis model (out of sample)", "",
           "`python -m harness.diagnose` and `detector=learned` use one model per algorithm and framework view, "
           "fitted on the diverse dataset (python -m harness -m +sweep=dataset) and the catalogue sweep's calibration "
           "(even) seeds (one configuration per setup, many seeds per fault; never scored here, and its held-out seeds "
           "are what `detector=learned` is scored on in the per-fault tables above). Every score below is on diverse "
           "runs the model was not fitted on: held-out runs (their seeds and sampled configurations), a whole env held "
           "out (with the catalogue runs of that env), "
           "hyperparameter regions held out, and, for the *unknown* answer, each fault left out of training "
           "(scored on its runs: the right answer is then \"anomalous, cause unknown\"). Top-1: the answer equals "
           "the injected fault, on faulty logs of faults the model knows; healthy: healthy logs answered healthy; "
           "ECE: calibration error of the top-1 probability.", ""]
    kinds = scores[scores["kind"] != "left-out fault"]
    out += table(["algo", "view", "held out", "logs", "top-1 (faulty)", "healthy called healthy", "ECE"], [
        [r["algo"], r["view"], r["protocol"], int(r["n"]), pct(r["top1_faulty"]), pct(r["healthy_called_healthy"]),
         num(r["ece"], ".3f")] for _, r in kinds.sort_values(["algo", "view", "kind"]).iterrows()])
    left = scores[(scores["kind"] == "left-out fault") & scores["n_unseen"].notna()]
    if len(left):
        out += ["", "Faults left out of training, answered on their own runs (canonical view):", ""]
        out += table(["algo", "fault left out", "logs", "unknown", "healthy", "another fault"], [
            [r["algo"], r["protocol"].removeprefix("fault ").removesuffix(" left out"), int(r["n_unseen"]),
             pct(r["unseen_called_unknown"]), pct(r["unseen_called_healthy"]),
             pct(1 - r["unseen_called_unknown"] - r["unseen_called_healthy"])] for _, r in left.iterrows()])
    held = scores[(scores["kind"] == "held-out runs") & (scores["view"] == "canonical")]
    for _, r in held.iterrows():
        per = r.get("per_class") or {}
        out += ["", f"Per fault, held-out {r['algo']} runs (canonical view): right answer, and what it was taken for:", ""]
        out += table(["label", "logs", "right", "answers"], [
            [label, v["n"], pct(v["right"]), ", ".join(f"{k} {n}" for k, n in v["answers"].items())]
            for label, v in sorted(per.items())])
    out.append("")
    return out


def write(settings: CatalogueSettings) -> dict[str, Path]:
    """Build and write the catalogue (and dataset, and the diagnosis model); returns the paths written."""
    rs = RunSet.load(settings.results_dir)
    if rs.runs.empty:
        raise ConfigError(f"no complete runs under {settings.results_dir}/runs")
    out_dir = settings.results_dir / "catalogue"
    written = {}
    scores = pd.DataFrame()
    diverse = rs.runs.loc[rs.runs["origin"] == "diverse", "run_id"].tolist()
    if diverse and settings.model:
        from harness.analysis.model import fit_and_evaluate

        model_file = out_dir / "model" / "diagnosis.joblib"
        extra = extra_training_runs(rs) if settings.model_catalogue_runs else []
        scores = fit_and_evaluate(settings.results_dir, diverse, model_file, left_out=settings.left_out,
                                  kind=settings.model_kind, extra_ids=extra)
        atomic_write_parquet(out_dir / "model" / "scores.parquet",
                             scores.assign(per_class=scores.get("per_class", pd.Series(dtype=object)).map(
                                 lambda v: json.dumps(v) if isinstance(v, dict) else None)))
        written["model"] = model_file
    elif settings.model:
        print("no runs of the diverse dataset (python -m harness -m +sweep=dataset): no diagnosis model fitted")
    cat = build(rs, settings.n_mc, catalogue_dir=out_dir)
    views = pd.DataFrame()
    if settings.views and not cat.empty:
        canonical = cat[cat["kind"].isin(["signature", "metric"])].drop_duplicates("cell")
        views = pd.concat([canonical[["cell", "manifested", "manifested_by"]].assign(view="canonical"),
                           view_manifestation(rs, settings.n_mc)], ignore_index=True)
        atomic_write_parquet(out_dir / "views.parquet", views)
        written["views"] = out_dir / "views.parquet"
    baselines = healthy_baselines(rs)
    plots: dict[str, str] = {}
    if settings.plots and not cat.empty:
        from harness.analysis import plots as plotting

        plots = plotting.write_all(cat, rs, out_dir / "plots", settings.trace_metrics)
    if not cat.empty:
        atomic_write_parquet(out_dir / "catalogue.parquet", cat)
        written["catalogue"] = out_dir / "catalogue.parquet"
    atomic_write_parquet(out_dir / "baselines.parquet", baselines)
    agreement = backend_agreement(cat[cat["kind"] == "signature"]) if not cat.empty else pd.DataFrame()
    if not agreement.empty:
        atomic_write_parquet(out_dir / "backends.parquet", agreement)
        written["backends"] = out_dir / "backends.parquet"
    atomic_write_bytes(out_dir / "CATALOGUE.md",
                       markdown(cat, baselines, plots, str(settings.results_dir), views=views,
                                model_scores=scores).encode())
    written["markdown"] = out_dir / "CATALOGUE.md"
    atomic_write_bytes(out_dir / "FAULTS.md", faults_markdown(cat, str(settings.results_dir)).encode())
    written["faults"] = out_dir / "FAULTS.md"
    if settings.dataset:
        from harness.analysis import dataset

        command = f"python -m harness.catalogue results_dir={settings.results_dir}"
        written.update(dataset.write(rs, settings.results_dir / "dataset", command))
    return written

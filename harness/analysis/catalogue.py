"""``python -m harness.catalogue``: which bug leaves which metric signature, measured over seeds.

Reads every stored run under ``results_dir`` and writes ``results_dir/catalogue/``:

- ``catalogue.parquet``: one row per (cell, signature) and per (cell, metric). For a
  signature: its firing rate on the faulty seeds, the healthy seeds and the look-alike
  controls, and a verdict when it is one the fault is expected to leave. For a metric: the
  AUROC with which a per-run summary (the median after onset) separates faulty from healthy
  runs, its direction and a bootstrap interval over seeds. Every row repeats the cell's
  summary: run counts, how many diverged or crashed, and whether the fault manifested.
- ``CATALOGUE.md``: one readable section per fault.
- ``plots/``: a heatmap of faults x signatures and, per cell, metric traces faulty vs healthy.

and the labelled dataset in ``results_dir/dataset/`` (see harness/dataset.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from faults import FAULTS
from harness.analysis import signatures
from harness.analysis.runs import Cell, RunSet
from harness.config import ConfigError, check_range, locate, setup_label
from harness.detection import REFERENCE
from harness.markdown import num, pct, table
from harness.metrics import CANONICAL, applicable
from harness.store import atomic_write_bytes, atomic_write_parquet

SEPARATES = (0.8, 0.2)   # a signature separates: fires on >= 80% of faulty and <= 20% of healthy seeds
AUROC_MANIFEST = 0.95    # ... or a metric separates with AUROC >= 0.95 and a CI lower bound >= 0.8,
MIN_SEEDS = 3            # ... on at least 3 faulty and 3 healthy seeds
SHOWN = 3                # metrics named in manifested_by


@dataclass(frozen=True)
class CatalogueSettings:
    results_dir: Path
    n_boot: int
    trace_metrics: tuple[str, ...]
    plots: bool
    dataset: bool

    @classmethod
    def from_cfg(cls, cfg: DictConfig) -> CatalogueSettings:
        check_range("", "n_boot", cfg.n_boot, ge=10, le=100_000, kind=int)
        trace = tuple(cfg.trace_metrics or ())
        unknown = [m for m in trace if m not in CANONICAL]
        if unknown:
            raise ConfigError(f"unknown metric {unknown[0]!r} in trace_metrics; valid: {', '.join(CANONICAL)}")
        root = Path(cfg.results_dir)
        if not (root / "runs").is_dir():
            raise ConfigError(f"no runs under {root}/runs: train some first (python -m harness ...)")
        return cls(root, int(cfg.n_boot), trace, bool(cfg.plots), bool(cfg.dataset))


# ---- statistics ------------------------------------------------------------------------

def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a faulty summary > a healthy one), ties counting half (Mann-Whitney U / n m)."""
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def bootstrap_auroc(pos: np.ndarray, neg: np.ndarray, n_boot: int, rng: np.random.Generator
                    ) -> tuple[float, float]:
    """95% percentile interval of the AUROC, resampling faulty and healthy seeds separately
    (undefined below 2 seeds a side, where every resample is the same)."""
    if len(pos) < 2 or len(neg) < 2:
        return math.nan, math.nan
    p = pos[rng.integers(0, len(pos), size=(n_boot, len(pos)))]
    n = neg[rng.integers(0, len(neg), size=(n_boot, len(neg)))]
    greater = (p[:, :, None] > n[:, None, :]).mean(axis=(1, 2))
    ties = (p[:, :, None] == n[:, None, :]).mean(axis=(1, 2))
    lo, hi = np.percentile(greater + 0.5 * ties, [2.5, 97.5])
    return float(lo), float(hi)


def run_summary(metrics: pd.DataFrame, onset: int, names: list[str]) -> dict[str, float]:
    """A run's summary for the AUROC: the median of each metric from the onset on."""
    post = signatures.post_onset(metrics, onset)
    out = {}
    for name in names:
        col = post[name].dropna()
        out[name] = float(col.median()) if len(col) else math.nan
    return out


def verdict(rate_faulty: float, rate_healthy: float) -> str:
    if math.isnan(rate_faulty):
        return "no data"
    if rate_faulty >= SEPARATES[0] and not rate_healthy > SEPARATES[1]:
        return "confirmed"
    if rate_faulty < 0.5:
        return "refuted"
    if rate_healthy > SEPARATES[1]:
        return "not specific (fires on healthy runs too)"
    return "partly (fires on 50-80% of faulty seeds)"


# ---- the catalogue ---------------------------------------------------------------------

def _rate(fired: dict[str, dict[str, bool]], run_ids: list[str], name: str) -> float:
    return float(np.mean([fired[r][name] for r in run_ids])) if run_ids else math.nan


def cell_rows(cell: Cell, rs: RunSet, n_boot: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    onset = int(cell.info["onset"])
    fired = {}
    for rid in cell.faulty + cell.healthy + cell.controls:
        results = signatures.evaluate(rs.metrics[rid], rs.metas[rid], onset)
        fired[rid] = {name: res.fired for name, res in results.items()}
    statuses = [rs.metas[r]["status"] for r in cell.faulty]
    fault_cls = FAULTS.get(cell.info["fault"])
    expected = list(fault_cls.expected) if fault_cls else []

    sig_rows = []
    recorded = applicable(cell.info["algo"])
    for name, sig in signatures.SIGNATURES.items():
        if sig.metric not in recorded:       # e.g. value_to_zero on GRPO, which has no critic
            sig_rows.append({"kind": "signature", "name": name, "expected": name in expected,
                             "rate_faulty": math.nan, "rate_healthy": math.nan, "rate_control": math.nan,
                             "verdict": f"n/a ({sig.metric} is not recorded for {cell.info['algo']})"
                             if name in expected else None})
            continue
        rf, rh, rc = (_rate(fired, ids, name) for ids in (cell.faulty, cell.healthy, cell.controls))
        sig_rows.append({"kind": "signature", "name": name, "expected": name in expected,
                         "rate_faulty": rf, "rate_healthy": rh, "rate_control": rc,
                         "verdict": verdict(rf, rh) if name in expected else None})

    names = list(applicable(cell.info["algo"]))
    summaries = {rid: run_summary(rs.metrics[rid], onset, names) for rid in cell.faulty + cell.healthy}
    metric_rows = []
    for name in names:
        pos = np.array([summaries[r][name] for r in cell.faulty])
        neg = np.array([summaries[r][name] for r in cell.healthy])
        pos, neg = pos[~np.isnan(pos)], neg[~np.isnan(neg)]
        a = auroc(pos, neg)
        direction = "higher" if not a < 0.5 else "lower"
        lo, hi = bootstrap_auroc(pos if direction == "higher" else -pos,
                                 neg if direction == "higher" else -neg, n_boot, rng)
        metric_rows.append({"kind": "metric", "name": name, "expected": False,
                            "auroc": a if direction == "higher" else 1 - a, "direction": direction,
                            "auroc_ci_low": lo, "auroc_ci_high": hi,
                            "faulty_median": float(np.median(pos)) if len(pos) else math.nan,
                            "healthy_median": float(np.median(neg)) if len(neg) else math.nan,
                            "n_faulty_finite": len(pos), "n_healthy_finite": len(neg)})

    separating_sigs = [r["name"] for r in sig_rows
                       if r["rate_faulty"] >= SEPARATES[0] and not r["rate_healthy"] > SEPARATES[1]
                       and not math.isnan(r["rate_healthy"])]
    separating_metrics = [r["name"] for r in sorted(metric_rows, key=lambda r: -r["auroc"])
                          if r["auroc"] >= AUROC_MANIFEST and r["auroc_ci_low"] >= 0.8
                          and r["n_faulty_finite"] >= MIN_SEEDS and r["n_healthy_finite"] >= MIN_SEEDS]
    summary = {
        **{k: cell.info[k] for k in ("fault", "fault_params", "onset", "algo", "algo_variant", "env",
                                     "backend")},  # + the rest of SUMMARY_COLUMNS
        "cell": cell.label, "base": cell.info["base"],
        "n_faulty": len(cell.faulty), "n_healthy": len(cell.healthy), "n_control": len(cell.controls),
        "n_diverged": statuses.count("diverged"), "n_crashed": statuses.count("crashed"),
        "manifested": bool(cell.healthy) and bool(separating_sigs or separating_metrics),
        "manifested_by": ", ".join(separating_sigs + [f"{m} (AUROC)" for m in separating_metrics[:SHOWN]]
                                   + ([f"+{len(separating_metrics) - SHOWN} metrics"]
                                      if len(separating_metrics) > SHOWN else [])),
    }
    return [{**summary, **row} for row in sig_rows + metric_rows]


SUMMARY_COLUMNS = ("fault", "fault_params", "onset", "algo", "algo_variant", "env", "backend", "cell", "base",
                   "n_faulty", "n_healthy", "n_control", "n_diverged", "n_crashed", "manifested", "manifested_by")


def build(rs: RunSet, n_boot: int = 1000, seed: int = 0, detectors: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cat = pd.DataFrame([row for cell in rs.cells() for row in cell_rows(cell, rs, n_boot, rng)])
    if detectors and not cat.empty:
        cat = pd.concat([cat, detector_rows(rs, cat)], ignore_index=True)
    return cat


def detector_rows(rs: RunSet, cat: pd.DataFrame) -> pd.DataFrame:
    """Each reference detector's recall, correct-cause rate and false-alarm rates per cell, so
    the rules of thumb are measured next to the signatures."""
    from harness.analysis import dataset
    from harness.detection.scoring import evaluate

    runs = dataset.runs_table(rs)
    data = dataset.data_table(rs, runs)
    cells = {c.label: c for c in rs.cells()}
    rows = []
    for name, target in REFERENCE.items():
        out = evaluate(locate(target)(), (data, runs), name=name).runs.set_index("run_id")
        for label, cell in cells.items():
            faulty, healthy, controls = (out.loc[ids] for ids in (cell.faulty, cell.healthy, cell.controls))
            rows.append({"cell": label, "kind": "detector", "name": name,
                         "recall": signatures.share(faulty["alarmed_after_onset"]),
                         "correct_cause": signatures.share(faulty["named_fault"] == cell.info["fault"]),
                         "false_alarm_healthy": signatures.share(healthy["alarmed"]),
                         "false_alarm_control": signatures.share(controls["alarmed"])})
    summary = cat.drop_duplicates("cell")[list(SUMMARY_COLUMNS)].set_index("cell")
    return pd.DataFrame(rows).join(summary, on="cell")


def backend_agreement(cat: pd.DataFrame) -> pd.DataFrame:
    """For faults run on more than one backend (same algorithm, env, parameters and onset): each
    signature's firing rates side by side, and whether the backends disagree (the rate differs
    by >= 0.5, or the signature separates the fault from healthy runs on one backend only)."""
    sigs = cat[cat["kind"] == "signature"]
    keys = ["fault", "fault_params", "onset", "algo", "algo_variant", "env"]
    rows = []
    for key, group in sigs.groupby(keys):
        backends = sorted(group["backend"].unique())
        if len(backends) < 2:
            continue
        rates = group.set_index(["name", "backend"])[["rate_faulty", "rate_healthy"]]
        for name in group["name"].unique():
            row = {**dict(zip(keys, key)), "signature": name,
                   "expected": bool(group[group["name"] == name]["expected"].iloc[0])}
            separates = {}
            for b in backends:
                rf, rh = rates.loc[(name, b), "rate_faulty"], rates.loc[(name, b), "rate_healthy"]
                row[f"rate_faulty_{b}"], row[f"rate_healthy_{b}"] = rf, rh
                separates[b] = rf >= SEPARATES[0] and rh <= SEPARATES[1]
            faulty_rates = [row[f"rate_faulty_{b}"] for b in backends]
            row["disagree"] = bool(max(faulty_rates) - min(faulty_rates) >= 0.5 or len(set(separates.values())) > 1)
            rows.append(row)
    return pd.DataFrame(rows)


def healthy_baselines(rs: RunSet) -> pd.DataFrame:
    """How often each signature fires on healthy runs and on controls, per setup (from update 0)."""
    healthy = rs.runs[rs.runs["fault"] == "none"]
    rows = []
    for (algo, variant, env, backend, control), group in healthy.groupby(
            ["algo", "algo_variant", "env", "backend", "is_control"]):
        fired = [signatures.fired(rs.metrics[r], rs.metas[r], 0) for r in group["run_id"]]
        for name in signatures.SIGNATURES:
            rows.append({"algo": algo, "algo_variant": variant, "env": env, "backend": backend,
                         "is_control": control, "signature": name, "n_runs": len(group),
                         "rate": float(np.mean([name in f for f in fired]))})
    return pd.DataFrame(rows)


# ---- the report ------------------------------------------------------------------------

def agreement_markdown(agree: pd.DataFrame) -> list[str]:
    if agree.empty:
        return []
    rate_cols = sorted(c for c in agree.columns if c.startswith("rate_faulty_"))
    backends = [c.removeprefix("rate_faulty_") for c in rate_cols]
    out = ["## Across implementations", "",
           "Faults run on several backends (the native PPO and stable-baselines3's): each signature that "
           "fires on either, firing rate on faulty seeds (healthy seeds in brackets). **Disagreements** "
           "(rates differ by >= 50 points, or the signature separates the fault on one backend only) "
           "are marked.", ""]
    shown = agree[(agree[rate_cols].fillna(0) > 0).any(axis=1) | agree["expected"]]
    out += table(["fault", "setup", "signature", *backends, ""], [
        [r["fault"], f"{r['algo']}/{r['env']}", f"{r['signature']} (expected)" if r["expected"] else r["signature"],
         *[f"{pct(r[f'rate_faulty_{b}'])} ({pct(r[f'rate_healthy_{b}'])})" for b in backends],
         "**disagree**" if r["disagree"] else ""] for _, r in shown.iterrows()])
    n = int(agree["disagree"].sum())
    out += ["", f"{n} disagreement(s) over {len(agree)} fault x signature pairs.", ""]
    return out


def markdown(cat: pd.DataFrame, baselines: pd.DataFrame, plots: dict[str, str], results_dir: str) -> str:
    out = ["# Fault catalogue", "",
           "Which training bug leaves which metric signature, measured over seeds against healthy "
           "twins and healthy look-alike controls. Regenerate with (the sweep skips stored runs):", "",
           "```", f"python -m harness -m +sweep=catalogue results_dir={results_dir}",
           f"python -m harness.catalogue results_dir={results_dir}", "```", "",
           "Rates are the share of seeds on which a signature fired after the fault's onset; AUROC "
           "is how well the per-run median of a metric after onset separates faulty from healthy "
           f"seeds (1 = perfectly), with a 95% bootstrap interval over seeds. A fault *manifested* "
           f"when a signature fires on >= {SEPARATES[0]:.0%} of faulty and <= {SEPARATES[1]:.0%} of "
           f"healthy seeds, or a metric reaches AUROC >= {AUROC_MANIFEST} with the interval's lower "
           f"bound >= 0.8 (on >= {MIN_SEEDS} seeds a side).", ""]
    if "heatmap" in plots:
        out += [f"![faults x signatures]({plots['heatmap']})", ""]
    cells = cat.drop_duplicates("cell")
    out += ["## Summary", ""]
    out += table(["fault", "setup", "seeds", "diverged", "crashed", "manifested", "revealed by"], [
        [*c["cell"].split(" | "), c["n_faulty"], c["n_diverged"], c["n_crashed"],
         "yes" if c["manifested"] else "**no**", c["manifested_by"] or "-"] for _, c in cells.iterrows()])
    out.append("")

    for _, c in cells.iterrows():
        rows = cat[cat["cell"] == c["cell"]]
        sigs = rows[rows["kind"] == "signature"]
        mets = rows[rows["kind"] == "metric"].sort_values(["auroc", "auroc_ci_low"], ascending=False)
        cls = FAULTS.get(c["fault"])
        out += [f"## {c['cell']}", ""]
        if cls is not None:
            out += [f"- **Injected**: {cls.description}", f"- **Acts on**: {cls.acts_on}",
                    f"- **Provenance**: {cls.provenance}"]
        out += [f"- **Runs**: {c['n_faulty']} faulty seeds ({c['n_diverged']} diverged, {c['n_crashed']} "
                f"crashed), {c['n_healthy']} healthy, {c['n_control']} look-alike controls; onset update "
                f"{c['onset']}",
                f"- **Manifested**: {'yes, revealed by ' + c['manifested_by'] if c['manifested'] else 'no: no signature or metric separates it from healthy runs'}",
                ""]
        exp = sigs[sigs["expected"]]
        if len(exp):
            out += ["Expected signature (a hypothesis; the data decide):", ""]
            out += table(["signature", "faulty", "healthy", "controls", "verdict"], [
                [r["name"], pct(r["rate_faulty"]), pct(r["rate_healthy"]), pct(r["rate_control"]), r["verdict"]]
                for _, r in exp.iterrows()])
            out.append("")
        best = sigs[(sigs["rate_faulty"] > 0) | (sigs["rate_healthy"] > 0)].assign(
            gap=lambda d: d["rate_faulty"] - d["rate_healthy"].fillna(0)).sort_values("gap", ascending=False)
        if len(best):
            out += ["Signatures that fired:", ""]
            out += table(["signature", "faulty", "healthy", "controls"], [
                [r["name"], pct(r["rate_faulty"]), pct(r["rate_healthy"]), pct(r["rate_control"])]
                for _, r in best.iterrows()])
            out.append("")
        top = mets.head(6)
        if len(top):
            out += ["Metrics that separate it best (median after onset):", ""]
            out += table(["metric", "AUROC [95% CI]", "faulty is", "faulty median", "healthy median"], [
                [r["name"], f"{num(r['auroc'])} [{num(r['auroc_ci_low'])}, {num(r['auroc_ci_high'])}]",
                 r["direction"], num(r["faulty_median"]), num(r["healthy_median"])] for _, r in top.iterrows()])
            out.append("")
        dets = rows[rows["kind"] == "detector"]
        if len(dets):
            out += ["Reference detectors (python -m harness.evaluate):", ""]
            out += table(["detector", "recall", "names the fault", "false alarms: healthy", "controls"], [
                [r["name"], pct(r["recall"]), pct(r["correct_cause"]), pct(r["false_alarm_healthy"]),
                 pct(r["false_alarm_control"])] for _, r in dets.iterrows()])
            out.append("")
        mimic = sigs[(sigs["rate_faulty"] >= 0.5) & (sigs["rate_control"] >= 0.5)]
        if c["n_control"]:
            names = ", ".join(f"{r['name']} ({pct(r['rate_control'])})" for _, r in mimic.iterrows())
            out += [f"Healthy controls that mimic it: {names or 'none of its signatures fire on the controls'}", ""]
        if c["cell"] in plots:
            out += [f"![traces]({plots[c['cell']]})", ""]

    out += agreement_markdown(backend_agreement(cat))
    out += ["## Healthy baselines", "",
            "Signatures that fire on healthy runs (false alarms by construction) and on look-alike "
            "controls, from update 0:", ""]
    out += table(["setup", "control", "runs", "signatures that fired (rate)"], [
        [setup_label(algo, variant, env, backend), "yes" if control else "no",
         g["n_runs"].iloc[0],
         ", ".join(f"{r['signature']} ({pct(r['rate'])})" for _, r in g[g["rate"] > 0].iterrows()) or "none"]
        for (algo, variant, env, backend, control), g in baselines.groupby(
            ["algo", "algo_variant", "env", "backend", "is_control"])])
    out.append("")
    return "\n".join(out)


def write(settings: CatalogueSettings) -> dict[str, Path]:
    """Build and write the catalogue (and dataset); returns the paths written."""
    rs = RunSet.load(settings.results_dir)
    if rs.runs.empty:
        raise ConfigError(f"no complete runs under {settings.results_dir}/runs")
    out_dir = settings.results_dir / "catalogue"
    cat = build(rs, settings.n_boot)
    baselines = healthy_baselines(rs)
    written = {}
    plots: dict[str, str] = {}
    if settings.plots and not cat.empty:
        from harness.analysis import plots as plotting

        plots = plotting.write_all(cat, rs, out_dir / "plots", settings.trace_metrics)
    if not cat.empty:
        atomic_write_parquet(out_dir / "catalogue.parquet", cat)
        written["catalogue"] = out_dir / "catalogue.parquet"
    atomic_write_parquet(out_dir / "baselines.parquet", baselines)
    agreement = backend_agreement(cat) if not cat.empty else pd.DataFrame()
    if not agreement.empty:
        atomic_write_parquet(out_dir / "backends.parquet", agreement)
        written["backends"] = out_dir / "backends.parquet"
    atomic_write_bytes(out_dir / "CATALOGUE.md",
                       markdown(cat, baselines, plots, str(settings.results_dir)).encode())
    written["markdown"] = out_dir / "CATALOGUE.md"
    if settings.dataset:
        from harness.analysis import dataset

        command = f"python -m harness.catalogue results_dir={settings.results_dir}"
        written.update(dataset.write(rs, settings.results_dir / "dataset", command))
    return written

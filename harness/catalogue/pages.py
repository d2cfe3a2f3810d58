"""The catalogue's page per fault, ``faults/<fault>.md``: what the fault is (mechanism, forms,
provenance, expected signature), its verdict on each cell, the per-view verdicts, then each cell's
tables (signatures with held-out rates and intervals, metric AUROCs, reference detectors) and trace
plot, and the backends' agreement on it. Rendering only, from the frames the catalogue writes."""

from __future__ import annotations

import inspect
import sys

import pandas as pd

from faults import FAULTS
from harness.agents.base import backends_of
from harness.catalogue.report import (
    BackendNotes,
    agreement_markdown,
    commands,
    n_unchanged,
    page_of,
    progress_change,
    rate_ci,
    verdict,
    view_markdown,
)
from harness.catalogue.rows import CatalogueTables
from harness.markdown import num, pct, table


def _signature_tables(sigs: pd.DataFrame) -> list[str]:
    """A cell's expected signatures (with intervals and verdicts) and every signature that fired."""
    out = []
    exp = sigs[sigs["expected"]]
    if len(exp):
        out += ["Expected signature (a hypothesis; decided on calibration seeds, rates on held-out seeds):", ""]
        out += table(["signature", "threshold", "faulty", "healthy", "controls", "verdict"], [
            [r["name"], num(r["threshold"]), rate_ci(r["rate_faulty"], r["ci_low_faulty"], r["ci_high_faulty"]),
             rate_ci(r["rate_healthy"], r["ci_low_healthy"], r["ci_high_healthy"]),
             rate_ci(r["rate_control"], r["ci_low_control"], r["ci_high_control"]), r["verdict"]]
            for _, r in exp.iterrows()])
        out.append("")
    fired = sigs[(sigs["rate_faulty"].fillna(0) > 0) | (sigs["rate_healthy"].fillna(0) > 0)
                 | sigs["separates_calibration"].astype(bool)]
    fired = fired.assign(gap=fired["rate_faulty"].fillna(0) - fired["rate_healthy"].fillna(0)).sort_values(
        "gap", ascending=False)
    if len(fired):
        out += ["Signatures that fired (held-out rates with Wilson 95% intervals; separates = on the calibration "
                "half):", ""]
        out += table(["signature", "threshold", "faulty", "healthy", "controls", "separates"], [
            [r["name"], num(r["threshold"]), rate_ci(r["rate_faulty"], r["ci_low_faulty"], r["ci_high_faulty"]),
             rate_ci(r["rate_healthy"], r["ci_low_healthy"], r["ci_high_healthy"]),
             rate_ci(r["rate_control"], r["ci_low_control"], r["ci_high_control"]),
             "yes" if r["separates_calibration"] else ""] for _, r in fired.iterrows()])
        out.append("")
    return out


def _metric_table(mets: pd.DataFrame) -> list[str]:
    """A cell's six metrics with the smallest all-seed p-values."""
    top = mets.sort_values("p_value").head(6)
    if not len(top):
        return []
    out = ["Metrics that separate it best (AUROC and median over the window, all seeds; held-out AUROC where the "
           "metric was selected on the calibration seeds):", ""]
    out += table(["metric", "AUROC", "faulty is", "p (perm.)", "p (Holm)", "held-out AUROC", "faulty median",
                  "healthy median"], [
        [r["name"], num(r["auroc"]), r["direction"], num(r["p_value"]), num(r["p_holm"]),
         num(r.get("heldout_auroc")), num(r["faulty_median"]), num(r["healthy_median"])] for _, r in top.iterrows()])
    out.append("")
    return out


def _detector_table(dets: pd.DataFrame) -> list[str]:
    """A cell's reference detector scores."""
    if not len(dets):
        return []
    out = ["Reference detectors (python -m harness.evaluate):", ""]
    out += table(["detector", "recall", "names the fault", "before onset", "delay", "delay to right cause",
                  "false alarms: healthy", "controls"], [
        [r["name"], pct(r["recall"]), pct(r["correct_cause"]), pct(r["before_onset"]),
         num(r["delay_median"]), num(r["delay_right_median"]), pct(r["false_alarm_healthy"]),
         pct(r["false_alarm_control"])] for _, r in dets.iterrows()])
    out.append("")
    return out


def _cell_facts(c: pd.Series, tables: CatalogueTables) -> list[str]:
    """A cell section's heading and bullet list: its form, its runs, the verdict, the progress."""
    out = [f"## {c['cell']}", ""]
    if isinstance(c.get("fault_form"), str):
        out.append(f"- **Form**: {c['fault_form']}" + (" (telemetry only: training is healthy, a logged metric is "
                                                      "wrong)" if c["fault_kind"] == "telemetry" else ""))
    out += [f"- **Runs**: {c['n_faulty']} faulty seeds ({c['n_diverged']} diverged"
            + (f", completing {c['diverged_updates']} updates after onset" if c["n_diverged"] else "")
            + f", {c['n_crashed']} crashed"
            + (f", {n_unchanged(c)} logged exactly what their twins did" if n_unchanged(c) else "")
            + f"), {c['n_healthy']} healthy, {c['n_control']} look-alike controls; onset update {c['onsets']}",
            f"- **Verdict** (held-out): {verdict(c, tables.signatures, tables.metrics)}"
            + (f"; revealed by {c['manifested_by']}" if c["manifested"] else ""),
            f"- **{c['progress_metric']}** over the last 5 updates, faulty vs healthy: {progress_change(c)}", ""]
    return out


def _cell_section(c: pd.Series, tables: CatalogueTables, plots: dict[str, str], build: str) -> list[str]:
    """One cell's section: facts, signature tables, best metrics, detectors, mimicking controls, its
    trace plot (``plots``: cell label -> path relative to the catalogue directory; drawn by ``build``)."""
    sigs = tables.signatures[tables.signatures["cell"] == c["cell"]]
    out = _cell_facts(c, tables) + _signature_tables(sigs)
    out += _metric_table(tables.metrics[tables.metrics["cell"] == c["cell"]])
    out += _detector_table(tables.detectors[tables.detectors["cell"] == c["cell"]])
    mimic = sigs[(sigs["rate_faulty"] >= 0.5) & (sigs["rate_control"] >= 0.5)]
    if c["n_control"]:
        names = ", ".join(f"{r['name']} ({pct(r['rate_control'])})" for _, r in mimic.iterrows())
        out += [f"Healthy controls that mimic it: {names or 'none of its signatures fire on the controls'}", ""]
    if c["cell"] in plots:
        out += [f"Traces, faulty vs healthy (median and interquartile band over seeds; drawn from the runs by "
                f"`{build}`):", "", f"![traces](../{plots[c['cell']]})", ""]
    return out


def mechanism(fault: str) -> str:
    """What a fault is, in its own words: its module's docstring (else its class's, else its
    description); empty for a fault no longer registered."""
    cls = FAULTS.get(fault)
    if cls is None:
        return ""
    module = sys.modules.get(cls.__module__)
    doc = module.__doc__ if module is not None and module.__doc__ else cls.__doc__ or ""
    doc = inspect.cleandoc(doc)
    return cls.description if not doc or doc.startswith(f"{cls.__name__}(") else doc


def _about(fault: str, cells: pd.DataFrame) -> list[str]:
    """The page's first section: mechanism, what is injected, where it applies, forms, provenance,
    expected signature, and the code version its cells ran."""
    cls = FAULTS.get(fault)
    if cls is None:
        return ["## Mechanism", "", f"`{fault}` is no longer in the fault registry (`faults/`): its cells below "
                "are what the catalogue measured when it was.", ""]
    expected = ", ".join(cls.expected) or (f"none: {cls.no_trace_expected}" if cls.no_trace_expected else "-")
    out = ["## Mechanism", "", mechanism(fault), "",
           f"- **What is injected**: {cls.description}",
           f"- **Applies to**: {'/'.join(cls.algos)} on {'/'.join(backends_of(cls))}; acts on {cls.acts_on}",
           f"- **Form**: {' or '.join(cls.forms())} (the first is the default; `fault.form=` picks another)"
           + ("; kind: " + cls.kind if cls.kind else ""),
           f"- **Provenance**: {cls.provenance}",
           f"- **Expected signature** (a hypothesis the catalogue tests): {expected}"]
    if "fault_version" in cells and cells["fault_version"].notna().any():
        ran = sorted({int(v) for v in cells["fault_version"].dropna()})
        out.append(f"- **Code version**: {cls.version} (its cells ran version {', '.join(map(str, ran))})")
    return out + [""]


def _verdicts(cells: pd.DataFrame, tables: CatalogueTables) -> list[str]:
    """One row per cell: setup, onset, seeds, the verdict with its held-out rate, progress."""
    out = ["## Verdicts", "",
           "Per cell (setup x onset), on the held-out seeds; the cell's section below has every table.", ""]
    out += table(["cell", "setup", "onset", "seeds", "verdict (held-out)", "progress: faulty vs healthy"], [
        [c["cell"], c["setup"], "0" if c["onset_kind"] == "0" else f"mid ({c['onsets']})",
         c["n_faulty"], verdict(c, tables.signatures, tables.metrics), progress_change(c)]
        for _, c in cells.iterrows()])
    return out + [""]


def fault_page(fault: str, tables: CatalogueTables, agreement: pd.DataFrame, notes: BackendNotes,
               plots: dict[str, str], views: pd.DataFrame, results_dir: str) -> str:
    """``faults/<fault>.md``: the command that regenerates it, what the fault is, its verdicts, the
    per-view verdicts, each cell's section and the backends' agreement on it."""
    build, render = commands(results_dir)
    cells = tables.cells[tables.cells["fault"] == fault].sort_values(["setup", "onset_kind", "cell"])
    out = [f"# {fault}", "",
           f"Regenerated from the catalogue's files by `{render}` (the trace plots are drawn from the runs "
           f"by `{build}`). [The catalogue's summary](../CATALOGUE.md) · [every fault](../FAULTS.md)", ""]
    out += _about(fault, cells) + _verdicts(cells, tables)
    mine = views[views["cell"].isin(cells["cell"])] if not views.empty else views
    if not mine.empty:
        out += view_markdown(mine, cells, heading="##")
    for _, c in cells.iterrows():
        out += _cell_section(c, tables, plots, build)
    if not agreement.empty:
        out += agreement_markdown(agreement[agreement["fault"] == fault], notes)
    return "\n".join(out).rstrip("\n") + "\n"


def fault_pages(tables: CatalogueTables, agreement: pd.DataFrame, notes: BackendNotes, plots: dict[str, str],
                views: pd.DataFrame, results_dir: str) -> dict[str, str]:
    """Every fault of the catalogue: its page's path (relative to the catalogue directory) -> markdown."""
    return {page_of(fault): fault_page(fault, tables, agreement, notes, plots, views, results_dir)
            for fault in sorted(tables.cells["fault"].unique())}


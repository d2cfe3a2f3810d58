"""The catalogue's markdown: CATALOGUE.md and FAULTS.md, rendered from the frames that are written
(catalogue.parquet split by row kind, baselines.parquet, backends.parquet, views.parquet, the
model's scores). Rendering only: every number shown was computed by the stages before."""

from __future__ import annotations

import json
import math

import pandas as pd

from faults import FAULTS
from harness.catalogue.protocol import ALPHA
from harness.catalogue.rows import CatalogueTables
from harness.config import setup_label
from harness.markdown import num, pct, table

#: backend -> (fault -> how its form there differs from the native one, what differs for every run)
BackendNotes = dict[str, tuple[dict[str, str], str]]

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


def _ci(rate: float, lo: float, hi: float) -> str:
    """A held-out rate with its interval, ``"100% [44%, 100%]"`` (``-`` when nothing was evaluable)."""
    return "-" if math.isnan(rate) else f"{pct(rate)} [{pct(lo)}, {pct(hi)}]"


def _change(c: pd.Series) -> str:
    """A cell's progress metric, faulty vs healthy, with the relative change."""
    f, h = c["progress_faulty"], c["progress_healthy"]
    if not (math.isfinite(f) and math.isfinite(h)):
        return "-"
    rel = f"{(f - h) / abs(h):+.0%}" if h else ""
    return f"{num(f)} vs {num(h)} ({rel})" if rel else f"{num(f)} vs {num(h)}"


def _header(plots: dict[str, str], results_dir: str) -> list[str]:
    """Title, how to regenerate, the protocol, the heatmap."""
    out = ["# Fault catalogue", "",
           "Which training bug leaves which metric signature, measured over seeds against healthy twins "
           "and healthy look-alike controls. Regenerate with (the sweep skips stored runs):", "",
           "```", f"python -m harness -m +sweep=catalogue results_dir={results_dir}",
           f"python -m harness.catalogue results_dir={results_dir}", "```", "", PROTOCOL, ""]
    if "heatmap" in plots:
        out += [f"![faults x signatures]({plots['heatmap']})", ""]
    return out


def _summary(cells: pd.DataFrame) -> list[str]:
    """One line per cell, then the undecided cells and the cells that left no trace."""
    out = ["## Summary", ""]
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
    return out


def _cell_facts(c: pd.Series) -> list[str]:
    """A cell section's heading and bullet list: the fault, its runs, the verdict, the progress."""
    cls = FAULTS.get(c["fault"])
    out = [f"## {c['cell']}", ""]
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
    return out


def _signature_tables(sigs: pd.DataFrame) -> list[str]:
    """A cell's expected signatures (with intervals and verdicts) and every signature that fired."""
    out = []
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
    return out


def _metric_table(mets: pd.DataFrame) -> list[str]:
    """A cell's six metrics with the smallest all-seed p-values."""
    top = mets.sort_values("p_value").head(6)
    if not len(top):
        return []
    out = ["Metrics that separate it best (median over the window, all seeds):", ""]
    out += table(["metric", "AUROC", "faulty is", "p (perm.)", "p (Holm)", "faulty median", "healthy median"], [
        [r["name"], num(r["auroc"]), r["direction"], num(r["p_value"]), num(r["p_holm"]),
         num(r["faulty_median"]), num(r["healthy_median"])] for _, r in top.iterrows()])
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


def _cell_section(c: pd.Series, tables: CatalogueTables, plots: dict[str, str]) -> list[str]:
    """One cell's section: facts, signature tables, best metrics, detectors, mimicking controls, plot."""
    sigs = tables.signatures[tables.signatures["cell"] == c["cell"]]
    out = _cell_facts(c) + _signature_tables(sigs)
    out += _metric_table(tables.metrics[tables.metrics["cell"] == c["cell"]])
    out += _detector_table(tables.detectors[tables.detectors["cell"] == c["cell"]])
    mimic = sigs[(sigs["rate_faulty"] >= 0.5) & (sigs["rate_control"] >= 0.5)]
    if c["n_control"]:
        names = ", ".join(f"{r['name']} ({pct(r['rate_control'])})" for _, r in mimic.iterrows())
        out += [f"Healthy controls that mimic it: {names or 'none of its signatures fire on the controls'}", ""]
    if c["cell"] in plots:
        out += [f"![traces]({plots[c['cell']]})", ""]
    return out


def _baselines(baselines: pd.DataFrame) -> list[str]:
    """The healthy baselines: per setup, the signatures that fire on its healthy runs / controls."""
    out = ["## Healthy baselines", "",
           "Signatures at their default thresholds on healthy runs and look-alike controls, from update 0 "
           "(descriptive: how often a rule of thumb fires on runs with no bug):", ""]
    out += table(["setup", "control", "runs", "signatures that fired (rate)"], [
        [setup_label(algo, variant, env, backend), "yes" if control else "no", g["n_runs"].iloc[0],
         ", ".join(f"{r['signature']} ({pct(r['rate'])})" for _, r in g[g["rate"] > 0].iterrows()) or "none"]
        for (algo, variant, env, backend, control), g in baselines.groupby(
            ["algo", "algo_variant", "env", "backend", "is_control"])])
    out.append("")
    return out


def catalogue_markdown(tables: CatalogueTables, baselines: pd.DataFrame, agreement: pd.DataFrame,
                       notes: BackendNotes, plots: dict[str, str], results_dir: str,
                       views: pd.DataFrame | None = None, model_scores: pd.DataFrame | None = None) -> str:
    """CATALOGUE.md: header and protocol, the summary, the per-view verdicts, the diagnosis model's
    scores, one section per cell, the backends' agreement (``notes``: :func:`backend_notes`), the
    healthy baselines. ``plots``: cell label (or ``heatmap``) -> image path."""
    out = _header(plots, results_dir)
    cells = tables.cells
    if cells.empty:
        out += ["No fault cells: the store holds no catalogue-sweep runs (python -m harness -m +sweep=catalogue).", ""]
        if model_scores is not None:
            out += model_markdown(model_scores)
        return "\n".join(out)
    out += _summary(cells)
    if views is not None and not views.empty:
        out += view_markdown(views)
    if model_scores is not None:
        out += model_markdown(model_scores)
    for _, c in cells.iterrows():
        out += _cell_section(c, tables, plots)
    out += agreement_markdown(agreement, notes)
    out += _baselines(baselines)
    return "\n".join(out)


def faults_markdown(cells: pd.DataFrame, results_dir: str) -> str:
    """FAULTS.md: every registered fault: where it applies, its form(s), what it injects, its
    provenance, the expected signature, and what the catalogue found for it on each setup (held-out
    seeds). ``cells``: one row per cell with its summary columns."""
    rows = []
    for name, cls in sorted(FAULTS.items()):
        if name == "none":
            continue
        found = []
        defaults = cls.default_config()
        for _, c in cells[cells["fault"] == name].iterrows():
            onset = "" if c["onset_kind"] == "0" else " (mid-run onset)"
            ran = int(c["fault_version"]) if pd.notna(c.get("fault_version")) else 1    # before versions: 1
            if ran != cls.version:
                onset += f" [version {ran} of this fault; it is at version {cls.version} now, not re-run]"
            other = {k: v for k, v in json.loads(c["fault_params"]).items() if k in defaults and defaults[k] != v}
            if other:              # run with parameters that are not today's defaults
                onset += " [run with " + ", ".join(f"fault.{k}={v}" for k, v in sorted(other.items())) + "]"
            found.append(f"{c['setup']}{onset}: " + (f"manifested by {c['manifested_by']}" if c["manifested"]
                                                     else "**no trace** on held-out seeds" if c.get("decidable", True)
                                                     else f"undecided ({c['n_faulty']} seeds: too few to test)")
                         + (f"; diverged {c['n_diverged']}/{c['n_faulty']}" if c["n_diverged"] else ""))
        rows.append([f"`{name}`", "/".join(cls.algos), "/".join(cls.backends), " or ".join(cls.forms()), cls.kind,
                     cls.description, cls.provenance,
                     ", ".join(cls.expected) or (f"none: {cls.no_trace_expected}" if cls.no_trace_expected else "-"),
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


def model_markdown(scores: pd.DataFrame) -> list[str]:
    """The diagnosis model's out-of-sample scores: detection and attribution per protocol and view,
    the baselines beside it on held-out runs, left-out faults, and per fault on held-out runs."""
    if scores.empty:
        return []
    out = ["## Diagnosis model (out of sample)", "",
           "`python -m harness.diagnose` and `detector=learned` use one model per algorithm and framework view, "
           "fitted on the diverse dataset (python -m harness -m +sweep=dataset) and, with model_catalogue_runs=true, "
           "the catalogue sweep's calibration (even) seeds in the store (never scored here; model/model_card.json "
           "counts both). Every score below is on diverse runs the model was not fitted on: "
           "held-out runs (their seeds and sampled configurations), a whole env held out (with the catalogue runs "
           "of that env), hyperparameter regions held out, and, for the *unknown* answer, each fault left out of "
           "training. Healthy runs whose configuration does not learn are neither trained on nor scored. Detection: "
           "AUROC of P(anomalous), healthy logs called healthy, faulty logs called anomalous (TPR, and at 10% false "
           "alarms); attribution on faulty logs of known faults: top-1, class-level (the fault is in the answer's "
           "class of faults the view cannot tell apart), top-3, right when detected; ECE: calibration error of the "
           "top-1 probability. On held-out runs each score stands beside the baselines (always healthy, flag "
           "everything, the folk and config-aware rules streamed over the same logs).", ""]
    cols = ["algo", "view", "held out", "detector", "logs", "AUROC", "healthy called healthy", "TPR", "TPR @10% FA",
            "top-1", "class", "top-3", "right when detected", "ECE"]
    main = scores[scores["kind"] != "left-out fault"].sort_values(["algo", "view", "kind", "detector"])
    out += table(cols, [
        [r["algo"], r["view"], r["protocol"], r["detector"], int(r["n_healthy"] + r["n_faulty"]), num(r["auroc"], ".2f"),
         pct(r["healthy_called_healthy"]), pct(r["tpr"]), pct(r["tpr_at_10_fpr"]), pct(r["top1"]),
         pct(r["class_level"]), pct(r["top3"]), pct(r["right_when_detected"]), num(r.get("ece"), ".3f")]
        for _, r in main.iterrows()])
    left = scores[(scores["kind"] == "left-out fault") & scores.get("n_unseen", pd.Series(dtype=float)).notna()]
    if len(left):
        out += ["", "Faults left out of training, answered on their own runs (canonical view):", ""]
        out += table(["algo", "fault left out", "logs", "unknown", "healthy", "another fault"], [
            [r["algo"], r["protocol"].removeprefix("fault ").removesuffix(" left out"), int(r["n_unseen"]),
             pct(r["unseen_called_unknown"]), pct(r["unseen_called_healthy"]),
             pct(1 - r["unseen_called_unknown"] - r["unseen_called_healthy"])] for _, r in left.iterrows()])
    held = scores[(scores["kind"] == "held-out runs") & (scores["view"] == "canonical") & (scores["detector"] == "diagnosis")]
    for _, r in held.iterrows():
        per = r.get("per_class") or {}
        out += ["", f"Per fault, held-out {r['algo']} runs (canonical view): top-1 and class-level:", ""]
        out += table(["label", "logs", "right", "class-level"], [
            [label, v["n"], pct(v["right"]), pct(v["class_level"])] for label, v in sorted(per.items())])
    out.append("")
    return out


def agreement_markdown(agree: pd.DataFrame, notes: BackendNotes) -> list[str]:
    """The backends' agreement (backends.parquet), per algorithm: each signature that fires on a
    backend or is expected, the disagreements, and why each backend disagrees with native."""
    if agree.empty:
        return []
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

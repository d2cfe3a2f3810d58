"""The catalogue's markdown: CATALOGUE.md (the summary page) and FAULTS.md, and the pieces the page
per fault (:mod:`~harness.catalogue.pages`) shares with them, rendered from the frames that are
written (catalogue.parquet split by row kind, baselines.parquet, backends.parquet, views.parquet, the
model's scores). Rendering only: every number shown was computed by the stages before."""

from __future__ import annotations

import json
import math

import pandas as pd

from faults import FAULTS
from harness.agents.base import backends_of
from harness.catalogue.agreement import DISAGREE
from harness.catalogue.parts import Part
from harness.catalogue.protocol import ALPHA
from harness.catalogue.rows import CatalogueTables
from harness.config import setup_label
from harness.markdown import num, pct, table

#: the fault pages' directory under the catalogue's
FAULT_PAGES = "faults"

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
held-out half (Fisher exact / exact permutation test, one-sided, family-wise alpha 0.05 by the
fallback procedure: strongest on calibration first at 0.025, each later item at its halving share
plus the level of the one before it when that passed). Metric AUROCs use all seeds, with a permutation p-value that exchanges labels
within twin pairs, Holm-corrected over the metrics of the cell."""


def rate_ci(rate: float, lo: float, hi: float) -> str:
    """A held-out rate with its interval, ``"100% [44%, 100%]"`` (``-`` when nothing was evaluable)."""
    return "-" if math.isnan(rate) else f"{pct(rate)} [{pct(lo)}, {pct(hi)}]"


def progress_change(c: pd.Series) -> str:
    """A cell's progress metric, faulty vs healthy, with the relative change."""
    f, h = c["progress_faulty"], c["progress_healthy"]
    if not (math.isfinite(f) and math.isfinite(h)):
        return "-"
    rel = f"{(f - h) / abs(h):+.0%}" if h else ""
    return f"{num(f)} vs {num(h)} ({rel})" if rel else f"{num(f)} vs {num(h)}"


def n_unchanged(c: pd.Series) -> int:
    """How many of a cell's faulty seeds logged exactly what their twins did (the bug had nothing to
    act on there); 0 for a cell built before this was counted."""
    n = c.get("n_unchanged")
    return 0 if n is None or not math.isfinite(float(n)) else int(n)


def unchanged(c: pd.Series) -> str:
    """``"; changed nothing logged on 10/10 seeds"``, or ``""`` when the bug changed what every seed logged."""
    n = n_unchanged(c)
    return f"; changed nothing logged on {n}/{c['n_faulty']} seeds" if n else ""


def page_of(fault: str) -> str:
    """A fault's page, relative to the catalogue directory."""
    return f"{FAULT_PAGES}/{fault}.md"


def commands(results_dir: str) -> tuple[str, str]:
    """The commands that regenerate the catalogue: from the stored runs (every file, the trace plots
    included), and from the files a build wrote (the pages, the verdict map and the heatmaps only)."""
    build = f"python -m harness.catalogue results_dir={results_dir}"
    return build, f"{build} render=only"


def _parts(parts: list[Part], render: str) -> list[str]:
    """How a catalogue merged from parts was made: a row per part, then each part's commands."""
    out = ["Built in parts: the whole catalogue sweep is too long for one sitting on 2 cores, so setups are "
           "trained and built a few at a time, each part in its own results directory, and merged into this "
           f"catalogue (`python -m harness.catalogue merge=PART_DIR`; the pages are re-rendered by `{render}`). "
           "A part's cells replace the cells of the same name.", ""]
    out += table(["part", "cells", "runs", "code", "built", "note"],
                 [[p.name, str(len(p.cells)), str(p.runs) if p.runs else "-", p.code, p.built or "-", p.note or ""]
                  for p in parts])
    out.append("")
    for p in parts:
        if p.commands:
            out += [f"Part {p.name} (the sweep skips stored runs):", "", "```", *p.commands, "```", ""]
    return out


def _header(plots: dict[str, str], results_dir: str, parts: list[Part] | None = None) -> list[str]:
    """Title, how to regenerate (or the parts it was merged from), the protocol, the verdict map and the
    links to the setups' heatmaps."""
    build, render = commands(results_dir)
    out = ["# Fault catalogue", "",
           "Which training bug leaves which metric signature, measured over seeds against healthy twins "
           "and healthy look-alike controls. This page is the summary; each fault has its own page "
           f"(`{FAULT_PAGES}/<fault>.md`: mechanism, provenance, every cell's tables, per-view verdicts and "
           "traces), and [FAULTS.md](FAULTS.md) lists every fault of the registry."]
    if parts:
        out[-1] += " " + "How it was made:"
        out += ["", *_parts(parts, render)]
    else:
        out[-1] += (" Regenerate with (the sweep skips stored runs; the last line re-renders the pages and the "
                    "summary plots from the parquet files alone):")
        out += ["", "```", f"python -m harness -m +sweep=catalogue results_dir={results_dir}", build, render, "```", ""]
    out += [PROTOCOL, ""]
    if "verdicts" in plots:
        out += [f"![where each fault manifested, per setup and onset]({plots['verdicts']})", "",
                f"The verdict map ({plots['verdicts']}): each fault's verdict on held-out seeds per setup and onset "
                "(manifested, no trace, undecided; blank: not run there)."]
    maps = [(key.removeprefix("heatmap:"), path) for key, path in plots.items() if key.startswith("heatmap:")]
    if maps:
        out += ["Which signatures fired, one heatmap per setup (held-out % of faulty seeds on which each "
                "signature fired, a row per cell, then the setup's healthy runs and controls): "
                + " · ".join(f"[{setup}]({path})" for setup, path in sorted(maps)) + "."]
    if "verdicts" in plots or maps:
        out += [f"Regenerated by `{render}`.", ""]
    return out


def _lead(c: pd.Series, sigs: pd.DataFrame, metrics: pd.DataFrame) -> str:
    """The first item that revealed a manifested cell (the strongest on calibration), with its
    held-out rate and interval (a signature) or its held-out AUROC and p-value (a metric)."""
    items = [i for i in str(c["manifested_by"]).split(", ") if i]
    if not items:
        return "manifested"
    first, more = items[0], f" +{len(items) - 1} more" if len(items) > 1 else ""
    if first.endswith(" (AUROC)"):
        name = first.removesuffix(" (AUROC)")
        row = metrics[(metrics["cell"] == c["cell"]) & (metrics["name"] == name)]
        held = (f" (held-out AUROC {num(row['heldout_auroc'].iloc[0], '.2f')}, "
                f"p {num(row['heldout_p'].iloc[0], '.2g')})" if len(row) else " (AUROC)")
        return f"manifested by {name}{held}{more}"
    row = sigs[(sigs["cell"] == c["cell"]) & (sigs["name"] == first)]
    if not len(row):
        return f"manifested by {first}{more}"
    r = row.iloc[0]
    return (f"manifested by {first} (held-out rate {rate_ci(r['rate_faulty'], r['ci_low_faulty'], r['ci_high_faulty'])}"
            f", healthy {pct(r['rate_healthy'])}){more}")


def verdict(c: pd.Series, sigs: pd.DataFrame, metrics: pd.DataFrame) -> str:
    """A cell's verdict in one phrase: manifested by what (held-out), no trace on its setup, or
    undecided (too few seeds); with the diverged and crashed seeds."""
    if c["manifested"]:
        text = _lead(c, sigs, metrics)
    elif c["decidable"]:
        text = f"**no trace** on {c['setup']} ({c['progress_metric']} {progress_change(c)}){unchanged(c)}"
    else:
        text = f"undecided ({c['n_faulty']} seeds, min p {c['min_p']:.2f})"
    for what in ("diverged", "crashed"):
        if c[f"n_{what}"]:
            text += f"; {what} {c[f'n_{what}']}/{c['n_faulty']}"
    return text


def _summary(tables: CatalogueTables) -> list[str]:
    """Per algorithm, a row per fault and a column per setup (its verdicts at onset 0 and mid-run,
    with held-out rates); then the undecided cells and the faults that left no trace."""
    cells = tables.cells
    out = ["## Summary", "",
           "Each fault (its page linked) on each setup, at onset 0 and at a mid-run onset: manifested by "
           "which evidence (the first of the items that passed on the held-out seeds, its held-out rate on "
           "faulty seeds with the Wilson 95% interval and on healthy seeds; +N more items passed), **no trace** "
           "(nothing selected on the calibration seeds survived on the held-out ones), or undecided (too few "
           "seeds for any test to pass). Blank: not run there.", ""]
    for algo, part in cells.groupby("algo", sort=True):
        setups = sorted(part["setup"].unique())
        rows = []
        for fault, g in part.groupby("fault", sort=True):
            several = g["fault_params"].nunique() > 1
            entries = []
            for setup in setups:
                here = g[g["setup"] == setup].sort_values(["onset_kind", "fault_params"])
                entries.append("<br>".join(
                    ("onset 0" if c["onset_kind"] == "0" else "mid-run")
                    + ("".join(f" {k}={v}" for k, v in json.loads(c["fault_params"]).items()) if several else "")
                    + f": {verdict(c, tables.signatures, tables.metrics)}" for _, c in here.iterrows()))
            rows.append([f"[{fault}]({page_of(fault)})", *entries])
        out += [f"### {algo.upper()}", ""] + table(["fault", *setups], rows) + [""]
    undecided = cells[~cells["manifested"] & ~cells["decidable"]]
    if not undecided.empty:
        out += [f"**Undecided** ({len(undecided)} cells): too few held-out seeds for the one-sided test to reach "
                f"p < {ALPHA} even if every faulty seed showed the evidence and no healthy one did (e.g. 2 vs 2 "
                "seeds: min p = 0.17). They are neither manifested nor \"no trace\"; their rates are on the "
                "faults' pages.", ""]
    quiet = cells[~cells["manifested"] & cells["decidable"]]
    out += ["### Faults that left no trace", ""]
    if quiet.empty:
        return out + ["Every fault cell manifested on its held-out seeds.", ""]
    out += ["No calibration-selected evidence survived on the held-out seeds for these cells (a result, "
            "not hidden): a monitor reading these metrics cannot tell them from healthy runs there.", ""]
    for setup, g in quiet.groupby("setup", sort=True):
        faults = [f"[{fault}]({page_of(fault)}) ("
                  + ", ".join(("onset 0" if c["onset_kind"] == "0" else "mid-run")
                              + (" changed nothing logged" if n_unchanged(c) == c["n_faulty"] else "")
                              for _, c in h.sort_values("onset_kind").iterrows()) + ")"
                  for fault, h in g.groupby("fault", sort=True)]
        out.append(f"- on {setup}: {', '.join(faults)}")
    return out + [""]


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
                       views: pd.DataFrame | None = None, model_scores: pd.DataFrame | None = None,
                       parts: list[Part] | None = None) -> str:
    """CATALOGUE.md, the summary page: header, protocol and verdict map, a row per fault per algorithm
    (its verdict on each setup, linked to its page), the per-view verdicts, the diagnosis model's
    scores, the backends' agreement in brief (``notes``: :func:`backend_notes`; the tables are on the
    faults' pages), the healthy baselines. ``plots``: ``verdicts`` and ``heatmap:<setup>`` -> image path."""
    out = _header(plots, results_dir, parts)
    cells = tables.cells
    if cells.empty:
        out += ["No fault cells: the store holds no catalogue-sweep runs (python -m harness -m +sweep=catalogue).", ""]
        if model_scores is not None:
            out += model_markdown(model_scores)
        return "\n".join(out)
    out += _summary(tables)
    if views is not None and not views.empty:
        out += view_summary_markdown(views, cells)
    if model_scores is not None:
        out += model_markdown(model_scores)
    out += agreement_summary(agreement, notes)
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
        label = f"[`{name}`]({page_of(name)})" if found else f"`{name}`"
        rows.append([label, "/".join(cls.algos), "/".join(backends_of(cls)), " or ".join(cls.forms()), cls.kind,
                     cls.description, cls.provenance,
                     ", ".join(cls.expected) or (f"none: {cls.no_trace_expected}" if cls.no_trace_expected else "-"),
                     "<br>".join(found) or "not in this catalogue run"])
    out = ["# Faults", "",
           f"Every fault in the registry (`faults/`), with what the catalogue in `{results_dir}/catalogue` found "
           "for it (regenerated by `python -m harness.catalogue`, or from the catalogue's files alone by "
           f"`python -m harness.catalogue results_dir={results_dir} render=only`; a fault the catalogue ran links to "
           "its page). Form: how users meet the bug (the first is the "
           "default; `fault.form=` picks another). Provenance cites only reports read that describe the bug; "
           "`synthetic` says none was found. Expected signatures are hypotheses the catalogue tests.", ""]
    out += table(["fault", "algos", "backends", "form", "kind", "what is injected", "provenance", "expected signature",
                  "catalogue finding"], rows)
    return "\n".join(out) + "\n"


def view_markdown(views: pd.DataFrame, cells: pd.DataFrame | None = None, heading: str = "###",
                  all_cells: bool = True) -> list[str]:
    """Which cells manifested in which framework view (the metrics that framework logs); a cell that
    could not be decided (``cells``' ``decidable``: too few seeds) reads "undecided", not "no".
    ``all_cells=False`` leaves out the cells no framework view re-reads (a TRL run's)."""
    cols = sorted(views["view"].unique(), key=lambda v: (v != "canonical", v))
    pivot = views.pivot_table(index="cell", columns="view", values="manifested", aggfunc="first")
    if not all_cells:
        pivot = pivot[pivot.drop(columns="canonical", errors="ignore").notna().any(axis=1)]
    undecided = set() if cells is None else set(cells.loc[~cells["decidable"].astype(bool), "cell"])

    def entry(cell: str, value: object) -> str:
        if pd.isna(value):
            return ""
        return "yes" if value else "undecided" if cell in undecided else "**no**"

    out = [f"{heading} Per framework view", "",
           "The same protocol, evaluated on what each framework would have logged of these runs (its "
           "metric names, estimators, cadence; a metric it does not log is absent): yes = manifested on "
           "held-out seeds, no = no trace in that view, undecided = too few seeds to decide, blank = the view "
           "does not apply" + ("." if all_cells else "; a cell no view re-reads (a TRL run's) is in the summary "
                               "and on its fault's page only."), ""]
    out += table(["cell", *cols], [[cell, *[entry(cell, row.get(v)) for v in cols]]
                                   for cell, row in pivot.iterrows()])
    out.append("")
    return out


def view_summary_markdown(views: pd.DataFrame, cells: pd.DataFrame) -> list[str]:
    """The per-view verdicts in brief, for the summary page: per setup and framework view, how many
    decided cells manifested, and the cells whose verdict in that view differs from the canonical
    metrics' (each fault's page has its cells' rows, :func:`view_markdown`)."""
    setup_of = cells.drop_duplicates("cell").set_index("cell")["setup"]
    undecided = set(cells.loc[~cells["decidable"].astype(bool), "cell"])
    pivot = views.pivot_table(index="cell", columns="view", values="manifested", aggfunc="first")
    pivot = pivot[pivot.index.isin(setup_of.index)]

    def names(found: list[str]) -> str:
        return ", ".join(c.rsplit(" | ", 1)[0] for c in sorted(found)) or "-"

    rows = []
    for setup in sorted(setup_of[pivot.index].unique()):
        sub = pivot[setup_of[pivot.index].to_numpy() == setup]
        canonical = sub["canonical"] if "canonical" in sub else pd.Series(dtype=object)
        for view in sorted(sub.columns, key=lambda v: (v != "canonical", v)):
            col = sub[view].dropna()
            decided = [c for c in col.index if c not in undecided]
            if not decided:
                continue
            said = {c: bool(col[c]) for c in decided}
            other = view != "canonical"
            lost = [c for c in decided if other and pd.notna(canonical.get(c)) and bool(canonical[c]) and not said[c]]
            gained = [c for c in decided if other and pd.notna(canonical.get(c)) and not bool(canonical[c]) and said[c]]
            rows.append([setup, view, f"{sum(said.values())} of {len(decided)}",
                         names(lost) if other else "", names(gained) if other else ""])
    out = ["### Per framework view", "",
           "The same protocol, evaluated on what each framework would have logged of these runs (its metric "
           "names, estimators, cadence; a metric it does not log is absent): per setup, the decided cells that "
           "manifested on held-out seeds in each view, and the cells whose verdict there differs from the "
           "canonical metrics'. Each fault's page has its cells' rows.", ""]
    out += table(["setup", "view", "manifested", "no trace in this view only", "manifested in this view only"], rows)
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


def agreement_summary(agree: pd.DataFrame, notes: BackendNotes) -> list[str]:
    """The backends' agreement in brief (backends.parquet): per algorithm, how many fault x signature
    pairs disagree and in which faults (linked: their pages hold the tables and the reasons), and
    what differs for every run of each backend."""
    if agree.empty:
        return []
    out = ["## Across implementations", "",
           "Faults run on several backends are compared signature by signature on each fault's page (held-out "
           f"firing rates per backend; a **disagreement** is a gap of >= {DISAGREE * 100:.0f} points on faulty or on "
           "healthy seeds, explained there).", ""]
    for algo, part in agree.groupby("algo"):
        backends = sorted(c.removeprefix("rate_faulty_") for c in part.columns
                          if c.startswith("rate_faulty_") and part[c].notna().any())
        faults = sorted(part.loc[part["disagree"].astype(bool), "fault"].unique())
        out.append(f"- {algo}, {' vs '.join(backends)}: {int(part['disagree'].sum())} disagreement(s) over "
                   f"{len(part)} fault x signature pairs" + (", in " + ", ".join(f"[{f}]({page_of(f)})" for f in faults)
                                                              if faults else ""))
        out += [f"  - for every {b} run: {notes[b][1]}" for b in backends if b in notes and notes[b][1]]
    return out + [""]

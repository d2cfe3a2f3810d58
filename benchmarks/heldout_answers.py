"""The diagnosis' answer on every held-out training run, per run, and two such tables compared paired.

    python benchmarks/heldout_answers.py answers --examples results/catalogue/model/examples.parquet \\
        --out A.parquet [--code DIR] [--splits 1] [--jobs 2]
    python benchmarks/heldout_answers.py compare A.parquet B.parquet [--out benchmarks/results/NAME]
        [--auroc] [--per-fault ALGO/VIEW]

``answers`` fits the diagnosis on the training part of the catalogue's "held-out runs" protocol (30%
of the diverse runs, stratified by fault; ``--splits`` seeds of it) and records, for each held-out
run's full log and each algorithm and view, its label and what the model answered: a row per run,
not a rate, so that two fits can be compared on the runs both held out. ``--code DIR`` imports the
harness from another checkout (e.g. ``git worktree add /tmp/old <commit>``): the published model's
method re-scored at its own commit; ``--patch MODULE.NAME=VALUE`` sets a constant in every fit (one
rule changed, all else equal); ``--test-examples PATH`` splits and answers on another rendering of
the same runs while fitting on ``--examples`` (when the views themselves change, e.g. to read a log
as the framework really writes it, held-out scores on the old and the new views are not
comparable: judge both models on the new ones); ``--runs-of PATH`` keeps only another build's runs (the
split is then that build's). It uses only what every version since the held-out protocol has
(``protocols``, ``fit``, ``judge``).

Every catalogue build since session 39 also writes such a table beside its model
(``catalogue/model/heldout.parquet``: the held-out-runs protocol's one split, seed 0), so a build
can be compared without refitting.

``compare`` pairs two tables on the (split, algorithm, view, run) they share and gives, per view and
measure (healthy called healthy, faulty called anomalous, top-1 and class-level attribution on faults
both models know), A, B, B - A and its 95% interval from a bootstrap over runs (2000 draws, seed 0;
a run resampled with all its splits). Rule fixed before any fit it judges (session 39, 2026-11-26):
**B may replace A** when no view's measure is worse beyond its Bonferroni-corrected interval (the
family of every view x measure compared, e.g. 28: mean +- z(1 - 0.05 / 2N) bootstrap standard
deviations), and neither top-1 nor healthy called healthy over every view's runs together is worse
beyond its 95% interval. (Its first wording, uncorrected 95% intervals per view and a point estimate
over all views, was amended before any refit was judged by it: a candidate equal to the baseline
would have failed it about half the time; the INVISIBLE verdict of docs/benchmarks.md holds under both.) Different
held-out sets (last session's comparison) can differ by more than the change being judged; paired
runs cannot. ``--auroc`` adds each view's detection AUROC, paired (threshold-free; outside the rule);
``--per-fault`` breaks a view down per true label.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
MEASURES = ("healthy_called_healthy", "tpr", "top1", "class_level")
NOT_ANOMALOUS = ("healthy", "too_short")
REPS = 2000


def _patched(patches: list[str]) -> None:
    """Set module constants (``harness.analysis.identifiability.INVISIBLE=0.5``) in this process."""
    import importlib

    for item in patches:
        target, _, value = item.partition("=")
        module, _, name = target.rpartition(".")
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            raise SystemExit(f"--patch {item}: {module} has no {name}")
        try:
            setattr(mod, name, type(getattr(mod, name))(value))
        except ValueError:
            raise SystemExit(f"--patch {item}: {value!r} is not a {type(getattr(mod, name)).__name__}") from None


def _answers_of_view(examples: pd.DataFrame, algo: str, view: str, split: int, settings: dict,
                     patches: list[str], tested: pd.DataFrame | None = None) -> list[dict]:
    """One view's held-out answers on one split, as the catalogue's held-out protocol scores them;
    ``tested``: other examples of the same runs to split and answer on (the model still fits on
    ``examples``' training part)."""
    import harness

    _patched(patches)
    from harness.analysis.features import MIN_ROWS
    from harness.analysis.model import TooFewClasses, fit
    from harness.analysis.protocols import judge, protocols

    data = examples[(examples["algo"] == algo) & (examples["view"] == view)]
    scored = data if tested is None else tested[(tested["algo"] == algo) & (tested["view"] == view)]
    protocol = protocols(scored, algo, seed=split, left_out=False)[0]
    test = scored[scored["run_id"].isin(protocol.test) & (scored["prefix"] == 1.0) & scored["testable"].astype(bool)
                  & ~scored["label"].isin(("not_learning", "inert"))
                  & (scored.get("n_rows", pd.Series(MIN_ROWS, index=scored.index)) >= MIN_ROWS)]
    try:
        model = fit(data[~data["run_id"].isin(protocol.test)], algo, view, settings=settings)
    except TooFewClasses:
        return []
    where = str(Path(harness.__file__).parent)    # the checkout this worker imported (--code)
    return [{"harness": where, "split": split, "algo": algo, "view": view, "run_id": run, "fault": fault, "label": j.label,
             "answer": j.answer, "score": float(j.score), "members": ",".join(j.members), "known": bool(j.known)}
            for run, fault, j in zip(test["run_id"], test["fault"], judge(model, test))]


def answers(args: argparse.Namespace) -> None:
    from joblib import Parallel, delayed

    code = Path(args.code).resolve()
    sys.path.insert(0, str(code))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [os.environ.get("PYTHONPATH")])])  # workers
    import harness
    from harness.analysis.examples import VIEWS

    path = Path(args.examples)
    if not path.is_file() or not path.with_name("model_card.json").is_file():
        raise SystemExit(f"--examples {path}: not a build's examples.parquet with its model_card.json beside it")
    examples = pd.read_parquet(path)
    settings = {k: tuple(v) for k, v in json.loads(path.with_name("model_card.json").read_text())
                .get("settings", {}).items()}
    if "testable" not in examples:
        examples = examples.assign(testable=True)
    if args.runs_of:                          # another build's runs only: its held-out split
        examples = examples[examples["run_id"].isin(set(pd.read_parquet(args.runs_of, columns=["run_id"])["run_id"]))]
    tested = None
    if args.test_examples:                    # the same runs rendered another way (another version's views)
        tested = pd.read_parquet(args.test_examples)
        tested = tested if "testable" in tested else tested.assign(testable=True)
        tested = tested[tested["run_id"].isin(set(examples["run_id"]))]
    jobs = [(algo, view, split) for algo, views in VIEWS.items() if (examples["algo"] == algo).any()
            for view in views for split in range(args.splits)]
    print(f"{len(examples)} examples of {examples['run_id'].nunique()} runs; {len(jobs)} held-out fits "
          f"with the harness at {Path(harness.__file__).parent}", flush=True)
    rows = Parallel(n_jobs=args.jobs, verbose=5)(delayed(_answers_of_view)(examples, *j, settings, args.patch, tested)
                                               for j in jobs)
    table = pd.DataFrame([r for part in rows for r in part])
    commit = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    scored_on = (f" (the runs of {args.runs_of})" if args.runs_of else "") + (
        f" (answering on {args.test_examples})" if args.test_examples else "")
    table = table.assign(code=commit + "".join(f" --patch {p}" for p in args.patch),
                         examples=str(args.examples) + scored_on, splits=args.splits)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(args.out)
    print(f"{len(table)} held-out answers ({table['run_id'].nunique()} runs) -> {args.out}")


def measures(t: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per measure, the rows it counts (a mask) and whether each was right: the definitions of
    harness.analysis.scores.score, kept per row for the bootstrap (that module is not imported here, so
    that ``answers --code`` can import another checkout's harness; a test holds the two together)."""
    healthy = (t["label"] == "healthy").to_numpy()
    anomalous = ~t["answer"].isin(NOT_ANOMALOUS).to_numpy()
    known = (~healthy) & t["known"].to_numpy()
    right = (t["answer"] == t["label"]).to_numpy()
    in_class = right | np.array([lab in m.split(",") for lab, m in zip(t["label"], t["members"])])
    return {"healthy_called_healthy": (healthy, ~anomalous), "tpr": (~healthy, anomalous),
            "top1": (known, right), "class_level": (known, in_class)}


def paired(a: pd.DataFrame, b: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """A and B on the (split, algo, view, run) both held out: per view (and over every view's runs,
    ``all``) and measure, each's rate, B - A and its 95% bootstrap interval over runs."""
    keys = ["split", "algo", "view", "run_id"]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    if both.empty:
        raise SystemExit("the two tables share no held-out run: not the same dataset, or not the same splits")
    both = both[both["label_a"] == both["label_b"]]
    rng = np.random.default_rng(seed)
    out, spreads = [], []
    groups = [(f"{algo}/{view}", g) for (algo, view), g in both.groupby(["algo", "view"])] + [("all", both)]
    for name, g in groups:
        side = {s: g[keys].assign(label=g[f"label_{s}"], answer=g[f"answer_{s}"],
                                              members=g[f"members_{s}"].fillna(""),
                                              known=g["known_a"] & g["known_b"]) for s in "ab"}
        ma, mb = measures(side["a"]), measures(side["b"])
        runs, idx = np.unique(g["run_id"].to_numpy(), return_inverse=True)
        for m in MEASURES:
            mask, ra = ma[m]
            rb = mb[m][1]
            n = int(mask.sum())
            if not n:
                continue
            # per-run sums, so that a bootstrap draw of runs carries every split of each
            da = np.bincount(idx, weights=(ra & mask), minlength=len(runs))
            db = np.bincount(idx, weights=(rb & mask), minlength=len(runs))
            cnt = np.bincount(idx, weights=mask, minlength=len(runs))
            draws = rng.integers(0, len(runs), size=(REPS, len(runs)))
            tot = cnt[draws].sum(axis=1)
            ok = tot > 0
            diff = (db[draws].sum(axis=1)[ok] - da[draws].sum(axis=1)[ok]) / tot[ok]
            lo, hi = np.quantile(diff, [0.025, 0.975])
            out.append({"view": name, "measure": m, "n": n, "a": ra[mask].mean(), "b": rb[mask].mean(),
                        "b_minus_a": rb[mask].mean() - ra[mask].mean(), "lo": lo, "hi": hi})
            spreads.append(float(diff.std()))
    table = pd.DataFrame(out)
    family = int((table["view"] != "all").sum())
    z = NormalDist().inv_cdf(1 - 0.05 / (2 * max(family, 1)))
    table["lo_corrected"] = table["b_minus_a"] - z * np.array(spreads)
    table["hi_corrected"] = table["b_minus_a"] + z * np.array(spreads)
    table.attrs["family"] = family
    return table


def auroc_paired(a: pd.DataFrame, b: pd.DataFrame, reps: int = 500, seed: int = 0) -> pd.DataFrame:
    """Detection AUROC of each's anomaly score (faulty against healthy logs), per view, B - A and its 95%
    bootstrap interval over runs: free of either model's threshold, so it separates ranking logs from
    where the operating point sits. Informational: not part of the replace rule."""
    from sklearn.metrics import roc_auc_score

    keys = ["split", "algo", "view", "run_id"]
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    both = both[both["label_a"] == both["label_b"]]
    rng = np.random.default_rng(seed)
    out = []
    for (algo, view), g in both.groupby(["algo", "view"]):
        y = (g["label_a"] != "healthy").to_numpy()
        if y.all() or not y.any():
            continue
        runs, idx = np.unique(g["run_id"].to_numpy(), return_inverse=True)
        auc = {s: roc_auc_score(y, g[f"score_{s}"]) for s in "ab"}
        diffs = []
        for _ in range(reps):
            w = np.bincount(rng.integers(0, len(runs), len(runs)), minlength=len(runs))[idx]
            if (w * y).sum() and (w * ~y).sum():
                diffs.append(roc_auc_score(y, g["score_b"], sample_weight=w) - roc_auc_score(y, g["score_a"], sample_weight=w))
        lo, hi = np.quantile(diffs, [0.025, 0.975])
        out.append({"view": f"{algo}/{view}", "n": len(g), "a": auc["a"], "b": auc["b"], "b_minus_a": auc["b"] - auc["a"],
                    "lo": lo, "hi": hi})
    return pd.DataFrame(out)


def per_fault(a: pd.DataFrame, b: pd.DataFrame, view: str) -> pd.DataFrame:
    """One view (``algo/view``), per true label: logs, and how many A and B called anomalous and named right."""
    algo, _, name = view.partition("/")
    both = a.merge(b, on=["split", "algo", "view", "run_id"], suffixes=("_a", "_b"))
    both = both[(both["algo"] == algo) & (both["view"] == name) & (both["label_a"] == both["label_b"])]
    out = pd.DataFrame({"label": both["label_a"],
                        **{f"anomalous_{s}": ~both[f"answer_{s}"].isin(NOT_ANOMALOUS) for s in "ab"},
                        **{f"right_{s}": both[f"answer_{s}"] == both[f"label_{s}"] for s in "ab"}})
    table = out.groupby("label").sum().astype(int).assign(logs=out.groupby("label").size())
    table["anomalous_b_minus_a"] = table["anomalous_b"] - table["anomalous_a"]
    return table.sort_values("anomalous_b_minus_a")


def verdict(table: pd.DataFrame) -> tuple[bool, list[str]]:
    """The rule of the module docstring: (B may replace A, the reasons it may not)."""
    views = table[table["view"] != "all"]
    worse = [f"{r.view} {r.measure}: {r.b_minus_a:+.3f} (corrected [{r.lo_corrected:+.3f}, {r.hi_corrected:+.3f}])"
             for r in views.itertuples() if r.hi_corrected < 0]
    overall = table[(table["view"] == "all") & table["measure"].isin(("top1", "healthy_called_healthy"))]
    worse += [f"{r.measure} over every view: {r.b_minus_a:+.3f} [{r.lo:+.3f}, {r.hi:+.3f}]"
              for r in overall.itertuples() if r.hi < 0]
    return not worse, worse


def markdown(table: pd.DataFrame, a: str, b: str) -> str:
    lines = [f"A = {a}; B = {b}. Paired on the held-out runs both scored; bootstrap intervals over runs (95%, "
             "and Bonferroni-corrected over the views' rows).", "",
             f"| view | measure | n | A | B | B - A | 95% interval | corrected for {table.attrs.get('family', '?')} |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.view} | {r.measure} | {r.n} | {r.a:.1%} | {r.b:.1%} | {r.b_minus_a:+.1%} | "
                     f"[{r.lo:+.1%}, {r.hi:+.1%}] | [{r.lo_corrected:+.1%}, {r.hi_corrected:+.1%}] |")
    ok, why = verdict(table)
    lines += ["", "**B may replace A.**" if ok else "**B may not replace A**: " + "; ".join(why)]
    return "\n".join(lines) + "\n"


def compare(args: argparse.Namespace) -> None:
    for path in (args.a, args.b):
        if not Path(path).is_file():
            raise SystemExit(f"{path}: no such file (a table `heldout_answers.py answers` or a catalogue build wrote)")
    a, b = (pd.read_parquet(p) for p in (args.a, args.b))
    name = {p: f"{p} (the harness at {t['code'].iloc[0]} on {t['examples'].iloc[0]}, {t['splits'].iloc[0]} splits)"
            if {"code", "examples", "splits"} <= set(t) and len(t) else p for p, t in ((args.a, a), (args.b, b))}
    table = paired(a, b)
    text = markdown(table, name[args.a], name[args.b])
    if args.auroc:
        rows = auroc_paired(a, b)
        text += ("\nDetection AUROC (each's anomaly score, faulty against healthy logs; threshold-free, not part of "
                 "the rule):\n\n| view | logs | A | B | B - A | 95% interval |\n|---|---|---|---|---|---|\n")
        text += "".join(f"| {r.view} | {r.n} | {r.a:.3f} | {r.b:.3f} | {r.b_minus_a:+.3f} | [{r.lo:+.3f}, {r.hi:+.3f}] |\n"
                        for r in rows.itertuples())
    for view in args.per_fault:
        text += f"\n{view}, per true label (logs; called anomalous and named right by A and B):\n\n"
        rows = per_fault(a, b, view).reset_index()
        text += "| " + " | ".join(rows.columns) + " |\n|" + "---|" * len(rows.columns) + "\n"
        text += "".join("| " + " | ".join(str(v) for v in r) + " |\n" for r in rows.itertuples(index=False))
    print(text)
    if args.out:
        out = Path(args.out)
        out.with_suffix(".md").write_text(f"# Held-out answers compared\n\nGenerated by `python benchmarks/"
                                          f"heldout_answers.py compare {args.a} {args.b} --out {args.out}"
                                          f"{' --auroc' if args.auroc else ''}{''.join(' --per-fault ' + v for v in args.per_fault)}` on "
                                          f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}.\n\n" + text)
        ok, why = verdict(table)
        out.with_suffix(".json").write_text(json.dumps({"a": name[args.a], "b": name[args.b], "may_replace": ok,
                                                        "reasons": why, "rows": table.to_dict("records")},
                                                       indent=1) + "\n")
        print(f"recorded -> {out.with_suffix('.md')}, {out.with_suffix('.json')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("answers", help="every held-out run's answer (fits the held-out protocol)")
    p.add_argument("--examples", required=True, help="a build's examples.parquet (model_card.json beside it)")
    p.add_argument("--out", required=True)
    p.add_argument("--code", default=str(ROOT), help="the checkout whose harness fits and answers")
    p.add_argument("--splits", type=int, default=1)
    p.add_argument("--runs-of", default=None, metavar="PATH",
                   help="keep only the runs of this examples.parquet (another build's): the split is then its split")
    p.add_argument("--test-examples", default=None, metavar="PATH",
                   help="split and answer on these examples of the same runs (e.g. the current views' rendering), "
                        "fitting on --examples: a model trained on older views judged on the current ones")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--patch", action="append", default=[], metavar="MODULE.NAME=VALUE",
                   help="set a module constant in every fit, e.g. harness.analysis.identifiability.INVISIBLE=0.5")
    c = sub.add_parser("compare", help="two answer tables, paired")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--out", default=None, help="record NAME.md and NAME.json")
    c.add_argument("--auroc", action="store_true", help="also each view's detection AUROC, paired (informational)")
    c.add_argument("--per-fault", action="append", default=[], metavar="ALGO/VIEW",
                   help="also break one view down per true label, e.g. ppo/cleanrl (repeatable)")
    args = parser.parse_args()
    answers(args) if args.command == "answers" else compare(args)


if __name__ == "__main__":
    main()

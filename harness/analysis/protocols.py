"""The diagnosis model scored out of sample, then fitted on everything and saved (the catalogue's step).

What is held out (:func:`protocols`): held-out runs (30%, stratified by fault: their seeds and sampled
configurations are never trained on), a whole env held out (with the catalogue runs of that env),
hyperparameter regions held out, and, for the ``unknown`` answer, each fault left out of training.
Only runs of the diverse dataset are scored. Every protocol's scores are detection and attribution
(:mod:`harness.analysis.scores`) beside the trivial and rule baselines on the same logs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from harness.analysis import scores as sc
from harness.analysis.examples import VIEWS, Verdicts, evidence_frame, fault_settings, training_examples
from harness.analysis.features import MIN_ROWS
from harness.analysis.labels import INERT, UNLABELLED
from harness.analysis.learning import NOT_LEARNING
from harness.analysis.model import (
    HEALTHY,
    DiagnosisModel,
    TooFewClasses,
    expected_calibration_error,
    fit,
    fit_models,
    load_models,
    resolved_kind,
    save_models,
)
from harness.config import ConfigError
from harness.store import RunStore, atomic_write_parquet

#: hyperparameter regions left out of training (sampled base values; a misconfigured fault's bad
#: value does not move a run between regions)
REGIONS = {
    "ppo": {"lr > 1e-3": ("lr", lambda v: v > 1e-3), "n_epochs >= 8": ("n_epochs", lambda v: v >= 8),
            "num_envs >= 32": ("num_envs", lambda v: v >= 32)},
    "grpo": {"group_size >= 12": ("group_size", lambda v: v >= 12),
             "num_iterations >= 3": ("num_iterations", lambda v: v >= 3), "beta == 0": ("beta", lambda v: v == 0)},
}
HELD_OUT_ENV = {"ppo": "acrobot", "grpo": None}


@dataclass(frozen=True)
class Protocol:
    name: str
    kind: str                 # held-out runs | held-out env | held-out region | left-out fault
    test: frozenset[str]      # run ids tested (never trained on)
    excluded_fault: str | None = None


def split_runs(examples: pd.DataFrame, test_share: float = 0.3, seed: int = 0) -> tuple[set[str], set[str]]:
    """Held-out runs, stratified by fault: their seeds and sampled configurations are never trained on."""
    runs = examples.drop_duplicates("run_id")[["run_id", "fault"]]
    rng = np.random.default_rng(seed)
    test: set[str] = set()
    for _, group in runs.groupby("fault"):
        ids = sorted(group["run_id"])
        k = int(round(len(ids) * test_share))
        test |= set(rng.choice(ids, size=k, replace=False)) if k else set()
    return set(runs["run_id"]) - test, test


def _testable(examples: pd.DataFrame) -> pd.Series:
    """Runs that may be scored: the diverse dataset's (extra training runs are never tested)."""
    if "testable" not in examples:
        return pd.Series(True, index=examples.index)
    return examples["testable"].astype(bool)


def protocols(examples: pd.DataFrame, algo: str, seed: int = 0, left_out: bool = True) -> list[Protocol]:
    """What each out-of-sample score holds out. A protocol's ``test`` set is every run it keeps out of
    training (a held-out env's or region's catalogue runs too); only runs of the diverse dataset
    (``testable``) are scored, and only they are split into held-out runs."""
    runs = examples[examples["algo"] == algo].drop_duplicates("run_id")
    testable = examples[(examples["algo"] == algo) & _testable(examples)]
    out = [Protocol("held-out runs (30%, stratified by fault)", "held-out runs",
                    frozenset(split_runs(testable, seed=seed)[1]))]
    env = HELD_OUT_ENV.get(algo)
    if env and (runs["env"] == env).any() and (runs["env"] != env).any():
        out.append(Protocol(f"env {env} held out", "held-out env", frozenset(runs.loc[runs["env"] == env, "run_id"])))
    for name, (key, test) in REGIONS.get(algo, {}).items():
        col = f"space.{key}"
        if col in runs:
            inside = runs[col].map(lambda v: bool(test(v)) if pd.notna(v) else False)
            if inside.any() and (~inside).any():
                out.append(Protocol(f"region {name} held out", "held-out region", frozenset(runs.loc[inside, "run_id"])))
    if left_out:
        for fault in sorted(set(runs["fault"]) - {"none"}):
            out.append(Protocol(f"fault {fault} left out", "left-out fault",
                                frozenset(runs.loc[runs["fault"] == fault, "run_id"]), excluded_fault=fault))
    return out


def judge(model: DiagnosisModel, test: pd.DataFrame) -> list[sc.Judged]:
    """The model's answers on test examples, as judged logs."""
    answers = model.diagnose(test, evidence_frame(test), test.get("n_rows", pd.Series(MIN_ROWS, index=test.index)).to_numpy())
    known = set(model.classes)
    return [sc.Judged(label, a.answer, a.anomalous, members=a.members, top3=tuple(a.top(3)), known=label in known)
            for label, a in zip(test["label"], answers)]


def baselines(test: pd.DataFrame, known: set[str]) -> dict[str, list[sc.Judged]]:
    """The trivial and rule baselines on the same test examples."""
    labels = test["label"].tolist()
    is_known = [lab in known for lab in labels]
    out = {name: sc.trivial(labels, name, is_known) for name in ("always_healthy", "flag_everything")}
    for name in sc.RULE_SETS:
        if f"baseline.{name}.alarmed" in test:
            out[name] = sc.from_rules(labels, test[f"baseline.{name}.alarmed"].tolist(),
                                      test[f"baseline.{name}.fault"].fillna("").tolist(), is_known)
    return out


@dataclass(frozen=True)
class HeldOutAnswer:
    """What the model fitted without a held-out run answered on its full log (one row of
    ``heldout.parquet``, beside the model: two fits compare run by run, benchmarks/heldout_answers.py)."""

    split: int
    algo: str
    view: str
    run_id: str
    fault: str
    label: str
    answer: str
    score: float
    members: str              # the answer's class, comma-joined
    known: bool               # the model knows the true label


def run_protocol(examples: pd.DataFrame, algo: str, view: str, protocol: Protocol, seed: int = 0,
                 kind: str = "logistic", settings: Mapping[str, tuple[str, ...]] | None = None,
                 answers: list[HeldOutAnswer] | None = None) -> list[dict[str, Any]] | None:
    """Fit on everything the protocol does not hold out; score the held-out diverse runs' full logs
    (the model, and beside it the baselines). None when the protocol cannot be run on this dataset.
    ``answers``: a list the model's answer on each held-out log is appended to (run by run)."""
    data = examples[(examples["algo"] == algo) & (examples["view"] == view)]
    train = data[~data["run_id"].isin(protocol.test)]
    if protocol.excluded_fault:
        train = train[train["fault"] != protocol.excluded_fault]
    test = data[data["run_id"].isin(protocol.test) & (data["prefix"] == 1.0) & _testable(data)
                & ~data["label"].isin(UNLABELLED) & (data.get("n_rows", MIN_ROWS) >= MIN_ROWS)]
    try:
        model = fit(train, algo, view, seed=seed, kind=kind, settings=settings)
    except TooFewClasses:
        return None
    base = {"algo": algo, "view": view, "protocol": protocol.name, "kind": protocol.kind, "model_kind": kind,
            "n_runs": int(test["run_id"].nunique())}
    judged = judge(model, test)
    if answers is not None:
        answers += [HeldOutAnswer(seed, algo, view, run, fault, j.label, j.answer, float(j.score), ",".join(j.members),
                                  bool(j.known)) for run, fault, j in zip(test["run_id"], test["fault"], judged)]
    rows = [{**base, "detector": "diagnosis", **sc.score(judged).row(),
             "ece": _ece(model, test), "per_class": sc.score(judged).per_fault}]
    if protocol.kind == "left-out fault":
        unseen = [j for j in judged if not j.known and j.label != HEALTHY]
        rows[0].update(unseen_called_unknown=float(np.mean([j.answer == "unknown" for j in unseen])) if unseen else np.nan,
                       unseen_called_healthy=float(np.mean([j.answer == HEALTHY for j in unseen])) if unseen else np.nan,
                       n_unseen=len(unseen))
    elif protocol.kind == "held-out runs":
        for name, items in baselines(test, set(model.classes)).items():
            rows.append({**base, "detector": name, **sc.score(items).row()})
    return rows


def _scored(examples: pd.DataFrame, algo: str, view: str, protocol: Protocol, seed: int, kind: str,
            settings: Mapping[str, tuple[str, ...]] | None) -> tuple[list[dict[str, Any]] | None, list[HeldOutAnswer]]:
    """:func:`run_protocol` with the held-out runs' answers (kept for the held-out-runs protocol only)."""
    answers: list[HeldOutAnswer] = []
    rows = run_protocol(examples, algo, view, protocol, seed, kind, settings, answers)
    return rows, answers if protocol.kind == "held-out runs" else []


def _ece(model: DiagnosisModel, test: pd.DataFrame) -> float:
    """Calibration error of the top-1 probability (after the evidence), on logs of known classes."""
    if test.empty:
        return float("nan")
    answers = model.diagnose(test, evidence_frame(test), np.full(len(test), MIN_ROWS))
    labels = test["label"].to_numpy()
    known = np.array([lab in set(model.classes) for lab in labels])
    conf = np.array([max(a.probabilities.values()) for a in answers])
    top = np.array([next(iter(a.probabilities)) for a in answers])
    return expected_calibration_error(conf[known], (top[known] == labels[known]).astype(float))


def fit_and_evaluate(root: Path, run_ids: Sequence[str], out_path: Path, progress: Callable[[str], None] = print,
                     n_jobs: int = -1, left_out: bool = True, seed: int = 0, kind: str = "logistic",
                     extra_ids: Sequence[str] = (), *, verdicts: Verdicts) -> pd.DataFrame:
    """Build the examples of the diverse runs (``run_ids``) and of extra training runs
    (``extra_ids``: the catalogue's, one configuration per setup but many seeds per fault), with the
    rule baselines' ``verdicts`` on each, then :func:`evaluate_and_save` them. Returns the protocol scores (a row per algorithm, view, protocol
    and detector)."""
    start = time.perf_counter()
    examples = training_examples(root, run_ids, extra_ids, out_path.with_name("examples.parquet"), n_jobs, progress,
                                 verdicts=verdicts)
    atomic_write_parquet(out_path.with_name("examples.parquet"), examples)   # with `testable`: what a refit reads
    store = RunStore(root)
    ids = sorted(set(run_ids) | set(extra_ids))
    settings = fault_settings([m for m in (store.load_meta(r) for r in ids) if m is not None])
    return evaluate_and_save(examples, settings, out_path, progress, n_jobs, left_out, seed, kind, start)


def evaluate_and_save(examples: pd.DataFrame, settings: Mapping[str, tuple[str, ...]], out_path: Path,
                      progress: Callable[[str], None] = print, n_jobs: int = -1, left_out: bool = True,
                      seed: int = 0, kind: str = "logistic", start: float | None = None) -> pd.DataFrame:
    """Score every protocol out of sample on the diverse runs of ``examples`` only (with the
    baselines), fit the final models on all of them and save them with a model card (``settings``:
    what to check per fault, :func:`fault_settings`). Returns the protocol scores."""
    start = time.perf_counter() if start is None else start
    n_runs = int(examples["run_id"].nunique())
    n_extra = int(examples.loc[~_testable(examples), "run_id"].nunique())
    def runs_labelled(label: str) -> int:       # per run (a mid-run fault's early prefixes are healthy examples)
        return int(examples.loc[examples["label"] == label, "run_id"].nunique())

    jobs = [(algo, view, p) for algo, views in VIEWS.items() if (examples["algo"] == algo).any()
            for p in protocols(examples, algo, seed=seed, left_out=left_out) for view in views
            if (p.kind != "left-out fault" or view == "canonical")]
    progress(f"diagnosis model: {len(examples)} examples from {n_runs} runs "
             f"({runs_labelled(NOT_LEARNING)} healthy runs that do not learn and "
             f"{runs_labelled(INERT)} runs of a fault inert in their configuration are left out); scoring {len(jobs)} held-out fits")
    results = Parallel(n_jobs=n_jobs)(delayed(_scored)(examples, a, v, p, seed, kind, settings) for a, v, p in jobs)
    scores = pd.DataFrame([row for rows, _ in results if rows for row in rows])
    held_out = pd.DataFrame([asdict(a) for _, part in results for a in part], columns=[f.name for f in fields(HeldOutAnswer)])
    models = fit_models(examples, VIEWS, seed=seed, kind=kind, settings=settings)
    held = scores[(scores["kind"] == "held-out runs") & (scores["detector"] == "diagnosis")] if len(scores) else scores
    for (algo, view), model in models.items():
        mine = held[(held["algo"] == algo) & (held["view"] == view)]
        if len(mine):
            model.info["out_of_sample"] = {k: float(mine.iloc[0][k]) for k in
                                           ("top1", "class_level", "healthy_called_healthy", "tpr", "auroc", "ece")}
    version = examples["feature_version"].iloc[0] if "feature_version" in examples and len(examples) else None
    card = {"trained_on_runs": n_runs, "extra_training_runs": n_extra, "examples": len(examples),
            "model_kind": resolved_kind(kind),
            "examples_version": version, "views": VIEWS, "settings": dict(settings),
            "models": {f"{a}/{v}": {k: m.info.get(k) for k in ("n_examples", "n_runs", "classes", "out_of_fold")} | {
                "out_of_sample": m.info.get("out_of_sample"), "threshold": m.anomaly_threshold,
                "classes_of_faults": sorted({tuple(c) for c in m.identifiability.classes.values() if len(c) > 1}),
                "cannot_show": list(m.identifiability.invisible),
                "setting_evidence": {i: m.ranges.describe(i) for i in m.ranges.items}} for (a, v), m in models.items()},
            "protocols": scores.drop(columns=["per_class"], errors="ignore").to_dict("records"),
            "seconds": round(time.perf_counter() - start, 1)}
    save_models(models, out_path, card)
    atomic_write_parquet(out_path.with_name("heldout.parquet"), held_out.assign(
        code=f"build of {card['trained_on_runs']} runs", examples=str(out_path.with_name("examples.parquet")), splits=1))
    progress(f"diagnosis model: {len(models)} models fitted and scored in {card['seconds']} s -> {out_path}")
    return scores


@dataclass
class KeptModels:
    """What a refit of some algorithms' models keeps of the model it replaces: every other algorithm's
    models as they are, with their model-card entries, protocol scores, held-out answers and the
    examples they were fitted on. A log is answered by its algorithm's models alone, so the
    algorithms' models are separate products: one may be refitted (and judged, and published) while
    the other stays (``rlfh-catalogue refit=PATH refit_algos=[grpo]``)."""

    refitted: tuple[str, ...]                       # the algorithms being refitted
    models: dict[tuple[str, str], DiagnosisModel]   # the others' models
    card: dict[str, Any]
    examples: pd.DataFrame
    held_out: pd.DataFrame | None
    scores: pd.DataFrame                            # the others' protocol scores

    @classmethod
    def read(cls, model_path: Path, refitted: Sequence[str]) -> KeptModels:
        """The part of the model at ``model_path`` (its card and examples beside it) that a refit of
        ``refitted`` keeps; a one-line :class:`ConfigError` when there is no such model to keep from."""
        cls.check(model_path, refitted)
        card_path, examples_path = model_path.with_name("model_card.json"), model_path.with_name("examples.parquet")
        models = {k: m for k, m in load_models(model_path).items() if k[0] not in refitted}
        examples = pd.read_parquet(examples_path)
        held, scored = model_path.with_name("heldout.parquet"), model_path.with_name("scores.parquet")
        card = json.loads(card_path.read_text())
        scores = pd.read_parquet(scored) if scored.is_file() else pd.DataFrame(card.get("protocols", []))
        if "per_class" in scores:            # stored as JSON text (build.write_scores)
            scores["per_class"] = scores["per_class"].map(lambda v: json.loads(v) if isinstance(v, str) else v)
        def others(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[~frame["algo"].isin(refitted)].reset_index(drop=True) if len(frame) else frame
        return cls(tuple(refitted), models, card, others(examples),
                   others(pd.read_parquet(held)) if held.is_file() else None, others(scores))

    @staticmethod
    def check(model_path: Path, refitted: Sequence[str]) -> None:
        """A one-line :class:`ConfigError` unless ``refitted`` names algorithms of the model and
        ``model_path`` is a model with its card and examples beside it (what a refit keeps from)."""
        unknown = [a for a in refitted if a not in VIEWS]
        if unknown or not refitted:
            raise ConfigError(f"refit_algos={list(refitted)}: {', '.join(unknown) or 'nothing'} is not an algorithm "
                              f"of the model (choose among {', '.join(sorted(VIEWS))})")
        if not all(p.is_file() for p in (model_path, model_path.with_name("model_card.json"),
                                         model_path.with_name("examples.parquet"))):
            raise ConfigError(f"refit_algos= keeps the other algorithms' models of {model_path.parent}, which has no "
                              "model with its card and examples: refit every algorithm (no refit_algos)")

    def provenance(self, algo: str) -> dict[str, Any]:
        """What the kept card says of ``algo``'s examples (a card written before cards had ``algos``
        describes one fit of every algorithm: its own fields, with this algorithm's counts)."""
        if algo in self.card.get("algos", {}):
            return dict(self.card["algos"][algo])
        mine = self.examples[self.examples["algo"] == algo]
        model = next(m for (a, _), m in self.models.items() if a == algo)
        kind = model.info.get("kind", "")         # a card before model_kind: the fitted strength itself
        if kind == "logistic" and hasattr(model.estimator, "C"):
            kind = f"logistic:{model.estimator.C:g}"
        return {"examples": len(mine), "trained_on_runs": int(mine["run_id"].nunique()),
                "examples_version": self.card.get("examples_version"), "model_kind": self.card.get("model_kind", kind),
                "fitted": "before cards recorded it"}

    def merge(self, model_path: Path, mine: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
        """Add the kept part to the refitted model just saved at ``model_path`` from the examples ``mine``
        (the model, its card, the examples and held-out answers beside it, written); returns the protocol
        scores of both."""
        new_card = json.loads(model_path.with_name("model_card.json").read_text())
        fitted = {"examples": len(mine), "trained_on_runs": int(mine["run_id"].nunique()),
                  "examples_version": new_card.get("examples_version"), "model_kind": new_card.get("model_kind"),
                  "fitted": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        algos = {a: self.provenance(a) for a in sorted({a for a, _ in self.models})} | dict.fromkeys(self.refitted, fitted)
        parts = [self.examples, mine]
        if ("testable" in parts[0]) != ("testable" in parts[1]):   # a table without it scores every run (_testable)
            parts = [p if "testable" in p else p.assign(testable=True) for p in parts]
        merged = pd.concat(parts, ignore_index=True)

        def joined(field: str) -> Any:       # one value when every algorithm's fit agrees, else per algorithm
            values = {a: p.get(field) for a, p in algos.items()}
            return next(iter(values.values())) if len(set(map(str, values.values()))) == 1 else values
        card = {**new_card, "trained_on_runs": int(merged["run_id"].nunique()), "examples": len(merged),
                "model_kind": joined("model_kind"), "examples_version": joined("examples_version"),
                "algos": algos, "settings": {**self.card.get("settings", {}), **new_card.get("settings", {})},
                "models": {**{k: v for k, v in self.card["models"].items() if k.split("/")[0] not in self.refitted},
                           **new_card["models"]},
                "protocols": [p for p in self.card.get("protocols", []) if p.get("algo") not in self.refitted]
                + new_card.get("protocols", [])}
        save_models({**self.models, **load_models(model_path)}, model_path, card)
        atomic_write_parquet(model_path.with_name("examples.parquet"), merged)
        if self.held_out is not None:
            held = pd.read_parquet(model_path.with_name("heldout.parquet"))
            atomic_write_parquet(model_path.with_name("heldout.parquet"), pd.concat([self.held_out, held],
                                                                                   ignore_index=True))
        return pd.concat([self.scores, scores], ignore_index=True) if len(self.scores) else scores

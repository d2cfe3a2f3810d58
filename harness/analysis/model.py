"""The diagnosis model: healthy, one of the known faults, or "anomalous, cause unknown", with
calibrated probabilities, from a training log in any framework's view.

- **Examples.** Every run of the labelled dataset is rendered in every framework view that applies
  to its algorithm (:mod:`harness.logs.views`: the metrics, estimators and cadence that framework
  logs) and cut at 50%, 75% and 100% of its length (a prefix that ends before the fault's onset is a
  healthy example). Half of the examples carry the run's configuration as context (what the user's
  config holds), half none, so the model works with and without it.
- **Model.** One scikit-learn classifier per algorithm and view on :mod:`harness.analysis.features`
  (the logistic regression's own probabilities; tree models calibrated with Platt scaling on
  cross-validation folds, ``CalibratedClassifierCV``). No input identifies the fault: the features
  of a stored run are those of its exported log.
- **Answer.** Detect, then attribute (:func:`answer`): healthy unless P(anomalous) reaches the
  model's threshold (its source and threshold chosen out of fold in :func:`choose_anomaly`); then
  the most probable fault if its probability is >= ``unknown_threshold``, else "unknown".
- **Out of sample.** Scored on held-out runs (their seeds and configurations were never trained on),
  on whole held-out configurations (one env or task left out, and hyperparameter regions left out),
  and, for the "unknown" answer, on faults left out of training.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.features import features
from harness.config import ConfigError, visible_config
from harness.logs import to_canonical
from harness.logs.views import StoredRun, applies, render
from harness.metrics import CANONICAL
from harness.store import atomic_write_bytes, atomic_write_json, atomic_write_parquet

HEALTHY = "healthy"
UNKNOWN = "unknown"
PREFIXES = (0.5, 0.75, 1.0)
#: views a model is fitted for, per algorithm (a view's profile must apply to the algorithm)
VIEWS = {"ppo": ("canonical", "sb3", "cleanrl", "verl"), "grpo": ("canonical", "trl", "verl")}
FEATURE_VERSION = 1        # bump when the features change: cached examples are recomputed
UNKNOWN_THRESHOLD = 0.35   # a fault is named when its probability reaches this (else "unknown")
ONSET_MARGIN = 1           # updates after the onset before a prefix counts as faulty


# ---- examples ---------------------------------------------------------------------------

def _with_config(run_id: str, view: str, prefix: float) -> bool:
    """Deterministically, half of the examples carry the configuration."""
    digest = hashlib.sha256(f"{run_id}/{view}/{prefix}".encode()).digest()
    return digest[0] % 2 == 0


def run_examples(root: str | Path, run_id: str, views: Sequence[str] | None = None,
                 prefixes: Sequence[float] = PREFIXES) -> list[dict[str, Any]]:
    """The examples of one stored run: one per applicable view and prefix (features + labels)."""
    run = StoredRun.load(root, run_id)
    meta = run.meta
    algo = meta["algo"]
    fault = meta["fault"]
    onset = int(meta.get("onset_update") or 0)
    n_updates = max(int(meta["n_updates"]), 1)
    configured = visible_config(algo, meta["hyperparameters"]["configured"])
    sampled = meta.get("sampled") or {}
    out = []
    for view in views or VIEWS[algo]:
        if not applies(view, algo):
            continue
        try:
            frame = to_canonical(render(run, view), view).metrics
        except ConfigError:          # nothing this framework would have logged (a run dead at update 0)
            continue
        if frame.empty:
            continue
        for prefix in prefixes:
            rows = max(1, int(round(len(frame) * prefix)))
            upto = n_updates * rows / max(len(frame), 1)          # updates covered by the prefix
            label = fault if fault != "none" and upto > onset + ONSET_MARGIN else HEALTHY
            config = configured if _with_config(run_id, view, prefix) else {}
            space = meta.get("action_space") if view == "canonical" else None
            out.append({"run_id": run_id, "view": view, "prefix": prefix, "label": label, "fault": fault,
                        "algo": algo, "env": meta["env"], "backend": meta["backend"], "seed": meta["seed"],
                        "is_control": bool(meta["is_control"]), "with_config": bool(config),
                        **{f"space.{k}": v for k, v in (sampled.get("algo") or configured).items()
                           if isinstance(v, (int, float, bool))},
                        **features(frame.iloc[:rows], CANONICAL, algo, config, space)})
    return out


def build_examples(root: str | Path, run_ids: Sequence[str], n_jobs: int = -1,
                   cache: Path | None = None, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Examples of every run (in parallel; cached by run id when ``cache`` is a parquet path)."""
    from joblib import Parallel, delayed

    cached = pd.DataFrame()
    if cache is not None and cache.exists():
        cached = pd.read_parquet(cache)
        if cached.get("feature_version", pd.Series([None])).iloc[0] != FEATURE_VERSION:
            cached = pd.DataFrame()
        else:
            cached = cached[cached["run_id"].isin(run_ids)]
    todo = sorted(set(run_ids) - set(cached.get("run_id", [])))
    if progress:
        progress(f"features: {len(run_ids) - len(todo)} runs cached, {len(todo)} to render in every view")
    rows = Parallel(n_jobs=n_jobs)(delayed(run_examples)(str(root), rid) for rid in todo)
    fresh = pd.DataFrame([r for batch in rows for r in batch])
    if len(fresh):
        fresh["feature_version"] = FEATURE_VERSION
    frame = pd.concat([cached, fresh], ignore_index=True) if len(cached) else fresh
    if cache is not None and len(fresh):
        atomic_write_parquet(cache, frame)
    return frame


def feature_columns(examples: pd.DataFrame) -> list[str]:
    return [c for c in examples.columns if ":" in c or c.startswith("log:")]


# ---- the model --------------------------------------------------------------------------

def _signed_log(X: np.ndarray) -> np.ndarray:
    return np.sign(X) * np.log1p(np.abs(X))


#: the model families compared out of sample (the catalogue's ``model_kind`` picks one;
#: benchmarks/model_kinds.py compares them, and the logistic strengths, on held-out runs)
KINDS = ("boosting", "extratrees", "logistic")
LOGISTIC_C = 0.03      # chosen on held-out runs by benchmarks/model_kinds.py (best top-1 at >= 90% healthy)


def check_kind(kind: str) -> str:
    """``kind`` if it names a model family (``logistic:C`` with a positive C included), else a one-line error."""
    base, _, strength = kind.partition(":")
    try:
        ok = base in KINDS and (not strength or (base == "logistic" and float(strength) > 0))
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"model_kind={kind!r}; valid choices: {', '.join(KINDS)} (logistic:C with C > 0)")
    return kind


def make_estimator(kind: str = "boosting", seed: int = 0):
    """A classifier (the tree models' probabilities Platt-scaled on 3 cross-validation folds, the
    logistic regression's as they are): ``boosting`` (gradient-boosted trees), ``extratrees`` (extremely randomised trees) -- both with
    a missing value as a sentinel far below any real one --, ``logistic`` (L2 multinomial logistic
    regression on signed-log, standardised features with missing-value indicators; ``logistic:C``
    sets its inverse regularisation strength, default ``LOGISTIC_C``)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    family, _, strength = kind.partition(":")
    missing = SimpleImputer(strategy="constant", fill_value=-1e13, keep_empty_features=True)   # absent: far below
    if kind == "boosting":
        base = make_pipeline(missing, HistGradientBoostingClassifier(
            max_iter=80, learning_rate=0.1, max_leaf_nodes=15, min_samples_leaf=4, l2_regularization=1.0,
            random_state=seed))
    elif kind == "extratrees":
        base = make_pipeline(missing, ExtraTreesClassifier(n_estimators=200, min_samples_leaf=1, random_state=seed))
    elif family == "logistic":
        return make_pipeline(SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
                             FunctionTransformer(_signed_log), StandardScaler(),
                             LogisticRegression(C=float(strength or LOGISTIC_C), max_iter=3000))
    else:
        raise ValueError(f"unknown model kind {kind!r}; valid: {', '.join(KINDS)}")
    return CalibratedClassifierCV(base, method="sigmoid", cv=3)


@dataclass
class DiagnosisModel:
    """A fitted model for one algorithm and view."""
    algo: str
    view: str
    columns: list[str]
    classes: list[str]
    estimator: Any                   # healthy / each fault
    anomaly: Any = None              # healthy vs any fault (None when 1 - P(healthy) of the classes detects)
    unknown_threshold: float = UNKNOWN_THRESHOLD
    anomaly_threshold: float = 0.5   # fitted: the 90th percentile of P(anomalous) on healthy training logs
    info: dict[str, Any] = field(default_factory=dict)
    anomaly_source: str = "head"     # which P(anomalous) detects (ANOMALY_SOURCES; chosen out of fold in fit)

    def _X(self, rows: pd.DataFrame) -> np.ndarray:
        X = rows.reindex(columns=self.columns).to_numpy(dtype=float)
        return np.clip(np.nan_to_num(X, nan=np.nan, posinf=1e12, neginf=-1e12), -1e12, 1e12)

    def probabilities(self, rows: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(self.estimator.predict_proba(self._X(rows)), columns=list(self.estimator.classes_),
                            index=rows.index)

    def anomalous(self, rows: pd.DataFrame, probs: pd.DataFrame | None = None) -> np.ndarray:
        """P(not healthy): from the anomaly head, from the classes (1 - P(healthy)), or their mean,
        whichever ``fit`` found best out of fold (the classes when there is no head)."""
        probs = self.probabilities(rows) if probs is None else probs
        classes = 1.0 - probs.get(HEALTHY, pd.Series(0.0, index=rows.index)).to_numpy()
        if self.anomaly is None or self.anomaly_source == "classes":    # the head is not asked
            return classes
        head = self.anomaly.predict_proba(self._X(rows))[:, list(self.anomaly.classes_).index(1)]
        return combine_anomaly(self.anomaly_source, head, classes)

    def answers(self, probs: pd.DataFrame, anomalous: np.ndarray | None = None) -> list[str]:
        anomalous = 1.0 - probs.get(HEALTHY, 0.0).to_numpy() if anomalous is None else anomalous
        return answers_of(probs, anomalous, self.unknown_threshold, self.anomaly_threshold)

    def diagnose(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
        probs = self.probabilities(rows)
        anomalous = self.anomalous(rows, probs)
        return probs, anomalous, self.answers(probs, anomalous)


def answer(probs: pd.Series, threshold: float, anomalous: float | None = None, anomaly_threshold: float = 0.5) -> str:
    """The answer from the class probabilities and P(anomalous), detect then attribute: healthy
    unless the run looks anomalous (P(anomalous) >= ``anomaly_threshold``, fitted so that about
    ``HEALTHY_ALARMS`` of healthy training logs pass it); then a known fault when it is the most
    probable class with probability >= ``threshold``, else "unknown". A fault whose runs look
    healthy in this view (it leaves no trace in the metrics this log has) is thus answered healthy,
    instead of taking the top class on a healthy log by a hair."""
    top = str(probs.idxmax())
    p_top = float(probs.max())
    if anomalous is None:
        anomalous = 1.0 - float(probs.get(HEALTHY, 0.0))
    if anomalous < anomaly_threshold:
        return HEALTHY
    if top != HEALTHY and p_top >= threshold:
        return top
    return UNKNOWN


def answers_of(probs: pd.DataFrame, anomalous: np.ndarray, threshold: float, anomaly_threshold: float) -> list[str]:
    """:func:`answer` for every row of ``probs`` with its P(anomalous)."""
    return [answer(row, threshold, float(a), anomaly_threshold) for (_, row), a in zip(probs.iterrows(), anomalous)]


class TooFewClasses(ValueError):
    """Not enough labelled examples to fit a model (a small or one-sided dataset)."""


def fit(examples: pd.DataFrame, algo: str, view: str, seed: int = 0, kind: str = "boosting") -> DiagnosisModel:
    data = examples[(examples["algo"] == algo) & (examples["view"] == view)]
    columns = [c for c in feature_columns(data) if data[c].notna().any()]   # a view's missing metrics drop out
    counts = data["label"].value_counts()
    data = data[data["label"].isin(counts[counts >= 6].index)]     # CV needs a few examples per class
    if data["label"].nunique() < 2:
        raise TooFewClasses(f"{algo}/{view}: fewer than 2 classes with >= 6 examples")
    from threadpoolctl import threadpool_limits

    estimator = make_estimator(kind, seed=seed)
    X = np.clip(data[columns].to_numpy(dtype=float), -1e12, 1e12)
    labels = data["label"].to_numpy()
    anomaly = None                   # the healthy-vs-fault head, fitted only when its score is the one chosen
    with threadpool_limits(1):       # fits run in parallel processes: one thread each
        estimator.fit(X, labels)
        source, threshold, oof = choose_anomaly(kind, seed, X, labels, data["run_id"].to_numpy())
        if source != "classes":
            anomaly = make_estimator(kind, seed=seed).fit(X, (labels != HEALTHY).astype(int))
    return DiagnosisModel(algo=algo, view=view, columns=columns, classes=list(estimator.classes_),
                          estimator=estimator, anomaly=anomaly, anomaly_threshold=threshold, anomaly_source=source,
                          info={"n_examples": len(data), "n_runs": data["run_id"].nunique(),
                                "classes": {str(k): int(v) for k, v in counts.items()},
                                "run_ids": sorted(data["run_id"].unique()), "kind": kind,
                                "anomaly_out_of_fold": oof})


HEALTHY_ALARMS = 0.1      # share of healthy training logs the anomaly threshold lets through as anomalous
#: where P(anomalous) comes from: the healthy-vs-fault head, the classes (1 - P(healthy)), their mean
ANOMALY_SOURCES = ("head", "classes", "mean")


def combine_anomaly(source: str, head: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return {"head": head, "classes": classes, "mean": (head + classes) / 2}[source]


def threshold_for(healthy_scores: np.ndarray) -> float:
    """The P(anomalous) above which a log is called anomalous: the (1 - HEALTHY_ALARMS) quantile of
    out-of-fold scores on healthy logs, never below 0.5."""
    return float(max(0.5, np.quantile(healthy_scores, 1 - HEALTHY_ALARMS))) if len(healthy_scores) else 0.5


def choose_anomaly(kind: str, seed: int, X: np.ndarray, labels: np.ndarray,
                   groups: np.ndarray) -> tuple[str, float, dict[str, Any]]:
    """Which P(anomalous) to detect with, and its threshold, from out-of-fold predictions on the
    training runs alone (3 folds by run): each source's threshold lets ``HEALTHY_ALARMS`` of healthy
    logs through, and the source whose answers are right on the most faulty logs wins (ties: the
    head). Nothing outside the training set is looked at."""
    import warnings

    from sklearn.model_selection import GroupKFold, cross_val_predict

    is_anomalous = (labels != HEALTHY).astype(int)
    if is_anomalous.min() == is_anomalous.max() or len(set(groups)) < 3:
        return "head", 0.5, {}
    cv = GroupKFold(3)
    head = cross_val_predict(make_estimator(kind, seed=seed), X, is_anomalous, groups=groups, cv=cv,
                             method="predict_proba")[:, 1]
    order = np.unique(labels)
    with warnings.catch_warnings():      # a rare class missing from a fold gets probability 0 there
        warnings.filterwarnings("ignore", message="Number of classes in training fold")
        oof = pd.DataFrame(cross_val_predict(make_estimator(kind, seed=seed), X, labels, groups=groups, cv=cv,
                                             method="predict_proba"), columns=order)
    classes = 1.0 - oof[HEALTHY].to_numpy() if HEALTHY in oof else np.ones(len(labels))
    healthy, faulty = is_anomalous == 0, is_anomalous == 1
    out: dict[str, Any] = {}
    for source in ANOMALY_SOURCES:
        scores = combine_anomaly(source, head, classes)
        threshold = threshold_for(scores[healthy])
        answers = np.array(answers_of(oof, scores, UNKNOWN_THRESHOLD, threshold))
        out[source] = {"threshold": threshold, "top1_faulty": float((answers[faulty] == labels[faulty]).mean()),
                       "healthy_called_healthy": float((answers[healthy] == HEALTHY).mean())}
    best = max(ANOMALY_SOURCES, key=lambda s: (out[s]["top1_faulty"], s == "head"))
    return best, out[best]["threshold"], out


# ---- scores -----------------------------------------------------------------------------

def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """ECE of the top-1 probability: the mean |accuracy - confidence| over equal-width bins."""
    if len(confidence) == 0:
        return math.nan
    edges = np.linspace(0, 1, bins + 1)
    idx = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            total += sel.mean() * abs(correct[sel].mean() - confidence[sel].mean())
    return float(total)


def score(model: DiagnosisModel, test: pd.DataFrame, known: set[str] | None = None) -> dict[str, Any]:
    """Top-1 accuracy of the answer on faulty logs of known faults, healthy logs called healthy,
    calibration error of the top-1 probability, and what left-out faults were called."""
    if test.empty:
        return {"n": 0}
    probs, _, answers = model.diagnose(test)
    top = probs.idxmax(axis=1).to_numpy()
    conf = probs.max(axis=1).to_numpy()
    labels = test["label"].to_numpy()
    known = known if known is not None else set(model.classes)
    in_known = np.array([lab in known for lab in labels])
    healthy = labels == HEALTHY
    faulty_known = in_known & ~healthy
    answered = np.array(answers)
    out = {"n": len(test), "n_runs": test["run_id"].nunique(),
           "top1_faulty": float((answered[faulty_known] == labels[faulty_known]).mean()) if faulty_known.any() else math.nan,
           "top1_all": float((answered[in_known] == labels[in_known]).mean()) if in_known.any() else math.nan,
           "healthy_called_healthy": float((answered[healthy] == HEALTHY).mean()) if healthy.any() else math.nan,
           "ece": expected_calibration_error(conf[in_known], (top[in_known] == labels[in_known]).astype(float)),
           "n_faulty": int(faulty_known.sum()), "n_healthy": int(healthy.sum())}
    unseen = ~in_known
    if unseen.any():
        out["unseen_called_unknown"] = float((answered[unseen] == UNKNOWN).mean())
        out["unseen_called_healthy"] = float((answered[unseen] == HEALTHY).mean())
        out["n_unseen"] = int(unseen.sum())
    return out


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


def json_safe(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


# ---- protocols: what is held out -----------------------------------------------------------

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


def run_protocol(examples: pd.DataFrame, algo: str, view: str, protocol: Protocol, seed: int = 0,
                 kind: str = "boosting") -> dict[str, Any] | None:
    data = examples[(examples["algo"] == algo) & (examples["view"] == view)]
    train = data[~data["run_id"].isin(protocol.test)]
    if protocol.excluded_fault:
        train = train[train["fault"] != protocol.excluded_fault]
    test = data[data["run_id"].isin(protocol.test) & (data["prefix"] == 1.0) & _testable(data)]
    try:
        model = fit(train, algo, view, seed=seed, kind=kind)
    except TooFewClasses:
        return None                  # the protocol cannot be run on this dataset
    known = set(model.classes)
    result = {"algo": algo, "view": view, "protocol": protocol.name, "kind": protocol.kind, "model_kind": kind,
              **score(model, test, known)}
    if protocol.kind == "held-out runs":     # per-class accuracy and what each fault was taken for
        result["per_class"] = per_class(test["label"].to_numpy(), model.diagnose(test)[2])
    return result


def _testable(examples: pd.DataFrame) -> pd.Series:
    """Runs that may be scored: the diverse dataset's (extra training runs are never tested)."""
    if "testable" not in examples:
        return pd.Series(True, index=examples.index)
    return examples["testable"].astype(bool)


def per_class(labels: np.ndarray, answers: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for label in sorted(set(labels)):
        sel = labels == label
        got = pd.Series(np.array(answers)[sel]).value_counts()
        out[str(label)] = {"n": int(sel.sum()), "right": float((np.array(answers)[sel] == label).mean()),
                           "answers": {str(k): int(v) for k, v in got.items()}}
    return out


def fit_models(examples: pd.DataFrame, seed: int = 0, kind: str = "boosting") -> dict[tuple[str, str], DiagnosisModel]:
    models = {}
    for algo, views in VIEWS.items():
        for view in views:
            part = examples[(examples["algo"] == algo) & (examples["view"] == view)]
            try:
                models[(algo, view)] = fit(part, algo, view, seed=seed, kind=kind)
            except TooFewClasses:
                continue
    return models


def save_models(models: dict[tuple[str, str], DiagnosisModel], path: Path, card: dict[str, Any]) -> None:
    import io

    import joblib
    import sklearn

    buf = io.BytesIO()
    joblib.dump({"sklearn": sklearn.__version__, "feature_version": FEATURE_VERSION, "models": models}, buf,
                compress=3)
    atomic_write_bytes(path, buf.getvalue())
    atomic_write_json(path.with_name("model_card.json"), json_safe(card))


def load_models(path: Path) -> dict[tuple[str, str], DiagnosisModel]:
    import joblib
    import sklearn

    if not path.exists():
        raise ConfigError(f"no diagnosis model at {path}: build it with python -m harness.catalogue "
                          "(it needs the diverse dataset: python -m harness -m +sweep=dataset)")
    try:
        bundle = joblib.load(path)
    except Exception as exc:  # a corrupt or foreign file
        raise ConfigError(f"the diagnosis model at {path} cannot be read ({type(exc).__name__}): rebuild it "
                          "with python -m harness.catalogue") from None
    if bundle.get("sklearn") != sklearn.__version__ or bundle.get("feature_version") != FEATURE_VERSION:
        raise ConfigError(f"the diagnosis model at {path} was built with scikit-learn {bundle.get('sklearn')} and "
                          f"features v{bundle.get('feature_version')}; this is {sklearn.__version__} / "
                          f"v{FEATURE_VERSION}: rebuild it with python -m harness.catalogue")
    return bundle["models"]


# ---- the catalogue's step: fit, score out of sample, save --------------------------------------

def training_examples(root: Path, run_ids: Sequence[str], extra_ids: Sequence[str], cache: Path | None,
                      n_jobs: int = -1, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Examples of the diverse runs (``testable``: they may be scored) and of extra training runs."""
    extra = sorted(set(extra_ids) - set(run_ids))
    examples = build_examples(root, [*run_ids, *extra], n_jobs=n_jobs, cache=cache, progress=progress)
    examples["testable"] = examples["run_id"].isin(set(run_ids))
    return examples


def fit_and_evaluate(root: Path, run_ids: Sequence[str], out_path: Path, progress: Callable[[str], None] = print,
                     n_jobs: int = -1, left_out: bool = True, seed: int = 0, kind: str = "boosting",
                     extra_ids: Sequence[str] = ()) -> pd.DataFrame:
    """Build the examples of the diverse runs (``run_ids``) and of extra training runs
    (``extra_ids``: the catalogue's, one configuration per setup but many seeds per fault), score
    every protocol out of sample on diverse runs only, fit the final models on all runs and save them
    with a model card. Returns the protocol scores (one row per algorithm, view and protocol)."""
    import time

    from joblib import Parallel, delayed

    start = time.perf_counter()
    examples = training_examples(root, run_ids, extra_ids, out_path.with_name("examples.parquet"), n_jobs, progress)
    extra = sorted(set(extra_ids) - set(run_ids))
    run_ids = [*run_ids, *extra]
    jobs = [(algo, view, p) for algo, views in VIEWS.items() if (examples["algo"] == algo).any()
            for p in protocols(examples, algo, seed=seed, left_out=left_out) for view in views
            if (p.kind != "left-out fault" or view == "canonical")]
    progress(f"diagnosis model: {len(examples)} examples from {len(run_ids)} runs; scoring {len(jobs)} "
             "held-out fits")
    results = Parallel(n_jobs=n_jobs)(delayed(run_protocol)(examples, a, v, p, seed, kind) for a, v, p in jobs)
    scores = pd.DataFrame([r for r in results if r is not None])
    models = fit_models(examples, seed=seed, kind=kind)
    for (algo, view), model in models.items():
        held = scores[(scores["algo"] == algo) & (scores["view"] == view) & (scores["kind"] == "held-out runs")]
        if len(held):
            model.info["out_of_sample"] = {k: float(held.iloc[0][k]) for k in
                                           ("top1_faulty", "healthy_called_healthy", "ece")}
    card = {"trained_on_runs": len(run_ids), "extra_training_runs": len(extra), "examples": len(examples),
            "views": VIEWS,
            "models": {f"{a}/{v}": {k: m.info[k] for k in ("n_examples", "n_runs", "classes")} | {
                "out_of_sample": m.info.get("out_of_sample")} for (a, v), m in models.items()},
            "protocols": scores.drop(columns=["per_class"], errors="ignore").to_dict("records"),
            "seconds": round(time.perf_counter() - start, 1)}
    save_models(models, out_path, card)
    progress(f"diagnosis model: {len(models)} models fitted and scored in {card['seconds']} s -> {out_path}")
    return scores

"""The diagnosis model: healthy, one of the known faults, or "anomalous, cause unknown", with
calibrated probabilities, from a training log in any framework's view.

- **Examples.** Every run of the labelled dataset is rendered in every framework view that applies
  to its algorithm (:mod:`harness.logs.views`: the metrics, estimators and cadence that framework
  logs) and cut at 50%, 75% and 100% of its length (a prefix that ends before the fault's onset is a
  healthy example). Half of the examples carry the run's configuration as context (what the user's
  config holds), half none, so the model works with and without it.
- **Model.** One scikit-learn classifier per algorithm and view on :mod:`harness.analysis.features`,
  calibrated with Platt scaling on cross-validation folds (``CalibratedClassifierCV``). No input
  identifies the fault: the features of a stored run are those of its exported log.
- **Answer.** The most probable class if it is healthy with probability >= 0.5, or a fault with
  probability >= ``unknown_threshold``; otherwise "unknown" when P(healthy) < 0.5 (anomalous, cause
  unknown), else healthy.
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
from harness.config import visible_config
from harness.metrics import CANONICAL

HEALTHY = "healthy"
UNKNOWN = "unknown"
PREFIXES = (0.5, 0.75, 1.0)
#: views a model is fitted for, per algorithm (a view's profile must apply to the algorithm)
VIEWS = {"ppo": ("canonical", "sb3", "cleanrl", "verl"), "grpo": ("canonical", "trl", "verl")}
FEATURE_VERSION = 1        # bump when the features change: cached examples are recomputed
ONSET_MARGIN = 1           # updates after the onset before a prefix counts as faulty


# ---- examples ---------------------------------------------------------------------------

def _with_config(run_id: str, view: str, prefix: float) -> bool:
    """Deterministically, half of the examples carry the configuration."""
    digest = hashlib.sha256(f"{run_id}/{view}/{prefix}".encode()).digest()
    return digest[0] % 2 == 0


def run_examples(root: str | Path, run_id: str, views: Sequence[str] | None = None,
                 prefixes: Sequence[float] = PREFIXES) -> list[dict[str, Any]]:
    """The examples of one stored run: one per applicable view and prefix (features + labels)."""
    from harness.config import ConfigError
    from harness.logs import to_canonical
    from harness.logs.views import StoredRun, applies, render

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
        from harness.store import atomic_write_parquet

        atomic_write_parquet(cache, frame)
    return frame


def feature_columns(examples: pd.DataFrame) -> list[str]:
    return [c for c in examples.columns if ":" in c or c.startswith("log:")]


# ---- the model --------------------------------------------------------------------------

def _signed_log(X: np.ndarray) -> np.ndarray:
    return np.sign(X) * np.log1p(np.abs(X))


#: the model families compared out of sample (the catalogue's ``model_kind`` picks one)
KINDS = ("boosting", "extratrees", "logistic")


def make_estimator(kind: str = "boosting", seed: int = 0):
    """A classifier with calibrated probabilities (Platt scaling on 3 cross-validation folds):
    ``boosting`` (gradient-boosted trees), ``extratrees`` (extremely randomised trees) -- both with
    a missing value as a sentinel far below any real one --, ``logistic`` (L2 multinomial logistic
    regression on signed-log, standardised features with missing-value indicators)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer, StandardScaler

    missing = SimpleImputer(strategy="constant", fill_value=-1e13, keep_empty_features=True)   # absent: far below
    if kind == "boosting":
        base = make_pipeline(missing, HistGradientBoostingClassifier(
            max_iter=80, learning_rate=0.1, max_leaf_nodes=15, min_samples_leaf=4, l2_regularization=1.0,
            random_state=seed))
    elif kind == "extratrees":
        base = make_pipeline(missing, ExtraTreesClassifier(n_estimators=200, min_samples_leaf=1, random_state=seed))
    elif kind == "logistic":
        return make_pipeline(SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
                             FunctionTransformer(_signed_log), StandardScaler(),
                             LogisticRegression(C=0.5, max_iter=3000))
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
    anomaly: Any = None              # healthy vs any fault: how far from healthy, whatever the cause
    unknown_threshold: float = 0.35
    anomaly_threshold: float = 0.5   # fitted: the 90th percentile of P(anomalous) on healthy training logs
    info: dict[str, Any] = field(default_factory=dict)

    def _X(self, rows: pd.DataFrame) -> np.ndarray:
        X = rows.reindex(columns=self.columns).to_numpy(dtype=float)
        return np.clip(np.nan_to_num(X, nan=np.nan, posinf=1e12, neginf=-1e12), -1e12, 1e12)

    def probabilities(self, rows: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame(self.estimator.predict_proba(self._X(rows)), columns=list(self.estimator.classes_),
                            index=rows.index)

    def anomalous(self, rows: pd.DataFrame) -> np.ndarray:
        """P(not healthy) from the anomaly head (from the classes when there is none)."""
        if self.anomaly is None:
            return 1.0 - self.probabilities(rows).get(HEALTHY, pd.Series(0.0, index=rows.index)).to_numpy()
        classes = list(self.anomaly.classes_)
        return self.anomaly.predict_proba(self._X(rows))[:, classes.index(1)]

    def answers(self, probs: pd.DataFrame, anomalous: np.ndarray | None = None) -> list[str]:
        anomalous = 1.0 - probs.get(HEALTHY, 0.0).to_numpy() if anomalous is None else anomalous
        return [answer(row, self.unknown_threshold, float(a), self.anomaly_threshold)
                for (_, row), a in zip(probs.iterrows(), anomalous)]

    def diagnose(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
        probs = self.probabilities(rows)
        anomalous = self.anomalous(rows)
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
    anomaly = make_estimator(kind, seed=seed)
    is_anomalous = (data["label"] != HEALTHY).to_numpy().astype(int)
    with threadpool_limits(1):       # fits run in parallel processes: one thread each
        estimator.fit(X, data["label"].to_numpy())
        anomaly.fit(X, is_anomalous)
        threshold = anomaly_threshold(make_estimator(kind, seed=seed), X, is_anomalous, data["run_id"].to_numpy())
    return DiagnosisModel(algo=algo, view=view, columns=columns, classes=list(estimator.classes_),
                          estimator=estimator, anomaly=anomaly, anomaly_threshold=threshold, info={"n_examples": len(data), "n_runs": data["run_id"].nunique(),
                                                     "classes": {str(k): int(v) for k, v in counts.items()},
                                                     "run_ids": sorted(data["run_id"].unique()), "kind": kind})


HEALTHY_ALARMS = 0.1      # share of healthy training logs the anomaly threshold lets through as anomalous


def anomaly_threshold(estimator: Any, X: np.ndarray, is_anomalous: np.ndarray, groups: np.ndarray) -> float:
    """The P(anomalous) above which a log is called anomalous: the (1 - HEALTHY_ALARMS) quantile of
    out-of-fold predictions on healthy logs (folds by run), never below 0.5."""
    from sklearn.model_selection import GroupKFold, cross_val_predict

    if is_anomalous.min() == is_anomalous.max() or len(set(groups)) < 3:
        return 0.5
    oof = cross_val_predict(estimator, X, is_anomalous, groups=groups, cv=GroupKFold(3), method="predict_proba")[:, 1]
    healthy = oof[is_anomalous == 0]
    return float(max(0.5, np.quantile(healthy, 1 - HEALTHY_ALARMS))) if len(healthy) else 0.5


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
    runs = examples[examples["algo"] == algo].drop_duplicates("run_id")
    out = [Protocol("held-out runs (30%, stratified by fault)", "held-out runs",
                    frozenset(split_runs(examples[examples["algo"] == algo], seed=seed)[1]))]
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
    test = data[data["run_id"].isin(protocol.test) & (data["prefix"] == 1.0)]
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

    from harness.store import atomic_write_bytes, atomic_write_json

    buf = io.BytesIO()
    joblib.dump({"sklearn": sklearn.__version__, "feature_version": FEATURE_VERSION, "models": models}, buf,
                compress=3)
    atomic_write_bytes(path, buf.getvalue())
    atomic_write_json(path.with_name("model_card.json"), json_safe(card))


def load_models(path: Path) -> dict[tuple[str, str], DiagnosisModel]:
    import joblib
    import sklearn

    from harness.config import ConfigError

    if not path.exists():
        raise ConfigError(f"no diagnosis model at {path}: build it with python -m harness.catalogue "
                          "(it needs the diverse dataset: python -m harness -m +sweep=dataset)")
    try:
        bundle = joblib.load(path)
    except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file
        raise ConfigError(f"the diagnosis model at {path} cannot be read ({type(exc).__name__}): rebuild it "
                          "with python -m harness.catalogue") from None
    if bundle.get("sklearn") != sklearn.__version__ or bundle.get("feature_version") != FEATURE_VERSION:
        raise ConfigError(f"the diagnosis model at {path} was built with scikit-learn {bundle.get('sklearn')} and "
                          f"features v{bundle.get('feature_version')}; this is {sklearn.__version__} / "
                          f"v{FEATURE_VERSION}: rebuild it with python -m harness.catalogue")
    return bundle["models"]


# ---- the catalogue's step: fit, score out of sample, save --------------------------------------

def fit_and_evaluate(root: Path, run_ids: Sequence[str], out_path: Path, progress: Callable[[str], None] = print,
                     n_jobs: int = -1, left_out: bool = True, seed: int = 0, kind: str = "boosting") -> pd.DataFrame:
    """Build the examples of the diverse runs, score every protocol out of sample, fit the final
    models on all runs and save them with a model card. Returns the protocol scores (one row per
    algorithm, view and protocol)."""
    import time

    from joblib import Parallel, delayed

    start = time.perf_counter()
    examples = build_examples(root, run_ids, n_jobs=n_jobs, cache=out_path.with_name("examples.parquet"),
                              progress=progress)
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
    card = {"trained_on_runs": len(run_ids), "examples": len(examples), "views": VIEWS,
            "models": {f"{a}/{v}": {k: m.info[k] for k in ("n_examples", "n_runs", "classes")} | {
                "out_of_sample": m.info.get("out_of_sample")} for (a, v), m in models.items()},
            "protocols": scores.drop(columns=["per_class"], errors="ignore").to_dict("records"),
            "seconds": round(time.perf_counter() - start, 1)}
    save_models(models, out_path, card)
    progress(f"diagnosis model: {len(models)} models fitted and scored in {card['seconds']} s -> {out_path}")
    return scores

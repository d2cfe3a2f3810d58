"""The diagnosis model: healthy, one of the known faults (or a class of faults the log cannot tell
apart), or "anomalous, cause unknown", with probabilities, from a training log in any framework's view.

- **Model.** One scikit-learn classifier per algorithm and view on :mod:`harness.analysis.features`
  of :mod:`harness.analysis.examples` (logistic regression: its own probabilities; tree models
  calibrated with Platt scaling on cross-validation folds). No input identifies the fault.
- **Evidence.** The exact evidence observed in the log (:mod:`harness.analysis.evidence`) updates the
  model's probabilities with the rates measured on the training logs of the same view (Bayes' rule).
- **What the view can show.** From the model's own out-of-fold answers
  (:mod:`harness.analysis.identifiability`): the faults this view cannot show, and classes of faults
  it cannot tell apart.
- **Prior.** The training logs are mostly faulty (one in eight is healthy); a user's log is not.
  The odds of the healthy-looking classes (healthy and the faults this log cannot show) are raised by
  ``healthy_weight``, fitted out of fold so that 95% of healthy training logs come out healthy (the
  weight is kept within [1, 19]). The printed probabilities are these; the answer follows from them.
- **Answer** (:meth:`DiagnosisModel.decide`), which follows from the printed numbers: ``too_short``
  when the log has fewer than ``MIN_ROWS`` steps; ``healthy`` when P(anomalous) -- the probability of
  a fault this log can show -- is below 1/2 (the answer then reads "healthy, or a fault this log
  cannot show", with that probability); otherwise the most probable class if its probability reaches
  ``unknown_threshold`` (a single fault, or a class answered with its members and the settings to
  check), else ``unknown``. A fault the view cannot show counts as shown in a log where an evidence
  item fired that raises its odds against healthy ``SHOWN`` times or more (e.g. the ratio exactly 1
  with several optimizer steps configured).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import pandas as pd

from harness.analysis import evidence
from harness.analysis.examples import HEALTHY, evidence_frame, feature_columns
from harness.analysis.features import FEATURE_VERSION, MIN_ROWS
from harness.analysis.identifiability import Identifiability, identify
from harness.analysis.labels import UNLABELLED
from harness.analysis.linear import LinearModel, signed_log
from harness.config import ConfigError
from harness.store import atomic_write_bytes, atomic_write_json

UNKNOWN = "unknown"
TOO_SHORT = "too_short"
UNKNOWN_THRESHOLD = 0.35   # a fault (class) is named when its probability reaches this (else "unknown")
HEALTHY_ALARMS = 0.05      # share of healthy training logs the anomaly threshold lets through as anomalous
                           # (the operating point: >= 90% of healthy logs answered healthy, with a margin
                           # for logs unlike the training logs; it was 0.1 until 2026-11-25)
THRESHOLD_RANGE = (0.5, 0.95)  # the out-of-fold anomaly quantile is kept within this (healthy weight 1 to 19)
ANSWER_THRESHOLD = 0.5     # after the prior shift, a log is anomalous when P(anomalous) reaches this
SHOWN = 4.0                # a fired evidence item that raises a fault's odds against healthy this much shows it
MIN_CLASS_EXAMPLES = 6     # a label with fewer training examples in a view is not a class there

#: the model families compared out of sample (the catalogue's ``model_kind`` picks one;
#: benchmarks/model_kinds.py compares them, and the logistic strengths, on held-out runs)
KINDS = ("boosting", "extratrees", "logistic")
LOGISTIC_C = 0.03  # 0.1 names more held-out logs right in every view at an AUROC as high or higher, but on
                   # held-out envs and regions calls fewer healthy logs healthy (SB3 view 85% -> 76%):
                   # benchmarks/results/studies/heldout_logistic_c.md and heldout_ood_logistic_c.md; docs/benchmarks.md


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


def make_estimator(kind: str = "boosting", seed: int = 0) -> Any:
    """The scikit-learn classifier of a model ``kind`` (:func:`harness.analysis.estimators.build`)."""
    from harness.analysis.estimators import build  # scikit-learn: only to fit

    return build(resolved_kind(kind), seed)


def resolved_kind(kind: str) -> str:
    """``kind`` with the logistic strength it is fitted with spelled out (``logistic`` -> ``logistic:0.03``):
    what a model card records, so that a change of the default is visible in the models it made."""
    return f"logistic:{LOGISTIC_C}" if kind == "logistic" else kind


@dataclass
class Answer:
    """One log's diagnosis. Every field is printed by ``diagnose``; ``answer`` follows from them:
    ``too_short`` if the log has fewer than ``min_rows`` steps; else ``healthy`` (healthy, or one of
    ``invisible``) if ``anomalous < threshold``; else the most probable fault of ``members`` if
    ``class_probability >= unknown_threshold``; else ``unknown``."""

    answer: str                                  # healthy | a fault | unknown | too_short
    kind: str                                    # healthy | fault | class | unknown | too_short
    probabilities: dict[str, float]              # after the evidence and the prior, most probable first
    model_probabilities: dict[str, float]        # the classifier's, before either
    anomalous: float                             # P(a fault this log can show)
    threshold: float
    healthy_weight: float                        # the prior shift applied to the healthy-looking classes
    unknown_threshold: float
    members: tuple[str, ...] = ()                # the answer's class (one member: the fault is identified)
    class_probability: float = math.nan
    invisible: tuple[str, ...] = ()              # faults this log cannot show (none of its evidence shows them)
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)   # items that fired, with their rates
    settings: tuple[str, ...] = ()               # what to check, for the answer's class
    n_rows: int = 0
    min_rows: int = MIN_ROWS
    unlike_training: dict[str, str] = field(default_factory=dict)   # quantity -> "above" / "below" every training log
    # what the answer rests on (set by harness.detection.diagnosis.judge): "invariants" (a broken invariant
    # decides), "model" (the classifier and the evidence, each named fault supported), "evidence" (off the
    # model's training range: invariants and signatures alone, the model's ranking a hint)
    basis: str = "model"
    fault_class: str = ""                        # a class of harness.analysis.invariants.CLASSES, when answered
    broken: tuple[dict[str, Any], ...] = ()      # broken invariants: name, class, steps, values, decisive
    support: dict[str, tuple[str, ...]] = field(default_factory=dict)   # named fault -> what in the log shows it
    ruled_out: tuple[str, ...] = ()              # faults whose readable expected signatures all stay silent

    @property
    def probability(self) -> float:
        """The answer's probability; for ``healthy``, of healthy or a fault this log cannot show."""
        if self.answer == HEALTHY:
            return 1.0 - self.anomalous
        return self.probabilities.get(self.answer, math.nan)

    def top(self, k: int = 3) -> list[str]:
        return list(self.probabilities)[:k]


def shows(rates: Mapping[str, Any], faults: Iterable[str]) -> set[str]:
    """The ``faults`` an evidence item shows when it fires: its measured fire rate on them is at least
    ``SHOWN`` times its rate on healthy logs (``rates``: label -> (fired, logs); a label it was never
    evaluated on counts 1/2, see :func:`evidence.fire_rate`)."""
    healthy = evidence.fire_rate(rates.get(HEALTHY))
    return {f for f in faults if evidence.fire_rate(rates.get(f)) >= SHOWN * healthy}


@dataclass
class DiagnosisModel:
    """A fitted model for one algorithm and framework view."""

    algo: str
    view: str
    columns: list[str]
    classes: list[str]
    estimator: Any
    unknown_threshold: float = UNKNOWN_THRESHOLD
    anomaly_threshold: float = 0.5                # the out-of-fold quantile the prior shift is fitted to
    healthy_weight: float = 1.0                   # = anomaly_threshold / (1 - anomaly_threshold)
    rates: evidence.Rates = field(default_factory=dict)
    ranges: evidence.SettingRanges = field(default_factory=evidence.SettingRanges)   # fitted evidence items
    identifiability: Identifiability = field(default_factory=Identifiability)
    settings: dict[str, tuple[str, ...]] = field(default_factory=dict)      # fault -> what to check
    info: dict[str, Any] = field(default_factory=dict)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A model pickled before a field was added gets that field's default (a model fitted before the
        setting evidence reads no setting items)."""
        for f in dataclasses.fields(self):
            if f.name not in state:
                state[f.name] = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        self.__dict__.update(state)

    def _X(self, rows: pd.DataFrame) -> np.ndarray:
        X = rows.reindex(columns=self.columns).to_numpy(dtype=float)
        return np.clip(np.nan_to_num(X, nan=np.nan, posinf=1e12, neginf=-1e12), -1e12, 1e12)

    def probabilities(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The classifier's probabilities (logs x classes)."""
        return pd.DataFrame(self.estimator.predict_proba(self._X(rows)), columns=list(self.estimator.classes_),
                            index=rows.index)

    def invisible_in(self, fired: Mapping[str, bool | None]) -> tuple[str, ...]:
        """The faults this log cannot show: those the view cannot show, unless an evidence item that
        fired in this log raises their odds against healthy ``SHOWN`` times or more (measured rates)."""
        shown: set[str] = set()
        for name, value in fired.items():
            if value:
                shown |= shows(self.rates.get(name, {}), self.identifiability.invisible)
        return tuple(f for f in self.identifiability.invisible if f not in shown)

    def shifted(self, combined: pd.Series, invisible: Sequence[str], weight: float) -> pd.Series:
        """The probabilities with the healthy-looking classes' odds (healthy and the ``invisible``
        faults) raised ``weight`` times."""
        healthy_looking = {HEALTHY, *invisible}
        out = combined.astype(float) * np.array([weight if c in healthy_looking else 1.0 for c in combined.index])
        total = float(out.sum())
        return out / total if total > 0 else combined.astype(float)

    def weigh(self, combined: pd.Series, fired: Mapping[str, bool | None],
              weight: float) -> tuple[tuple[str, ...], pd.Series, float]:
        """For one log after the evidence: the faults it cannot show, the probabilities with the
        healthy-looking classes weighted ``weight`` (most probable first), and P(anomalous)."""
        invisible = self.invisible_in(fired)
        probs = self.shifted(combined, invisible, weight).sort_values(ascending=False)
        healthy_looking = {HEALTHY, *invisible}
        return invisible, probs, float(probs[[c for c in probs.index if c not in healthy_looking]].sum())

    def scores(self, combined: pd.DataFrame, observed: pd.DataFrame) -> np.ndarray:
        """P(anomalous) of every row of ``combined`` (after the evidence ``observed``, aligned),
        before the prior shift (what ``healthy_weight`` is fitted on)."""
        fired = observed.to_dict("records")
        return np.array([self.weigh(combined.iloc[i], {k.removeprefix("ev:"): v == 1.0 for k, v in fired[i].items()},
                                    1.0)[2] for i in range(len(combined))])

    def decide(self, model_probs: pd.Series, combined: pd.Series, fired: Mapping[str, bool | None],
               n_rows: int, row: Mapping[str, Any] | None = None) -> Answer:
        """The answer for one log from its probabilities before and after the evidence (``row``: its
        features, for the values the evidence report quotes)."""
        ident = self.identifiability
        invisible, probs, anomalous = self.weigh(combined, fired, self.healthy_weight)
        healthy_looking = {HEALTHY, *invisible}
        common = dict(probabilities={str(k): float(v) for k, v in probs.items()},
                      model_probabilities={str(k): float(v) for k, v in model_probs.sort_values(ascending=False).items()},
                      anomalous=anomalous, threshold=ANSWER_THRESHOLD, healthy_weight=self.healthy_weight,
                      unknown_threshold=self.unknown_threshold, invisible=invisible,
                      evidence=self.evidence_report(fired, probs, row), n_rows=n_rows)
        if n_rows < MIN_ROWS:
            return Answer(TOO_SHORT, TOO_SHORT, **common)
        if anomalous < ANSWER_THRESHOLD:
            return Answer(HEALTHY, HEALTHY, **common)
        classes: dict[tuple[str, ...], float] = {}
        for c, p in probs.items():
            if c not in healthy_looking:
                members = ident.members(str(c))
                classes[members] = classes.get(members, 0.0) + float(p)
        members, p_class = max(classes.items(), key=lambda kv: kv[1])
        if p_class < self.unknown_threshold:
            return Answer(UNKNOWN, UNKNOWN, **common)
        best = max(members, key=lambda m: float(probs.get(m, 0.0)))
        settings = tuple(dict.fromkeys(s for m in members for s in self.settings.get(m, ())))
        return Answer(best, "fault" if len(members) == 1 else "class", members=members, class_probability=p_class,
                      settings=settings, **common)

    def evidence_report(self, fired: Mapping[str, bool | None], probs: pd.Series,
                        row: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
        """For each item that fired: its description (a setting item's with the log's value, from its
        feature ``row``) and the rates it fired at on training logs of this view, for healthy and the
        three most probable classes."""
        out = {}
        shown = [HEALTHY, *[str(c) for c in probs.index[:4] if c != HEALTHY]][:4]
        for name, value in fired.items():
            if not value:
                continue
            per = self.rates.get(name, {})
            setting = evidence.setting_key(name)
            if setting:          # its owners' rates, and the pooled rate of every other class
                owners = self.ranges.owners.get(setting[0], ())
                rates = {**{c: list(per.get(c, (0, 0))) for c in owners},
                         "elsewhere": list(per.get(HEALTHY, (0, 0)))}
                out[name] = {"description": self.ranges.describe(name, (row or {}).get(f"cfg:{setting[0]}")),
                             "rates": rates}
                continue
            out[name] = {"description": evidence.EVIDENCE[name].description,
                         "rates": {c: list(per.get(c, (0, 0))) for c in shown}}
        return out

    def unlike_training(self, rows: pd.DataFrame) -> list[dict[str, str]]:
        """For each row, the quantities (a metric, or a ``cfg:`` / ``rel:`` / ``sig:`` feature) with a
        feature outside the range of every training log of this view, and on which side ("above" /
        "below"); empty when the estimator keeps no training range (tree models)."""
        span = self.estimator if isinstance(self.estimator, LinearModel) else None
        steps = getattr(self.estimator, "steps", None)       # a logistic pipeline saved before LinearModel
        if steps and hasattr(steps[0][1], "outside"):
            span = steps[0][1]
        if span is None:
            return [{} for _ in range(len(rows))]
        X = self._X(rows)
        out = []
        for i, row in enumerate(span.outside(X)):
            sides: dict[str, str] = {}
            for j in np.flatnonzero(row):
                head = self.columns[j].partition(":")[0]
                name = self.columns[j] if head in ("cfg", "rel", "sig") else head
                sides.setdefault(name, "above" if X[i, j] > span.high_[j] else "below")
            out.append(sides)
        return out

    def observed(self, rows: pd.DataFrame, observed: pd.DataFrame) -> pd.DataFrame:
        """The evidence of feature ``rows``: the fixed items observed in their logs (``observed``'s
        ``ev:`` columns) and the fitted ones read from their configuration (:attr:`ranges`)."""
        fixed = observed.set_axis(rows.index).drop(columns=[c for c in observed.columns
                                                            if evidence.setting_key(c.removeprefix("ev:"))])
        return pd.concat([fixed, self.ranges.observe(rows)], axis=1)

    def diagnose(self, rows: pd.DataFrame, observed: pd.DataFrame, n_rows: Sequence[int],
                 excluded: Iterable[str] = ()) -> list[Answer]:
        """Answers for feature rows, their observed evidence (``ev:`` columns of the fixed items; the
        fitted ones are read from the rows) and their lengths. ``excluded``: classes the log rules out
        (their probability goes to the rest, in proportion; all of them: none is excluded)."""
        model_probs = self.probabilities(rows)
        observed = self.observed(rows, observed)
        combined = evidence.combine_frame(model_probs, observed, self.rates)
        drop = [c for c in combined.columns if c in set(excluded)]
        if drop and len(drop) < combined.shape[1]:          # a model that knows no other class keeps them
            kept = combined.drop(columns=drop)
            total = kept.sum(axis=1).replace(0.0, np.nan)
            combined = kept.div(total, axis=0).fillna(1.0 / max(1, kept.shape[1])).reindex(
                columns=combined.columns, fill_value=0.0)
        fired = observed.to_dict("records")
        unlike = self.unlike_training(rows)
        records = [dict(zip(rows.columns, values)) for values in rows.to_numpy().tolist()]   # to_dict: ms per column
        return [dataclasses.replace(self.decide(model_probs.iloc[i], combined.iloc[i],
                                                {k.removeprefix("ev:"): (None if not np.isfinite(v) else bool(v))
                                                 for k, v in fired[i].items()}, int(n_rows[i]), records[i]),
                                    unlike_training=unlike[i]) for i in range(len(rows))]


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


class TooFewClasses(ValueError):
    """Not enough labelled examples to fit a model (a small or one-sided dataset)."""


def threshold_for(healthy_scores: np.ndarray) -> float:
    """The P(anomalous) at and above which a log is anomalous: the (1 - HEALTHY_ALARMS) quantile of
    out-of-fold scores of healthy training logs, within THRESHOLD_RANGE."""
    lo, hi = THRESHOLD_RANGE
    if not len(healthy_scores):
        return lo
    return float(min(hi, max(lo, np.quantile(healthy_scores, 1 - HEALTHY_ALARMS))))


def folds(labels: np.ndarray, groups: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The 3 folds by run every out-of-fold quantity of a fit uses; None with fewer than 3 runs."""
    if len(set(groups)) < 3:
        return None
    from sklearn.model_selection import GroupKFold

    return list(GroupKFold(3).split(np.zeros(len(labels)), labels, groups))


def out_of_fold(kind: str, seed: int, X: np.ndarray, labels: np.ndarray, cv: list[tuple[np.ndarray, np.ndarray]],
                observed: pd.DataFrame, ranges: evidence.SettingRanges) -> pd.DataFrame:
    """Each training log's probabilities from a model (and evidence rates) fitted without its run
    (the folds ``cv``), after the evidence (``observed``: the fitted items already out of fold, their
    rates pooled by ``ranges``)."""
    from sklearn.model_selection import cross_val_predict

    order = np.unique(labels)
    with warnings.catch_warnings():      # a rare class missing from a fold gets probability 0 there
        warnings.filterwarnings("ignore", message="Number of classes in training fold")
        probs = pd.DataFrame(cross_val_predict(make_estimator(kind, seed=seed), X, labels, cv=cv,
                                               method="predict_proba"), columns=order)
    combined = probs.copy()
    for train, test in cv:
        rates = ranges.pool(evidence.rates(observed.iloc[train], labels[train]))
        combined.iloc[test] = evidence.combine_frame(probs.iloc[test], observed.iloc[test], rates).to_numpy()
    return combined


def fit(examples: pd.DataFrame, algo: str, view: str, seed: int = 0, kind: str = "logistic",
        settings: Mapping[str, tuple[str, ...]] | None = None) -> DiagnosisModel:
    """Fit the model of one algorithm and view: the classifier, the evidence rates, the classes of
    faults the view cannot tell apart and those it cannot show (from out-of-fold answers), and the
    anomaly threshold (out of fold too). Logs shorter than ``MIN_ROWS`` (answered "too short to
    judge", e.g. a run dead at its first update) neither train the model nor measure the rates."""
    data = examples[(examples["algo"] == algo) & (examples["view"] == view) & ~examples["label"].isin(UNLABELLED)
                    & (examples.get("n_rows", pd.Series(MIN_ROWS, index=examples.index)) >= MIN_ROWS)]
    columns = [c for c in feature_columns(data) if data[c].notna().any()]   # a view's missing metrics drop out
    counts = data["label"].value_counts()
    data = data[data["label"].isin(counts[counts >= MIN_CLASS_EXAMPLES].index)]
    if data["label"].nunique() < 2:
        raise TooFewClasses(f"{algo}/{view}: fewer than 2 classes with >= {MIN_CLASS_EXAMPLES} examples")
    data = data.reset_index(drop=True)
    X = np.clip(data[columns].to_numpy(dtype=float), -1e12, 1e12)
    labels = data["label"].to_numpy()
    cv = folds(labels, data["run_id"].to_numpy())
    observed = evidence_frame(data)
    ranges = evidence.SettingRanges()
    if cv is not None:               # the fitted items: ranges from all logs, rates from out-of-fold observations
        ranges, settings_seen = evidence.setting_evidence(data, labels, algo, settings or {}, cv)
        observed = pd.concat([observed, settings_seen], axis=1)
    from threadpoolctl import threadpool_limits

    estimator = make_estimator(kind, seed=seed)
    with threadpool_limits(1):       # fits run in parallel processes: one thread each
        estimator.fit(X, labels)
        oof = out_of_fold(kind, seed, X, labels, cv, observed, ranges) if cv is not None else None
    faults = sorted(c for c in np.unique(labels) if c != HEALTHY)
    model = DiagnosisModel(algo=algo, view=view, columns=columns, classes=list(estimator.classes_),
                           estimator=estimator, rates=ranges.pool(evidence.rates(observed, labels)), ranges=ranges,
                           settings={f: tuple(s) for f, s in (settings or {}).items() if f in faults},
                           info={"n_examples": len(data), "n_runs": data["run_id"].nunique(),
                                 "classes": {str(k): int(v) for k, v in counts.items()},
                                 "run_ids": sorted(data["run_id"].unique()), "kind": kind})
    if oof is not None:
        answers = oof.idxmax(axis=1).to_numpy()
        model.identifiability = identify(labels, answers, faults)
        scores = model.scores(oof, observed)
        model.anomaly_threshold = threshold_for(scores[labels == HEALTHY])
        model.healthy_weight = model.anomaly_threshold / (1.0 - model.anomaly_threshold)
        model.info["out_of_fold"] = {"healthy_alarm_rate": float((scores[labels == HEALTHY]
                                                                  >= model.anomaly_threshold).mean()),
                                     "detected": float((scores[labels != HEALTHY] >= model.anomaly_threshold).mean())}
    return model


def fit_models(examples: pd.DataFrame, views: Mapping[str, Sequence[str]], seed: int = 0, kind: str = "logistic",
               settings: Mapping[str, tuple[str, ...]] | None = None) -> dict[tuple[str, str], DiagnosisModel]:
    models = {}
    for algo, algo_views in views.items():
        for view in algo_views:
            part = examples[(examples["algo"] == algo) & (examples["view"] == view)]
            try:
                models[(algo, view)] = fit(part, algo, view, seed=seed, kind=kind, settings=settings)
            except TooFewClasses:
                continue
    return models


def json_safe(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def save_models(models: dict[tuple[str, str], DiagnosisModel], path: Path, card: dict[str, Any]) -> None:
    """Write the models (a logistic one as :class:`LinearModel`, which numpy alone reads) and their card.
    A tree model stays a scikit-learn object: its file records the scikit-learn version that reads it."""
    from harness.analysis.estimators import compiled

    models = {key: dataclasses.replace(m, estimator=compiled(m.estimator)) for key, m in models.items()}
    needs = None if all(isinstance(m.estimator, LinearModel) for m in models.values()) else sklearn_version()
    buf = io.BytesIO()
    joblib.dump({"sklearn": needs, "feature_version": FEATURE_VERSION, "models": models}, buf, compress=3)
    atomic_write_bytes(path, buf.getvalue())
    atomic_write_json(path.with_name("model_card.json"), json_safe(card))


def sklearn_version() -> str:
    """The installed scikit-learn's version, read without importing it (an import takes 1-2 s)."""
    from importlib.metadata import version

    return version("scikit-learn")


def load_models(path: Path) -> dict[tuple[str, str], DiagnosisModel]:
    if not path.exists():
        raise ConfigError(f"no diagnosis model at {path}: build it with python -m harness.catalogue "
                          "(it needs the diverse dataset: python -m harness -m +sweep=dataset)")
    try:
        bundle = joblib.load(path)
    except Exception as exc:  # a corrupt or foreign file
        raise ConfigError(f"the diagnosis model at {path} cannot be read ({type(exc).__name__}): rebuild it "
                          "with python -m harness.catalogue") from None
    needs = bundle.get("sklearn")
    if (needs is not None and needs != sklearn_version()) or bundle.get("feature_version") != FEATURE_VERSION:
        raise ConfigError(f"the diagnosis model at {path} was built with scikit-learn {needs} and "
                          f"features v{bundle.get('feature_version')}; this is {sklearn_version()} / "
                          f"v{FEATURE_VERSION}: rebuild it with python -m harness.catalogue")
    return bundle["models"]


def __getattr__(name: str) -> Any:
    """The estimator classes a model pickled before :class:`LinearModel` names here (scikit-learn, on demand)."""
    if name in ("TrainingRange", "_signed_log"):
        if name == "_signed_log":
            return signed_log
        from harness.analysis.estimators import TrainingRange

        return TrainingRange
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

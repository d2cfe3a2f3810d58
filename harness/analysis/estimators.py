"""The scikit-learn estimators the diagnosis model is fitted with (imported only to fit one, or to read a
model saved before models were saved as arrays: :mod:`harness.analysis.linear`)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import ExtraTreesClassifier, HistGradientBoostingClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from harness.analysis.linear import LinearModel, clipped, outside, signed_log


class TrainingRange(TransformerMixin, BaseEstimator):
    """Clips each feature to the range the training logs spanned (its ``q`` and ``1 - q`` quantiles,
    by default its minimum and maximum, faulty logs included), so a log unlike any training log (another task's entropy scale, a schedule
    that logs a learning rate of exactly 0) cannot push a linear model's logits beyond what training
    ever produced; missing values stay missing. ``outside(X)`` says which features of a row were
    clipped."""

    def __init__(self, q: float = 0.0):
        self.q = q

    def fit(self, X: np.ndarray, y: Any = None) -> TrainingRange:
        X = np.asarray(X, dtype=float)
        with warnings.catch_warnings():      # a feature no training log has: no range, left as it is
            warnings.simplefilter("ignore", RuntimeWarning)
            self.low_ = np.nanquantile(X, self.q, axis=0)
            self.high_ = np.nanquantile(X, 1 - self.q, axis=0)
        self.low_ = np.where(np.isnan(self.low_), -np.inf, self.low_)
        self.high_ = np.where(np.isnan(self.high_), np.inf, self.high_)
        return self

    def transform(self, X: np.ndarray) -> np.ndarray:
        return clipped(X, self.low_, self.high_)

    def outside(self, X: np.ndarray) -> np.ndarray:
        """Boolean [rows, features]: where a value lies outside the training range."""
        return outside(X, self.low_, self.high_)


def build(kind: str, seed: int = 0) -> Any:
    """A classifier: ``boosting`` (gradient-boosted trees) or ``extratrees`` (extremely randomised
    trees), a missing value as a sentinel far below any real one and probabilities Platt-scaled on 3
    cross-validation folds; or ``logistic`` (L2 multinomial logistic regression on signed-log,
    standardised features with missing-value indicators, its own probabilities; ``logistic:C`` sets
    its inverse regularisation strength: :func:`harness.analysis.model.make_estimator` spells it out)."""
    family, _, strength = kind.partition(":")
    missing = SimpleImputer(strategy="constant", fill_value=-1e13, keep_empty_features=True)   # absent: far below
    if kind == "boosting":
        base = make_pipeline(missing, HistGradientBoostingClassifier(
            max_iter=80, learning_rate=0.1, max_leaf_nodes=15, min_samples_leaf=4, l2_regularization=1.0,
            random_state=seed))
    elif kind == "extratrees":
        base = make_pipeline(missing, ExtraTreesClassifier(n_estimators=200, min_samples_leaf=1, random_state=seed))
    elif family == "logistic":
        return make_pipeline(TrainingRange(), SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
                             FunctionTransformer(signed_log), StandardScaler(),
                             LogisticRegression(C=float(strength), max_iter=3000))
    else:
        raise ValueError(f"unknown model kind {kind!r}")
    return CalibratedClassifierCV(base, method="sigmoid", cv=3)


def compiled(estimator: Any) -> Any:
    """A fitted ``logistic`` pipeline as :class:`LinearModel` (numpy alone reads it); any other estimator
    as it is."""
    steps = getattr(estimator, "steps", None)
    if steps and isinstance(steps[0][1], TrainingRange):
        return LinearModel.from_pipeline(estimator)
    return estimator

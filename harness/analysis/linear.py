"""The fitted logistic diagnosis model as plain arrays, so reading a log needs numpy alone.

A published model is fitted by scikit-learn (:func:`harness.analysis.model.make_estimator`'s ``logistic``
pipeline: training range, median imputation with missing-value indicators, signed log, standardisation,
multinomial logistic regression). Importing scikit-learn takes one to two seconds, most of a cold
``diagnose``; so a model is saved as :class:`LinearModel`, the same arithmetic on the fitted arrays. Its
probabilities equal the pipeline's to rounding (a test holds them together)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def signed_log(X: np.ndarray) -> np.ndarray:
    """sign(x) log(1 + |x|): the pipeline's transform of the imputed features."""
    return np.sign(X) * np.log1p(np.abs(X))


def clipped(X: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Each feature clipped to the training range; missing values stay missing."""
    X = np.asarray(X, dtype=float)
    return np.where(np.isnan(X), np.nan, np.clip(X, low, high))


def outside(X: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Boolean [rows, features]: where a value lies outside the training range."""
    X = np.asarray(X, dtype=float)
    return ~np.isnan(X) & ((X < low) | (X > high))


@dataclass
class LinearModel:
    """The logistic pipeline's fitted state: the training range (``low_`` / ``high_`` per feature), the
    imputation values and the features that get a missing-value indicator, the standardisation, and the
    logistic regression's coefficients over ``classes_``."""

    low_: np.ndarray
    high_: np.ndarray
    fill: np.ndarray
    indicated: np.ndarray          # indices of the features with a missing-value indicator
    mean: np.ndarray
    scale: np.ndarray
    coef_: np.ndarray              # classes x (features + indicators)
    intercept_: np.ndarray
    classes_: np.ndarray
    C: float

    @classmethod
    def from_pipeline(cls, pipeline: Any) -> LinearModel:
        """The arrays of a fitted ``logistic`` pipeline (range, imputer, signed log, scaler, regression)."""
        span, imputer, _, scaler, regression = (step for _, step in pipeline.steps)
        indicator = imputer.indicator_
        return cls(low_=np.asarray(span.low_, float), high_=np.asarray(span.high_, float),
                   fill=np.asarray(imputer.statistics_, float),
                   indicated=np.asarray(indicator.features_ if indicator is not None else [], dtype=int),
                   mean=np.asarray(scaler.mean_, float), scale=np.asarray(scaler.scale_, float),
                   coef_=np.asarray(regression.coef_, float), intercept_=np.asarray(regression.intercept_, float),
                   classes_=np.asarray(regression.classes_), C=float(regression.C))

    def outside(self, X: np.ndarray) -> np.ndarray:
        """Boolean [rows, features]: where a value lies outside the training range."""
        return outside(X, self.low_, self.high_)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """The standardised inputs of the regression, as the pipeline computes them."""
        X = clipped(X, self.low_, self.high_)
        missing = np.isnan(X)
        X = np.where(missing, self.fill, X)
        X = np.hstack([X, missing[:, self.indicated].astype(float)])
        X = signed_log(X)
        return (X - self.mean) / self.scale

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities (rows x ``classes_``): a softmax over classes; two classes: a sigmoid."""
        scores = self.transform(X) @ self.coef_.T + self.intercept_
        if len(self.classes_) == 2:
            p = 1.0 / (1.0 + np.exp(-scores[:, 0]))
            return np.column_stack([1.0 - p, p])
        scores = scores - scores.max(axis=1, keepdims=True)
        exp = np.exp(scores)
        return exp / exp.sum(axis=1, keepdims=True)

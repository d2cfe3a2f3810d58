"""The statistics the catalogue reports, exact where the seed counts allow.

- :func:`wilson`: a rate's 95% score interval (never degenerate at 0/n or n/n);
- :func:`auroc`: P(faulty > healthy), ties half;
- :func:`auroc_pvalue`: a permutation p-value for the AUROC, exchanging labels *within twin pairs*
  when each faulty seed has its healthy twin (same seed and config), else between the groups;
  exact when the permutations can be enumerated, Monte Carlo otherwise;
- :func:`fisher_greater`: one-sided Fisher exact test that a signature fires more on faulty runs;
- :func:`holm`: Holm's step-down adjustment for the number of tests.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.stats import fisher_exact

Z95 = 1.959963984540054
EXACT_LIMIT = 1 << 16      # enumerate up to this many permutations, sample beyond


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval for k successes out of n (NaN when n == 0)."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    denom = 1 + Z95 ** 2 / n
    centre = (p + Z95 ** 2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a faulty summary > a healthy one), ties counting half (Mann-Whitney U / n m)."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def _auroc_batch(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AUROC of ``values`` for every row of boolean ``labels`` (True = faulty)."""
    greater = (values[:, None] > values[None, :]).astype(float)
    ties = (values[:, None] == values[None, :]).astype(float)
    score = greater + 0.5 * ties                                   # [i, j]: i beats j
    pos = labels.astype(float)
    neg = 1.0 - pos
    total = np.einsum("ki,ij,kj->k", pos, score, neg)
    return total / (pos.sum(1) * neg.sum(1))


def auroc_pvalue(pos: np.ndarray, neg: np.ndarray, paired: bool, rng: np.random.Generator,
                 n_mc: int = 20000) -> float:
    """Two-sided permutation p-value of the AUROC (its distance from 0.5).

    ``paired``: ``pos[i]`` and ``neg[i]`` are twins (same seed); the null swaps labels within
    each pair (2^n permutations). Otherwise the labels are permuted over all runs."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) < 2 or len(neg) < 2:
        return math.nan
    observed = abs(auroc(pos, neg) - 0.5)
    values = np.concatenate([pos, neg])
    n_pos = len(pos)
    if paired:
        if len(pos) != len(neg):
            raise ValueError("paired AUROC needs one healthy twin per faulty run")
        n = len(pos)
        if 2 ** n <= EXACT_LIMIT:
            flips = np.array(list(itertools.product([False, True], repeat=n)))
        else:
            flips = rng.random((n_mc, n)) < 0.5
        labels = np.concatenate([~flips, flips], axis=1)           # flip: the pair's labels swap
    else:
        total = len(values)
        if math.comb(total, n_pos) <= EXACT_LIMIT:
            labels = np.zeros((math.comb(total, n_pos), total), dtype=bool)
            for row, chosen in enumerate(itertools.combinations(range(total), n_pos)):
                labels[row, list(chosen)] = True
        else:
            labels = np.argsort(rng.random((n_mc, total)), axis=1) < n_pos
    null = np.abs(_auroc_batch(values, labels) - 0.5)
    exact = labels.shape[0] != n_mc or (paired and 2 ** len(pos) <= EXACT_LIMIT)
    hits = int((null >= observed - 1e-12).sum())
    return hits / len(null) if exact else (hits + 1) / (len(null) + 1)


def fisher_greater(fired_faulty: int, n_faulty: int, fired_healthy: int, n_healthy: int) -> float:
    """One-sided Fisher exact p-value that the signature fires more often on faulty runs."""
    if n_faulty == 0 or n_healthy == 0:
        return math.nan
    table = [[fired_faulty, n_faulty - fired_faulty], [fired_healthy, n_healthy - fired_healthy]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values (NaN stays NaN and is not counted as a test)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted

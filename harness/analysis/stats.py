"""The statistics the catalogue reports, exact where the seed counts allow.

Small pure functions over per-run numbers (one number per seed: a firing count, a run's median of
a metric); nothing here knows about runs, cells or signatures.

- :func:`rate`: k of n as a share (NaN when n == 0);
- :func:`wilson`: a rate's 95% score interval (never degenerate at 0/n or n/n);
- :func:`auroc`: P(faulty > healthy), ties half;
- :func:`auroc_pvalue`: a two-sided permutation p-value for the AUROC, exchanging labels *within twin
  pairs* when each faulty seed has its healthy twin (same seed and config), else between the groups;
  exact when the permutations can be enumerated, Monte Carlo otherwise;
- :func:`one_sided_perm_p`: the one-sided (AUROC at least as large) unpaired permutation p-value;
- :func:`fisher_greater`: one-sided Fisher exact test that a signature fires more on faulty runs;
- :func:`holm`: Holm's step-down adjustment for the number of tests;
- :func:`fallback`: which hypotheses, tested in a fixed order at halving shares of alpha (a
  rejection passes its level on), are rejected (the catalogue's manifestation test);
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054
EXACT_LIMIT = 1 << 16      # enumerate up to this many permutations, sample beyond
TOLERANCE = 1e-12          # a permuted AUROC this close to the observed one counts as reaching it


def rate(k: int, n: int) -> float:
    """``k / n``, the share of ``n`` runs on which something happened (NaN when ``n == 0``)."""
    return k / n if n else math.nan


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval ``(low, high)`` for k successes out of n (NaN when n == 0)."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    denom = 1 + Z95 ** 2 / n
    centre = (p + Z95 ** 2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(a faulty summary > a healthy one), ties counting half (Mann-Whitney U / n m).

    ``pos``: shape (n,), one summary per faulty run; ``neg``: shape (m,), one per healthy run.
    NaN when either is empty."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def _auroc_batch(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """AUROC of ``values`` (shape (n,)) for every row of boolean ``labels`` (shape (k, n), True =
    faulty); returns shape (k,)."""
    greater = (values[:, None] > values[None, :]).astype(float)
    ties = (values[:, None] == values[None, :]).astype(float)
    score = greater + 0.5 * ties                                   # [i, j]: i beats j
    pos = labels.astype(float)
    neg = 1.0 - pos
    total = np.einsum("ki,ij,kj->k", pos, score, neg)
    return total / (pos.sum(1) * neg.sum(1))


def _group_labellings(n_total: int, n_pos: int, rng: np.random.Generator, n_mc: int) -> tuple[np.ndarray, bool]:
    """Labellings of ``n_total`` runs with ``n_pos`` faulty ones: every one (shape (C(n_total, n_pos),
    n_total)) when there are at most :data:`EXACT_LIMIT`, else ``n_mc`` drawn uniformly (shape
    (n_mc, n_total)). Returns (labels, exact)."""
    count = math.comb(n_total, n_pos)
    if count <= EXACT_LIMIT:
        labels = np.zeros((count, n_total), dtype=bool)
        for row, chosen in enumerate(itertools.combinations(range(n_total), n_pos)):
            labels[row, list(chosen)] = True
        return labels, True
    return np.argsort(rng.random((n_mc, n_total)), axis=1) < n_pos, False


def _pair_labellings(n_pairs: int, rng: np.random.Generator, n_mc: int) -> tuple[np.ndarray, bool]:
    """Labellings of ``n_pairs`` twin pairs laid out as (faulty..., healthy...), each pair's labels
    kept or swapped: all 2^n_pairs (exact) when at most :data:`EXACT_LIMIT`, else ``n_mc`` drawn.
    Returns (labels of shape (k, 2 n_pairs), exact)."""
    if 2 ** n_pairs <= EXACT_LIMIT:
        flips, exact = np.array(list(itertools.product([False, True], repeat=n_pairs))), True
    else:
        flips, exact = rng.random((n_mc, n_pairs)) < 0.5, False
    return np.concatenate([~flips, flips], axis=1), exact          # flip: the pair's labels swap


def _p_value(null: np.ndarray, observed: float, exact: bool) -> float:
    """Share of the null statistics (shape (k,)) reaching ``observed``: exact, or the Monte Carlo
    estimate with its +1 correction (never 0)."""
    hits = int((null >= observed - TOLERANCE).sum())
    return hits / len(null) if exact else (hits + 1) / (len(null) + 1)


def auroc_pvalue(pos: np.ndarray, neg: np.ndarray, paired: bool, rng: np.random.Generator,
                 n_mc: int = 20000) -> float:
    """Two-sided permutation p-value of the AUROC (its distance from 0.5).

    ``pos``: shape (n,), faulty summaries; ``neg``: shape (m,), healthy ones. ``paired``:
    ``pos[i]`` and ``neg[i]`` are twins (same seed, so n == m); the null swaps labels within each
    pair (2^n permutations). Otherwise the labels are permuted over all runs. NaN when either side
    has fewer than 2 runs. ``rng`` is drawn from only when the permutations are sampled."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) < 2 or len(neg) < 2:
        return math.nan
    observed = abs(auroc(pos, neg) - 0.5)
    values = np.concatenate([pos, neg])
    if paired:
        if len(pos) != len(neg):
            raise ValueError("paired AUROC needs one healthy twin per faulty run")
        labels, exact = _pair_labellings(len(pos), rng, n_mc)
    else:
        labels, exact = _group_labellings(len(values), len(pos), rng, n_mc)
    return _p_value(np.abs(_auroc_batch(values, labels) - 0.5), observed, exact)


def one_sided_perm_p(pos: np.ndarray, neg: np.ndarray, rng: np.random.Generator, n_mc: int) -> float:
    """P(AUROC >= observed) under exchanging faulty and healthy labels (unpaired).

    ``pos``: shape (n,), faulty summaries; ``neg``: shape (m,), healthy ones (multiply both by -1
    to test the other direction). Exact over the C(n + m, n) labellings when they can be
    enumerated, else ``n_mc`` drawn from ``rng``. NaN when either side has fewer than 2 runs."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) < 2 or len(neg) < 2:
        return math.nan
    values = np.concatenate([pos, neg])
    labels, exact = _group_labellings(len(values), len(pos), rng, n_mc)
    return _p_value(_auroc_batch(values, labels), auroc(pos, neg), exact)


def fisher_greater(fired_faulty: int, n_faulty: int, fired_healthy: int, n_healthy: int) -> float:
    """One-sided Fisher exact p-value that the signature fires more often on faulty runs (NaN when
    either group is empty)."""
    if n_faulty == 0 or n_healthy == 0:
        return math.nan
    from scipy.stats import fisher_exact  # here: scipy.stats takes ~1 s to import, which diagnose never needs

    table = [[fired_faulty, n_faulty - fired_faulty], [fired_healthy, n_healthy - fired_healthy]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given (NaN stays NaN and is not counted as a test)."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    adjusted = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def fallback(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """The fallback procedure (Wiens 2003): ``pvalues`` in their pre-specified order (most promising
    first), the i-th tested at its share ``alpha * w_i`` of the level plus the whole level the
    hypothesis before it used if that one was rejected; no stop at a failure. Weights halve along the
    order (1/2, 1/4, ..., the last two equal, summing to 1), so the first hypothesis is tested at
    alpha / 2 and a later one still gets tested when an earlier one fails. The family-wise error rate
    stays <= alpha under any dependence. Returns whether each was rejected (NaN never is)."""
    m = len(pvalues)
    weights = [2.0 ** -(i + 1) for i in range(m - 1)] + [2.0 ** -(m - 1)] if m else []
    rejected, carried = [], 0.0
    for p, w in zip(pvalues, weights):
        level = alpha * w + carried
        ok = bool(p < level)          # NaN compares False
        rejected.append(ok)
        carried = level if ok else 0.0
    return rejected

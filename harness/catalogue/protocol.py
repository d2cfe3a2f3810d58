"""The catalogue's protocol for one cell: which bug leaves which metric signature, out of sample.

This module owns windows, the calibration / held-out split, every signature's and metric's
evaluation on a cell, the verdicts, the evidence selected on the calibration half and its
fallback test on the held-out half, and the cell's summary (:func:`evaluate_cell`). The
statistics themselves are in :mod:`harness.analysis.stats`.

Protocol (every rate in the published catalogue follows it):

- **Matched windows.** A faulty run is read from its onset over the updates it completed (a
  diverged run stops part-way through an update; that partial row is read only by the
  non-finite signatures). Its healthy twin (same seed and config) and the controls of the same
  seed are read over exactly the same updates, so a short diverged run is never compared with
  a whole healthy run. Healthy seeds without a faulty counterpart use the cell's median window.
- **Calibration and held-out seeds.** Even seeds calibrate, odd seeds are held out. On the
  calibration half, every scale signature's threshold is moved out from its default to the edge
  of the healthy runs where they cross it (so it never fires on a healthy calibration run), and
  the verdicts are decided: a
  signature *separates* when it fires on >= 80% of faulty, <= 20% of healthy and <= 20% of
  control runs (a signature that fires on the look-alike controls is not specific). The rates
  reported are the held-out ones, with Wilson 95% intervals.
- **Manifested** is decided out of sample too: the calibration half selects the evidence (the
  separating signatures and up to three metrics whose per-run summary reaches AUROC >= 0.9 or
  <= 0.1), and the held-out half tests each selected item (Fisher's exact test for a signature,
  an exact permutation test for a metric, one-sided in the calibrated direction) by the
  fallback procedure: strongest on calibration first, the first at 0.025, each later one at its
  halving share of 0.05 plus the level of the one before it when that passed (Wiens 2003; a failure
  does not end the test; the family-wise error rate stays <= 0.05). A fault manifested when an item
  passes.
- **Metrics over all seeds**: each metric's per-run summary (its median over the window) gives
  an AUROC faulty vs healthy, with a permutation p-value that exchanges labels within twin pairs
  (exact: 2^n permutations), Holm-corrected over the metrics of the cell.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from faults import FAULTS
from harness.agents.base import trainers_of
from harness.analysis import signatures, stats
from harness.analysis.runs import Cell, RunSet
from harness.analysis.signatures import DIRECTIONS, Result
from harness.catalogue.rows import (
    SPLITS,
    CellResult,
    CellSummary,
    Counts,
    GroupCounts,
    HeldOutTest,
    MetricRow,
    SignatureRow,
)
from harness.config import ConfigError, backend_config
from harness.metrics import PROGRESS, applicable

SEPARATES = (0.8, 0.2)     # fires on >= 80% of faulty runs and <= 20% of healthy runs and controls
SELECT_AUROC = 0.9         # calibration AUROC (or 1 - AUROC) for a metric to be selected as evidence
MAX_METRICS = 3            # metrics selected per cell on the calibration half
ALPHA = 0.05
MIN_RUNS = 3               # evaluable runs a side below which no separation is claimed

#: a run's metrics as the evaluation reads them (the canonical ones, or a framework view's)
Frames = Callable[[str], pd.DataFrame]
#: run id -> signature name -> its statistic on the run's window
SignatureResults = dict[str, dict[str, Result]]
#: run id -> metric name -> the run's summary (median over its window)
Summaries = dict[str, dict[str, float]]

#: per ``frames``: what was computed from a run over a window, (what, run id, window, ...) -> value. A
#: setup's healthy twins and controls are read by every cell of that setup over the same windows, so
#: their rows, signature results and summaries are computed once per build (and view), not per cell;
#: freed with the ``frames`` function that keys them.
_MEMO: weakref.WeakKeyDictionary[Frames, dict[tuple, Any]] = weakref.WeakKeyDictionary()


def _once(frames: Frames, key: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, once per ``frames`` and ``key``."""
    memo = _MEMO.setdefault(frames, {})
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def split_of(seed: int) -> str:
    """Even seeds calibrate, odd seeds are held out."""
    return "calibration" if seed % 2 == 0 else "held-out"


def extra_training_runs(rs: RunSet) -> list[str]:
    """Catalogue runs that train the diagnosis model beside the diverse dataset: its calibration
    seeds (never scored by the model's protocols: one configuration per setup). Its held-out seeds
    stay out, so `evaluate detector=learned` scores them out of sample, and so do TRL-backend runs
    (their TRL logs are a test set: benchmarks/realworld/trl_backend_logs.py)."""
    runs = rs.runs
    trains = runs["backend"].map({b: trains_the_model(b) for b in runs["backend"].unique()}).astype(bool)
    return runs.loc[(runs["origin"] == "catalogue") & trains
                    & (runs["seed"].map(split_of) == "calibration"), "run_id"].tolist()


def trains_the_model(backend: str) -> bool:
    """Whether a backend's runs may train the diagnosis model (``Trainer.trains_the_model``; a backend no
    longer configured: yes, as its runs always did)."""
    try:
        return all(t.trains_the_model for t in trainers_of(backend_config(backend)))
    except ConfigError:
        return True


@dataclass(frozen=True)
class Groups:
    """Run ids of a cell (or of one split of it) per group."""

    faulty: list[str]
    healthy: list[str]
    control: list[str]


def split_groups(cell: Cell, rs: RunSet) -> dict[str, Groups]:
    """The cell's runs per split (:data:`~harness.catalogue.rows.SPLITS`) and group."""
    def part(ids: list[str], split: str) -> list[str]:
        return [r for r in ids if split_of(rs.metas[r]["seed"]) == split]
    return {s: Groups(part(cell.faulty, s), part(cell.healthy, s), part(cell.controls, s)) for s in SPLITS}


# ---- windows ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """The updates a run is read over: ``length`` updates from ``onset``; ``diverged``: the faulty
    run went non-finite in the update after them, which is read too (its partial row, and its
    twin's and controls' complete row of that update)."""

    onset: int
    length: int
    diverged: bool = False


def completed_after(metrics: pd.DataFrame, onset: int) -> int:
    """How many complete updates a run has from ``onset`` on (a diverged update is partial)."""
    return len(signatures.usable(signatures.post_onset(metrics, onset)))


def cell_windows(cell: Cell, rs: RunSet) -> dict[str, Window]:
    """Each run's window: a faulty run's own; its twin's and same-seed controls' the same."""
    own = {}
    for rid in cell.faulty:
        onset = int(rs.runs.set_index("run_id").at[rid, "onset"])
        length = completed_after(rs.metrics[rid], onset)
        own[rid] = Window(onset, length, diverged=not _partial(rs.metrics[rid], onset + length).empty)
    by_seed = {rs.metas[r]["seed"]: w for r, w in own.items()}
    fallback = Window(int(np.median([w.onset for w in own.values()])),
                      int(np.median([w.length for w in own.values()])),
                      diverged=2 * sum(w.diverged for w in own.values()) > len(own))
    windows = dict(own)
    for rid in cell.healthy + cell.controls:
        windows[rid] = by_seed.get(rs.metas[rid]["seed"], fallback)
    return windows


def _partial(metrics: pd.DataFrame, update: int) -> pd.DataFrame:
    """The rows of ``update`` if it went non-finite (a diverged run's last, partial update)."""
    return metrics[(metrics["update"] == update) & (metrics["nonfinite"] == 1)]


def window_rows(metrics: pd.DataFrame, window: Window) -> pd.DataFrame:
    """The rows of the window's updates (a framework may log several rows per update), plus a
    diverged run's partial update right after it (read only by the non-finite signatures); a twin
    or control of a run that diverged there is read over that update too (its complete rows), so a
    run that went non-finite in its first update after the onset is compared with something."""
    rows = metrics[metrics["update"] >= window.onset]
    end = window.onset + window.length
    usable = signatures.usable(rows[rows["update"] < end])
    extra = _partial(rows, end)
    if extra.empty and window.diverged:
        extra = signatures.usable(rows[rows["update"] == end])
    return pd.concat([usable, extra]) if len(extra) else usable


def _window_rows(frames: Frames, rid: str, window: Window) -> pd.DataFrame:
    """:func:`window_rows` of run ``rid`` read through ``frames``, once per build."""
    return _once(frames, ("rows", rid, window), lambda: window_rows(frames(rid), window))


# ---- signatures ---------------------------------------------------------------------------

def signature_results(cell: Cell, rs: RunSet, windows: dict[str, Window], frames: Frames) -> SignatureResults:
    """Every signature's statistic on every run of the cell, over its window (default thresholds)."""
    def check(rid: str) -> dict[str, Result]:
        rows = _window_rows(frames, rid, windows[rid])
        meta = rs.metas[rid]
        return {name: (Result(False, "empty window", evaluable=False) if rows.empty
                       else sig.check(rows, meta)) for name, sig in signatures.SIGNATURES.items()}
    return {rid: _once(frames, ("signatures", rid, windows[rid]), lambda rid=rid: check(rid))
            for rid in cell.faulty + cell.healthy + cell.controls}


def calibrate(name: str, healthy_values: list[float]) -> float:
    """A scale signature's threshold: its default (the folk rule), moved out to the edge of the
    healthy calibration runs where they cross it, so it never fires on one of them. It is never
    moved inwards: a signature keeps its meaning (kl_explodes stays "KL at least as large as the
    folk rule says"), calibration only makes it stricter where healthy runs need it."""
    sig = signatures.SIGNATURES[name]
    values = [v for v in healthy_values if math.isfinite(v)]
    if not sig.calibrated or not values:
        return sig.threshold
    if sig.direction in ("above", "at_least"):
        return max(sig.threshold, max(values))
    return min(sig.threshold, min(values))


def count_fired(results: SignatureResults, ids: list[str], name: str, threshold: float) -> Counts:
    """Among ``ids``, on how many runs signature ``name`` fires at ``threshold`` (``k``) of those
    where it is evaluable (``n``)."""
    fired = evaluable = 0
    direction = DIRECTIONS[signatures.SIGNATURES[name].direction]
    for rid in ids:
        res = results[rid][name]
        if res.evaluable:
            evaluable += 1
            fired += bool(direction(res.value, threshold))
    return Counts(fired, evaluable)


def separates(counts: GroupCounts) -> bool:
    """A signature separates (on one split's ``counts``) when it was evaluable on >= MIN_RUNS
    faulty and healthy runs and fires on >= 80% of the faulty ones, <= 20% of the healthy ones and
    <= 20% of the controls (when there are at least MIN_RUNS of them)."""
    faulty, healthy, control = counts.faulty, counts.healthy, counts.control
    return (faulty.n >= MIN_RUNS and healthy.n >= MIN_RUNS and faulty.rate >= SEPARATES[0]
            and healthy.rate <= SEPARATES[1] and (control.n < MIN_RUNS or control.rate <= SEPARATES[1]))


def verdict(calibration: GroupCounts, separating: bool, heldout_p: float) -> str:
    """An expected signature's verdict: decided on the calibration half (``separating``:
    :func:`separates` there), confirmed by the held-out Fisher p-value."""
    faulty, healthy, control = calibration.faulty, calibration.healthy, calibration.control
    if faulty.n < MIN_RUNS or healthy.n < MIN_RUNS:
        return "no data"
    if separating:
        return "confirmed" if heldout_p < ALPHA else "calibration only (not confirmed on held-out seeds)"
    if faulty.rate >= SEPARATES[0] and control.n >= MIN_RUNS and control.rate > SEPARATES[1]:
        return "not specific (fires on the look-alike controls)"
    if faulty.rate >= SEPARATES[0] and healthy.rate > SEPARATES[1]:
        return "not specific (fires on healthy runs)"
    return "refuted" if faulty.rate < 0.5 else "partly (fires on 50-80% of faulty seeds)"


@dataclass(frozen=True)
class CellEvidence:
    """An item selected on the calibration half (a separating signature, or a metric as
    ``"<name> (AUROC)"``), its held-out p-value, and its strength on calibration (the order of the
    fallback test); ``fitted``: a signature, whose threshold was fitted on the calibration half."""

    item: str
    p: float
    strength: float
    fitted: bool = False


def signature_rows(results: SignatureResults, split: dict[str, Groups], expected: list[str]
                   ) -> tuple[list[SignatureRow], list[CellEvidence]]:
    """Every signature on the cell: threshold and verdict from the calibration half, counts on both
    halves, the held-out Fisher p-value; and the separating ones as evidence (strength: how far the
    calibration faulty rate clears the healthy and control rates)."""
    rows, evidence = [], []
    for name, sig in signatures.SIGNATURES.items():
        threshold = calibrate(name, [results[r][name].value for r in split["calibration"].healthy
                                     if results[r][name].evaluable])
        cal, held = (GroupCounts(*(count_fired(results, ids, name, threshold)
                                   for ids in (split[s].faulty, split[s].healthy, split[s].control)))
                     for s in SPLITS)
        separating = separates(cal)
        heldout_p = stats.fisher_greater(held.faulty.k, held.faulty.n, held.healthy.k, held.healthy.n)
        if separating:
            others = [r for r in (cal.healthy.rate, cal.control.rate) if math.isfinite(r)]
            evidence.append(CellEvidence(name, heldout_p, cal.faulty.rate - max(others, default=0.0), fitted=True))
        rows.append(SignatureRow(name=name, expected=name in expected, calibrated=sig.calibrated,
                                 threshold=threshold, default_threshold=sig.threshold, direction=sig.direction,
                                 calibration=cal, held_out=held, separates_calibration=separating,
                                 heldout_p=heldout_p,
                                 verdict=verdict(cal, separating, heldout_p) if name in expected else None))
    return rows, evidence


# ---- metrics ------------------------------------------------------------------------------

def run_summary(rows: pd.DataFrame, names: list[str]) -> dict[str, float]:
    """A run's summary per metric: its median over the window's complete updates."""
    rows = signatures.usable(rows)
    out = {}
    for name in names:
        col = rows[name].replace([np.inf, -np.inf], np.nan).dropna() if name in rows else pd.Series(dtype=float)
        out[name] = float(col.median()) if len(col) else math.nan
    return out


def _finite(summaries: Summaries, ids: list[str], name: str) -> np.ndarray:
    """The finite summaries of metric ``name`` over ``ids``, shape (<= len(ids),)."""
    values = np.array([summaries[r][name] for r in ids])
    return values[np.isfinite(values)]


def twin_pairs(cell: Cell, rs: RunSet) -> dict[str, str]:
    """Each faulty run of the cell that has a healthy twin (a healthy run of the same seed): faulty run
    id -> twin run id, in the cell's order."""
    twin = {rs.metas[h]["seed"]: h for h in cell.healthy}
    return {f: twin[rs.metas[f]["seed"]] for f in cell.faulty if rs.metas[f]["seed"] in twin}


def metric_test(name: str, cell: Cell, rs: RunSet, summaries: Summaries, split: dict[str, Groups],
                rng: np.random.Generator, n_mc: int) -> MetricRow | None:
    """Metric ``name`` over all seeds: AUROC faulty vs healthy of the runs' summaries, with its
    permutation p-value (exchanging labels within twin pairs when every faulty seed has its twin),
    and the calibration half's AUROC. None when there is nothing to test (fewer than 2 finite
    summaries a side, or all equal). The Holm adjustment is filled in by :func:`metric_rows`."""
    pairs = [(summaries[f][name], summaries[h][name]) for f, h in twin_pairs(cell, rs).items()]
    pairs = [(a, b) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]
    pos, neg = _finite(summaries, cell.faulty, name), _finite(summaries, cell.healthy, name)
    if len(pos) < 2 or len(neg) < 2 or np.ptp(np.concatenate([pos, neg])) == 0:
        return None          # not recorded, not finite, or constant: nothing to test
    a = stats.auroc(pos, neg)
    paired = len(pairs) == len(pos) == len(neg)
    p = stats.auroc_pvalue(*(np.array(list(zip(*pairs))) if paired else (pos, neg)), paired=paired,
                           rng=rng, n_mc=n_mc)
    cal_auroc = stats.auroc(_finite(summaries, split["calibration"].faulty, name),
                            _finite(summaries, split["calibration"].healthy, name))
    return MetricRow(name=name, auroc=a, direction="higher" if a >= 0.5 else "lower", p_value=p, paired=paired,
                     cal_auroc=cal_auroc, faulty_median=float(np.median(pos)), healthy_median=float(np.median(neg)),
                     n_faulty_finite=len(pos), n_healthy_finite=len(neg))


def selected_on_calibration(rows: list[MetricRow]) -> list[int]:
    """Which metrics are selected as evidence (indices into ``rows``): calibration AUROC >=
    SELECT_AUROC or <= 1 - SELECT_AUROC, strongest first, at most MAX_METRICS."""
    chosen = [i for i, r in enumerate(rows) if math.isfinite(r.cal_auroc)
              and abs(r.cal_auroc - 0.5) >= SELECT_AUROC - 0.5]
    return sorted(chosen, key=lambda i: -abs(rows[i].cal_auroc - 0.5))[:MAX_METRICS]


def metric_names(algo: str) -> list[str]:
    """The metrics summarised and tested on a cell of ``algo`` (non-finite values are the
    signatures' business)."""
    return [m for m in applicable(algo) if m not in ("nonfinite",)]


def metric_rows(cell: Cell, rs: RunSet, summaries: Summaries, split: dict[str, Groups],
                rng: np.random.Generator, n_mc: int) -> tuple[list[MetricRow], list[CellEvidence]]:
    """Every testable metric of the cell's algorithm (see :func:`metric_test`), Holm-adjusted over
    the cell; the ones selected on the calibration half are tested on the held-out half (one-sided
    permutation test in the calibrated direction) and become evidence (strength: 2 |AUROC - 0.5| on
    calibration)."""
    names = metric_names(cell.info["algo"])
    tested = [r for r in (metric_test(n, cell, rs, summaries, split, rng, n_mc) for n in names) if r is not None]
    rows = [replace(r, p_holm=adj, separates_all_seeds=bool(adj < ALPHA))
            for r, adj in zip(tested, stats.holm([r.p_value for r in tested]))]
    evidence = []
    held = split["held-out"]
    for i in selected_on_calibration(rows):
        row = rows[i]
        pos, neg = _finite(summaries, held.faulty, row.name), _finite(summaries, held.healthy, row.name)
        sign = 1 if row.cal_auroc >= 0.5 else -1
        test = HeldOutTest(auroc=stats.auroc(pos, neg), p=stats.one_sided_perm_p(sign * pos, sign * neg, rng, n_mc))
        rows[i] = replace(row, held_out=test)
        evidence.append(CellEvidence(f"{row.name} (AUROC)", test.p, 2 * abs(row.cal_auroc - 0.5)))
    return rows, evidence


# ---- the cell -----------------------------------------------------------------------------

def manifested_by(evidence: list[CellEvidence]) -> list[str]:
    """The fallback procedure (:func:`stats.fallback`) over the items in the order the calibration
    half ranks them (strongest first; at equal strength as listed: signatures, then metrics): the
    first is tested at ALPHA / 2, each later one at its halving share plus the level of the one
    before it when that passed, so an item that fails does not end the test. Fixed-sequence testing,
    used before, stopped at the first failure: with many items tied at the top on 5 calibration seeds,
    whichever came first decided the cell (a signature firing on 2 of 5 held-out seeds left
    adv_sign_flip on Acrobot, return -500 vs -85, as no trace; putting metrics first at ties instead
    lost vf_coef_too_large's signature behind a metric that did not replicate). The family-wise error
    stays <= ALPHA. Returns the items that passed, the named signatures first (they say what
    happened: ``clipfrac_inconsistent`` rather than ``clipfrac``)."""
    ordered = sorted(evidence, key=lambda e: -e.strength)
    passed = [e for e, ok in zip(ordered, stats.fallback([e.p for e in ordered], ALPHA)) if ok]
    return [e.item for e in sorted(passed, key=lambda e: not e.fitted)]


def same_metrics(faulty: pd.DataFrame, healthy: pd.DataFrame, names: list[str]) -> bool:
    """Whether a faulty run's window logs exactly what its twin's does: the same updates, and every
    metric in ``names`` that either records equal value for value (NaN equal to NaN). True means the
    bug changed nothing the run logs (at its setup and budget it had nothing to act on), which is a
    different finding from a change no test could tell from noise."""
    if faulty.empty or len(faulty) != len(healthy):
        return False
    for name in names:
        if (name in faulty) != (name in healthy):
            return False
        if name in faulty:
            a, b = faulty[name].to_numpy(dtype=float), healthy[name].to_numpy(dtype=float)
            if not np.array_equal(a, b, equal_nan=True):
                return False
    return True


def cell_summary(cell: Cell, rs: RunSet, windows: dict[str, Window], split: dict[str, Groups],
                 evidence: list[CellEvidence]) -> CellSummary:
    """The cell as a whole: its runs, how its faulty seeds ended, whether it manifested (and by
    what), whether it could have (``min_p``: the smallest p-value its held-out seeds could give,
    every faulty seed firing and no healthy one), and its progress metric faulty vs healthy (the
    median over seeds of each run's mean over its window's last 5 updates)."""
    statuses = [rs.metas[r]["status"] for r in cell.faulty]
    diverged_updates = [windows[r].length for r in cell.faulty if rs.metas[r]["status"] == "diverged"]
    progress = PROGRESS[cell.info["algo"]]

    def final(rid: str) -> float:
        rows = signatures.usable(_window_rows(rs.canonical, rid, windows[rid]))[progress].dropna()
        return float(rows.iloc[-5:].mean()) if len(rows) else math.nan

    names = metric_names(cell.info["algo"])
    unchanged = [f for f, h in twin_pairs(cell, rs).items()
                 if same_metrics(_window_rows(rs.canonical, f, windows[f]),
                                 _window_rows(rs.canonical, h, windows[h]), names)]
    faulty_final = _finite_median([final(r) for r in cell.faulty])
    healthy_final = _finite_median([final(r) for r in cell.healthy])
    onsets = sorted({windows[r].onset for r in cell.faulty})
    revealed = manifested_by(evidence)
    held = split["held-out"]
    min_p = stats.fisher_greater(len(held.faulty), len(held.faulty), 0, len(held.healthy))
    first = rs.metas[cell.faulty[0]]
    info = cell.info
    return CellSummary(
        fault=info["fault"], fault_params=info["fault_params"], onset_kind=info["onset_kind"], algo=info["algo"],
        algo_variant=info["algo_variant"], env=info["env"], backend=info["backend"],
        cell=cell.label, setup=cell.setup, base=info["base"], onsets=", ".join(map(str, onsets)),
        n_faulty=len(cell.faulty), n_healthy=len(cell.healthy), n_control=len(cell.controls),
        n_diverged=statuses.count("diverged"), n_crashed=statuses.count("crashed"), n_unchanged=len(unchanged),
        diverged_updates=", ".join(map(str, diverged_updates)), n_evidence=len(evidence),
        manifested=bool(revealed), manifested_by=", ".join(revealed), progress_metric=progress,
        progress_faulty=float(faulty_final), progress_healthy=float(healthy_final),
        fault_form=first.get("fault_form"), fault_kind=first.get("fault_kind"),
        fault_version=int(first.get("config", {}).get("fault_version", 1)),
        min_p=float(min_p), decidable=bool(min_p < ALPHA))


def evaluate_cell(cell: Cell, rs: RunSet, rng: np.random.Generator, n_mc: int, frames: Frames | None = None
                  ) -> CellResult:
    """The protocol on one cell, reading each run's metrics through ``frames`` (default: the
    canonical metrics as stored). ``rng`` is drawn from only by Monte Carlo permutation tests, in a
    fixed order (the metrics' all-seed tests, then the selected metrics' held-out tests)."""
    frames = frames or rs.canonical
    windows = cell_windows(cell, rs)
    split = split_groups(cell, rs)
    fault_cls = FAULTS.get(cell.info["fault"])
    expected = list(fault_cls.expected) if fault_cls else []
    sig_rows, sig_evidence = signature_rows(signature_results(cell, rs, windows, frames), split, expected)
    names = metric_names(cell.info["algo"])
    summaries = {rid: _once(frames, ("summary", rid, windows[rid], tuple(names)),
                            lambda rid=rid: run_summary(_window_rows(frames, rid, windows[rid]), names))
                 for rid in cell.faulty + cell.healthy}
    met_rows, met_evidence = metric_rows(cell, rs, summaries, split, rng, n_mc)
    summary = cell_summary(cell, rs, windows, split, sig_evidence + met_evidence)
    return CellResult(summary, sig_rows, met_rows)


def _finite_median(values: list[float]) -> float:
    """The median of the finite values; NaN when there is none (a view that logs no return), without
    numpy's all-NaN warning."""
    finite = [v for v in values if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan

"""Invariants: what every healthy PPO / GRPO run satisfies, read from a log before any model.

Each invariant comes from the algorithm's semantics and the configuration the log carries (a batch
reused after an optimizer step moves the importance ratio; a sampling policy has entropy above 0; the
learning signal is not exactly 0 on every step; losses, gradients and ratios are finite; the ratio and
the KL stay within what any working run reaches). A broken invariant is evidence an expert reads
first: it names a *class* of fault (:data:`CLASSES`: what it means to the user, its candidate faults,
what to check), with the steps where it breaks and the values there.

Not every invariant is trusted to rule out ``healthy``: :func:`decisive` lists those whose false-alarm
rate, measured by ``python benchmarks/invariants.py --record`` on held-out healthy harness runs of
every setup *and* on every healthy log of the real-framework test set, is at most :data:`MAX_FALSE_ALARMS`
on both (``harness/data/invariants.json``), read on the whole log and on every window of the
monitor's evidence window. The others are reported, never decisive. :func:`trailing` lists the decisive
ones that also hold on every window of :data:`TRAILING_ROWS` rows of a healthy run (same bar): a live
monitor reads those on its last few rows, so a bug begun mid-run is proven within that many rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.evidence import printed_decimals
from harness.analysis.features import as_number, configured_steps
from harness.metrics import WATCHED

#: an invariant may make ``healthy`` impossible only with at most this share of false alarms
MAX_FALSE_ALARMS = 0.01
#: the measured false-alarm rates (benchmarks/invariants.py --record writes it)
RATES_FILE = Path(__file__).resolve().parents[1] / "data" / "invariants.json"
MIN_ROWS = 3          # fewer logged values than this: an "every step" invariant cannot tell
SHOWN_STEPS = 5       # steps quoted in a break


@dataclass(frozen=True)
class FaultClass:
    """A class of fault, as the user reads it."""

    name: str
    meaning: str                   # one line: what the log proves
    candidates: tuple[str, ...]    # the known faults (harness names) that break it
    check: str                     # what to check in the code or config


CLASSES: dict[str, FaultClass] = {c.name: c for c in (
    FaultClass("non-finite", "non-finite: a loss, gradient, ratio or KL was logged as NaN or inf",
               ("adv_std_no_floor", "whiten_tiny_batch", "excessive_lr"),
               "the first step it happens: the advantage normalisation's epsilon and minibatches of one sample "
               "(std of one value), divisions by a count that can be 0, log of 0, the learning rate"),
    FaultClass("outside the trust region", "policy far outside the trust region: the importance ratio or the KL "
               "is beyond what any working run reaches", ("excessive_lr", "ratio_vs_reference", "kl_penalty_sign_flip",
                                                         "logprob_off_by_one", "post_eos_unmasked"),
               "that old and new log-probs are of the same tokens at the same positions (masks, shifts, "
               "padding), that the ratio's denominator is the sampling policy (not the reference), the "
               "learning rate, the sign of the KL penalty"),
    FaultClass("no learning signal", "no learning signal: advantages and policy loss are exactly 0 (or every "
               "group's rewards identical) on every step", ("zero_reward", "group_size_one", "truncation_kills_reward",
                                                            "format_reward_never_matches"),
               "the reward the trainer receives (every reward equal?), the group size (> 1), that advantages are "
               "computed from that reward, the loss mask (all tokens masked?)"),
    FaultClass("trust region never acts", "trust region never acts: the importance ratio is pinned at 1 while "
               "batches are reused after an optimizer step", ("shared_policy", "ppo_epochs_ignored"),
               "that the old log-probs are computed once per batch, before its first optimizer step, and kept "
               "(not recomputed with the current policy, not dropped); that n_epochs / num_iterations > 1 is "
               "honoured"),
    FaultClass("deterministic policy", "the sampling policy is deterministic: entropy exactly 0 on every step",
               ("entropy_sign_flip", "excessive_lr"),
               "the entropy computation (which logits, which mask), the sampling temperature, the entropy "
               "bonus's sign"),
)}


@dataclass(frozen=True)
class Break:
    """An invariant broken in a log: where and with what values."""

    invariant: str
    fault_class: str
    steps: tuple[int, ...]         # the first training steps (1-based, as the framework counts) where it breaks
    n_steps: int                   # on how many steps it breaks
    of: int                        # of how many steps that log the quantity
    shows: str                     # the values, as read

    def line(self) -> str:
        where = ", ".join(str(s) for s in self.steps) + (" ..." if self.n_steps > len(self.steps) else "")
        return f"{self.invariant} broken on {self.n_steps} of {self.of} steps (steps {where}): {self.shows}"


Check = Callable[[pd.DataFrame, Mapping[str, Any]], "Break | bool | None"]


@dataclass(frozen=True)
class Invariant:
    name: str
    fault_class: str
    holds: str                     # what every healthy run satisfies
    source: str                    # where it comes from
    check: Check                   # Break (broken), False (holds), None (the log cannot tell)
    reads: tuple[str, ...] = ()    # the metrics it reads (what to plot to see it)


def _col(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The logged values of ``metric`` (NaN / inf kept) and their training steps (1-based)."""
    if metric not in frame:
        return None
    values = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
    updates = (pd.to_numeric(frame["update"], errors="coerce").to_numpy(dtype=float) if "update" in frame
               else np.arange(len(frame), dtype=float))
    keep = ~np.isnan(values)
    return values[keep], updates[keep] + 1


def _finite(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    got = _col(frame, metric)
    if got is None:
        return None
    values, steps = got
    ok = np.isfinite(values)
    return (values[ok], steps[ok]) if ok.sum() >= MIN_ROWS else None


def _steps(steps: np.ndarray) -> tuple[int, ...]:
    return tuple(int(s) for s in steps[:SHOWN_STEPS])


def _g(x: float) -> str:
    return f"{x:.3g}"


def _coarse(frame: pd.DataFrame) -> bool:
    """A log printed with 4 decimals or fewer: an exact 0 of a quantity whose healthy values are ~1e-3
    cannot be told from a small one."""
    d = printed_decimals(frame)
    return d is not None and d <= 4


# ---- the invariants ----------------------------------------------------------------------------------

def _finite_values(frame: pd.DataFrame, config: Mapping[str, Any]) -> Break | bool | None:
    if "nonfinite" not in frame or frame["nonfinite"].isna().all():
        return None
    bad = pd.to_numeric(frame["nonfinite"], errors="coerce").fillna(0).to_numpy() > 0
    steps = (pd.to_numeric(frame["update"], errors="coerce").to_numpy(dtype=float) + 1) if "update" in frame \
        else np.arange(1, len(frame) + 1, dtype=float)
    if not bad.any():
        return False
    first = int(np.flatnonzero(bad)[0])
    row = frame.iloc[first]
    which = [f"{m} = {row[m]}" for m in WATCHED if m in frame and not np.isfinite(row[m]) and not pd.isna(row[m])]
    nan_named = [m for m in WATCHED if m in frame and pd.isna(row[m]) and frame[m].notna().any()]
    shows = ", ".join(which) or ("NaN logged for " + ", ".join(nan_named[:4]) if nan_named else "a non-finite value")
    return Break("finite", "non-finite", _steps(steps[bad]), int(bad.sum()), len(frame),
                 f"at step {int(steps[first])}: {shows}")


#: beyond these no working run goes (harness healthy runs of every setup and real frameworks' healthy logs
#: stay orders of magnitude below: benchmarks/results/invariants.md)
BOUNDS = {"ratio_mean": 1e3, "ratio_max": 1e6, "approx_kl": 1e3, "kl_ref": 1e5}


def _within_reach(frame: pd.DataFrame, config: Mapping[str, Any]) -> Break | bool | None:
    seen = False
    hits: list[tuple[str, np.ndarray, np.ndarray, float]] = []
    for metric, bound in BOUNDS.items():
        got = _col(frame, metric)
        if got is None or not len(got[0]):
            continue
        seen = True
        values, steps = got
        over = np.isfinite(values) & (np.abs(values) > bound)
        if over.any():
            hits.append((metric, values[over], steps[over], bound))
    if not seen:
        return None
    if not hits:
        return False
    metric, values, steps, bound = hits[0]
    shows = "; ".join(f"{m} up to {_g(float(np.max(np.abs(v))))} (bound {b:g})" for m, v, _, b in hits)
    return Break("within_reach", "outside the trust region", _steps(steps), len(values),
                 int(frame[metric].notna().sum()), shows)


def _reuse(config: Mapping[str, Any]) -> float:
    """Optimizer steps each batch takes (epochs / iterations x minibatches; NaN when unknown)."""
    return configured_steps(config)


def _ratio_moves(frame: pd.DataFrame, config: Mapping[str, Any]) -> Break | bool | None:
    """With a batch reused for more than one optimizer step, the ratio of its later minibatches is not
    exactly 1: max |r - 1| > 1e-6, approx_kl or the k1 KL not exactly 0, on some step. Broken only when
    every one of these the log holds is pinned. Read from the exact quantities only (clip fractions are 0
    for small healthy updates too)."""
    reuse = _reuse(config)
    if not math.isfinite(reuse) or _coarse(frame):
        return None
    reads = []
    for metric, pinned in (("ratio_dev_max", lambda v: v <= 1e-6), ("approx_kl", lambda v: v == 0),
                           ("kl_k1", lambda v: v == 0)):
        got = _finite(frame, metric)
        if got is not None:
            reads.append((metric, got, pinned(got[0])))
    if not reads:
        return None
    if reuse <= 1:
        return False
    # any exact quantity that moves shows the ratio moving: approx_kl (k3) of a tiny update rounds to exactly
    # 0 in float32 while max |r - 1| is 5e-5 (a healthy run whose annealed lr nears 0 on its last updates)
    if not all(pinned.all() for _, _, pinned in reads):
        return False
    metric, (values, steps), pinned = reads[0]
    return Break("ratio_moves", "trust region never acts", _steps(steps), len(values), len(values),
                 f"{metric} exactly {'<= 1e-6' if metric == 'ratio_dev_max' else '0'} on every step while each "
                 f"batch takes {reuse:g} optimizer steps")


CLIP_METRICS = ("clipfrac", "clipfrac_binding", "clip_low_frac")
MIN_CLIP_ROWS = 100       # clip fractions exactly 0 on this many steps in a row
MIN_CLIP_LR = 1e-5        # ... at a learning rate of at least this (at 1e-6 healthy GRPO does not clip)


def _clipping_acts(frame: pd.DataFrame, config: Mapping[str, Any]) -> Break | bool | None:
    """GRPO whose log has only clip fractions (TRL): with batches reused, at lr >= 1e-5, over >= 100
    steps some token is clipped on some step."""
    if "num_iterations" not in config or "n_epochs" in config:
        return None                 # GRPO only: a PPO log has approx_kl (ratio_moves reads it)
    if any(_finite(frame, m) is not None for m in ("ratio_dev_max", "approx_kl", "kl_k1")):
        return None                 # the exact quantities decide (ratio_moves)
    reuse = _reuse(config)
    lr = as_number(config.get("lr"))
    got = [(m, g) for m in CLIP_METRICS if (g := _finite(frame, m)) is not None]
    if not got or not math.isfinite(reuse) or not math.isfinite(lr) or _coarse(frame):
        return None
    metric, (values, steps) = got[0]
    if reuse <= 1 or lr < MIN_CLIP_LR or len(values) < MIN_CLIP_ROWS:
        return None if reuse > 1 else False
    if any((g[0] != 0).any() for _, g in got):
        return False
    return Break("clipping_acts", "trust region never acts", _steps(steps), len(values), len(values),
                 f"every clip fraction ({', '.join(m for m, _ in got)}) exactly 0 on all {len(values)} steps while "
                 f"each batch takes {reuse:g} optimizer steps at lr {lr:g}")


def _signal_moves(frame: pd.DataFrame, config: Mapping[str, Any]) -> Break | bool | None:
    """The learning signal is not exactly 0 on every step: the advantage std is not 0 everywhere; not
    every group's rewards are identical on every step; the policy loss is not exactly 0 on every step
    while the reward is constant on every step (a healthy GRPO's policy loss can be exactly 0 at a ratio
    of 1, its advantages' mean 0 by construction: the reward moving is what tells them apart)."""
    checks = []
    adv_std = _finite(frame, "adv_std")
    if adv_std is not None:
        checks.append(("adv_std", adv_std, adv_std[0] == 0, "the advantage std exactly 0"))
    uniform = _finite(frame, "frac_reward_zero_std")
    if uniform is not None:
        checks.append(("frac_reward_zero_std", uniform, uniform[0] == 1, "every group's rewards identical"))
    loss, reward = _finite(frame, "policy_loss"), _finite(frame, "reward_mean")
    if loss is not None and reward is not None and np.unique(reward[0]).size == 1:
        checks.append(("policy_loss", loss, loss[0] == 0, "the policy loss exactly 0 and the reward constant at "
                       f"{_g(float(reward[0][0]))}"))
    if not checks:
        return None
    for _metric, (values, steps), broken, what in checks:
        if broken.all():
            return Break("signal_moves", "no learning signal", _steps(steps), len(values), len(values),
                         f"{what} on every step")
    return False


def _entropy_positive(frame: pd.DataFrame, config: Mapping[str, Any]) -> Break | bool | None:
    got = _finite(frame, "entropy")
    if got is None:
        return None
    values, steps = got
    if not (values == 0).all():
        return False
    return Break("entropy_positive", "deterministic policy", _steps(steps), len(values), len(values),
                 "entropy exactly 0 on every step")


#: in the order a broken one answers: no learning signal explains a ratio that never moves (no gradient,
#: no change), so it comes before the trust region's invariants
INVARIANTS: dict[str, Invariant] = {i.name: i for i in (
    Invariant("finite", "non-finite", "every loss, gradient norm, ratio, KL and advantage statistic logged is finite",
              "arithmetic: a NaN or inf in the update poisons every weight it reaches", _finite_values,
              ("loss", "policy_loss", "value_loss", "grad_norm", "ratio_mean", "approx_kl", "adv_std")),
    Invariant("within_reach", "outside the trust region",
              "ratio mean <= 1e3, ratio max <= 1e6, approx_kl <= 1e3, KL to the reference <= 1e5",
              "algorithm: clipping and the KL penalty keep a working policy near its sampler and reference; "
              "bounds orders of magnitude beyond every healthy run measured", _within_reach,
              ("ratio_mean", "ratio_max", "approx_kl", "kl_ref")),
    Invariant("signal_moves", "no learning signal",
              "the advantages are not exactly 0 on every step (their std; not every group's rewards identical; "
              "not a policy loss of 0 with a constant reward)", "algorithm: the policy gradient is advantage-weighted",
              _signal_moves, ("adv_std", "adv_mean", "policy_loss", "reward_mean", "frac_reward_zero_std")),
    Invariant("entropy_positive", "deterministic policy", "a sampling policy's entropy is above 0 on some step",
              "algorithm: PPO and GRPO sample from the policy", _entropy_positive, ("entropy",)),
    Invariant("ratio_moves", "trust region never acts",
              "with each batch taking more than one optimizer step, max |r - 1|, approx_kl or the k1 KL is not "
              "exactly 0 on every step", "algorithm and configuration: after the first optimizer step on a batch "
              "the policy differs from the one that sampled it", _ratio_moves,
              ("ratio_dev_max", "approx_kl", "kl_k1", "clipfrac")),
    Invariant("clipping_acts", "trust region never acts",
              "GRPO with batches reused at lr >= 1e-5: some clip fraction is above 0 on some of >= 100 steps",
              "algorithm and configuration (logs with clip fractions only, e.g. TRL's)", _clipping_acts,
              ("clipfrac", "clipfrac_binding", "clip_low_frac")),
)}


#: the last rows a live monitor also reads the :func:`trailing` invariants on (a bug begun mid-run breaks
#: them from its onset on; an invariant whose healthy counterpart can hold for a few steps, e.g. every
#: group's rewards identical while a policy has collapsed onto one answer, is read on longer windows only)
TRAILING_ROWS = MIN_ROWS
#: the last rows a live monitor reads every invariant on (its evidence window: a bug begun mid-run is
#: proven once it has held this long, or TRAILING_ROWS for the trailing invariants)
WINDOW_ROWS = 10


def check(frame: pd.DataFrame, config: Mapping[str, Any] | None = None, windows: tuple[int, ...] = (),
          trailing_names: frozenset[str] | None = None) -> dict[str, Break | bool | None]:
    """Every invariant on a canonical frame: a :class:`Break`, False (holds) or None (cannot tell).
    ``windows``: numbers of last rows also read alone (a monitor's evidence window): a break there
    counts, and the ``trailing_names`` (default: :func:`trailing`) are also read on the last
    TRAILING_ROWS rows."""
    config = dict(config or {})
    out = {name: inv.check(frame, config) for name, inv in INVARIANTS.items()}
    names = trailing() if trailing_names is None else trailing_names
    tails = [(w, None) for w in windows if len(frame) > w] + \
        ([(TRAILING_ROWS, names)] if windows and names and len(frame) > TRAILING_ROWS else [])
    for rows, names in tails:
        part = frame.iloc[-rows:]
        for name in names or INVARIANTS:
            if not isinstance(out[name], Break):
                got = INVARIANTS[name].check(part, config)
                if isinstance(got, Break):
                    out[name] = got
    return out


def broken(results: Mapping[str, Break | bool | None]) -> list[Break]:
    return [r for r in results.values() if isinstance(r, Break)]


@cache
def measured() -> dict[str, Any]:
    """The recorded false-alarm rates ({} when none are recorded)."""
    try:
        return json.loads(RATES_FILE.read_text())
    except (OSError, ValueError):
        return {}


def _within_bar(table: Mapping[str, Any], reading: str) -> set[str]:
    """The invariants whose false alarms under ``reading`` (a key of each set's record) are at most
    MAX_FALSE_ALARMS on both sets measured (the harness's held-out healthy runs and the real
    frameworks' healthy logs, both required)."""
    return {name for name, sets in table.items() if name in INVARIANTS and {"harness", "realworld"} <= set(sets)
            and all(s["logs"] > 0 and reading in s and s[reading] / s["logs"] <= MAX_FALSE_ALARMS
                    for s in sets.values())}


def decisive_in(table: Mapping[str, Any]) -> frozenset[str]:
    """Of a table of measured false alarms (invariant -> set -> counts): the invariants within the bar
    on the whole log and, where recorded, on every window a monitor reads (``alarms_window``)."""
    windowed = {n for n, sets in table.items() if any("alarms_window" in s for s in sets.values())}
    return frozenset(n for n in _within_bar(table, "alarms")
                     if n not in windowed or n in _within_bar(table, "alarms_window"))


def trailing_in(table: Mapping[str, Any]) -> frozenset[str]:
    """The decisive invariants also within the bar on every window of TRAILING_ROWS rows."""
    return decisive_in(table) & _within_bar(table, "alarms_trailing")


@cache
def decisive() -> frozenset[str]:
    """The invariants that may rule out ``healthy`` (:func:`decisive_in` of the recorded rates)."""
    return decisive_in(measured().get("invariants", {}))


@cache
def trailing() -> frozenset[str]:
    """The decisive invariants a monitor also reads on its last TRAILING_ROWS rows."""
    return trailing_in(measured().get("invariants", {}))


__all__ = ["BOUNDS", "CLASSES", "INVARIANTS", "MAX_FALSE_ALARMS", "TRAILING_ROWS", "WINDOW_ROWS", "Break", "FaultClass", "Invariant",
           "broken", "check", "decisive", "decisive_in", "measured", "trailing", "trailing_in"]

"""Exact evidence: what a healthy run of the configuration read from the log cannot produce.

Each item is a predicate over a log (its canonical frame and the configuration read with it) that
is True, False, or None when the log or its configuration cannot tell (the metric is not logged,
the setting is unknown). They are the things an expert reads first: the importance ratio exactly 1
(approx_kl or clip fraction exactly 0) while the configuration takes more than one optimizer step
per batch; the reward exactly 0, or one of several summed reward functions exactly 0; the gradient
exactly 0; the KL to the reference exactly 0 while
beta > 0; every group's rewards identical; fewer optimizer steps than configured without a
target_kl; the KL early stop ending nearly every update when one is set; (TRL) the reward logged
on more optimizer steps than the configuration generates on. And one fitted kind
(:class:`SettingRanges`): a configured setting outside the range of every healthy training log of the
view (``ent_coef`` below 0, ``gamma`` 0.5, ``vf_coef`` 50, ``target_kl`` 1e-4), read from the
configuration the log carries.

The diagnosis does not trust them by decree: the rate at which each item fires on every class
(healthy and each fault) is measured on the training logs of the same framework view
(:func:`rates`), and a firing item multiplies the model's probabilities by those rates
(:func:`combine`, Bayes' rule with Jeffreys-smoothed rates). An item that never fires on healthy
training logs makes "healthy" very improbable; one that fires on healthy runs too barely moves it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.features import CONFIG_KEYS, as_number, configured_steps
from harness.analysis.learning import HEALTHY
from harness.analysis.signatures.base import generating
from harness.analysis.stats import fisher_greater
from harness.metrics import REWARD_FN_PREFIX

MOST = 0.9          # share of logged steps that "always" means (as the signatures)
EXACT_RATIO = 1e-6  # |r - 1| below this is exactly 1 (recompute rounding, verl#2305)


def _share(frame: pd.DataFrame, metric: str, test: Callable[[np.ndarray], np.ndarray]) -> float | None:
    """The share of the steps that logged ``metric`` (finite) where ``test`` holds; None if none did."""
    if metric not in frame:
        return None
    col = pd.to_numeric(frame[metric], errors="coerce").to_numpy(dtype=float)
    col = col[np.isfinite(col)]
    return float(np.mean(test(col))) if len(col) else None


#: a log printed with this few decimals (verl <= 0.3's console: ``:.3f``) cannot tell an exact 0 of a
#: quantity whose healthy values are ~1e-3 (approx_kl, clip fractions, the KL to the reference) from a small one
FEW_DECIMALS = 4
#: columns that count things (integers in any log): not read for the precision
COUNTERS = ("update", "step", "env_step", "fault_active", "nonfinite", "optimizer_steps", "epochs_total")


def printed_decimals(frame: pd.DataFrame) -> int | None:
    """The decimals the log's values were printed with: the smallest d <= 6 such that every finite value
    of its metrics is a multiple of 10^-d, read over at least 10 distinct values that are not whole numbers; None
    at full precision (or too few such values to tell)."""
    cols = [c for c in frame.columns if c not in COUNTERS]
    if not cols:
        return None
    numeric = frame[cols]
    if all(pd.api.types.is_numeric_dtype(t) for t in numeric.dtypes):      # the usual log: one array, no copies
        values = numeric.to_numpy(dtype=float, na_value=np.nan).ravel()
    else:
        values = pd.DataFrame({c: pd.to_numeric(frame[c], errors="coerce") for c in cols}).to_numpy(dtype=float).ravel()
    values = values[np.isfinite(values)]
    values = np.unique(values[values != np.round(values)])
    if len(values) < 10:
        return None
    for d in range(7):
        scaled = values * 10.0 ** d
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.maximum(1.0, np.abs(scaled))):
            return d
    return None


def _too_coarse(frame: pd.DataFrame) -> bool:
    decimals = printed_decimals(frame)
    return decimals is not None and decimals <= FEW_DECIMALS


@dataclass(frozen=True)
class Evidence:
    name: str
    description: str
    test: Callable[[pd.DataFrame, Mapping[str, Any]], bool | None]
    #: the framework views whose logs it can be read from (None: every view)
    views: tuple[str, ...] | None = None


def _ratio_pinned(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """The ratio exactly 1 while the configuration takes more than one optimizer step per batch. Read
    from the exact quantities where the log has one (max |r - 1|, approx_kl, kl_k1: exactly 0 only
    when every sample's ratio is exactly 1); a log with none of them (TRL logs only clip ratios) is
    read from its clip fractions, which are 0 for small healthy updates too (its measured rates say
    how much weaker that is)."""
    steps = configured_steps(config)
    if not math.isfinite(steps) or _too_coarse(frame):
        return None
    exact = [s for s in (_share(frame, "ratio_dev_max", lambda c: c <= EXACT_RATIO),
                         _share(frame, "approx_kl", lambda c: c == 0),
                         _share(frame, "kl_k1", lambda c: c == 0)) if s is not None]
    shares = exact or [s for s in (_share(frame, "clipfrac", lambda c: c == 0),
                                   _share(frame, "clipfrac_binding", lambda c: c == 0),
                                   _share(frame, "clip_low_frac", lambda c: c == 0)) if s is not None]
    if not shares:
        return None
    return steps > 1 and max(shares) >= MOST


def _reward_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    share = _share(frame, "reward_mean", lambda c: c == 0)
    if share is None:
        share = _share(frame, "return_mean", lambda c: c == 0)
    return None if share is None else share >= MOST


def _grad_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    share = _share(frame, "grad_norm", lambda c: c == 0)
    return None if share is None else share >= MOST


def _kl_ref_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    beta = float(config["beta"]) if isinstance(config.get("beta"), (int, float)) else math.nan
    share = _share(generating(frame), "kl_ref", lambda c: c == 0)
    if share is None or not math.isfinite(beta) or _too_coarse(frame):
        return None
    return beta > 0 and share >= MOST


def _reward_function_zero(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """One of several summed reward functions (``reward/<fn>``: TRL's ``rewards/<fn>/mean``) exactly 0 on
    >= 90% of the steps that log it while another is not (all of them 0 is reward_exactly_zero's).
    None with fewer than two reward functions logged."""
    shares = [s for s in (_share(frame, c, lambda v: v == 0) for c in frame.columns if c.startswith(REWARD_FN_PREFIX))
              if s is not None]
    if len(shares) < 2:
        return None
    return max(shares) >= MOST and min(shares) < MOST


def _groups_uniform(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    share = _share(frame, "frac_reward_zero_std", lambda c: c == 1)
    return None if share is None else share >= MOST


def _steps_short(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """Fewer optimizer steps logged (or inferred from a counter: SB3's train/n_updates x minibatches)
    than the configured epochs x minibatches on >= 90% of updates, while no target_kl is configured:
    only an early stop on the KL can end a healthy update's epochs early. None when the log has no
    step count, the configuration is unknown or it sets target_kl."""
    steps = configured_steps(config)
    if not math.isfinite(steps) or config.get("target_kl") is not None:
        return None
    share = _share(frame, "optimizer_steps", lambda c: c < steps - 0.5)
    return None if share is None else share >= MOST


def _kl_stops_every_update(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """With a target_kl configured, the KL early stop ended (nearly) every update: fewer optimizer
    steps than epochs x minibatches on >= 90% of updates where the log counts steps (SB3's
    train/n_updates), else the logged approx_kl above target_kl on >= 90% of updates (CleanRL's
    ``approx_kl`` is the last minibatch's, the one its epoch-end check compares with target_kl; SB3's
    minibatch check stops at 1.5 x target_kl, above it too). A healthy target stops some updates,
    a too-strict one stops all: how often each happens is the measured rate. None without a
    target_kl or without either quantity."""
    target = as_number(config.get("target_kl"))
    steps = configured_steps(config)
    if not math.isfinite(target) or target <= 0:
        return None
    share = _share(frame, "optimizer_steps", lambda c: c < steps - 0.5) if math.isfinite(steps) else None
    if share is None:
        share = _share(frame, "approx_kl", lambda c: c > target)
    return None if share is None else share >= MOST


def _generations_too_many(frame: pd.DataFrame, config: Mapping[str, Any]) -> bool | None:
    """A log of one row per optimizer step (TRL's GRPOTrainer with logging_steps=1) whose generation
    metrics (the reward) are on more rows than the configuration generates on: TRL appends them only
    on the step that generates, once every num_iterations x steps_per_generation /
    gradient_accumulation_steps optimizer steps, so a healthy run of ``n`` steps has ceil(n / that)
    of them. Fires at >= 1.5 times that and at least 2 more. None when the rows are not one per
    optimizer step (logging_steps > 1 averages the reward into every logged row)."""
    steps = configured_steps(config)
    if not math.isfinite(steps) or steps < 1 or "reward_mean" not in frame or "step" not in frame:
        return None
    step = pd.to_numeric(frame["step"], errors="coerce").to_numpy(dtype=float)
    step = step[np.isfinite(step)]
    if len(step) < 4 or float(np.median(np.diff(step))) != 1.0:
        return None
    expected = math.ceil(len(step) / steps)
    seen = int(pd.to_numeric(frame["reward_mean"], errors="coerce").notna().sum())
    return seen >= 1.5 * expected and seen >= expected + 2


EVIDENCE: dict[str, Evidence] = {e.name: e for e in (
    Evidence("ratio_exactly_one", "the importance ratio is exactly 1 (approx_kl exactly 0; a log without it: the clip "
             "fractions exactly 0) on >= 90% of steps while the configuration takes more than one optimizer step per "
             "batch", _ratio_pinned),
    Evidence("reward_exactly_zero", "the reward (or the logged return) is exactly 0 on >= 90% of steps", _reward_zero),
    Evidence("reward_function_exactly_zero", "one of the summed reward functions (reward/<fn>) is exactly 0 on >= 90% "
             "of steps while another is not", _reward_function_zero),
    Evidence("gradient_exactly_zero", "the gradient norm is exactly 0 on >= 90% of steps", _grad_zero),
    Evidence("kl_ref_exactly_zero", "the KL to the reference is exactly 0 on >= 90% of generating steps while beta > 0",
             _kl_ref_zero),
    Evidence("groups_all_uniform", "every group's rewards are identical on >= 90% of steps (advantages all 0)",
             _groups_uniform),
    Evidence("optimizer_steps_short", "fewer optimizer steps per update than the configured epochs x minibatches "
             "on >= 90% of updates (SB3: train/n_updates increments x minibatches) while no target_kl is set",
             _steps_short),
    Evidence("kl_stops_every_update", "with a target_kl set, the KL early stop ended >= 90% of updates (fewer optimizer "
             "steps than epochs x minibatches; a log without step counts: the logged approx_kl above target_kl)",
             _kl_stops_every_update),
    Evidence("generations_too_many", "the reward (logged on the optimizer step that generates) is on >= 1.5x "
             "as many steps as the configuration generates on (once every num_iterations x steps_per_generation "
             "optimizer steps; one log row per step)", _generations_too_many, views=("trl",)),
)}


def report_line(name: str, item: Mapping[str, Any]) -> str:
    """One fired item of an answer's evidence report (``Answer.evidence``), as diagnose and the monitors print it."""
    rates = ", ".join(f"{c} {k}/{n}" for c, (k, n) in item["rates"].items())
    return f"evidence: {name}: {item['description']} (fired on training logs of this view: {rates})"


def observe(frame: pd.DataFrame, config: Mapping[str, Any] | None, view: str = "canonical") -> dict[str, bool | None]:
    """Each evidence item on a log in a framework ``view``: True (fires), False, or None (the log or
    its view cannot tell)."""
    config = dict(config or {})
    return {name: (ev.test(frame, config) if ev.views is None or view in ev.views else None)
            for name, ev in EVIDENCE.items()}


# ---- rates measured on training logs, and Bayes' rule ------------------------------------------------

Rates = dict[str, dict[str, tuple[int, int]]]     # evidence -> class -> (fired, evaluable)


def rates(observed: pd.DataFrame, labels: np.ndarray) -> Rates:
    """For each evidence item (every ``ev:<item>`` column of ``observed``: 1.0 fired, 0.0 not, NaN
    cannot tell; the fixed items are always counted) and class, on how many training logs it fired
    among those where it could be evaluated."""
    names = dict.fromkeys([*EVIDENCE, *(c.removeprefix("ev:") for c in observed.columns if c.startswith("ev:"))])
    out: Rates = {}
    for name in names:
        col = observed[f"ev:{name}"].to_numpy(dtype=float) if f"ev:{name}" in observed else np.full(len(labels), np.nan)
        per = {}
        for label in np.unique(labels):
            sel = (labels == label) & np.isfinite(col)
            per[str(label)] = (int(col[sel].sum()), int(sel.sum()))
        out[name] = per
    return out


def fire_rate(counts: tuple[int, int] | None) -> float:
    """P(fires | class), Jeffreys-smoothed: (k + 1/2) / (n + 1); 1/2 for a class never evaluated."""
    k, n = counts if counts is not None else (0, 0)
    return (k + 0.5) / (n + 1.0)


def combine(probs: pd.Series, fired: Mapping[str, bool | None], table: Rates) -> pd.Series:
    """The class probabilities after the evidence items that fired: P(c | x, e) proportional to
    P(c | x) P(e | c), with P(e | c) the rate measured on training logs (:func:`fire_rate`)."""
    out = probs.astype(float).copy()
    for name, value in fired.items():
        if value:
            per = table.get(name, {})
            out = out * np.array([fire_rate(per.get(str(c))) for c in out.index])
    total = float(out.sum())
    return out / total if total > 0 else probs


def combine_frame(probs: pd.DataFrame, observed: pd.DataFrame, table: Rates) -> pd.DataFrame:
    """:func:`combine` for every row: ``probs`` (logs x classes), ``observed`` (logs x ``ev:<item>``,
    aligned with ``probs``)."""
    factor = np.ones(probs.shape)
    for col in observed.columns:
        name = col.removeprefix("ev:")
        if not col.startswith("ev:") or name not in table:
            continue
        fired = observed[col].to_numpy(dtype=float) == 1.0
        if not fired.any():
            continue
        per = table.get(name, {})
        rates_row = np.array([fire_rate(per.get(str(c))) for c in probs.columns])
        factor[fired] *= rates_row
    out = probs.to_numpy(dtype=float) * factor
    total = out.sum(axis=1, keepdims=True)
    out = np.where(total > 0, out / np.where(total > 0, total, 1.0), probs.to_numpy(dtype=float))
    return pd.DataFrame(out, columns=probs.columns, index=probs.index)


# ---- fitted evidence: a configured setting no healthy training log had ----------------------------------

SETTING = "setting"        # item names: setting_below:<key>, setting_above:<key>
#: settings whose sound range depends on the size of the model or the task, which the training runs do
#: not span (GRPO's learning rate: 1e-4 .. 2e-3 for the harness's tiny transformers, 1e-6 for TRL's
#: defaults on an LLM), or that set a budget rather than the update: their training range says nothing
#: about a user's run, so they are never this evidence
SIZED: dict[str, tuple[str, ...]] = {
    "ppo": ("num_envs", "n_steps", "n_minibatches"),
    "grpo": ("lr", "n_prompts", "n_minibatches", "max_new_tokens", "n_layers", "d_model", "n_heads", "d_ff",
             "hidden", "warmup_updates"),
}
SETTING_ALPHA = 1e-5           # an item is kept when it fires more often on a fault that changes its setting than
                           # elsewhere at this p-value (one-sided Fisher exact test, out of fold): about 20 items
                           # per view, 7 views a build, so the chance that noise passes anywhere stays < 0.2%


def setting_item(key: str, side: str) -> str:
    return f"{SETTING}_{side}:{key}"


def setting_key(item: str) -> tuple[str, str] | None:
    """``(key, side)`` of a setting item's name, None for any other item."""
    head, _, key = item.partition(":")
    if not key or not head.startswith(f"{SETTING}_"):
        return None
    return key, head.removeprefix(f"{SETTING}_")


#: where a configured value outside the training range starts to count (``SettingRanges.fit``):
#: "midway" to the nearest value where the setting was the bug, or "edge" (the range's own edge)
CUT = "midway"


@dataclass
class SettingRanges:
    """A configured setting outside the range every training log had where that setting was not the
    bug is evidence. The range of each setting (``cfg:<key>``) is taken over the training logs that carry
    the configuration and are healthy or have a fault that does not change that setting (its
    ``settings_to_check``): the sampling space of users' configurations, as wide as the dataset draws it.
    An item (``setting_below:<key>``, ``setting_above:<key>``) is evidence for the faults that change
    the setting (its *owners*); on every other class (healthy included) it fires at one pooled rate,
    that of the logs where the setting was not the bug, so a few logs of an unrelated fault that
    happen to fall outside the range point to nothing. An item is kept when it fires more often on
    an owner than at that pooled rate (:data:`SETTING_ALPHA`); its rates are measured out of fold (a
    configuration outside the other folds' range counts) and used like every other item's.

    Where the training logs of an owner hold values beyond the range (a misconfigured tiny clip range
    of 1e-4 .. 1e-2 below healthy clip ranges of 0.1 .. 0.3), a value fires only past the midpoint
    between the range's edge and the nearest such value (geometric for positive values): a value just
    outside the sampled range (CleanRL's Atari clip_coef 0.1 against a sampled minimum of 0.1003) is
    nearer the configurations that were not the bug than those that were (``cut_low`` / ``cut_high``).
    Where no owner value lies beyond, the edge itself is the cut."""

    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    items: tuple[str, ...] = ()
    owners: dict[str, tuple[str, ...]] = field(default_factory=dict)     # key -> the faults that change it
    cut_low: dict[str, float] = field(default_factory=dict)      # below this: "below" (default: low)
    cut_high: dict[str, float] = field(default_factory=dict)     # above this: "above" (default: high)

    @staticmethod
    def keys(columns: Sequence[str], algo: str) -> list[str]:
        """The settings that may be this evidence: configured numbers the features carry (``cfg:<key>``),
        not those sized to the model or task (:data:`SIZED`)."""
        return [k for k in CONFIG_KEYS if f"cfg:{k}" in columns and k not in SIZED.get(algo, ())]

    @classmethod
    def fit(cls, rows: pd.DataFrame, labels: np.ndarray, algo: str, settings: Mapping[str, Sequence[str]],
            items: Sequence[str] | None = None) -> SettingRanges:
        """The range of every setting over the logs of ``rows`` where it was not the bug (healthy, or a
        fault whose ``settings`` do not name it); ``items``: the items kept (default every one with an
        owner)."""
        labels = np.asarray(labels)
        low, high, owners, cut_low, cut_high = {}, {}, {}, {}, {}
        for key in cls.keys(rows.columns, algo):
            reference = np.array([lab == HEALTHY or key not in settings.get(lab, ()) for lab in labels], dtype=bool)
            every_value = pd.to_numeric(rows[f"cfg:{key}"], errors="coerce").to_numpy(dtype=float)
            values = every_value[reference & np.isfinite(every_value)]
            mine = tuple(sorted(f for f, names in settings.items() if key in names))
            if len(values) and mine:
                low[key], high[key], owners[key] = float(values.min()), float(values.max()), mine
                owned = every_value[np.isin(labels, mine) & np.isfinite(every_value)]
                below, above = owned[owned < low[key]], owned[owned > high[key]]
                midway = CUT == "midway"
                cut_low[key] = _midpoint(float(below.max()), low[key]) if len(below) and midway else low[key]
                cut_high[key] = _midpoint(high[key], float(above.min())) if len(above) and midway else high[key]
        every = tuple(setting_item(k, side) for k in low for side in ("below", "above"))
        return cls(low, high, every if items is None else tuple(i for i in every if i in set(items)), owners,
                   cut_low, cut_high)

    def cut(self, key: str, side: str) -> float:
        """Past which value of ``key`` an item of ``side`` ("below" / "above") fires; a model fitted
        before the cuts existed (unpickled without them) cuts at the range's edges."""
        if side == "below":
            return getattr(self, "cut_low", {}).get(key, self.low[key])
        return getattr(self, "cut_high", {}).get(key, self.high[key])

    def side(self, key: str, value: float) -> str | None:
        """Where ``value`` lies against the range of ``key``: "below", "above" or None (inside)."""
        lo, hi = self.cut(key, "below"), self.cut(key, "above")
        slack = 1e-9 * max(abs(lo), abs(hi), 1e-12)
        return "below" if value < lo - slack else "above" if value > hi + slack else None

    def observe(self, rows: pd.DataFrame) -> pd.DataFrame:
        """``ev:<item>`` of every kept item on feature rows: 1.0 fired, 0.0 not, NaN when the log carries
        no value for the setting."""
        out = {}
        for item in self.items:
            key, side = setting_key(item)
            values = pd.to_numeric(rows.get(f"cfg:{key}", pd.Series(np.nan, index=rows.index)),
                                   errors="coerce").to_numpy(dtype=float)
            out[f"ev:{item}"] = [np.nan if not math.isfinite(v) else float(self.side(key, v) == side) for v in values]
        return pd.DataFrame(out, index=rows.index, dtype=float)

    def pool(self, table: Rates, items: Sequence[str] | None = None) -> Rates:
        """``table`` with each setting item's counts on the classes that are not its owners (healthy
        included) replaced by their pooled counts (``items``: default the kept ones)."""
        out = dict(table)
        for item in self.items if items is None else items:
            per = table.get(item)
            if not per:
                continue
            owners = set(self.owners.get(setting_key(item)[0], ()))
            rest = [c for c in per if c not in owners]
            pooled = (sum(per[c][0] for c in rest), sum(per[c][1] for c in rest))
            out[item] = {c: (per[c] if c in owners else pooled) for c in per}
        return out

    def separates(self, item: str, per: Mapping[str, tuple[int, int]], alpha: float = SETTING_ALPHA) -> bool:
        """Whether an item's pooled counts show it firing more often on one of its owners than where the
        setting was not the bug: one-sided Fisher exact p-value below ``alpha``."""
        owners = set(self.owners.get(setting_key(item)[0], ()))
        rest = [c for c in per if c not in owners]
        k0, n0 = sum(per[c][0] for c in rest), sum(per[c][1] for c in rest)
        return n0 > 0 and any(n > 0 and k / n > k0 / n0 and fisher_greater(k, n, k0, n0) < alpha
                              for label, (k, n) in per.items() if label in owners)

    def describe(self, item: str, value: float | None = None) -> str:
        key, side = setting_key(item)
        shown = f" ({value:.4g})" if value is not None and math.isfinite(value) else ""
        cut, edge = self.cut(key, side), self.low[key] if side == "below" else self.high[key]
        beyond = f"; counted {side} {cut:.4g}, midway to the nearest value where it was the bug" if cut != edge else ""
        return (f"the configured {key}{shown} is {side} the range of every training log of this view where "
                f"{key} was not the bug ({self.low[key]:.4g} .. {self.high[key]:.4g}{beyond}; evidence for "
                f"{', '.join(self.owners[key])})")


def _midpoint(a: float, b: float) -> float:
    """Midway between ``a`` < ``b``: geometric when both are positive (settings spread over decades),
    arithmetic otherwise."""
    return math.sqrt(a * b) if a > 0 and b > 0 else (a + b) / 2


def setting_evidence(rows: pd.DataFrame, labels: np.ndarray, algo: str, settings: Mapping[str, Sequence[str]],
                     folds: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[SettingRanges, pd.DataFrame]:
    """The fitted setting ranges of ``rows`` (every row) and each row's setting items observed out of
    fold: with the ranges of the other ``folds`` (split by run), so a configuration that no other run
    had fires as it would on a user's log. Only items that separate an owner from the rest
    (:meth:`SettingRanges.separates`) are kept."""
    labels = np.asarray(labels)
    whole = SettingRanges.fit(rows, labels, algo, settings)
    observed = pd.DataFrame(np.nan, index=rows.index, columns=[f"ev:{i}" for i in whole.items])
    for train, test in folds:
        part = SettingRanges.fit(rows.iloc[train], labels[train], algo, settings)
        seen = part.observe(rows.iloc[test])
        observed.loc[seen.index, seen.columns] = seen.to_numpy()
    counted = rates(observed, labels)
    kept = [i for i in whole.items if whole.separates(i, counted[i])]
    return SettingRanges.fit(rows, labels, algo, settings, items=kept), observed[[f"ev:{i}" for i in kept]]

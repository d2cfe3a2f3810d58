"""A log in a framework's dialect -> the canonical frame: one row per training step, canonical
names, signs and scales, NaN where the framework does not log a metric.

Cadence is aligned as each framework writes it (the profile's data says how): rows keyed by the
step key (``step_kind: index``, e.g. TRL's global_step, verl's step); CleanRL's per-update scalars
keyed by global_step with the per-episode scalars aggregated over the episodes each update's
rollout finished (``episodic``); SB3's dumps, whose ``train/*`` describe the previous iteration
(``lag``). Keys that appear on different rows of one step are merged; nothing is interpolated;
rows holding no training metric (TRL's end-of-training summary, verl's ``step:0`` validation
line) are not steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from harness.config import ALGO_SCHEMAS, ConfigError
from harness.logs.profiles import Profile, detect, load_profile, ranking
from harness.logs.readers import RawLog, number, records_frame
from harness.metrics import CANONICAL, GRPO_ONLY, PPO_ONLY, SURROGATE_ONLY, WATCHED


@dataclass
class LoadedLog:
    """A log in canonical form. ``metrics``: columns ``update`` (0-based training-step index as the
    framework counts steps: an update for CleanRL / SB3 / verl / canonical, an optimizer step for
    TRL), ``step`` (the framework's own step value, e.g. global_step), ``fault_active`` (True: a
    user's log is judged as a whole), then every canonical metric in harness.metrics order and any
    ``reward/<fn>``; NaN where not logged."""

    metrics: pd.DataFrame
    profile: str
    algo: str
    used: dict[str, str]                      # canonical name <- log key
    unused: list[str]                         # log keys that carry no canonical metric
    config: dict[str, Any] = field(default_factory=dict)   # hyperparameters, harness names
    source: str = ""
    detected: bool = False                    # profile picked by profile=auto
    notes: list[str] = field(default_factory=list)

    @property
    def unknown(self) -> list[str]:           # v1 name
        return self.unused


MappedLog = LoadedLog                         # v1 name


# ---- steps and cadence --------------------------------------------------------------------------
def _groups(records: pd.DataFrame) -> list[tuple[float, float, dict[str, float], list[str]]]:
    """Records -> [(row, step, {key: value}, keys in order)]: one group per row of a row-based log,
    one per step value of a step-based one (TensorBoard), in ascending order (records without either
    are dropped). A key repeated in a group keeps its last value."""
    rows, steps = (records[c].to_numpy(dtype=float, na_value=np.nan) for c in ("row", "step"))
    keys, values = records["key"].tolist(), records["value"].tolist()
    by_row = ~np.isnan(rows)
    out = []
    for by, members, is_row in ((rows, by_row, True), (steps, ~by_row & ~np.isnan(steps), False)):
        idx = np.flatnonzero(members)
        if not len(idx):
            continue
        idx = idx[np.argsort(by[idx], kind="stable")]          # record order kept within a group
        cuts = np.flatnonzero(np.diff(by[idx])) + 1
        for group in np.split(idx, cuts):
            first = group[0]
            names = [keys[i] for i in group]
            out.append((float(rows[first]) if is_row else math.nan, float(steps[first]),
                        dict(zip(names, (values[i] for i in group))), list(dict.fromkeys(names))))
    return out


def _step_of(profile: Profile, step: float, values: dict[str, float], row: float) -> float:
    if not math.isnan(step):
        return step
    for key in profile.step_keys:
        if key in values and np.isfinite(values[key]):
            return float(values[key])
    return row + profile.first_step if not math.isnan(row) else math.nan


def _cells(profile: Profile, records: pd.DataFrame, groups, notes: list[str]) -> list[tuple[int, str, float, float]]:
    """(update, key, value, step) cells per the profile's cadence."""
    if profile.step_kind == "sb3_iteration":
        return _sb3_cells(profile, groups, notes)
    if profile.step_kind == "env_steps":
        return _episodic_cells(profile, records, groups, notes)
    cells = []
    for row, step, values, _ in groups:
        s = _step_of(profile, step, values, row)
        if math.isnan(s):
            continue
        update = int(round(s)) - profile.first_step
        for key, value in values.items():
            if profile.canonical_name(key) is not None:
                cells.append((update, key, value, s))
    return cells


def _episodic_cells(profile: Profile, records: pd.DataFrame, groups, notes: list[str]
                    ) -> list[tuple[int, str, float, float]]:
    """CleanRL: per-update scalars keyed by global_step; per-episode scalars (several may share a
    global_step, one per env) at their own global_step belong to the first update at or after it."""
    per_update: dict[float, dict[str, float]] = {}
    row_step: dict[float, float] = {}
    for row, step, values, _ in groups:
        s = _step_of(profile, step, values, row)
        if not math.isnan(row):
            row_step[row] = s
        if math.isnan(s):
            continue
        for key, value in values.items():
            if key not in profile.episodic and profile.canonical_name(key) is not None:
                per_update.setdefault(s, {})[key] = value
    episodic = records[records["key"].isin(list(profile.episodic))]
    ep_steps = [row_step.get(r, math.nan) if not math.isnan(r) else s
                for r, s in zip(episodic["row"], episodic["step"])]
    steps = sorted(per_update)
    cells = [(u, k, v, s) for u, s in enumerate(steps) for k, v in per_update[s].items()]
    if not steps:
        return cells
    edges = np.asarray(steps)
    late = 0
    agg: dict[tuple[int, str], list[float]] = {}
    for s, key, value in zip(ep_steps, episodic["key"], episodic["value"]):
        if math.isnan(s):
            continue
        u = int(np.searchsorted(edges, s, side="left"))
        if u >= len(steps):
            late += 1
            continue
        agg.setdefault((u, key), []).append(float(value))
    for (u, key), values in agg.items():
        for stat in profile.episodic[key]:
            x = float(np.mean(values)) if stat == "mean" else float(np.std(values))
            cells.append((u, f"{key}#{stat}", x, steps[u]))
    if late:
        notes.append(f"{late} episode value(s) logged after the last update's step: not attributed")
    return cells


def _sb3_cells(profile: Profile, groups, notes: list[str]) -> list[tuple[int, str, float, float]]:
    """SB3: a dump at iteration i holds rollout/* up to rollout i (update i - 1) and the train/* of
    the train() that followed rollout i - 1 (update i - 2). Iterations come from time/iterations;
    without it (TensorBoard) from the step in env steps divided by the batch size."""
    dumps = []
    for _row, step, values, _ in groups:
        dumps.append((values.get("time/iterations"), values.get("time/total_timesteps", step
                      if not math.isnan(step) else values.get("global_step")), values))
    batch = None
    with_both = [(it, ts) for it, ts, _ in dumps if it and ts is not None and not math.isnan(ts)]
    if with_both:
        batch = with_both[0][1] / with_both[0][0]
    elif dumps:
        first_ts = dumps[0][1]
        if first_ts is not None and not math.isnan(first_ts) and first_ts > 0:
            has_train = any(k.startswith("train/") for k in dumps[0][2])
            batch = first_ts
            if has_train:
                notes.append("the first SB3 dump already holds train/*: log_interval > 1; "
                             "iterations assumed one per dump")
    cells = []
    lag_of = sorted(profile.lag.items(), key=lambda kv: -len(kv[0]))
    iterations = []
    for it, ts, _values in dumps:
        if it is None and batch and ts is not None and not math.isnan(ts):
            it = ts / batch
        iterations.append(it)
    lagged = not any(it == 1 and any(k.startswith("train/") for k in v) for it, (_, _, v) in zip(iterations, dumps))
    if not lagged:
        notes.append("train/* appears in the first dump: not SB3's own one-iteration-late cadence; "
                     "aligned as written")
    spacing = np.diff([it for it in iterations if it is not None and not math.isnan(it)])
    if lagged and len(spacing) and np.median(spacing) > 1:
        # learn(log_interval=k): a dump every k iterations. Shifting train/* back one iteration would put
        # it on a row of its own, between dumps; it stays on its dump's row (one update early)
        lagged = False
        notes.append(f"one SB3 dump every {np.median(spacing):g} iterations (log_interval > 1): each dump's "
                     "train/* (from the update before its rollout) is kept on the dump's row")
    for it, (_, _ts, values) in zip(iterations, dumps):
        if it is None or math.isnan(it):
            continue
        for key, value in values.items():
            if profile.canonical_name(key) is None:
                continue
            lag = next((n for prefix, n in lag_of if key.startswith(prefix)), 0) if lagged else 0
            update = int(round(it)) - 1 - lag
            step = (update + 1) * batch if batch else math.nan
            cells.append((update, key, value, step))
    return cells


# ---- hyperparameters ---------------------------------------------------------------------------
def _coerce(value: Any) -> Any:
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        if low in ("none", "null", ""):        # an unset hyperparameter as a text table writes it (CleanRL's target_kl)
            return None
        x = number(value)
        if x is not None:
            return int(x) if x.is_integer() and "." not in value and "e" not in low else x
        return value.strip()
    return value


def setting_name(algo: str, name: str) -> str:
    """A profile's harness name for a setting, in ``algo``'s terms: the passes over a batch are
    ``n_epochs`` for PPO (and PPO-LM) and ``num_iterations`` for GRPO, whichever the framework calls them."""
    if algo in ("ppo", "ppo_lm") and name == "num_iterations":
        return "n_epochs"
    if algo == "grpo" and name == "n_epochs":
        return "num_iterations"
    return name


def map_config(profile: Profile, config: dict[str, Any], algo: str,
               overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The log's hyperparameters in the harness's names (the schema's VISIBLE list), plus the user's
    ``key=value`` overrides (checked against that list)."""
    schema = ALGO_SCHEMAS.get(algo)
    visible = set(schema.VISIBLE) if schema is not None else set()
    names = profile.hyperparameters or {k: k for k in visible}
    out: dict[str, Any] = {}
    for key, value in config.items():
        target = names.get(key)
        if target is None:
            continue
        target = setting_name(algo, target)
        value = _coerce(value)
        mapping = profile.values.get(target)
        if mapping is not None and str(value) in mapping:
            value = mapping[str(value)]
        if target in visible and value is not None:
            out[target] = value
    for target, (num, den) in profile.derived.items():
        a, b = number(config.get(num)), number(config.get(den))
        if target in visible and target not in out and a is not None and b:
            ratio = a / b
            out[target] = int(ratio) if float(ratio).is_integer() else ratio
    for key, value in (overrides or {}).items():
        if key not in visible:
            raise ConfigError(f"hyperparameter {key!r} is not one a {algo} config holds; valid choices: "
                              f"{', '.join(sorted(visible))}")
        out[key] = checked_value(schema, key, _coerce(value) if isinstance(value, str) else value)
    return out


def checked_value(schema: type, key: str, value: Any) -> Any:
    """``+hp.KEY=VALUE`` as the schema's type holds it (numbers numeric, bools bool, names text); a
    one-line ConfigError otherwise."""
    kind = str(next((f.type for f in fields(schema) if f.name == key), ""))
    if value is None and "None" in kind:
        return value
    if kind.startswith("bool"):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"hp.{key}={value!r} must be true or false")
    if kind.startswith("int"):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
                and float(value).is_integer():
            return int(value)
        raise ConfigError(f"hp.{key}={value!r} must be an integer")
    if kind.startswith("float"):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return value
        raise ConfigError(f"hp.{key}={value!r} must be a number")
    if kind.startswith("str") and not isinstance(value, str):
        raise ConfigError(f"hp.{key}={value!r} must be a name (text), not a number or a bool")
    return value


# ---- the canonical frame -----------------------------------------------------------------------
def _infer_algo(profile: Profile, used: dict[str, str], algo: str | None, keys: list[str]) -> str:
    """The log's algorithm: given, the profile's own, else from what it logs. A critic makes it PPO
    (verl logs actor/kl_loss either way), on a language model (a name only such a run logs: verl's
    prompt_length/mean) PPO-LM; GRPO's group metrics make it GRPO."""
    if algo is not None:
        return algo
    if profile.algo:
        return profile.algo
    if any(m in used for m in PPO_ONLY):
        return "ppo_lm" if any(k in profile.language_model for k in keys) else "ppo"
    if any(m in used for m in GRPO_ONLY) or any(m.startswith("reward/") for m in used):
        return "grpo"
    return "grpo" if profile.name in ("trl", "verl") else "ppo"


class AnotherAlgorithm(ConfigError):
    """The log is another algorithm's (SB3's A2C, CleanRL's dqn.py): no later rows will change that."""


def _refuse_another_algorithm(prof: Profile, keys: list[str], used: dict[str, str]) -> None:
    """A one-line error for a log another algorithm of the profile's framework wrote (SB3's A2C, SAC or
    DQN; CleanRL's dqn.py or sac_continuous_action.py; TRL's SFTTrainer or DPOTrainer): the diagnosis is
    fitted on PPO and GRPO runs, and such a log would be read as a PPO or GRPO log missing its clipping
    metrics. The algorithms named are those every such name in the log allows (all they allow if none)."""
    marks = [k for k in keys if k in prof.other_algos]
    if not marks or any(m in used for m in SURROGATE_ONLY):
        return
    allowed = [prof.other_algos[k] for k in marks]
    union = list(dict.fromkeys(a for names in allowed for a in names))
    names = [a for a in union if all(a in n for n in allowed)] or union
    said = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    algo = prof.algos[0]
    raise AnotherAlgorithm(f"the log looks like {prof.framework.split()[0]}'s {said}, not its "
                           f"{'/'.join(a.upper() for a in prof.algos)} (it logs {', '.join(marks[:3])} and no "
                           f"approx_kl, clip fraction or ratio): the diagnosis knows PPO and GRPO runs only; "
                           f"algo={algo} reads it as {algo.upper()} anyway")


#: what the agent earns: a log with neither shows only how the optimisation went
EARNED = ("return_mean", "reward_mean")


def _nothing_earned(prof: Profile) -> str:
    names = [k for k, v in prof.columns.items() if v in EARNED] + [k for k, v in prof.episodic.items()
                                                                     if v.get("mean") in EARNED]
    written = f" ({prof.name} writes it as {' or '.join(names[:2])})" if names else ""
    return (f"the log holds no episode return or reward{written}: a fault that shows only in what the agent "
            f"earns cannot be seen here, and the answer rests on the optimisation metrics alone")


def _resolve_profile(raw: RawLog, profile: str | dict | Profile) -> tuple[Profile, bool]:
    keys = set(raw.records["key"])
    if isinstance(profile, str) and profile == "auto":
        return detect(keys), True
    prof = load_profile(profile)
    if not any(prof.known(prof.strip(k)) for k in keys):
        best = ranking(keys)[0]
        looks = (f"; its names look like profile={best.profile}" if best.mapped and best.profile != prof.name
                 else f"; its names: {', '.join(sorted(keys)[:8])}")
        example = ", ".join(list(prof.columns)[:4])
        raise ConfigError(f"the log has none of the metrics profile={prof.name} knows (e.g. {example}){looks}")
    return prof, False


def _mismatch_note(raw: RawLog, prof: Profile) -> str | None:
    """An explicit profile that maps far fewer of the log's names than another one."""
    keys = set(raw.records["key"])
    best = ranking(keys)[0]
    mine = next(m for m in ranking(keys) if m.profile == prof.name)
    if best.profile != prof.name and best.mapped >= 2 * max(mine.mapped, 1):
        return (f"profile={prof.name} maps {mine.mapped} of the log's names; they look like "
                f"profile={best.profile} ({best.mapped})")
    return None


#: settings a framework logs every update (SB3: train/clip_range, train/learning_rate)
LOGGED_SETTINGS = ("clip_range", "lr")


def to_canonical(log: RawLog | pd.DataFrame, profile: str | dict | Profile = "auto",
                 config: dict[str, Any] | None = None, algo: str | None = None) -> LoadedLog:
    """A log (a :class:`RawLog` from :func:`harness.logs.read` or :func:`harness.logs.views.render`, or a
    tidy records frame ``row, step, key, value``) in canonical form under ``profile`` (``auto``: detected).
    ``config``: the user's hyperparameters (harness names), on top of those the log carries."""
    raw = log if isinstance(log, RawLog) else RawLog(log)
    if raw.records.empty:
        raise ConfigError("the log has no records")
    prof, detected = _resolve_profile(raw, profile)
    records = raw.records.copy()
    records["key"] = records["key"].map(prof.strip)
    notes = list(raw.notes)
    if not detected:
        note = _mismatch_note(raw, prof)
        if note:
            notes.append(note)
    groups = _groups(records)
    cells = _cells(prof, records, groups, notes)

    # which log key feeds which canonical metric (profile order decides between synonyms)
    present = list(dict.fromkeys(k for _, k, _, _ in cells))
    used: dict[str, str] = {}
    for key in sorted((k for k in present if "#" not in k),
                      key=lambda k: list(prof.columns).index(k) if k in prof.columns else len(prof.columns)):
        used.setdefault(prof.canonical_name(key), key)
    for key in (k for k in present if "#" in k):
        base, stat = key.split("#")
        used.setdefault(prof.episodic[base][stat], base)

    all_keys = list(dict.fromkeys(records["key"]))
    unused = [k for k in all_keys if k not in used.values() and not prof.is_bookkeeping(k)]
    if algo is None:
        _refuse_another_algorithm(prof, all_keys, used)
    if not used:
        raise ConfigError(f"the log has none of the metrics profile={prof.name} knows "
                          f"(e.g. {', '.join(list(prof.columns)[:4])}); its names: {', '.join(all_keys[:8])}")

    # one row per update: the last value of each metric's source key
    table: dict[int, dict[str, float]] = {}
    step_of: dict[int, float] = {}
    logged_bad: set[int] = set()         # updates where a watched metric was logged as NaN or inf
    for update, key, value, step in cells:
        if "#" in key:
            base, stat = key.split("#")
            metric, source = prof.episodic[base][stat], base
        else:
            metric, source = prof.canonical_name(key), key
        if used.get(metric) != source:
            continue
        table.setdefault(update, {})[metric] = value * prof.factor(source, metric)
        if metric in WATCHED and not math.isfinite(value):
            logged_bad.add(update)
        if "#" not in key or update not in step_of:
            step_of[update] = step
    updates = sorted(table)
    extra = sorted({m for m in used if m not in CANONICAL})
    out = pd.DataFrame({"update": np.asarray(updates, dtype="int64"),
                        "step": np.asarray([step_of.get(u, math.nan) for u in updates], dtype="float64"),
                        "fault_active": True})
    for name in (*CANONICAL, *extra):
        out[name] = np.asarray([table[u].get(name, math.nan) for u in updates], dtype="float64")
    if "nonfinite" not in used:
        watched = [c for c in WATCHED if c in used]
        went_bad = np.isin(out["update"].to_numpy(), sorted(logged_bad))
        out["nonfinite"] = went_bad.astype(float) if watched else np.nan

    resolved = _infer_algo(prof, used, algo, all_keys)
    for metric, why in prof.not_read_for.get(resolved, {}).items():
        if metric in used:
            notes.append(f"{used.pop(metric)} not read: {why}")
            out[metric] = np.nan
    if not any(m in used for m in EARNED):
        notes.append(_nothing_earned(prof))
    mapped_config = map_config(prof, raw.config, resolved, config)
    if raw.config:       # the log carries its hyperparameters: a setting it logs as a constant fills a gap
        for name in LOGGED_SETTINGS:
            values = out[name].dropna().unique() if name in used else []
            if name not in mapped_config and len(values) == 1 and math.isfinite(values[0]):
                mapped_config[name] = float(values[0])
                notes.append(f"{name}={values[0]:g} read from the logged {used[name]} (constant; the saved "
                             "config holds it in a form that is not read, e.g. an SB3 schedule)")
    notes += schedule_notes(out, used, raw.config) + definition_notes(used, raw.config)
    _from_counters(prof, out, used, mapped_config, notes)
    _from_cadence(prof, out, mapped_config, notes)
    return LoadedLog(out, prof.name, resolved, used, unused, mapped_config, raw.source, detected, notes)


def _from_counters(prof: Profile, out: pd.DataFrame, used: dict[str, str], config: dict[str, Any],
                   notes: list[str]) -> None:
    """Canonical metrics the log holds only as a cumulative counter (``profile.cumulative``): the
    counter's increment per update times a configured value, where the log does not give the metric."""
    for column, (metric, key) in prof.cumulative.items():
        factor = number(config.get(key))
        if column not in out or metric in used or factor is None:
            continue
        counter = out[column].dropna()
        # per update: a row logged every k updates holds k updates' increments (SB3's log_interval=k);
        # the first row's span is unknown then (the counter's first train lags its first rollout)
        span = out.loc[counter.index, "update"].diff()
        increments = counter.diff() / span
        if len(counter):
            every = bool((span.dropna() == 1).all())
            increments.iloc[0] = counter.iloc[0] if every else math.nan
        out[metric] = (increments * factor).reindex(out.index)
        used[metric] = f"{used.get(column, column)} increments x {key}"
        notes.append(f"{metric} = increments of {used.get(column, column)} x {key}={factor:g}")


def linear_schedule(values: np.ndarray) -> tuple[float, float] | None:
    """(first, last) when ``values`` (a setting logged every update) move in a straight line, as a
    linear schedule moves them (R^2 >= 0.99 over >= 5 values, not constant); None otherwise."""
    values = values[np.isfinite(values)]
    if len(values) < 5 or np.ptp(values) == 0:
        return None
    t = np.arange(len(values), dtype=float)
    fit = np.polyfit(t, values, 1)
    resid = values - np.polyval(fit, t)
    r2 = 1.0 - float(resid @ resid) / float(((values - values.mean()) ** 2).sum())
    return (float(values[0]), float(values[-1])) if r2 >= 0.99 else None


def schedule_notes(out: pd.DataFrame, used: dict[str, str], raw_config: dict[str, Any]) -> list[str]:
    """A logged setting that follows the run's schedule is configuration, not a symptom: the schedules
    the saved model describes (SB3's model.zip, read without executing it) and a logged clip range or
    learning rate that moves in a straight line."""
    notes = [f"{key.removesuffix('_schedule')} is configured as a {value} (the saved model's pickle, read "
             "without executing it): its logged values are configuration, not evidence"
             for key, value in raw_config.items() if key.endswith("_schedule") and isinstance(value, str)]
    described = {"lr": "learning_rate_schedule", "clip_range": "clip_range_schedule"}
    for name in LOGGED_SETTINGS:
        if described.get(name) in raw_config:           # the saved model already says
            continue
        line = linear_schedule(out[name].to_numpy(dtype=float)) if name in used else None
        if line is not None:
            notes.append(f"{used[name]} moves linearly from {line[0]:.3g} to {line[1]:.3g}, as a linear schedule "
                         "does: read as the run's configured schedule, not as a symptom")
    return notes


def _version(text: Any) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


#: where a logged metric's definition changed between a framework's releases: (version key in the
#: log's config, the log key, releases before this one, what the metric was there)
DEFINITIONS = (
    ("sb3_version", "train/approx_kl", (1, 1),
     "mean(old_log_prob - log_prob), which can be negative (from 1.1.0 on it is Schulman's estimator "
     "mean((ratio - 1) - log ratio), never negative: DLR-RM/stable-baselines3#419, commit 2ada2dd, first tagged "
     "v1.1.0)"),
)


def definition_notes(used: dict[str, str], raw_config: dict[str, Any]) -> list[str]:
    """The framework version the log's config carries (SB3: model.zip's _stable_baselines3_version), and
    what a logged metric meant in that version where its definition has changed since."""
    notes = []
    for key, log_key, before, meaning in DEFINITIONS:
        version = raw_config.get(key)
        if version and log_key in used.values():
            if _version(version) < before:
                notes.append(f"{log_key} in {key.removesuffix('_version')} {version} (before "
                             f"{'.'.join(map(str, before))}) is {meaning}: read with that in mind")
    if raw_config.get("sb3_version"):
        notes.insert(0, f"written by stable-baselines3 {raw_config['sb3_version']} (model.zip)")
    return notes


def generation_stride(out: pd.DataFrame) -> int | None:
    """In a log of one row per optimizer step (TRL's GRPOTrainer at logging_steps=1), the regular
    spacing k > 1 of the rows that carry the reward: TRL logs a generation's rewards on the optimizer
    step that generates, so each generation batch is optimised k times (num_iterations x
    steps_per_generation / gradient_accumulation_steps). None when the rows are not one per step, the
    reward is on every row, or its spacing is irregular."""
    if "reward_mean" not in out or "update" not in out or len(out) < 8:
        return None
    updates = out["update"].to_numpy(dtype=float)
    if float(np.median(np.diff(updates))) != 1.0:
        return None
    rewarded = updates[out["reward_mean"].notna().to_numpy()]
    gaps = np.diff(rewarded)
    if len(gaps) < 3:
        return None
    k = int(np.median(gaps))
    return k if k > 1 and float(np.mean(gaps == k)) >= 0.9 else None


def _from_cadence(prof: Profile, out: pd.DataFrame, config: dict[str, Any], notes: list[str]) -> None:
    """The log's own structure as configuration: a TRL log whose reward is on every k-th optimizer step
    reuses each generation batch for k optimizer steps; where the log carries neither num_iterations nor
    the minibatch count, that is what they are taken to be (num_iterations=k, one minibatch), noted."""
    if prof.name != "trl" or "num_iterations" in config or "n_minibatches" in config:
        return
    k = generation_stride(out)
    if k is None:
        return
    config["num_iterations"] = k
    config["n_minibatches"] = 1
    notes.append(f"num_iterations={k} read from the log's cadence: the reward is logged on every {k}th optimizer "
                 f"step, so each generation batch is optimised {k} times (num_iterations x steps_per_generation "
                 "/ gradient_accumulation_steps; the log carries no training_args to say which)")


def map_log(df: pd.DataFrame, profile: dict[str, Any] | str | Profile, algo: str | None = None) -> LoadedLog:
    """A wide frame (one row per logged row, columns = the framework's keys) in canonical form (v1 API)."""
    rows = []
    for i, rec in enumerate(df.to_dict("records")):
        for key, value in rec.items():
            x = number(value)
            if x is not None and not math.isnan(x):     # v1: an empty cell is "not logged"
                rows.append((float(i), math.nan, str(key), x))
    return to_canonical(RawLog(records_frame(rows)), profile, algo=algo)

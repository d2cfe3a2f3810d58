"""The diagnosis model's training examples: every stored run, in every framework view, cut at several
lengths.

- Every run of the labelled dataset is rendered in every framework view that applies to its
  algorithm (:mod:`harness.logs.views`: the metrics, estimators and cadence that framework logs)
  and cut at :data:`PREFIXES` of its length (a prefix that ends before the fault's onset is a
  healthy example), so short logs and long logs of the same run both train the model.
- Half of the examples carry the run's configuration as context (what the user's config holds),
  half none, so the model works with and without it.
- Labels mean what they say: a healthy run whose configuration does not learn in its setup
  (:mod:`harness.analysis.learning`) is labelled ``not_learning`` and neither trains nor scores the
  model as healthy.
- Each example also records the exact evidence observed in it (``ev:<item>``: 1, 0 or NaN,
  :mod:`harness.analysis.evidence`), whose rates per class the model measures, and what the rule
  baselines (``folk``, ``config_aware``) streamed over the same log said (``baseline.<name>.*``), so
  every score stands beside them.

No column identifies the fault to the model: the features of a stored run are those of its exported log.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from joblib import Parallel, delayed

from faults import FAULTS
from harness.analysis import evidence
from harness.analysis.features import FEATURE_VERSION, features
from harness.analysis.learning import NOT_LEARNING, learning
from harness.config import ALGO_SCHEMAS, ConfigError, visible_config
from harness.detection.stream import baseline_verdicts
from harness.hooks import HOOK_SITES, overridden
from harness.logs import to_canonical
from harness.logs.views import StoredRun, applies, render
from harness.metrics import CANONICAL
from harness.store import atomic_write_parquet

HEALTHY = "healthy"
PREFIXES = (0.3, 0.6, 1.0)
#: views a model is fitted for, per algorithm (a view's profile must apply to the algorithm)
VIEWS = {"ppo": ("canonical", "sb3", "cleanrl", "verl"), "grpo": ("canonical", "trl", "verl")}
ONSET_MARGIN = 1           # updates after the onset before a prefix counts as faulty
#: example columns that are not model inputs (labels, bookkeeping, the sampled values, evidence)
EVIDENCE_PREFIX = "ev:"


def _with_config(run_id: str, view: str, prefix: float) -> bool:
    """Deterministically, half of the examples carry the configuration."""
    digest = hashlib.sha256(f"{run_id}/{view}/{prefix}".encode()).digest()
    return digest[0] % 2 == 0


def run_label(run: StoredRun) -> tuple[str, dict[str, Any]]:
    """A run's label and its learning: the fault, or ``healthy``, or ``not_learning`` for a healthy
    run whose configuration does not learn in its setup."""
    meta = run.meta
    learned = learning(run.metrics, meta)
    info = {"learning_share": learned.share, "learns": learned.learns}
    if meta["fault"] != "none":
        return meta["fault"], info
    return (NOT_LEARNING if learned.learns is False else HEALTHY), info


def run_examples(root: str | Path, run_id: str, views: Sequence[str] | None = None,
                 prefixes: Sequence[float] = PREFIXES) -> list[dict[str, Any]]:
    """The examples of one stored run: one per applicable view and prefix (features, evidence,
    labels)."""
    run = StoredRun.load(root, run_id)
    meta = run.meta
    algo = meta["algo"]
    label, learned = run_label(run)
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
        cuts = {prefix: max(1, int(round(len(frame) * prefix))) for prefix in prefixes}
        verdicts = baseline_verdicts(frame, algo, configured, tuple(cuts.values()))
        for prefix in prefixes:
            rows = cuts[prefix]
            upto = n_updates * rows / max(len(frame), 1)          # updates covered by the prefix
            before_onset = meta["fault"] != "none" and upto <= onset + ONSET_MARGIN
            config = configured if _with_config(run_id, view, prefix) else {}
            space = meta.get("action_space") if view == "canonical" else None
            cut = frame.iloc[:rows]
            observed = evidence.observe(cut, config)
            out.append({"run_id": run_id, "view": view, "prefix": prefix,
                        "label": HEALTHY if before_onset else label, "fault": meta["fault"],
                        "algo": algo, "env": meta["env"], "backend": meta["backend"], "seed": meta["seed"],
                        "is_control": bool(meta["is_control"]), "with_config": bool(config), "n_rows": rows,
                        **learned,
                        **{f"space.{k}": v for k, v in (sampled.get("algo") or configured).items()
                           if isinstance(v, (int, float, bool))},
                        **{f"{EVIDENCE_PREFIX}{k}": (np.nan if v is None else float(v)) for k, v in observed.items()},
                        **{f"baseline.{name}.{what}": value for name, per in verdicts.items()
                           for what, value in (("alarmed", float(per[rows].first is not None)),
                                               ("fault", per[rows].fault or ""))},
                        **features(cut, CANONICAL, algo, config, space, view)})
    return out


def build_examples(root: str | Path, run_ids: Sequence[str], n_jobs: int = -1,
                   cache: Path | None = None, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Examples of every run (in parallel; cached by run id when ``cache`` is a parquet path)."""
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
        atomic_write_parquet(cache, frame)
    return frame


def training_examples(root: Path, run_ids: Sequence[str], extra_ids: Sequence[str], cache: Path | None,
                      n_jobs: int = -1, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Examples of the diverse runs (``testable``: they may be scored) and of extra training runs."""
    extra = sorted(set(extra_ids) - set(run_ids))
    examples = build_examples(root, [*run_ids, *extra], n_jobs=n_jobs, cache=cache, progress=progress)
    examples["testable"] = examples["run_id"].isin(set(run_ids))
    return examples


def feature_columns(examples: pd.DataFrame) -> list[str]:
    """The model's inputs: every feature column (``metric:stat``, ``sig:``, ``cfg:``, ``rel:``), not the
    evidence observations (their rates are measured apart) nor the sampled values (``space.``)."""
    return [c for c in examples.columns if ":" in c and not c.startswith(EVIDENCE_PREFIX)]


def evidence_frame(examples: pd.DataFrame) -> pd.DataFrame:
    """The ``ev:`` columns of the examples."""
    return examples[[c for c in examples.columns if c.startswith(EVIDENCE_PREFIX)]]


def settings_to_check(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """What a user should check for the fault of a stored run, derived from the fault itself: the
    hyperparameters it changes (its setting, and what its effective-hyperparameter hook changes on
    the run's configuration), then the code it acts on (the other hooks it overrides)."""
    cls = FAULTS.get(meta.get("fault", "none"))
    if cls is None or meta["fault"] == "none":
        return ()
    try:
        fault = cls(**meta.get("fault_params", {}))
        schema = ALGO_SCHEMAS[meta["algo"]]
        names = {f.name for f in dataclasses.fields(schema) if f.init}
        cfg = schema(**{k: v for k, v in meta["hyperparameters"]["configured"].items() if k in names})
        effective = fault.hyperparams(cfg)
        changed = [f for f in sorted(names) if getattr(effective, f) != getattr(cfg, f)]
    except (ConfigError, TypeError, KeyError, ValueError):
        changed = []
    out = [*fault.setting(), *changed]
    code = [h for h in overridden(cls) if h != "hyperparams"]
    if code:
        out.append(f"the code at {', '.join(code)} ({HOOK_SITES[code[0]]})")
    return tuple(dict.fromkeys(out))


def fault_settings(metas: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """:func:`settings_to_check` of every fault, from the first stored run of each."""
    out: dict[str, tuple[str, ...]] = {}
    for meta in metas:
        fault = meta.get("fault", "none")
        if fault != "none" and fault not in out:
            out[fault] = settings_to_check(meta)
    return out

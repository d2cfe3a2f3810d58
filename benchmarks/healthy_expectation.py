"""Can a single log show the faint PPO faults once each metric is read against what a healthy run of
the logged configuration shows? Measured on the harness's own runs, out of fold.

    python benchmarks/healthy_expectation.py [--examples results/catalogue/model/examples.parquet]
                                             [--views cleanrl sb3] [--env] [--jobs 2] [--record] [--out F]

Issue 21's item 1 asks for config-relative features. The published ones (``rel:*``) are ratios fixed
by hand (approx KL per unit learning rate, logged over configured clip range, ...). This measures the
general form: for each of a set of key metric statistics, a gradient-boosted regressor fitted on the
*healthy* training logs that carry their configuration predicts the statistic from the configured
hyperparameters and the log's length, and the model gets ``observed - expected`` (signed-log scale)
as extra features (NaN for logs without a configuration). Both the regressors and the classifier are
fitted out of fold (3 folds grouped by run, the folds the published fit uses), so every log is scored
by models that never saw its run.

Reported per view, with and without the residual features: top-1 on faulty logs, healthy logs whose
most probable class is healthy, and each faint fault's recall, over every log and over the logs in
CleanRL ppo.py's own regime (4 envs x 128 steps, 4 epochs x 4 minibatches). Nothing here reads a
real-framework test log. ``--env`` adds a third variant whose regressors are also told the env the run
trained on (what healthy runs of this configuration reach *on this env*; CleanRL's hyperparameters text
names its env_id, most other logs do not). ``--record`` writes benchmarks/results/healthy_expectation.json
(or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = ("approx_kl:log_median", "approx_kl:log_tail", "clipfrac:log_median", "clipfrac:median", "entropy:head",
           "entropy:tail", "entropy:trend", "return_mean:trend", "value_loss:median", "value_loss:tail",
           "explained_variance:median", "explained_variance:tail", "policy_loss:median", "length_mean:trend",
           "return_std:tail", "grad_norm:log_median")
FAINT = ("ppo_epochs_ignored", "no_zero_grad", "gae_no_done_mask", "lr_too_low", "grad_clip_tiny",
         "target_kl_too_strict")


def residuals(data: pd.DataFrame, cv: list, config_columns: list[str], env: bool = False) -> pd.DataFrame:
    """``res:<target>``: each target statistic minus what healthy logs of the same configuration show,
    predicted out of fold from the configuration (NaN without one); with ``env``, from the configuration
    and the env the run trained on (one-hot), so the expectation is that of healthy runs of this
    configuration *on this env*."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from harness.analysis.model import _signed_log

    healthy = (data["label"] == "healthy").to_numpy() & data["with_config"].to_numpy(bool)
    X = data[config_columns].to_numpy(float)
    if env:
        X = np.column_stack([X, pd.get_dummies(data["env"]).to_numpy(float)])
    out = {}
    for target in (t for t in TARGETS if t in data and data[t].notna().any()):
        value = _signed_log(data[target].to_numpy(float))
        expected = np.full(len(data), np.nan)
        for train, test in cv:
            fit_on = np.zeros(len(data), bool)
            fit_on[train] = True
            fit_on &= healthy & np.isfinite(value)
            regressor = HistGradientBoostingRegressor(max_iter=150, max_leaf_nodes=15, min_samples_leaf=10,
                                                      random_state=0)
            expected[test] = regressor.fit(X[fit_on], value[fit_on]).predict(X[test])
        out[f"{'envres' if env else 'res'}:{target}"] = np.where(data["with_config"].to_numpy(bool), value - expected, np.nan)
    return pd.DataFrame(out, index=data.index)


def score(data: pd.DataFrame, columns: list[str], cv: list, jobs: int) -> dict:
    """Out-of-fold answers (most probable class) of the published model kind on ``columns``."""
    from sklearn.model_selection import cross_val_predict
    from threadpoolctl import threadpool_limits

    from harness.analysis.model import make_estimator

    labels = data["label"].to_numpy()
    X = np.clip(data[columns].to_numpy(float), -1e12, 1e12)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probs = cross_val_predict(make_estimator("logistic"), X, labels, cv=cv, method="predict_proba", n_jobs=jobs)
    answers = np.unique(labels)[probs.argmax(axis=1)]
    right = answers == labels
    regime = ((data["cfg:n_epochs"] == 4) & (data["cfg:n_minibatches"] == 4) & (data["cfg:num_envs"] == 4)
              & (data["cfg:n_steps"] == 128)).to_numpy()
    faulty = labels != "healthy"
    row = {"top1_faulty": float(right[faulty].mean()), "healthy_most_probable": float(right[~faulty].mean()),
           "healthy_most_probable_cleanrl_regime": float(right[~faulty & regime].mean()), "faults": {}}
    for fault in FAINT:
        mine = labels == fault
        row["faults"][fault] = {"n": int(mine.sum()), "recall": float(right[mine].mean()),
                                "n_cleanrl_regime": int((mine & regime).sum()),
                                "recall_cleanrl_regime": float(right[mine & regime].mean()) if (mine & regime).any()
                                else None}
    return row


def _shown(path: str) -> str:
    """A path as the record shows it: relative to the repository when it is inside it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else path


def main() -> None:
    from harness.analysis.examples import feature_columns
    from harness.analysis.labels import UNLABELLED
    from harness.analysis.model import MIN_ROWS, folds

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", default=str(ROOT / "results" / "catalogue" / "model" / "examples.parquet"))
    parser.add_argument("--views", nargs="+", default=["cleanrl", "sb3"])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--env", action="store_true",
                        help="also measure residuals whose expectation is given the env as well as the configuration")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "healthy_expectation.json"))
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    examples = pd.read_parquet(args.examples)
    rows = []
    for view in args.views:
        data = examples[(examples["algo"] == "ppo") & (examples["view"] == view)
                        & ~examples["label"].isin(UNLABELLED) & (examples["n_rows"] >= MIN_ROWS)].reset_index(drop=True)
        columns = [c for c in feature_columns(data) if data[c].notna().any()]
        cv = folds(data["label"].to_numpy(), data["run_id"].to_numpy())
        given = [c for c in columns if c.startswith("cfg:")] + ["n_rows"]     # what the expectations are told
        extra = residuals(data, cv, given)
        variants = [("published features", columns), ("+ healthy-expectation residuals", columns + list(extra))]
        if args.env:
            by_env = residuals(data, cv, given, env=True)
            extra = pd.concat([extra, by_env], axis=1)
            variants.append(("+ residuals given config and env", columns + list(by_env)))
        data = pd.concat([data, extra], axis=1)
        for name, cols in variants:
            row = {"view": view, "features": name, "examples": len(data), "runs": int(data["run_id"].nunique()),
                   **score(data, cols, cv, args.jobs)}
            rows.append(row)
            print(f"{view:8s} {name:32s} top-1 {row['top1_faulty']:.3f}  healthy {row['healthy_most_probable']:.3f}  "
                  + "  ".join(f"{f} {v['recall']:.2f}/{v['recall_cleanrl_regime'] or 0:.2f}"
                              for f, v in row["faults"].items()), flush=True)
    print(f"{time.perf_counter() - start:.0f} s")
    if args.record:
        out = Path(args.out)
        out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                   "command": "python benchmarks/healthy_expectation.py " + " ".join(sys.argv[1:]),
                                   "examples": _shown(args.examples),
                                   "rows": rows}, indent=2) + "\n")
        print(f"recorded in {out}")


if __name__ == "__main__":
    main()

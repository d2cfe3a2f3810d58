"""The side-by-side table a run command ends with: faulty run vs healthy twin."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table

from harness.analysis import signatures
from harness.metrics import PROGRESS
from harness.pipeline.train import RunResult

KEY_METRICS = {
    "ppo": ("return_mean", "reward_mean", "length_mean", "adv_mean", "value_mean",
            "explained_variance", "policy_loss", "entropy", "approx_kl", "clipfrac",
            "ratio_dev_max", "grad_norm", "optimizer_steps", "lr", "clip_range", "param_delta",
            "nonfinite"),
    "grpo": ("reward_mean", "reward_std", "frac_reward_zero_std", "group_reward_std_mean", "adv_mean",
             "adv_std", "length_mean", "response_clip_ratio", "policy_loss", "entropy", "approx_kl",
             "clipfrac", "ratio_dev_max", "kl_ref", "logp_mean", "logp_ref_mean", "sampler_logp_diff_mean",
             "kl_sampler", "grad_norm",
             "optimizer_steps", "lr", "clip_range", "param_delta", "nonfinite"),
    "ppo_lm": ("reward_mean", "rlhf_reward", "non_score_reward", "kl_ref_sum", "kl_coef", "adv_mean", "value_mean",
               "explained_variance", "length_mean", "response_clip_ratio", "policy_loss", "value_loss",
               "value_clipfrac", "entropy", "approx_kl", "clipfrac", "ratio_dev_max", "ratio_var", "logp_mean",
               "logp_ref_mean", "grad_norm", "optimizer_steps", "lr", "clip_range", "param_delta", "nonfinite"),
}


def fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1000 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"


def final_value(metrics: pd.DataFrame, metric: str) -> float:
    tail = metrics[metric].iloc[-5:].dropna()
    return float(tail.mean()) if len(tail) else math.nan


def medians_after(metrics: pd.DataFrame, onset: int, names: tuple[str, ...]) -> dict[str, float]:
    post = signatures.post_onset(metrics, onset)
    return {m: float(post[m].median()) if post[m].notna().any() else math.nan for m in names}


def side_by_side(runs: list[tuple[str, RunResult]], onset: int, algo: str) -> Table:
    names = KEY_METRICS[algo]
    progress = PROGRESS[algo]
    table = Table(title=f"median over updates >= {onset} (fault onset)", title_justify="left")
    table.add_column("metric")
    cols = []
    for label, res in runs:
        table.add_column(label, justify="right")
        cols.append(medians_after(res.metrics, onset, names))
    for label, value in (("status", lambda r: r.meta["status"]),
                         ("updates", lambda r: f"{r.meta['n_updates']}/{r.meta['n_updates_planned']}"),
                         (f"{progress}, last 5 updates", lambda r: fmt(final_value(r.metrics, progress)))):
        table.add_row(label, *[value(r) for _, r in runs])
    for m in names:
        table.add_row(m, *[fmt(c[m]) for c in cols])
    return table


def print_signatures(console: Console, runs: list[tuple[str, RunResult]], onset: int) -> dict[str, list[str]]:
    """Print the signatures that fired on each run; returns {label: their names}."""
    console.print(f"signatures that fired (updates >= {onset}):")
    fired: dict[str, list[str]] = {}
    for label, res in runs:
        results = signatures.evaluate(res.metrics, res.meta, onset)
        fired[label] = [name for name, r in results.items() if r.fired]
        hits = [f"{name} ({results[name].evidence})" for name in fired[label]]
        console.print(f"  [bold]{label}[/bold]:" + ("" if hits else " none"))
        for hit in hits:
            console.print(f"    - {hit}")
    return fired


def traced_metrics(algo: str, fired: dict[str, list[str]]) -> dict[str, str]:
    """{metric: which signatures fired on it}: the progress metric first, then the metric each fired
    signature reads (``fired``: {run label: signature names}, the faulty run first, then the twin)."""
    labels = list(fired)
    where: dict[str, dict[str, list[str]]] = {PROGRESS[algo]: {}}
    for label, names in fired.items():
        for name in names:
            where.setdefault(signatures.SIGNATURES[name].metric, {}).setdefault(name, []).append(label)
    out = {}
    for metric, sigs in where.items():
        parts = [name + ("" if runs == labels[:1] else " (on both runs)" if len(runs) > 1 else " (on the twin only)")
                 for name, runs in sigs.items()]
        out[metric] = ("signature fired: " + ", ".join(parts)) if parts else "progress (no signature on it fired)"
    return out

"""Healthy baselines: how often each signature fires, at its default threshold, on the healthy
runs and look-alike controls of each setup (descriptive: what a rule of thumb does with no bug)."""

from __future__ import annotations

from harness.analysis import signatures, stats
from harness.analysis.runs import RunSet
from harness.catalogue.rows import BaselineRow


def healthy_baselines(rs: RunSet) -> list[BaselineRow]:
    """Per setup (algorithm, variant, env, backend) and control or not, each signature's firing
    rate on the catalogue's healthy runs from update 0 over the whole run, with its Wilson interval."""
    healthy = rs.runs[(rs.runs["fault"] == "none") & (rs.runs["origin"] == "catalogue")]
    rows = []
    for (algo, variant, env, backend, control), group in healthy.groupby(
            ["algo", "algo_variant", "env", "backend", "is_control"]):
        fired = [signatures.fired(rs.metrics[r], rs.metas[r], 0) for r in group["run_id"]]
        for name in signatures.SIGNATURES:
            k = sum(name in f for f in fired)
            lo, hi = stats.wilson(k, len(group))
            rows.append(BaselineRow(algo=algo, algo_variant=variant, env=env, backend=backend, is_control=control,
                                    signature=name, n_runs=len(group), rate=stats.rate(k, len(group)),
                                    ci_low=lo, ci_high=hi))
    return rows

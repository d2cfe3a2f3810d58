"""The catalogue and the labelled dataset, built from a real (small) store."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from harness.analysis.catalogue import auroc, bootstrap_auroc, verdict
from harness.metrics import CANONICAL
from tests.helpers import train

PPO = ["env.total_timesteps=12288", "algo.n_steps=64"]
GRPO = ["algo=grpo", "env=toyseq", "env.total_timesteps=15360"]
CRASHING = ["env.id=harness-test/Crashing-v0", "algo.num_envs=2", "algo.n_steps=32", "env.total_timesteps=2000"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    for seed in range(3):
        common = [f"seed={seed}", f"results_dir={root}"]
        for fault in ("none", "shared_policy", "zero_reward"):
            train([f"fault={fault}", *PPO, *common])
        train(["algo=ppo_single_pass", *PPO, *common])
        train(["fault=none", *GRPO, *common])
        train(["fault=adv_std_no_floor", "fault.variant=zero_std", *GRPO, *common])   # 0/0: diverges
        for fault in ("none", "tiny_clip"):
            train([f"fault={fault}", *CRASHING, *common])
    out = subprocess.run([sys.executable, "-m", "harness.catalogue", f"results_dir={root}", "n_boot=200"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return root, out.stdout


def cell(cat: pd.DataFrame, fault: str, setup: str) -> pd.DataFrame:
    rows = cat[(cat["fault"] == fault) & cat["cell"].str.contains(setup, regex=False)]
    assert len(rows), f"no cell {fault} {setup}"
    return rows


def test_catalogue_files_and_columns(store):
    root, stdout = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    for col in ("fault", "algo", "env", "backend", "kind", "name", "expected", "rate_faulty", "rate_healthy",
                "rate_control", "verdict", "auroc", "direction", "auroc_ci_low", "auroc_ci_high",
                "n_faulty", "n_healthy", "n_control", "n_diverged", "n_crashed", "manifested"):
        assert col in cat.columns, col
    assert (root / "catalogue" / "CATALOGUE.md").exists()
    pngs = list((root / "catalogue" / "plots").glob("*.png"))
    assert any(p.name == "heatmap.png" for p in pngs) and len(pngs) >= 5
    assert all(p.stat().st_size > 10_000 for p in pngs)
    assert "wrote" in stdout and "manifested" in stdout


def test_shared_policy_row_measures_fault_healthy_and_controls(store):
    root, _ = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    rows = cell(cat, "shared_policy", "ppo/cartpole/native").set_index("name")
    sig = rows.loc["ratio_pinned"]
    assert (sig["n_faulty"], sig["n_healthy"], sig["n_control"]) == (3, 3, 3)
    assert sig["rate_faulty"] == 1 and sig["rate_healthy"] == 0 and sig["rate_control"] == 1
    assert sig["verdict"] == "confirmed" and bool(sig["manifested"])
    metric = rows.loc["ratio_dev_max"]
    assert metric["auroc"] == 1 and metric["direction"] == "lower"
    assert metric["auroc_ci_low"] <= metric["auroc"] <= metric["auroc_ci_high"]
    assert metric["faulty_median"] == 0 and metric["healthy_median"] > 0
    assert rows.loc["reward_mean", "auroc"] == 0.5      # reward is 1 per step either way


def test_reference_detectors_are_measured_per_fault(store):
    root, _ = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    det = cell(cat, "shared_policy", "ppo/cartpole/native").query("kind == 'detector'").set_index("name")
    assert set(det.index) == {"folk", "config_aware"}
    assert det.loc["config_aware", "recall"] == 1 and det.loc["config_aware", "correct_cause"] == 1
    assert det.loc["folk", "false_alarm_control"] == 1 and det.loc["config_aware", "false_alarm_control"] == 0
    md = (root / "catalogue" / "CATALOGUE.md").read_text()
    assert "| config_aware | 100% | 100% |" in md


def test_diverged_and_crashed_runs_are_counted_not_dropped(store):
    root, _ = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    adv = cell(cat, "adv_std_no_floor", "grpo/toyseq").query("kind == 'signature'").set_index("name")
    assert adv["n_diverged"].iloc[0] == 3
    assert adv.loc["nonfinite", "rate_faulty"] == 1 and adv.loc["nonfinite", "rate_healthy"] == 0
    crashed = cell(cat, "tiny_clip", "ppo/cartpole")
    assert crashed["n_crashed"].iloc[0] == 3
    md = (root / "catalogue" / "CATALOGUE.md").read_text()
    assert "3 faulty seeds (3 diverged, 0 crashed)" in md and "(0 diverged, 3 crashed)" in md


def test_markdown_has_a_section_per_fault_with_verdicts_and_mimics(store):
    root, _ = store
    md = (root / "catalogue" / "CATALOGUE.md").read_text()
    assert "## shared_policy | ppo/cartpole/native" in md
    assert "| ratio_pinned | 100% | 0% | 100% | confirmed |" in md
    assert "Healthy controls that mimic it: ratio_pinned (100%)" in md
    assert "**Provenance**: PrimeIntellect-ai/verifiers PR #320" in md
    assert "![traces](plots/traces_shared_policy" in md
    assert "## Healthy baselines" in md and "ppo_single_pass/cartpole/native | yes | 3 |" in md


def test_dataset_has_labels_runs_splits_and_datasheet(store):
    root, _ = store
    data = pd.read_parquet(root / "dataset" / "data.parquet")
    runs = pd.read_parquet(root / "dataset" / "runs.parquet")
    splits = pd.read_parquet(root / "dataset" / "splits.parquet")
    for col in ("run_id", "update", "env_step", "fault", "fault_active", "is_control", "algo", "env",
                "backend", "seed", "onset", "status", *CANONICAL):
        assert col in data.columns, col
    assert len(runs) == 3 * 8 and len(data) == runs["n_updates"].sum()
    assert set(runs["status"]) == {"ok", "diverged", "crashed"}
    assert {"configured.lr", "effective.lr", "configured.n_epochs", "effective.n_epochs"} <= set(runs.columns)
    assert data.groupby("run_id")["fault"].nunique().max() == 1
    assert set(splits["by_seed"]) == {"train"}                  # seeds 0-2
    assert set(splits.columns) >= {"run_id", "by_seed", "heldout_cartpole", "heldout_toyseq"}
    toyseq = runs.set_index("run_id")["env"] == "toyseq"
    assert (splits.set_index("run_id")["heldout_toyseq"].eq("test") == toyseq).all()
    sheet = (root / "dataset" / "DATASHEET.md").read_text()
    assert "| shared_policy | ppo/cartpole/native |" in sheet and "## Library versions" in sheet
    assert "- torch: " in sheet


def test_auroc_and_bootstrap():
    assert auroc(np.array([2.0, 3.0]), np.array([1.0, 1.0])) == 1
    assert auroc(np.array([1.0]), np.array([1.0])) == 0.5
    assert auroc(np.array([0.0, 2.0]), np.array([1.0, 1.0])) == 0.5
    lo, hi = bootstrap_auroc(np.array([1.0, 2, 3, 4]), np.array([0.0, 1.5, 2.5, 0.5]), 500,
                             np.random.default_rng(0))
    assert 0 <= lo < auroc(np.array([1.0, 2, 3, 4]), np.array([0.0, 1.5, 2.5, 0.5])) < hi <= 1
    assert verdict(1.0, 0.0) == "confirmed" and verdict(0.2, 0.0) == "refuted"
    assert verdict(1.0, 1.0).startswith("not specific")


@pytest.mark.parametrize("args, message", [
    (["trace_metrics=[reward_mean,nope]"], "unknown metric 'nope' in trace_metrics"),
    (["n_boot=1"], "n_boot=1 is out of range"),
    (["results_dir=/nonexistent/dir"], "no runs under /nonexistent/dir/runs"),
])
def test_bad_catalogue_arguments_are_one_line(args, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "harness.catalogue", *args], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {out.stderr.strip()[7:]}"] and message in out.stderr

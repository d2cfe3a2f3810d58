"""Diagnosing a user's own training log: the published model, the command's answer and contract,
and the model the catalogue command fits on a (small, real) diverse dataset."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest

from harness.analysis.model import HEALTHY, UNKNOWN, VIEWS, answer, load_models
from harness.config import ConfigError
from harness.detection.diagnosis import model_path

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "results" / "catalogue"
DATA = Path(__file__).resolve().parent / "data"


def diagnose(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.diagnose", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.fixture
def verl_log(tmp_path) -> Path:
    """verl-style: policy loss, entropy and advantage mean at 0, a constant reward."""
    n = 40
    rng = np.random.default_rng(0)
    pd.DataFrame({"training/global_step": np.arange(1, n + 1), "actor/pg_loss": 0.0, "actor/entropy": 0.0,
                  "critic/advantages/mean": 0.0, "critic/score/mean": 0.25, "actor/lr": 1e-6,
                  "response_length/mean": 180 + rng.normal(0, 5, n), "timing_s/gen": rng.random(n),
                  }).to_csv(tmp_path / "verl.csv", index=False)
    return tmp_path / "verl.csv"


def test_published_model_is_in_the_repo_with_out_of_sample_scores():
    models = load_models(model_path(CATALOGUE))
    assert {(algo, view) for algo, views in VIEWS.items() for view in views} <= set(models)
    card = json.loads((CATALOGUE / "model" / "model_card.json").read_text())
    for name, entry in card["models"].items():
        oos = entry["out_of_sample"]
        assert oos and 0 <= oos["top1_faulty"] <= 1 and 0 <= oos["ece"] <= 1, name
    assert (CATALOGUE / "model" / "diagnosis.joblib").stat().st_size < 5_000_000      # a small artefact


def test_the_answer_rule():
    probs = pd.Series({HEALTHY: 0.2, "zero_reward": 0.7, "tiny_clip": 0.1})
    assert answer(probs, 0.35, anomalous=0.9) == "zero_reward"
    flat = pd.Series({HEALTHY: 0.3, "zero_reward": 0.25, "tiny_clip": 0.25, "shared_policy": 0.2})
    assert answer(flat, 0.35, anomalous=0.8) == UNKNOWN          # anomalous, but no known fault is likely
    assert answer(flat, 0.35, anomalous=0.2) == HEALTHY
    assert answer(pd.Series({HEALTHY: 0.9, "zero_reward": 0.1}), 0.35, anomalous=0.1) == HEALTHY
    # detect, then attribute: a fault that wins the class vote by a hair on a log the anomaly head
    # calls normal (a fault with no trace in this view) is answered healthy
    faint = pd.Series({HEALTHY: 0.32, "value_bootstrap_stale": 0.36, "no_zero_grad": 0.32})
    assert answer(faint, 0.35, anomalous=0.3, anomaly_threshold=0.6) == HEALTHY
    assert answer(faint, 0.35, anomalous=0.7, anomaly_threshold=0.6) == "value_bootstrap_stale"


def test_fitted_model_answers_with_probabilities_and_evidence(diverse_model):
    out = diagnose(f"log={DATA / 'sb3' / 'progress.csv'}", f"catalogue={diverse_model / 'catalogue'}")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "dialect: sb3 (detected from its names)" in text and "train/approx_kl -> approx_kl" in text
    assert "answer: " in text and "probabilities:" in text and "model: ppo in the sb3 view" in text
    assert "out of sample (held-out runs): top-1" in text
    assert "signatures that fire in this log (default thresholds):" in text


def test_json_contract(diverse_model, verl_log):
    out = diagnose(f"log={verl_log}", f"catalogue={diverse_model / 'catalogue'}", "format=json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert {"log", "profile", "detected", "algo", "view", "answer", "probability", "anomalous", "probabilities",
            "ranking", "fired"} <= set(d)
    assert d["profile"] == "verl" and d["detected"] and d["algo"] == "grpo" and d["view"] == "verl"
    assert d["answer"] in {HEALTHY, UNKNOWN, *d["probabilities"]}
    assert sum(d["probabilities"].values()) == pytest.approx(1.0)
    ranking = d["ranking"]
    assert [r["probability"] for r in ranking] == sorted((r["probability"] for r in ranking), reverse=True)
    assert "reward_flat" in d["fired"]         # the constant score shows as a signature in the evidence


def test_model_card_and_scores_come_from_held_out_runs(diverse_model):
    card = json.loads((diverse_model / "catalogue" / "model" / "model_card.json").read_text())
    held = [p for p in card["protocols"] if p["kind"] == "held-out runs"]
    assert held and all(p["n_runs"] > 0 for p in held)
    models = load_models(model_path(diverse_model / "catalogue"))
    trained = set().union(*(m.info["run_ids"] for m in models.values()))
    runs = pd.read_parquet(diverse_model / "dataset" / "runs.parquet")
    diverse = set(runs.loc[runs["origin"] == "diverse", "run_id"])
    catalogue = runs[runs["origin"] == "catalogue"]
    calibration = set(catalogue.loc[catalogue["seed"] % 2 == 0, "run_id"])
    assert len(calibration) == 2 and calibration <= trained       # the catalogue's calibration seeds train too
    assert trained <= diverse | calibration and len(trained & diverse) >= 0.8 * len(diverse)  # all but crashed / rare
    # only diverse runs are ever scored: every protocol, refitted here, tests diverse runs alone
    from harness.analysis.model import protocols, run_protocol

    examples = pd.read_parquet(diverse_model / "catalogue" / "model" / "examples.parquet")
    examples["testable"] = examples["run_id"].isin(diverse)
    assert set(examples["run_id"]) & calibration                   # the extra runs have examples
    for p in protocols(examples, "ppo", left_out=False):
        tested = examples[examples["run_id"].isin(p.test) & examples["testable"] & (examples["view"] == "canonical")
                          & (examples["prefix"] == 1.0)]
        result = run_protocol(examples, "ppo", "canonical", p)
        assert result is None or result["n_runs"] == tested["run_id"].nunique(), p.name
        if p.kind == "held-out runs":
            assert p.test <= diverse
    md = (diverse_model / "catalogue" / "CATALOGUE.md").read_text()
    assert "## Diagnosis model (out of sample)" in md and "held-out runs (30%, stratified by fault)" in md


def test_learned_detector_is_scored_out_of_sample_only(diverse_model):
    out = subprocess.run([sys.executable, "-m", "harness.evaluate", "detector=learned", f"results_dir={diverse_model}"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    report = (diverse_model / "evaluation" / "learned" / "REPORT.md").read_text()
    # the runs the model was fitted on are left out: the catalogue-style runs of held-out (odd) seeds
    # are scored (and any diverse run whose class had too few examples to be fitted)
    assert "runs the detector was fitted on are left out" in report
    scores = pd.read_parquet(diverse_model / "evaluation" / "learned" / "runs.parquet")
    models = load_models(model_path(diverse_model / "catalogue"))
    trained = set().union(*(m.info["run_ids"] for m in models.values()))
    assert len(scores) >= 3 and not set(scores["run_id"]) & trained
    runs = pd.read_parquet(diverse_model / "dataset" / "runs.parquet")
    catalogue = runs[runs["origin"] == "catalogue"]
    held_out = set(catalogue.loc[catalogue["seed"] % 2 == 1, "run_id"])
    assert len(held_out) == 2 and held_out <= set(scores["run_id"])


@pytest.mark.parametrize("damage, message", [
    ("missing", "no diagnosis model at"),
    ("garbage", "cannot be read"),
    ("version", "rebuild it with python -m harness.catalogue"),
])
def test_a_missing_or_foreign_model_is_one_line(tmp_path, diverse_model, damage, message):
    target = tmp_path / "catalogue" / "model" / "diagnosis.joblib"
    target.parent.mkdir(parents=True)
    if damage == "garbage":
        target.write_bytes(b"\x00not a model")
    elif damage == "version":
        bundle = joblib.load(model_path(diverse_model / "catalogue"))
        joblib.dump({**bundle, "sklearn": "0.0.1"}, target)
    out = diagnose(f"log={DATA / 'sb3' / 'progress.csv'}", f"catalogue={tmp_path / 'catalogue'}")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr
    with pytest.raises(ConfigError, match=message):
        load_models(model_path(tmp_path / "catalogue"))


@pytest.mark.parametrize("content, args, message", [
    ("a,b\n1,2\n", ["profile=verl"], "the log has none of the metrics profile=verl knows"),
    (None, ["profile=verl"], "no such file"),
    ("a,b\n1,2\n", ["profile=chainer"], "unknown profile 'chainer'; valid choices: auto, canonical, cleanrl, sb3, trl, verl"),
])
def test_bad_logs_are_one_line_errors(tmp_path, content, args, message):
    path = tmp_path / "log.csv"
    if content is not None:
        path.write_text(content)
    out = diagnose(f"log={path}", f"catalogue={CATALOGUE}", *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr

"""Diagnosing a user's own training log against the published catalogue."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.detection.diagnosis import load_catalogue
from harness.logs import map_log

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "results" / "catalogue"


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


def test_published_catalogue_is_in_the_repo():
    cat = load_catalogue(CATALOGUE)
    assert {"signature", "metric", "detector"} <= set(cat["kind"])


def test_reward_fault_ranks_first_for_a_stuck_verl_run(verl_log):
    out = diagnose(f"log={verl_log}", "profile=verl", f"catalogue={CATALOGUE}")
    assert out.returncode == 0, out.stderr
    ranked = [line.split()[1] for line in out.stdout.splitlines() if line.strip()[:2].strip(".").isdigit()]
    assert ranked[0] == "zero_reward", out.stdout
    assert "not used (1): timing_s/gen" in out.stdout
    assert "actor/pg_loss -> policy_loss" in out.stdout and "reward_flat fired" in out.stdout


def test_json_format(verl_log):
    out = diagnose(f"log={verl_log}", "profile=verl", f"catalogue={CATALOGUE}", "format=json")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["answer"] == "zero_reward" and answer["profile"] == "verl" and answer["algo"] == "grpo"
    ranking = answer["ranking"]
    assert ranking[0]["fault"] == "zero_reward" and ranking[0]["score"] > 0
    assert all({"fault", "score", "evidence"} <= set(r) for r in ranking)
    assert {"signature", "fired", "weight"} <= set(ranking[0]["evidence"][0])


def test_jsonl_sb3_log_with_ppo_bug(tmp_path):
    """An SB3 log whose ratio is pinned shows... nothing SB3 logs; but approx_kl and clip fraction
    at exactly 0 with several epochs point at the shared-weights bug."""
    rows = [{"time/iterations": i, "train/approx_kl": 0.0, "train/clip_fraction": 0.0,
             "train/entropy_loss": -0.69 + 0.0001 * i, "train/policy_gradient_loss": -1e-9,
             "train/value_loss": 10.0 / (i + 1), "rollout/ep_rew_mean": 20.0 + i % 3, "train/clip_range": 0.2,
             "train/learning_rate": 1e-3, "custom/thing": 1} for i in range(1, 31)]
    path = tmp_path / "progress.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = diagnose(f"log={path}", "profile=sb3", f"catalogue={CATALOGUE}", "format=json")
    assert out.returncode == 0, out.stderr
    ranking = json.loads(out.stdout)["ranking"]
    assert ranking[0]["fault"] in ("shared_policy", "ppo_epochs_ignored")
    mapped = map_log(pd.read_json(path, lines=True), {"name": "sb3", "algo": "ppo", "step": "time/iterations",
                                                      "columns": {"train/entropy_loss": "entropy"},
                                                      "scale": {"entropy": -1.0}})
    assert mapped.metrics["entropy"].iloc[0] == pytest.approx(0.6899)     # entropy_loss is -entropy


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

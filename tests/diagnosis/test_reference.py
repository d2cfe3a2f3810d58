"""A run against a healthy reference run (harness/analysis/reference.py; rlfh-diagnose reference=PATH)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from harness.analysis.reference import (
    THRESHOLD,
    compare,
    config_differences,
    directions,
)
from harness.analysis.stats import auroc
from harness.detection.diagnosis import PACKAGED_MODEL
from tests.commands import Ran, run
from tests.paths import DATA, ROOT

PAIR = DATA / "cleanrl_pair"


def run_frame(seed: int, n: int = 60, kl_scale: float = 1.0, returns_drop: float = 0.0,
              entropy_up: float = 0.0) -> pd.DataFrame:
    """A PPO-like log: approx_kl around 1e-2 (x kl_scale), a return that climbs (minus returns_drop), an
    entropy that falls slowly (plus entropy_up)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return pd.DataFrame({"update": t, "approx_kl": kl_scale * np.exp(rng.normal(np.log(1e-2), 0.3, n)),
                         "return_mean": 20 + 2 * t + rng.normal(0, 15, n) - returns_drop,
                         "entropy": 0.69 - 0.002 * t + entropy_up + rng.normal(0, 0.01, n), "lr": 3e-4})


CELLS = {"suppressed": {"ppo/x/native": {"approx_kl": -1.0, "return_mean": -0.6, "entropy": 0.5}},
         "loud": {"ppo/x/native": {"approx_kl": 1.0, "return_mean": -1.0, "entropy": -1.0}},
         "quiet": {"ppo/x/native": {"approx_kl": -0.1}}}


def test_metrics_are_compared_by_auroc():
    """The statistic a metric is compared by (harness.analysis.stats.auroc, ties counted half)."""
    assert auroc(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert auroc(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 0.0
    assert auroc(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.5


def test_two_healthy_seeds_are_alike():
    c = compare(run_frame(1), run_frame(2), CELLS)
    assert c.metrics and not c.differing and c.alike and c.ranking == []
    assert {m.metric for m in c.metrics} == {"approx_kl", "return_mean", "entropy"}     # lr: a setting


def test_a_suppressed_update_is_seen_and_ranked():
    """approx_kl 10x smaller, the entropy stays higher: the pattern of the 'suppressed' cell."""
    c = compare(run_frame(1, kl_scale=0.1, entropy_up=0.1), run_frame(2), CELLS)
    assert [m.metric for m in c.differing] == ["approx_kl", "entropy"]
    kl = c.differing[0]
    assert kl.auroc < 0.05 and kl.sign == -1 and kl.run_median < kl.reference_median
    top = c.ranking[0]
    assert top.fault == "suppressed" and top.agree == ("approx_kl", "entropy") and top.absent == ("return_mean",)
    assert "loud" not in [m.fault for m in c.ranking]      # opposite on both: farther than no effect at all
    assert all(m.score < c.healthy_distance for m in c.ranking)


def test_a_fault_whose_strong_effects_do_not_show_is_left_out():
    """With approx_kl alone lower: 'suppressed' (approx_kl down, also entropy up and return down) is ranked
    with what did not move listed; 'quiet' (no strong effect) explains nothing and is left out."""
    c = compare(run_frame(1, kl_scale=0.1), run_frame(2), CELLS)
    assert [m.metric for m in c.differing] == ["approx_kl"]
    assert [m.fault for m in c.ranking] == ["suppressed"]
    assert c.ranking[0].absent == ("return_mean", "entropy")


def test_the_threshold_decides_what_differs():
    a, b = run_frame(1, kl_scale=0.5), run_frame(2)
    effect = abs(compare(a, b, CELLS, threshold=2.0).metrics[0].effect)
    assert compare(a, b, CELLS, threshold=effect).differing
    assert not compare(a, b, CELLS, threshold=min(1.0, effect + 1e-6)).differing or effect >= 1.0


def test_short_and_unequal_logs_say_so():
    c = compare(run_frame(1, n=20), run_frame(2, n=60), CELLS)
    assert c.span == 20 and any("first 20 of 60" in n for n in c.notes)
    c = compare(run_frame(1, n=3), run_frame(2, n=3), CELLS)
    assert c.metrics == [] and any("too few" in n for n in c.notes)


def test_configuration_differences():
    assert config_differences({"lr": 3e-4, "n_epochs": 10, "gamma": 0.99}, {"lr": 3e-3, "n_epochs": 10.0}) == {
        "lr": (3e-4, 3e-3)}
    assert config_differences({"policy": "MlpPolicy"}, {"policy": "CnnPolicy"}) == {"policy": ("MlpPolicy", "CnnPolicy")}


def test_directions_keep_each_setup_and_only_onset_zero():
    rows = []
    for setup, cell_auroc in (("ppo/acrobot/native", 1.0), ("ppo/cartpole/native", 0.0)):
        rows.append({"kind": "metric", "onset_kind": "0", "algo": "ppo", "fault": "f", "setup": setup,
                     "name": "length_mean", "auroc": cell_auroc})
    rows.append({"kind": "metric", "onset_kind": "mid", "algo": "ppo", "fault": "f", "setup": "ppo/acrobot/native",
                 "name": "entropy", "auroc": 0.0})
    rows.append({"kind": "metric", "onset_kind": "0", "algo": "ppo", "fault": "f", "setup": "ppo/acrobot/native",
                 "name": "lr", "auroc": 0.0})
    rows.append({"kind": "signature", "onset_kind": "0", "algo": "ppo", "fault": "f", "setup": "ppo/acrobot/native",
                 "name": "approx_kl_zero", "auroc": np.nan})
    d = directions(pd.DataFrame(rows))
    assert d == {"ppo": {"f": {"ppo/acrobot/native": {"length_mean": 1.0}, "ppo/cartpole/native": {"length_mean": -1.0}}}}


def test_packaged_directions_are_the_catalogues():
    """directions.json (shipped beside the model) is what the committed catalogue gives."""
    cat = ROOT / "results" / "catalogue" / "catalogue.parquet"
    if not cat.exists():
        pytest.skip("no catalogue in this checkout")
    shipped = json.loads(PACKAGED_MODEL.with_name("directions.json").read_text())
    assert shipped == json.loads(json.dumps(directions(pd.read_parquet(cat))))


def diagnose(*args: str) -> Ran:
    return run("harness.diagnose", *args, cwd=ROOT)


def test_real_cleanrl_run_against_its_healthy_reference():
    """CleanRL's ppo.py with old and new log-probs shared, against the unmodified script's run of the same
    config: approx_kl differs (exactly 0 against small positive values); the config is the same."""
    out = diagnose(f"log={PAIR / 'shared_policy'}", f"reference={PAIR / 'healthy'}", "output=json")
    assert out.returncode == 0, out.stderr
    ref = json.loads(out.stdout)["reference"]
    assert ref["threshold"] == THRESHOLD and ref["config_differences"] == {} and ref["span"] == 100
    kl = next(m for m in ref["metrics"] if m["metric"] == "approx_kl")
    assert kl["differs"] and kl["auroc"] < 0.05 and kl["run_median"] == 0.0
    text = diagnose(f"log={PAIR / 'shared_policy'}", f"reference={PAIR / 'healthy'}")
    assert text.returncode == 0, text.stderr
    assert "against the reference run" in text.stdout and "approx_kl lower" in text.stdout


def test_a_run_against_itself_is_alike():
    out = diagnose(f"log={PAIR / 'healthy'}", f"reference={PAIR / 'healthy'}", "output=json")
    assert out.returncode == 0, out.stderr
    ref = json.loads(out.stdout)["reference"]
    assert ref["metrics"] and not any(m["differs"] for m in ref["metrics"]) and ref["ranking"] == []
    assert all(m["auroc"] == 0.5 for m in ref["metrics"])
    assert json.loads(diagnose(f"log={PAIR / 'healthy'}", "output=json").stdout)["reference"] is None


def test_bad_references_fail_in_one_line(tmp_path):
    out = diagnose(f"log={PAIR / 'healthy'}", f"reference={tmp_path / 'missing'}")
    assert out.returncode != 0 and "reference=" in out.stderr and "Traceback" not in out.stderr
    grpo = DATA / "trl"
    out = diagnose(f"log={PAIR / 'healthy'}", f"reference={grpo}")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "grpo" in out.stderr.lower() or "reference=" in out.stderr

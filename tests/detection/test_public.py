"""The public monitors, run unmodified through their own API on a log of each dialect (harness.detection.public):
what each reads, whether it alarms, on which step first, and what it names. The facts asserted are the pinned
versions' (the [monitors] extra); a new version that changes them fails here first."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.detection import public
from harness.detection.public import run_tool
from tests.paths import DATA

PINNED = DATA / "trl_pinned_ratio" / "pinned" / "trainer_state.json"
HEALTHY_TRL = DATA / "trl_pinned_ratio" / "healthy" / "trainer_state.json"
TRL_PPO = DATA / "trl_ppo" / "old_logp_recomputed" / "checkpoint-100" / "trainer_state.json"
SB3 = DATA / "sb3" / "progress.csv"                  # 4 iterations of PPO on CartPole (its TensorBoard file beside it)
SB3_NAN = DATA / "sb3_nan" / "progress.csv"          # SB3 1.6.0's NaN loss at the first update
CLEANRL = next((DATA / "cleanrl_pair" / "shared_policy").iterdir())


def test_the_pinned_versions_are_installed():
    assert {p: public.installed(p) for p in public.VERSIONS} == public.VERSIONS


def test_rldoctor_reads_trl_sb3_and_cleanrl_and_misses_the_pinned_ratio():
    """On TRL's GRPO logs it alarms on truncation (healthy or not), first from its live monitor's step 75; a clip
    fraction of exactly 0 is OK to it, so the pinned ratio passes; SB3's 4 rows are too few for its checks."""
    pinned, healthy = run_tool("rldoctor", PINNED, "trl"), run_tool("rldoctor", HEALTHY_TRL, "trl")
    assert pinned.read and pinned.alarm and pinned.causes == ("length_pathology",) and pinned.first_step == 75
    assert healthy.alarm and healthy.causes == pinned.causes
    assert "clip_saturation" not in pinned.causes and any(f["detector"] == "clip_saturation" for f in pinned.raw)
    for path, dialect in ((SB3, "sb3"), (CLEANRL, "cleanrl"), (TRL_PPO, "trl_ppo")):
        v = run_tool("rldoctor", path, dialect)
        assert v.read and not v.alarm, (dialect, v.causes)


def test_runmedic_names_the_nan_and_calls_near_zero_losses_divergence():
    nan = run_tool("runmedic", SB3_NAN, "sb3")
    assert nan.read and nan.alarm and nan.causes == ("non_finite",) and nan.first_step == 0
    assert run_tool("runmedic", HEALTHY_TRL, "trl").causes == ("divergence",)
    assert not run_tool("runmedic", CLEANRL, "cleanrl").alarm


def test_rlprobe_reads_trl_grpo_through_its_callback_only():
    v = run_tool("rlprobe", PINNED, "trl")
    assert v.read and not v.alarm and v.raw == []
    for path, dialect in ((SB3, "sb3"), (CLEANRL, "cleanrl"), (TRL_PPO, "trl_ppo")):
        refused = run_tool("rlprobe", path, dialect)
        assert not refused.read and "its own recordings" in refused.reason


def test_zen_reads_sb3_tensorboard_only():
    v = run_tool("zen", SB3, "sb3")
    assert v.read and v.alarm and v.causes == ("DEAD_RUN",) and v.first_step == 8192
    assert not Path("zen_memory.db").exists()
    assert "TensorBoard event files only" in run_tool("zen", SB3_NAN, "sb3").reason
    assert "stable-baselines3's TensorBoard tags only" in run_tool("zen", CLEANRL, "cleanrl").reason


def test_a_tool_that_is_not_installed_is_a_verdict_saying_so(monkeypatch):
    monkeypatch.setattr(public, "installed", lambda package: None)
    v = run_tool("zen", SB3, "sb3")
    assert not v.read and "pip install '.[monitors]'" in v.reason and "zen-rl==0.1.0" in v.reason


@pytest.mark.parametrize("cause, fault, expected", [(("rldoctor", "gradient_pathology"), "whiten_tiny_batch", True),
                                                    (("zen", "LR_TOO_HIGH"), "excessive_lr", True),
                                                    (("zen", "DEAD_RUN"), "excessive_lr", False)])
def test_a_cause_counts_at_class_level_when_its_class_holds_the_fault(cause, fault, expected):
    from benchmarks.leaderboard import CAUSE_CLASSES, in_class

    assert in_class(fault, CAUSE_CLASSES.get(cause, ())) == expected


def test_the_figures_docs_benchmarks_quotes_are_the_recorded_leaderboard():
    import json

    from benchmarks.leaderboard import _pct
    from tests.paths import ROOT

    recorded = json.loads((ROOT / "benchmarks" / "results" / "leaderboard.json").read_text())
    rows = {r["detector"]: r for r in recorded["rows"] if r["framework"] == "all"}
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    table = text.split("<!-- leaderboard figures: from benchmarks/results/leaderboard.md -->")[1].split("\n\n")[0]
    names = {"zen-rl": "zen"}
    for line in table.strip().splitlines()[2:]:
        detector, quiet, alarmed, named, _ = [c.strip() for c in line.strip("|").split("|")]
        r = rows[names.get(detector, detector)]
        assert (quiet, alarmed, named) == (_pct(r["healthy_quiet"]), _pct(r["detected"]), _pct(r["class_level"]))

"""benchmarks/realworld: the real-framework generators write the framework's own logs and labels.json,
each kind of bug introduction takes effect, and evaluate.py reads diagnose's JSON answer. Tiny runs
(seconds), never the full generation."""

from __future__ import annotations

import functools
import json
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.realworld import evaluate, sb3_runs
from benchmarks.realworld.common import run_jobs

TINY = {"n_steps": 64, "batch_size": 32, "n_epochs": 3}   # 3 rollouts of 64 steps: 2 logged updates


@pytest.fixture(scope="module")
def sb3_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """One tiny SB3 run per kind of bug introduction, through the script's own job runner."""
    root = tmp_path_factory.mktemp("sb3")
    jobs = [j for j in sb3_runs.plan(envs=["CartPole-v1"], healthy_seeds=[0], fault_seeds=[0, 1],
                                     timesteps={"CartPole-v1": 3 * TINY["n_steps"]},
                                     variants=["healthy", "clip_tiny", "reward_zero", "one_epoch",
                                               "old_logp_recomputed"])
            if j["variant"] in ("healthy", "reward_zero") or j["seed"] == 0]
    labels, failures, _ = run_jobs(functools.partial(sb3_runs.train, overrides=TINY), jobs, root, n_jobs=1)
    assert not failures, failures[0]["error"]
    assert json.loads((root / "labels.json").read_text()) == labels
    return root, {v["how"]: {**v, "path": root / k} for k, v in labels.items()}


def progress(label: dict) -> pd.DataFrame:
    return pd.read_csv(label["path"])


def by_variant(runs: dict[str, dict], variant: str) -> list[dict]:
    return [v for v in runs.values() if v["variant"] == variant]


def test_sb3_logs_and_labels(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    root, runs = sb3_logs
    assert len(runs) == 6
    for label in runs.values():
        run_dir = label["path"].parent
        assert label["framework"] == "sb3" and label["env"] == "CartPole-v1" and label["seed"] in (0, 1)
        assert label["fault"] == evaluate.FAULTS[label["variant"]]
        assert label["fault"] not in str(run_dir.relative_to(root)) and label["variant"] not in run_dir.name
        assert {"progress.csv", "progress.json", "model.zip"} <= {p.name for p in run_dir.iterdir()}
        assert list((root / label["tensorboard"]).glob("events.out.tfevents.*"))
        df = progress(label)
        assert len(df) == 3 and df["train/approx_kl"].notna().sum() == 2       # SB3 logs the update a row late
        with zipfile.ZipFile(root / label["model"]) as zf:                     # the hyperparameters, as saved
            assert json.loads(zf.read("data"))["n_steps"] == TINY["n_steps"]


def test_sb3_constructor_hyperparameter(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    from stable_baselines3 import PPO

    (label,) = by_variant(sb3_logs[1], "clip_tiny")
    assert label["fault"] == "tiny_clip" and label["hyperparameters"]["clip_range"] == 0.002
    assert PPO.load(sb3_logs[0] / label["model"], device="cpu").clip_range(1.0) == 0.002
    assert set(progress(label)["train/clip_range"].dropna()) == {0.002}


def test_sb3_reward_wrapper_inside_and_outside_monitor(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    zero = {"inside" if "inside" in v["how"] else "outside": progress(v) for v in by_variant(sb3_logs[1], "reward_zero")}
    assert set(zero) == {"inside", "outside"}
    assert (zero["inside"]["rollout/ep_rew_mean"] == 0).all()          # Monitor saw the zeroed reward
    assert (zero["outside"]["rollout/ep_rew_mean"] > 5).all()          # Monitor saw CartPole's own reward
    # the learner got zeros in both: the value function has nothing to fit (healthy CartPole's value loss is large)
    (healthy,) = by_variant(sb3_logs[1], "healthy")
    assert progress(healthy)["train/value_loss"].dropna().min() > 1
    for df in zero.values():
        assert df["train/value_loss"].dropna().max() < 0.1


def test_sb3_subclasses(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    (one,) = by_variant(sb3_logs[1], "one_epoch")
    assert progress(one)["train/n_updates"].dropna().tolist() == [1, 2]     # one epoch per rollout ...
    with zipfile.ZipFile(sb3_logs[0] / one["model"]) as zf:
        assert json.loads(zf.read("data"))["n_epochs"] == TINY["n_epochs"]   # ... while the model says 3
    (healthy,) = by_variant(sb3_logs[1], "healthy")
    assert progress(healthy)["train/n_updates"].dropna().tolist() == [3, 6]
    (shared,) = by_variant(sb3_logs[1], "old_logp_recomputed")
    df = progress(shared).dropna(subset=["train/approx_kl"])
    assert (df["train/approx_kl"] == 0).all() and (df["train/clip_fraction"] == 0).all()   # ratio exactly 1
    assert (progress(healthy)["train/approx_kl"].dropna() > 0).all()


def test_evaluate_reads_diagnose_answer(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    (healthy,) = by_variant(sb3_logs[1], "healthy")
    out = evaluate.diagnose(healthy["path"])                 # python -m harness.diagnose, as a user runs it
    assert "error" not in out, out
    assert out["profile"] == "sb3" and out["algo"] == "ppo" and out["detected"] is True
    assert isinstance(out["answer"], str) and out["top"] and "fault" in out["top"][0]
    missing = evaluate.diagnose(healthy["path"].parent / "no-such-log.csv")
    assert "error" in missing and "no-such-log.csv" in missing["error"]


def test_parse_answer() -> None:
    answer = {"log": "x", "profile": "trl", "detected": True, "algo": "grpo", "answer": "unknown",
              "ranking": [{"fault": "unknown", "score": 0.7}, {"fault": "healthy", "score": 0.2}]}
    assert evaluate.parse_answer(json.dumps(answer, indent=2)) == answer
    assert evaluate.parse_answer("UserWarning: something\n" + json.dumps(answer))["answer"] == "unknown"
    with pytest.raises(ValueError):
        evaluate.parse_answer("Traceback (most recent call last):\n  ...")
    with pytest.raises(ValueError):
        evaluate.parse_answer(json.dumps({"log": "x", "ranking": []}))


def test_every_variant_has_a_fault_name() -> None:
    from benchmarks.realworld import trl_runs

    for variant in list(sb3_runs.VARIANTS) + list(trl_runs.VARIANTS):
        assert variant in evaluate.FAULTS
    names = [j["name"] for j in sb3_runs.plan()] + [j["name"] for j in trl_runs.plan()]
    assert len(names) == len(set(names))


def test_trl_run_writes_trainer_state_and_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trl")
    from benchmarks.realworld import trl_runs

    monkeypatch.setattr(trl_runs, "SFT_STEPS", 4)           # the warm-up's quality is not under test here
    jobs = trl_runs.plan(healthy_seeds=[], fault_seeds=[0], variants=["reward_zero", "ref_is_policy"], max_steps=2)
    labels, failures, _ = run_jobs(trl_runs.train, jobs, tmp_path, n_jobs=1)
    assert not failures, failures[0]["error"]
    assert json.loads((tmp_path / "labels.json").read_text()) == labels and len(labels) == 2
    for path, label in labels.items():
        assert path.endswith("checkpoint-2/trainer_state.json") and (tmp_path / path).exists()
        assert label["fault"] == evaluate.FAULTS[label["variant"]] and label["fault"] not in path
        assert list((tmp_path / label["tensorboard"]).glob("events.out.tfevents.*"))
        history = [e for e in json.loads((tmp_path / path).read_text())["log_history"] if "loss" in e]
        if label["variant"] == "reward_zero":
            assert all(e["reward"] == 0 for e in history)
        else:                                            # the reference is the policy: KL exactly 0
            assert label["hyperparameters"]["beta"] > 0 and all(e["kl"] == 0 for e in history)

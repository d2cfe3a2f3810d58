"""benchmarks/realworld: the real-framework generators write the framework's own logs and labels.json,
each kind of bug introduction takes effect, and evaluate.py reads diagnose's JSON answer. Tiny runs
(seconds), never the full generation."""

from __future__ import annotations

import functools
import json
import os
import re
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from benchmarks.realworld import cleanrl_runs, evaluate, sb3_runs
from benchmarks.realworld.common import MORE_FAULTS, fault_of, run_jobs

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
    names += [j["name"] for j in cleanrl_runs.plan()]
    assert len(names) == len(set(names))


def test_variants_map_to_harness_faults() -> None:
    """Every variant of every generator names a fault the harness knows (the generators themselves
    never import it; the test may)."""
    from benchmarks.realworld import trl_runs
    from faults import FAULTS as HARNESS_FAULTS

    for variant in [*sb3_runs.VARIANTS, *trl_runs.VARIANTS, *cleanrl_runs.VARIANTS]:
        assert fault_of(variant) == "healthy" or fault_of(variant) in HARNESS_FAULTS, variant
    assert set(MORE_FAULTS).isdisjoint(evaluate.FAULTS)


# ---- CleanRL ----------------------------------------------------------------------------------------
CLEANRL_DIR = Path(os.environ.get("CLEANRL_DIR", cleanrl_runs.DEFAULT_CLEANRL_DIR))
CLEANRL_PYTHON = Path(os.environ.get("CLEANRL_PYTHON", cleanrl_runs.DEFAULT_PYTHON))
needs_checkout = pytest.mark.skipif(not (CLEANRL_DIR / "cleanrl" / "ppo.py").exists(),
                                    reason=f"no CleanRL checkout at {CLEANRL_DIR} (set CLEANRL_DIR)")
needs_cleanrl_python = pytest.mark.skipif(not CLEANRL_PYTHON.exists(),
                                          reason=f"no CleanRL interpreter at {CLEANRL_PYTHON} (set CLEANRL_PYTHON)")


def test_cleanrl_plan() -> None:
    jobs = cleanrl_runs.plan()
    seeds: dict[tuple[str, str], set[int]] = {}
    for j in jobs:
        seeds.setdefault((j["script"], j["variant"]), set()).add(j["seed"])
        assert j["variant"] not in j["name"] and fault_of(j["variant"]) not in j["name"]
        assert j["args"][:2] == ["--env-id", cleanrl_runs.SCRIPTS[j["script"]]["env"]] and "--no-cuda" in j["args"]
        assert bool(j["flags"]) + bool(j["edits"]) == (j["variant"] != "healthy")       # one kind of change each
    for (script, variant), s in seeds.items():
        assert len(s) >= (5 if variant == "healthy" else 2), (script, variant)
    assert {k[0] for k in seeds} == set(cleanrl_runs.SCRIPTS) and len(seeds) == 2 * len(cleanrl_runs.VARIANTS)
    assert len({j["name"] for j in jobs}) == len(jobs)
    assert 1 not in {j["seed"] for j in jobs}                     # seed 1 is the fixtures' (tests/data)
    (lr,) = [j for j in jobs if j["variant"] == "lr_high" and j["script"] == "ppo" and j["seed"] == 2]
    assert lr["flags"] == {"--learning-rate": "0.025"} and lr["args"][-2:] == ["--learning-rate", "0.025"]
    places = {j["reward"]["place"] for j in jobs if j["variant"] == "reward_x1000"}
    assert places == {"inside", "outside"}


def test_cleanrl_edit_anchor_must_match_once() -> None:
    text = "a = 1\nb = 2\n"
    assert cleanrl_runs.apply_edits(text, [("a = 1", "a = 2")]) == "a = 2\nb = 2\n"
    with pytest.raises(ValueError, match="occurs 0 times"):
        cleanrl_runs.apply_edits(text, [("c = 3", "")])
    with pytest.raises(ValueError, match="occurs 2 times"):
        cleanrl_runs.apply_edits(text + text, [("a = 1", "a = 2")])


@needs_checkout
def test_cleanrl_edits_apply_to_the_checkout() -> None:
    """Every edit's anchor occurs exactly once in the checked-out scripts, and the defaults the bugs
    scale are the scripts' own."""
    for script, info in cleanrl_runs.SCRIPTS.items():
        text = cleanrl_runs.script_path(CLEANRL_DIR, script).read_text()
        for j in cleanrl_runs.plan(scripts=[script]):
            edited = cleanrl_runs.apply_edits(text, [tuple(e) for e in j["edits"]])
            assert (edited == text) == (not j["edits"])
        for key, value in info["defaults"].items():
            found = re.search(rf"^\s+{key}: (?:float|int) = (\S+)$", text, re.M)
            assert found and float(found.group(1)) == value, (script, key)


def tb_scalars(run_dir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@needs_checkout
@needs_cleanrl_python
def test_cleanrl_tiny_runs(tmp_path: Path) -> None:
    """cleanrl/ppo.py for 2 iterations: healthy, with the shared old/new log-probs (ratio exactly 1) and
    with the reward zeroed inside RecordEpisodeStatistics (the logged returns are 0)."""
    pytest.importorskip("tensorboard")
    jobs = cleanrl_runs.plan(scripts=["ppo"], healthy_seeds=[2], fault_seeds=[2],
                             variants=["healthy", "old_logp_recomputed", "reward_zero"],
                             budget={"ppo": ["--total-timesteps", "1024"]})
    assert [j["reward"] for j in jobs if j["variant"] == "reward_zero"] == [{"reward": "zero", "place": "inside"}]
    labels, failures, _ = run_jobs(cleanrl_runs.Runner(CLEANRL_DIR, CLEANRL_PYTHON), jobs, tmp_path, n_jobs=1)
    assert not failures, failures[0]["error"]
    assert json.loads((tmp_path / "labels.json").read_text()) == labels and len(labels) == 3
    runs = {}
    for path, label in labels.items():
        run = tmp_path / path
        assert re.fullmatch(r"run-[0-9a-f]{10}/runs/CartPole-v1__ppo__2__\d+", path), path
        assert label["framework"] == "cleanrl" and label["fault"] == fault_of(label["variant"])
        assert label["tensorboard"] == path and label["cpu_s"] > 0
        assert not list((tmp_path / label["name"]).glob("*.py"))          # the script's copy is gone
        runs[label["variant"]] = tb_scalars(run)
    for scalars in runs.values():
        assert len(scalars["losses/approx_kl"]) == 2 and len(scalars["charts/learning_rate"]) == 2
    assert all(v > 0 for v in runs["healthy"]["losses/approx_kl"])
    assert runs["old_logp_recomputed"]["losses/approx_kl"] == [0.0, 0.0]
    assert runs["old_logp_recomputed"]["losses/clipfrac"] == [0.0, 0.0]
    assert set(runs["reward_zero"]["charts/episodic_return"]) == {0.0}
    assert min(runs["healthy"]["charts/episodic_return"]) > 0


def test_trl_run_writes_trainer_state_and_labels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trl")
    from benchmarks.realworld import trl_runs

    monkeypatch.setattr(trl_runs, "SFT_STEPS", 4)           # the warm-up's quality is not under test here
    jobs = trl_runs.plan(healthy_seeds=[], fault_seeds=[0], variants=["reward_zero", "ref_is_policy"], max_steps=2,
                         setting="script")
    jobs += trl_runs.plan(defaults_healthy_seeds=[0], defaults_fault_seeds=[], variants=["healthy"], max_steps=2,
                          setting="trl_defaults")
    labels, failures, _ = run_jobs(trl_runs.train, jobs, tmp_path, n_jobs=1)
    assert not failures, failures[0]["error"]
    assert json.loads((tmp_path / "labels.json").read_text()) == labels and len(labels) == 3
    for path, label in labels.items():
        assert path.endswith("checkpoint-2/trainer_state.json") and (tmp_path / path).exists()
        assert label["fault"] == evaluate.FAULTS[label["variant"]] and label["fault"] not in path
        assert list((tmp_path / label["tensorboard"]).glob("events.out.tfevents.*"))
        history = [e for e in json.loads((tmp_path / path).read_text())["log_history"] if "loss" in e]
        hp = label["hyperparameters"]
        if label["setting"] == "trl_defaults":           # TRL's own GRPOConfig defaults, nothing moved
            assert label["variant"] == "healthy" and label["config"] == {}
            assert (hp["learning_rate"], hp["beta"], hp["loss_type"], hp["num_iterations"]) == (1e-6, 0.0, "dapo", 1)
            assert hp["warmup_steps"] == 0 and hp["lr_scheduler_type"] == "linear"
        elif label["variant"] == "reward_zero":
            assert label["setting"] == "script" and hp["learning_rate"] == trl_runs.LR
            assert all(e["reward"] == 0 for e in history)
        else:                                            # the reference is the policy: KL exactly 0
            assert hp["beta"] > 0 and all(e["kl"] == 0 for e in history)


def test_trl_plan_has_both_settings() -> None:
    from benchmarks.realworld import trl_runs

    jobs = trl_runs.plan()
    script = [j for j in jobs if j["setting"] == "script"]
    defaults = [j for j in jobs if j["setting"] == "trl_defaults"]
    assert len(script) + len(defaults) == len(jobs) and len({j["name"] for j in jobs}) == len(jobs)
    assert script == trl_runs.plan_script()
    healthy = [j for j in defaults if j["variant"] == "healthy"]
    assert len(healthy) >= 5 and all(j["config"] == {} for j in healthy)
    assert {j["variant"] for j in defaults} == set(trl_runs.VARIANTS)
    for j in defaults:          # only the bug's own values and what it needs to act move off TRL's defaults
        assert set(j["config"]) <= {"learning_rate", "epsilon", "beta", "num_iterations"}, j
    assert trl_runs.plan(setting="script") == script and trl_runs.plan(setting="trl_defaults") == defaults

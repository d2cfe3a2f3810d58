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

from benchmarks.realworld import cleanrl_runs, evaluate, running, sb3_runs
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


def test_evaluate_reads_the_baselines_as_diagnose_reads_the_log(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    (healthy,) = by_variant(sb3_logs[1], "healthy")
    base = evaluate.baselines(healthy["path"])               # read as diagnose reads it, the rules streamed
    assert "error" not in base, base
    assert (base["profile"], base["algo"], base["n_steps"]) == ("sb3", "ppo", 3)
    assert set(base) >= {"folk", "config_aware"} and isinstance(base["folk"]["alarmed"], bool)
    assert "error" in evaluate.baselines(healthy["path"].parent / "no-such-log.csv")


@pytest.mark.slow
def test_evaluate_runs_diagnose_as_a_user_does(sb3_logs: tuple[Path, dict[str, dict]]) -> None:
    """evaluate.diagnose runs ``python -m harness.diagnose`` in a process of its own (two interpreters
    importing torch and Hydra: the slow tier) and reads its JSON answer, or its one error line."""
    (healthy,) = by_variant(sb3_logs[1], "healthy")
    missing = evaluate.diagnose(healthy["path"].parent / "no-such-log.csv")
    assert "error" in missing and "no-such-log.csv" in missing["error"]
    # python -m harness.diagnose, as a user runs it (REALWORLD_CATALOGUE: another catalogue's model)
    out = evaluate.diagnose(healthy["path"], os.environ.get("REALWORLD_CATALOGUE", evaluate.DEFAULT_CATALOGUE))
    if "error" in out and "diagnosis model" in out["error"]:
        pytest.skip(f"no usable diagnosis model: {out['error']}")
    assert "error" not in out, out
    assert out["profile"] == "sb3" and out["algo"] == "ppo" and out["detected"] is True
    assert isinstance(out["answer"], str) and out["ranking"] and 0 <= out["anomalous"] <= 1
    assert isinstance(out["class"], list) and out["probabilities"]


DIAGNOSE_JSON = {"log": "x", "profile": "trl", "detected": True, "algo": "grpo", "answer": "unknown",
                 "kind": "unknown", "class": [], "anomalous": 0.7, "threshold": 0.5,
                 "probabilities": {"zero_reward": 0.4, "healthy": 0.3},
                 "ranking": [{"fault": "zero_reward", "probability": 0.4, "score": 0.4}]}


def test_parse_answer() -> None:
    answer = DIAGNOSE_JSON
    assert evaluate.parse_answer(json.dumps(answer, indent=2)) == answer
    assert evaluate.parse_answer("UserWarning: something\n" + json.dumps(answer))["answer"] == "unknown"
    with pytest.raises(ValueError):
        evaluate.parse_answer("Traceback (most recent call last):\n  ...")
    with pytest.raises(ValueError, match="lacks"):
        evaluate.parse_answer(json.dumps({"log": "x", "ranking": []}))
    with pytest.raises(ValueError, match="anomalous"):        # the previous contract (no detection score)
        evaluate.parse_answer(json.dumps({k: v for k, v in answer.items() if k != "anomalous"}))


def test_an_answer_naming_a_fault_without_support_is_a_problem() -> None:
    """The realworld report lists every answer that names a fault none of whose readable expected
    signatures fires, with nothing else behind it; a class a decisive invariant answers is not one."""
    from faults import FAULTS

    first = FAULTS["tiny_clip"].expected[0]
    silent = {**DIAGNOSE_JSON, "answer": "tiny_clip", "kind": "fault", "class": [], "basis": "model", "support": {},
              "expected_signature": {first: "did not fire: median clipfrac 0.05"}}
    assert evaluate.unsupported(silent) == "tiny_clip"
    record = {"path": "x", "framework": "sb3", "kind": "primary", "diagnosis": {**silent, "profile": "sb3", "algo": "ppo"},
              "baselines": {"profile": "sb3", "algo": "ppo"}}
    assert [p["problem"] for p in evaluate.problems_of(record)] == [
        "names tiny_clip, but none of its readable expected signatures fires and nothing in the log (a broken "
        "invariant of its class, an evidence item) shows it"]
    assert evaluate.unsupported({**silent, "support": {"tiny_clip": ["evidence clip_range_tiny"]}}) is None
    assert evaluate.unsupported({**silent, "expected_signature": {first: "fired: median clipfrac 0.001"}}) is None
    assert evaluate.unsupported({**silent, "expected_signature": {first: "not in this log"}}) is None
    assert evaluate.unsupported({**silent, "answer": "shared_policy", "kind": "class", "class": ["shared_policy"],
                                 "basis": "invariants", "expected_signature": {}}) is None
    assert evaluate.unsupported({**silent, "kind": "class", "class": ["excessive_lr", "tiny_clip"]}) == "tiny_clip"
    # a class answer names its most probable member; another member is a candidate, not the answer
    backed = {**silent, "answer": "excessive_lr", "kind": "class", "class": ["excessive_lr", "tiny_clip"],
              "support": {"excessive_lr": ["kl_explodes fires"]}}
    assert evaluate.unsupported(backed) is None


def test_an_evaluation_cut_short_resumes_from_its_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--cache: each answer is appended as it comes; a second evaluation by the same commit and
    catalogue diagnoses only the logs the cache lacks; a torn last line is answered again; another
    catalogue's answers are not reused."""
    calls: list[str] = []
    monkeypatch.setattr(running, "diagnose", lambda path, catalogue: calls.append(path.name) or {"answer": path.name})
    monkeypatch.setattr(running, "baselines", lambda path: {"profile": "sb3"})
    monkeypatch.setattr(running.subprocess, "run", lambda *a, **k: type("P", (), {"returncode": 0, "stdout": "abc123"})())
    todo = [{"path": tmp_path / f"log{i}", "kind": "progress.csv"} for i in range(3)]
    cache = tmp_path / "answers.jsonl"
    first = evaluate.run_all(todo[:2], "cat", 1, cache=cache)
    assert calls == ["log0", "log1"] and len(cache.read_text().splitlines()) == 2
    cache.write_text(cache.read_text() + '{"key": {"commit": "abc1')           # a crash mid-line
    again = evaluate.run_all(todo, "cat", 1, cache=cache)
    assert calls == ["log0", "log1", "log2"] and again[:2] == first and again[2][0] == {"answer": "log2"}
    evaluate.run_all(todo, "cat", 1, cache=cache)                              # the answer after the torn line is kept
    assert calls == ["log0", "log1", "log2"]
    evaluate.run_all(todo[:1], "other-catalogue", 1, cache=cache)
    assert calls[-1] == "log0"


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


# ---- evaluate.py's summaries, on synthetic per-log records (no diagnose runs) ------------------------------
def log_record(fault: str, answer: str, anomalous: float, framework: str = "sb3", setting: str | None = None,
               log: str = "primary", members: tuple[str, ...] = (), probabilities: dict[str, float] | None = None,
               folk: str | None = None, config_aware: str | None = None, ptt: str | None = None,
               error: str | None = None) -> dict:
    """A record as evaluate.record() stores it; ``folk`` / ``config_aware`` / ``ptt``: None (no alarm), ""
    (an alarm naming no fault) or the fault the strongest alarm names."""
    diagnosis = {"error": error} if error else {
        "answer": answer, "kind": "class" if len(members) > 1 else ("fault" if members else answer),
        "class": list(members), "anomalous": anomalous, "threshold": 0.5, "cannot_show": ["obs_norm_frozen"],
        "probabilities": probabilities or {answer: 1.0}, "ranking": list(probabilities or {answer: 1.0}),
        "profile": evaluate.EXPECTED[framework]["profile"], "algo": evaluate.EXPECTED[framework]["algo"]}
    base = {"profile": evaluate.EXPECTED[framework]["profile"], "algo": evaluate.EXPECTED[framework]["algo"],
            **{name: {"alarmed": v is not None, "first": None if v is None else 0, "fault": v or None, "strongest": 0.5}
               for name, v in (("folk", folk), ("config_aware", config_aware), ("ptt", ptt))}}
    return {"path": f"{framework}/{fault}-{answer}-{anomalous}", "framework": framework, "setting": setting,
            "group": evaluate.group_of(framework, setting), "log": log, "kind": evaluate.PRIMARY_KIND[framework],
            "fault": fault, "name": f"run-{fault}-{anomalous}", "can_show": evaluate.can_show(framework, fault),
            "known": True, "answer": "error" if error else answer, "diagnosis": diagnosis, "baselines": base}


SB3_RECORDS = [
    log_record("healthy", "healthy", 0.1, folk="tiny_clip"),
    log_record("healthy", "healthy", 0.3),
    log_record("tiny_clip", "tiny_clip", 0.9, members=("tiny_clip",), probabilities={"tiny_clip": 0.9, "healthy": 0.1},
               folk="tiny_clip", config_aware="tiny_clip"),
    log_record("excessive_lr", "lr_too_low", 0.8, members=("lr_too_low", "excessive_lr"),
               probabilities={"lr_too_low": 0.5, "excessive_lr": 0.4, "healthy": 0.1}, config_aware=""),
    log_record("obs_norm_frozen", "healthy", 0.2),        # SB3's log cannot reveal it (LOG_LIMITS)
]


def rows_of(summary: dict, framework: str, log: str = "primary") -> dict[str, dict]:
    return {r["detector"]: r for r in summary["scores"] if r["framework"] == framework and r["log"] == log}


def test_can_show_is_decided_by_log_limits() -> None:
    assert not evaluate.can_show("sb3", "obs_norm_frozen") and not evaluate.can_show("sb3", "truncation_as_termination")
    assert evaluate.can_show("sb3", "zero_reward")                       # "half": kept
    # a TRL setting's own entry: at TRL's default lr 1e-6 a healthy 2-iteration run's clip ratios are 0 as well
    assert not evaluate.can_show("trl", "shared_policy", "trl (defaults)")
    assert evaluate.can_show("trl", "shared_policy", "trl (script)") and evaluate.can_show("trl", "shared_policy")
    assert evaluate.can_show("cleanrl", "grad_clip_tiny") and evaluate.limit_of("cleanrl", "grad_clip_tiny")
    assert evaluate.can_show("healthy", "healthy") and evaluate.can_show("trl", "excessive_lr")
    assert evaluate.limit_of("trl-harness", "shared_policy") == evaluate.limit_of("trl", "shared_policy")
    for (fw, fault), text in evaluate.LOG_LIMITS.items():                 # every entry says which kind it is
        assert fw in evaluate.EXPECTED or fw in evaluate.SETTINGS.values(), (fw, fault)
        assert text.split(":")[0] in ("cannot reveal", "partly", "half"), (fw, fault)
    assert {fault for fw, fault in evaluate.LOG_LIMITS if fw == "cleanrl"} >= {
        "grad_clip_tiny", "zero_reward", "reward_sign_flip", "reward_scale_wrong", "no_zero_grad"}


def test_scores_of_the_diagnosis_and_baselines() -> None:
    from harness.analysis.scores import BASELINES

    rows = rows_of(evaluate.summarise(SB3_RECORDS), "sb3")
    assert list(rows) == list(evaluate.DETECTORS) and evaluate.DETECTORS == ("diagnosis", *BASELINES)
    d = rows["diagnosis"]
    assert (d["n_healthy"], d["n_faulty"], d["errors"]) == (2, 3, 0)
    assert d["healthy_called_healthy"] == 1.0 and d["tpr"] == pytest.approx(2 / 3, abs=1e-4)
    assert d["auroc"] == pytest.approx(5 / 6, abs=1e-4)      # faulty .9 .8 .2 against healthy .1 .3
    assert d["tpr_at_10_fpr"] == pytest.approx(2 / 3, abs=1e-4)
    # can show: tiny_clip (right) and excessive_lr (its class, second most probable); obs_norm_frozen left out
    assert d["can_show"] == {"n": 2, "top1": 0.5, "class_level": 1.0, "top3": 1.0, "right_when_detected": 0.5}
    assert d["all"]["n"] == 3 and d["all"]["top1"] == pytest.approx(1 / 3, abs=1e-4)
    assert d["all"]["class_level"] == pytest.approx(2 / 3, abs=1e-4)
    assert rows["always_healthy"]["healthy_called_healthy"] == 1.0 and rows["always_healthy"]["tpr"] == 0.0
    assert rows["always_healthy"]["can_show"]["top1"] == 0.0 and rows["always_healthy"]["auroc"] == 0.5
    assert rows["flag_everything"]["healthy_called_healthy"] == 0.0 and rows["flag_everything"]["tpr"] == 1.0
    assert rows["flag_everything"]["can_show"]["top1"] == 0.0
    folk = rows["folk"]                                       # one false alarm; alarms on tiny_clip, naming it
    assert folk["healthy_called_healthy"] == 0.5 and folk["tpr"] == pytest.approx(1 / 3, abs=1e-4)
    assert folk["can_show"]["top1"] == 0.5 and folk["can_show"]["right_when_detected"] == 1.0
    ca = rows["config_aware"]                                 # an alarm naming no fault answers "unknown"
    assert ca["healthy_called_healthy"] == 1.0 and ca["tpr"] == pytest.approx(2 / 3, abs=1e-4)
    assert ca["can_show"]["top1"] == 0.5 and ca["can_show"]["class_level"] == 0.5


def test_per_fault_counts_and_confusion() -> None:
    summary = evaluate.summarise(SB3_RECORDS)
    cells = {r["fault"]: r for r in summary["per_fault"] if r["framework"] == "sb3"}
    assert list(cells)[0] == "healthy"
    assert cells["healthy"]["n"] == 2 and cells["healthy"]["top1"] == 2 and cells["healthy"]["folk_top1"] == 1
    assert cells["excessive_lr"]["top1"] == 0 and cells["excessive_lr"]["class_level"] == 1
    assert cells["excessive_lr"]["config_aware_top1"] == 0 and cells["tiny_clip"]["folk_top1"] == 1
    assert not cells["obs_norm_frozen"]["can_show"] and cells["obs_norm_frozen"]["limit"].startswith("cannot reveal")
    assert cells["obs_norm_frozen"]["said_cannot_show"] == 1 and cells["obs_norm_frozen"]["answers"] == {"healthy": 1}
    assert summary["confusion"]["sb3"]["excessive_lr"] == {"lr_too_low": 1}


def test_trl_settings_errors_and_targets() -> None:
    trl = [log_record("healthy", "healthy", 0.1, "trl", "script"),
           log_record("zero_reward", "zero_reward", 0.9, "trl", "script", members=("zero_reward",)),
           log_record("healthy", "unknown", 0.8, "trl", "trl_defaults"),
           log_record("zero_reward", "", 0.0, "trl", "trl_defaults", error="no diagnosis model"),
           log_record("healthy", "healthy", 0.2, "trl", "script", log="tensorboard")]
    summary = evaluate.summarise(SB3_RECORDS + trl)
    groups = [(r["framework"], r["log"]) for r in summary["scores"] if r["detector"] == "diagnosis"]
    assert groups == [("sb3", "primary"), ("trl", "primary"), ("trl", "tensorboard"), ("trl (script)", "primary"),
                      ("trl (script)", "tensorboard"), ("trl (defaults)", "primary"), ("all", "primary"),
                      ("all", "tensorboard")]
    both, script, defaults = (rows_of(summary, g)["diagnosis"] for g in ("trl", "trl (script)", "trl (defaults)"))
    assert (both["n_healthy"], both["n_faulty"], both["errors"]) == (2, 1, 1)
    assert both["healthy_called_healthy"] == 0.5 and script["healthy_called_healthy"] == 1.0
    assert (defaults["n_faulty"], defaults["errors"], defaults["healthy_called_healthy"]) == (0, 1, 0.0)
    assert rows_of(summary, "all")["diagnosis"]["n_healthy"] == 4
    assert [p["problem"] for p in summary["problems"]] == ["diagnose failed: no diagnosis model"]
    targets = {(t["framework"], t["key"]): t for t in summary["targets"]}
    assert targets[("sb3", "healthy_called_healthy")]["met"] is True
    assert targets[("sb3", "top1")] == {"framework": "sb3", "measure": "top-1 (faults the log can show)",
                                      "key": "top1", "target": 0.7, "value": 0.5, "n": 2, "met": False,
                                      "posthoc": [], "value_all": None, "n_all": None}
    # a target moved by a LOG_LIMITS entry decided after the answers were seen says so, with its all-faults figure
    assert targets[("trl", "top1")]["posthoc"] == targets[("trl (defaults)", "class_level")]["posthoc"] == [
        "trl (defaults) shared_policy"]
    assert not targets[("trl (script)", "top1")]["posthoc"] and not targets[("trl", "healthy_called_healthy")]["posthoc"]
    assert "| met (*) |" in evaluate.render(summary, {"date": "now", "commit": "c", "catalogue": "c", "logs": 1,
                                                     "runs": 1, "wall_s": 1.0}) or targets[("trl", "top1")]["met"] is None
    assert targets[("sb3", "class_level")]["met"] is True
    assert targets[("trl", "healthy_called_healthy")]["met"] is False and targets[("trl", "top1")]["value"] == 1.0
    assert targets[("cleanrl", "top1")]["met"] is None and targets[("cleanrl", "top1")]["n"] == 0
    assert {t["framework"] for t in summary["targets"]} == {"sb3", "cleanrl", "trl", "trl (script)", "trl (defaults)"}
    assert "**not met**" in evaluate.render(summary, {"date": "d", "commit": "c", "catalogue": "x", "logs": 12,
                                                      "runs": 12, "wall_s": 1.0})


def test_what_changed_and_from_json(tmp_path: Path) -> None:
    previous = {"revision": "main", "revision_commit": "abc1234", "file": evaluate.PUBLISHED, "date": "then",
                "harness_commit": "d7189f3", "logs": 275, "runs": 211,
                "overall": {"sb3/primary": {"healthy_n": 20, "healthy_called_healthy": 0.95, "faulty_all_n": 60,
                                            "top1_all": 0.417}}}
    summary = evaluate.summarise(SB3_RECORDS, previous)
    (sb3,) = [c for c in summary["changes"] if c["scope"] == "sb3/primary"]
    assert sb3["healthy_called_healthy"] == {"before": 0.95, "before_n": 20, "now": 1.0, "now_n": 2, "change": 0.05}
    assert sb3["top1_all"]["before"] == 0.417 and sb3["top1_all"]["change"] == pytest.approx(1 / 3 - 0.417, abs=1e-4)
    assert sb3["top1_can_show_now"] == 0.5
    assert {c["scope"] for c in summary["changes"]} == {"sb3/primary", "all/primary"}
    meta = {"date": "now", "commit": "c", "catalogue": "results/catalogue", "logs": 5, "runs": 5, "wall_s": 1.0,
            "previous": previous}
    out = tmp_path / "realworld"
    text = evaluate.write(out, summary, meta, SB3_RECORDS)
    assert "## What changed" in text and "abc1234" in text and "+5 pts" in text
    assert "None of these logs was used for fitting or tuning" in text
    stored = json.loads(out.with_suffix(".json").read_text())
    stored["scores"] = stored["changes"] = None                     # re-summarised from the logs and meta alone
    out.with_suffix(".json").write_text(json.dumps(stored))
    evaluate.main(["--from-json", "--out", str(out)])
    again = json.loads(out.with_suffix(".json").read_text())
    assert again["scores"] == summary["scores"] and again["changes"] == summary["changes"]
    assert again["meta"]["summarised"]["commit"] and again["meta"]["date"] == "now"     # when it was diagnosed stays
    said = f" Summarised again from those stored answers on {again['meta']['summarised']['date']}"
    assert said in out.with_suffix(".md").read_text()
    assert re.sub(r" Summarised again from those stored answers on \S+ \(harness commit `\w+`, `--from-json`: no log diagnosed "
                  r"again\)\.", "", out.with_suffix(".md").read_text()) == text


def test_tasks_read_every_framework(tmp_path: Path) -> None:
    """CleanRL's own variants get their harness names (no KeyError), its run directory is its one log,
    TRL's settings are kept, directories of no framework (fixtures) are skipped, --limit caps each framework."""
    def labels(framework: str, entries: dict[str, dict]) -> None:
        (tmp_path / framework).mkdir()
        (tmp_path / framework / "labels.json").write_text(json.dumps(entries))

    run = "run-1/runs/CartPole-v1__ppo__2__1"
    labels("cleanrl", {run: {"framework": "cleanrl", "env": "CartPole-v1", "variant": "zero_grad_missing",
                             "seed": 2, "name": "run-1", "tensorboard": run}})
    labels("sb3", {f"run-{i}/progress.csv": {"framework": "sb3", "env": env, "variant": "lr_high", "seed": 0,
                                             "name": f"run-{i}", "tensorboard": f"run-{i}/tb/PPO_1"}
                   for i, env in enumerate(["CartPole-v1", "Acrobot-v1"])})
    labels("trl", {"run-t/checkpoint-150/trainer_state.json": {
        "framework": "trl", "env": "sort5", "variant": "beta_neg", "seed": 0, "name": "run-t", "setting": "trl_defaults",
        "tensorboard": "run-t/runs/x"}})
    labels("fixtures-cleanrl", {"x": {"framework": "cleanrl", "variant": "healthy", "seed": 1, "name": "f"}})
    todo = evaluate.tasks(tmp_path)
    got = [(t["label"]["framework"], t["log"], t["kind"], t["label"]["fault"]) for t in todo]
    assert got == [("sb3", "primary", "progress.csv", "excessive_lr"), ("sb3", "tensorboard", "tensorboard", "excessive_lr"),
                   ("sb3", "primary", "progress.csv", "excessive_lr"),
                   ("cleanrl", "primary", "tensorboard", "no_zero_grad"),
                   ("trl", "primary", "trainer_state.json", "kl_penalty_sign_flip"),
                   ("trl", "tensorboard", "tensorboard", "kl_penalty_sign_flip")]
    assert todo[3]["path"] == tmp_path / "cleanrl" / run
    assert evaluate.skipped_dirs(tmp_path) == ["fixtures-cleanrl"]
    assert len(evaluate.tasks(tmp_path, limit=1)) == 3 and len(evaluate.tasks(tmp_path, "none")) == 4
    known = {"no_zero_grad": ["ppo"], "kl_penalty_sign_flip": ["grpo"]}
    rec = evaluate.record(todo[4], {"answer": "healthy"}, {}, known)
    assert (rec["group"], rec["setting"], rec["known"], rec["can_show"]) == ("trl (defaults)", "trl_defaults", True, True)


def test_evaluate_imports_no_harness_at_module_level() -> None:
    """common.py, which the generators import, takes FAULTS from labels.py: none of the evaluation's modules may pull
    in the harness at import."""
    import subprocess
    import sys

    code = ("import sys, benchmarks.realworld.common, benchmarks.realworld.evaluate; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('harness', 'faults')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=evaluate.REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_probe_plans_healthy_runs_off_the_test_sets_grid() -> None:
    from benchmarks.realworld import probe_runs

    jobs = probe_runs.sb3_jobs([1, 2]) + probe_runs.cleanrl_jobs([1]) + probe_runs.trl_jobs([1])
    assert len({j["name"] for j in jobs}) == len(jobs) and all(j["variant"] == "healthy" for j in jobs)
    assert all(re.fullmatch(r"run-[0-9a-f]{10}", j["name"]) for j in jobs)     # opaque, as the test set's
    lin = probe_runs.schedule("lin_0.2")
    assert lin(1.0) == pytest.approx(0.2) and lin(0.0) == 0.0 and probe_runs.schedule(3e-4) == 3e-4


def test_probe_sb3_run_anneals_as_rl_zoo3_does(tmp_path: Path) -> None:
    """rl-zoo3's CartPole setting, shrunk: SB3 itself anneals the clip range and learning rate it logs."""
    from benchmarks.realworld import probe_runs

    job = next(j for j in probe_runs.sb3_jobs([1]) if j["env"] == "CartPole-v1")
    job = {**job, "timesteps": 4 * 8 * 32, "spec": {**job["spec"], "ppo": {**job["spec"]["ppo"], "n_epochs": 2}}}
    labels, failures, _ = run_jobs(probe_runs.SB3Probe(), [job], tmp_path, n_jobs=1)
    assert not failures, failures[0]["error"]
    (path, label), = labels.items()
    assert label["hyperparameters"]["clip_range"] == "lin_0.2" and label["n_envs"] == 8
    clip = pd.read_csv(tmp_path / path)["train/clip_range"].dropna().tolist()
    assert len(clip) == 3 and clip == sorted(clip, reverse=True) and clip[-1] < 0.2


def test_a_set_other_than_the_test_set_says_its_own_account(tmp_path: Path) -> None:
    """evaluate.py prints the test set's account of what was tuned unless the set's generator wrote its own."""
    from benchmarks.realworld import probe_runs

    assert evaluate.not_tuned(tmp_path) == evaluate.NOT_TUNED
    (tmp_path / "about.json").write_text("not json")
    assert evaluate.not_tuned(tmp_path) == evaluate.NOT_TUNED
    (tmp_path / "about.json").write_text(json.dumps({"not_tuned": probe_runs.ABOUT}))
    assert evaluate.not_tuned(tmp_path) == probe_runs.ABOUT and "anneal_clip" in probe_runs.ABOUT

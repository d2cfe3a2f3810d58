"""Diagnosing a user's own training log: the published model, the command's answer and contract,
and the model the catalogue command fits on a (small, real) diverse dataset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest

from harness.analysis.examples import VIEWS
from harness.analysis.features import MIN_ROWS
from harness.analysis.labels import UNLABELLED
from harness.analysis.model import HEALTHY, THRESHOLD_RANGE, TOO_SHORT, UNKNOWN, load_models
from harness.analysis.protocols import protocols, run_protocol
from harness.config import ConfigError
from harness.detection.diagnosis import model_path
from harness.logs import load_log
from tests.commands import Ran, run
from tests.paths import DATA, ROOT

CATALOGUE = ROOT / "results" / "catalogue"


def diagnose(*args: str | Path, cwd=ROOT) -> Ran:
    """``python -m harness.diagnose ARGS`` run from the repository (its results/ model), in this process."""
    return run("harness.diagnose", *args, cwd=cwd)


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
    # every view of PPO and GRPO; PPO-LM has no dataset runs yet, so its logs are answered from the evidence alone
    assert {(algo, view) for algo, views in VIEWS.items() for view in views if algo != "ppo_lm"} <= set(models)
    card = json.loads((CATALOGUE / "model" / "model_card.json").read_text())
    for name, entry in card["models"].items():
        oos = entry["out_of_sample"]
        assert oos and 0 <= oos["top1"] <= oos["class_level"] <= 1 and 0 <= oos["healthy_called_healthy"] <= 1, name
        assert THRESHOLD_RANGE[0] <= entry["threshold"] <= THRESHOLD_RANGE[1], name
    assert (CATALOGUE / "model" / "diagnosis.joblib").stat().st_size < 5_000_000      # a small artefact


def test_fitted_model_answers_with_probabilities_and_evidence(diverse_model):
    out = diagnose(f"log={DATA / 'sb3' / 'progress.csv'}", f"catalogue={diverse_model / 'catalogue'}")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "dialect: sb3 (detected from its names)" in text and "train/approx_kl -> approx_kl" in text
    assert "answer: " in text and "probabilities (after the evidence" in text and "model: ppo in the sb3 view" in text
    assert "threshold" in text and "out of sample (held-out runs): healthy called healthy" in text
    assert "signatures that fire in this log (default thresholds):" in text


def test_json_contract(diverse_model, verl_log):
    out = diagnose(f"log={verl_log}", f"catalogue={diverse_model / 'catalogue'}", "output=json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert {"log", "profile", "detected", "algo", "view", "answer", "kind", "probability", "anomalous", "threshold",
            "class", "settings_to_check", "cannot_show", "evidence", "probabilities", "ranking", "fired", "notes"} <= set(d)
    assert d["profile"] == "verl" and d["detected"] and d["algo"] == "grpo" and d["view"] == "verl"
    assert d["answer"] in {HEALTHY, UNKNOWN, TOO_SHORT, *d["probabilities"]}
    assert_consistent(d)
    assert sum(d["probabilities"].values()) == pytest.approx(1.0)
    # a healthy answer is "healthy, or a fault this log cannot show", with that probability
    if d["answer"] == HEALTHY:
        looks = d["probabilities"][HEALTHY] + sum(d["probabilities"].get(f, 0.0) for f in d["cannot_show"])
        assert d["probability"] == pytest.approx(looks) == pytest.approx(1 - d["anomalous"])
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
    examples = pd.read_parquet(diverse_model / "catalogue" / "model" / "examples.parquet")
    examples["testable"] = examples["run_id"].isin(diverse)
    assert set(examples["run_id"]) & calibration                   # the extra runs have examples
    for p in protocols(examples, "ppo", left_out=False):
        tested = examples[examples["run_id"].isin(p.test) & examples["testable"] & (examples["view"] == "canonical")
                          & (examples["prefix"] == 1.0) & ~examples["label"].isin(UNLABELLED)   # not scored: see labels.py
                          & (examples["n_rows"] >= MIN_ROWS)]                    # too short to judge: not scored
        result = run_protocol(examples, "ppo", "canonical", p)
        assert result is None or result[0]["n_runs"] == tested["run_id"].nunique(), p.name
        if p.kind == "held-out runs":
            assert p.test <= diverse
    md = (diverse_model / "catalogue" / "CATALOGUE.md").read_text()
    assert "## Diagnosis model (out of sample)" in md and "held-out runs (30%, stratified by fault)" in md
    # the held-out runs' answers, run by run, beside the model: the card's held-out scores are theirs
    answers = pd.read_parquet(diverse_model / "catalogue" / "model" / "heldout.parquet")
    assert set(answers["run_id"]) <= diverse and len(answers)
    for p in (p for p in held if p["detector"] == "diagnosis"):
        mine = answers[(answers["algo"] == p["algo"]) & (answers["view"] == p["view"])]
        assert len(mine) == mine["run_id"].nunique() == p["n_runs"]
        faulty = mine[(mine["label"] != "healthy") & mine["known"]]
        if len(faulty):
            assert (faulty["answer"] == faulty["label"]).mean() == pytest.approx(p["top1"])
        healthy = mine[mine["label"] == "healthy"]
        if len(healthy):
            assert (healthy["answer"] == "healthy").mean() == pytest.approx(p["healthy_called_healthy"])


@pytest.mark.slow
def test_the_model_refits_on_its_examples_alone(diverse_model, tmp_path):
    """refit= scores and fits the model on a build's examples.parquet (and the model card beside it),
    reading no run: the same held-out protocols, the catalogue's calibration runs still never scored.
    Slow tier: every algorithm's held-out fits (about 20 CPU-s), with joblib's worker processes as built."""
    source = diverse_model / "catalogue" / "model"
    copy = tmp_path / "in"
    copy.mkdir()
    for name in ("examples.parquet", "model_card.json"):
        shutil.copy(source / name, copy / name)
    out = tmp_path / "out"
    done = run("harness.catalogue", f"results_dir={out}", f"refit={copy / 'examples.parquet'}", "left_out=false")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no run is read" in done.stdout and not (out / "runs").exists()
    built = json.loads((source / "model_card.json").read_text())
    refitted = json.loads((out / "catalogue" / "model" / "model_card.json").read_text())
    assert refitted["settings"] == built["settings"] and refitted["examples"] == built["examples"]
    assert refitted["extra_training_runs"] == built["extra_training_runs"] == 2
    from harness.analysis.model import LOGISTIC_C
    assert refitted["model_kind"] == built["model_kind"] == f"logistic:{LOGISTIC_C}"   # the strength it was fitted with
    held = [p for p in refitted["protocols"] if p["kind"] == "held-out runs"]
    assert held and {(p["algo"], p["view"]) for p in held} == {(p["algo"], p["view"]) for p in built["protocols"]
                                                               if p["kind"] == "held-out runs"}
    assert load_models(model_path(out / "catalogue"))        # a model diagnose reads
    from benchmarks.heldout_answers import paired, verdict
    from tests.test_fixtures import same_numerics
    if same_numerics(diverse_model):      # scores of a fit on a few runs hold only where the float kernels are the same
        same = paired(pd.read_parquet(source / "heldout.parquet"), pd.read_parquet(out / "catalogue" / "model" / "heldout.parquet"))
        assert (same["b_minus_a"] == 0).all() and verdict(same)[0]    # the same examples refit to the same answers


@pytest.mark.slow
def test_a_refit_of_one_algorithm_keeps_the_other_algorithms_models(diverse_model, tmp_path, joblib_in_process):
    """refit= with refit_algos=[grpo] refits GRPO's models on the given examples and keeps PPO's models,
    card entries, scores, held-out answers and examples exactly as they were; the card says per
    algorithm what its models were fitted on. Slow tier: GRPO's held-out fits take about 8 CPU-s (bad uses:
    test_bad_refits_are_one_line_errors)."""
    source = diverse_model / "catalogue" / "model"
    out = tmp_path / "out"
    shutil.copytree(source, out / "catalogue" / "model")
    kept_examples = out / "catalogue" / "model" / "examples.parquet"   # as built before builds kept `testable`:
    pd.read_parquet(kept_examples).drop(columns="testable").to_parquet(kept_examples)   # every run is scored
    other = tmp_path / "other"        # the examples to refit GRPO on: the same runs' GRPO examples, fewer rows
    other.mkdir()
    examples = pd.read_parquet(source / "examples.parquet")
    grpo_runs = sorted(examples.loc[examples["algo"] == "grpo", "run_id"].unique())
    examples[examples["run_id"] != grpo_runs[0]].to_parquet(other / "examples.parquet")
    shutil.copy(source / "model_card.json", other / "model_card.json")
    done = run("harness.catalogue", f"results_dir={out}", f"refit={other / 'examples.parquet'}", "refit_algos=[grpo]",
               "left_out=false")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    before, after = load_models(model_path(diverse_model / "catalogue")), load_models(model_path(out / "catalogue"))
    assert set(before) == set(after)
    for key in before:
        if key[0] == "ppo":          # the same fitted model (logistic: its coefficients), not a refit
            assert before[key].info["run_ids"] == after[key].info["run_ids"], key
            assert np.array_equal(before[key].estimator.coef_, after[key].estimator.coef_), key
        else:
            assert grpo_runs[0] not in after[key].info["run_ids"] and grpo_runs[0] in before[key].info["run_ids"], key
    built = json.loads((source / "model_card.json").read_text())
    card = json.loads((out / "catalogue" / "model" / "model_card.json").read_text())
    assert {k: v for k, v in card["models"].items() if k.startswith("ppo/")} == \
        {k: v for k, v in built["models"].items() if k.startswith("ppo/")}
    assert set(card["algos"]) == {"ppo", "grpo"} and card["algos"]["grpo"]["fitted"] != card["algos"]["ppo"]["fitted"]
    merged = pd.read_parquet(out / "catalogue" / "model" / "examples.parquet")
    assert card["examples"] == len(merged) == len(examples) - int((examples["run_id"] == grpo_runs[0]).sum())
    ppo = merged[merged["algo"] == "ppo"].reset_index(drop=True)
    assert ppo["testable"].notna().all() and ppo["testable"].astype(bool).all()   # every run scored, as before
    pd.testing.assert_frame_equal(ppo.drop(columns="testable"), examples[examples["algo"] == "ppo"].reset_index(
        drop=True).drop(columns="testable"), check_dtype=False)
    from harness.analysis.protocols import protocols
    for algo in ("ppo", "grpo"):
        assert next(p for p in protocols(merged, algo, left_out=False) if p.kind == "held-out runs").test, algo
    scores = pd.read_parquet(out / "catalogue" / "model" / "scores.parquet")
    old = pd.read_parquet(source / "scores.parquet")
    assert set(scores["algo"]) == {"ppo", "grpo"}
    pd.testing.assert_frame_equal(scores[scores["algo"] == "ppo"].reset_index(drop=True),
                                  old[old["algo"] == "ppo"].reset_index(drop=True), check_dtype=False)
    held = pd.read_parquet(out / "catalogue" / "model" / "heldout.parquet")
    assert set(held["algo"]) == {"ppo", "grpo"}


def test_bad_refits_are_one_line_errors(diverse_model, tmp_path):
    """refit= of a missing table, refit_algos= without refit=, of an unknown algorithm, or with no model
    (and card) to keep the others from: one error line, exit 2, nothing fitted."""
    examples = diverse_model / "catalogue" / "model" / "examples.parquet"     # a table refit= reads
    for bad, says in (([f"refit={tmp_path / 'none.parquet'}"], "no such file"),
                      (["refit_algos=[grpo]"], "without refit="),
                      ([f"refit={examples}", "refit_algos=[dqn]"], "not an algorithm"),
                      ([f"refit={examples}", "refit_algos=[grpo]", f"results_dir={tmp_path / 'none'}"],
                       "no model with its card")):
        wrong = run("harness.catalogue", *bad, cwd=tmp_path)
        assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and says in wrong.stderr, wrong.stderr
    assert not (tmp_path / "none").exists() and not (tmp_path / "results").exists()


def test_learned_detector_is_scored_out_of_sample_only(tiny_copy):
    diverse_model = tiny_copy("diverse")          # evaluate writes evaluation/ into the results_dir
    out = run("harness.evaluate", "detector=learned", f"results_dir={diverse_model}")
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
    errors = [line for line in out.stderr.strip().splitlines() if not line.startswith("note: catalogue= is now")]
    assert out.returncode == 2 and len(errors) == 1, out.stderr       # the error, beside the old name's note
    assert message in out.stderr
    with pytest.raises(ConfigError, match=message):
        load_models(model_path(tmp_path / "catalogue"))


@pytest.mark.parametrize("content, args, message", [
    ("a,b\n1,2\n", ["profile=verl"], "the log has none of the metrics profile=verl knows"),
    (None, ["profile=verl"], "no such file"),
    ("a,b\n1,2\n", ["profile=chainer"], "unknown profile 'chainer'; valid choices: auto, canonical, cleanrl, sb3, trl, trl_ppo, verl"),
])
def test_bad_logs_are_one_line_errors(tmp_path, content, args, message):
    path = tmp_path / "log.csv"
    if content is not None:
        path.write_text(content)
    out = diagnose(f"log={path}", f"results_dir={ROOT / 'results'}", *args)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr


def assert_consistent(d: dict) -> None:
    """The answer follows from the numbers printed with it (harness.analysis.model.Answer), or from the
    broken invariant that decides it; a named fault has support in the log."""
    assert sum(d["probabilities"].values()) == pytest.approx(1.0)
    if d["basis"] == "invariants":
        assert any(b["decisive"] for b in d["invariants"]) and d["answer"] in d["class"], d
        return
    if d["answer"] not in (HEALTHY, UNKNOWN, TOO_SHORT):
        assert d["support"].get(d["answer"]) or d["answer"] not in d["ruled_out"], d
    if d["basis"] == "evidence":
        assert d["answer"] in (HEALTHY, UNKNOWN) or d["support"].get(d["answer"]), d
        return
    if d["n_steps"] < d["min_steps"]:
        assert d["answer"] == TOO_SHORT
    elif d["anomalous"] < d["threshold"]:
        assert d["answer"] == HEALTHY, d
    elif d["answer"] == UNKNOWN:
        assert not d["class"]
    else:
        assert d["answer"] in d["class"] and d["class_probability"] >= d["unknown_threshold"], d
        assert d["probabilities"][d["answer"]] == max(d["probabilities"][m] for m in d["class"])
    assert sum(d["probabilities"].values()) == pytest.approx(1.0)


def diagnosed_in_process(*overrides: str) -> dict:
    """``python -m harness.diagnose <overrides> output=json``'s answer, computed by the command's own code
    (its config, reading, diagnosis and JSON) without its command-line layer."""
    from hydra import compose, initialize_config_dir

    from harness.commands import diagnose as command
    from harness.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("diagnose", [*overrides, "output=json"])
    command.settle(cfg)
    log, answer = command.diagnosed(cfg)
    return json.loads(json.dumps(command.as_json(cfg, log, answer), default=float))


#: every log the tests keep that diagnose answers (tests/data/README.md says how each was made; the refused
#: ones, another algorithm's or PPO on a language model, have their own tests)
FRAMEWORK_LOGS = [DATA / "sb3" / "progress.csv", DATA / "sb3" / "progress.json", DATA / "sb3",
                  DATA / "cleanrl" / "CartPole-v1__ppo__1__1795358967",
                  *sorted((DATA / "cleanrl_pair").glob("*/*")),
                  DATA / "trl" / "checkpoint-6" / "trainer_state.json", DATA / "trl" / "runs",
                  DATA / "verl" / "console.log", DATA / "verl" / "console_v03.log", ROOT / "examples" / "verl_stuck_reward.csv",
                  DATA / "trl_v014"]           # the last written by hand in TRL <= 0.15's names (tests/data/README.md)


@pytest.mark.parametrize("log", FRAMEWORK_LOGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_answer_contradicts_its_numbers_on_framework_logs(log):
    """The command's JSON answer on each log (its code without the command-line layer, which the tests
    above and test_cleanrl_shared_log_probs_and_its_healthy_twin run on these logs)."""
    assert_consistent(diagnosed_in_process(f"log={log}", f"results_dir={ROOT / 'results'}"))


#: the export profiles and their file formats, with the algorithms each logs
EXPORTS = (("canonical", "csv", ("ppo", "grpo")), ("sb3", "csv", ("ppo",)), ("cleanrl", "tensorboard", ("ppo",)),
           ("trl", "jsonl", ("grpo",)), ("verl", "csv", ("ppo", "grpo")))


def some_runs(results_dir: Path, algos: tuple[str, ...], n: int = 2) -> list[str]:
    """``n`` stored runs of ``algos``, one fault (and backend) after another: a spread of what the store holds."""
    from harness.store import RunStore

    metas = sorted((m for m in RunStore(results_dir).iter_metas() if m["algo"] in algos and m["status"] == "ok"),
                   key=lambda m: m["run_id"])
    kinds: dict[tuple, list[str]] = {}
    for m in metas:
        kinds.setdefault((m["algo"], m["fault"], m["backend"]), []).append(m["run_id"])
    firsts = [ids[0] for ids in kinds.values()]
    return [firsts[i * len(firsts) // n] for i in range(n)]


def test_no_answer_contradicts_its_numbers_on_exported_runs(diverse_model, tmp_path):
    """Every framework's export of stored runs (their views: two runs of different faults each, of both
    algorithms where the framework logs both), diagnosed as a user would (the command's code)."""
    from harness.logs.exporter import export

    checked = 0
    for profile, fmt, algos in EXPORTS:
        for rid in some_runs(diverse_model, algos):
            out_dir = tmp_path / profile / rid
            export(diverse_model, rid, profile, fmt, out_dir, warn=lambda _: None)
            ((oid, lab),) = json.loads((out_dir / "labels.json").read_text()).items()
            path = out_dir / lab["files"][0] if fmt != "tensorboard" else out_dir / oid   # files: relative to out
            assert_consistent(diagnosed_in_process(f"log={path}", f"results_dir={diverse_model}"))
            checked += 1
    assert checked == 10


def test_cleanrl_shared_log_probs_and_its_healthy_twin():
    """Real CleanRL ppo.py output, the same config: old and new log-probs shared (approx_kl and clip
    fraction exactly 0 on every update, update_epochs 4), and healthy."""
    pair = DATA / "cleanrl_pair"
    answers = {}
    for case in ("shared_policy", "healthy"):
        run_dir = next((pair / case).iterdir())
        out = diagnose(f"log={run_dir}", "output=json")
        assert out.returncode == 0, out.stderr
        d = json.loads(out.stdout)
        assert d["profile"] == "cleanrl" and d["view"] == "cleanrl"
        assert_consistent(d)
        answers[case] = d
    assert answers["shared_policy"]["answer"] == "shared_policy", answers["shared_policy"]
    assert "ratio_exactly_one" in answers["shared_policy"]["evidence"]
    assert answers["healthy"]["answer"] == HEALTHY, answers["healthy"]


@pytest.mark.parametrize("updates", [10, 1000])
def test_diagnosis_works_on_10_and_on_1000_updates_of_one_run(tmp_path, updates):
    """A log's length is no feature (windows are fractions of it): the first 10 updates of a real run are
    answered, and so is a log of 1000 updates. The 1000 are the 100 updates of a real healthy CleanRL run
    (tests/data/cleanrl_pair/healthy) logged ten times over, numbered on: real values at every row, without
    training a 1000-update run for it."""
    real = load_log(next((DATA / "cleanrl_pair" / "healthy").iterdir())).metrics
    assert len(real) == 100
    log = pd.concat([real] * 10, ignore_index=True)
    log["update"] = np.arange(len(log))
    log["step"] = (log["update"] + 1) * real["step"].iloc[0]
    cut = tmp_path / f"first_{updates}.csv"
    log.head(updates).to_csv(cut, index=False)
    out = diagnose(f"log={cut}", "output=json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["n_steps"] == updates and d["answer"] != TOO_SHORT
    assert_consistent(d)


def test_a_log_too_short_to_judge_says_so(tmp_path):
    log = tmp_path / "two.csv"
    pd.DataFrame({"update": [0, 1], "approx_kl": [0.01, 0.02], "entropy": [0.69, 0.68], "policy_loss": [0.0, -0.01],
                  "return_mean": [20.0, 22.0]}).to_csv(log, index=False)
    out = diagnose(f"log={log}", "profile=canonical")
    assert out.returncode == 0, out.stderr
    assert "answer: too short to judge (2 training steps" in out.stdout


def test_the_summary_line_says_when_rows_skip_training_steps():
    """A TRL log at its default logging_steps=10 has one row per 10 optimizer steps: the output says so
    instead of calling 15 rows 15 training steps."""
    from harness.commands.diagnose import cadence

    every_step = pd.DataFrame({"update": range(150)})
    assert cadence(every_step) == "150 training steps"
    tenth = pd.DataFrame({"update": range(9, 150, 10)})
    assert cadence(tenth).startswith("15 logged rows, one every 10 training steps (steps 10 .. 150")
    assert "TRL's average over logging_steps" in cadence(tenth, "trl")
    assert "SB3's log_interval" in cadence(tenth, "sb3") and "TRL" not in cadence(tenth, "sb3")  # an SB3 log says SB3's


def test_a_log_of_another_algorithm_is_refused_and_algo_reads_it_anyway(tmp_path):
    """SB3's A2C (tests/data/sb3_a2c: a real progress.csv) writes SB3's names but is not PPO: it used to be
    answered as a PPO log missing its clipping metrics. Now one line says whose log it is, and
    ``algo=ppo`` (which Hydra used to take for the config group harness/conf/algo/: "Could not override
    'algo'") reads it as PPO anyway, in diagnose and in watch. A CleanRL dqn.py log is refused alike."""
    a2c = DATA / "sb3_a2c" / "progress.csv"
    out = diagnose(str(a2c))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "error: the log looks like stable-baselines3's A2C, not its PPO (it logs train/policy_loss and no "
        "approx_kl, clip fraction or ratio): the diagnosis knows PPO and GRPO runs only; algo=ppo reads it as "
        "PPO anyway")
    for spelling in ("algo=ppo", "algorithm=ppo"):
        out = diagnose(str(a2c), spelling)
        assert out.returncode == 0 and "answer: " in out.stdout and "algorithm ppo" in out.stdout, out.stderr
    bad = diagnose(str(a2c), "algo=sarsa")
    assert bad.returncode == 2 and bad.stderr.startswith("error: algo='sarsa'; valid choices: ppo, grpo")
    watch = run("harness.watch", a2c, "idle=0.5", "interval=0.2", cwd=ROOT)
    assert watch.returncode == 2 and watch.stderr.strip().startswith("error: the log looks like stable-baselines3's A2C")
    watch = run("harness.watch", a2c, "idle=0.5", "interval=0.2", "algo=ppo", cwd=ROOT)
    assert watch.returncode == 0 and "10 steps: " in watch.stdout, watch.stderr     # A2C dumps every 100 iterations
    dqn = tmp_path / "dqn.csv"        # CleanRL dqn.py's names (a W&B-style export of its scalars)
    pd.DataFrame({"global_step": [100, 200, 300], "losses/td_loss": [1.0, 0.8, 0.7],
                  "losses/q_values": [0.5, 0.9, 1.2], "charts/episodic_return": [10.0, 12.0, 15.0]}).to_csv(dqn, index=False)
    out = diagnose(f"log={dqn}", "profile=cleanrl")
    assert out.returncode == 2 and "CleanRL's dqn.py (or a DQN variant), not its PPO" in out.stderr


def test_a_log_of_another_trl_trainer_is_refused():
    """TRL's SFTTrainer and DPOTrainer write trainer_state.json with TRL's names (loss, grad_norm,
    learning_rate, entropy) and none of GRPO's: both used to be answered "healthy" as GRPO logs
    (tests/data/trl_sft, trl_dpo: real logs of trl 1.16.0, tests/data/make_trl_other_fixture.py). Now
    one line names the trainer (the one every name it logs allows: DPO's rewards/chosen and its
    mean_token_accuracy leave DPOTrainer alone); ``algo=grpo`` reads the log anyway."""
    sft = DATA / "trl_sft" / "checkpoint-6" / "trainer_state.json"
    dpo = DATA / "trl_dpo" / "checkpoint-6" / "trainer_state.json"
    out = diagnose(str(sft))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "error: the log looks like TRL's SFTTrainer or DPOTrainer, not its GRPO (it logs mean_token_accuracy and "
        "no approx_kl, clip fraction or ratio): the diagnosis knows PPO and GRPO runs only; algo=grpo reads it as "
        "GRPO anyway")
    out = diagnose(str(dpo))
    assert out.returncode == 2 and out.stderr.startswith("error: the log looks like TRL's DPOTrainer, not its GRPO")
    out = diagnose(str(dpo), "algo=grpo")
    assert out.returncode == 0 and "answer: " in out.stdout, out.stderr
    healthy_grpo = diagnose(str(DATA / "trl" / "checkpoint-6" / "trainer_state.json"))
    assert healthy_grpo.returncode == 0 and "answer: " in healthy_grpo.stdout, healthy_grpo.stderr


#: the keys docs/diagnose.md lists for output=json
JSON_KEYS = {"answer", "kind", "probability", "class", "class_probability", "settings_to_check", "anomalous", "threshold",
             "healthy_weight", "unknown_threshold", "min_steps", "cannot_show", "unlike_training", "evidence",
             "probabilities", "model_probabilities", "ranking", "expected_signature", "fired", "profile", "algo", "view",
             "n_steps", "notes", "reference"}


def test_the_json_answer_holds_every_key_docs_diagnose_lists():
    """``output=json``: every key the page lists; ``reference`` is null without reference=PATH and the comparison
    (configuration differences, metrics, the nearest faults) with it."""
    pair = DATA / "cleanrl_pair"
    alone = diagnosed_in_process(f"log={pair / 'shared_policy'}", f"results_dir={ROOT / 'results'}")
    assert JSON_KEYS <= set(alone), sorted(JSON_KEYS - set(alone))
    assert alone["reference"] is None and alone["n_steps"] == 100 and alone["min_steps"] == MIN_ROWS
    assert alone["healthy_weight"] >= 1 and alone["unknown_threshold"] == pytest.approx(0.35)
    against = diagnosed_in_process(f"log={pair / 'shared_policy'}", f"reference={pair / 'healthy'}",
                                   f"results_dir={ROOT / 'results'}")
    assert {"config_differences", "metrics", "ranking"} <= set(against["reference"])
    assert {k: v for k, v in against.items() if k != "reference"} == {k: v for k, v in alone.items() if k != "reference"}


def test_runs_that_do_not_learn_never_train_the_model(diverse_model):
    """Healthy runs whose configuration does not learn are labelled not_learning (inert faults: inert): no model
    has such a class, and none of them is among the runs the models were fitted on (that they are never scored:
    test_model_card_and_scores_come_from_held_out_runs)."""
    runs = pd.read_parquet(diverse_model / "dataset" / "runs.parquet")
    unlabelled = set(runs.loc[runs["label"].isin(UNLABELLED), "run_id"])
    assert unlabelled, "the diverse fixture has runs that do not learn"
    models = load_models(model_path(diverse_model / "catalogue"))
    for key, model in models.items():
        assert not set(model.info["run_ids"]) & unlabelled, key
        assert not set(model.info["classes"]) & set(UNLABELLED), key


def test_the_healthy_weight_lets_95_percent_of_healthy_training_logs_through():
    """docs/diagnose.md: the healthy-looking classes' odds are raised by a weight fitted so that 95% of the
    model's out-of-fold healthy logs come out healthy: t / (1 - t) for the 95% quantile t of their P(anomalous),
    t kept within [0.5, 0.95]; the fitted models carry that weight."""
    from harness.analysis.model import threshold_for

    scores = np.linspace(0.0, 0.8, 1001)
    assert threshold_for(scores) == pytest.approx(np.quantile(scores, 0.95)) == pytest.approx(0.76)
    assert threshold_for(scores * 0.1) == 0.5 and threshold_for(0.98 + scores * 0.02) == 0.95
    assert threshold_for(np.array([])) == 0.5
    for key, model in load_models(model_path(CATALOGUE)).items():
        t = model.anomaly_threshold
        assert 0.5 <= t <= 0.95 and model.healthy_weight == pytest.approx(t / (1 - t)), key


def test_the_model_learns_from_three_prefixes_of_each_run(diverse_model):
    """docs/diagnose.md: the model is fitted on features of 3 prefixes of each run (30%, 60% and 100% of its
    updates), in every framework view of its algorithm."""
    examples = pd.read_parquet(diverse_model / "catalogue" / "model" / "examples.parquet", columns=["run_id", "prefix",
                                                                                                  "view", "algo"])
    assert sorted(examples["prefix"].unique()) == [0.3, 0.6, 1.0]
    assert (examples.groupby(["run_id", "view"])["prefix"].nunique() == 3).all()
    assert set(examples.loc[examples["algo"] == "ppo", "view"]) == set(VIEWS["ppo"])


def test_logs_too_short_to_judge_never_train_the_model(diverse_model):
    """docs/diagnose.md: logs shorter than the 5 steps diagnose judges (a run dead at its first update) neither
    train the model nor measure the evidence rates: a healthy run the fixture's model was fitted on, its logs
    made 3 steps long, is left out of the refit."""
    from harness.analysis.model import fit

    examples = pd.read_parquet(diverse_model / "catalogue" / "model" / "examples.parquet")
    fitted = load_models(model_path(diverse_model / "catalogue"))[("ppo", "canonical")]
    mine = (examples["algo"] == "ppo") & (examples["view"] == "canonical")
    rid = next(r for r in examples.loc[mine & (examples["label"] == HEALTHY), "run_id"] if r in fitted.info["run_ids"])
    short = examples.assign(n_rows=examples["n_rows"].where(examples["run_id"] != rid, MIN_ROWS - 2))
    refit = fit(short, "ppo", "canonical")
    assert rid not in refit.info["run_ids"]
    assert set(refit.info["run_ids"]) == set(fitted.info["run_ids"]) - {rid}


def test_the_catalogue_s_held_out_seeds_and_trl_backend_runs_never_train_the_model():
    """docs/diagnose.md: the catalogue runs that train the model beside the diverse runs are its calibration (even)
    seeds; its held-out (odd) seeds and the TRL-backend runs (whose TRL logs are a test set) never do."""
    from harness.analysis.runs import RunSet
    from harness.catalogue.protocol import extra_training_runs

    runs = pd.DataFrame([{"run_id": f"{origin}-{backend}-s{seed}", "origin": origin, "backend": backend, "seed": seed}
                         for origin in ("catalogue", "diverse") for backend in ("native", "trl") for seed in (0, 1)])
    assert extra_training_runs(RunSet(runs=runs, metas={}, metrics={})) == ["catalogue-native-s0"]


def test_model_kind_extratrees_fits_platt_scaled_trees_the_diagnosis_answers_with(diverse_model):
    """docs/diagnose.md: ``model_kind=extratrees`` fits extremely randomised trees, Platt-scaled on cross-validation
    folds, and diagnoses as the logistic model does (``boosting``, the same path with gradient-boosted trees, costs
    about 23 CPU-s on these examples: not in the fast tier)."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.ensemble import ExtraTreesClassifier

    from harness.analysis.examples import evidence_frame
    from harness.analysis.model import fit

    examples = pd.read_parquet(diverse_model / "catalogue" / "model" / "examples.parquet")
    model = fit(examples, "ppo", "canonical", kind="extratrees")
    assert isinstance(model.estimator, CalibratedClassifierCV) and model.estimator.method == "sigmoid"
    assert isinstance(model.estimator.estimator[-1], ExtraTreesClassifier)
    row = examples[(examples["algo"] == "ppo") & (examples["view"] == "canonical") & (examples["prefix"] == 1.0)].head(1)
    (answer,) = model.diagnose(row, evidence_frame(row), row["n_rows"].to_numpy())
    assert sum(answer.probabilities.values()) == pytest.approx(1.0) and answer.answer


@pytest.mark.parametrize("run, args, code", [
    ("healthy", ["fail_on=anomalous"], 0), ("shared_policy", ["fail_on=anomalous"], 1),
    ("shared_policy", ["--fail-on", "fault"], 1), ("shared_policy", ["--fail-on=never"], 0), ("shared_policy", [], 0),
])
def test_fail_on_gives_ci_its_exit_code(run, args, code):
    """fail_on= (or --fail-on): exit code 1 when the answer fails the check, 0 otherwise; the default never fails."""
    pair = DATA / "cleanrl_pair"
    out = diagnose(f"log={pair / run}", *args, f"results_dir={ROOT / 'results'}")
    assert out.returncode == code, out.stderr
    assert ("exit code 1: the answer is" in out.stdout) == bool(code)


def test_fail_on_reads_each_kind_of_answer():
    from types import SimpleNamespace

    from harness.commands.diagnose import exit_code

    answers = {"healthy": ("healthy", "healthy"), "too_short": ("too_short", "too_short"),
               "unknown": ("unknown", "unknown"), "fault": ("zero_reward", "fault"), "class": ("shared_policy", "class")}
    codes = {when: {name: exit_code(SimpleNamespace(answer=a, kind=k), when) for name, (a, k) in answers.items()}
             for when in ("never", "anomalous", "fault")}
    assert codes["never"] == dict.fromkeys(answers, 0)
    assert codes["anomalous"] == {"healthy": 0, "too_short": 0, "unknown": 1, "fault": 1, "class": 1}
    assert codes["fault"] == {"healthy": 0, "too_short": 0, "unknown": 0, "fault": 1, "class": 1}


def test_a_bad_fail_on_is_one_line(tmp_path):
    out = diagnose(f"log={DATA / 'cleanrl_pair' / 'healthy'}", "fail_on=always", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "fail_on='always'; valid choices: never, anomalous, fault" in out.stderr


def test_many_logs_in_one_process_give_one_summary_table(tmp_path):
    """A glob in log= (each match) or select=all on a directory (each run in it): one row per log, a log that
    cannot be read is a row with its one-line error, and the exit code is the worst log's."""
    batch = tmp_path / "runs"
    shutil.copytree(DATA / "cleanrl_pair", batch)
    (batch / "notes.csv").write_text("not,a,log\n")
    out = diagnose(f"log={batch}/*", "fail_on=fault", f"results_dir={ROOT / 'results'}")
    assert out.returncode == 2, out.stderr           # the unreadable log
    assert "3 logs in" in out.stdout and "1 healthy, 1 naming a fault or a class" in out.stdout
    table = {line.split(" | ")[0].removeprefix("| "): line for line in out.stdout.splitlines() if line.startswith("| /")}
    assert "| healthy (P = " in table[f"{batch}/healthy"] and table[f"{batch}/healthy"].endswith("| 0 |")
    assert "one of shared_policy" in table[f"{batch}/shared_policy"] and table[f"{batch}/shared_policy"].endswith("| 1 |")
    assert "unreadable: log=" in table[f"{batch}/notes.csv"]

    (batch / "notes.csv").unlink()
    js = diagnose(f"log={batch}", "select=all", "output=json", "fail_on=anomalous", f"results_dir={ROOT / 'results'}")
    assert js.returncode == 1, js.stderr
    every = json.loads(js.stdout)
    assert every["exit_code"] == 1 and len(every["logs"]) == 2
    assert [x["log"].split("/")[-2] for x in every["logs"]] == ["healthy", "shared_policy"]
    assert {x["answer"] for x in every["logs"]} == {"healthy", "shared_policy"} and JSON_KEYS <= set(every["logs"][0])


@pytest.mark.parametrize("args, message", [
    (["log=/no/such/*.csv"], "log=/no/such/*.csv: no file or directory matches this pattern"),
    ([f"log={DATA / 'trl_ppo' / 'healthy' / 'checkpoint-100' / 'trainer_state.json'}", "select=all"], "is not one"),
    ([f"log={DATA / 'cleanrl_pair'}/*", f"reference={DATA / 'cleanrl_pair' / 'healthy'}"], "not a batch"),
])
def test_bad_batches_are_one_line(args, message, tmp_path):
    out = diagnose(*args, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr


def test_the_self_test_diagnoses_the_packaged_logs_and_prints_its_scorecard(tmp_path, monkeypatch):
    """self_test=true: every packaged log answered as labelled (exit 0); a log whose answer is not the one
    expected is marked NO and the exit code is 1."""
    out = diagnose("self_test=true", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "self-test: 9 of 9 logs answered as expected" in out.stdout
    assert "3 of 3 healthy runs called healthy, 6 of 6 faulty runs named" in out.stdout

    from harness.commands import diagnose as command

    own = tmp_path / "selftest"
    shutil.copytree(command.SELF_TEST, own)
    labels = json.loads((own / "labels.json").read_text())
    labels["cleanrl_pair/shared_policy"]["expect"] = "healthy"
    (own / "labels.json").write_text(json.dumps(labels))
    monkeypatch.setattr(command, "SELF_TEST", own)
    off = diagnose("self_test=true", cwd=tmp_path)
    assert off.returncode == 1 and "8 of 9 logs answered as expected" in off.stdout
    assert "| cleanrl_pair/shared_policy |" in off.stdout and "| NO |" in off.stdout


def test_the_report_file_shows_the_answer_and_the_traces_that_decided_it(tmp_path):
    """report=PATH.md: the answer, the broken invariants and support, a figure of the deciding metrics (a PNG
    beside it) and the whole printed answer; report=PATH.html: one file, the figure inside it; a batch: a
    section per log, an unreadable log saying why."""
    nan = DATA / "sb3_nan" / "progress.csv"
    out = diagnose(f"log={nan}", f"report={tmp_path / 'nan.md'}", f"results_dir={ROOT / 'results'}")
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "nan.md").read_text()
    assert "broken invariant: finite broken on 1 of 1 steps" in text and "whiten_tiny_batch is supported by" in text
    assert "![the metrics that decided the answer](nan-1.png)" in text and "dialect: sb3" in text
    assert (tmp_path / "nan-1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    (tmp_path / "runs").mkdir()
    shutil.copytree(DATA / "trl_pinned_ratio" / "pinned", tmp_path / "runs" / "pinned")
    (tmp_path / "runs" / "notes.csv").write_text("not,a,log\n")
    out = diagnose(f"log={tmp_path / 'runs'}/*", f"report={tmp_path / 'all.html'}", f"results_dir={ROOT / 'results'}")
    page = (tmp_path / "all.html").read_text()
    assert page.count("<h2>") == 2 and "Could not be read: log=" in page and "data:image/png;base64," in page
    assert "clipping_acts broken on 300 of 300 steps" in page


@pytest.mark.parametrize("report, message", [("out.pdf", "the suffix says the format; valid: .md"),
                                             ("/no/such/dir/out.md", "no directory /no/such/dir")])
def test_a_bad_report_path_is_one_line(report, message, tmp_path):
    out = diagnose(f"log={DATA / 'sb3_nan' / 'progress.csv'}", f"report={report}", cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and message in out.stderr

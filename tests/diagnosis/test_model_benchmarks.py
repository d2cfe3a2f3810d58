"""The model benchmarks' inputs: a build's examples table and card (--examples) without any run."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import traceback
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.model_examples import arguments, examples_and_settings
from harness.config import ConfigError
from tests.commands import Ran, working_dir
from tests.paths import ROOT

PUBLISHED_EXAMPLES = ROOT / "results" / "catalogue" / "model" / "examples.parquet"


def script(name: str, *argv: str, cwd: Path = ROOT) -> Ran:
    """``python benchmarks/<name>.py ARGV`` run in this process: its ``main()`` with ``sys.argv`` set, the
    exit code as the interpreter would give it (``SystemExit("message")``: the message on stderr and 1; an
    uncaught exception: its traceback and 1) and the output captured."""
    main = importlib.import_module(f"benchmarks.{name}").main
    out, err, code = io.StringIO(), io.StringIO(), 0
    own = sys.argv
    sys.argv = [str(ROOT / "benchmarks" / f"{name}.py"), *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), working_dir(cwd):
            try:
                main()
            except SystemExit as exc:
                if isinstance(exc.code, str):
                    print(exc.code, file=sys.stderr)
                code = 1 if isinstance(exc.code, str) else exc.code or 0
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        sys.argv = own
    return Ran([name, *argv], code, out.getvalue(), err.getvalue())


def test_examples_and_settings_read_a_builds_table_and_card(tmp_path: Path) -> None:
    table = tmp_path / "examples.parquet"
    pd.DataFrame({"run_id": ["a", "a", "b"], "view": "sb3", "label": ["healthy", "healthy", "tiny_clip"],
                  "algo": "ppo", "prefix": [0.3, 1.0, 1.0]}).to_parquet(table)
    (tmp_path / "model_card.json").write_text(json.dumps({"settings": {"tiny_clip": ["clip_range"]},
                                                          "examples_version": "x"}))
    args = arguments("t").parse_args(["--examples", str(table)])
    examples, settings = examples_and_settings(args)
    assert len(examples) == 3 and examples["testable"].all()       # no column: every run is a diverse one
    assert settings == {"tiny_clip": ("clip_range",)}


def test_examples_a_missing_or_card_less_table_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        examples_and_settings(arguments("t").parse_args(["--examples", str(tmp_path / "nope.parquet")]))
    table = tmp_path / "examples.parquet"
    pd.DataFrame({"run_id": ["a"], "view": "sb3", "label": "healthy", "algo": "ppo", "prefix": 1.0}).to_parquet(table)
    with pytest.raises(ConfigError, match="no model_card.json beside it"):
        examples_and_settings(arguments("t").parse_args(["--examples", str(table)]))


def test_the_published_examples_feed_the_benchmarks() -> None:
    """The shipped table and card are what --examples reads (the figures in docs/benchmarks.md)."""
    examples, settings = examples_and_settings(arguments("t").parse_args(["--examples", str(PUBLISHED_EXAMPLES)]))
    assert len(examples) > 10000 and len(settings) > 20


@pytest.mark.parametrize("name", ["answer_rules", "feature_families", "model_kinds"])
def test_a_bad_examples_path_ends_the_benchmark_with_one_error_line(name: str, tmp_path: Path) -> None:
    out = script(name, "--examples", str(tmp_path / "nope.parquet"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "--examples " in errors[0] and "no such file" in errors[0], out.stderr


def _answers(n_runs: int, right_share: float, healthy_ok: float, seed: int) -> pd.DataFrame:
    """A table of held-out answers: n_runs faulty runs, right on a share; as many healthy, called healthy on a share."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_runs):
        rows.append({"split": 0, "algo": "ppo", "view": "sb3", "run_id": f"f{i}", "fault": "tiny_clip",
                     "label": "tiny_clip", "answer": "tiny_clip" if rng.random() < right_share else "lr_too_low",
                     "score": 0.9, "members": "", "known": True})
        rows.append({"split": 0, "algo": "ppo", "view": "sb3", "run_id": f"h{i}", "fault": "none", "label": "healthy",
                     "answer": "healthy" if rng.random() < healthy_ok else "tiny_clip", "score": 0.1, "members": "",
                     "known": True})
    return pd.DataFrame(rows)


def test_paired_comparison_finds_a_worse_fit_and_passes_an_equal_one() -> None:
    from benchmarks.heldout_answers import paired, verdict

    a = _answers(300, 0.8, 0.95, seed=1)
    same = paired(a, a)
    assert (same["b_minus_a"] == 0).all() and (same["lo"] == 0).all() and verdict(same)[0]
    worse = a.copy()                                   # B loses top-1 on a third of A's right answers
    right = worse.index[(worse["label"] == "tiny_clip") & (worse["answer"] == "tiny_clip")]
    worse.loc[right[: len(right) // 3], "answer"] = "lr_too_low"
    table = paired(a, worse)
    top1 = table[(table["view"] == "ppo/sb3") & (table["measure"] == "top1")].iloc[0]
    assert top1["b_minus_a"] == pytest.approx(-(len(right) // 3) / 300) and top1["hi"] < 0
    ok, why = verdict(table)
    assert not ok and any("ppo/sb3 top1" in w for w in why)
    healthy = table[(table["view"] == "ppo/sb3") & (table["measure"] == "healthy_called_healthy")].iloc[0]
    assert healthy["b_minus_a"] == 0                   # the healthy answers did not change
    from benchmarks.heldout_answers import per_fault
    rows = per_fault(a, worse, "ppo/sb3")
    assert rows.loc["tiny_clip", "right_a"] - rows.loc["tiny_clip", "right_b"] == len(right) // 3
    assert rows.loc["tiny_clip", "anomalous_b_minus_a"] == 0 and rows.loc["healthy", "logs"] == 300
    with pytest.raises(SystemExit, match="share no held-out run"):
        paired(a, a.assign(run_id=a["run_id"] + "x"))


def test_patch_sets_a_constant_with_its_type_and_refuses_an_unknown_one() -> None:
    from benchmarks.heldout_answers import _patched
    from harness.analysis import identifiability

    before = identifiability.INVISIBLE
    try:
        _patched(["harness.analysis.identifiability.INVISIBLE=0.7"])
        assert identifiability.INVISIBLE == 0.7 and isinstance(identifiability.INVISIBLE, float)
    finally:
        identifiability.INVISIBLE = before
    with pytest.raises(SystemExit, match="has no NOPE"):
        _patched(["harness.analysis.identifiability.NOPE=1"])
    with pytest.raises(SystemExit, match="'abc' is not a float"):
        _patched(["harness.analysis.identifiability.INVISIBLE=abc"])


@pytest.mark.parametrize("argv", [["compare", "nope_a.parquet", "nope_b.parquet"],
                                  ["answers", "--examples", "nope.parquet", "--out", "x.parquet"],
                                  ["answers", "--examples", str(PUBLISHED_EXAMPLES), "--split-of", "nope.parquet",
                                   "--out", "x.parquet"]])
def test_heldout_answers_bad_paths_end_with_one_error_line(argv: list[str], tmp_path: Path) -> None:
    out = script("heldout_answers", *argv, cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "nope" in out.stderr


def test_paired_auroc_is_zero_for_a_pair_and_catches_a_score_that_ranks_nothing() -> None:
    from sklearn.metrics import roc_auc_score

    from benchmarks.heldout_answers import paired, verdict, weighted_auroc

    a = _answers(200, 0.8, 0.95, seed=2)
    a["score"] = np.where(a["label"] == "healthy", 0.2, 0.8) + np.random.default_rng(0).normal(0, 0.2, len(a))
    y = (a["label"] != "healthy").to_numpy()
    w = np.random.default_rng(3).integers(0, 3, size=(4, len(a)))
    assert weighted_auroc(a["score"].round(1).to_numpy(), y, w) == pytest.approx(   # ties and weights as sklearn
        [roc_auc_score(y, a["score"].round(1), sample_weight=row) for row in w])
    same = paired(a, a)
    auc = same[same["measure"] == "auroc"].iloc[0]
    assert auc["b_minus_a"] == 0 and auc["a"] > 0.9 and (same["view"] != "all").sum() == 5  # no pooled AUROC
    noise = a.assign(score=np.random.default_rng(1).random(len(a)))   # B's score ranks logs at random
    table = paired(a, noise)
    worse = table[table["measure"] == "auroc"].iloc[0]
    assert worse["b"] < 0.65 and worse["hi_corrected"] < 0
    ok, why = verdict(table)
    assert not ok and why == [next(w for w in why if "ppo/sb3 auroc" in w)]   # answers unchanged: only AUROC


def test_healthy_rate_is_judged_against_the_operating_point_not_only_the_baseline() -> None:
    """A threshold that lands nearer the operating point may call fewer healthy logs healthy than A did;
    below the operating point (or A's rate, if lower) beyond B's own interval it may not."""
    from benchmarks.heldout_answers import OPERATING_POINT, paired, verdict
    from harness.analysis.model import HEALTHY_ALARMS

    assert OPERATING_POINT == pytest.approx(1 - HEALTHY_ALARMS)
    a = _answers(600, 0.8, 1.0, seed=4)                     # A calls every healthy log healthy
    healthy = a.index[a["label"] == "healthy"]

    def alarms(share: float) -> pd.DataFrame:
        b = a.copy()
        b.loc[healthy[: int(share * len(healthy))], "answer"] = "tiny_clip"
        return b

    near = paired(a, alarms(0.05))                           # 95%: at the operating point
    row = near[(near["view"] == "ppo/sb3") & (near["measure"] == "healthy_called_healthy")].iloc[0]
    assert row["b"] == pytest.approx(0.95) and row["hi_corrected"] < 0    # worse than A beyond its interval ...
    assert verdict(near)[0]                                               # ... and allowed
    far = paired(a, alarms(0.12))                            # 88%: below the operating point
    ok, why = verdict(far)
    assert not ok and any("ppo/sb3 healthy_called_healthy" in w for w in why)
    assert any(w.startswith("all healthy_called_healthy") for w in why)
    low = _answers(600, 0.8, 0.85, seed=5)                  # A itself below the operating point: B may not go lower
    assert verdict(paired(low, low))[0]
    lower = low.copy()                                       # 3 points lower, within B's own interval of A's rate
    still = lower.index[(lower["label"] == "healthy") & (lower["answer"] == "healthy")]
    lower.loc[still[:18], "answer"] = "tiny_clip"
    table = paired(low, lower)
    row = table[(table["view"] == "ppo/sb3") & (table["measure"] == "healthy_called_healthy")].iloc[0]
    assert row["b_hi_corrected"] > row["a"] and row["hi_corrected"] < 0    # unpaired it would pass; paired it is worse
    ok, why = verdict(table)
    assert not ok and any("ppo/sb3 healthy_called_healthy" in w and "below the operating point" in w for w in why)


def test_the_paired_measures_are_the_scores_of_harness_analysis_scores() -> None:
    """heldout_answers keeps its own per-row copy of the measures' definitions: they must agree."""
    from benchmarks.heldout_answers import measures
    from harness.analysis import scores as sc

    t = _answers(150, 0.6, 0.9, seed=3)
    t.loc[t.index[::7], "answer"] = "unknown"                           # anomalous, names nothing
    t.loc[t.index[1::11], "members"] = "tiny_clip,lr_too_low"           # a class holding the fault
    t.loc[t.index[3::13], "known"] = False                              # a fault the model never saw
    judged = [sc.Judged(r.label, r.answer, r.score, members=tuple(m for m in r.members.split(",") if m),
                        known=r.known) for r in t.itertuples()]
    expected = sc.score(judged)
    for name, (mask, right) in measures(t).items():
        assert right[mask].mean() == pytest.approx(getattr(expected, name)), name


@pytest.fixture(scope="module")
def published_grpo_trl() -> pd.DataFrame:
    """The published examples of GRPO's trl view (read once: the whole table is 34k rows)."""
    table = pd.read_parquet(PUBLISHED_EXAMPLES)
    return table[(table["algo"] == "grpo") & (table["view"] == "trl")]


def test_split_of_holds_out_another_builds_runs_and_only_trains_on_the_rest(published_grpo_trl) -> None:
    """--split-of: a build with runs added (a supplement) is judged on the held-out runs of the build before
    them, which answer alike whether or not the added runs exist in the table; the added runs only train."""
    from benchmarks.heldout_answers import _answers_of_view

    table = published_grpo_trl
    runs = table.drop_duplicates("run_id")
    before = runs.groupby("fault").head(6)["run_id"]                   # the earlier build: 6 runs a fault
    added = runs[~runs["run_id"].isin(before)].groupby("fault").head(2)["run_id"]   # a supplement
    examples = table[table["run_id"].isin(set(before) | set(added))].assign(testable=True)
    settings = {k: tuple(v) for k, v in json.loads((ROOT / "results" / "catalogue" / "model" / "model_card.json")
                                                  .read_text())["settings"].items()}
    earlier = _answers_of_view(examples[examples["run_id"].isin(before)], "grpo", "trl", 0, settings, [])
    later = _answers_of_view(examples, "grpo", "trl", 0, settings, [], split_of=frozenset(before))
    assert earlier and {r["run_id"] for r in later} == {r["run_id"] for r in earlier}   # the same held-out runs
    assert not {r["run_id"] for r in later} & set(added)
    plain = _answers_of_view(examples, "grpo", "trl", 0, settings, [])                # without it: another split
    assert {r["run_id"] for r in plain} != {r["run_id"] for r in earlier}


def test_ood_answers_each_held_out_region_on_its_own_runs(published_grpo_trl) -> None:
    """--ood: a held-out env or region protocol per job; its rows are that protocol's held-out runs, named by it."""
    from benchmarks.heldout_answers import OOD_KINDS, _answers_of_view
    from harness.analysis.protocols import protocols

    table = published_grpo_trl
    table = table[table["run_id"].isin(table.drop_duplicates("run_id").groupby("fault").head(5)["run_id"])]
    table = table.assign(testable=True)
    ood = [p for p in protocols(table, "grpo", seed=0, left_out=False) if p.kind in OOD_KINDS]
    assert ood
    rows = _answers_of_view(table, "grpo", "trl", 0, {}, [], ood=True)
    assert rows and {r["split"] for r in rows} == {ood[0].name}
    assert {r["run_id"] for r in rows} <= ood[0].test


def test_compare_records_a_name_with_a_dot_whole(tmp_path: Path) -> None:
    """--out NAME_C0.1 writes NAME_C0.1.md and .json (a dot in the name is not a suffix to replace)."""
    a = _answers(50, 0.8, 0.95, seed=6)
    a.to_parquet(tmp_path / "a.parquet")
    out = script("heldout_answers", "compare", str(tmp_path / "a.parquet"), str(tmp_path / "a.parquet"), "--out",
                 str(tmp_path / "x_C0.1"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "x_C0.1.md").is_file() and json.loads((tmp_path / "x_C0.1.json").read_text())["may_replace"]

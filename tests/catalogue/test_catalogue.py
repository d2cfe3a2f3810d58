"""The catalogue and the labelled dataset, built from a real (small) store: the checked-in fixture
``tiny("catalogue")`` (tests/make_fixtures.py), and short runs trained through the session's store.

Six seeds per cell (seeds 0, 2, 4 calibrate, 1, 3, 5 are held out), ten for zero_reward at onset
0 and its healthy runs: with three held-out seeds a side no exact test can reach p < 0.05 (the
smallest p of a 3-vs-3 comparison is 1/20), with five it can."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis import stats
from harness.analysis.runs import RunSet, cell_slug
from harness.analysis.signatures import SIGNATURES
from harness.catalogue.build import write
from harness.catalogue.protocol import split_of
from harness.catalogue.rows import CATALOGUE_COLUMNS
from harness.catalogue.settings import CatalogueSettings
from harness.config import ConfigError
from harness.metrics import CANONICAL
from harness.store import RunStore
from tests.catalogue.conftest import TINY, stored
from tests.commands import run
from tests.paths import ROOT

#: the checked-in fixture tests/data/tiny/catalogue was trained with these (tests/make_fixtures.py)
#: groups of 16 make a group of equal rewards (0/0 under adv_std_no_floor zero_std) rarer, so the six faulty
#: seeds diverge at different updates (2-14 of 24 measured), not all within the first one
GRPO = ["algo=grpo", "env=toyseq", "algo.group_size=16", "algo.n_prompts=8", "env.total_timesteps=30720"]


@pytest.fixture(scope="module")
def store(tiny) -> Path:
    """The catalogue protocol in small, built (``python -m harness.catalogue n_mc=2000``): six seeds of
    shared_policy and zero_reward on CartPole (ten of zero_reward at onset 0 and of their healthy runs),
    zero_reward at a mid-run onset, the look-alike control, GRPO with a fault that diverges, and runs
    that crash (the checked-in fixture ``tiny("catalogue")``). Read it; ``tiny_copy`` to write into it."""
    return tiny("catalogue")


def cartpole_runs(store: Path, results_dir: Path) -> Path:
    """A results_dir of the store's CartPole runs of seeds 0-5 that did not crash (shared_policy, zero_reward at
    onset 0 and mid-run, their healthy twins and the look-alike controls): three cells sharing their twins."""
    for run_dir in (store / "runs").iterdir():
        meta = json.loads((run_dir / "meta.json").read_text())
        if meta["env"] == "cartpole" and meta["status"] != "crashed" and meta["seed"] < 6:
            shutil.copytree(run_dir, results_dir / "runs" / run_dir.name)
    return results_dir


def cell(cat: pd.DataFrame, fault: str, setup: str, onset: str = "0") -> pd.DataFrame:
    rows = cat[(cat["fault"] == fault) & (cat["setup"] == setup) & (cat["onset_kind"] == onset)]
    assert len(rows), f"no cell {fault} {setup} onset={onset}"
    return rows


def test_catalogue_files_and_columns(store):
    root = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    for col in ("fault", "algo", "env", "backend", "kind", "name", "expected", "threshold", "rate_faulty",
                "rate_healthy", "rate_control", "ci_low_faulty", "ci_high_faulty", "cal_rate_faulty",
                "separates_calibration", "heldout_p", "verdict", "auroc", "direction", "p_value", "p_holm",
                "n_faulty", "n_healthy", "n_control", "n_diverged", "n_crashed", "diverged_updates", "manifested"):
        assert col in cat.columns, col
    assert (root / "catalogue" / "CATALOGUE.md").exists()
    pngs = list((root / "catalogue" / "plots").glob("*.png"))
    setups = {f"heatmap_{setup.replace('/', '_')}.png" for setup in cat["setup"].unique()}
    assert setups | {"verdicts.png"} <= {p.name for p in pngs} and len(pngs) >= 5
    assert all(p.stat().st_size > 10_000 for p in pngs)


def test_rates_are_held_out_with_intervals_and_verdicts_from_calibration(store):
    root = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    rows = cell(cat, "shared_policy", "ppo/cartpole/native").set_index("name")
    sig = rows.loc["ratio_pinned"]
    assert (sig["n_faulty"], sig["n_healthy"], sig["n_control"]) == (6, 10, 6)
    # 3 held-out seeds a side: the rate is 3/3, with a Wilson interval that is not degenerate
    assert (sig["held-out_k_faulty"], sig["held-out_n_faulty"]) == (3, 3)
    assert sig["rate_faulty"] == 1 and sig["rate_healthy"] == 0 and sig["rate_control"] == 1
    assert 0.3 < sig["ci_low_faulty"] < 1 == sig["ci_high_faulty"]
    # it fires on every look-alike control: not specific, whatever it does on faulty seeds
    assert not sig["separates_calibration"] and sig["verdict"].startswith("not specific")
    metric = rows.loc["ratio_dev_max"]
    assert metric["auroc"] == 0 and metric["direction"] == "lower" and not metric["paired"]  # 6 vs 10 seeds
    assert metric["p_value"] == pytest.approx(2 / 8008)          # exact: C(16, 6) relabellings, two-sided
    assert metric["p_holm"] >= metric["p_value"]
    paired = cell(cat, "zero_reward", "ppo/cartpole/native").set_index("name").loc["value_loss"]
    assert paired["paired"] and paired["p_value"] == pytest.approx(2 / 2 ** 10)   # 10 twin pairs
    assert "reward_mean" not in rows.index      # 1 per step either way: constant, nothing to test


def test_calibrated_thresholds_come_from_calibration_seeds_only(store):
    root = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    rows = cell(cat, "zero_reward", "ppo/cartpole/native").set_index("name")
    for name in ("kl_high", "kl_explodes", "entropy_collapse", "clipfrac_saturated", "approx_kl_tiny"):
        sig = SIGNATURES[name]
        assert sig.calibrated          # moved out from the default where healthy runs cross it, never in
        stricter = max if sig.direction in ("above", "at_least") else min
        assert rows.loc[name, "threshold"] == stricter(rows.loc[name, "threshold"], sig.threshold)
    # ...from the even seeds: a healthy calibration run never fires at the fitted threshold
    assert (rows.loc[rows["kind"] == "signature", "cal_rate_healthy"].fillna(0)[rows["calibrated"] == True] == 0).all()  # noqa: E712
    assert split_of(0) == split_of(4) == "calibration" and split_of(3) == "held-out"


def test_manifested_is_decided_on_held_out_seeds(store):
    root = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    zero = cell(cat, "zero_reward", "ppo/cartpole/native")
    assert zero.iloc[0]["manifested"] and "reward_zero" in zero.iloc[0]["manifested_by"]
    reward_zero = zero.set_index("name").loc["reward_zero"]
    assert reward_zero["heldout_p"] == pytest.approx(1 / 252)       # 5/5 vs 0/5, Fisher one-sided
    # the mid-run cell: evidence selected on calibration, tested in a fixed sequence on held-out seeds
    # (the first item decides; a later item is reported only if every earlier one passed)
    mid = cell(cat, "zero_reward", "ppo/cartpole/native", onset="mid").iloc[0]
    assert mid["onsets"] == "3, 4" and mid["n_evidence"] > 0
    rows = cell(cat, "zero_reward", "ppo/cartpole/native", onset="mid").set_index("name")
    revealed = [item for item in mid["manifested_by"].split(", ") if item]
    for item in revealed:
        assert rows.loc[item.removesuffix(" (AUROC)"), "heldout_p"] < 0.05
    md = (root / "catalogue" / "CATALOGUE.md").read_text()
    assert "| [zero_reward](faults/zero_reward.md) |" in md
    page = (root / "catalogue" / "faults" / "zero_reward.md").read_text()
    assert "\n## zero_reward onset=mid | ppo/cartpole/native\n" in page


def test_a_diverged_run_shows_no_artefacts_of_being_short(store):
    root = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    adv = cell(cat, "adv_std_no_floor", "grpo/toyseq/native")
    sig = adv.query("kind == 'signature'").set_index("name")
    assert sig["n_diverged"].iloc[0] == 6
    completed = [int(n) for n in sig["diverged_updates"].iloc[0].split(", ")]
    assert len(completed) == 6 and max(completed) < 24           # each stopped before the end of its run
    # each twin is read over the same short window: being short is no evidence
    assert sig.loc["nonfinite", "rate_faulty"] == 1 and sig.loc["nonfinite", "rate_healthy"] == 0
    for name in ("ratio_pinned", "approx_kl_zero", "param_frozen", "clipfrac_zero", "loss_zero"):
        assert not sig.loc[name, "separates_calibration"], name
    assert set(filter(None, adv.iloc[0]["manifested_by"].split(", "))) <= {"nonfinite", "adv_nonfinite_or_huge", "kl_explodes",
                                                             "kl_ref_explodes"}
    crashed = cell(cat, "tiny_clip", "ppo/cartpole/native")
    assert crashed["n_crashed"].iloc[0] == 6
    page = (root / "catalogue" / "faults" / "adv_std_no_floor.md").read_text()
    assert f"6 faulty seeds (6 diverged, completing {', '.join(map(str, completed))} updates after onset" in page


def test_reference_detectors_are_measured_per_fault_with_delays(store):
    root = store
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    det = cell(cat, "shared_policy", "ppo/cartpole/native").query("kind == 'detector'").set_index("name")
    assert set(det.index) == {"folk", "config_aware", "ptt"}
    assert det.loc["ptt", "recall"] == 0        # its rules need 30+ rows (this run has fewer) and name no ratio rule
    assert det.loc["config_aware", "recall"] == 1 and det.loc["config_aware", "correct_cause"] == 1
    assert det.loc["folk", "false_alarm_control"] == 1 and det.loc["config_aware", "false_alarm_control"] == 0
    mid = cell(cat, "zero_reward", "ppo/cartpole/native", onset="mid").query("kind == 'detector'").set_index("name")
    assert mid.loc["config_aware", "before_onset"] == 0 and mid.loc["folk", "before_onset"] == 1
    zero = cell(cat, "zero_reward", "ppo/cartpole/native").query("kind == 'detector'").set_index("name")
    # config_aware waits for 10 updates of exactly-zero reward before naming the fault
    assert zero.loc["config_aware", "delay_right_median"] == 9 and zero.loc["folk", "delay_median"] == 0


def test_markdown_reports_protocol_summary_and_sections(store):
    root = store
    md = (root / "catalogue" / "CATALOGUE.md").read_text()
    assert "Even seeds calibrate, odd seeds are held\nout" in md
    assert "| [shared_policy](faults/shared_policy.md) |" in md and "![where each fault manifested" in md
    assert "### Faults that left no trace" in md
    assert "## Healthy baselines" in md and "ppo_single_pass/cartpole/native | yes | 6 |" in md
    # each cell's tables and traces are on its fault's page
    page = (root / "catalogue" / "faults" / "shared_policy.md").read_text()
    assert "\n## shared_policy | ppo/cartpole/native\n" in page
    assert "| ratio_pinned | 0.9 | 100% [44%, 100%] | 0% [0%, 43%] | 100% [44%, 100%] | not specific" in page
    assert "Healthy controls that mimic it: ratio_pinned (100%)" in page
    assert "![traces](../plots/traces_shared_policy" in page


def test_a_truncated_stored_file_is_skipped_with_one_line(store, tmp_path):
    """A build over a store one of whose files was cut short reads every other run, says which run it
    skipped in one line, and reports its cells (views=false: the views read the runs the build read)."""
    root = cartpole_runs(store, tmp_path / "results")
    rid = next(p.name for p in (root / "runs").iterdir() if "shared_policy-s5" in p.name)
    path = root / "runs" / rid / "metrics.parquet"
    original = path.read_bytes()
    path.write_bytes(original[: len(original) // 3])
    out = run("harness.catalogue", f"results_dir={root}", "plots=false", "dataset=false", "n_mc=500", "views=false")
    assert out.returncode == 0, out.stderr
    warnings = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(warnings) == 1 and rid in warnings[0] and warnings[0].startswith("warning: skipping run")
    assert RunStore(root).problem(rid).startswith("metrics.parquet has")
    assert "wrote" in out.stdout and "manifested" in out.stdout
    cat = pd.read_parquet(root / "catalogue" / "catalogue.parquet")
    assert cell(cat, "shared_policy", "ppo/cartpole/native")["n_faulty"].eq(5).all()     # the other five seeds


def test_dataset_has_labels_runs_splits_and_datasheet(store):
    root = store
    data = pd.read_parquet(root / "dataset" / "data.parquet")
    runs = pd.read_parquet(root / "dataset" / "runs.parquet")
    splits = pd.read_parquet(root / "dataset" / "splits.parquet")
    for col in ("run_id", "update", "env_step", "fault", "fault_active", "is_control", "algo", "env",
                "backend", "seed", "onset", "status", *CANONICAL):
        assert col in data.columns, col
    assert len(runs) == 6 * 9 + 4 * 2 and len(data) == runs["n_updates"].sum()
    assert set(runs["status"]) == {"ok", "diverged", "crashed"}
    assert {"configured.lr", "effective.lr", "configured.n_epochs", "effective.n_epochs"} <= set(runs.columns)
    assert data.groupby("run_id")["fault"].nunique().max() == 1
    assert set(splits.columns) >= {"run_id", "by_seed", "heldout_cartpole", "heldout_toyseq"}
    toyseq = runs.set_index("run_id")["env"] == "toyseq"
    assert (splits.set_index("run_id")["heldout_toyseq"].eq("test") == toyseq).all()
    sheet = (root / "dataset" / "DATASHEET.md").read_text()
    assert "| shared_policy | ppo/cartpole/native |" in sheet and "## Library versions" in sheet
    assert "- torch: " in sheet
    assert "harness/__main__.py" not in sheet     # commands as a user types them, not the checkout's path
    from harness.analysis.dataset import as_module_command
    assert as_module_command("/src/harness/__main__.py -m +sweep=dataset seed=1") == "python -m harness -m +sweep=dataset seed=1"
    assert as_module_command("rlfh -m +sweep=dataset") == "rlfh -m +sweep=dataset"
    # words a shell would split or expand are quoted, so the command can be pasted back
    stored = "/src/harness/__main__.py -m hydra.sweeper.setups=[{algo:ppo,env:acrobot,extra:['env.engine=envpool']}]"
    assert as_module_command(stored) == (
        "python -m harness -m \"hydra.sweeper.setups=[{algo:ppo,env:acrobot,extra:['env.engine=envpool']}]\"")
    assert as_module_command("rlfh -m hydra.sweeper.setups_only=[ppo/acrobot/sb3]") == (
        "rlfh -m 'hydra.sweeper.setups_only=[ppo/acrobot/sb3]'")


def test_statistics():
    assert stats.auroc(np.array([2.0, 3.0]), np.array([1.0, 1.0])) == 1
    assert stats.auroc(np.array([0.0, 2.0]), np.array([1.0, 1.0])) == 0.5
    rng = np.random.default_rng(0)
    assert stats.auroc_pvalue(np.arange(5) + 10.0, np.arange(5.0), True, rng) == pytest.approx(2 / 32)
    assert stats.auroc_pvalue(np.arange(5) + 10.0, np.arange(5.0), False, rng) == pytest.approx(2 / 252)
    lo, hi = stats.wilson(0, 5)
    assert lo == 0 and 0.4 < hi < 0.45
    assert stats.fisher_greater(5, 5, 0, 5) == pytest.approx(1 / 252)
    assert stats.holm([0.01, 0.04, float("nan"), 0.03]) == pytest.approx([0.03, 0.06, float("nan"), 0.06],
                                                                        nan_ok=True)
    # one-sided: exact over the C(10, 5) = 252 relabellings, in the direction asked only
    assert stats.one_sided_perm_p(np.arange(5) + 10.0, np.arange(5.0), rng, 2000) == pytest.approx(1 / 252)
    assert stats.one_sided_perm_p(np.arange(5.0), np.arange(5) + 10.0, rng, 2000) == 1
    # an exact enumeration stays exact when it happens to have n_mc rows
    assert stats.auroc_pvalue(np.arange(5) + 10.0, np.arange(5.0), False, rng, n_mc=252) == pytest.approx(2 / 252)
    # fallback: 0.025 for the first, then halving shares plus the level a rejection passes on
    assert stats.fallback([0.01, 0.2, 0.01], 0.05) == [True, False, True]          # 0.025, 0.0375, 0.0125
    assert stats.fallback([0.03, 0.004, 0.004], 0.05) == [False, True, True]       # 0.025, 0.0125, 0.025
    assert stats.fallback([0.3, 0.3, 0.3, 0.004], 0.05) == [False] * 3 + [True]   # the last two get 1/8 each
    assert stats.fallback([0.3] * 4 + [0.004], 0.05) == [False] * 5                # 1/16 of 0.05 < 0.004
    assert stats.fallback([0.04], 0.05) == [True] and stats.fallback([float("nan")], 0.05) == [False]
    assert stats.fallback([], 0.05) == []


def test_an_item_that_fails_does_not_end_the_manifestation_test():
    """A signature that separated 5/5 vs 0/5 on calibration but fires on 2/5 held-out seeds (p 0.22)
    came first and ended the fixed sequence before a metric that separates the held-out seeds
    (adv_sign_flip on Acrobot, return -500 vs -85: 'no trace'); the fallback procedure tests the metric
    too, and a signature behind a failing metric as well."""
    from harness.catalogue.protocol import CellEvidence, manifested_by

    signature = CellEvidence("return_falls", 0.22, 1.0, fitted=True)
    metric = CellEvidence("return_mean (AUROC)", 0.004, 1.0)
    assert manifested_by([signature, metric]) == ["return_mean (AUROC)"]
    assert manifested_by([CellEvidence("approx_kl (AUROC)", 0.5, 1.0),
                          CellEvidence("vf_coef_effective_high", 0.004, 1.0, fitted=True)]) == ["vf_coef_effective_high"]
    assert manifested_by([CellEvidence("reward_zero", 0.004, 1.0, fitted=True),
                          CellEvidence("entropy (AUROC)", 0.3, 0.9)]) == ["reward_zero"]
    assert manifested_by([CellEvidence("entropy (AUROC)", 0.3, 0.9)]) == []
    # when both pass, the named signature is listed first (what a reader sees first)
    assert manifested_by([CellEvidence("clipfrac (AUROC)", 0.004, 1.0),
                          CellEvidence("clipfrac_inconsistent", 0.004, 1.0, fitted=True)]) == [
        "clipfrac_inconsistent", "clipfrac (AUROC)"]


@pytest.mark.parametrize("args, message", [
    (["trace_metrics=[reward_mean,nope]"], "unknown metric 'nope' in trace_metrics"),
    (["n_mc=1"], "n_mc=1 is out of range"),
    (["results_dir=/nonexistent/dir"], "no runs under /nonexistent/dir/runs"),
    (["merge=/nonexistent/part"], "merge=/nonexistent/part: no built part there (no catalogue/build.json)"),
    (["merge=/nonexistent/part", "render=only"], "merge= with render=, publish= or refit="),
])
def test_bad_catalogue_arguments_are_one_line(args, message, tmp_path):
    out = run("harness.catalogue", *args, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [f"error: {out.stderr.strip()[7:]}"] and message in out.stderr


@pytest.mark.parametrize("kind", ["forest", "logistic:-1", "logistic:x", "boosting:2"])
def test_bad_model_kind_is_one_line(kind, tmp_path):
    (tmp_path / "results" / "runs").mkdir(parents=True)
    out = run("harness.catalogue", f"model_kind={kind}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (f"error: model_kind={kind!r}; valid choices: boosting, extratrees, logistic "
                                  "(logistic:C with C > 0)")


# ---- a small store: two seeds of one fault, no healthy twins -----------------------------------
# (conftest.py: small_runs, two seeds of zero_reward and two look-alike controls, and part, its build)


@pytest.mark.parametrize("controls", [True, False], ids=["controls", "no-controls"])
def test_a_small_store_builds_with_plots(small_runs, part, tmp_path, controls):
    if controls:
        root, written = part
    else:
        root = tmp_path / "results"
        (root / "runs").mkdir(parents=True)
        for run_dir in (small_runs / "runs").iterdir():
            if not run_dir.name.startswith("ppo_single_pass"):
                shutil.copytree(run_dir, root / "runs" / run_dir.name)
        written = write(CatalogueSettings(root, n_mc=200, trace_metrics=(), plots=True, dataset=False, model=False))
    out = root / "catalogue"
    assert {"catalogue", "views", "markdown", "faults", "pages"} <= set(written)
    assert all(path.exists() for path in written.values())
    cat = pd.read_parquet(out / "catalogue.parquet")
    # every column is there even with no metric row (plots sort a cell's metrics by p_value)
    assert list(cat.columns) == list(CATALOGUE_COLUMNS)
    assert not (cat["kind"] == "metric").any() and cat["p_value"].isna().all()
    assert set(cat["kind"]) == {"signature", "detector"} and cat["n_healthy"].eq(0).all()
    assert cat["n_control"].eq(2 if controls else 0).all()
    baselines = pd.read_parquet(out / "baselines.parquet")
    assert "rate" in baselines and len(baselines) == (len(SIGNATURES) if controls else 0)
    plots = out / "plots"
    assert (plots / "verdicts.png").exists() and len(list(plots.glob("heatmap_*.png"))) == cat["setup"].nunique()
    assert len(list(plots.glob("traces_*.png"))) == 1
    md = (out / "CATALOGUE.md").read_text()
    assert "| [zero_reward](faults/zero_reward.md) |" in md and "## Healthy baselines" in md
    page = (out / "faults" / "zero_reward.md").read_text()
    assert "\n## zero_reward | ppo/cartpole/native\n" in page and "![traces](../plots/traces_zero_reward" in page
    assert "[`zero_reward`](faults/zero_reward.md) |" in (out / "FAULTS.md").read_text()


def test_a_cell_holding_two_runs_of_one_seed_is_refused(store_dir, tmp_path):
    """Two runs of one seed in one cell (a mid-run fault trained at onset 1 and at onset 2 for seed 0:
    a store filled by two plans, as the SB3 Acrobot part was by hand) used to be counted as two seeds
    (n_faulty 18 from 10 seeds); the build now stops with one line naming the cell and the runs."""
    root = tmp_path / "results"
    stored(store_dir, root, *(["fault=zero_reward", *TINY, "seed=0", f"fault.onset={onset}"] for onset in (1, 2)))
    with pytest.raises(ConfigError, match=r"^cell zero_reward onset=mid \| ppo/cartpole/native holds 2 faulty runs "
                                          r"of seed 0 \(.+, .+\): the store holds two plans' runs for one cell"):
        RunSet.load(root).cells()
    out = run("harness.catalogue", f"results_dir={root}", "dataset=false", "fit_model=false", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip().startswith("error: cell zero_reward onset=mid"), out.stderr


def test_a_fault_of_a_later_code_version_still_finds_its_twins():
    """base_key drops what makes a run faulty (fault name, parameters, code version) and the seed: a
    fault whose ``version`` was bumped (adv_std_no_floor is at 2, fault=none at 1) keeps its healthy
    twins (it lost them when the version was left in the key)."""
    from harness.analysis.runs import base_key
    from harness.pipeline.compose import make_experiment
    from harness.pipeline.train import healthy_twin

    exp = make_experiment(["fault=adv_std_no_floor", "fault.variant=zero_std", *GRPO, "seed=3"])
    faulty, twin = exp.key(), healthy_twin(exp).key()
    assert faulty["fault_version"] == 2 and twin["fault_version"] == 1
    assert base_key({"config": faulty}) == base_key({"config": {**twin, "seed": 5}})


def test_a_run_that_diverged_in_its_first_update_has_an_empty_view(store_dir, tmp_path):
    """whiten_tiny_batch at onset 0 goes NaN in its first update: SB3 would have logged only its time/
    rows. The catalogue's views read that as a run with no metric (it raised the reader's 'none of the
    metrics profile=sb3 knows' and stopped the whole build)."""
    from harness.analysis.runs import RunSet
    from harness.catalogue.views import view_frames

    # on Acrobot no episode ends in a first update of 2 x 16 steps: no rollout/ row either (one-sample
    # minibatches: 16 x 64 steps would be 10 240 optimizer steps, 25 s)
    stored(store_dir, tmp_path, ["fault=whiten_tiny_batch", "env=acrobot", "algo.num_envs=2", "algo.n_steps=16",
                                 "env.total_timesteps=64", "seed=0"])
    rs = RunSet.load(tmp_path)
    (rid,) = [r for r, m in rs.metas.items() if m["fault"] == "whiten_tiny_batch"]
    assert rs.metas[rid]["status"] == "diverged" and len(rs.metrics[rid]) == 1
    frame = view_frames(rs, "sb3")(rid)
    assert frame["update"].tolist() == rs.metrics[rid]["update"].tolist()
    assert frame["nonfinite"].tolist() == [1.0]
    assert not frame.drop(columns=["update", "nonfinite"]).notna().to_numpy().any()
    assert set(CANONICAL) <= set(frame.columns)
    for sig in SIGNATURES.values():          # every signature reads it (one raised KeyError: 'approx_kl')
        sig.check(frame, rs.metas[rid])


def test_a_run_that_diverged_at_its_onset_is_compared_with_its_twins_same_update():
    """whiten_tiny_batch goes non-finite in its onset update: no update completed after the onset, so
    its twin's window was empty and the catalogue published 'no trace' for a run that diverged at once.
    The twin is now read over the update at which the faulty run went non-finite."""
    from harness.catalogue.protocol import Window, window_rows

    faulty = pd.DataFrame({"update": [0, 1, 2], "nonfinite": [0, 0, 1], "approx_kl": [0.01, 0.01, np.nan]})
    twin = pd.DataFrame({"update": [0, 1, 2, 3], "nonfinite": [0, 0, 0, 0], "approx_kl": [0.01] * 4})
    at_onset = Window(onset=2, length=0, diverged=True)
    assert window_rows(faulty, at_onset)["update"].tolist() == [2]
    assert window_rows(twin, at_onset)["update"].tolist() == [2]          # it was empty
    assert window_rows(twin, Window(onset=2, length=0))["update"].tolist() == []
    meta = {"algo": "ppo", "config": {}}
    assert SIGNATURES["nonfinite"].check(window_rows(faulty, at_onset), meta).fired
    assert not SIGNATURES["nonfinite"].check(window_rows(twin, at_onset), meta).fired
    # a run that completed its updates: its twin is read over the same ones, nothing more
    assert window_rows(twin, Window(onset=1, length=2))["update"].tolist() == [1, 2]


def test_a_twin_read_by_several_cells_is_read_once_per_build(store, tmp_path, monkeypatch):
    """A setup's healthy twins and controls are read by every cell of the setup over the same windows:
    their rows, signature results and summaries are computed once per build (and per view), and the
    cells' verdicts are those of reading every run afresh for each cell."""
    from harness.analysis.runs import RunSet
    from harness.catalogue import protocol
    from harness.catalogue.build import build
    from harness.catalogue.rows import Catalogue

    rs = RunSet.load(cartpole_runs(store, tmp_path))
    read: list[tuple[int, protocol.Window]] = []
    window_rows = protocol.window_rows

    def counted(metrics, window):
        read.append((id(metrics), window))
        return window_rows(metrics, window)

    monkeypatch.setattr(protocol, "window_rows", counted)
    once = build(rs, n_mc=200, detectors=False)
    assert len(read) == len(set(read))                      # no run read twice over one window
    twins = [h for c in rs.cells() for h in c.healthy]
    assert len(twins) > len(set(twins))                     # ... although cells share their twins
    rng = np.random.default_rng(0)                          # build's, drawn from in cell order
    afresh = Catalogue([protocol.evaluate_cell(c, rs, rng, 200, lambda rid: rs.metrics[rid]) for c in rs.cells()])
    pd.testing.assert_frame_equal(once.frame(), afresh.frame())


def test_progress_lines_name_the_loop_and_leave_the_items_alone():
    """A build over thousands of runs reads cells for tens of minutes: a line every ``every_s``
    seconds (here every item), none after the last item, and the items pass through unchanged."""
    from harness.catalogue.progress import progress

    lines: list[str] = []
    assert list(progress(iter("abcd"), 4, "the sb3 view", every_s=0.0, echo=lines.append)) == list("abcd")
    assert len(lines) == 3 and lines[0].startswith("[catalogue] the sb3 view: 1/4 cells, 0:00 elapsed, ETA")
    assert not list(progress([], 0, "x", echo=lines.append)) and len(lines) == 3
    quiet: list[str] = []
    assert list(progress(range(3), 3, "x", every_s=3600, echo=quiet.append)) == [0, 1, 2] and not quiet


# ---- a catalogue assembled from parts ------------------------------------------------------------

def test_a_part_merged_replaces_its_cells_and_says_how_it_was_made(store, part, tmp_path):
    """A catalogue built whole (the store's), then a part (the small store: zero_reward on CartPole at
    another budget) merged into it: the part's cell replaces the one of the same name with its rows,
    views and trace plot, every other cell is kept as it was, the agreement is what a build of the merged
    cells gives, parts.json and CATALOGUE.md say which part holds which cells and how to regenerate it,
    and merging the same part again changes nothing."""
    from harness.catalogue.agreement import frame_agreement
    from harness.catalogue.build import render
    from harness.catalogue.parts import merge, read_parts
    from harness.catalogue.rows import agreement_frame

    (part, _), whole = part, tmp_path / "results"
    shutil.copytree(store / "catalogue", whole / "catalogue")
    before = pd.read_parquet(whole / "catalogue" / "catalogue.parquet")
    built = pd.read_parquet(part / "catalogue" / "catalogue.parquet")
    base_before = pd.read_parquet(whole / "catalogue" / "baselines.parquet")
    name = "zero_reward | ppo/cartpole/native"
    assert set(built["cell"]) == {name} and name in set(before["cell"])
    old_plot = f"traces_{cell_slug(name, before.loc[before['cell'] == name, 'base'].iloc[0])}.png"
    new_plot = f"traces_{cell_slug(name, built['base'].iloc[0])}.png"
    assert old_plot != new_plot and (whole / "catalogue" / "plots" / old_plot).exists()

    parts = merge(whole, part)
    render(whole)
    after = pd.read_parquet(whole / "catalogue" / "catalogue.parquet")

    def same(a: pd.DataFrame, b: pd.DataFrame) -> None:      # a missing value is missing, None or NaN
        pd.testing.assert_frame_equal(*(f.reset_index(drop=True).astype(object).where(f.notna().values, None)
                                        for f in (a, b)))
    same(after[after["cell"] == name], built)
    same(after[after["cell"] != name], before[before["cell"] != name])
    views = pd.read_parquet(whole / "catalogue" / "views.parquet")
    part_views = pd.read_parquet(part / "catalogue" / "views.parquet")
    pd.testing.assert_frame_equal(views[views["cell"] == name].reset_index(drop=True), part_views)
    plots = whole / "catalogue" / "plots"
    assert (plots / new_plot).exists() and not (plots / old_plot).exists()
    # the part's setups' healthy baselines replace theirs; the other setups' stay
    keys = ["algo", "algo_variant", "env", "backend"]
    part_base = pd.read_parquet(part / "catalogue" / "baselines.parquet")
    base_after = pd.read_parquet(whole / "catalogue" / "baselines.parquet")
    mine = base_after[keys].apply(tuple, axis=1).isin(set(part_base[keys].apply(tuple, axis=1)))
    assert mine.any() and not mine.all()
    same(base_after[mine], part_base)
    same(base_after[~mine], base_before[~base_before[keys].apply(tuple, axis=1).isin(set(part_base[keys].apply(tuple,
                                                                                                          axis=1)))])
    agreement = whole / "catalogue" / "backends.parquet"
    expected = agreement_frame(frame_agreement(after))
    assert expected.empty != agreement.exists()
    if agreement.exists():
        pd.testing.assert_frame_equal(pd.read_parquet(agreement), expected)

    assert [p.cells for p in parts] == [sorted(set(before["cell"]) - {name}), [name]]
    assert read_parts(whole / "catalogue") == parts
    assert parts[0].name.startswith("built whole") and parts[0].commands == []
    assert parts[1].setups == ["ppo/cartpole/native"] and parts[1].runs == 4 and parts[1].results_dir == str(part)
    assert parts[1].commands[-1] == f"python -m harness.catalogue merge={part}"
    md = (whole / "catalogue" / "CATALOGUE.md").read_text()
    assert "Built in parts" in md and f"python -m harness.catalogue merge={part}" in md
    assert "python -m harness -m +sweep=catalogue results_dir=" not in md    # no whole-build recipe for a merged one

    merge(whole, part)
    pd.testing.assert_frame_equal(pd.read_parquet(whole / "catalogue" / "catalogue.parquet"), after)
    assert read_parts(whole / "catalogue") == parts


def test_a_part_replaces_the_earlier_form_of_a_cell_built_under_another_name(store, part, tmp_path):
    """A fault whose settings changed since the catalogue was built (excessive_lr's factor 100 -> 3)
    gets a cell of another name: merging its new part must drop the old form (rows, views, trace plot
    and its place in parts.json), not publish both, and leave the same fault at the other onset kind
    and on other setups alone."""
    from harness.catalogue.parts import merge, read_parts

    (part, _), whole = part, tmp_path / "results"
    shutil.copytree(store / "catalogue", whole / "catalogue")
    name = "zero_reward | ppo/cartpole/native"
    old_name = "zero_reward scale=0.5 | ppo/cartpole/native"        # as if built by an earlier form
    other = "zero_reward onset=mid | ppo/cartpole/native"
    for table in ("catalogue.parquet", "views.parquet"):
        frame = pd.read_parquet(whole / "catalogue" / table)
        assert name in set(frame["cell"])
        frame["cell"] = frame["cell"].replace({name: old_name})
        if table == "catalogue.parquet":                             # a same-kind row on another onset stays
            extra = frame[frame["cell"] == old_name].assign(cell=other, onset_kind="mid")
            frame = pd.concat([frame, extra], ignore_index=True)
        frame.to_parquet(whole / "catalogue" / table)
    base = pd.read_parquet(whole / "catalogue" / "catalogue.parquet").set_index("cell")["base"]
    old_plot = whole / "catalogue" / "plots" / f"traces_{cell_slug(old_name, base[old_name].iloc[0])}.png"
    old_plot.parent.mkdir(parents=True, exist_ok=True)
    old_plot.write_bytes(b"old form")
    before = set(pd.read_parquet(whole / "catalogue" / "catalogue.parquet")["cell"])

    parts = merge(whole, part)
    after = pd.read_parquet(whole / "catalogue" / "catalogue.parquet")
    views = pd.read_parquet(whole / "catalogue" / "views.parquet")
    assert old_name not in set(after["cell"]) and old_name not in set(views["cell"])
    assert set(after["cell"]) == (before - {old_name}) | {name}
    assert other in set(after["cell"]) and not old_plot.exists()
    assert all(old_name not in p.cells for p in read_parts(whole / "catalogue")) and parts[-1].cells == [name]


def test_a_part_retires_its_setups_cells_that_todays_code_refuses(store, part, tmp_path):
    """A part of a setup retires that setup's older cells whose fault today's code refuses to train there
    (TRL's part and the whole build's adv_std_no_floor loo_residue cell, a form TRL has no estimator for:
    it used to stay published beside the part); the part's note says which and why, other setups' cells
    stay even when refused, and a cell no check refuses stays."""
    from harness.catalogue.parts import merge, read_parts
    from harness.commands.catalogue import refused_today

    (part, _), whole = part, tmp_path / "results"
    shutil.copytree(store / "catalogue", whole / "catalogue")
    before = pd.read_parquet(whole / "catalogue" / "catalogue.parquet")
    shared = set(before.loc[(before["fault"] == "shared_policy") & (before["setup"] == "ppo/cartpole/native"), "cell"])
    grpo = set(before.loc[before["fault"] == "adv_std_no_floor", "cell"])
    assert shared and grpo

    def refused(row: dict) -> str | None:
        return "no longer trained here" if row["fault"] in ("shared_policy", "adv_std_no_floor") else None

    parts = merge(whole, part, refused=refused)
    after = pd.read_parquet(whole / "catalogue" / "catalogue.parquet")
    views = pd.read_parquet(whole / "catalogue" / "views.parquet")
    assert not shared & set(after["cell"]) and not shared & set(views["cell"])
    assert grpo <= set(after["cell"])                                   # another setup: not the part's to retire
    assert parts[-1].note == "; ".join(f"retired {c}: no longer trained here" for c in sorted(shared))
    assert read_parts(whole / "catalogue")[-1].note == parts[-1].note
    assert not any(shared & set(p.cells) for p in parts)
    assert merge(whole, part, refused=refused)[-1].note == parts[-1].note     # merged again: still says so
    from harness.catalogue.build import render
    render(whole)                                    # the note names cells ("fault | setup"): one table column
    row_of_part = next(line for line in (whole / "catalogue" / "CATALOGUE.md").read_text().splitlines()
                       if line.startswith("| ppo/cartpole/native |") and "retired" in line)
    assert row_of_part.count(" | ") == 5 and "retired shared_policy \\| ppo/cartpole/native" in row_of_part
    # today's code, asked as a run command would be
    row = {"algo": "grpo", "algo_variant": "default", "env": "toyseq", "backend": "trl", "fault": "adv_std_no_floor",
           "fault_params": '{"variant": "loo_residue"}', "onset_kind": "0", "onsets": "0"}
    assert "cannot be expressed on backend=trl" in refused_today(row)
    assert refused_today({**row, "fault_params": '{"variant": "zero_std"}'}) is None
    assert refused_today({**row, "backend": "native", "onset_kind": "mid", "onsets": "3, 5"}) is None


def test_the_agreement_of_a_catalogue_frame_is_the_builds(store):
    """backends.parquet recomputed from catalogue.parquet (as a merge does) equals what the build wrote
    from its cells: the store has GRPO only natively, so both say no fault ran on two backends; the
    published catalogue (native and TRL cells) is compared too."""
    from harness.catalogue.agreement import frame_agreement
    from harness.catalogue.rows import agreement_frame

    for cat_dir in (store / "catalogue", ROOT / "results" / "catalogue"):
        cat = pd.read_parquet(cat_dir / "catalogue.parquet")
        expected = agreement_frame(frame_agreement(cat))
        path = cat_dir / "backends.parquet"
        assert expected.empty != path.exists()
        if path.exists():
            pd.testing.assert_frame_equal(pd.read_parquet(path), expected, check_dtype=False)


def test_a_fault_that_changed_nothing_logged_is_told_from_one_no_test_could_see(store_dir, tmp_path):
    """truncation_as_termination acts only when an episode reaches the step cap: on CartPole (cap 500)
    in 3 updates of 4 envs x 32 steps none does, so each faulty run logs exactly what its twin logs. The
    cell says so (``n_unchanged``; the page: "logged exactly what their twins did"), which a user reads
    differently from a change too faint for the test; a fault that acted (zero_reward) counts none."""
    stored(store_dir, tmp_path, *([f"fault={fault}", *TINY, f"seed={seed}"]
                                  for seed in (0, 1) for fault in ("none", "truncation_as_termination", "zero_reward")))
    write(CatalogueSettings(tmp_path, n_mc=200, trace_metrics=(), plots=False, dataset=False, model=False))
    cat = pd.read_parquet(tmp_path / "catalogue" / "catalogue.parquet")
    assert cell(cat, "truncation_as_termination", "ppo/cartpole/native")["n_unchanged"].eq(2).all()
    assert cell(cat, "zero_reward", "ppo/cartpole/native")["n_unchanged"].eq(0).all()
    page = (tmp_path / "catalogue" / "faults" / "truncation_as_termination.md").read_text()
    assert "2 faulty seeds (0 diverged, 0 crashed, 2 logged exactly what their twins did)" in page
    assert "logged exactly what" not in (tmp_path / "catalogue" / "faults" / "zero_reward.md").read_text()


def test_same_metrics_compares_every_tested_metric_value_for_value():
    from harness.catalogue.protocol import same_metrics

    a = pd.DataFrame({"update": [0, 1], "approx_kl": [0.01, np.nan], "entropy": [0.6, 0.5]})
    assert same_metrics(a, a.copy(), ["approx_kl", "entropy", "grad_norm"])       # NaN == NaN; absent in both
    assert not same_metrics(a, a.assign(entropy=[0.6, 0.5 + 1e-12]), ["entropy"])   # exact, not close
    assert not same_metrics(a, a.iloc[:1], ["entropy"])                             # a shorter window
    assert not same_metrics(a, a.drop(columns="entropy"), ["entropy"])              # logged by one only
    assert not same_metrics(a.iloc[:0], a.iloc[:0], ["entropy"])                    # nothing to compare


# ---- what a build records, and the command's switches (docs/catalogue.md, "Building it") -----------------

def test_a_build_says_when_by_which_code_and_from_how_many_runs(part):
    """``catalogue/build.json``: when it was built, by which code (the checkout's commit, ``+changes`` when its
    code differs), from how many runs, and the commands the runs were trained by; a build with
    ``dataset=false`` and no model writes neither."""
    import re

    from harness.catalogue.parts import _git

    root, written = part
    record = json.loads((root / "catalogue" / "build.json").read_text())
    assert written["build"] == root / "catalogue" / "build.json"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", record["built"])
    if not _git("rev-parse", "HEAD", cwd=ROOT):
        assert record["code"] == "unknown"                  # a copy outside git
    else:
        assert re.fullmatch(r"[0-9a-f]{7}(\+changes)?", record["code"]), record["code"]
        assert _git("cat-file", "-t", record["code"].removesuffix("+changes"), cwd=ROOT) == "commit"
    assert record["runs"] == 4 and record["results_dir"] == str(root)
    stored = {m["command"] for m in RunStore(root).iter_metas()}
    assert record["sweep_commands"] and set(record["sweep_commands"]) == stored
    assert not (root / "dataset").exists() and not (root / "catalogue" / "model" / "diagnosis.joblib").exists()


def test_the_switches_of_the_catalogue_command_set_what_it_builds(tmp_path):
    """``plots=false``, ``views=false``, ``dataset=false`` and ``fit_model=false`` turn off what write() builds;
    by default it builds all of them, the model included."""
    from hydra import compose, initialize_config_dir

    from harness.config import CONF_DIR

    (tmp_path / "runs").mkdir()
    settings = {}
    for name, overrides in (("default", []), ("off", ["plots=false", "views=false", "dataset=false", "fit_model=false"])):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
            settings[name] = CatalogueSettings.from_cfg(compose("catalogue", [f"results_dir={tmp_path}", *overrides]))
    on, off = settings["default"], settings["off"]
    assert (on.plots, on.views, on.dataset, on.model) == (True, True, True, True)
    assert (off.plots, off.views, off.dataset, off.model) == (False, False, False, False)


def test_a_whole_build_is_one_part_again(part, tmp_path):
    """After a merge the catalogue records its parts (parts.json); building it whole from a store removes
    that record: it is one part again."""
    from harness.catalogue.parts import PARTS_FILE, merge

    (part, _), root = part, tmp_path / "results"
    shutil.copytree(part / "runs", root / "runs")
    shutil.copytree(part / "catalogue", root / "catalogue")
    merge(root, part)
    assert (root / "catalogue" / PARTS_FILE).exists()
    write(CatalogueSettings(root, n_mc=200, trace_metrics=(), plots=False, dataset=False, model=False, views=False))
    assert not (root / "catalogue" / PARTS_FILE).exists()
    assert "Built in parts" not in (root / "catalogue" / "CATALOGUE.md").read_text()


def test_backends_disagree_where_a_held_out_rate_differs_by_50_points():
    """docs/catalogue.md, "Native vs TRL": a fault x signature pair disagrees between backends when its held-out
    rate on faulty or on healthy seeds differs by >= 50 points; a fault run on one backend is not compared."""
    from harness.catalogue.agreement import agreement

    key = ("zero_reward", "{}", "0", "grpo", "default", "toyseq")

    def rows(native, trl):
        return {r.signature: r.disagree for r in agreement([(key, "native", native), (key, "trl", trl)])}

    assert rows([("reward_zero", True, 1.0, 0.0), ("kl_ref_zero", False, 0.9, 0.1)],
                [("reward_zero", True, 0.5, 0.0), ("kl_ref_zero", False, 0.5, 0.0)]) == {
        "reward_zero": True, "kl_ref_zero": False}                      # 50 points apart; 40 and 10
    assert rows([("loss_zero", False, 0.2, 0.0)], [("loss_zero", False, 0.2, 0.6)]) == {"loss_zero": True}   # healthy
    assert agreement([(key, "native", [("reward_zero", True, 1.0, 0.0)])]) == []

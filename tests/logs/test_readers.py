"""harness.logs: reading real framework logs, views of stored runs, export and read-back."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.config import ConfigError
from harness.detection.base import opaque_id
from harness.logs import RawLog, load_log, load_profile, read, to_canonical
from harness.logs.views import StoredRun, render
from harness.logs.writers import FORMATS, write
from tests.commands import Ran, run
from tests.paths import ROOT

DATA = ROOT / "tests" / "data"
RESULTS = ROOT / "results"
CLEANRL_RUN = DATA / "cleanrl" / "CartPole-v1__ppo__1__1795358967"


def command(module: str, *args: str) -> Ran:
    """``python -m <module> ARGS`` from the repository, in this process."""
    return run(module, *args, cwd=ROOT)


def ranked(stdout: str) -> list[str]:
    """The answers diagnose ranks, in order: the lines of its ``probabilities:`` block."""
    lines = stdout.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith("probabilities")), None)
    if head is None:
        return []
    out = []
    for line in lines[head + 1:]:
        parts = line.split()       # name, probability after the evidence, (the model's own)
        if not line.startswith("  ") or len(parts) != 3:
            break
        float(parts[1])
        out.append(parts[0])
    return out


# ---- real framework logs ----------------------------------------------------------------------
def test_cleanrl_run_dir_written_by_cleanrl_ppo():
    """runs/<run_name> as cleanrl/ppo.py wrote it (8 iterations of 512 steps): losses per update,
    episodes aggregated per update's rollout, value loss rescaled, hyperparameters from its text summary."""
    log = load_log(DATA / "cleanrl")
    assert log.profile == "cleanrl" and log.detected and log.algo == "ppo"
    m = log.metrics
    assert list(m["update"]) == list(range(8)) and list(m["step"]) == [512.0 * (i + 1) for i in range(8)]
    events = read(CLEANRL_RUN).records
    logged_v = events[events["key"] == "losses/value_loss"]["value"].to_numpy()
    np.testing.assert_allclose(m["value_loss"], 2 * logged_v)          # CleanRL logs 0.5 x MSE
    ep = events[events["key"] == "charts/episodic_return"]
    first = ep[ep["step"] <= 512]["value"]
    assert m["return_mean"].iloc[0] == pytest.approx(first.mean()) and m["return_std"].iloc[0] == pytest.approx(first.std(ddof=0))
    assert log.config["lr"] == 2.5e-4 and log.config["n_epochs"] == 4 and log.config["clip_range"] == 0.2
    assert log.unused == ["charts/SPS"]


def test_sb3_progress_and_tensorboard_written_by_sb3(tmp_path):
    """SB3's own logger (csv, json, tensorboard): train/* one iteration late, aligned per update."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import configure

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu")
    model.set_logger(configure(str(tmp_path / "sb3"), ["csv", "json", "tensorboard"]))
    model.learn(total_timesteps=64 * 5)
    model.save(tmp_path / "sb3" / "ppo_cartpole.zip")
    csv = load_log(tmp_path / "sb3" / "progress.csv")
    assert csv.profile == "sb3" and csv.detected and len(csv.metrics) == 5
    progress = pd.read_csv(tmp_path / "sb3" / "progress.csv")
    assert progress["train/clip_fraction"].isna().iloc[0]                       # the first dump has no train/*
    np.testing.assert_array_equal(csv.metrics["clipfrac"].iloc[:4], progress["train/clip_fraction"].iloc[1:])
    assert np.isnan(csv.metrics["clipfrac"].iloc[4])                             # the last train() is never dumped
    np.testing.assert_allclose(csv.metrics["entropy"].iloc[:4], -progress["train/entropy_loss"].iloc[1:])
    assert csv.config["n_steps"] == 64 and csv.config["n_minibatches"] == 2 and csv.config["n_epochs"] == 2
    # SB3 saves clip_range as a pickled schedule (not read); the constant it logs fills the gap
    assert csv.config["clip_range"] == pytest.approx(0.2)      # its constant schedule, read from model.zip
    (tmp_path / "bare").mkdir()          # without the saved model the log carries no config: none is made up
    shutil.copy(tmp_path / "sb3" / "progress.csv", tmp_path / "bare" / "progress.csv")
    assert load_log(tmp_path / "bare" / "progress.csv").config == {}
    js = load_log(tmp_path / "sb3" / "progress.json")
    pd.testing.assert_frame_equal(js.metrics, csv.metrics)
    events = sorted((tmp_path / "sb3").glob("events.out.tfevents*"))
    tb = to_canonical(read(events[0]), "auto")
    assert tb.profile == "sb3"
    cols = ["clipfrac", "approx_kl", "policy_loss", "return_mean", "lr"]
    assert csv.metrics[cols].iloc[:4].notna().all().all()          # read from SB3's names (NaN would equal NaN below)
    np.testing.assert_allclose(tb.metrics[cols], csv.metrics[cols].astype(np.float32), rtol=1e-6)
    assert list(tb.metrics["step"]) == list(csv.metrics["step"]) == [64.0 * (i + 1) for i in range(5)]


def test_sb3_fixture_at_defaults_directory_prefers_progress_csv():
    """tests/data/sb3: SB3's PPO at its defaults (4 iterations of 2048 steps), all three logger outputs."""
    in_dir = load_log(DATA / "sb3")
    assert in_dir.source.startswith("CSV") and in_dir.metrics.equals(load_log(DATA / "sb3" / "progress.csv").metrics)
    tb = load_log(next((DATA / "sb3").glob("events*")))
    assert in_dir.metrics["approx_kl"].iloc[:3].notna().all()         # train/approx_kl, one iteration late
    np.testing.assert_allclose(tb.metrics["approx_kl"], in_dir.metrics["approx_kl"].astype(np.float32), rtol=1e-6)
    assert in_dir.metrics["lr"].iloc[0] == 3e-4 and np.isnan(in_dir.metrics["lr"].iloc[-1])


def test_trl_trainer_state_and_tensorboard_written_by_grpo_trainer():
    """trainer_state.json and the TensorBoard run of a real GRPOTrainer (num_iterations=2): reward only
    on generating steps, one row per optimizer step, the same values in both."""
    state = load_log(DATA / "trl" / "checkpoint-6" / "trainer_state.json")
    assert state.profile == "trl" and state.algo == "grpo" and list(state.metrics["step"]) == [1, 2, 3, 4, 5, 6]
    assert state.metrics["reward_mean"].notna().tolist() == [True, False] * 3
    assert state.metrics["kl_ref"].notna().all() and set(state.used) >= {"reward/digits", "reward/short"}
    assert load_log(DATA / "trl" / "checkpoint-6").metrics.equals(state.metrics)   # the checkpoint directory
    assert load_log(DATA / "trl").metrics.equals(state.metrics)        # output_dir: its latest checkpoint
    tb = load_log(DATA / "trl" / "runs" / "Nov22_14-54-31_vm")
    assert tb.profile == "trl"
    np.testing.assert_allclose(tb.metrics[["loss", "reward_mean", "kl_ref"]],
                               state.metrics[["loss", "reward_mean", "kl_ref"]].astype(np.float32), rtol=1e-6)
    assert tb.config["group_size"] == 4 and tb.config["num_iterations"] == 2 and tb.config["beta"] == 0.04


def test_verl_console_logs():
    """verl console lines with the Ray prefix, a val-only step:0, noise lines; and the older :.3f format."""
    log = load_log(DATA / "verl" / "console.log")
    assert log.profile == "verl" and log.algo == "grpo" and list(log.metrics["step"]) == list(range(1, 13))
    assert log.metrics["reward_mean"].is_monotonic_increasing and "val-core/openai/gsm8k/acc/mean@1" in log.unused
    old = load_log(DATA / "verl" / "console_v03.log")
    assert old.profile == "verl" and len(old.metrics) == 6 and old.used["entropy"] == "actor/entropy_loss"


def test_a_verl_console_log_as_ray_colours_and_interleaves_it():
    """verl <= 0.1's console as Ray leaves it (the reference GSM8K logs of Dec 2024 have this shape;
    tests/data/verl/console_v01_ppo.log is written after them): colour escapes around the "(main_task
    pid=N)" prefix, the config printed by pprint over many lines with another worker's output cut into
    one of them and other lines between, step lines from step:0 with verl <= 0.1's names (the lr logged
    x 1e4 as actor/lr(1e-4), the reward's KL penalty as critic/kl)."""
    raw = read(DATA / "verl" / "console_v01_ppo.log")
    assert raw.format == "verl_console" and "its printed config" in raw.source
    assert raw.config["actor_rollout_ref.actor.optim.lr"] == 1e-06 and raw.config["algorithm.adv_estimator"] == "gae"
    assert raw.config["trainer.total_epochs"] == 15 and raw.config["trainer.logger"] == ["console"]
    log = load_log(DATA / "verl" / "console_v01_ppo.log", algo="ppo")
    assert list(log.metrics["step"]) == list(range(8)) and log.used["lr"] == "actor/lr(1e-4)"
    np.testing.assert_allclose(log.metrics["lr"], 1e-6)
    assert log.used["kl_ref"] == "critic/kl" and log.metrics["kl_ref"].iloc[-1] == pytest.approx(0.07)
    assert log.config["lr"] == 1e-06 and log.config["n_epochs"] == 1 and log.config["clip_range"] == 0.2


def test_trl_grpo_logs_of_before_march_2025_are_read_with_their_names():
    """TRL <= 0.15 logged completion_length and rewards/<fn> (no /mean): read as length_mean and the
    per-function rewards, so a format function stuck at 0 is seen (DPO's rewards/chosen is not a reward
    function: that log is still refused as DPOTrainer's)."""
    log = load_log(DATA / "trl_v014")
    assert log.algo == "grpo" and log.used["length_mean"] == "completion_length"
    assert log.used["reward/strict_format_reward_func"] == "rewards/strict_format_reward_func"
    assert (log.metrics["reward/soft_format_reward_func"] == 0).all() and log.unused == ["epoch"]
    from harness.analysis import evidence
    assert evidence.observe(log.metrics, log.config, "trl")["reward_function_exactly_zero"] is True
    with pytest.raises(ConfigError, match="DPOTrainer"):
        load_log(DATA / "trl_dpo")


def test_the_config_todays_verl_prints_is_read_as_the_log_s_hyperparameters(tmp_path):
    """verl's main_ppo.py pprints the resolved config inside the TaskRunner before training: its GRPO
    settings become the log's hyperparameters (a dict that is not verl's config, printed later, is not)."""
    cfg = """{'actor_rollout_ref': {'actor': {'clip_ratio': 0.2,
                                 'kl_loss_coef': 0.001,
                                 'optim': {'lr': 1e-06},
                                 'ppo_epochs': 1},
                       'rollout': {'n': 5}},
 'algorithm': {'adv_estimator': 'grpo'},
 'data': {'train_batch_size': 1024}}""".splitlines()
    lines = (DATA / "verl" / "console.log").read_text().splitlines()
    log = tmp_path / "train.log"
    log.write_text("\n".join([*lines[:2], *(f"(TaskRunner pid=48211) {c}" for c in cfg),
                              "(TaskRunner pid=48211) {'bos_token_id': None, 'eos_token_id': 151645}", *lines[2:]]) + "\n")
    loaded = load_log(log)
    assert loaded.algo == "grpo" and loaded.metrics.equals(load_log(DATA / "verl" / "console.log").metrics)
    assert loaded.config == {"clip_range": 0.2, "beta": 0.001, "lr": 1e-06, "num_iterations": 1, "group_size": 5,
                             "n_prompts": 1024}


def test_a_log_without_a_return_or_reward_says_so():
    """CleanRL's scripts log charts/episodic_return only under gymnasium's old final_info: adapted to
    gymnasium 1.x they often log none. Such a log is read (the losses) with a note saying what it cannot show."""
    rows = [(u, 2048.0 * (u + 1), key, value) for u in range(20)
            for key, value in (("losses/approx_kl", 0.01), ("losses/clipfrac", 0.1), ("losses/value_loss", 1.0 / (u + 1)),
                               ("losses/policy_loss", -0.01), ("losses/entropy", 1.4 - 0.01 * u))]
    log = to_canonical(pd.DataFrame(rows, columns=["row", "step", "key", "value"]), "cleanrl")
    assert any("no episode return or reward (cleanrl writes it as charts/episodic_return)" in n for n in log.notes)
    assert not any("no episode return" in n for n in load_log(CLEANRL_RUN).notes)


def test_verl_ppo_with_a_critic_is_read_as_ppo_on_a_language_model_and_answered():
    """verl's PPO (a value model, and prompt lengths only a language model's run logs) is PPO-LM: read with
    its critic's metrics (the whitened advantage mean is not read) and answered, not refused."""
    log = load_log(DATA / "verl" / "console_v01_ppo.log")
    assert log.algo == "ppo_lm" and log.profile == "verl"
    assert {"value_mean", "value_loss", "value_clipfrac", "reward_mean"} <= set(log.used)
    assert "adv_mean" not in log.used and any("whitens" in n for n in log.notes)
    assert log.config["kl_coef"] == 0.001 and log.config["n_epochs"] == 1
    assert load_log(DATA / "verl" / "console_v01_ppo.log", algo="grpo").algo == "grpo"
    out = command("harness.diagnose", f"log={DATA / 'verl' / 'console_v01_ppo.log'}", f"results_dir={RESULTS}")
    assert out.returncode == 0, out.stderr
    assert "algorithm ppo_lm" in out.stdout and "formed from the invariants and exact signatures alone" in out.stdout


@pytest.mark.parametrize("log, dialect", [
    (CLEANRL_RUN, "cleanrl"), (DATA / "trl" / "checkpoint-6" / "trainer_state.json", "trl"),
    (DATA / "verl" / "console.log", "verl"), (DATA / "sb3" / "progress.csv", "sb3"),
])
def test_diagnose_ranks_real_logs_without_a_profile(log, dialect):
    out = command("harness.diagnose", f"log={log}", f"results_dir={RESULTS}")
    assert out.returncode == 0, out.stderr
    assert f"dialect: {dialect} (detected from its names)" in out.stdout and "mapped: " in out.stdout
    assert len(ranked(out.stdout)) >= 2


# ---- views and the round trip -------------------------------------------------------------------
@pytest.mark.parametrize("algo, profile", [("ppo", "canonical"), ("ppo", "cleanrl"), ("ppo", "sb3"), ("ppo", "verl"),
                                           ("grpo", "canonical"), ("grpo", "trl"), ("grpo", "verl")])
def test_export_reads_back_as_the_view(runs, tmp_path, algo, profile):
    """to_canonical(render(run, p), p) in memory equals reading each exported format back (auto-detected);
    TensorBoard stores float32 scalars, as the frameworks' own writers do."""
    raw = render(StoredRun.load(runs.ppo_store, runs.ppo) if algo == "ppo" else StoredRun.load(runs.grpo_store, runs.grpo),
                 profile)
    for fmt in FORMATS:
        write(raw, profile, fmt, tmp_path / fmt)
        back = load_log(tmp_path / fmt)
        float32 = fmt == "tensorboard" or (fmt == "native" and profile == "cleanrl")
        mem = RawLog(raw.records.assign(value=raw.records["value"].astype(np.float32).astype(float)), raw.config) \
            if float32 else raw
        expected = to_canonical(mem, profile)
        if profile == "sb3" and fmt == "tensorboard":    # SB3 logs train/n_updates with exclude="tensorboard"
            expected.metrics = expected.metrics.drop(columns=["epochs_total"], errors="ignore")
        assert back.profile == profile, fmt
        pd.testing.assert_frame_equal(back.metrics, expected.metrics, check_exact=True, obj=f"{profile} {fmt}")
        if not (fmt == "native" and profile in ("trl", "verl", "sb3")):   # their own files carry no config
            assert back.config == expected.config, fmt
        for path in (tmp_path / fmt).rglob("*"):                           # no label in the log or its config
            if path.is_file():
                data = path.read_bytes()
                assert not any(word in data for word in (b"tiny_clip", b"is_control", b"onset", b"variant")), path


def test_views_follow_each_frameworks_definitions(runs):
    run = StoredRun.load(runs.ppo_store, runs.ppo)
    steps, m = run.steps, run.metrics
    cleanrl = to_canonical(render(run, "cleanrl"), "cleanrl").metrics
    last = steps.groupby("update").tail(1).set_index("update")
    np.testing.assert_allclose(cleanrl["approx_kl"], last["approx_kl"])           # last minibatch
    np.testing.assert_allclose(cleanrl["clipfrac"], m["clipfrac"])                 # all minibatches
    sb3 = to_canonical(render(run, "sb3"), "sb3").metrics
    last_epoch = steps[steps["epoch"] == steps.groupby("update")["epoch"].transform("max")]
    np.testing.assert_allclose(sb3["approx_kl"].iloc[:-1], last_epoch.groupby("update")["approx_kl"].mean().iloc[:-1])
    np.testing.assert_allclose(sb3["entropy"].iloc[:-1], m["entropy"].iloc[:-1])
    assert np.isnan(sb3["approx_kl"].iloc[-1])
    window = run.episodes[run.episodes["update"] <= 1]["env_return"].tail(100).mean()
    assert sb3["return_mean"].iloc[1] == pytest.approx(window)                   # Monitor, last 100 episodes
    g = StoredRun.load(runs.grpo_store, runs.grpo)
    trl = to_canonical(render(g, "trl"), "trl").metrics
    assert len(trl) == len(g.steps) and trl["reward_mean"].notna().sum() == len(g.metrics)
    np.testing.assert_allclose(trl["kl_ref"], g.steps["kl_ref"])                   # beta != 0: kl per step
    verl = to_canonical(render(g, "verl"), "verl").metrics
    np.testing.assert_allclose(verl["policy_loss"], g.steps.groupby("update")["policy_loss"].sum())


def test_export_sb3_tensorboard_clip_fraction_and_diagnose_reads_it_back(runs, tmp_path):
    store, ppo = runs.ppo_store, runs.ppo
    out = tmp_path / "export"
    res = command("harness.export", f"run={ppo}", "profile=sb3", "format=tensorboard", f"out={out}",
                  f"results_dir={store}")
    assert res.returncode == 0, res.stderr
    oid = opaque_id(ppo)
    labels = json.loads((out / "labels.json").read_text())
    assert labels[oid]["fault"] == "tiny_clip" and labels[oid]["run_id"] == ppo
    events = read(out / oid).records
    clip = events[events["key"] == "train/clip_fraction"].sort_values("step")
    metrics = StoredRun.load(store, ppo).metrics
    batch = 16 * 64
    # the value SB3 writes at iteration i (step i * batch) is update i - 2's (written one iteration late)
    assert list(clip["step"]) == [batch * i for i in range(2, len(metrics) + 1)]
    np.testing.assert_array_equal(clip["value"], metrics["clipfrac"].iloc[:-1].astype(np.float32))
    for path in (out / oid).rglob("*"):
        data = path.read_bytes()
        assert b"tiny_clip" not in data and ppo.encode() not in data and b"onset" not in data
    diag = command("harness.diagnose", f"log={out}", f"select={oid}", f"results_dir={RESULTS}")
    assert diag.returncode == 0, diag.stderr
    assert "dialect: sb3 (detected from its names)" in diag.stdout and "train/clip_fraction -> clipfrac" in diag.stdout


def test_a_profile_for_another_algorithm_is_one_line(runs, tmp_path):
    out = command("harness.export", f"run={runs.grpo}", "profile=sb3", f"out={tmp_path}", f"results_dir={runs.grpo_store}")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "profile=sb3 logs PPO runs only" in out.stderr


# ---- bad input: one line, exit 2 ------------------------------------------------------------------
def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "empty.csv").write_text("")
    (tmp / "noise.bin").write_bytes(bytes(range(256)) * 8)
    event = next(CLEANRL_RUN.glob("events*"))
    (tmp / "cut").mkdir()
    (tmp / "cut" / event.name).write_bytes(event.read_bytes()[:120])
    (tmp / "nolog").mkdir()
    (tmp / "nolog" / "notes.md").write_text("no log here\n")
    for name in ("a", "b"):
        shutil.copytree(CLEANRL_RUN, tmp / "many" / name)
    return {
        "empty": ([f"log={tmp / 'empty.csv'}"], "is empty"),
        "binary": ([f"log={tmp / 'noise.bin'}"], "is not a TensorBoard event file"),
        "truncated": ([f"log={tmp / 'cut'}"], "hold no scalars"),
        "no log": ([f"log={tmp / 'nolog'}"], "no training log in this directory; looked for TensorBoard event files"),
        "wrong profile": ([f"log={CLEANRL_RUN}", "profile=verl"], "its names look like profile=cleanrl"),
        "several runs": ([f"log={tmp / 'many'}"], "holds 2 runs; choose one with select=NAME: a, b"),
    }


@pytest.mark.parametrize("case", ["empty", "binary", "truncated", "no log", "wrong profile", "several runs"])
def test_bad_input_is_one_line(tmp_path, case):
    args, message = _bad_inputs(tmp_path)[case]
    out = command("harness.diagnose", *args, f"results_dir={RESULTS}")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert message in out.stderr, out.stderr


def test_partial_files_are_read_up_to_the_last_complete_record(tmp_path):
    event = next(CLEANRL_RUN.glob("events*"))
    data = event.read_bytes()
    (tmp_path / event.name).write_bytes(data[: len(data) - 40])
    cut = load_log(tmp_path / event.name)
    full = load_log(event)
    assert 0 < len(cut.metrics) <= len(full.metrics)
    pd.testing.assert_frame_equal(cut.metrics.iloc[:-1], full.metrics.iloc[: len(cut.metrics) - 1])
    lines = (DATA / "verl" / "console.log").read_text().splitlines(keepends=True)
    (tmp_path / "console.log").write_text("".join(lines[:9]) + lines[9][:200])      # a line being written
    assert list(load_log(tmp_path / "console.log").metrics["step"]) == [1, 2, 3, 4]   # step 5 is not complete
    (tmp_path / "progress.csv").write_text("time/iterations,train/approx_kl,train/clip_fraction\n1,,\n2,0.01,0.1\n3,0.0")
    assert load_log(tmp_path / "progress.csv").metrics["approx_kl"].tolist() == [0.01]
    with pytest.raises(ConfigError, match="choose one with run=NAME: a, b"):
        for name in ("a", "b"):
            shutil.copytree(CLEANRL_RUN, tmp_path / "many" / name)
        read(tmp_path / "many")
    assert load_log(tmp_path / "many", run="b").metrics.equals(load_log(CLEANRL_RUN).metrics)


def test_wandb_history_export_of_a_trl_run(tmp_path):
    """run.history() as CSV: W&B bookkeeping columns, TRL's train/ prefix, empty cells where a key was
    not logged at that step (reward only on generating steps)."""
    state = load_log(DATA / "trl" / "checkpoint-6" / "trainer_state.json")
    rows = json.loads((DATA / "trl" / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    history = pd.DataFrame([{"_step": i, "_runtime": 1.5 * i, "_timestamp": 1.7e9 + i,
                             "train/global_step": r["step"], **{f"train/{k}": v for k, v in r.items() if k != "step"}}
                            for i, r in enumerate(rows)])
    history.to_csv(tmp_path / "history.csv", index=False)
    wandb = load_log(tmp_path / "history.csv")
    assert wandb.profile == "trl" and "_runtime" not in wandb.unused
    pd.testing.assert_frame_equal(wandb.metrics, state.metrics)


def test_hyperparameters_from_the_command_line(tmp_path):
    out = command("harness.diagnose", f"log={DATA / 'sb3' / 'progress.csv'}", "+hp.lr=3e-4", "+hp.n_epochs=10",
                  f"results_dir={RESULTS}")
    assert out.returncode == 0 and "config: lr=0.0003, n_epochs=10" in out.stdout, out.stderr
    bad = command("harness.diagnose", f"log={DATA / 'sb3' / 'progress.csv'}", "+hp.lr_typo=3", f"results_dir={RESULTS}")
    assert bad.returncode == 2 and "hyperparameter 'lr_typo' is not one a ppo config holds" in bad.stderr


def test_an_sb3_log_dumped_every_5_iterations_keeps_one_row_per_dump():
    """SB3's learn(log_interval=5) (tests/data/sb3_interval5: a real progress.csv, PPO on CartPole, 4 envs x
    256 steps, 4 epochs of one minibatch) dumps at iterations 5, 10, .., 75. Shifting train/* back one
    iteration (right for log_interval=1) split every dump into a train row and a rollout row, 30
    half-empty rows; and train/n_updates' increment over 5 iterations was read as one update's
    optimizer steps (80, 5x the 16 configured). Now: 15 rows, each holding its dump's metrics, 16
    optimizer steps per update (the first row's span unknown: empty), and a note saying so."""
    log = load_log(DATA / "sb3_interval5" / "progress.csv", config={"n_minibatches": 4})  # 1024 / batch 256
    m = log.metrics
    assert len(m) == 15 and list(m["update"]) == list(range(4, 75, 5))
    assert m[["approx_kl", "clipfrac", "return_mean", "lr"]].notna().all().all()
    assert np.isnan(m["optimizer_steps"].iloc[0]) and (m["optimizer_steps"].iloc[1:] == 16).all()
    assert any("one SB3 dump every 5 iterations" in n for n in log.notes)
    healthy = load_log(DATA / "sb3" / "progress.csv", config={"n_minibatches": 32})   # log_interval=1: as before
    assert not any("dump every" in n for n in healthy.notes)
    steps = healthy.metrics["optimizer_steps"]
    assert steps.notna().sum() == 3 and steps.dropna().eq(320).all()     # 10 epochs x 2048 / 64, first row too


def test_an_sb3_monitor_file_is_named_as_such_and_never_taken_for_a_run(tmp_path):
    """SB3's Monitor (what make_vec_env(monitor_dir=) and rl-zoo3 leave beside a run: ``0.monitor.csv``)
    holds episodes, not training metrics. Given one, the error said its JSON header matched no profile;
    a directory of them asked which "run" to pick; beside a progress.csv they made the directory hold
    several runs. Now: one line naming the file for what it is, and the progress.csv is the run."""
    import gymnasium as gym
    from stable_baselines3.common.monitor import Monitor

    env = Monitor(gym.make("CartPole-v1"), str(tmp_path / "mon" / "0"))      # SB3 writes mon/0.monitor.csv
    env.reset(seed=0)
    for _ in range(60):
        if any(env.step(env.action_space.sample())[2:4]):
            env.reset()
    env.close()
    shutil.copy(tmp_path / "mon" / "0.monitor.csv", tmp_path / "mon" / "1.monitor.csv")
    monitor = tmp_path / "mon" / "0.monitor.csv"
    assert monitor.read_text().startswith('#{"t_start"')
    with pytest.raises(ConfigError, match=r"is stable-baselines3's Monitor file \(each episode's return"):
        read(monitor)
    with pytest.raises(ConfigError, match=r"only stable-baselines3's Monitor files \(0.monitor.csv, 1.monitor.csv"):
        read(tmp_path / "mon")
    shutil.copy(DATA / "sb3" / "progress.csv", tmp_path / "mon" / "progress.csv")
    raw = read(tmp_path / "mon")
    assert raw.source.startswith(f"CSV {tmp_path / 'mon' / 'progress.csv'}") and not raw.notes


# ---- what docs/diagnose.md and docs/metric-names.md say is read -----------------------------------------

def test_wandb_json_lines_and_a_wandb_config_beside_them_are_read(tmp_path):
    """The rows of ``run.scan_history()`` as JSON lines (W&B's ``_step``, ``_runtime``, ``_timestamp``, TRL's
    ``train/`` prefix, a key absent where it was not logged) read as the same metrics as the CSV export; a W&B
    run's ``config.yaml`` beside them ({key: {value: ...}}) is read as the log's hyperparameters."""
    state = load_log(DATA / "trl" / "checkpoint-6" / "trainer_state.json")
    rows = json.loads((DATA / "trl" / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    with (tmp_path / "history.jsonl").open("w") as fh:
        for i, r in enumerate(rows):
            fh.write(json.dumps({"_step": i, "_runtime": 1.5 * i, "_timestamp": 1.7e9 + i, "train/global_step": r["step"],
                                 **{f"train/{k}": v for k, v in r.items() if k != "step"}}) + "\n")
    (tmp_path / "config.yaml").write_text("_wandb:\n  value:\n    cli_version: 0.19.1\nlearning_rate:\n  desc: null\n"
                                          "  value: 1.0e-06\nnum_generations:\n  value: 4\nbeta:\n  value: 0.04\n")
    log = load_log(tmp_path / "history.jsonl")
    assert log.profile == "trl" and log.detected
    pd.testing.assert_frame_equal(log.metrics, state.metrics)
    assert {k: log.config[k] for k in ("lr", "group_size", "beta")} == {"lr": 1e-6, "group_size": 4, "beta": 0.04}


def test_an_output_dir_is_read_at_its_latest_checkpoint(tmp_path):
    """TRL's output_dir holds a checkpoint-N per save: diagnose reads the latest (checkpoint-10 after
    checkpoint-9, by number), whose trainer_state.json holds the whole log so far."""
    source = json.loads((DATA / "trl" / "checkpoint-6" / "trainer_state.json").read_text())
    for n, keep in ((9, 2), (10, len(source["log_history"]))):
        (tmp_path / f"checkpoint-{n}").mkdir()
        state = {**source, "log_history": source["log_history"][:keep]}
        (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(json.dumps(state))
    full = load_log(DATA / "trl" / "checkpoint-6" / "trainer_state.json")
    assert load_log(tmp_path).metrics.equals(full.metrics) and len(full.metrics) == 6


def _names_log(keys: list[str]) -> pd.DataFrame:
    return pd.DataFrame([(u, float(u + 1), k, 0.1 * (u + 1)) for u in range(10) for k in keys],
                        columns=["row", "step", "key", "value"])


@pytest.mark.parametrize("keys, whose", [
    (["train/loss", "rollout/exploration_rate", "rollout/ep_rew_mean", "train/learning_rate"], "stable-baselines3's DQN"),
    (["train/actor_loss", "train/critic_loss", "train/ent_coef", "rollout/ep_rew_mean"], "stable-baselines3's SAC, TD3"),
    (["losses/qf1_loss", "losses/actor_loss", "losses/alpha", "charts/episodic_return"], "CleanRL's sac_continuous"),
    (["loss", "learning_rate", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "kl"],
     "TRL's DPOTrainer or KTOTrainer"),
    (["loss", "grad_norm", "learning_rate", "mean_reward", "margin", "accuracy"], "TRL's RewardTrainer"),
])
def test_a_log_of_another_algorithm_of_the_framework_is_refused(keys, whose):
    """docs/diagnose.md: SB3's DQN, SAC, TD3 or DDPG, CleanRL's dqn.py or sac_continuous_action.py, TRL's
    KTOTrainer or RewardTrainer (the names each profile lists under ``other_algos``) are refused in one line
    naming whose log it is (SB3's A2C, CleanRL's dqn.py and TRL's SFT and DPO trainers: test_diagnose.py)."""
    from harness.logs.canonical import AnotherAlgorithm

    with pytest.raises(AnotherAlgorithm, match=f"^the log looks like {re.escape(whose)}") as info:
        to_canonical(_names_log(keys), "auto")
    assert "\n" not in str(info.value)


NEW_PPO_TRAINER = ["loss/policy_avg", "loss/value_avg", "val/clipfrac_avg", "policy/approxkl_avg", "policy/clipfrac_avg",
                   "policy/entropy_avg", "objective/kl", "objective/entropy", "objective/non_score_reward",
                   "objective/rlhf_reward", "objective/scores", "val/num_eos_tokens", "val/ratio", "val/ratio_var",
                   "lr", "eps", "episode"]
OLD_PPO_TRAINER = ["objective/kl", "objective/kl_coef", "objective/entropy", "ppo/mean_non_score_reward", "ppo/mean_scores",
                   "ppo/std_scores", "env/reward_mean", "env/reward_std", "ppo/loss/policy", "ppo/loss/value",
                   "ppo/loss/total", "ppo/policy/entropy", "ppo/policy/approxkl", "ppo/policy/policykl",
                   "ppo/policy/clipfrac", "ppo/policy/advantages_mean", "ppo/policy/ratio", "ppo/returns/mean",
                   "ppo/val/vpred", "ppo/val/error", "ppo/val/clipfrac", "ppo/val/var_explained", "ppo/learning_rate",
                   "tokens/responses_len_mean", "time/ppo/total"]


@pytest.mark.parametrize("keys, prefix", [(NEW_PPO_TRAINER, ""), (NEW_PPO_TRAINER, "train/"), (OLD_PPO_TRAINER, "")],
                         ids=["trl>=0.12", "trl>=0.12-tensorboard", "trl<=0.11"])
def test_trl_ppo_trainer_names_of_both_generations_are_read_as_ppo_on_a_language_model(keys, prefix):
    """TRL's PPOTrainer, both naming generations (0.12+: loss/value_avg, val/ratio, ...; <= 0.11: ppo/*,
    objective/*, env/*), is PPO-LM under profile trl_ppo: every documented key is read or listed as
    not a metric, and the value loss (0.5 x the clipped MSE in both) is read as the MSE."""
    log = to_canonical(_names_log([prefix + k for k in keys]), "auto")
    assert (log.profile, log.algo) == ("trl_ppo", "ppo_lm")
    profile = load_profile("trl_ppo")
    assert all(profile.is_not_metric(profile.strip(k)) or profile.known(profile.strip(k)) for k in log.unused), log.unused
    assert {"reward_mean", "approx_kl", "clipfrac_binding", "policy_loss", "value_loss", "value_clipfrac",
            "entropy", "lr"} <= set(log.used)
    assert "kl_ref_sum" in log.used and "kl_ref" not in log.used        # a response's summed KL, not per token
    assert log.metrics["value_loss"].iloc[0] == pytest.approx(2 * 0.1)


def _maps_to(profile, name: str) -> set[str]:
    """The canonical metrics a profile reads the framework's ``name`` as (columns, episodic, counters, patterns)."""
    out = set()
    if name in profile.columns:
        column = profile.columns[name]
        out |= {column, *(profile.cumulative.get(column, [])[:1])}
    out |= set(profile.episodic.get(name, {}).values())
    for pattern, template in profile.patterns.items():
        m = re.fullmatch(pattern, name)
        if m:
            out.add(template.format(*m.groups()))
    return out


def test_the_mapping_table_of_docs_metric_names_is_what_the_profiles_read():
    """Each name docs/metric-names.md's mapping table gives for a canonical metric is read as that metric by the
    framework's profile (harness/conf/profile/*.yaml), and a blank cell is a metric the profile reads from no name."""
    import html

    from harness.logs import load_profile

    text = (ROOT / "docs" / "metric-names.md").read_text()
    table = text.split("## The harness's mapping", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| canonical")]
    profiles = [load_profile(name) for name in ("sb3", "cleanrl", "trl", "trl_ppo", "verl")]
    checked = 0
    for line in rows:
        cells = [html.unescape(c).strip() for c in line.strip().strip("|").split("|")]
        first, *rest = [c.strip() for c in cells[0].split(",")]
        canonical = {first, *(first.rsplit("_", 1)[0] + c if c.startswith("_") else c for c in rest)}
        canonical = {c.replace("<fn>", "correct") for c in canonical}
        for profile, cell in zip(profiles, cells[1:]):
            if not cell:
                assert not any(_maps_to(profile, k) & canonical for k in [*profile.columns, *profile.episodic]), \
                    (profile.name, canonical)
                continue
            for part in re.sub(r"\([^)]*\)", "", cell).split(";"):        # a remark in brackets is no name
                words = part.replace(",", " ").split()
                name = words[1] if words[0] == "from" else words[0]
                name = name.replace("<fn>", "correct")
                assert _maps_to(profile, name) & canonical, (profile.name, name, canonical)
                checked += 1
    assert checked >= 80                     # every name of the table


#: the files each format writes (docs/datasets.md, "Export"): SB3's own progress.csv / progress.json, a W&B-style
#: history with config.json beside it for the others, and each framework's native file (format=tensorboard:
#: test_export_sb3_tensorboard_clip_fraction_and_diagnose_reads_it_back)
EXPORTED = {("sb3", "csv"): ["progress.csv"], ("sb3", "jsonl"): ["progress.json"], ("sb3", "native"): ["progress.csv"],
            ("cleanrl", "csv"): ["config.json", "history.csv"], ("cleanrl", "jsonl"): ["config.json", "history.jsonl"],
            ("cleanrl", "native"): ["events.out.tfevents"], ("trl", "jsonl"): ["config.json", "history.jsonl"],
            ("trl", "native"): ["checkpoint-N/trainer_state.json"], ("verl", "native"): ["console.log"]}


def test_each_export_format_writes_the_files_the_framework_writes_and_labels_them_beside(runs, tmp_path):
    """Each run goes to DIR/<opaque id>/ in the files of its format, and DIR/labels.json maps the opaque id to
    its label (run id, fault, parameters and form, onset, seed, setup, status, control flag)."""
    from harness.logs.exporter import export

    for (profile, fmt), expected in EXPORTED.items():
        store, rid = (runs.grpo_store, runs.grpo) if profile == "trl" else (runs.ppo_store, runs.ppo)
        out = tmp_path / f"{profile}-{fmt}"
        labels = export(store, rid, profile, fmt, out, warn=lambda _: None)
        (oid,) = labels
        assert oid == opaque_id(rid) and sorted(p.name for p in out.iterdir()) == sorted([oid, "labels.json"])
        files = sorted(re.sub(r"tfevents\..*", "tfevents", re.sub(r"checkpoint-\d+", "checkpoint-N", f.split("/", 1)[1]))
                       for f in labels[oid]["files"])
        assert files == expected, (profile, fmt, files)
        label = json.loads((out / "labels.json").read_text())[oid]
        assert {"run_id", "fault", "fault_params", "fault_form", "onset_update", "seed", "setup", "status",
                "is_control"} <= set(label) and label["run_id"] == rid


class _Args:
    """A stand-in for a trainer's TrainingArguments: a module-level class pickle names by its path."""

    def __init__(self) -> None:
        self.learning_rate, self.num_ppo_epochs, self.kl_coef, self._private = 3e-4, 4, -0.05, 1


class _Payload:
    """A pickle that runs a command when loaded the usual way."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_training_args_are_read_without_running_the_pickle(tmp_path):
    """training_args.bin is ``torch.save`` of the Trainer's args: read without executing it and without the
    trainer's classes (TRL 0.26-0.28's PPOConfig exists in no later TRL), its scalar fields only."""
    import torch

    from harness.logs.readers import training_args

    args = _Args()
    args.payload = _Payload(tmp_path / "ran")
    torch.save(args, tmp_path / "training_args.bin")
    assert training_args(tmp_path) == {"learning_rate": 3e-4, "num_ppo_epochs": 4, "kl_coef": -0.05}
    assert not (tmp_path / "ran").exists()
    (tmp_path / "training_args.bin").write_bytes(b"not a zip")
    assert training_args(tmp_path) == {}

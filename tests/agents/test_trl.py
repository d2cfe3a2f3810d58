"""backend=trl: TRL's GRPOTrainer, unmodified (skipped without the [trl] extra): its own log kept beside
the run, its runs reproducible, our metrics cross-checked against its logged values; it learns (slow).
The faults on TRL (expressed or refused): tests/faults/test_framework_faults.py."""

import json
import math
import shutil

import pytest

pytest.importorskip("trl")

from harness.agents import sft
from harness.agents.trl import TRLTrainer
from harness.pipeline.compose import make_experiment
from harness.pipeline.train import get_or_train, healthy_twin
from harness.store import RunStore

UPDATE_TOKENS = 16 * 8 * 10          # n_prompts x group_size x max_new_tokens


def trl_exp(results_dir, fault, updates, *extra):
    return make_experiment(["algo=grpo", "env=toyseq", "backend=trl", f"fault={fault}",
                            f"env.total_timesteps={updates * UPDATE_TOKENS}", f"results_dir={results_dir}",
                            "twin=false", "progress=false", *extra])


def zero_and_twin(store_dir):
    """3 updates of zero_reward and its twin on TRL (the fault tests' own runs: trained once a session)."""
    exp = trl_exp(store_dir, "zero_reward", 3)
    return exp, get_or_train(exp), get_or_train(healthy_twin(exp))


def test_trl_own_log_is_kept_beside_the_run_and_checksummed(store_dir, tmp_path):
    _, run, _ = zero_and_twin(store_dir)
    path = RunStore(store_dir).run_dir(run.run_id) / "trl" / "trainer_state.json"
    assert "trl/trainer_state.json" in run.meta["files"]
    history = json.loads(path.read_text())["log_history"]
    logged = [h for h in history if "reward" in h]
    assert logged and all(h["reward"] == 0 and h["frac_reward_zero_std"] == 1 for h in logged)
    # a changed file makes the run unfinished (in a copy of the run: the session's store is shared)
    store = RunStore(tmp_path)
    shutil.copytree(RunStore(store_dir).run_dir(run.run_id), store.run_dir(run.run_id))
    assert store.problem(run.run_id) is None
    copy = store.run_dir(run.run_id) / "trl" / "trainer_state.json"
    copy.write_text(copy.read_text().replace("0.0", "0.5", 1))
    assert store.problem(run.run_id) == "trl/trainer_state.json does not match the checksum recorded in meta.json"


def test_same_config_and_seed_give_the_same_trl_metrics(store_dir, tmp_path):
    """The twin trained again in another store (with the same warm-up checkpoint, copied) is the same."""
    exp, run, twin = zero_and_twin(store_dir)
    elsewhere = trl_exp(tmp_path, "zero_reward", 3)
    shutil.copytree(sft.checkpoint_dir(exp), sft.checkpoint_dir(elsewhere))
    again = get_or_train(healthy_twin(elsewhere))
    assert not again.reused
    assert again.metrics.equals(twin.metrics)


@pytest.mark.slow
def test_healthy_trl_grpo_learns(store_dir):
    """20 updates from the warm-up checkpoint: the reward rises, every update has a gradient and not every
    group is uniform (the healthy twin of zero_reward's TRL run, which learns nothing)."""
    run = get_or_train(trl_exp(store_dir, "none", 20))
    h = run.metrics
    assert run.meta["status"] == "ok" and len(h) == 20
    assert h["reward_mean"].iloc[-5:].mean() > h["reward_mean"].iloc[:5].mean() + 0.03
    assert (h["grad_norm"] > 0).all() and (h["frac_reward_zero_std"] < 1).any()


def test_crosscheck_against_trl_logged_values_raises_on_disagreement():
    crosscheck = TRLTrainer().crosscheck
    crosscheck({"entropy": 0.5, "kl_ref": math.nan}, {"entropy": 0.5000001, "kl_ref": 0.1})
    with pytest.raises(RuntimeError, match="disagrees with TRL's logged value"):
        crosscheck({"entropy": 0.5}, {"entropy": 0.6})


def test_public_monitors_watch_a_trl_run_through_their_own_callbacks(tmp_path):
    """backend.callbacks attaches rldoctor's and rlprobe's TRL callbacks to the GRPOTrainer as their users
    do; what each reported (its verdict: read, alarm, first step, causes, raw findings) is stored with the
    run. They watch and do not change it: the run's id and metrics are those of the run without them."""
    pytest.importorskip("rl_doctor")
    pytest.importorskip("rlprobe")
    from harness.config import ConfigError

    spec = ("backend.callbacks=[{_target_:harness.detection.public.live_callback,tool:rldoctor},"
            "{_target_:harness.detection.public.live_callback,tool:rlprobe}]")
    watched = get_or_train(trl_exp(tmp_path / "watched", "zero_reward", 3, spec))
    plain = get_or_train(trl_exp(tmp_path / "plain", "zero_reward", 3))
    assert watched.run_id == plain.run_id
    assert watched.metrics.drop(columns=["wall_s"], errors="ignore").equals(
        plain.metrics.drop(columns=["wall_s"], errors="ignore"))
    run_dir = RunStore(tmp_path / "watched").run_dir(watched.run_id)
    verdicts = {tool: json.loads((run_dir / "monitors" / f"{tool}.json").read_text()) for tool in ("rldoctor", "rlprobe")}
    assert {f"monitors/{tool}.json" for tool in verdicts} <= set(watched.meta["files"])
    for tool, v in verdicts.items():
        assert v["tool"] == tool and v["read"] is True and isinstance(v["raw"], list), v
        assert v["alarm"] == bool(v["causes"]) or v["first_step"] is not None, v
    from harness.detection.public import run_tool

    replayed = run_tool("rlprobe", run_dir / "trl" / "trainer_state.json", "trl")   # the same rows, fed after the run
    assert (verdicts["rlprobe"]["alarm"], tuple(verdicts["rlprobe"]["causes"])) == (replayed.alarm, replayed.causes)
    with pytest.raises(ConfigError, match="backend=native has no framework training loop"):
        make_experiment(["algo=grpo", "env=toyseq", "backend=native", spec, f"results_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="the tools with a TRL callback are rldoctor, rlprobe"):
        trl_exp(tmp_path, "zero_reward", 1, "backend.callbacks=[{_target_:harness.detection.public.live_callback,tool:zen}]")
    with pytest.raises(ConfigError, match="_target_=nowhere.Callback cannot be imported"):
        trl_exp(tmp_path, "zero_reward", 1, "backend.callbacks=[{_target_:nowhere.Callback}]")

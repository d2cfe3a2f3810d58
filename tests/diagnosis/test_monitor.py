"""Live monitors: the diagnosis streamed while a run trains (harness.monitor), and the log follower
(harness.watch), on real CleanRL output, SB3 training and a log written by another process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.config import ConfigError
from harness.logs import load_log
from harness.monitor.core import AlarmPolicy, Monitor
from tests.commands import run as run_command
from tests.paths import DATA

PAIR = DATA / "cleanrl_pair"


def events(run: Path):
    """The (kind, tag, value, step) of a TensorBoard run in write order: what the script logged."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    for event in EventFileLoader(str(next(run.rglob("events.out.tfevents.*")))).Load():
        if not event.HasField("summary"):
            continue
        for v in event.summary.value:
            if v.metadata.plugin_data.plugin_name == "text":
                strings = tensor_util.make_ndarray(v.tensor).flatten()
                yield "text", v.tag, "\n".join(s.decode() if isinstance(s, bytes) else str(s) for s in strings), event.step
            else:
                value = v.simple_value if v.HasField("simple_value") else float(tensor_util.make_ndarray(v.tensor))
                yield "scalar", v.tag, value, event.step


def replay(run: Path, writer, updates: int) -> None:
    """Log a real CleanRL run's values again through ``writer``, up to its ``updates``-th update."""
    seen = set()
    for kind, tag, value, step in events(run):
        if kind == "text":
            writer.add_text(tag, value, step)
            continue
        if tag == "losses/value_loss":
            seen.add(step)
            if len(seen) > updates:
                break
        writer.add_scalar(tag, value, step)


@pytest.mark.parametrize("name, alarm", [("shared_policy", "shared_policy"), ("healthy", None)])
def test_cleanrl_writer_alarms_on_the_real_bug_and_not_on_the_healthy_run(name, alarm, tmp_path):
    """CleanRL's ppo.py with shared old/new log-probs, and the same config healthy (real runs kept
    under tests/data), logged again through the drop-in SummaryWriter: the first alarms naming
    shared_policy within the first updates, the second never; the run directory it writes is still
    CleanRL's log (diagnose reads the same metrics) plus the monitor's harness/ scalars."""
    from harness.monitor.tensorboard import MonitoredSummaryWriter

    run = next((PAIR / name).iterdir())
    out = tmp_path / run.name
    writer = MonitoredSummaryWriter(str(out), emit=None, stop_on="any", monitor={"budget": 1.0})
    replay(run, writer, updates=25)
    writer.close()
    assert writer.monitor.config["update_epochs"] == "4"             # from the hyperparameters text
    if alarm is None:
        assert writer.alarms == [] and not writer.should_stop
        assert writer.monitor.last.answer == "healthy"
    else:
        first = writer.alarms[0]
        assert first.answer == alarm and first.row <= 12
        assert "ratio_exactly_one" in first.evidence and writer.should_stop
        assert "shared_policy" in first.fix and "Reports:" in first.fix["shared_policy"]
    written = load_log(out)
    original = load_log(run)
    n = 25                      # (a 26th row holds the returns of the rollout logged before the stop)
    assert len(written.metrics) >= n
    for col in ("approx_kl", "clipfrac", "value_loss", "return_mean"):
        np.testing.assert_allclose(written.metrics[col].to_numpy()[:n], original.metrics[col].to_numpy()[:n], rtol=1e-6)
    assert any(k.startswith("harness/") for k in written.unused)


def _answer(name, kind="fault", evidence=None):
    from harness.analysis.model import Answer

    return Answer(name, kind, {name: 0.9}, {name: 0.9}, anomalous=0.9, threshold=0.5, healthy_weight=1.0,
                  unknown_threshold=0.35, members=(name,) if kind == "fault" else (), class_probability=0.9,
                  evidence=evidence or {})


def test_the_alarm_policy_waits_for_patience_and_alarms_once():
    policy = AlarmPolicy(patience=2, stop_on="lr_too_low", warmup=0, hold=1)
    assert policy.see(_answer("tiny_clip"), 1, 1.0) is None
    assert policy.see(_answer("healthy", "healthy"), 2, 2.0) is None          # the streak is broken
    assert policy.see(_answer("tiny_clip"), 3, 3.0) is None
    alarm = policy.see(_answer("tiny_clip"), 4, 4.0)
    assert alarm is not None and alarm.answer == "tiny_clip" and alarm.row == 4
    assert policy.see(_answer("tiny_clip"), 5, 5.0) is None                   # once per answer
    assert not policy.should_stop                                             # stop_on names another fault
    policy.see(_answer("lr_too_low"), 6, 6.0)
    assert policy.see(_answer("lr_too_low"), 7, 7.0) is not None and policy.should_stop


def test_model_only_answers_wait_for_the_warmup_and_must_hold_evidence_alarms_at_once():
    """An answer the exact evidence shows (its rate on the fault >= 4x the healthy rate) alarms after
    ``patience`` checks at any row; one resting on the model alone only after ``warmup`` rows and
    once it has held for ``hold`` rows."""
    shown = {"ratio_exactly_one": {"description": "", "rates": {"healthy": [0, 300], "shared_policy": [30, 40]}}}
    weak = {"ratio_exactly_one": {"description": "", "rates": {"healthy": [30, 300], "shared_policy": [4, 40]}}}
    policy = AlarmPolicy(patience=2, warmup=25, hold=10)
    assert [policy.see(_answer("shared_policy", evidence=weak), r, r) for r in (6, 7, 8)] == [None] * 3
    policy = AlarmPolicy(patience=2, warmup=25, hold=10)
    assert policy.see(_answer("shared_policy", evidence=shown), 6, 6) is None
    assert policy.see(_answer("shared_policy", evidence=shown), 7, 7) is not None
    policy = AlarmPolicy(patience=2, warmup=25, hold=10)
    alarms = [policy.see(_answer("tiny_clip"), r, r) for r in range(20, 40)]
    assert [a.row for a in alarms if a] == [29]                  # held rows 20-29, past the warm-up at 25


@pytest.mark.parametrize("kwargs, message", [({"stop_on": "lr_too_hi"}, "stop_on='lr_too_hi'"),
                                             ({"budget": 0.0}, "budget=0.0"), ({"patience": 0}, "patience=0")])
def test_bad_options_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        Monitor("sb3", emit=None, **kwargs)


#: another process writing a CleanRL run as torch's SummaryWriter writes it: the recorded events, one update's
#: scalars flushed every ``pause`` seconds (it imports torch, not the harness)
WRITER = """
import json, sys, time
from torch.utils.tensorboard import SummaryWriter
events, out, pause = json.load(open(sys.argv[1])), sys.argv[2], float(sys.argv[3])
w = SummaryWriter(out, flush_secs=1)
last = None
for kind, tag, value, step in events:
    if kind == "text":
        w.add_text(tag, value, step)
        continue
    if tag == "losses/value_loss" and step != last:
        last = step
        w.flush()
        time.sleep(pause)
    w.add_scalar(tag, value, step)
w.close()
"""


class _Stop(Exception):
    """Ends the follow loop once the alarm is printed."""


def test_watch_prints_the_alarm_while_the_writing_process_still_runs(tmp_path, capsys):
    """Another process writes a CleanRL run (a real shared_policy run's values, an update every 0.25 s,
    as torch's SummaryWriter writes them); the watch command's follow loop on its directory prints the
    alarm naming shared_policy before that process has finished."""
    import json

    from hydra import compose, initialize_config_dir

    from harness.commands import watch
    from harness.config import CONF_DIR

    run = next((PAIR / "shared_policy").iterdir())
    recorded = tmp_path / "events.json"
    recorded.write_text(json.dumps(list(events(run))))
    out = tmp_path / "runs" / "live"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(recorded), str(out), "0.25"])
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("watch", [f"log={out}", "interval=0.5", "idle=20"])
    watch.validate(cfg)
    printed, alarmed_while_running = [], []
    deadline = time.monotonic() + 120

    def sleep(seconds: float) -> None:        # between two reads of the log: has an alarm been printed?
        printed.append(capsys.readouterr().out)
        if "ALARM" in printed[-1]:
            alarmed_while_running.append(writer.poll() is None)
            raise _Stop
        assert time.monotonic() < deadline, "".join(printed)
        time.sleep(seconds)

    try:
        with pytest.raises(_Stop):
            watch.follow(cfg, sleep=sleep)
    finally:
        writer.kill()
        writer.wait()
    assert alarmed_while_running == [True], "".join(printed)
    alarm = next(line for line in printed[-1].splitlines() if "ALARM" in line)
    assert "shared_policy" in alarm, "".join(printed)


def test_watch_rejects_bad_input():
    result = run_command("harness.watch", "log=x", "output=yaml")
    assert result.returncode == 2 and "output='yaml'" in result.stderr
    result = run_command("harness.watch")
    assert result.returncode == 2 and "log=PATH is required" in result.stderr


def _sb3_run(tmp_path, onset: int | None, updates: int):
    """SB3's PPO on CartPole (4 epochs of 2 minibatches per rollout of 128 steps), with the
    "fresh old log-probs" patch a user's RolloutBuffer subclass switches on after ``onset`` rollouts
    (None: never): minibatches carry old log-probs recomputed with the current policy, so the ratio is
    exactly 1 (shared_policy). The monitor stops training at a shared_policy alarm."""
    import torch as th
    from stable_baselines3 import PPO
    from stable_baselines3.common.buffers import RolloutBuffer
    from stable_baselines3.common.logger import configure

    from harness.monitor.sb3 import HarnessMonitor

    class FreshOldLogProbs(RolloutBuffer):
        policy = None
        rollouts = 0

        def reset(self):
            super().reset()
            self.rollouts += 1

        def _get_samples(self, batch_inds, env=None):
            samples = super()._get_samples(batch_inds, env)
            if onset is None or self.rollouts <= onset:
                return samples
            with th.no_grad():
                _, log_prob, _ = self.policy.evaluate_actions(samples.observations, samples.actions.long().flatten())
            return samples._replace(old_log_prob=log_prob.flatten())

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=128, batch_size=64, n_epochs=4, seed=0, device="cpu",
                rollout_buffer_class=FreshOldLogProbs)
    model.rollout_buffer.policy = model.policy
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    monitor = HarnessMonitor(stop_on="shared_policy", emit=None, budget=1.0)
    model.learn(128 * updates, callback=monitor)
    return model, monitor


def test_sb3_monitor_names_a_bug_switched_on_mid_run_and_stops_training(tmp_path):
    model, monitor = _sb3_run(tmp_path, onset=5, updates=40)
    assert monitor.monitor.config["n_epochs"] == 4 and monitor.monitor.config["rollout_size"] == 128
    first = monitor.alarms[0]
    assert first.answer == "shared_policy" and "ratio_exactly_one" in first.evidence
    assert first.row <= 5 + 12                      # the last 10 rows hold the evidence, plus SB3's log lag
    assert model.num_timesteps < 128 * 40           # stopped at the alarm
    import pandas as pd
    progress = pd.read_csv(tmp_path / "log" / "progress.csv")
    assert progress["harness/p_anomalous"].notna().sum() >= 5         # the monitor's values in SB3's own log


@pytest.mark.slow


def test_sb3_monitor_raises_no_alarm_on_the_same_config_healthy(tmp_path):
    model, monitor = _sb3_run(tmp_path, onset=None, updates=30)
    assert monitor.alarms == [] and model.num_timesteps >= 128 * 30
    assert monitor.monitor.checks >= 20
    import pandas as pd
    progress = pd.read_csv(tmp_path / "log" / "progress.csv")
    assert progress["harness/p_anomalous"].notna().sum() >= 20       # the monitor's values in SB3's own log
    # 128-step rollouts are smaller than any training run's (>= 256 env steps per update): on the first rows the
    # model is unsure (the model of 2026-11-26 gives P(anomalous) 0.50-0.62 on rows 5-10, answered "anomalous,
    # cause unknown", adv_sign_flip and healthy near 0.2 each), which the monitor's warm-up and hold keep from
    # alarming; as the run grows the answer settles on healthy: under the threshold on the last third of checks
    scores = progress["harness/p_anomalous"].dropna()
    last = scores.iloc[-len(scores) // 3:]
    assert (last < progress["harness/threshold"].dropna().iloc[-len(last):]).all()


def _trl_run(base, out, onset: int | None, steps: int = 40):
    """TRL's GRPOTrainer with benchmarks/realworld's script setting (the tiny Llama warmed up on
    sorting, correct + format rewards, num_iterations=2, offline), and a subclass that sets
    ``self.num_iterations = 1`` from step ``onset`` on (None: never), a "speed-up after warm-up" left
    in while the config still says 2: ppo_epochs_ignored."""
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.realworld import trl_runs as T
    from harness.monitor.trl import HarnessTrainerCallback

    class Trainer(GRPOTrainer):
        def training_step(self, *args, **kwargs):
            if onset is not None and self.state.global_step >= onset:
                self.num_iterations = 1
            return super().training_step(*args, **kwargs)

    args = GRPOConfig(output_dir=str(out), seed=0, max_steps=steps, logging_steps=1, report_to=[], save_strategy="no",
                      disable_tqdm=True, use_cpu=True, bf16=False, gradient_checkpointing=False, learning_rate=T.LR,
                      beta=0.0, loss_type="dapo", num_iterations=2, num_generations=T.NUM_GENERATIONS,
                      per_device_train_batch_size=T.PROMPTS_PER_STEP * T.NUM_GENERATIONS,
                      max_completion_length=T.N_DIGITS + 3, temperature=1.0, warmup_steps=T.WARMUP_STEPS)
    trainer = Trainer(model=str(base), processing_class=PreTrainedTokenizerFast.from_pretrained(base), args=args,
                      reward_funcs=[T.correct, T.format_reward], train_dataset=Dataset.from_list(T.make_dataset()))
    trainer.remove_callback(PrinterCallback)
    callback = HarnessTrainerCallback.attach(trainer, stop_on="any", emit=None, budget=1.0)
    trainer.train()
    return trainer, callback


@pytest.mark.slow
def test_trl_monitor_names_a_bug_switched_on_mid_run_and_stops_training(trl_base, tmp_path):
    trainer, callback = _trl_run(trl_base, tmp_path, onset=10)
    assert callback.monitor.config["num_iterations"] == 2
    first = callback.alarms[0]
    assert first.answer == "ppo_epochs_ignored" and "generations_too_many" in first.evidence
    assert first.row <= 10 + 10
    assert trainer.state.global_step < 40                        # control.should_training_stop


@pytest.mark.slow
def test_trl_monitor_raises_no_alarm_on_the_same_config_healthy(trl_base, tmp_path):
    trainer, callback = _trl_run(trl_base, tmp_path, onset=None)
    assert callback.alarms == [] and trainer.state.global_step == 40
    assert callback.monitor.checks >= 30


class _PinnedRatio:
    """A detector of the protocol: alarms shared_policy on every update whose approx_kl is exactly 0."""

    def reset(self, run_info):
        from harness.detection.base import Alarm

        self.Alarm, self.info = Alarm, run_info

    def update(self, update_index, metrics):
        return [self.Alarm("approx_kl exactly 0", "shared_policy", 1.0)] if metrics.get("approx_kl") == 0.0 else []


@pytest.mark.parametrize("name, expected", [("shared_policy", "shared_policy"), ("healthy", None)])
def test_any_streaming_detector_can_stand_in_for_the_diagnosis(name, expected, tmp_path):
    """The same real CleanRL runs through the drop-in writer with a detector of the protocol: it sees
    every canonical row once, in order, with the run's configuration; its first alarm per fault is the
    monitor's alarm (once), and stop_on applies."""
    from harness.monitor.tensorboard import MonitoredSummaryWriter

    detector = _PinnedRatio()
    run = next((PAIR / name).iterdir())
    writer = MonitoredSummaryWriter(str(tmp_path / run.name), emit=None, stop_on="shared_policy",
                                    monitor={"budget": 1.0, "detector": detector})
    replay(run, writer, updates=20)
    writer.close()
    assert writer.monitor.detector is detector and writer.monitor._models == {}
    assert detector.info.configured.get("n_epochs") == 4 and detector.info.algo == "ppo"
    assert writer.monitor._fed >= 20
    if expected is None:
        assert writer.alarms == [] and not writer.should_stop
    else:
        assert [a.answer for a in writer.alarms] == ["shared_policy"] and writer.should_stop
        first = writer.alarms[0]
        assert first.detector == "_PinnedRatio" and first.symptom == "approx_kl exactly 0" and first.row <= 2
        assert "_PinnedRatio: approx_kl exactly 0" in first.message()


def test_a_detector_is_named_like_evaluate_names_it():
    from harness.detection.ptt import PostTrainingToolkitDetector

    monitor = Monitor("cleanrl", detector="ptt", emit=None)
    assert isinstance(monitor.detector, PostTrainingToolkitDetector)
    monitor = Monitor("cleanrl", detector={"_target_": "harness.detection.folk.FolkDetector"}, emit=None)
    assert type(monitor.detector).__name__ == "FolkDetector"
    with pytest.raises(ConfigError, match="cannot be imported"):
        Monitor("cleanrl", detector="no_such_detector", emit=None)
    with pytest.raises(ConfigError, match="is not a detector"):
        Monitor("cleanrl", detector="harness.config.ConfigError", emit=None)


def test_watch_takes_a_detector_by_name_or_class_path():
    import json

    run = next((PAIR / "shared_policy").iterdir())
    result = run_command("harness.watch", f"log={run}", "idle=0.01", "interval=0.01", "output=json",
                         "+detector._target_=tests.diagnosis.test_monitor._PinnedRatio")
    alarms = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [(a["answer"], a["detector"]) for a in alarms] == [("shared_policy", "_PinnedRatio")], result.stderr
    result = run_command("harness.watch", f"log={run}", "+detector._target_=nope.Nope")
    assert result.returncode == 2 and "detector._target_='nope.Nope' cannot be imported" in result.stderr
    result = run_command("harness.watch", f"log={run}", "idle=0.01", "interval=0.01", "detector=ptt")
    assert result.returncode == 0 and "PostTrainingToolkitDetector" in result.stdout, result.stderr


def test_the_options_default_as_docs_monitor_says():
    """The options table: stop_on None, emit print, budget 0.03, patience 2, warmup 25, hold 10, recent 10,
    results_dir "results" with no model file given, no detector; the three adapters pass the same keywords on."""
    import inspect

    from harness.monitor.sb3 import HarnessMonitor
    from harness.monitor.tensorboard import MonitoredSummaryWriter
    from harness.monitor.trl import HarnessTrainerCallback

    defaults = {k: p.default for k, p in inspect.signature(Monitor).parameters.items() if k not in ("profile", "algo",
                                                                                                       "config")}
    assert defaults == {"stop_on": None, "emit": print, "budget": 0.03, "patience": 2, "warmup": 25, "hold": 10,
                        "recent": 10, "results_dir": "results", "model": None, "detector": None}
    for adapter in (HarnessMonitor, HarnessTrainerCallback, MonitoredSummaryWriter):
        params = inspect.signature(adapter).parameters
        assert params["stop_on"].default is None and params["emit"].default is print, adapter
    writer = inspect.signature(MonitoredSummaryWriter).parameters
    assert "monitor" in writer and "budget" not in writer           # the other options go in monitor={...}


def test_checks_keep_within_their_share_of_the_wall_time():
    """``budget``: a check is skipped while the time spent in checks exceeds that share of the wall time since
    the first row, and runs again once the time since has grown (SB3's rows, logged as fast as they come)."""
    rows = pd.read_csv(DATA / "sb3_interval5" / "progress.csv").to_dict("records")
    monitor = Monitor("sb3", emit=None, budget=0.5)
    for i, row in enumerate(rows[:10]):
        monitor.log(i, row)
    checks = monitor.checks                      # the first row's check; the rest came faster than it took
    assert 1 <= checks <= 3 and monitor.spent > 0, checks
    time.sleep(monitor.spent / 0.5 + 0.05)
    monitor.log(10, rows[10])
    assert monitor.checks == checks + 1


def test_the_trl_callback_attached_first_hands_its_values_to_the_reporting_callbacks():
    """``HarnessTrainerCallback.attach`` puts the monitor before the trainer's reporting callbacks, so each logged
    entry reaches them (TensorBoard, W&B: here a callback recording what it is handed, in transformers' own
    CallbackHandler) with the monitor's harness/p_anomalous, harness/threshold and harness/alarms in it (the entries
    of a real GRPOTrainer's trainer_state.json, logged again)."""
    import json
    from types import SimpleNamespace

    pytest.importorskip("trl")
    from transformers import TrainerCallback, TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler

    from harness.monitor.trl import HarnessTrainerCallback

    class Reporter(TrainerCallback):
        def __init__(self):
            self.logs = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs))

    reporter = Reporter()
    handler = CallbackHandler([reporter], model=None, processing_class=None, optimizer=None, lr_scheduler=None)
    callback = HarnessTrainerCallback.attach(SimpleNamespace(callback_handler=handler), emit=None)
    assert handler.callbacks[0] is callback
    state, control = TrainerState(), TrainerControl()
    history = json.loads((DATA / "trl" / "checkpoint-6" / "trainer_state.json").read_text())["log_history"]
    for entry in history:
        state.global_step = entry.get("step", state.global_step)
        handler.on_log(None, state, control, logs={k: v for k, v in entry.items() if k != "step"})
    assert callback.monitor.checks >= 1 and len(reporter.logs) == len(history)
    assert all({"harness/p_anomalous", "harness/threshold", "harness/alarms"} <= set(logs) for logs in reporter.logs)


def test_watch_reads_every_5_seconds_until_10_idle_minutes_by_default():
    """docs/design.md: ``python -m harness.watch log=PATH [interval=5] [idle=600] [output=text|json]`` with the
    dialect detected (profile=auto), as diagnose does."""
    from hydra import compose, initialize_config_dir

    from harness.config import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("watch", ["log=x"], return_hydra_config=True)
    assert (cfg.interval, cfg.idle, cfg.output) == (5.0, 600.0, "text")
    assert cfg.hydra.runtime.choices.profile == "auto"


def test_stop_on_unknown_stops_at_an_anomalous_answer_of_no_known_cause_only():
    """``stop_on``: a fault's name, ``unknown`` (an answer "anomalous, cause unknown") or ``any`` alarm."""
    from harness.analysis.model import UNKNOWN

    for stop_on, answers, stops in (("unknown", ["tiny_clip"], False), ("unknown", [UNKNOWN], True),
                                    ("any", ["tiny_clip"], True)):
        policy = AlarmPolicy(patience=1, stop_on=stop_on, warmup=0, hold=1)
        for row, name in enumerate(answers, 1):
            assert policy.see(_answer(name, "unknown" if name == UNKNOWN else "fault"), row, row) is not None
        assert policy.should_stop == stops, (stop_on, answers)

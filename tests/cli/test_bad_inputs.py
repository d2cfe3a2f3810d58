"""Every bad input is one line: a non-zero exit code, no traceback, and no stored run changed.

The commands run in-process (tests.commands.run); what only a separate process shows (Ctrl-C as a signal,
the exit code ``python -m`` ends with) starts one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.commands.app import run_app
from harness.config import ConfigError
from harness.logs.exporter import export
from harness.logs.readers import read
from harness.store import RunStore
from tests.commands import Ran, run
from tests.helpers import train
from tests.paths import DATA

TINY = ["algo.num_envs=4", "algo.n_steps=32", "env.total_timesteps=384"]      # 3 updates of 128 steps


def command(module: str, *args: str) -> Ran:
    return run(module, *args)


def snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file under ``root``: its checksum, mode and modification time."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode,
                                       p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line(out: Ran, expected: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0, out.stdout
    assert len(lines) == 1, out.stderr
    assert expected in lines[0], lines[0]
    assert "Traceback" not in out.stderr + out.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory, store_dir) -> Path:
    """A store of this module's own holding one healthy run (3 updates; trained once per session in the
    shared store, then copied: these tests compare the whole store before and after)."""
    rid = train(["fault=none", *TINY, f"results_dir={store_dir}"]).run_id
    root = tmp_path_factory.mktemp("store")
    shutil.copytree(store_dir / "runs" / rid, root / "runs" / rid)
    assert RunStore(root).problem(rid) is None
    return root


@pytest.mark.parametrize("args, expected", [
    (["fault=zero_reward", "fault.onset=1000"],
     "fault.onset=1000 is beyond the run: env.total_timesteps=384 plans 3 updates (0-2), so fault=zero_reward "
     "would never switch on; choose fault.onset < 3"),
    (["fault=zero_reward", "fault.onset=3"], "fault.onset=3 is beyond the run"),
    (["env.total_timesteps=100"], "env.total_timesteps=100 buys no update (one update of algo=ppo here takes 128): "
                                  "raise env.total_timesteps to at least 128"),
    (["fault=none", "fault.onset=5"], "fault.onset=5 means nothing with fault=none"),
])
def test_run_command_refuses_before_training(store, args, expected):
    before = snapshot(store)
    out = command("harness", *TINY, *args, f"results_dir={store}")
    assert_one_line(out, expected)
    assert out.stderr.startswith("error: ")
    assert snapshot(store) == before


def test_results_dir_that_is_a_file(tmp_path):
    path = tmp_path / "results"
    path.write_text("not a store\n")
    out = command("harness", *TINY, f"results_dir={path}")
    assert_one_line(out, f"results_dir={path} is a file, not a directory")
    out = command("harness", *TINY, f"results_dir={path}/sub")
    assert_one_line(out, f"{path} (in results_dir={path}/sub) is a file, not a directory")
    assert path.read_text() == "not a store\n" and sorted(tmp_path.iterdir()) == [path]


@pytest.mark.slow
def test_ctrl_c_stops_with_one_line_and_leaves_the_store_as_it_was(store):
    """SIGINT to the command's process group (what Ctrl-C sends) part-way through a long run."""
    before = snapshot(store / "runs")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "fault=zero_reward", "env.total_timesteps=2000000",
                             "progress=false", f"results_dir={store}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            # a terminal's command starts with SIGINT's default action; a pytest-xdist
                            # worker may ignore SIGINT, and an ignored signal is inherited by children
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while len(list((store / "locks").glob("*zero_reward*"))) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)      # the lock is taken just before training starts
    time.sleep(2.0)
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == 130, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("interrupted: run ppo-cartpole-native-zero_reward-") and "was not stored" in lines[0]
    assert snapshot(store / "runs") == before            # the interrupted run was not stored, nothing else touched
    rid = lines[0].split()[2]
    assert RunStore(store).problem(rid) in ("absent", "unfinished: no meta.json")   # the next command trains it


def test_ctrl_c_outside_a_command_s_own_handler_is_one_line_and_exit_130(capsys):
    """An interrupt that lands where no command says what it was doing (validation, Hydra's set-up or
    tear-down) still ends in one line and 130, not a traceback and death by SIGINT (exit -2)."""
    def app() -> None:
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stop:
        run_app(app, argv=["fault=none"])
    assert stop.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted: ") and "nothing half-written was kept" in err[0]


def test_an_interrupt_caught_after_it_left_generated_code_still_exits_130(tmp_path):
    """CPython remembers a KeyboardInterrupt that escaped ``exec`` of a string (how dataclasses make their
    methods) even once caught, and ``python -m`` then dies by SIGINT (-2) instead of exiting 130: CI saw
    the Ctrl-C test print its one line and still end -2. run_app clears it."""
    (tmp_path / "interrupted_app.py").write_text(
        "import sys\n"
        "from harness.commands.app import run_app\n"
        "def app():\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')\n"
        "    except KeyboardInterrupt:\n"
        "        print('interrupted: the command said so', file=sys.stderr)\n"
        "        sys.exit(130)\n"
        "run_app(app, argv=['fault=none'])\n")
    out = subprocess.run([sys.executable, "-m", "interrupted_app"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 130, out.stderr
    assert out.stderr.strip().splitlines() == ["interrupted: the command said so"]


def test_diagnose_hyperparameters_are_checked_against_the_schema():
    log = DATA / "sb3"
    for args, expected in ((["+hp.lr=abc"], "hp.lr='abc' must be a number"),
                           (["+hp.norm_adv=3"], "hp.norm_adv=3 must be true or false"),
                           (["+hp.n_epochs=2.5"], "hp.n_epochs=2.5 must be an integer")):
        out = command("harness.diagnose", f"log={log}", *args)
        assert_one_line(out, expected)


@pytest.fixture()
def trainer_state() -> str:
    state = {"global_step": 3, "log_history": [{"loss": 0.5 - 0.1 * i, "reward": 0.1 * i, "step": i}
                                               for i in range(1, 4)]}
    return json.dumps(state, indent=2, sort_keys=True)


def test_truncated_trainer_state_says_so(tmp_path, trainer_state):
    path = tmp_path / "checkpoint-3" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text(trainer_state[: len(trainer_state) // 2])
    out = command("harness.diagnose", f"log={tmp_path}")
    assert_one_line(out, f"log={path} is a truncated JSON file: it stops at line")
    assert "neither CSV nor JSON lines" not in out.stderr
    path.write_text(trainer_state.replace('"loss": 0.4', '"loss": 0.4 x'))
    with pytest.raises(ConfigError, match=r"is not valid JSON: Expecting ',' delimiter at line \d+ column \d+"):
        read(tmp_path)


def test_complete_trainer_state_without_a_last_newline_is_read(tmp_path, trainer_state):
    for text in (trainer_state, json.dumps(json.loads(trainer_state))):      # indented, and on one line
        (tmp_path / "trainer_state.json").write_text(text)
        raw = read(tmp_path / "trainer_state.json")
        assert raw.format == "trainer_state"
        assert sorted(raw.records.loc[raw.records["key"] == "loss", "value"]) == pytest.approx([0.2, 0.3, 0.4])


def test_export_refuses_a_file_or_a_non_empty_out_and_overwrite_replaces(store, tmp_path):
    rid = next(RunStore(store).iter_metas())["run_id"]
    path = tmp_path / "a_file"
    path.write_text("x")
    for out, expected in ((path, f"out={path} is a file, not a directory"),
                          (path / "sub", f"{path} (in out={path}/sub) is a file")):
        with pytest.raises(ConfigError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
            export(store, rid, "cleanrl", "tensorboard", out)
    out = tmp_path / "export"
    export(store, rid, "cleanrl", "tensorboard", out)
    first = snapshot(out)
    with pytest.raises(ConfigError, match=f"^out={out} is not empty: choose a new directory, or add overwrite=true"):
        export(store, rid, "cleanrl", "tensorboard", out)
    assert snapshot(out) == first
    export(store, rid, "cleanrl", "tensorboard", out, overwrite=True)
    assert len(list(out.rglob("events.out.tfevents*"))) == 1          # replaced, not piled up
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"holds files that are not an export \(notes.txt\)"):
        export(store, rid, "cleanrl", "tensorboard", out, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"


def test_export_command_refuses_a_file_or_a_non_empty_out_with_one_line(store, tmp_path):
    before = snapshot(store)
    path = tmp_path / "a_file"
    path.write_text("x")
    assert_one_line(command("harness.export", "run=all", f"out={path}", f"results_dir={store}"),
                    f"out={path} is a file, not a directory")
    out = tmp_path / "export"
    assert command("harness.export", "run=all", f"out={out}", f"results_dir={store}").returncode == 0
    exported = snapshot(out)
    again = command("harness.export", "run=all", f"out={out}", f"results_dir={store}")
    assert_one_line(again, f"out={out} is not empty")
    assert snapshot(out) == exported and snapshot(store) == before
    assert command("harness.export", "run=all", f"out={out}", "overwrite=true", f"results_dir={store}").returncode == 0
    assert len(list(out.rglob("events.out.tfevents*"))) == 1

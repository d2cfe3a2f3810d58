"""The public training monitors practitioners install, run unmodified on a log through their own API.

Each adapter takes a log as a framework wrote it (a TRL ``trainer_state.json``, SB3's ``progress.csv``
or TensorBoard directory, CleanRL's TensorBoard run directory) and returns a :class:`Verdict`: whether
the tool read it (or the one-line reason it cannot: a dialect it does not read is scored as such, never
skipped), whether it alarms, at which of the log's steps first, the causes it names, and its raw
findings. Installed with the ``[monitors]`` extra (pinned versions: :data:`VERSIONS`).

What counts as an alarm, a first step and a cause for each tool (docs/leaderboard.md has the table):

- ``rldoctor``: ``rl_doctor.load_run`` + ``rl_doctor.diagnose`` (what ``rldoctor diagnose`` runs); an
  alarm is a finding of severity WARNING or worse (``--fail-on warning``), its cause the detector's
  name. Its findings carry no step, so the first step is where its own live monitor
  (``rl_doctor.live.LiveMonitor``, defaults: a check every 25 records from the 60th) first reports one,
  the log's records fed in order.
- ``runmedic``: ``runmedic.loaders.load`` + ``roles.detect`` + ``checks.run_checks`` (what
  ``runmedic diagnose`` runs); an alarm is a finding of severity warning or critical, its cause the
  check's name, its step the finding's.
- ``rlprobe``: reads only its own recordings, which its TRL callback writes: a TRL log's rows are fed to
  ``rlprobe.integrations.trl.RlprobeCallback.on_log`` as the trainer would have, then
  ``rlprobe.doctor.diagnose`` reads the recording; an alarm is a finding of severity warn or critical,
  its cause the signature id, its step ``first_step``. Other dialects: not read (no callback or reader).
- ``zen``: ``zen.ingest.tensorboard.load_run`` + ``zen.detect.rules.detect`` (what ``zen PATH`` runs); it
  reads SB3's TensorBoard tags only; an alarm is any issue, its cause the mode, its step the issue's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import io
import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.config import ConfigError

#: the versions the leaderboard was measured with (pyproject's [monitors] extra pins them)
VERSIONS = {"rldoctor": "0.2.0", "runmedic": "0.1.1", "rlprobe": "0.1.0", "zen-rl": "0.1.0"}
#: dialects of the logs a tool is given: trl (GRPOTrainer trainer_state.json), trl_ppo (PPOTrainer),
#: sb3 (progress.csv; its TensorBoard directory beside it for a TensorBoard reader), cleanrl (TensorBoard run dir)
DIALECTS = ("trl", "trl_ppo", "sb3", "cleanrl")


@dataclass
class Verdict:
    """One tool on one log."""
    tool: str
    read: bool
    reason: str = ""                      # why it did not read the log
    alarm: bool = False
    first_step: float | None = None       # in the log's own step units (the framework's step / timestep)
    causes: tuple[str, ...] = ()          # what its alarming findings name, worst first
    raw: list[dict[str, Any]] = field(default_factory=list)


def installed(tool: str) -> str | None:
    """The installed version of a tool's package, None when it is not installed."""
    try:
        return importlib.metadata.version(tool)
    except importlib.metadata.PackageNotFoundError:
        return None


def _trl_rows(path: Path) -> list[dict[str, Any]]:
    return [r for r in json.loads(path.read_text()).get("log_history", []) if "step" in r]


@contextlib.contextmanager
def _quiet():
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


# ---- rldoctor ------------------------------------------------------------------------------------

def rldoctor(path: Path, dialect: str) -> Verdict:
    from rl_doctor import diagnose, load_run
    from rl_doctor.detectors.base import Severity
    from rl_doctor.live import LiveMonitor

    target = path.parent / "tb" if dialect == "sb3" and not (path.parent / "progress.csv").exists() else path
    try:
        with _quiet():
            run = load_run(str(target))
            result = diagnose(run)
    except Exception as exc:  # the tool's own refusal, in its words
        return Verdict("rldoctor", False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    raw = _rldoctor_raw(result.findings)
    alarming = [f for f in result.problems if f.severity >= Severity.WARNING]
    first = None
    if alarming:
        config = {k: v for k, v in vars(run.config).items() if k != "raw" and v is not None} if run.config else {}
        monitor = LiveMonitor(config={**(run.config.raw if run.config else {}), **config})
        with _quiet():
            for i, step in enumerate(run.steps):
                metrics = {name: float(values[i]) for name, values in run.series.items()
                           if i < len(values) and not math.isnan(float(values[i]))}
                if any(f.severity >= Severity.WARNING for f in monitor.log(metrics, step=int(step))):
                    first = float(step)
                    break
    return Verdict("rldoctor", True, alarm=bool(alarming), first_step=first,
                   causes=tuple(dict.fromkeys(f.detector for f in alarming)), raw=raw)


def _rldoctor_raw(findings: Any) -> list[dict[str, Any]]:
    return [f.to_dict() if hasattr(f, "to_dict") else {"detector": f.detector, "severity": str(f.severity)}
            for f in findings]


# ---- runmedic ------------------------------------------------------------------------------------

def runmedic(path: Path, dialect: str) -> Verdict:
    from runmedic.checks import run_checks
    from runmedic.loaders import load
    from runmedic.roles import detect

    try:
        with _quiet():
            runs = load(str(path))
    except (Exception, SystemExit) as exc:  # runmedic exits on a log it cannot load
        return Verdict("runmedic", False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    if not runs:
        return Verdict("runmedic", False, "no run found in the log")
    run = max(runs, key=lambda r: len(getattr(r, "series", {}) or {}))
    with _quiet():
        findings = run_checks(run, detect(run, {}))
    raw = [{"check": f.check, "severity": f.severity, "step": f.step, "title": f.title, "metric": f.metric}
           for f in findings]
    alarming = [f for f in findings if f.severity in ("critical", "warning")]
    alarming.sort(key=lambda f: f.severity != "critical")
    steps = [f.step for f in alarming if f.step is not None and math.isfinite(f.step)]
    return Verdict("runmedic", True, alarm=bool(alarming), first_step=min(steps) if steps else None,
                   causes=tuple(dict.fromkeys(f.check for f in alarming)), raw=raw)


# ---- rlprobe -------------------------------------------------------------------------------------

def rlprobe(path: Path, dialect: str) -> Verdict:
    if dialect != "trl":
        return Verdict("rlprobe", False, "reads only its own recordings, which only its TRL callback writes (mapped "
                       "for GRPOTrainer's keys); no reader or callback for this dialect")
    from rlprobe.doctor import diagnose
    from rlprobe.integrations.trl import RlprobeCallback

    args = SimpleNamespace(world_size=1, process_index=0, to_dict=lambda: {})    # what the Trainer hands it
    control = SimpleNamespace(should_training_stop=False)
    rows = _trl_rows(path)
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        callback = RlprobeCallback(Path(tmp) / "run", trainer=None, diagnose_every=10**9, capture_env=False)
        callback.on_train_begin(args, SimpleNamespace(global_step=0), control)
        for row in rows:
            logs = {k: v for k, v in row.items() if k != "step"}
            callback.on_log(args, SimpleNamespace(global_step=int(row["step"])), control, logs=logs)
        callback.on_train_end(args, SimpleNamespace(global_step=int(rows[-1]["step"]) if rows else 0), control)
        findings = diagnose(Path(tmp) / "run")
    return _rlprobe_verdict(findings)


def _rlprobe_verdict(findings: Any, live: Sequence[float] = ()) -> Verdict:
    """rlprobe's findings (and the steps its live callback reported one at) as a verdict."""
    raw = [f.model_dump() if hasattr(f, "model_dump") else dict(f) for f in findings]
    alarming = [f for f in findings if f.severity in ("warn", "critical")]
    alarming.sort(key=lambda f: f.severity != "critical")
    steps = [*live, *(float(f.first_step) for f in alarming if f.first_step is not None)]
    return Verdict("rlprobe", True, alarm=bool(alarming or live), first_step=min(steps) if steps else None,
                   causes=tuple(dict.fromkeys(f.signature_id for f in alarming)), raw=raw)


# ---- zen -----------------------------------------------------------------------------------------

def zen(path: Path, dialect: str) -> Verdict:
    if dialect != "sb3":
        return Verdict("zen", False, "reads stable-baselines3's TensorBoard tags only")
    tb = path.parent / "tb" if (path.parent / "tb").is_dir() else path.parent
    if not any(tb.rglob("events.out.tfevents*")):
        return Verdict("zen", False, "reads TensorBoard event files only; this run has none")
    from zen.detect.rules import detect
    from zen.ingest.tensorboard import load_run

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        os.chdir(tmp)                     # its CLI writes zen_memory.db to the working directory; the API here does not
        try:
            issues = detect(load_run(str(tb)))
        finally:
            os.chdir(cwd)
    steps = [float(i["step"]) for i in issues if i.get("step") is not None]
    return Verdict("zen", True, alarm=bool(issues), first_step=min(steps) if steps else None,
                   causes=tuple(dict.fromkeys(i["mode"] for i in issues)),
                   raw=[{k: (float(v) if isinstance(v, (int, float)) else v) for k, v in i.items()} for i in issues])


# ---- live: a tool's own TRL callback inside a run ---------------------------------------------------

#: the tools with a live TRL callback (rldoctor's RLDoctorCallback, rlprobe's RlprobeCallback)
LIVE = ("rldoctor", "rlprobe")


def check_live(tool: Any) -> None:
    """A one-line ConfigError unless ``tool`` has a live TRL callback and is installed."""
    if tool not in LIVE:
        raise ConfigError(f"live_callback tool={tool!r}: the tools with a TRL callback are {', '.join(LIVE)}")
    if installed(PACKAGES[tool]) is None:
        raise ConfigError(f"live_callback tool={tool}: not installed (pip install '.[monitors]')")


def live_callback(tool: str, workdir: str | None = None) -> Any:
    """``tool``'s own TRL callback at its defaults, as its README attaches it to a GRPOTrainer, for
    ``backend.callbacks``. It also records the first step at which it reported an alarming finding; its
    ``harness_files()`` (read by the TRL backend after training) is its :class:`Verdict` as JSON, stored
    with the run as ``monitors/<tool>.json``. An unknown or missing tool is a one-line ConfigError."""
    check_live(tool)
    first: list[float] = []
    if tool == "rldoctor":
        from rl_doctor.detectors.base import Severity
        from rl_doctor.integrations.trl import RLDoctorCallback

        callback = RLDoctorCallback()
        monitor = callback.monitor

        def seen(finding: Any) -> None:      # the monitor announces a new or worse finding (>= WARNING)
            first.append(float(monitor.records[-1].get("step", len(monitor.records))))

        monitor.on_finding = seen

        def verdict() -> Verdict:
            with _quiet():
                final = monitor.check() if len(monitor.records) >= 8 else []
            latest = monitor.latest
            problems = [f for f in (latest.problems if latest else []) if f.severity >= Severity.WARNING]
            raw = _rldoctor_raw(latest.findings if latest else [])
            if final and not first:            # alarming only at the end of training
                first.append(float(monitor.records[-1].get("step", len(monitor.records))))
            return Verdict("rldoctor", True, alarm=bool(problems or first), first_step=first[0] if first else None,
                           causes=tuple(dict.fromkeys(f.detector for f in problems)), raw=raw)
    else:
        from rlprobe.doctor import diagnose
        from rlprobe.integrations.trl import RlprobeCallback

        run_dir = Path(workdir or tempfile.mkdtemp(prefix="rlprobe-")) / "rlprobe"
        callback = RlprobeCallback(run_dir, trainer=None, capture_env=False,
                                   on_finding=lambda f: first.append(float(f.first_step or 0)))

        def verdict() -> Verdict:
            with _quiet():
                findings = diagnose(run_dir) if run_dir.exists() else []
            return _rlprobe_verdict(findings, first)

    def harness_files() -> dict[str, bytes]:
        found = verdict()
        return {f"monitors/{tool}.json": (json.dumps(dataclasses.asdict(found), indent=2, default=str) + "\n").encode()}

    callback.harness_files = harness_files
    return callback


TOOLS = {"rldoctor": rldoctor, "runmedic": runmedic, "rlprobe": rlprobe, "zen": zen}
PACKAGES = {"rldoctor": "rldoctor", "runmedic": "runmedic", "rlprobe": "rlprobe", "zen": "zen-rl"}


def run_tool(tool: str, path: Path, dialect: str) -> Verdict:
    """One tool on one log; a tool that is not installed is a verdict saying so."""
    if installed(PACKAGES[tool]) is None:
        return Verdict(tool, False, f"not installed (pip install '.[monitors]' installs {PACKAGES[tool]}=="
                                    f"{VERSIONS[PACKAGES[tool]]})")
    return TOOLS[tool](Path(path), dialect)

"""A live monitor: a run's metrics, as its framework logs them, streamed into the diagnosis while the
run trains, and alarms a person can act on.

Each logged row goes in under the framework's own names (:meth:`Monitor.log`, or
:meth:`Monitor.scalar` for writers that log one value at a time); when a check is due, the rows so far
are put in canonical form by the framework's profile exactly as a finished log would be
(:func:`harness.logs.to_canonical`) and answered by the diagnosis model of that framework's view
with its exact evidence (:func:`harness.detection.diagnosis.answer_frame`): the same answer
``diagnose`` gives on the log written so far. An answer naming a fault (or a class of faults the log
cannot tell apart, or "anomalous, cause unknown") on ``patience`` consecutive checks raises an
:class:`Alarm` -- at once if exact evidence that shows the answer fired (on the whole log or on its
last ``recent`` rows, so a bug begun mid-run counts from its onset), else only after ``warmup``
rows and once it has held for ``hold`` rows: the model's answers on the first rows of a run (a
learning-rate warm-up, a policy not yet moving) are less sure than on the logs it was fitted on,
and near the threshold they flip between checks. An alarm carries the fault or class, its probability against the threshold, the evidence that fired
with the rates the catalogue measured for it, the settings to check and the fault's description and
provenance. Each answer alarms once.

Checks cost tens of milliseconds; the monitor keeps its share of the run's wall time under
``budget`` by skipping checks (a check is due when the time spent in checks is at most ``budget`` x
the time since the first row), so the overhead is bounded by construction and the delay grows only
when training steps are very fast.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faults import FAULTS
from harness.analysis.evidence import report_line
from harness.analysis.invariants import CLASSES, WINDOW_ROWS
from harness.analysis.model import UNKNOWN, Answer, DiagnosisModel, load_models, shows
from harness.config import ConfigError
from harness.detection.base import Alarm as DetectorAlarm
from harness.detection.base import RunInfo, alarms_from, build_detector
from harness.detection.diagnosis import answer_frame, find_model, pick_model
from harness.logs import LoadedLog, to_canonical
from harness.logs.readers import RawLog, number, records_frame
from harness.metrics import CANONICAL

ANY = "any"                 # stop_on=any: stop at the first alarm
PREFIX = "harness/"         # keys the monitor writes to the framework's logger (never read back)
BUDGET = 0.03               # share of the run's wall time the checks may take
PATIENCE = 2                # consecutive checks giving the same answer before it alarms
WARMUP = 25                 # rows before an answer resting on the model alone may alarm
HOLD = 10                   # rows an answer resting on the model alone must hold before it alarms
RECENT = WINDOW_ROWS         # the exact evidence is also read on this many last rows (a bug begun mid-run)


@dataclass(frozen=True)
class Alarm:
    """What the monitor says when a check's answer names a fault (or a class, or "unknown")."""

    row: int                               # canonical rows (updates / optimizer steps) seen
    step: float                            # the framework's step of the last row
    answer: str                            # the fault (the class's most probable member) or "unknown"
    members: tuple[str, ...]               # the faults the log cannot tell apart (one: identified)
    probability: float                     # of the answer's class
    anomalous: float                       # P(a fault this log can show)
    threshold: float
    evidence: dict[str, dict[str, Any]]    # items that fired: description, rates on training logs
    settings: tuple[str, ...]              # what to check
    fix: dict[str, str]                    # fault -> its description and provenance
    detector: str = "diagnosis"            # what raised it: the diagnosis, or a detector's class name
    symptom: str = ""                      # a detector's symptom (the diagnosis' are in ``evidence``)
    fault_class: str = ""                  # the class a decisive broken invariant answers
    broken: tuple[str, ...] = ()           # broken invariants, each with its steps and values

    def message(self) -> str:
        """The alarm in a few lines, for a terminal or a log."""
        name = self.answer if len(self.members) <= 1 else f"one of {', '.join(self.members)}"
        if self.answer == UNKNOWN:
            name = "anomalous, cause unknown"
        if self.detector != "diagnosis":
            lines = [f"[harness] ALARM at row {self.row} (step {self.step:g}): {name} "
                     f"({self.detector}: {self.symptom}; score {self.probability:.3g})"]
        elif self.fault_class:
            lines = [f"[harness] ALARM at row {self.row} (step {self.step:g}): {CLASSES[self.fault_class].meaning} "
                     f"(a broken invariant; candidates {', '.join(self.members)})"]
        else:
            lines = [f"[harness] ALARM at row {self.row} (step {self.step:g}): {name} (P = {self.probability:.2f}; "
                     f"P(anomalous) = {self.anomalous:.2f} >= threshold {self.threshold:.2f})"]
        lines += [f"  broken invariant: {b}" for b in self.broken]
        lines += [f"  {report_line(item, ev)}" for item, ev in self.evidence.items()]
        if self.settings:
            lines.append(f"  check: {', '.join(self.settings)}")
        for fault, text in self.fix.items():
            lines.append(f"  {fault}: {text}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"row": self.row, "step": self.step, "answer": self.answer, "members": list(self.members),
                "probability": self.probability, "anomalous": self.anomalous, "threshold": self.threshold,
                "evidence": self.evidence, "settings": list(self.settings), "fix": self.fix,
                "detector": self.detector, "symptom": self.symptom, "fault_class": self.fault_class or None,
                "broken": list(self.broken)}


def fault_fix(fault: str) -> str:
    """A fault's description and where it comes from (its provenance)."""
    cls = FAULTS.get(fault)
    return "" if cls is None else f"{cls.description}. Reports: {cls.provenance}"


def check_stop_on(stop_on: str | None) -> str | None:
    """``stop_on`` if it is None, ``any``, ``unknown`` or a fault name; else a one-line error."""
    if stop_on in (None, ANY, UNKNOWN) or stop_on in FAULTS:
        return stop_on
    raise ConfigError(f"stop_on={stop_on!r}; valid: any, unknown or a fault name ({', '.join(sorted(FAULTS))})")


def shown_by_evidence(answer: Answer) -> bool:
    """Whether an evidence item that fired shows a member of the answer (:func:`shows`: the rule by
    which the diagnosis keeps a fault its view cannot show among those this log shows)."""
    members = answer.members or (answer.answer,)
    return any(shows({k: tuple(v) for k, v in item["rates"].items()}, members) for item in answer.evidence.values())


@dataclass
class AlarmPolicy:
    """Turns a sequence of answers into alarms: an answer naming a fault, a class or ``unknown`` on
    ``patience`` consecutive checks alarms (one shown by exact evidence at once, one resting on the
    model alone after ``warmup`` rows and ``hold`` rows of holding), once per answer; ``stop_on`` says
    which alarms end the run. An answer a decisive broken invariant gives (``basis`` "invariants")
    alarms at the first check that gives it."""

    patience: int = PATIENCE
    stop_on: str | None = None
    warmup: int = WARMUP
    hold: int = HOLD
    alarms: list[Alarm] = field(default_factory=list)
    should_stop: bool = False
    _streak: tuple[tuple[str, ...], int, int] = ((), 0, 0)       # answer, checks, first row

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ConfigError(f"patience={self.patience}; it must be at least 1")
        if self.warmup < 0 or self.hold < 1:
            raise ConfigError(f"warmup={self.warmup}, hold={self.hold}; rows before a model-only alarm must be "
                              ">= 0 and rows it must hold >= 1")
        check_stop_on(self.stop_on)

    def see(self, answer: Answer, row: int, step: float) -> Alarm | None:
        if answer.kind not in ("fault", "class", UNKNOWN):
            self._streak = ((), 0, row)
            return None
        key = answer.members or (answer.answer,)
        same = self._streak[0] == key
        self._streak = (key, self._streak[1] + 1 if same else 1, self._streak[2] if same else row)
        if any(a.members == key or (a.answer,) == key for a in self.alarms):
            return None
        proven = answer.basis == "invariants"        # a decisive broken invariant: alarm at the first check
        if self._streak[1] < self.patience and not proven:
            return None
        if not proven and not shown_by_evidence(answer) and (row < self.warmup or row - self._streak[2] + 1 < self.hold):
            return None
        members = answer.members or ()
        alarm = Alarm(row=row, step=step, answer=answer.answer, members=members,
                      probability=float(answer.class_probability if math.isfinite(answer.class_probability)
                                        else answer.anomalous),
                      anomalous=answer.anomalous, threshold=answer.threshold, evidence=answer.evidence,
                      settings=answer.settings, fix={f: fault_fix(f) for f in members if f in FAULTS},
                      fault_class=answer.fault_class, broken=tuple(b["line"] for b in answer.broken))
        self.alarms.append(alarm)
        if self.stop_on == ANY or self.stop_on == answer.answer or self.stop_on in members:
            self.should_stop = True
        return alarm

    def see_detector(self, alarm: DetectorAlarm, detector: str, row: int, step: float) -> Alarm | None:
        """A streaming detector's alarm: raised the first time the detector names this fault (or, naming
        none, this symptom); the detector's own rules decide when it fires, so no patience or warm-up."""
        answer = alarm.fault if alarm.fault in FAULTS else UNKNOWN
        members = (answer,) if answer != UNKNOWN else ()

        def key(answer: str, symptom: str) -> tuple[str, ...]:      # a fault, or an unnamed symptom
            return (answer,) if answer != UNKNOWN else (UNKNOWN, symptom)

        if any(key(a.answer, a.symptom) == key(answer, alarm.symptom) for a in self.alarms if a.detector == detector):
            return None
        out = Alarm(row=row, step=step, answer=answer, members=members, probability=float(alarm.score),
                    anomalous=math.nan, threshold=math.nan, evidence={}, settings=(),
                    fix={f: fault_fix(f) for f in members}, detector=detector, symptom=alarm.symptom)
        self.alarms.append(out)
        if self.stop_on == ANY or self.stop_on == answer:
            self.should_stop = True
        return out


class Monitor:
    """Stream one run's logged rows (the framework's names) into the diagnosis; see the module doc.

    ``profile``: the framework's dialect (sb3, cleanrl, trl, verl, canonical); ``algo``: ppo or grpo
    (default: the profile's); ``config``: the run's hyperparameters in the framework's names (as its
    log would carry them); ``model``: a diagnosis model file or catalogue directory (default: the
    results directory's, else the one shipped in the package); ``budget``: the share of wall time
    checks may take; ``patience``: consecutive checks an answer must hold; ``warmup``: rows before an
    answer resting on the model alone may alarm; ``hold``: rows such an answer must hold; ``recent``:
    rows the exact evidence is also read on; ``stop_on``: which alarm sets :attr:`should_stop` (a
    fault, ``unknown``, ``any``); ``emit``: where alarm messages go (None: nowhere); ``detector``: any
    streaming detector instead of the diagnosis (an instance, a ``{"_target_": ...}`` mapping, a
    reference detector's name such as ``ptt``, or a dotted class path), fed each canonical row once in
    order with the run's configuration (harness names) as its RunInfo."""

    def __init__(self, profile: str, algo: str | None = None, config: Mapping[str, Any] | None = None,
                 results_dir: str | Path = "results", model: str | Path | None = None, budget: float = BUDGET,
                 patience: int = PATIENCE, stop_on: str | None = None, warmup: int = WARMUP, hold: int = HOLD,
                 recent: int = RECENT, emit: Callable[[str], None] | None = print, detector: Any = None) -> None:
        if not 0 < budget <= 1:
            raise ConfigError(f"budget={budget}; the share of wall time for checks must be in (0, 1]")
        self.profile, self.algo, self.budget = profile, algo, budget
        self.config: dict[str, Any] = dict(config or {})
        if recent < 1:
            raise ConfigError(f"recent={recent}; the evidence window must hold at least 1 row")
        self.recent = recent
        self.policy = AlarmPolicy(patience=patience, stop_on=stop_on, warmup=warmup, hold=hold)
        self.emit = emit
        self.detector = None if detector is None else build_detector(detector)
        self._fed = 0               # canonical rows fed to the detector
        self._models = {} if self.detector is not None else load_models(find_model(results_dir, model))
        self._rows: list[tuple[float, float, str, float]] = []
        self._n_logged = 0
        self._checked_at = 0
        self._start: float | None = None
        self.spent = 0.0            # seconds spent in checks
        self.checks = 0
        self.last: Answer | None = None

    # ---- what the run logs ------------------------------------------------------------------------
    def set_config(self, config: Mapping[str, Any]) -> None:
        """Hyperparameters (framework names) learnt after the monitor was made (e.g. a text summary)."""
        self.config.update(config)

    def log(self, step: float | None, values: Mapping[str, Any]) -> list[Alarm]:
        """One logged row (the framework's keys and values; non-numbers and the monitor's own keys are
        skipped); returns the alarms it raised (a check runs when one is due)."""
        self.add_row(step, values)
        return self.check_if_due()

    def add_row(self, step: float | None, values: Mapping[str, Any]) -> None:
        """Record one logged row without checking."""
        if self._start is None:
            self._start = time.perf_counter()
        row = float(self._n_logged)
        self._n_logged += 1
        at = math.nan if step is None else float(step)
        for key, value in values.items():
            x = number(value)
            if x is not None and not str(key).startswith(PREFIX) and "/" + PREFIX not in str(key):
                self._rows.append((row, at, str(key), x))

    def scalar(self, step: float | None, key: str, value: Any) -> None:
        """One value logged on its own (TensorBoard's add_scalar): rows are grouped by step when read."""
        if self._start is None:
            self._start = time.perf_counter()
        x = number(value)
        if x is not None and not key.startswith(PREFIX):
            self._rows.append((math.nan, math.nan if step is None else float(step), key, x))

    # ---- checks -----------------------------------------------------------------------------------
    def due(self) -> bool:
        """A check is due when rows came in since the last one and the checks so far have taken at
        most ``budget`` of the wall time since the first row."""
        if len(self._rows) == self._checked_at:
            return False
        elapsed = time.perf_counter() - (self._start or time.perf_counter())
        return self.spent <= self.budget * elapsed

    def check_if_due(self) -> list[Alarm]:
        return self.check() if self.due() else []

    def canonical(self) -> LoadedLog:
        """The rows so far in canonical form (what ``diagnose`` would read from the log written so far)."""
        raw = RawLog(records_frame(self._rows), dict(self.config), f"live {self.profile} run", "memory")
        return to_canonical(raw, self.profile, algo=self.algo)

    def check(self) -> list[Alarm]:
        """Answer on the rows so far; the alarms this answer raises (printed through ``emit``)."""
        self._checked_at = len(self._rows)
        if not self._rows:
            return []
        t = time.perf_counter()
        try:
            return self.assess(self.canonical())
        except ConfigError:          # nothing this profile maps yet (e.g. only episode returns so far)
            return []
        finally:
            self.spent += time.perf_counter() - t

    def assess(self, log: LoadedLog) -> list[Alarm]:
        """The answer on a canonical log and the alarms it raises (also used by ``watch`` on files)."""
        if self.detector is not None:
            return self.feed(log)
        model: DiagnosisModel | None = pick_model(self._models, log.algo, log.profile)
        answer = answer_frame(model, log.metrics, dict(log.config), recent=self.recent, profile=log.profile,
                              algo=log.algo)
        self.last = answer
        self.checks += 1
        step = float(log.metrics["step"].iloc[-1]) if "step" in log.metrics and len(log.metrics) else math.nan
        alarm = self.policy.see(answer, len(log.metrics), step)
        if alarm is None:
            return []
        if self.emit is not None:
            self.emit(alarm.message())
        return [alarm]

    def feed(self, log: LoadedLog) -> list[Alarm]:
        """The canonical rows the detector has not seen yet, in order; the alarms they raise."""
        if self._fed == 0:
            self.detector.reset(RunInfo(run_id="live", algo=log.algo, env="", backend=log.profile,
                                        configured=dict(log.config)))
        self.checks += 1
        names = [c for c in CANONICAL if c in log.metrics.columns]
        steps = log.metrics["step"].tolist() if "step" in log.metrics else [math.nan] * len(log.metrics)
        name = type(self.detector).__name__
        out = []
        for i, row in enumerate(log.metrics[names].to_dict("records")[self._fed:], start=self._fed):
            metrics = {k: float(v) for k, v in row.items() if v is not None and math.isfinite(v)}
            for raised in alarms_from(self.detector, i, metrics):
                alarm = self.policy.see_detector(raised, name, i + 1, float(steps[i]))
                if alarm is not None:
                    out.append(alarm)
                    if self.emit is not None:
                        self.emit(alarm.message())
        self._fed = len(log.metrics)
        return out

    # ---- state ------------------------------------------------------------------------------------
    @property
    def alarms(self) -> list[Alarm]:
        return self.policy.alarms

    @property
    def should_stop(self) -> bool:
        return self.policy.should_stop

    def scalars(self) -> dict[str, float]:
        """What the monitor writes to the framework's logger (under ``harness/``): P(anomalous) and the
        threshold of the last check (the diagnosis), and the number of alarms so far."""
        if self.detector is not None:
            return {f"{PREFIX}alarms": float(len(self.alarms))} if self.checks else {}
        if self.last is None:
            return {}
        return {f"{PREFIX}p_anomalous": float(self.last.anomalous), f"{PREFIX}threshold": float(self.last.threshold),
                f"{PREFIX}alarms": float(len(self.alarms))}

"""Diagnosis of a training log: healthy, one of the known faults (or a class of faults this log cannot
tell apart), or "anomalous, cause unknown".

The log is read and put in canonical form by :mod:`harness.logs` (every format a PPO/GRPO user has,
the dialect detected from its names). Its window features (:mod:`harness.analysis.features`) and its
exact evidence (:mod:`harness.analysis.evidence`) go to the model fitted by ``python -m
harness.catalogue`` for that algorithm and that framework's view (:mod:`harness.analysis.model`);
the answer and every number it follows from are in :class:`harness.analysis.model.Answer`. Shown
beside it: the signatures that fire in the log at their default thresholds, and whether the answer's
expected signature is among them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from faults import FAULTS
from harness.analysis import evidence, invariants, signatures
from harness.analysis.examples import VIEWS
from harness.analysis.features import features
from harness.analysis.model import HEALTHY, TOO_SHORT, UNKNOWN, Answer, DiagnosisModel, load_models, shows
from harness.analysis.reference import Comparison, compare
from harness.config import ConfigError
from harness.logs import LoadedLog, load_log
from harness.metrics import CANONICAL

MODEL_FILE = Path("model") / "diagnosis.joblib"       # inside the catalogue directory
#: per algorithm, fault and metric, the direction the fault moves the metric against its healthy twin
#: (written beside the model by the catalogue build and render=only; read by diagnose reference=PATH)
DIRECTIONS_FILE = Path("model") / "directions.json"
#: the published diagnosis model, shipped in the package (a copy of results/catalogue/model/ made by
#: ``python -m harness.catalogue publish=true``): what diagnose reads where no results_dir has its own
PACKAGED_MODEL = Path(__file__).resolve().parents[1] / "data" / MODEL_FILE


def model_path(catalogue: str | Path) -> Path:
    """The diagnosis model of a catalogue directory (or the model file itself)."""
    p = Path(catalogue)
    if p.suffix == ".joblib":
        return p
    if (p / MODEL_FILE).exists() or p.name == "catalogue":
        return p / MODEL_FILE
    return p / "catalogue" / MODEL_FILE


def find_model(results_dir: str | Path = "results", catalogue: str | Path | None = None) -> Path:
    """The diagnosis model to read: ``catalogue``'s (a catalogue directory, a results directory or the
    model file: :func:`model_path`) when given; else ``results_dir/catalogue/model/diagnosis.joblib``
    when it exists; else the model shipped in the package (:data:`PACKAGED_MODEL`)."""
    if catalogue is not None:
        return model_path(catalogue)
    own = Path(results_dir) / "catalogue" / MODEL_FILE
    return own if own.exists() else PACKAGED_MODEL


def load_directions(model_file: Path, algo: str) -> dict[str, dict[str, dict[str, float]]]:
    """The catalogue's fault directions of ``algo`` (:data:`DIRECTIONS_FILE`, beside ``model_file``)."""
    path = model_file.with_name(DIRECTIONS_FILE.name)
    if not path.exists():
        raise ConfigError(f"{path}: no such file (the catalogue's fault directions, which reference= compares "
                          "against; python -m harness.catalogue render=only writes them beside its model)")
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc}); python -m harness.catalogue render=only writes it anew") from None
    return table.get(algo, {})


def compare_logs(log: LoadedLog, reference: LoadedLog, model_file: Path) -> Comparison:
    """``log`` against a healthy ``reference`` run (:mod:`harness.analysis.reference`), ranked against the
    catalogue's fault directions of the log's algorithm."""
    if reference.algo != log.algo:
        raise ConfigError(f"the reference log is a {reference.algo} run and the log a {log.algo} run: compare "
                          "runs of one algorithm (algo= sets both)")
    return compare(log.metrics, reference.metrics, load_directions(model_file, log.algo), log.config,
                   reference.config)


def frame_context(algo: str, config: dict[str, Any], profile: str = "canonical", n_actions: int | None = None,
                  optimizer_steps: int | None = None) -> dict[str, Any]:
    """What the signatures may know besides the metrics: the algorithm, the action-space size and the
    configured optimizer steps per update (given, or from the hyperparameters when they have them)."""
    meta: dict[str, Any] = {"algo": algo, "configured": dict(config)}
    if n_actions:
        meta["action_space"] = {"type": "discrete", "n": int(n_actions)}
    epochs = config.get("n_epochs", config.get("num_iterations"))
    if not optimizer_steps and epochs and config.get("n_minibatches") and profile != "trl":
        optimizer_steps = int(epochs) * int(config["n_minibatches"])
    if optimizer_steps:
        meta["configured_optimizer_steps"] = int(optimizer_steps)
    return meta


def context(log: LoadedLog, n_actions: int | None = None, optimizer_steps: int | None = None) -> dict[str, Any]:
    """:func:`frame_context` of a log."""
    return frame_context(log.algo, dict(log.config), log.profile, n_actions, optimizer_steps)


def frame_signatures(frame: pd.DataFrame, meta: dict[str, Any]) -> dict[str, signatures.Result]:
    """The signatures a canonical frame can show (those whose metric it has), at their default thresholds."""
    readable = [name for name, sig in signatures.SIGNATURES.items()
                if sig.metric in frame and frame[sig.metric].notna().any()]
    if "configured_optimizer_steps" not in meta and "optimizer_steps_short" in readable:
        readable.remove("optimizer_steps_short")
    rows = frame if "nonfinite" in frame else frame.assign(nonfinite=0.0)
    return signatures.evaluate(rows, meta, onset=0, names=readable)


def log_signatures(log: LoadedLog, meta: dict[str, Any]) -> dict[str, signatures.Result]:
    """The signatures this log can show (those whose metric it has), at their default thresholds."""
    return frame_signatures(log.metrics, meta)


def expected_status(res: signatures.Result | None) -> str:
    """What an expected signature shows in a log: absent (the log lacks its metric), present but not
    readable (e.g. a median approx_kl of 8.7e-10: too small to call tiny, too seldom exactly 0 to call
    zero), fired or not, with the numbers that decided it."""
    if res is None:
        return "not in this log"
    if not res.evaluable:
        return f"in this log, but not readable here: {res.evidence}"
    return ("fired: " if res.fired else "did not fire: ") + res.evidence


@dataclass
class Diagnosis:
    """The model's answer on a log (:class:`Answer`), with the signatures that fire in it. ``model``
    is None where none is fitted for the log's algorithm (the answer rests on the evidence alone)."""

    result: Answer
    view: str
    model: DiagnosisModel | None
    fired: dict[str, signatures.Result] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)    # the answer's expected signature -> what it shows

    @property
    def answer(self) -> str:
        return self.result.answer

    @property
    def probabilities(self) -> dict[str, float]:
        return self.result.probabilities

    @property
    def probability(self) -> float:
        return self.result.probability

    @property
    def anomalous(self) -> float:
        return self.result.anomalous


def pick_model(models: dict[tuple[str, str], DiagnosisModel], algo: str, profile: str) -> DiagnosisModel | None:
    """The model of the log's algorithm and framework view (a profile without a model of its own,
    e.g. a plain CSV, uses the canonical one); None for an algorithm the harness trains but no model
    was fitted on (its log is answered from the evidence alone: :func:`evidence_only`)."""
    view = profile if profile in VIEWS.get(algo, ()) else "canonical"
    for key in ((algo, view), (algo, "canonical")):
        if key in models:
            return models[key]
    if any(algo in FAULTS[f].algos for f in FAULTS):
        return None
    raise ConfigError(f"the diagnosis model has nothing for algo={algo} (it has: "
                      f"{', '.join(sorted({a for a, _ in models}))}); rebuild it with python -m harness.catalogue")


#: a log with at least this many quantities outside every training log of its view lies outside the
#: model's training range: the answer is formed from invariants and signatures alone
OUT_OF_RANGE = 10


def model_inputs(model: DiagnosisModel, frame: pd.DataFrame, config: dict[str, Any],
                 space: dict[str, Any] | None = None, recent: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What the model reads of a canonical frame (a log, or the updates a monitor has seen so far): its
    feature row and its exact evidence. ``recent``: the evidence is also read on the last ``recent``
    rows alone (an item fires when it fires on either), so a bug that began mid-run shows once it has
    held for that many rows."""
    row = pd.DataFrame([features(frame, CANONICAL, model.algo, config, space, model.view)])
    observed = evidence.observe(frame, config, model.view)
    if recent is not None and len(frame) > recent:
        tail = evidence.observe(frame.iloc[-recent:], config, model.view)
        observed = {k: (True if tail[k] else v) for k, v in observed.items()}
    ev = pd.DataFrame([{f"ev:{k}": (float("nan") if v is None else float(v)) for k, v in observed.items()}])
    return row, ev


def model_answer(model: DiagnosisModel, frame: pd.DataFrame, config: dict[str, Any],
                 space: dict[str, Any] | None = None, recent: int | None = None) -> Answer:
    """The model's own answer on a canonical frame (:func:`model_inputs`)."""
    row, ev = model_inputs(model, frame, config, space, recent)
    return model.diagnose(row, ev, [len(frame)])[0]


def _listed(breaks: list[invariants.Break], decisive: frozenset[str]) -> tuple[dict[str, Any], ...]:
    """The broken invariants as the answer lists them: name, class, steps, values, decisive or not."""
    return tuple({"invariant": b.invariant, "class": b.fault_class, "steps": list(b.steps), "n_steps": b.n_steps,
                  "of": b.of, "shows": b.shows, "decisive": b.invariant in decisive, "line": b.line()} for b in breaks)


def _broken_support(fault: str, breaks: list[invariants.Break]) -> list[str]:
    """The broken invariants of a class ``fault`` belongs to, as support for it."""
    return [f"invariant {b.invariant} broken ({invariants.CLASSES[b.fault_class].meaning})" for b in breaks
            if fault in invariants.CLASSES[b.fault_class].candidates]


def _supports(model: DiagnosisModel, fault: str, sigs: dict[str, signatures.Result], breaks: list[invariants.Break],
              fired_evidence: dict[str, Any]) -> tuple[str, ...]:
    """What in the log shows ``fault``: its expected signatures that fire, broken invariants of a class it
    belongs to, evidence items that fired and raise its odds against healthy (measured rates)."""
    out = [f"{name} fires ({sigs[name].evidence})" for name in FAULTS[fault].expected
           if name in sigs and sigs[name].fired]
    out += _broken_support(fault, breaks)
    out += [f"evidence {name}" for name in fired_evidence if fault in shows(model.rates.get(name, {}), [fault])]
    return tuple(out)


def _silent(fault: str, sigs: dict[str, signatures.Result]) -> bool:
    """Every expected signature of ``fault`` that this log can read stays silent (and it has one)."""
    readable = [sigs[n] for n in FAULTS[fault].expected if n in sigs and sigs[n].evaluable]
    return bool(readable) and not any(r.fired for r in readable)


def _class_answer(base: Answer, fault_class: str, sigs: dict[str, signatures.Result]) -> Answer:
    """The answer a decisive broken invariant gives: its class, the candidate the log supports most
    (an expected signature fired; then the model's probability) named as most likely."""
    cls = invariants.CLASSES[fault_class]
    members = tuple(f for f in cls.candidates if f in FAULTS)
    def rank(f: str) -> tuple[int, float]:
        fired = any(n in sigs and sigs[n].fired for n in FAULTS[f].expected)
        return int(fired), float(base.probabilities.get(f, 0.0))
    best = max(members, key=rank)
    return replace(base, answer=best, kind="class", members=members, class_probability=float("nan"),
                   settings=(cls.check,), basis="invariants", fault_class=fault_class)


def judge(model: DiagnosisModel, frame: pd.DataFrame, config: dict[str, Any], sigs: dict[str, signatures.Result],
          space: dict[str, Any] | None = None, recent: int | None = None) -> Answer:
    """The answer, evidence first: (1) the invariants; a broken one that is decisive (its false alarms
    measured at most 1%) answers its class, whatever the model says and however short the log; (2) the
    model, where every fault whose readable expected signatures all stay silent, with nothing else in
    the log behind it, is ruled out (its probability goes to the rest; not a fault the view cannot show,
    whose runs look healthy: its silence is no evidence against it); (3) a named fault must have
    support (:func:`_supports`), and a log off the model's training range is answered from the
    invariants and signatures alone, the model's ranking kept as a hint."""
    results = invariants.check(frame, config, (recent,) if recent else ())   # a monitor: breaks begun mid-run
    breaks = invariants.broken(results)
    decisive = invariants.decisive()
    listed = _listed(breaks, decisive)
    row, ev = model_inputs(model, frame, config, space, recent)       # read once, answered once or twice
    base = model.diagnose(row, ev, [len(frame)])[0]
    fired_ev = dict(base.evidence)
    support = {f: _supports(model, f, sigs, breaks, fired_ev) for f in FAULTS if f != "none"}
    hidden = set(model.identifiability.invisible)      # the view cannot show them: silence says nothing
    ruled = tuple(f for f in model.classes if f in FAULTS and f not in hidden and _silent(f, sigs) and not support.get(f))
    first = next((b for b in breaks if b.invariant in decisive), None)
    if first is not None:
        out = _class_answer(base, first.fault_class, sigs)
        return replace(out, broken=listed, ruled_out=ruled,
                       support={f: support[f] for f in out.members if support.get(f)})
    answer = model.diagnose(row, ev, [len(frame)], ruled)[0] if ruled else base
    answer = replace(answer, broken=listed, ruled_out=ruled)
    named = answer.members or ((answer.answer,) if answer.answer in FAULTS else ())
    if named and (len(answer.unlike_training) >= OUT_OF_RANGE
                  or not any(support.get(f) for f in named) and any(_silent(f, sigs) for f in named)):
        backed = sorted((f for f in named if support.get(f)), key=lambda f: -answer.probabilities.get(f, 0.0))
        if backed:
            answer = replace(answer, answer=backed[0], basis="evidence")
        else:
            answer = replace(answer, answer=UNKNOWN if breaks or any(r.fired for r in sigs.values()) else HEALTHY,
                             kind=UNKNOWN, members=(), settings=(), basis="evidence")
            if answer.answer == HEALTHY:
                answer = replace(answer, kind=HEALTHY)
    return replace(answer, support={f: support[f] for f in named if support.get(f)})


#: the signatures that read a ratio pinned at 1: a policy that no longer samples (its entropy below this,
#: in nats per token) has a ratio of 1 whatever the code does, so they are read on the other rows
TRUST_REGION_EXACT = ("ratio_pinned", "approx_kl_zero", "clipfrac_zero")
SAMPLING_ENTROPY = 1e-3


def _on_sampling_rows(frame: pd.DataFrame, algo: str, config: dict[str, Any]) -> dict[str, signatures.Result]:
    """The trust-region signatures read on the rows where the policy still samples (entropy logged)."""
    if "entropy" not in frame or frame["entropy"].notna().sum() == 0:
        return {}
    rows = frame[~(frame["entropy"] < SAMPLING_ENTROPY)]
    if len(rows) == len(frame):
        return {}
    meta = frame_context(algo, config)
    return {n: signatures.SIGNATURES[n].check(rows, meta) for n in TRUST_REGION_EXACT if n in signatures.SIGNATURES}


def evidence_only(algo: str, frame: pd.DataFrame, config: dict[str, Any],
                  sigs: dict[str, signatures.Result]) -> Answer:
    """The answer where no model is fitted for the log's algorithm: the invariants and the exact
    signatures alone. A decisive broken invariant answers its class. Otherwise the faults of this
    algorithm whose exact expected signatures fire (not a calibrated scale signature: no threshold is
    fitted for these runs) are named, most fired first (one: the fault; several: their class);
    a broken invariant that is not decisive, or another exact signature that fires, gives "anomalous,
    cause unknown"; nothing gives healthy, with the faults only scale would show listed as ones
    this log cannot show without a model."""
    # as the live monitor reads them: a break over the last rows counts (a policy gone deterministic mid-run)
    breaks = invariants.broken(invariants.check(frame, config, (invariants.WINDOW_ROWS,)))
    decisive = invariants.decisive()
    listed = _listed(breaks, decisive)
    sigs = {**sigs, **_on_sampling_rows(frame, algo, config)}
    mine = [f for f in FAULTS if f != "none" and algo in FAULTS[f].algos]
    exact = {n for n, sig in signatures.SIGNATURES.items() if not sig.calibrated}
    fired = {f: [n for n in FAULTS[f].expected if n in exact and n in sigs and sigs[n].fired] for f in mine}
    support = {f: (*(f"{n} fires ({sigs[n].evidence})" for n in fired[f]), *_broken_support(f, breaks)) for f in mine}
    scale_only = tuple(f for f in mine if not any(n in exact for n in FAULTS[f].expected))
    base = Answer(HEALTHY, HEALTHY, {}, {}, anomalous=0.0, threshold=0.5, healthy_weight=1.0,
                  unknown_threshold=float("nan"), invisible=scale_only, n_rows=len(frame), min_rows=0,
                  basis="evidence", broken=listed)
    first = next((b for b in breaks if b.invariant in decisive), None)
    if first is not None:
        cls = invariants.CLASSES[first.fault_class]
        members = tuple(f for f in cls.candidates if f in mine) or tuple(f for f in cls.candidates if f in FAULTS)
        best = max(members, key=lambda f: len(fired.get(f, ())))
        return replace(base, answer=best, kind="class", members=members, anomalous=1.0, invisible=(),
                       settings=(cls.check,), basis="invariants", fault_class=first.fault_class,
                       support={f: support[f] for f in members if support.get(f)})
    named = sorted((f for f in mine if fired[f]), key=lambda f: -len(fired[f]))
    if named:
        top = [f for f in named if len(fired[f]) == len(fired[named[0]])]
        return replace(base, answer=top[0], kind="fault" if len(top) == 1 else "class", members=tuple(top),
                       anomalous=1.0, invisible=(), support={f: support[f] for f in top})
    if breaks or any(r.fired for n, r in sigs.items() if n in exact):
        return replace(base, answer=UNKNOWN, kind=UNKNOWN, anomalous=1.0, invisible=())
    return base


def answer_frame(model: DiagnosisModel | None, frame: pd.DataFrame, config: dict[str, Any],
                 space: dict[str, Any] | None = None, recent: int | None = None, profile: str = "canonical",
                 n_actions: int | None = None, optimizer_steps: int | None = None, algo: str | None = None) -> Answer:
    """The answer on a canonical frame (a log, or the updates a monitor has seen so far): :func:`judge`
    with the signatures read on the frame; :func:`evidence_only` where no model is fitted (``algo``)."""
    algo = model.algo if model is not None else algo
    n = n_actions or ((space or {}).get("n") if (space or {}).get("type") == "discrete" else None)
    sigs = frame_signatures(frame, frame_context(algo, config, profile, n, optimizer_steps))
    return _answer(model, algo, frame, config, sigs, space, recent)


def _answer(model: DiagnosisModel | None, algo: str, frame: pd.DataFrame, config: dict[str, Any],
            sigs: dict[str, signatures.Result], space: dict[str, Any] | None = None,
            recent: int | None = None) -> Answer:
    """:func:`judge` with the model, :func:`evidence_only` where none is fitted for ``algo``."""
    if model is None:
        return evidence_only(algo, frame, config, sigs)
    return judge(model, frame, config, sigs, space, recent)


def diagnose_log(log: LoadedLog, models: dict[tuple[str, str], DiagnosisModel], n_actions: int | None = None,
                 optimizer_steps: int | None = None) -> Diagnosis:
    """Diagnose a log already in canonical form."""
    model = pick_model(models, log.algo, log.profile)
    sigs = log_signatures(log, context(log, n_actions, optimizer_steps))
    space = ({"type": "discrete", "n": int(n_actions)} if n_actions and model is not None and model.view == "canonical"
             else None)
    result = _answer(model, log.algo, log.metrics, dict(log.config), sigs, space)
    expected = {}
    for fault in (result.members or ((result.answer,) if result.answer in FAULTS else ())):
        for name in FAULTS[fault].expected:
            expected.setdefault(name, expected_status(sigs.get(name)))
    view = model.view if model is not None else log.profile
    return Diagnosis(result, view, model, {k: v for k, v in sigs.items() if v.fired}, expected)


def diagnose(log_path: str | Path, profile: str | dict[str, Any] = "auto", catalogue: str | Path | None = None,
             algo: str | None = None, n_actions: int | None = None, optimizer_steps: int | None = None,
             run: str | None = None, config: dict[str, Any] | None = None,
             results_dir: str | Path = "results") -> tuple[LoadedLog, Diagnosis]:
    """Read any supported log (:func:`harness.logs.load_log`) and diagnose it with the model
    :func:`find_model` picks (``catalogue``'s, else ``results_dir``'s, else the package's)."""
    log = load_log(log_path, profile, run=run, config=config, algo=algo)
    return log, diagnose_log(log, load_models(find_model(results_dir, catalogue)), n_actions, optimizer_steps)


__all__ = ["DIRECTIONS_FILE", "HEALTHY", "PACKAGED_MODEL", "TOO_SHORT", "UNKNOWN", "OUT_OF_RANGE", "Diagnosis", "answer_frame", "compare_logs", "evidence_only", "judge", "model_answer", "model_inputs",
           "diagnose", "diagnose_log", "find_model", "load_directions", "log_signatures", "model_path"]

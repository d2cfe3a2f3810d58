"""``rlfh-diagnose log=PATH [profile=auto] [select=NAME] [output=text|json]``: which known bug does my
run look like?

Reading (every log format, the dialect detected from its names) lives in :mod:`harness.logs`;
the ranking in :mod:`harness.detection.diagnosis`; this module is the command. The model is
``${results_dir}/catalogue/model/`` when it is there, else the one shipped in the package.
"""

from __future__ import annotations

import glob
import json
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf, read_write

from harness.analysis import evidence
from harness.analysis.invariants import CLASSES
from harness.analysis.model import load_models
from harness.analysis.reference import Comparison
from harness.commands import diagnose_report as report_file
from harness.commands.app import check_algorithm, renamed, run_app
from harness.config import CONF_DIR, ConfigError, did_you_mean
from harness.detection.diagnosis import (
    HEALTHY,
    OUT_OF_RANGE,
    PACKAGED_MODEL,
    TOO_SHORT,
    UNKNOWN,
    Diagnosis,
    compare_logs,
    diagnose_log,
    find_model,
)
from harness.logs import LoadedLog, load_log
from harness.logs.readers import find_runs

#: old key -> (new key, the new key's default): the old names keep working, with a note
ALIASES = {"run": ("select", None), "format": ("output", "text")}
OUTPUTS = ("text", "json")
#: fail_on=: which answers end the command with exit code 1 (for CI): never; anomalous (any answer but
#: healthy or too_short: a fault, a class of faults, or "anomalous, cause unknown"); fault (a fault or a class)
FAIL_ON = ("never", "anomalous", "fault")
FAILED = 1
#: the answer kinds that name a cause: one fault, or a class of faults the log cannot tell apart
NAMING = ("fault", "class")


def exit_code(result: Any, fail_on: str) -> int:
    """The command's exit code for an answer under ``fail_on`` (:data:`FAIL_ON`): 1 when it fails, else 0."""
    if fail_on == "anomalous":
        return FAILED if result.answer not in (HEALTHY, TOO_SHORT) else 0
    if fail_on == "fault":
        return FAILED if result.kind in NAMING else 0
    return 0


def _select_words(text: str) -> str:
    """The reader names its run choice ``run=`` (the Python API's argument); this command's key is select=."""
    return re.sub(r"\brun=", "select=", text)


def hyperparameters(cfg: DictConfig) -> dict[str, Any]:
    return dict(OmegaConf.to_container(cfg.hp, resolve=True) or {})


def settle(cfg: DictConfig) -> list[str]:
    """Check the keys that take a fixed set of values and apply the old names (``run=``, ``format=``,
    ``catalogue=``); returns the notes to print for the old names used."""
    for key in ("output", "format"):
        value = cfg.get(key)
        if value is not None and value not in OUTPUTS:
            raise ConfigError(f"{key}={value!r}; {did_you_mean(value, OUTPUTS)}valid choices: {', '.join(OUTPUTS)}")
    fail_on = cfg.get("fail_on", "never")
    if fail_on not in FAIL_ON:
        raise ConfigError(f"fail_on={fail_on!r}; {did_you_mean(str(fail_on), FAIL_ON)}valid choices: "
                          f"{', '.join(FAIL_ON)}")
    check_algorithm(cfg.algorithm)
    notes = renamed(cfg, ALIASES)
    if cfg.get("catalogue") is not None:
        notes.append("note: catalogue= is now results_dir= (the model is read from "
                     "results_dir/catalogue/model/; catalogue=DIR still works)")
    return notes


def model_file(cfg: DictConfig) -> Path:
    return find_model(cfg.results_dir, cfg.get("catalogue"))


def read(cfg: DictConfig) -> LoadedLog:
    try:
        log = load_log(cfg.log, cfg.profile.name, run=None if cfg.select is None else str(cfg.select),
                       config=hyperparameters(cfg), algo=cfg.algorithm)
    except ConfigError as exc:
        raise ConfigError(_select_words(str(exc))) from None
    log.notes = [_select_words(n) for n in log.notes]
    return log


#: the command line's log, read and diagnosed once: the check before Hydra runs (validate) does the
#: work, the command (app) prints it (reading a TRL checkpoint's training_args.bin imports transformers)
_DONE: dict[str, tuple[LoadedLog, Diagnosis]] = {}
_COMPARED: dict[str, tuple[LoadedLog, Comparison]] = {}


def _key(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml({k: v for k, v in cfg.items() if k not in ("output", "top", "fail_on", "report")})


#: the diagnosis models read, per model file (a batch reads its model once)
_MODELS: dict[Path, Any] = {}


def models(cfg: DictConfig) -> Any:
    path = model_file(cfg)
    if path not in _MODELS:
        _MODELS[path] = load_models(path)
    return _MODELS[path]


def diagnosed(cfg: DictConfig) -> tuple[LoadedLog, Diagnosis]:
    """The log ``cfg`` names, read, and its diagnosis: computed once per configuration (the check before
    Hydra runs and the command share it; tests call it to diagnose in process as the command does)."""
    key = _key(cfg)
    if key not in _DONE:
        log = read(cfg)
        _DONE[key] = (log, diagnose_log(log, models(cfg), cfg.n_actions, cfg.optimizer_steps))
    return _DONE[key]


# ---- many logs in one process -------------------------------------------------------------------

ALL = "all"


def batch(cfg: DictConfig) -> list[tuple[str, str | None]] | None:
    """(path, run) of each log of a batch, or None when ``log=`` names one log. A batch is ``log=`` with a
    glob pattern (``'runs/*/progress.csv'``, ``'out/**/trainer_state.json'``: each match, a directory
    match holding several runs giving each of them) or ``select=all`` on a directory (each run in it)."""
    pattern = str(cfg.log)
    if any(c in pattern for c in "*?["):
        paths = sorted(glob.glob(pattern, recursive=True))
        if not paths:
            raise ConfigError(f"log={pattern}: no file or directory matches this pattern")
    elif cfg.select == ALL:
        paths = [pattern]
        if not Path(pattern).is_dir():
            raise ConfigError(f"select=all reads every run in a directory; log={pattern} is not one")
    else:
        return None
    out: list[tuple[str, str | None]] = []
    for path in paths:
        runs = find_runs(Path(path)) if Path(path).is_dir() else {}
        if len(runs) > 1 or (runs and cfg.select == ALL):
            out += [(path, name) for name in runs]
        else:
            out.append((path, None))
    return out


@dataclass
class Row:
    """One log of a batch: where it is, how it was read, its answer (or why it could not be read)."""
    log: str
    dialect: str = "-"
    algo: str = "-"
    steps: int = 0
    answer: str = ""
    code: int = 0
    error: str = ""
    item: dict[str, Any] | None = None
    result: Any = None
    entry: Any = None


def diagnose_batch(cfg: DictConfig, logs: list[tuple[str, str | None]]) -> list[Row]:
    """Each log of the batch read and diagnosed in this process (the model read once), with progress on
    stderr when it is a terminal; a log that cannot be read is a row with its one-line error, not the end of the batch."""
    rows = []
    for i, (path, run) in enumerate(logs, 1):
        name = path if run in (None, ".") else f"{path}/{run}"
        one = cfg.copy()
        with read_write(one):
            one.log, one.select = path, run
        if sys.stderr.isatty():        # progress on a terminal, overwritten in place (a CI log gets the table alone)
            print(f"\r\033[K[{i}/{len(logs)}] {name}", end="", file=sys.stderr, flush=True)
        try:
            log, d = diagnosed(one)
        except ConfigError as exc:
            rows.append(Row(name, answer="unreadable", code=2, error=str(exc),
                            entry=report_file.Entry(name, error=str(exc))))
            continue
        finally:
            _DONE.clear()
        r = d.result
        rows.append(Row(name, log.profile, log.algo, r.n_rows, short_answer(r), exit_code(r, cfg.fail_on),
                        item={**as_json(one, log, d), "log": name} if cfg.output == "json" else None,
                        result=r, entry=report_entry(one, log, d, name) if cfg.get("report") else None))
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)
    return rows


def report_entry(cfg: DictConfig, log: LoadedLog, d: Diagnosis, name: str) -> Any:
    """One log's part of the report file: its frame, answer, what fired, and the lines the command prints."""
    return report_file.Entry(name, log.metrics, d.result, tuple(d.fired), tuple(d.expected),
                             (verdict(d)[0], *describe(log, cfg), *report(d, cfg.top)), logged=tuple(log.used))


def write_report(cfg: DictConfig, entries: list[Any], title: str) -> None:
    path = report_file.check_path(cfg.report)
    report_file.write(path, entries, title)
    print(f"report: {path}", file=sys.stderr)


def short_answer(r: Any) -> str:
    """The answer in a few words, for a table: what it names, how sure, on what basis."""
    basis = {"invariants": "a broken invariant", "evidence": "exact evidence"}.get(r.basis, "the model")
    if r.answer == TOO_SHORT:
        return f"too short to judge ({r.n_rows} steps)"
    if r.answer == HEALTHY:
        return "healthy" + (f" (P = {r.probability:.2f})" if r.basis == "model" else f" ({basis})")
    if r.answer == UNKNOWN:
        return f"anomalous, cause unknown ({basis})"
    if r.kind == "class":
        what = r.fault_class or "this log cannot tell them apart"
        return f"one of {', '.join(r.members)}: {what} ({basis})"
    return f"{r.answer}" + (f" (P = {r.probability:.2f})" if r.basis == "model" else f" ({basis})")


def batch_lines(rows: list[Row], seconds: float) -> list[str]:
    """The batch's summary: counts, then one table row per log."""
    kinds = [r.result.kind for r in rows if r.result is not None]
    named = sum(k in NAMING for k in kinds)
    lines = [f"{len(rows)} logs in {seconds:.1f} s ({seconds / max(1, len(rows)):.1f} s a log): "
             f"{kinds.count(HEALTHY)} healthy, {named} naming a fault or a class, {kinds.count(UNKNOWN)} anomalous "
             f"with the cause unknown, {kinds.count(TOO_SHORT)} too short to judge, "
             f"{sum(bool(r.error) for r in rows)} unreadable", "",
             "| log | dialect | algorithm | steps | answer | exit |", "|---|---|---|---|---|---|"]
    for r in rows:
        answer = f"unreadable: {r.error}" if r.error else r.answer
        lines.append(f"| {r.log} | {r.dialect} | {r.algo} | {r.steps} | {answer.replace('|', '/')} | {r.code} |")
    return lines


#: the self-test's logs, packaged with the harness (their README: where each comes from)
SELF_TEST = Path(__file__).resolve().parent.parent / "data" / "selftest"


def as_expected(r: Any, expect: str) -> bool:
    """Whether an answer is the one a self-test log expects: healthy; a fault the answer names (alone or in
    its class); or the class of faults a broken invariant gives."""
    if expect == HEALTHY:
        return r.answer == HEALTHY
    return r.answer == expect or expect in r.members or r.fault_class == expect


def run_self_test(cfg: DictConfig) -> int:
    """Diagnose the packaged logs (:data:`SELF_TEST`) and print the scorecard: each log's expected and given
    answer; exit code 1 when one is not as expected."""
    labels = json.loads((SELF_TEST / "labels.json").read_text())
    start = time.perf_counter()
    rows = diagnose_batch(cfg, [(str(SELF_TEST / rel), None) for rel in labels])
    seconds = time.perf_counter() - start
    if cfg.get("report"):
        write_report(cfg, [r.entry for r in rows], "The self-test's logs")
    ok = {rel: row.result is not None and as_expected(row.result, label["expect"])
          for (rel, label), row in zip(labels.items(), rows)}
    healthy = [rel for rel, label in labels.items() if label["expect"] == HEALTHY]
    lines = [f"self-test: {sum(ok.values())} of {len(ok)} logs answered as expected in {seconds:.1f} s "
             f"({sum(ok[r] for r in healthy)} of {len(healthy)} healthy runs called healthy, "
             f"{sum(ok[r] for r in ok if r not in healthy)} of {len(ok) - len(healthy)} faulty runs named); "
             f"the logs: {SELF_TEST}", "",
             "| log | written by | expected | answer | as expected |", "|---|---|---|---|---|"]
    for (rel, label), row in zip(labels.items(), rows):
        answer = f"unreadable: {row.error}" if row.error else row.answer
        lines.append(f"| {rel} | {label['framework']} ({label['source']}) | {label['expect']} | {answer} | "
                     f"{'yes' if ok[rel] else 'NO'} |")
    print("\n".join(lines))
    return 0 if all(ok.values()) else FAILED


def run_batch(cfg: DictConfig, logs: list[tuple[str, str | None]]) -> int:
    """Diagnose a batch, print its summary (text) or one object (json); the exit code is the worst log's."""
    start = time.perf_counter()
    rows = diagnose_batch(cfg, logs)
    code = max((r.code for r in rows), default=0)
    if cfg.get("report"):
        write_report(cfg, [r.entry for r in rows], f"Diagnosis of {len(rows)} logs ({cfg.log})")
    if cfg.output == "json":
        print(json.dumps({"fail_on": cfg.fail_on, "exit_code": code, "seconds": time.perf_counter() - start,
                          "logs": [r.item or {"log": r.log, "answer": "unreadable", "error": r.error} for r in rows]},
                         indent=2, default=float))
    else:
        print("\n".join(batch_lines(rows, time.perf_counter() - start)))
    return code


def compared(cfg: DictConfig) -> tuple[LoadedLog, Comparison] | None:
    """With ``reference=PATH``: the reference log, read as the log is (its dialect and algorithm detected
    on its own; algo= sets both), and the log compared with it; None without ``reference``."""
    if cfg.get("reference") is None:
        return None
    key = _key(cfg)
    if key not in _COMPARED:
        log, _ = diagnosed(cfg)
        try:
            ref = load_log(cfg.reference, "auto", config=hyperparameters(cfg), algo=cfg.algorithm)
        except ConfigError as exc:
            raise ConfigError(f"reference={cfg.reference}: {str(exc).removeprefix(f'log={cfg.reference}: ')}") from None
        _COMPARED[key] = (ref, compare_logs(log, ref, model_file(cfg)))
    return _COMPARED[key]


def validate(cfg: DictConfig) -> None:
    if cfg.get("report"):
        report_file.check_path(cfg.report)
    if cfg.get("self_test"):
        settle(cfg)
        models(cfg)
        return
    if cfg.log is None:
        raise ConfigError("log=PATH is required (a TensorBoard run directory or event file, trainer_state.json, "
                          "progress.csv, a W&B export, a verl console log, or a CSV / JSON-lines log)")
    for note in settle(cfg):         # before the checks below, so it shows beside any error they raise
        print(note, file=sys.stderr)
    if batch(cfg) is not None:
        if cfg.get("reference") is not None:
            raise ConfigError("reference= compares one log with one healthy run; give log= one log, not a batch")
        models(cfg)
        return
    diagnosed(cfg)
    compared(cfg)


#: what a logged row holds when a framework logs every k-th training step
SPARSE_ROWS = {"trl": "TRL's average over logging_steps",
               "sb3": "SB3's log_interval: the last iteration's train/* values and the episode means then",
               "cleanrl": "the values written at that step"}


def cadence(metrics: Any, profile: str = "") -> str:
    """How many rows the log has and, when they skip training steps (TRL's and the HF Trainer's
    ``logging_steps``, SB3's ``log_interval``, a W&B export sampled every k steps: ``update`` counts the
    framework's training steps), which ones they are and what a row holds in that framework."""
    n = len(metrics)
    updates = metrics["update"].dropna() if "update" in metrics else None
    stride = float(updates.diff().dropna().median()) if updates is not None and len(updates) > 1 else 1.0
    if stride <= 1:
        return f"{n} training steps"
    holds = SPARSE_ROWS.get(profile, "the values logged at that step (a sampled export: the sampled step's)")
    return (f"{n} logged rows, one every {stride:g} training steps (steps {updates.iloc[0] + 1:g} .. "
            f"{updates.iloc[-1] + 1:g}; a row holds {holds})")


def describe(log: LoadedLog, cfg: DictConfig) -> list[str]:
    how = "detected from its names" if log.detected else "given"
    lines = [f"{cfg.log}: {log.source}",
             f"dialect: {log.profile} ({how}); {cadence(log.metrics, log.profile)}; algorithm {log.algo}",
             "mapped: " + ", ".join(f"{src} -> {dst}" for dst, src in log.used.items())]
    if log.unused:
        lines.append(f"not used ({len(log.unused)}): {', '.join(log.unused[:15])}"
                     + (" ..." if len(log.unused) > 15 else ""))
    lines.append("config: " + (", ".join(f"{k}={v}" for k, v in log.config.items()) if log.config else
                               "none found (the diagnosis works without it; +hp.KEY=VALUE adds context)"))
    lines += [f"note: {n}" for n in log.notes]
    path = model_file(cfg)
    lines.append(f"model file: {path}" + (" (shipped with the package)" if path == PACKAGED_MODEL else ""))
    return lines


def invariant_lines(r: Any) -> list[str]:
    """The broken invariants, each with the steps where it breaks and whether it rules out healthy."""
    lines = []
    for b in r.broken:
        why = ("decisive: no healthy run breaks it" if b["decisive"] else
               "not decisive: its false alarms on healthy runs are not measured at <= 1% on every set")
        lines.append(f"broken invariant: {b['line']} -> {CLASSES[b['class']].meaning} ({why})")
    return lines


def verdict(d: Diagnosis) -> list[str]:
    """The answer and the rule it follows from, in the numbers printed under it."""
    r = d.result
    if r.basis == "invariants":
        cls = CLASSES[r.fault_class]
        return [f"answer: {cls.meaning} (a broken invariant decides: healthy is impossible"
                + ("; the log is too short for the model, not for this" if r.n_rows < r.min_rows else "") + ")",
                f"  candidate faults: {', '.join(r.members)}; most likely {r.answer}"
                + (f" ({', '.join(r.support[r.answer])})" if r.support.get(r.answer) else " (by the model's ranking)"),
                f"  check: {cls.check}"]
    if r.answer == TOO_SHORT:
        return [f"answer: too short to judge ({r.n_rows} training steps; the diagnosis needs >= {r.min_rows})"]
    rule = (f"P(anomalous) = {r.anomalous:.2f} (a fault this log can show) "
            f"{'<' if r.anomalous < r.threshold else '>='} {r.threshold:.2f}")
    if d.model is None:
        rule = (f"formed from the invariants and exact signatures alone: no model is fitted on {d.view} "
                "runs of this kind yet, so no scale signature's threshold is calibrated for them")
    elif r.basis == "evidence":
        rule = ("formed from the invariants and signatures alone: " + (
            f"the log lies outside the model's training range in {len(r.unlike_training)} quantities"
            if len(r.unlike_training) >= OUT_OF_RANGE else "no fault the model ranks has support in this log")
            + "; the model's ranking below is a hint")
    if r.answer == HEALTHY:
        lines = ["answer: healthy" + (", or a fault this log cannot show" if r.invisible else "")
                 + (f" (P = {r.probability:.2f}; {rule})" if r.basis == "model" else f" ({rule})")]
        top = next(iter(r.probabilities), HEALTHY)
        if top != HEALTHY and r.basis == "model":   # a fault this log cannot show outranks healthy: named
            lines.append(f"  most probable of them: {top} ({r.probabilities[top]:.2f}; healthy "
                         f"{r.probabilities.get(HEALTHY, 0.0):.2f}): this log cannot tell it from healthy, check for it")
    elif r.answer == UNKNOWN:
        lines = [f"answer: anomalous, cause unknown ({rule}"
                 + (f"; no fault or class reaches {r.unknown_threshold:.2f})" if r.basis == "model" else ")")]
    elif r.kind == "class":
        lines = [f"answer: one of {', '.join(r.members)} (P = {r.class_probability:.2f}: this log cannot tell "
                 f"them apart; {rule}); most likely {r.answer} ({r.probability:.2f})",
                 "  settings to check: " + ("; ".join(r.settings) or "-")]
    else:
        lines = [f"answer: {r.answer} (P = {r.probability:.2f}; {rule})"]
        if r.settings:
            lines.append("  settings to check: " + "; ".join(r.settings))
    for fault, why in r.support.items():
        lines.append(f"  {fault} is supported by: {'; '.join(why)}")
    if r.unlike_training:
        lines.append("unlike every training log of this view in: " + ", ".join(
            f"{name} ({side})" for name, side in r.unlike_training.items())
            + " -- the model reads those as the most extreme training value; weigh the answer accordingly")
    if r.invisible and d.model is None:
        lines.append("faults this log cannot show without a fitted model (their expected signatures are all scale "
                     "signatures): " + ", ".join(r.invisible))
    elif r.invisible:
        lines.append(f"faults this log cannot show (their runs look healthy in the {d.view} view and no evidence "
                     "here shows them): " + ", ".join(r.invisible))
    return lines


def report(d: Diagnosis, top: int) -> list[str]:
    """Top-down, as an argument: broken invariants and fired signatures, the answer they support and
    what to check, the exact evidence, then the model and its probabilities."""
    card = d.model.info if d.model is not None else {}
    oos = card.get("out_of_sample") or {}
    r = d.result
    lines = ["", *invariant_lines(r),
             "signatures that fire in this log (default thresholds): "
             + (", ".join(f"{n} ({res.evidence})" for n, res in d.fired.items()) or "none"),
             *verdict(d)]
    if r.ruled_out:
        lines.append("ruled out (every expected signature this log can read stays silent, nothing else shows "
                     "them): " + ", ".join(r.ruled_out))
    lines += [evidence.report_line(name, ev) for name, ev in r.evidence.items()]
    if d.model is None:
        lines.append(f"model: none fitted on runs of this kind ({r.n_rows} steps read; the harness trains them as "
                     "algo=ppo_lm; a catalogue built with its cells adds one)")
        return lines + _expected_lines(d)
    lines.append(f"model: {d.model.algo} in the {d.view} view, fitted on {card.get('n_runs', '?')} of the "
                 f"harness's training runs" + (
                     f"; out of sample (held-out runs): healthy called healthy {oos['healthy_called_healthy']:.0%}, "
                     f"faulty called anomalous {oos['tpr']:.0%}, top-1 {oos['top1']:.0%}, class-level "
                     f"{oos['class_level']:.0%}" if oos else ""))
    lines.append(f"probabilities (after the evidence and the prior: healthy-looking classes x{r.healthy_weight:.2f}; "
                 "the model's own in brackets" + ("; a hint only" if r.basis != "model" else "") + "):")
    lines += [f"  {name:28s} {p:6.3f}  ({r.model_probabilities.get(name, float('nan')):.3f})"
              for name, p in list(r.probabilities.items())[:top]]
    return lines + _expected_lines(d)


def _expected_lines(d: Diagnosis) -> list[str]:
    if not d.expected:
        return []
    return [f"{d.result.answer}'s expected signature in this log:",
            *(f"  - {name}: {what}" for name, what in d.expected.items())]


def against_reference(cfg: DictConfig, ref: LoadedLog, c: Comparison, top: int) -> list[str]:
    """The comparison with the reference run, after the log's own answer."""
    lines = ["", f"against the reference run {cfg.reference} ({ref.profile}; {len(ref.metrics)} training steps), "
             f"over the {c.span} steps both logs cover:"]
    lines += [f"  note: {n}" for n in c.notes]
    if c.config:
        lines.append("  configuration differs (this run vs the reference): "
                     + ", ".join(f"{k} {a} vs {b}" for k, (a, b) in c.config.items())
                     + " -- the differences below may come from that")
    if not c.metrics:
        lines.append("  no metric both logs carry could be compared")
        return lines
    if not c.differing:
        lines.append(f"  no metric differs beyond seed noise (|2 AUROC - 1| >= {c.threshold:.2f}) in the "
                     f"{len(c.metrics)} compared: {', '.join(m.metric for m in c.metrics)}")
        lines.append("  a fault whose catalogue runs differ from their twins in none of these cannot show here")
        return lines
    lines.append(f"  differs beyond seed noise (|2 AUROC - 1| >= {c.threshold:.2f}; {len(c.differing)} of "
                 f"{len(c.metrics)} compared):")
    lines += [f"    {m.describe()}" for m in c.differing]
    alike = [m.metric for m in c.metrics if not m.differs]
    if alike:
        lines.append("  alike: " + ", ".join(alike))
    if not c.ranking:
        lines.append("  no known fault's catalogue cells are nearer these differences than no difference at all")
    else:
        lines.append("  nearest known faults (each fault's catalogue runs against their healthy twins; RMS distance of the "
                     f"effects 2 AUROC - 1, no difference at all = {c.healthy_distance:.2f}; a hint, weaker than the "
                     "answer above: docs/diagnose.md#against-a-healthy-reference-run):")
        for m in c.ranking[:top]:
            lines.append(f"    {m.fault:28s} {m.score:.2f} ({m.setup})  agree: {', '.join(m.agree) or '-'}"
                         + (f"; opposite: {', '.join(m.disagree)}" if m.disagree else "")
                         + (f"; expected but alike: {', '.join(m.absent)}" if m.absent else ""))
    return lines


def comparison_json(cfg: DictConfig, ref: LoadedLog, c: Comparison) -> dict[str, Any]:
    return {"log": str(cfg.reference), "profile": ref.profile, "span": c.span, "threshold": c.threshold,
            "notes": list(c.notes), "config_differences": {k: list(v) for k, v in c.config.items()},
            "metrics": [{"metric": m.metric, "auroc": m.auroc, "run_median": m.run_median,
                         "reference_median": m.reference_median, "differs": m.differs} for m in c.metrics],
            "ranking": [{"fault": m.fault, "distance": m.score, "cell": m.setup, "agree": list(m.agree), "opposite": list(m.disagree),
                         "expected_but_alike": list(m.absent)} for m in c.ranking]}


def as_json(cfg: DictConfig, log: LoadedLog, d: Diagnosis) -> dict[str, Any]:
    """The machine-readable answer (a stable contract for scripts)."""
    r = d.result
    pair = compared(cfg)
    ranking = [{"fault": k, "probability": v, "score": v} for k, v in list(r.probabilities.items())[: cfg.top]]
    return {"log": str(cfg.log), "model_file": str(model_file(cfg)), "profile": log.profile, "detected": log.detected, "algo": log.algo,
            "view": d.view, "n_steps": r.n_rows, "answer": r.answer, "kind": r.kind, "probability": r.probability,
            "class": list(r.members), "class_probability": r.class_probability, "settings_to_check": list(r.settings),
            "anomalous": r.anomalous, "threshold": r.threshold, "healthy_weight": r.healthy_weight, "unknown_threshold": r.unknown_threshold,
            "min_steps": r.min_rows, "cannot_show": list(r.invisible), "unlike_training": r.unlike_training,
            "evidence": r.evidence, "basis": r.basis, "fault_class": r.fault_class or None,
            "class_meaning": CLASSES[r.fault_class].meaning if r.fault_class else None,
            "invariants": [{k: v for k, v in b.items() if k != "line"} for b in r.broken],
            "support": {k: list(v) for k, v in r.support.items()}, "ruled_out": list(r.ruled_out),
            "probabilities": r.probabilities, "model_probabilities": r.model_probabilities, "ranking": ranking,
            "expected_signature": d.expected, "fired": {n: res.evidence for n, res in d.fired.items()},
            "notes": list(log.notes),
            "reference": comparison_json(cfg, *pair) if pair else None}


@hydra.main(config_path=str(CONF_DIR), config_name="diagnose", version_base=None)
def app(cfg: DictConfig) -> None:
    settle(cfg)                      # its notes were printed when the command line was checked (validate)
    if cfg.get("self_test"):
        code = run_self_test(cfg)
        if code:
            sys.exit(code)
        return
    logs = batch(cfg)
    if logs is not None:
        code = run_batch(cfg, logs)
        if code:
            sys.exit(code)
        return
    log, d = diagnosed(cfg)
    code = exit_code(d.result, cfg.fail_on)
    if cfg.get("report"):
        write_report(cfg, [report_entry(cfg, log, d, str(cfg.log))], f"Diagnosis of {cfg.log}")
    if cfg.output == "json":
        print(json.dumps({**as_json(cfg, log, d), "fail_on": cfg.fail_on, "exit_code": code}, indent=2,
                         default=float))
    else:
        lines = describe(log, cfg) + report(d, cfg.top)
        pair = compared(cfg)
        if pair is not None:
            lines += against_reference(cfg, *pair, cfg.top)
        if code:
            lines.append(f"exit code {code}: the answer is {d.result.answer} and fail_on={cfg.fail_on}")
        print("\n".join(lines))
    if code:
        sys.exit(code)


def dashed_fail_on(argv: list[str]) -> list[str]:
    """``--fail-on VALUE`` and ``--fail-on=VALUE`` (the spelling of other monitors' CLIs) as ``fail_on=VALUE``."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--fail-on" and i + 1 < len(argv):
            out.append(f"fail_on={argv[i + 1]}")
            i += 2
            continue
        out.append(f"fail_on={arg.split('=', 1)[1]}" if arg.startswith("--fail-on=") else arg)
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """The command; ``argv`` defaults to the process's arguments (in-process: ``main([...])``). The log is
    read and diagnosed once per call: a second call reads it again (it may have grown)."""
    try:
        run_app(app, config_name="diagnose", validate=validate, positional="log", spellings={"algo": "algorithm"},
                argv=dashed_fail_on(sys.argv[1:] if argv is None else list(argv)))
    finally:
        _DONE.clear()
        _COMPARED.clear()


if __name__ == "__main__":
    main()

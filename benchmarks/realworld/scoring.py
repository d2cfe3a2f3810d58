"""Scoring the records: detection and attribution of the diagnosis and of the baselines per report row
and log kind (:func:`score_rows`, with ``harness.analysis.scores``), per fault, the confusion, the
targets, each log's failures and misreads, and what changed since the previous figures
(previous.py); :func:`summarise` makes every table of the report from the records alone.

The harness is imported inside the functions only (see labels.py).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from benchmarks.realworld.labels import (
    EXPECTED,
    HEALTHY,
    LOG_LIMITS,
    POSTHOC,
    SETTINGS,
    can_show,
    groups_of,
    limit_of,
)
from benchmarks.realworld.previous import changes

#: the rule sets streamed beside the diagnosis (harness.analysis.scores.RULE_SETS; tests/logs/test_realworld.py
#: keeps the two in step): the folk rules, the config-aware rules, post-training-toolkit's heuristics
RULES = ("folk", "config_aware", "ptt")
DETECTORS = ("diagnosis", "always_healthy", "flag_everything", *RULES)
#: what each of SB3, CleanRL and TRL must reach on its primary logs (top-1 and class-level on the faults
#: its log can show)
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("healthy_called_healthy", "healthy called healthy", 0.90),
    ("top1", "top-1 (faults the log can show)", 0.70),
    ("class_level", "class-level (faults the log can show)", 0.85),
)
TARGET_GROUPS = ("sb3", "cleanrl", "trl")


def problems_of(r: dict[str, Any]) -> list[dict[str, Any]]:
    """A log's failures and misreads: diagnose or the baselines' reading failed, or read it with another
    dialect or algorithm than the framework's."""
    where = {"path": r["path"], "framework": r["framework"], "kind": r["kind"]}
    out = []
    d, b = r["diagnosis"], r["baselines"]
    expected = EXPECTED[r["framework"]]
    if "error" in d:
        out.append({**where, "problem": f"diagnose failed: {d['error']}", "stderr": d.get("stderr", "")})
    else:
        out += [{**where, "problem": f"read as {k}={d[k]!r}, expected {expected[k]!r}"}
                for k in ("profile", "algo") if d[k] != expected[k]]
    if "error" not in d and (fault := unsupported(d)):
        out.append({**where, "problem": f"names {fault}, but none of its readable expected signatures fires and "
                                        "nothing in the log (a broken invariant of its class, an evidence item) shows it"})
    if "error" in b:
        out.append({**where, "problem": f"baselines: the log could not be read: {b['error']}"})
    else:
        out += [{**where, "problem": f"baselines read it as {k}={b[k]!r}, expected {expected[k]!r}"}
                for k in ("profile", "algo") if b[k] != expected[k]]
    return out


def unsupported(d: dict[str, Any]) -> str | None:
    """The fault an answer names without support: every expected signature of it that the log can read
    stays silent and ``support`` (its fired signatures, broken invariants of its class, evidence items)
    is empty. The fault named is the answer (a class answer's most probable member, which the report
    names; the other members are candidates). A class a decisive broken invariant answers names its
    class, not a fault: never counted."""
    if d.get("basis") == "invariants":
        return None
    named = [d["answer"]] if d.get("kind") in ("fault", "class") else []
    status = d.get("expected_signature") or {}
    from faults import FAULTS as REGISTRY
    for fault in named:
        mine = [status[k] for k in (REGISTRY[fault].expected if fault in REGISTRY else ()) if k in status]
        readable = [v for v in mine if not str(v).startswith(("not in", "in this log, but"))]
        if readable and not any(str(v).startswith("fired") for v in readable) and not (d.get("support") or {}).get(fault):
            return fault
    return None


def scored(r: dict[str, Any]) -> bool:
    """Scored logs: diagnose answered and the baselines read the log (every detector is scored on the
    same logs; the others are counted as errors and listed under the failures)."""
    return "error" not in r["diagnosis"] and "error" not in r["baselines"]


def judge(records: Sequence[dict[str, Any]], detector: str, attribution: str = "can_show") -> list[Any]:
    """``records`` as judged by ``detector`` (harness.analysis.scores.Judged); attribution is scored on
    the faults the framework's log can show (``can_show``) or on all (``all``)."""
    from harness.analysis import scores as sc

    labels = [r["fault"] for r in records]
    known = [attribution == "all" or can_show(r["framework"], r["fault"], r.get("group")) for r in records]
    if detector == "diagnosis":
        out = []
        for r, k in zip(records, known):
            d = r["diagnosis"]
            top3 = tuple(list(d.get("probabilities") or {})[:3]) or tuple(d.get("ranking") or ())[:3]
            score = 0.0 if d.get("anomalous") is None else float(d["anomalous"])     # none given: ranked lowest
            out.append(sc.Judged(r["fault"], d["answer"], score, members=tuple(d.get("class") or ()), top3=top3,
                                 known=k))
        return out
    if detector in ("always_healthy", "flag_everything"):
        return sc.trivial(labels, detector, known)
    verdicts = [r["baselines"][detector] for r in records]
    return sc.from_rules(labels, [float(v["alarmed"]) for v in verdicts], [v["fault"] or "" for v in verdicts], known)


ATTRIBUTION = ("top1", "class_level", "top3", "right_when_detected")
DETECTION = ("auroc", "healthy_called_healthy", "tpr", "tpr_at_10_fpr")


def clean(x: Any) -> Any:
    """NaN -> None, numpy scalars -> floats, rounded to 4 decimals (the JSON stays standard)."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, (str, int)):
        return x
    try:
        f = float(x)
    except (TypeError, ValueError):
        return x
    return None if math.isnan(f) else round(f, 4)


def score_row(records: Sequence[dict[str, Any]], detector: str) -> dict[str, Any]:
    """Detection on every scored log; attribution on the faults the log can show and on all faults."""
    from harness.analysis import scores as sc

    shown = sc.score(judge(records, detector, "can_show"))
    every = sc.score(judge(records, detector, "all"))
    faulty = [r for r in records if r["fault"] != HEALTHY]
    return clean({"detector": detector, "n_healthy": shown.n_healthy, "n_faulty": shown.n_faulty,
                  **{k: getattr(shown, k) for k in DETECTION},
                  "can_show": {"n": sum(can_show(r["framework"], r["fault"], r.get("group")) for r in faulty),
                               **{k: getattr(shown, k) for k in ATTRIBUTION}},
                  "all": {"n": len(faulty), **{k: getattr(every, k) for k in ATTRIBUTION}}})


def scopes(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(report row, primary | tensorboard) -> its logs, in report order."""
    out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        for g in groups_of(r):
            out[(g, r["log"])].append(r)
    rank = {g: i for i, g in enumerate(["sb3", "cleanrl", "trl", *SETTINGS.values(), "trl-harness", "trl_ppo", "all"])}
    return dict(sorted(out.items(), key=lambda kv: (rank.get(kv[0][0], len(rank)), kv[0][0], kv[0][1] != "primary")))


def score_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per report row, log kind and detector (the diagnosis first, then the baselines)."""
    rows = []
    for (group, log), rs in scopes(records).items():
        ok = [r for r in rs if scored(r)]
        for detector in DETECTORS:
            row = score_row(ok, detector) if ok else {"detector": detector, "n_healthy": 0, "n_faulty": 0}
            rows.append({"framework": group, "log": log, **row, "errors": len(rs) - len(ok)})
    return rows


def overall(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The diagnosis' headline figures per "<report row>/<log>" (the shape --previous compares with)."""
    out = {}
    for r in rows:
        if r["detector"] != "diagnosis" or not (r["n_healthy"] or r["n_faulty"]):
            continue
        out[f"{r['framework']}/{r['log']}"] = {
            "healthy_n": r["n_healthy"], "healthy_called_healthy": r.get("healthy_called_healthy"),
            "faulty_all_n": r["all"]["n"], "top1_all": r["all"]["top1"],
            "faulty_can_show_n": r["can_show"]["n"], "top1_can_show": r["can_show"]["top1"],
            "class_level_can_show": r["can_show"]["class_level"], "auroc": r.get("auroc"), "errors": r["errors"]}
    return out


def rule_right(r: dict[str, Any], name: str) -> bool:
    """The rule set's answer is the label (healthy: it did not alarm; a fault: its strongest alarm names it)."""
    v = r["baselines"][name]
    return (not v["alarmed"]) if r["fault"] == HEALTHY else bool(v["alarmed"] and v["fault"] == r["fault"])


def per_fault(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A row per report row (TRL per setting), log kind and fault: counts of logs, top-1 and class-level
    answers, the answers, how often diagnose said the log cannot show the fault, and the rule sets' top-1."""
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        cells[(r["group"], r["log"], r["fault"])].append(r)
    rank = {g: i for i, g in enumerate(["sb3", "cleanrl", *SETTINGS.values(), "trl", "trl-harness", "trl_ppo"])}
    rows = []
    for (group, log, fault), rs in sorted(cells.items(), key=lambda kv: (rank.get(kv[0][0], 99), kv[0][0],
                                                                        kv[0][1] != "primary", kv[0][2] != HEALTHY,
                                                                        kv[0][2])):
        ok = [r for r in rs if scored(r)]
        fw = rs[0]["framework"]
        rows.append({
            "framework": group, "log": log, "fault": fault, "can_show": can_show(fw, fault, group),
            "known": rs[0]["known"], "limit": limit_of(fw, fault, group), "n": len(rs), "errors": len(rs) - len(ok),
            "top1": sum(r["diagnosis"]["answer"] == fault for r in ok),
            "class_level": sum(r["diagnosis"]["answer"] == fault or fault in (r["diagnosis"].get("class") or ())
                               for r in ok),
            "said_cannot_show": sum(fault in (r["diagnosis"].get("cannot_show") or ()) for r in ok),
            **{f"{name}_top1": sum(rule_right(r, name) for r in ok) for name in RULES},
            "answers": dict(Counter(r["answer"] for r in rs).most_common())})
    return rows


def confusion(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """Primary logs: report row -> true fault -> the diagnosis' answers."""
    out: dict[str, dict[str, Counter]] = defaultdict(dict)
    for r in records:
        if r["log"] == "primary":
            out[r["group"]].setdefault(r["fault"], Counter())[r["answer"]] += 1
    return {g: {f: dict(c.most_common()) for f, c in sorted(v.items())} for g, v in out.items()}


def targets(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """SB3, CleanRL and TRL (and each TRL setting), primary logs, the diagnosis: each target with the
    measured value and whether it is met (None: no logs to measure it on)."""
    mine = {r["framework"]: r for r in rows if r["log"] == "primary" and r["detector"] == "diagnosis"}
    out = []
    for group in [*TARGET_GROUPS, *SETTINGS.values()]:
        r = mine.get(group, {})
        for key, what, goal in TARGETS:
            if key == "healthy_called_healthy":
                value, n = r.get(key), r.get("n_healthy", 0)
            else:
                value, n = (r.get("can_show") or {}).get(key), (r.get("can_show") or {}).get("n", 0)
            late = [] if key == "healthy_called_healthy" else [
                f"{g} {fault}" for (g, fault), text in LOG_LIMITS.items()
                if POSTHOC in text and (g == group or g.startswith(f"{group} ("))]
            every = r.get("all") or {}
            out.append({"framework": group, "measure": what, "key": key, "target": goal, "value": value, "n": n,
                        "met": None if value is None else bool(value >= goal), "posthoc": late,
                        "value_all": every.get(key) if late else None, "n_all": every.get("n") if late else None})
    return out


def summarise(records: Sequence[dict[str, Any]], previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every table of the report from the per-log records (no diagnosing)."""
    rows = score_rows(records)
    now = overall(rows)
    return {"scores": rows, "overall": now, "targets": targets(rows), "changes": changes(now, previous),
            "per_fault": per_fault(records), "confusion": confusion(records),
            "problems": [p for r in records for p in problems_of(r)]}

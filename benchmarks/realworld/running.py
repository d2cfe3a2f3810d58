"""Running the evaluation on each log: the diagnosis as a user gets it (``python -m harness.diagnose
log=<path> output=json`` in a subprocess), the rule baselines on the same log as diagnose reads it, and
the log's record of both (:func:`record`); :func:`run_all` runs them ``jobs`` logs at once and
keeps each answer in the ``--cache`` file as it comes.

The harness is imported inside the functions only (see labels.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from benchmarks.realworld.labels import EXPECTED, HEALTHY, REPO, can_show, group_of
from benchmarks.realworld.scoring import clean

DEFAULT_CATALOGUE = REPO / "results" / "catalogue"
#: the answer recorded for a log diagnose could not answer
ERROR = "error"

DIAGNOSIS_FIELDS = ("answer", "kind", "class", "probability", "class_probability", "anomalous", "threshold",
                    "unknown_threshold", "cannot_show", "evidence", "settings_to_check", "fired", "profile",
                    "detected", "algo", "view", "n_steps", "min_steps", "basis", "fault_class", "invariants",
                    "support", "ruled_out", "expected_signature")


def parse_answer(stdout: str) -> dict[str, Any]:
    """The one JSON object ``diagnose output=json`` prints (harness/commands/diagnose.py ``as_json``).
    Anything printed before it (a warning) is skipped."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON object in diagnose's output")
    obj, _ = json.JSONDecoder().raw_decode(stdout[start:])
    missing = [k for k in ("answer", "kind", "class", "anomalous", "probabilities", "ranking", "profile", "algo")
               if k not in obj]
    if missing:
        raise ValueError(f"diagnose's JSON lacks {', '.join(missing)}")
    if not isinstance(obj["answer"], str) or not isinstance(obj["ranking"], list) \
            or not isinstance(obj["probabilities"], dict) or not isinstance(obj["class"], list):
        raise ValueError("diagnose's JSON: answer must be a string, ranking and class lists, probabilities a mapping")
    return obj


def diagnose(path: Path, catalogue: Path | str = DEFAULT_CATALOGUE, timeout: float = 600.0) -> dict[str, Any]:
    """Run diagnose on one log as a user would: the fields of its JSON answer that the scores and the
    report use and ``wall_s``; or {"error": one line, "stderr": tail}."""
    cmd = [sys.executable, "-m", "harness.diagnose", f"log={path}", "output=json", f"catalogue={catalogue}"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "stderr": "", "wall_s": timeout}
    wall = round(time.perf_counter() - start, 2)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}", "returncode": proc.returncode,
                "stderr": "\n".join(lines[-30:]), "wall_s": wall}
    try:
        obj = parse_answer(proc.stdout)
    except ValueError as e:
        return {"error": f"unparseable output: {e}", "stderr": proc.stdout[-2000:], "wall_s": wall}
    out = {k: obj.get(k) for k in DIAGNOSIS_FIELDS}
    out["probabilities"] = {str(k): float(v) for k, v in obj["probabilities"].items()}
    out["ranking"] = [r.get("fault") for r in obj["ranking"]]
    out["wall_s"] = wall
    return out


def baselines(path: Path) -> dict[str, Any]:
    """The rule baselines on one log, read as diagnose reads it (``load_log``, auto profile): for each
    of the rule sets (``RULES``) whether it alarmed, its first alarm's update, the fault its
    strongest alarm names and that alarm's score; or {"error": one line}."""
    from harness.detection.stream import baseline_verdicts
    from harness.logs import load_log

    start = time.perf_counter()
    try:
        log = load_log(path)
        end = len(log.metrics)
        verdicts = baseline_verdicts(log.metrics, log.algo, log.config, (end,))
    except Exception as e:  # an unreadable log is reported, the others go on
        return {"error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}",
                "wall_s": round(time.perf_counter() - start, 2)}
    out: dict[str, Any] = {"profile": log.profile, "algo": log.algo, "n_steps": end,
                           "wall_s": round(time.perf_counter() - start, 2)}
    for name, by_end in verdicts.items():
        v = by_end[end]
        out[name] = {"alarmed": v.first is not None, "first": v.first, "fault": v.fault,
                     "strongest": None if v.strongest is None or math.isnan(v.strongest) else float(v.strongest)}
    return out


def relative(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def record(task: dict[str, Any], diagnosis: dict[str, Any], base: dict[str, Any],
           known: dict[str, list[str]]) -> dict[str, Any]:
    """One log's entry of the JSON: what it is, what diagnose said, what the baselines said."""
    label = task["label"]
    fw, fault = label["framework"], label["fault"]
    return {"path": relative(task["path"]), "framework": fw, "setting": label.get("setting"),
            "group": group_of(fw, label.get("setting")), "log": task["log"], "kind": task["kind"],
            "env": label.get("env"), "variant": label.get("variant"), "fault": fault, "how": label.get("how"),
            "seed": label.get("seed"), "name": label.get("name"), "config": label.get("config"),
            "can_show": can_show(fw, fault, group_of(fw, label.get("setting"))),
            "known": algo_knows(fault, EXPECTED[fw]["algo"], known),
            "answer": diagnosis.get("answer", ERROR), "diagnosis": diagnosis, "baselines": base}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("stable_baselines3", "trl", "transformers", "torch", "gymnasium", "scikit-learn"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def known_faults() -> dict[str, list[str]]:
    """{fault: algos} of the harness's fault registry."""
    from faults import FAULTS as REGISTRY

    return {k: list(c.algos) for k, c in REGISTRY.items() if k != "none"}


def algo_knows(fault: str, algo: str, known: dict[str, list[str]]) -> bool:
    return fault == HEALTHY or algo in known.get(fault, [])


def git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def code_version() -> str:
    """What answers a log: the git trees of harness/ and faults/ (a commit that changes neither, e.g. a
    benchmark's, keeps the cache), "+dirty" while either has uncommitted changes."""
    trees = [subprocess.run(["git", "rev-parse", "--short", f"HEAD:{d}"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip() for d in ("harness", "faults")]
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "harness", "faults"], cwd=REPO).returncode != 0
    return "-".join(trees) + ("+dirty" if dirty else "")


def cached_answers(cache: Path | None, key: dict[str, str]) -> dict[str, Any]:
    """The answers ``--cache`` holds that were made by this code (``key``: :func:`code_version`, with no
    uncommitted change, and the catalogue), by log path and kind."""
    if cache is None or not cache.is_file() or key["commit"].endswith("+dirty"):
        return {}
    out = {}
    for line in cache.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:               # a line cut short by a crash: answered again
            continue
        if entry.get("key") == key:
            out[f"{entry['path']}|{entry['kind']}"] = (entry["diagnosis"], entry["baselines"])
    return out


def run_all(todo: Sequence[dict[str, Any]], catalogue: Path | str, jobs: int,
            progress: Callable[[str], None] | None = None,
            cache: Path | None = None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(diagnosis, baselines) of every task, in task order, ``jobs`` logs at once (diagnose in a
    subprocess, the baselines in this process). ``cache``: a JSON-lines file of answers, one line
    appended per log as it is answered; a log answered there by the same code and catalogue is not
    diagnosed again (an evaluation cut short resumes; logs still being generated join later)."""
    key = {"commit": code_version(), "catalogue": str(catalogue)}
    known = cached_answers(cache, key)

    def one(t: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return diagnose(t["path"], catalogue), baselines(t["path"])

    out: list[Any] = [None] * len(todo)
    for i, t in enumerate(todo):
        out[i] = known.get(f"{relative(t['path'])}|{t['kind']}")
    if progress and any(out):
        progress(f"{sum(x is not None for x in out)} of {len(todo)} logs answered before ({cache})")
    if cache is not None and cache.is_file() and not cache.read_bytes().endswith(b"\n"):
        with cache.open("a") as fh:          # a line cut short by a crash ends before the next answer
            fh.write("\n")
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {pool.submit(one, t): i for i, t in enumerate(todo) if out[i] is None}
        for done, f in enumerate(as_completed(futures), 1):
            i = futures[f]
            out[i] = f.result()
            if cache is not None and not key["commit"].endswith("+dirty"):
                with cache.open("a") as fh:
                    fh.write(json.dumps(clean({"key": key, "path": relative(todo[i]["path"]), "kind": todo[i]["kind"],
                                               "diagnosis": out[i][0], "baselines": out[i][1]})) + "\n")
            if progress:
                d = out[i][0]
                progress(f"[{done}/{len(todo)}] {relative(todo[i]['path'])}: "
                         f"{d.get('answer') or 'error: ' + d.get('error', '?')}")
    return out

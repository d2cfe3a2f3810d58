"""How ``python -m harness.diagnose`` does on real frameworks' logs, split the way users need it, beside
trivial and rule baselines.

    python benchmarks/realworld/evaluate.py [--root results/realworld] [--jobs 2] [--tensorboard subset|all|none]
        [--catalogue results/catalogue] [--limit N] [--out benchmarks/results/realworld] [--from-json]

Reads the label files of the frameworks present under ``--root`` (``<root>/<framework>/labels.json``:
``sb3`` from sb3_runs.py, ``cleanrl`` from cleanrl_runs.py, ``trl`` from trl_runs.py with its two
settings, ``trl-harness`` from trl_backend_logs.py, ``trl_ppo`` from trl_ppo_runs.py; any other directory is
skipped). For every log:

- the diagnosis, as a user gets it: ``python -m harness.diagnose log=<path> output=json`` in a
  subprocess, no profile given (the dialect is auto-detected) — SB3's ``progress.csv``, CleanRL's
  TensorBoard run directory exactly as CleanRL leaves it, TRL's last
  ``checkpoint-*/trainer_state.json`` — plus the TensorBoard run directory of a subset fixed in
  advance (SB3 on CartPole-v1 and Pendulum-v1, TRL seeds 0 and 1);
- the baselines on the same log: it is read with ``harness.logs.load_log`` (auto profile, the
  reading diagnose does) and the rule sets ``folk``, ``config_aware`` and ``ptt`` are streamed over its
  canonical metrics with its hyperparameters (``harness.detection.stream.baseline_verdicts``);
  ``always_healthy`` and ``flag_everything`` need no reading.

It writes ``<out>.md`` and ``<out>.json``: per framework (TRL also per setting) and log kind, the
detection scores (AUROC, healthy called healthy, faulty called anomalous, TPR at 10% false alarms)
and the attribution scores (top-1, class-level, top-3, right when detected) on the faults that
framework's log can show (``LOG_LIMITS``, decided from what the framework logs before looking at any
answer) and on all faults, of the diagnosis and of the four baselines in the same table
(``harness.analysis.scores``); the targets (healthy called healthy >= 90%, top-1 >= 70%, class-level
>= 85% on what the log can show); per-fault counts and the confusion list; what changed since the
figures published at ``--previous`` (git revision, default main); every diagnose failure or misread.
The JSON keeps every log's answer, probabilities and baseline verdicts; ``--from-json`` summarises
them again without diagnosing.

**A test set.** Never tune the diagnosis' thresholds, features or model to these logs; other real
logs nobody here produced will judge the result too.

This file is the command: it wires the evaluation's parts, one module per job, all in
benchmarks/realworld/ (none imports the harness at its top: common.py, which the generators import,
takes ``FAULTS`` from labels.py):

- ``labels.py``: the name table ``FAULTS``, ``LOG_LIMITS``, the frameworks and report rows, and
  :func:`tasks` (the labels -> the logs to diagnose);
- ``running.py``: diagnose and the baselines on one log, the log's record, :func:`run_all` (``--jobs``,
  ``--cache``);
- ``scoring.py``: the scores, per-fault counts, confusion, targets and problems (:func:`summarise`);
- ``previous.py``: the figures published at ``--previous`` and what changed since;
- ``report.py``: the markdown and JSON (:func:`write`), the test set's account ``NOT_TUNED``.

Every name other scripts import from here (``tasks``, ``fault_label``, ``group_of``, ``FAULTS``, ...)
is still importable from this module.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(REPO))

from benchmarks.realworld.labels import (  # noqa: E402 - importable once the repository is on the path
    DEFAULT_ROOT,
    EXPECTED,
    FAULTS,
    HEALTHY,
    LIMITS_AS,
    LOG_LIMITS,
    POSTHOC,
    PRIMARY_KIND,
    SETTINGS,
    can_show,
    fault_label,
    group_of,
    groups_of,
    limit_of,
    skipped_dirs,
    tasks,
    tensorboard_subset,
)
from benchmarks.realworld.previous import PUBLISHED, changes, previous_figures  # noqa: E402
from benchmarks.realworld.report import NOT_TUNED, not_tuned, num, pct, render, write  # noqa: E402
from benchmarks.realworld.running import (  # noqa: E402
    DEFAULT_CATALOGUE,
    DIAGNOSIS_FIELDS,
    ERROR,
    algo_knows,
    baselines,
    cached_answers,
    code_version,
    diagnose,
    git_commit,
    known_faults,
    parse_answer,
    record,
    relative,
    run_all,
    versions,
)
from benchmarks.realworld.scoring import (  # noqa: E402
    ATTRIBUTION,
    DETECTION,
    DETECTORS,
    RULES,
    TARGET_GROUPS,
    TARGETS,
    clean,
    confusion,
    judge,
    overall,
    per_fault,
    problems_of,
    rule_right,
    scopes,
    score_row,
    score_rows,
    scored,
    summarise,
    targets,
    unsupported,
)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                        help="the generators' output: <root>/{sb3,cleanrl,trl,trl-harness,trl_ppo}/labels.json")
    parser.add_argument("--jobs", type=int, default=2, help="logs diagnosed at once")
    parser.add_argument("--tensorboard", choices=["subset", "all", "none"], default="subset")
    parser.add_argument("--catalogue", type=Path, default=DEFAULT_CATALOGUE,
                        help="the catalogue directory holding model/diagnosis.joblib, passed to every diagnose call")
    parser.add_argument("--limit", type=int, default=None, help="diagnose only the first N logs per framework")
    parser.add_argument("--previous", default="main", help=f"the git revision whose {PUBLISHED} is compared with")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "realworld")
    parser.add_argument("--cache", type=Path, default=None,
                        help="a JSON-lines file of answers to reuse and extend (same harness/faults code and catalogue only)")
    parser.add_argument("--from-json", action="store_true",
                        help="summarise the diagnoses stored in <out>.json again, without diagnosing (a new table)")
    args = parser.parse_args(argv)
    if args.from_json:
        stored = json.loads(args.out.with_suffix(".json").read_text())
        if not stored.get("logs") or "diagnosis" not in stored["logs"][0]:
            raise SystemExit(f"{args.out.with_suffix('.json')} holds no per-log diagnoses and baselines of this "
                             "evaluate.py (an older format): run it without --from-json")
        meta = stored["meta"]
        opening = NOT_TUNED.split(":", 1)[0]
        if meta.get("not_tuned", "").startswith(opening):      # the test set's own account, as it reads now
            meta["not_tuned"] = NOT_TUNED
        meta["summarised"] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": git_commit()}
        for r in stored["logs"]:                                      # LOG_LIMITS as it is now
            r["can_show"] = can_show(r["framework"], r["fault"], r.get("group"))
        summary = summarise(stored["logs"], meta.get("previous"))
        print(write(args.out, summary, meta, stored["logs"]))
        return
    out_json = args.out.with_suffix(".json").resolve()
    published = out_json.relative_to(REPO).as_posix() if out_json.is_relative_to(REPO) else ""
    previous = previous_figures(args.previous, published) if published else None   # before anything is overwritten
    todo = tasks(args.root, args.tensorboard, args.limit)
    if not todo:
        raise SystemExit(f"no labels.json of {', '.join(EXPECTED)} under {args.root}: run the generators first")
    known = known_faults()
    catalogue = args.catalogue.resolve() if args.catalogue.exists() else args.catalogue
    start = time.perf_counter()
    answers = run_all(todo, catalogue, args.jobs, progress=lambda line: print(line, file=sys.stderr, flush=True),
                      cache=args.cache)
    wall = time.perf_counter() - start
    # rounded as stored, so that --from-json gives the same tables
    records = clean([record(t, d, b, known) for t, (d, b) in zip(todo, answers)])
    summary = summarise(records, previous)
    frameworks = Counter(r["framework"] for r in records)
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
            "catalogue": relative(Path(catalogue)), "root": str(args.root), "limit": args.limit,
            "tensorboard": args.tensorboard, "runs": len({(r["framework"], r["name"]) for r in records}),
            "logs": len(records), "frameworks": dict(frameworks), "wall_s": round(wall, 1), "versions": versions(),
            "cleanrl_commits": sorted({t["label"]["cleanrl_commit"][:12] for t in todo
                                       if t["label"].get("cleanrl_commit")}),
            "known": sorted(known), "fault_names": FAULTS, "log_limits": {f"{k[0]}/{k[1]}": v for k, v in
                                                                          LOG_LIMITS.items()},
            "skipped": skipped_dirs(args.root), "not_tuned": not_tuned(args.root), "previous": previous}
    print(write(args.out, summary, meta, records))


# what other scripts and the tests import from here, as before the evaluation was split by job
__all__ = [
    "ATTRIBUTION", "DEFAULT_CATALOGUE", "DEFAULT_ROOT", "DETECTION", "DETECTORS", "DIAGNOSIS_FIELDS", "ERROR", "EXPECTED",
    "FAULTS", "HEALTHY", "LIMITS_AS", "LOG_LIMITS", "NOT_TUNED", "POSTHOC", "PRIMARY_KIND", "PUBLISHED", "REPO", "RULES",
    "SETTINGS", "TARGETS", "TARGET_GROUPS", "algo_knows", "baselines", "cached_answers", "can_show", "changes", "clean",
    "code_version", "confusion", "diagnose", "fault_label", "git_commit", "group_of", "groups_of", "judge", "known_faults",
    "limit_of", "main", "not_tuned", "num", "overall", "parse_answer", "pct", "per_fault", "previous_figures",
    "problems_of", "record", "relative", "render", "rule_right", "run_all", "score_row", "score_rows", "scopes", "scored",
    "skipped_dirs", "summarise", "targets", "tasks", "tensorboard_subset", "unsupported", "versions", "write",
]


if __name__ == "__main__":
    main()

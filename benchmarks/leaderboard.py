"""The public monitors people install, scored on the same real-framework logs as the diagnosis, the rule sets
and the two trivial baselines: one table and one picture.

    python benchmarks/leaderboard.py [--realworld benchmarks/results/realworld.json] [--jobs 2] [--record]

The logs are those of benchmarks/realworld (stable-baselines3, CleanRL and TRL runs, healthy and with bugs
made as their users make them), as ``--realworld`` lists them: the primary log of each run, with the
diagnosis's answer and the rule sets' verdicts recorded there (``python benchmarks/realworld/evaluate.py``
writes it; its commit is the diagnosis's). Each public monitor (harness.detection.public: rldoctor,
runmedic, rlprobe, zen, unmodified, at the pinned versions of the ``[monitors]`` extra) is run here on the
same files. Per framework and detector: the logs it reads; on healthy logs, the share it leaves without an
alarm; on faulty logs, the share it alarms on, names the fault (top-1) and names the fault's class
(class-level: the cause it gives maps to a class holding the fault, :data:`CAUSE_CLASSES`). A log a tool
cannot read counts as no alarm (what its user gets), and the read column says how many it read.
``--record`` writes benchmarks/results/leaderboard.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: a public tool's cause -> the fault classes (harness.analysis.invariants.CLASSES) it points to; a cause
#: absent here names no class (a length, plateau or loss-curve finding says nothing of which bug)
CAUSE_CLASSES: dict[tuple[str, str], tuple[str, ...]] = {
    ("rldoctor", "gradient_pathology"): ("non-finite", "no learning signal"),
    ("rldoctor", "entropy_collapse"): ("deterministic policy",),
    ("rldoctor", "kl_drift"): ("outside the trust region",),
    ("rldoctor", "clip_saturation"): ("outside the trust region",),
    ("rldoctor", "advantage_collapse"): ("no learning signal",),
    ("runmedic", "non_finite"): ("non-finite",),
    ("rlprobe", "GRAD_PATHOLOGY"): ("non-finite",),
    ("rlprobe", "ENTROPY_COLLAPSE"): ("deterministic policy",),
    ("rlprobe", "KL_BLOWUP"): ("outside the trust region",),
    ("rlprobe", "CLIP_SATURATION"): ("outside the trust region",),
    ("rlprobe", "DEGENERATE_GROUPS"): ("no learning signal",),
    ("rlprobe", "ADV_COLLAPSE"): ("no learning signal",),
    ("rlprobe", "REWARD_STD_DEATH"): ("no learning signal",),
    ("zen", "LR_TOO_HIGH"): ("outside the trust region",),
    ("zen", "POLICY_COLLAPSE"): ("deterministic policy",),
}
PUBLIC = ("rldoctor", "runmedic", "rlprobe", "zen")
RULES = ("folk", "config_aware", "ptt")
DETECTORS = ("diagnose", *RULES, *PUBLIC, "always-healthy", "flag-everything")
#: realworld frameworks -> the dialect the public adapters are given
DIALECT = {"sb3": "sb3", "cleanrl": "cleanrl", "trl": "trl", "trl_ppo": "trl_ppo"}


def in_class(fault: str, classes: tuple[str, ...]) -> bool:
    from harness.analysis.invariants import CLASSES

    return any(fault in CLASSES[c].candidates for c in classes if c in CLASSES)


def classes_of(fault: str) -> tuple[str, ...]:
    from harness.analysis.invariants import CLASSES

    return tuple(name for name, c in CLASSES.items() if fault in c.candidates)


def public_verdicts(log: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every public tool on one log (a process of its own under joblib)."""
    from harness.detection.public import run_tool

    out = {}
    for tool in PUBLIC:
        start = time.perf_counter()
        v = run_tool(tool, Path(log["path"]), DIALECT[log["framework"]])
        out[tool] = {"read": v.read, "reason": v.reason, "alarm": v.alarm, "first_step": v.first_step,
                     "causes": list(v.causes), "raw": v.raw, "wall_s": round(time.perf_counter() - start, 2)}
    return out


def outcome(log: dict[str, Any], detector: str) -> dict[str, Any]:
    """Read / alarm / top-1 / class-level of one detector on one log."""
    fault = log["fault"]
    if detector == "always-healthy":
        return {"read": True, "alarm": False, "top1": False, "class": False}
    if detector == "flag-everything":
        return {"read": True, "alarm": True, "top1": False, "class": False}
    if detector == "diagnose":
        d = log["diagnosis"]
        named = tuple(d.get("class") or ([d["answer"]] if d["kind"] == "fault" else []))
        alarm = d["answer"] not in ("healthy", "too_short")
        return {"read": True, "alarm": alarm, "top1": d["answer"] == fault,
                "class": fault in named or (d["answer"] == fault)}
    if detector in RULES:
        b = log["baselines"][detector]
        named = b.get("fault")
        return {"read": True, "alarm": bool(b["alarmed"]), "top1": named == fault,
                "class": bool(named) and (named == fault or in_class(fault, classes_of(named)))}
    v = log["public"][detector]
    classes = tuple(c for cause in v["causes"] for c in CAUSE_CLASSES.get((detector, cause), ()))
    return {"read": v["read"], "alarm": v["alarm"], "top1": False, "class": v["alarm"] and in_class(fault, classes)}


def share(outcomes: list[dict[str, Any]], key: str) -> float | None:
    return sum(o[key] for o in outcomes) / len(outcomes) if outcomes else None


def table(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per framework (and all) and detector: logs read, healthy without alarm, faulty alarmed / top-1 / class."""
    by = defaultdict(list)
    for log in logs:
        by[log["framework"]].append(log)
        by["all"].append(log)
    rows = []
    for group, members in sorted(by.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        healthy = [m for m in members if m["fault"] == "healthy"]
        faulty = [m for m in members if m["fault"] != "healthy"]
        for det in DETECTORS:
            oh = [outcome(m, det) for m in healthy]
            of = [outcome(m, det) for m in faulty]
            rows.append({"framework": group, "detector": det, "logs": len(members),
                         "read": sum(o["read"] for o in oh + of) / max(1, len(members)),
                         "healthy": len(healthy), "healthy_quiet": None if not oh else 1 - share(oh, "alarm"),
                         "faulty": len(faulty), "detected": share(of, "alarm"), "top1": share(of, "top1"),
                         "class_level": share(of, "class")})
    return rows


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = ["# The leaderboard: every detector on the same real-framework logs", "",
             f"Generated by `{meta['command']}` on {meta['date']} (harness commit `{meta['commit']}`; the "
             f"diagnosis's and the rule sets' answers from {meta['realworld']}, commit `{meta['realworld_commit']}`), "
             f"{meta['n_logs']} logs, public tools at {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}.",
             "", "A log a tool cannot read gives its user no alarm: it counts as quiet, and `read` says how many it "
             "read. Healthy: the share of healthy logs with no alarm. Faulty: the share alarmed; top-1: the fault "
             "named; class-level: the cause given maps to a class of faults holding it (benchmarks/leaderboard.py "
             "CAUSE_CLASSES; the public tools name no fault of this registry, so their top-1 is 0). Top-1 and "
             "class-level count every faulty log, including faults a framework's log cannot show (realworld.md "
             "also scores those apart). The diagnosis's figures carry realworld.md's disclosures (changes made "
             "knowing some of these answers); the public tools ran at their defaults, nothing tuned.", "",
             "![detection against false alarms per framework](leaderboard.png)", "",
             "| framework | detector | read | healthy: n | quiet | faulty: n | alarmed | top-1 | class-level |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['framework']} | {r['detector']} | {_pct(r['read'])} | {r['healthy']} | "
                     f"{_pct(r['healthy_quiet'])} | {r['faulty']} | {_pct(r['detected'])} | {_pct(r['top1'])} | "
                     f"{_pct(r['class_level'])} |")
    lines += ["", "## What each public tool could not read", ""]
    for tool, reasons in meta["unread"].items():
        for reason, n in reasons.items():
            lines.append(f"- {tool}: {n} logs: {reason}")
    lines += ["", "## Causes each public tool gave (alarming findings, on any log)", ""]
    for tool, causes in meta["causes"].items():
        lines.append(f"- {tool}: " + (", ".join(f"{c} ({n})" for c, n in causes.items()) or "none"))
    return "\n".join(lines) + "\n"


def picture(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({r["framework"] for r in rows}, key=lambda g: (g == "all", g))
    fig, axes = plt.subplots(1, len(groups), figsize=(3.4 * len(groups), 3.6), sharey=True, squeeze=False)
    markers = dict(zip(DETECTORS, "o^svD<>ph*x"))
    for ax, group in zip(axes[0], groups):
        for r in (r for r in rows if r["framework"] == group and r["detected"] is not None):
            false = 1 - r["healthy_quiet"] if r["healthy_quiet"] is not None else float("nan")
            ax.scatter(false, r["detected"], marker=markers[r["detector"]], s=45, label=r["detector"])
        ax.set_title(group, fontsize=10)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("healthy logs alarmed", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("faulty logs alarmed", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(DETECTORS), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    from joblib import Parallel, delayed

    from harness.detection.public import PACKAGES, installed

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--realworld", type=Path, default=ROOT / "benchmarks" / "results" / "realworld.json")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="at most this many logs (a quick look)")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    missing = [t for t in PUBLIC if installed(PACKAGES[t]) is None]
    if missing:
        raise SystemExit(f"error: {', '.join(missing)} not installed: pip install -e '.[monitors]'")
    source = json.loads(args.realworld.read_text())
    logs = [log for log in source["logs"] if log.get("log") == "primary" and log.get("framework") in DIALECT
            and log.get("diagnosis") and Path(log["path"]).exists()]
    logs = logs[: args.limit] if args.limit else logs
    start = time.perf_counter()
    verdicts = Parallel(n_jobs=args.jobs)(delayed(public_verdicts)(log) for log in logs)
    for log, v in zip(logs, verdicts):
        log["public"] = v
    rows = table(logs)
    unread: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    causes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for log in logs:
        for tool, v in log["public"].items():
            if not v["read"]:
                unread[tool][f"{log['framework']}: {v['reason']}"] += 1
            for c in v["causes"]:
                causes[tool][c] += 1
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    meta = {"command": "python benchmarks/leaderboard.py" + (f" --realworld {args.realworld}" if args.realworld !=
                                                              parser.get_default("realworld") else "") + " --record",
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "commit": commit,
            "realworld": args.realworld.name, "realworld_commit": source["meta"].get("commit", "?"),
            "n_logs": len(logs), "seconds": round(time.perf_counter() - start),
            "versions": {PACKAGES[t]: installed(PACKAGES[t]) for t in PUBLIC},
            "unread": {t: dict(r) for t, r in unread.items()}, "causes": {t: dict(c) for t, c in causes.items()}}
    text = markdown(meta, rows)
    print(text)
    if args.record:
        out = ROOT / "benchmarks" / "results"
        (out / "leaderboard.md").write_text(text)
        (out / "leaderboard.json").write_text(json.dumps(
            {"meta": meta, "rows": rows, "logs": [{k: log[k] for k in ("path", "framework", "fault", "public")}
                                                  for log in logs]}, indent=1, default=str) + "\n")
        picture(rows, out / "leaderboard.png")


if __name__ == "__main__":
    main()

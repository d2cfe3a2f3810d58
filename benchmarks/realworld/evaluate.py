"""How ``python -m harness.diagnose`` does on real frameworks' logs: top-1 accuracy per framework and fault.

    python benchmarks/realworld/evaluate.py [--root results/realworld] [--jobs 2] [--tensorboard subset|all|none]

Reads the label files written by sb3_runs.py, trl_runs.py and trl_backend_logs.py
(``<root>/<framework>/labels.json``),
runs ``python -m harness.diagnose log=<path> format=json`` on every log as a user would (a
subprocess, no profile given: the dialect is auto-detected) — SB3's ``progress.csv`` and TRL's
last ``checkpoint-*/trainer_state.json``, plus the TensorBoard run directory of a subset (SB3 on
CartPole-v1 and Pendulum-v1, TRL seeds 0 and 1) — and writes ``benchmarks/results/realworld.md``
and ``.json``: per framework, log kind and fault, the number of logs and the top-1 accuracy (the
answer equals the true fault; for healthy logs, ``healthy``), the healthy runs' false-alarm rate
(any answer but ``healthy``, ``unknown`` included), overall top-1 on the faults the harness knows,
the healthy-called-healthy rate, what each fault was mistaken for, and every diagnose failure or
misread (a traceback, an unreadable log, a dialect or algorithm other than the framework's).

**A test set.** Never tune the diagnosis' thresholds, features or model to these logs; other real
logs nobody here produced will judge the result too.
"""

from __future__ import annotations

# ---- the ONE name table: how each bug variant of sb3_runs.py / trl_runs.py is called in the harness's
# fault catalogue (issues 13, 14, 15). Rename here only; labels.json's "fault" is re-derived from it.
FAULTS: dict[str, str] = {
    "healthy": "healthy",
    "lr_high": "excessive_lr",
    "clip_tiny": "tiny_clip",
    "lr_low": "lr_too_low",
    "ent_neg": "entropy_sign_flip",
    "gradclip_tiny": "grad_clip_tiny",
    "targetkl_tiny": "target_kl_too_strict",
    "vf_huge": "vf_coef_too_large",
    "gamma_off": "wrong_gamma",
    "reward_zero": "zero_reward",
    "reward_neg": "reward_sign_flip",
    "reward_x1000": "reward_scale_wrong",
    "trunc_as_term": "truncation_as_termination",
    "vecnorm_frozen": "obs_norm_frozen",
    "one_epoch": "ppo_epochs_ignored",
    "old_logp_recomputed": "shared_policy",
    "format_regex": "format_reward_never_matches",
    "beta_neg": "kl_penalty_sign_flip",
    "ref_is_policy": "reference_not_frozen",
}

# What a framework's logs can and cannot show of a fault (decided from what the framework logs, before
# looking at any diagnosis): the metric it does not log.
LOG_LIMITS: dict[tuple[str, str], str] = {
    ("sb3", "obs_norm_frozen"): "cannot reveal: SB3 logs no observation statistics and the saved model does not hold "
                                "the VecNormalize wrapper; only a slower learning curve could hint at it",
    ("sb3", "truncation_as_termination"): "cannot reveal: SB3 logs no count of terminated vs truncated episodes and "
                                          "no value targets; only the value loss / explained variance move, indirectly",
    ("sb3", "zero_reward"): "half: rollout/ep_rew_mean is Monitor's return; with the wrapper outside Monitor it is "
                            "the env's true return and the learner's zero reward shows only through train/value_loss "
                            "and train/explained_variance",
    ("sb3", "reward_sign_flip"): "half: outside Monitor, ep_rew_mean is the env's return (the flip shows as a "
                                 "falling return, value loss only); inside, the logged returns are negated",
    ("sb3", "reward_scale_wrong"): "half: outside Monitor, ep_rew_mean is the env's return; the x1000 shows only "
                                   "in train/value_loss",
    ("sb3", "grad_clip_tiny"): "partly: SB3 logs no gradient norm; max_grad_norm is in the saved model, the effect "
                               "shows as small approx_kl / clip_fraction",
    ("sb3", "ppo_epochs_ignored"): "partly: no optimizer-step count; train/n_updates grows by 1 per rollout while "
                                   "the saved model says n_epochs=10",
    ("trl", "shared_policy"): "partly: TRL logs no ratio statistics, only clip_ratio/*; a ratio pinned at 1 logs clip "
                              "ratios of exactly 0, as every healthy num_iterations=1 run does; num_iterations=2 is "
                              "in training_args.bin / the TensorBoard 'args' text",
    ("trl", "ppo_epochs_ignored"): "partly: TRL logs no optimizer-step or iteration count; the trace is the cadence "
                                   "(a generation, hence reward rows, every step) against num_iterations=2 in the args",
    ("trl", "reference_not_frozen"): "partly: kl is logged only when beta != 0; with the reference = the policy it is "
                                     "exactly 0 at num_iterations=1",
    ("trl", "kl_penalty_sign_flip"): "partly: a negative beta is in the args when set in GRPOConfig; flipped in code, "
                                     "only a kl growing faster than at the configured beta shows",
}

import argparse  # noqa: E402 - the tables above are what other scripts import; keep them first
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {"sb3": {"profile": "sb3", "algo": "ppo"}, "trl": {"profile": "trl", "algo": "grpo"},
            # TRL's own trainer_state.json of the harness's backend=trl runs (trl_backend_logs.py)
            "trl-harness": {"profile": "trl", "algo": "grpo"}}
ANSWERS = ("healthy", "unknown")


def tensorboard_subset(label: dict[str, Any]) -> bool:
    """The logs also diagnosed from their TensorBoard run (fixed before looking at any answer)."""
    if label["framework"] == "sb3":
        return label["env"] in ("CartPole-v1", "Pendulum-v1")
    return label["seed"] in (0, 1)


def tasks(root: Path, tensorboard: str) -> list[dict[str, Any]]:
    """One task per log to diagnose: {path, kind, label}; the fault re-derived from FAULTS."""
    out = []
    for labels_file in sorted(root.glob("*/labels.json")):
        for rel, label in json.loads(labels_file.read_text()).items():
            # backend=trl runs are labelled with the harness's own names (trl_backend_logs.py)
            harness_named = label.get("origin") == "harness backend=trl"
            label = {**label, "fault": label["fault"] if harness_named else FAULTS[label["variant"]]}
            base = labels_file.parent
            out.append({"path": base / rel, "kind": Path(rel).name, "label": label})
            if label.get("tensorboard") and (tensorboard == "all" or (tensorboard == "subset"
                                                                      and tensorboard_subset(label))):
                out.append({"path": base / label["tensorboard"], "kind": "tensorboard", "label": label})
    return out


def parse_answer(stdout: str) -> dict[str, Any]:
    """The one JSON object ``diagnose format=json`` prints: {"log", "profile", "detected", "algo", "answer",
    "ranking": [{"fault", "score", ...}, ...]}. Anything printed before it (a warning) is skipped."""
    start = stdout.find("{")
    if start < 0:
        raise ValueError("no JSON object in diagnose's output")
    obj, _ = json.JSONDecoder().raw_decode(stdout[start:])
    missing = [k for k in ("answer", "ranking", "profile", "algo") if k not in obj]
    if missing:
        raise ValueError(f"diagnose's JSON lacks {', '.join(missing)}")
    if not isinstance(obj["answer"], str) or not isinstance(obj["ranking"], list):
        raise ValueError("diagnose's JSON: answer must be a string and ranking a list")
    return obj


def diagnose(path: Path, timeout: float = 600.0) -> dict[str, Any]:
    """Run diagnose on one log as a user would; {"answer", "profile", "algo", "detected", "top", "wall_s"}
    or {"error": one line, "stderr": tail}."""
    cmd = [sys.executable, "-m", "harness.diagnose", f"log={path}", "format=json"]
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
    return {"answer": obj["answer"], "profile": obj["profile"], "algo": obj["algo"], "detected": obj.get("detected"),
            "top": [{"fault": r.get("fault"), "score": r.get("score")} for r in obj["ranking"][:3]], "wall_s": wall}


def known_faults() -> dict[str, list[str]]:
    """{fault: algos} of the harness's fault registry (the catalogue sweeps every registered fault)."""
    code = "import json; from faults import FAULTS; print(json.dumps({k: list(c.algos) for k, c in FAULTS.items()}))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"cannot read the fault registry: {proc.stderr.strip().splitlines()[-1]}")
    return {k: v for k, v in json.loads(proc.stdout).items() if k != "none"}


def rate(hits: int, n: int) -> float | None:
    return round(hits / n, 3) if n else None


def summarise(results: list[dict[str, Any]], known: dict[str, list[str]]) -> dict[str, Any]:
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        cells[(r["framework"], r["kind"], r["fault"])].append(r)
    rows = []
    for (fw, kind, fault), rs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] == "tensorboard",
                                                                        kv[0][1], kv[0][2] != "healthy", kv[0][2])):
        hits = sum(r["correct"] for r in rs)
        algo = EXPECTED[fw]["algo"]
        rows.append({"framework": fw, "log": kind, "fault": fault, "n": len(rs), "top1": rate(hits, len(rs)),
                     "false_alarm_rate": rate(len(rs) - hits, len(rs)) if fault == "healthy" else None,
                     "known": fault == "healthy" or algo in known.get(fault, []),
                     "errors": sum("error" in r for r in rs),
                     "answers": dict(Counter(r["answer"] for r in rs).most_common()),
                     "limits": LOG_LIMITS.get((fw, fault))})
    overall: dict[str, Any] = {}
    frameworks = sorted({r["framework"] for r in results})
    for scope, pick in [("all", lambda r: True),
                        *[(fw, lambda r, fw=fw: r["framework"] == fw) for fw in frameworks]]:
        for kind_scope, kpick in [("primary", lambda r: r["kind"] != "tensorboard"),
                                  ("tensorboard", lambda r: r["kind"] == "tensorboard")]:
            rs = [r for r in results if pick(r) and kpick(r)]
            if not rs:
                continue
            faulty_known = [r for r in rs if r["fault"] != "healthy" and r["known"]]
            faulty_all = [r for r in rs if r["fault"] != "healthy"]
            healthy = [r for r in rs if r["fault"] == "healthy"]
            overall[f"{scope}/{kind_scope}"] = {
                "faulty_known_n": len(faulty_known), "top1_known": rate(sum(r["correct"] for r in faulty_known),
                                                                        len(faulty_known)),
                "faulty_all_n": len(faulty_all), "top1_all": rate(sum(r["correct"] for r in faulty_all),
                                                                  len(faulty_all)),
                "healthy_n": len(healthy), "healthy_called_healthy": rate(sum(r["correct"] for r in healthy),
                                                                          len(healthy)),
                "errors": sum("error" in r for r in rs)}
    confusion: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for r in results:
        if r["kind"] == "tensorboard":
            continue
        confusion[r["framework"]].setdefault(r["fault"], Counter())[r["answer"]] += 1
    return {"rows": rows, "overall": overall,
            "confusion": {fw: {f: dict(c.most_common()) for f, c in sorted(v.items())} for fw, v in confusion.items()}}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def render(summary: dict[str, Any], meta: dict[str, Any], problems: list[dict[str, Any]]) -> str:
    ov = summary["overall"]
    lines = ["# diagnose on real frameworks' logs", "",
             f"Generated by `python benchmarks/realworld/evaluate.py` on {meta['date']} (harness commit "
             f"`{meta['commit']}`, catalogue `{meta['catalogue']}`), {meta['logs']} diagnoses of "
             f"{meta['runs']} runs in {meta['wall_s']:.0f} s. The logs are written by stable-baselines3 "
             f"{meta['versions'].get('stable_baselines3', '?')} and TRL {meta['versions'].get('trl', '?')} "
             "themselves (benchmarks/realworld/README.md says how, and how each bug is introduced). **A test set: "
             "nothing in the diagnosis may be tuned to these logs.**", "",
             "Top-1: the answer equals the true fault (for healthy logs: `healthy`). False alarm: a healthy log "
             "answered with anything else (`unknown` included). Known: the fault is in the harness's fault "
             f"registry for that algorithm ({', '.join(meta['known'])}).", "",
             "## Overall", "",
             "| framework | log | top-1, known faults | top-1, all faults | healthy called healthy | diagnose errors |",
             "|---|---|---|---|---|---|"]
    for key, o in ov.items():
        scope, kind = key.split("/")
        if not (o["faulty_all_n"] or o["healthy_n"]):
            continue
        lines.append(f"| {scope} | {kind} | {pct(o['top1_known'])} (n={o['faulty_known_n']}) | {pct(o['top1_all'])} "
                     f"(n={o['faulty_all_n']}) | {pct(o['healthy_called_healthy'])} (n={o['healthy_n']}) | "
                     f"{o['errors']} |")
    lines += ["", "## Per framework, log and fault", "",
              "| framework | log | fault | known | logs | top-1 | false alarms | answers | what the log cannot show |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in summary["rows"]:
        answers = ", ".join(f"{a} {n}" for a, n in r["answers"].items())
        lines.append(f"| {r['framework']} | {r['log']} | {r['fault']} | {'yes' if r['known'] else 'no'} | {r['n']} | "
                     f"{pct(r['top1'])} | {pct(r['false_alarm_rate'])} | {answers} | {r['limits'] or ''} |")
    lines += ["", "## Confusion (primary logs): what each fault was taken for", ""]
    for fw, per_fault in summary["confusion"].items():
        for fault, answers in per_fault.items():
            wrong = {a: n for a, n in answers.items() if a != fault}
            if wrong:
                lines.append(f"- {fw} `{fault}` -> " + ", ".join(f"`{a}` x{n}" for a, n in wrong.items()))
    lines += ["", "## Diagnose failures and misreads", ""]
    if not problems:
        lines.append("None: every log was read, with the framework's dialect and algorithm.")
    for p in problems:
        lines.append(f"- `{p['path']}` ({p['framework']}, {p['kind']}): {p['problem']}")
    return "\n".join(lines) + "\n"


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("stable_baselines3", "trl", "transformers", "torch", "gymnasium"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=REPO / "results" / "realworld")
    parser.add_argument("--jobs", type=int, default=2, help="diagnose processes at once")
    parser.add_argument("--tensorboard", choices=["subset", "all", "none"], default="subset")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "realworld")
    parser.add_argument("--from-json", action="store_true",
                        help="summarise the diagnoses stored in <out>.json again, without diagnosing (a new table)")
    args = parser.parse_args()
    if args.from_json:
        stored = json.loads(args.out.with_suffix(".json").read_text())
        summary = summarise(stored["logs"], known_faults())
        args.out.with_suffix(".json").write_text(json.dumps({"meta": stored["meta"], **summary,
                                                             "problems": stored["problems"],
                                                             "logs": stored["logs"]}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(render(summary, stored["meta"], stored["problems"]))
        print(render(summary, stored["meta"], stored["problems"]))
        return
    todo = tasks(args.root, args.tensorboard)
    if not todo:
        raise SystemExit(f"no labels.json under {args.root}: run sb3_runs.py / trl_runs.py first")
    known = known_faults()
    start = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        answers = list(pool.map(lambda t: diagnose(t["path"]), todo))
    wall = time.perf_counter() - start
    results, problems = [], []
    for t, a in zip(todo, answers):
        label = t["label"]
        fw = label["framework"]
        rel = str(t["path"].relative_to(REPO)) if t["path"].is_relative_to(REPO) else str(t["path"])
        answer = a.get("answer", "error")
        results.append({"path": rel, "kind": t["kind"], "framework": fw, "env": label["env"],
                        "variant": label["variant"], "fault": label["fault"], "how": label["how"],
                        "seed": label["seed"], "name": label["name"], "answer": answer, "correct": answer == label["fault"],
                        "known": algo_knows(label["fault"], EXPECTED[fw]["algo"], known), **a})
        if "error" in a:
            problems.append({"path": rel, "framework": fw, "kind": t["kind"], "problem": f"diagnose failed: {a['error']}",
                             "stderr": a.get("stderr", "")})
        else:
            for key in ("profile", "algo"):
                if a[key] != EXPECTED[fw][key]:
                    problems.append({"path": rel, "framework": fw, "kind": t["kind"],
                                     "problem": f"read as {key}={a[key]!r}, expected {EXPECTED[fw][key]!r}"})
    summary = summarise(results, known)
    meta = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "commit": git_commit(),
            "catalogue": "results/catalogue", "runs": len({(r["framework"], r["name"]) for r in results}),
            "logs": len(results), "wall_s": round(wall, 1), "versions": versions(), "known": sorted(known),
            "fault_names": FAULTS}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, **summary, "problems": problems,
                                                         "logs": results}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(summary, meta, problems))
    print(render(summary, meta, problems))


def algo_knows(fault: str, algo: str, known: dict[str, list[str]]) -> bool:
    return fault == "healthy" or algo in known.get(fault, [])


def git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
